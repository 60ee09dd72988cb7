"""Hugging Face transformers as the reference for Loom's import, export and generation.

  make gpt2|llama|qwen2|mistral DIR [VARIANT,...]
                               a tiny randomly initialised model, saved with save_pretrained (safetensors);
                               variants are listed in make(); mistral has a sliding window of 48 unless no-window
  llmc DIR OUT                 the GPT-2 model in DIR written as an llm.c model file (version 3, fp32)
  loss DIR TEXT T              mean next-token cross-entropy over the first T + 1 bytes of TEXT as token ids
  greedy DIR TEXT N            N greedily decoded token ids after the bytes of TEXT
  reference DIR TEXT P...      JSON: per-token losses of TEXT's bytes, 32 greedy ids after each prompt's bytes
  reference-text DIR TEXT P    JSON: the same through the folder's tokenizer (ids, losses, greedy text)
  windows DIR TEXT T           mean loss over the side-by-side windows of T + 1 bytes of TEXT
  logits DIR TEXT N FILE       the largest |difference| between FILE's logits [N, V] and transformers' for TEXT
"""
import json
import struct
import sys

import torch
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)


def make(kind, out, variants=""):
    """variants, comma-separated: bf16 | fp16 (saved in that dtype), sharded (several files and an index),
    attention-bias, mlp-bias, rope31 (Llama 3.1 rope scaling), rope-linear, tied, gelu-exact, no-window (Mistral),
    hidden-gelu, inverse-layer-scale (GPT-2), tokenizer (a BPE tokenizer.json with a BOS template, vocab 320)."""
    v = set(variants.replace("bf16-sharded", "bf16,sharded").split(",")) - {""}
    torch.manual_seed(1234)
    vocab = 320 if "tokenizer" in v else 256
    small = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64, intermediate_size=96,
                 vocab_size=vocab, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5,
                 tie_word_embeddings="tied" in v, attention_bias="attention-bias" in v, mlp_bias="mlp-bias" in v,
                 hidden_act="gelu" if "hidden-gelu" in v else "silu")
    if "rope31" in v:
        small["rope_scaling"] = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=16)
    if "rope-linear" in v:
        small["rope_scaling"] = dict(rope_type="linear", factor=2.0)
    if "tokenizer" in v:
        bos, eos = save_tokenizer(out, vocab - 16)
        small.update(bos_token_id=bos, eos_token_id=eos)
    if kind == "gpt2":
        cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=256, n_positions=64, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, scale_attn_by_inverse_layer_idx="inverse-layer-scale" in v,
                         activation_function="gelu" if "gelu-exact" in v else "gelu_new")
        model = GPT2LMHeadModel(cfg)
    elif kind == "qwen2":  # q, k and v have biases, nothing else does
        small.pop("attention_bias"), small.pop("mlp_bias")
        model = Qwen2ForCausalLM(Qwen2Config(**small))
    elif kind == "mistral":
        small.pop("attention_bias"), small.pop("mlp_bias")
        model = MistralForCausalLM(MistralConfig(sliding_window=None if "no-window" in v else 48, **small))
    else:
        model = LlamaForCausalLM(LlamaConfig(**small))
    with torch.no_grad():  # larger weights than the default init, and every norm and bias moved off 1 and 0,
        for p in model.parameters():  # so every term moves the loss and a dropped tensor shows
            if p.dim() > 1:
                p.mul_(3.0)
            else:
                p.add_(0.2 * torch.randn_like(p))
    if "bf16" in v:
        model = model.to(torch.bfloat16)
    if "fp16" in v:
        model = model.to(torch.float16)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="100KB" if "sharded" in v else "5GB")


def save_tokenizer(out, bpe_vocab):
    """A byte-level BPE trained by the library, <|begin_of_text|> and <|end_of_text|> after it, and Llama 3's
    post-processor that puts <|begin_of_text|> before every text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=bpe_vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator([TEXT] * 4, trainer)
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
                            clean_up_tokenization_spaces=False).save_pretrained(out)
    return bos, tok.token_to_id("<|end_of_text|>")


TEXT = "the quick brown fox jumps over the lazy dog; 12 foxes, 34 dogs.\n" * 3


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


def token_losses(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0]
    return torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none").tolist()


def greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    out = out[0, len(prompt):].tolist()
    eos = model.generation_config.eos_token_id
    if out and out[-1] in (eos if isinstance(eos, list) else [eos]):
        out = out[:-1]  # transformers keeps the eos token; the text ends before it
    return out


def raw_bytes(tok, ids):
    """The bytes of the tokens (the byte-level alphabet undone), without transformers' lossy UTF-8 decoding."""
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
    byte_of = {ch: b for b, ch in bytes_to_unicode().items()}
    return b"".join(bytes(byte_of[ch] for ch in t) for t in tok.convert_ids_to_tokens(ids))


def printable(raw):
    """What loom generate prints: control bytes other than newline as '.'."""
    return bytes(b if b == 10 or (b >= 0x20 and b != 0x7F) else ord(".") for b in raw)


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
    elif cmd == "reference":  # DIR TEXT P1 P2 P3: per-token losses of TEXT's bytes, greedy ids after each prompt
        model = AutoModelForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32).eval()
        print(json.dumps({"losses": token_losses(model, ids_of(sys.argv[3])),
                          "greedy": [greedy(model, [ord(c) for c in p], 32) for p in sys.argv[4:]]}))
    elif cmd == "reference-text":  # DIR TEXT PROMPT: the same through the folder's tokenizer, as tokenizer(text) encodes
        from transformers import AutoTokenizer
        model = AutoModelForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(sys.argv[2])
        with open(sys.argv[3]) as f:
            ids = tok(f.read())["input_ids"]
        prompt = tok(sys.argv[4])["input_ids"]
        out = greedy(model, prompt, 32)
        print(json.dumps({"ids": ids, "losses": token_losses(model, ids), "prompt_ids": prompt, "greedy_ids": out,
                          "greedy_hex": printable(raw_bytes(tok, out)).hex()}))
    elif cmd == "windows":  # DIR TEXT T: mean loss over the windows [iT, iT + T] of TEXT's bytes, side by side
        model = AutoModelForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32).eval()
        ids, T = ids_of(sys.argv[3]), int(sys.argv[4])
        losses = [l for i in range((len(ids) - 1) // T) for l in token_losses(model, ids[i * T:i * T + T + 1])]
        print("%.9g" % (sum(losses) / len(losses)))
    elif cmd == "logits":  # DIR TEXT N FILE: the largest difference between FILE's logits and transformers'
        from safetensors.torch import load_file
        model = AutoModelForCausalLM.from_pretrained(sys.argv[2], torch_dtype=torch.float32).eval()
        n, ids = int(sys.argv[4]), ids_of(sys.argv[3])
        with torch.no_grad():
            want = model(torch.tensor([ids[:model.config.max_position_embeddings]])).logits[0, :n]
        got = load_file(sys.argv[5])["logits"]
        assert got.shape == want.shape, (got.shape, want.shape)
        print("%.9g" % (got - want).abs().max().item())
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
