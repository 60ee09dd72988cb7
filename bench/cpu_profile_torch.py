"""PyTorch eager's side of bench/cpu_profile.sh: one fp32 training step of GPT-2 (transformers'
GPT2LMHeadModel with the tanh GELU, no dropout, its default attention: PyTorch's fused SDPA), forward, backward, the gradient norm and AdamW,
on random tokens, timed without the profiler, then once more under torch.profiler with each
aten op's self time put in the family bench/op_profile.hpp puts Loom's ops in.

  cpu_profile_torch.py LAYERS D HEADS T BATCH VOCAB THREADS STEPS

prints `key value` lines: step_ms and best_ms (no profiler), then per family the milliseconds
per step under the profiler, and framework: the profiled step's time outside every aten op
(Python, the autograd engine, the profiler's own cost).
"""
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

# aten ops by family; any other aten op is element-wise work or a copy. Linear layers are
# addmm/mm; attention is PyTorch's fused CPU flash attention (scaled_dot_product_attention, which
# transformers uses by default), or bmm and softmax where it falls back to the eager form.
FAMILIES = {
    "gemm": {"aten::mm", "aten::addmm", "aten::addmv", "aten::dot"},
    "attention": {"aten::bmm", "aten::_softmax", "aten::_softmax_backward_data", "aten::where", "aten::masked_fill"},
    "norms": {"aten::native_layer_norm", "aten::native_layer_norm_backward"},
    "activation": {"aten::gelu", "aten::gelu_backward"},
    "embedding": {"aten::embedding", "aten::embedding_backward", "aten::embedding_dense_backward",
                  "aten::index_select"},
    "loss": {"aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
             "aten::nll_loss_backward"},
}
ORDER = ["gemm", "attention", "norms", "activation", "embedding", "loss", "optimizer", "elementwise+copies"]


def family(event):
    e = event
    while e is not None:  # the optimizer's scope claims everything under it
        if e.name == "optimizer":
            return "optimizer"
        e = e.cpu_parent
    if "scaled_dot_product" in event.name:
        return "attention"
    for name, ops in FAMILIES.items():
        if event.name in ops:
            return name
    return "elementwise+copies" if event.name.startswith("aten::") else None


def main():
    layers, d, heads, T, batch, vocab, threads, steps = (int(x) for x in sys.argv[1:9])
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    cfg = GPT2Config(n_layer=layers, n_head=heads, n_embd=d, n_positions=T, vocab_size=vocab, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_pytorch_tanh")
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    tokens = torch.randint(0, vocab, (batch, T))

    def step():
        opt.zero_grad(set_to_none=False)
        model(tokens, labels=tokens).loss.backward()
        with torch.profiler.record_function("optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
            opt.step()

    step()  # warm-up
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(f"step_ms {1e3 * sum(times) / len(times):.3f}\nbest_ms {1e3 * min(times):.3f}")

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - t0) / steps
    ms = dict.fromkeys(ORDER, 0.0)
    for e in prof.events():
        f = family(e)
        if f is not None and (f != "optimizer" or e.name.startswith("aten::")):
            ms[f] += e.self_cpu_time_total / 1e3 / steps
    for f in ORDER:
        print(f"{f} {ms[f]:.3f}")
    print(f"framework {1e3 * wall - sum(ms.values()):.3f}")


if __name__ == "__main__":
    main()
