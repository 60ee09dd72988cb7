"""Hugging Face transformers as the reference for Loom's import, export and generation.

  make gpt2|llama|qwen2|mistral DIR [bf16-sharded|attention-bias|gelu-exact]
                               a tiny randomly initialised model, saved with save_pretrained (safetensors);
                               bf16-sharded: in bf16, in several files with model.safetensors.index.json;
                               attention-bias: a Llama with attention_bias; gelu-exact: a GPT-2 with
                               activation_function "gelu"; mistral has a sliding window of 16
  llmc DIR OUT                 the GPT-2 model in DIR written as an llm.c model file (version 3, fp32)
  loss DIR TEXT T              mean next-token cross-entropy over the first T + 1 bytes of TEXT as token ids
  greedy DIR TEXT N            N greedily decoded token ids after the bytes of TEXT
"""
import struct
import sys

import torch
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)


def make(kind, out, variant=""):
    torch.manual_seed(1234)
    small = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64, intermediate_size=96,
                 vocab_size=256, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
    if kind == "gpt2":
        cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=256, n_positions=64, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0,
                         activation_function="gelu" if variant == "gelu-exact" else "gelu_new")
        model = GPT2LMHeadModel(cfg)
    elif kind == "qwen2":  # q, k and v have biases, nothing else does
        model = Qwen2ForCausalLM(Qwen2Config(**small))
    elif kind == "mistral":
        model = MistralForCausalLM(MistralConfig(sliding_window=16, **small))
    elif variant == "attention-bias":
        model = LlamaForCausalLM(LlamaConfig(attention_bias=True, **small))
    else:
        cfg = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                          intermediate_size=96, vocab_size=256, max_position_embeddings=64, rope_theta=10000.0,
                          rms_norm_eps=1e-5, tie_word_embeddings=False)
        model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger weights than the default init, so every term moves the loss
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(3.0)
    if variant == "bf16-sharded":
        model = model.to(torch.bfloat16)
        model.save_pretrained(out, safe_serialization=True, max_shard_size="100KB")
    else:
        model.save_pretrained(out, safe_serialization=True)


def llmc(src, out):
    model = GPT2LMHeadModel.from_pretrained(src)
    c, sd = model.config, model.state_dict()
    L, C, V = c.n_layer, c.n_embd, c.vocab_size
    Vp = (V + 127) // 128 * 128
    header = [20240326, 3, c.n_positions, V, L, c.n_head, C, Vp] + [0] * 248
    wte = torch.zeros(Vp, C)
    wte[:V] = sd["transformer.wte.weight"]
    per_layer = lambda name, t=False: torch.stack(
        [(sd["transformer.h.%d.%s" % (i, name)].t() if t else sd["transformer.h.%d.%s" % (i, name)]) for i in range(L)])
    tensors = [wte, sd["transformer.wpe.weight"], per_layer("ln_1.weight"), per_layer("ln_1.bias"),
               per_layer("attn.c_attn.weight", True), per_layer("attn.c_attn.bias"),
               per_layer("attn.c_proj.weight", True), per_layer("attn.c_proj.bias"), per_layer("ln_2.weight"),
               per_layer("ln_2.bias"), per_layer("mlp.c_fc.weight", True), per_layer("mlp.c_fc.bias"),
               per_layer("mlp.c_proj.weight", True), per_layer("mlp.c_proj.bias"), sd["transformer.ln_f.weight"],
               sd["transformer.ln_f.bias"]]
    with open(out, "wb") as f:
        f.write(struct.pack("256i", *header))
        for t in tensors:
            f.write(t.contiguous().float().numpy().tobytes())


def ids_of(path):
    with open(path, "rb") as f:
        return list(f.read())


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "")
    elif cmd == "llmc":
        llmc(sys.argv[2], sys.argv[3])
    elif cmd == "loss":
        model = AutoModelForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32).eval()
        ids = torch.tensor([ids_of(sys.argv[3])[:int(sys.argv[4]) + 1]])
        with torch.no_grad():
            logits = model(ids[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits[0], ids[0, 1:])
        print("%.9g" % loss.item())
    elif cmd == "greedy":
        model = AutoModelForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32).eval()
        ids = torch.tensor([ids_of(sys.argv[3])])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=int(sys.argv[4]), do_sample=False, pad_token_id=0)
        print(" ".join(str(t) for t in out[0, ids.shape[1]:].tolist()))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
