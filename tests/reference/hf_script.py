"""What a transformers user runs on a model folder, unmodified: AutoTokenizer, AutoModelForCausalLM,
generate and pipeline("text-generation"), greedy. Prints the two continuations of PROMPT as JSON.

  hf_script.py DIR PROMPT N
"""
import json
import sys

from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

folder, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
inputs = tokenizer(prompt, return_tensors="pt")
out = model.generate(**inputs, max_new_tokens=n, do_sample=False)
generated = tokenizer.decode(out[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True)
text = pipeline("text-generation", model=folder)(prompt, max_new_tokens=n, do_sample=False)[0]["generated_text"]
print(json.dumps({"generate": generated, "pipeline": text}))
