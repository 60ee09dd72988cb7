"""PyTorch's side of bench/bf16_step.sh: GPT-2 (transformers' GPT2LMHeadModel, tanh GELU, no
dropout) trained in fp32 and under CPU bf16 autocast (torch.autocast("cpu", torch.bfloat16): the
linear layers' GEMMs in bf16, master weights and optimizer in fp32), the mixed precision PyTorch
users run on a CPU.

  bf16_torch.py speed L D H T B V THREADS STEPS
      prints `fp32_ms X` and `bf16_ms Y`: the median step (forward, backward, clip, AdamW) after one
      warm-up, on random tokens, the two precisions' steps interleaved.
  bf16_torch.py track L D H T B V THREADS STEPS CORPUS
      trains both from the same initial weights on the same byte-level batches of CORPUS (random
      windows, seed 1234), with Loom's defaults (AdamW 0.9/0.95, eps 1e-8, weight decay 0.1 on
      matrices, clip 1.0, lr 2e-3, 30 warm-up steps, cosine to 0.1 lr); prints `step fp32 bf16`.
"""
import copy
import math
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def build(layers, d, heads, T, vocab):
    cfg = GPT2Config(n_layer=layers, n_head=heads, n_embd=d, n_positions=T, vocab_size=vocab,
                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, activation_function="gelu_pytorch_tanh")
    return GPT2LMHeadModel(cfg)


def optimizer(model, lr):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def step(model, opt, tokens, bf16, lr=None):
    if lr is not None:
        for g in opt.param_groups:
            g["lr"] = lr
    opt.zero_grad(set_to_none=False)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(tokens, labels=tokens).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def speed(layers, d, heads, T, batch, vocab, steps):
    torch.manual_seed(1234)
    runs = {}
    for bf16 in (False, True):
        model = build(layers, d, heads, T, vocab)
        runs[bf16] = (model, optimizer(model, 1e-4), [])
    tokens = torch.randint(0, vocab, (batch, T))
    for bf16, (model, opt, _) in runs.items():
        step(model, opt, tokens, bf16)  # warm-up
    for _ in range(steps):
        for bf16, (model, opt, times) in runs.items():
            t0 = time.perf_counter()
            step(model, opt, tokens, bf16)
            times.append(time.perf_counter() - t0)
    for bf16, (_, _, times) in runs.items():
        print(f"{'bf16' if bf16 else 'fp32'}_ms {1e3 * sorted(times)[len(times) // 2]:.3f}")


def track(layers, d, heads, T, batch, vocab, steps, corpus):
    data = torch.tensor(list(open(corpus, "rb").read()), dtype=torch.long)
    torch.manual_seed(1234)
    fp32 = build(layers, d, heads, T, vocab)
    bf16 = copy.deepcopy(fp32)
    opts = {False: optimizer(fp32, 2e-3), True: optimizer(bf16, 2e-3)}
    g = torch.Generator().manual_seed(1234)
    for s in range(1, steps + 1):
        starts = torch.randint(0, len(data) - T, (batch,), generator=g)
        tokens = torch.stack([data[i:i + T] for i in starts])
        warm = 30
        if s <= warm:
            lr = 2e-3 * s / warm
        else:
            progress = (s - warm) / max(1, steps - warm)
            lr = 2e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        a = step(fp32, opts[False], tokens, False, lr)
        b = step(bf16, opts[True], tokens, True, lr)
        print(f"{s} {a:.6f} {b:.6f}", flush=True)


def main():
    mode = sys.argv[1]
    layers, d, heads, T, batch, vocab, threads, steps = (int(x) for x in sys.argv[2:10])
    torch.set_num_threads(threads)
    if mode == "speed":
        speed(layers, d, heads, T, batch, vocab, steps)
    else:
        track(layers, d, heads, T, batch, vocab, steps, sys.argv[10])


if __name__ == "__main__":
    main()
