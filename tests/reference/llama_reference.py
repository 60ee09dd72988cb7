"""A Llama decoder in PyTorch, written from the Hugging Face LlamaForCausalLM semantics
(rotate_half RoPE with Llama 3.1 frequency scaling, repeat_kv for grouped-query attention,
RMSNorm, SwiGLU, no biases, untied head), run in float64 on the weights and tokens Loom dumped,
and compared with Loom's fp32 loss and gradients.

    llama_reference.py DIR     (DIR holds model.json, params.f32, grads.f32, tokens.i32, targets.i32)

Prints the largest differences and exits 1 when one is out of tolerance.
"""
import json
import math
import sys

import numpy as np
import torch


def rope_inv_freq(cfg):
    d = cfg["head_dim"]
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = cfg.get("rope_scaling")
    if not s:
        return inv.double()
    # Llama 3.1: keep short wavelengths, divide long ones by `factor`, blend in between.
    factor, lo, hi, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], s["original_max_position"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / hi) & (wavelen <= old / lo)
    return torch.where(medium, blended, scaled).double()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def forward(cfg, p, tokens, targets):
    B, T = tokens.shape
    H, K, D, C = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"], cfg["d_model"]
    eps = cfg["norm_eps"]
    inv = rope_inv_freq(cfg)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    x = p["wte"][tokens]
    for i in range(cfg["n_layer"]):
        h = rms_norm(x, p[f"h{i}.ln1.w"], eps)
        q = (h @ p[f"h{i}.attn.q.w"].T).view(B, T, H, D).transpose(1, 2)
        kv = h @ p[f"h{i}.attn.kv.w"].T
        k = kv[..., : K * D].reshape(B, T, K, D).transpose(1, 2)
        v = kv[..., K * D :].reshape(B, T, K, D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + y @ p[f"h{i}.attn.proj.w"].T
        h = rms_norm(x, p[f"h{i}.ln2.w"], eps)
        gate_up = h @ p[f"h{i}.mlp.fc.w"].T
        F = gate_up.shape[-1] // 2
        x = x + (torch.nn.functional.silu(gate_up[..., :F]) * gate_up[..., F:]) @ p[f"h{i}.mlp.proj.w"].T
    logits = rms_norm(x, p["ln_f.w"], eps) @ p["lm_head.w"].T
    logits = logits[..., : cfg["vocab_size"]]
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


def main(d):
    cfg = json.load(open(f"{d}/model.json"))
    flat = np.fromfile(f"{d}/params.f32", dtype=np.float32)
    flat_grad = np.fromfile(f"{d}/grads.f32", dtype=np.float32)
    B, T = cfg["B"], cfg["T"]
    tokens = torch.from_numpy(np.fromfile(f"{d}/tokens.i32", dtype=np.int32).astype(np.int64)).view(B, T)
    targets = torch.from_numpy(np.fromfile(f"{d}/targets.i32", dtype=np.int32).astype(np.int64)).view(B, T)
    params, loom_grads = {}, {}
    for name, (offset, shape) in cfg["params"].items():
        n = int(np.prod(shape))
        params[name] = torch.from_numpy(flat[offset : offset + n].astype(np.float64)).view(*shape).requires_grad_()
        loom_grads[name] = flat_grad[offset : offset + n].astype(np.float64).reshape(shape)
    loss = forward(cfg, params, tokens, targets)
    loss.backward()
    loss_rel = abs(loss.item() - cfg["loss"]) / abs(loss.item())
    print(f"loss: torch float64 {loss.item():.9f}, loom fp32 {cfg['loss']:.9f}, relative difference {loss_rel:.2e}")
    worst = ("", 0.0)
    for name, p in params.items():
        ref = p.grad.numpy()
        rel = np.abs(ref - loom_grads[name]).max() / max(np.abs(ref).max(), 1e-12)
        if rel > worst[1]:
            worst = (name, rel)
    print(f"gradients: largest difference relative to the tensor's largest entry {worst[1]:.2e} ({worst[0]})")
    ok = loss_rel < 1e-5 and worst[1] < 1e-4
    print("agree" if ok else "DISAGREE (tolerances: loss 1e-5, gradients 1e-4)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
