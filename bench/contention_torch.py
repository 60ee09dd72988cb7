"""PyTorch's step on the demo model, the baseline bench/contention.sh compares Loom's slowdown with.

  contention_torch.py STEPS THREADS   prints the median step time in ms over STEPS steps (after 3
                                      warm-up steps) of GPT-2 shaped like configs/demo.toml
                                      (4 layers, 4 heads, d_model 128, seq_len 128, vocab 1024),
                                      batch 16, forward + backward + AdamW, fp32, no dropout.
"""
import statistics
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    steps, threads = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    cfg = GPT2Config(n_layer=4, n_head=4, n_embd=128, n_positions=128, vocab_size=1024, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)
    tokens = torch.randint(0, 1024, (16, 129))
    times = []
    for step in range(steps + 3):
        t0 = time.perf_counter()
        out = model(tokens[:, :-1], labels=tokens[:, :-1])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    # The median step, then the slowest over the median (how steady the steps were).
    print(f"{statistics.median(times):.1f} {max(times) / statistics.median(times):.2f}")


if __name__ == "__main__":
    main()
