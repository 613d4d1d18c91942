# PyTorch's peer of bench/attention_step.cpp: F.scaled_dot_product_attention (flash backend) forward
# + backward on head views of one fused (B, T, 3·H·hd) tensor, the backward seeded with w.
import argparse, json, time
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
for k, v in dict(batch=16, heads=12, seq=1024, hd=64, iters=20).items():
    p.add_argument(f"--{k}", type=int, default=v)
p.add_argument("--dtype", default="bf16")
p.add_argument("--causal", type=int, default=1)
a = p.parse_args()
dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
g = torch.Generator(device="cuda").manual_seed(0)
C = a.heads * a.hd
qkv = torch.randn(a.batch, a.seq, 3 * C, device="cuda", generator=g).to(dt).requires_grad_()
w = torch.randn(a.batch, a.heads, a.seq, a.hd, device="cuda", generator=g).to(dt)

def step(fwd_only):
    q, k, v = (qkv[:, :, i * C:(i + 1) * C].view(a.batch, a.seq, a.heads, a.hd).transpose(1, 2) for i in range(3))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION if dt != torch.float32
                                        else torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal))
    if not fwd_only:
        out.backward(w)
        qkv.grad = None

def time_it(fwd_only):
    for _ in range(5):
        step(fwd_only)
    torch.cuda.synchronize()
    ts = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        step(fwd_only)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2] * 1e3

fwd = time_it(True)
both = time_it(False)
flops = 4.0 * a.batch * a.heads * a.seq * a.seq * a.hd * (0.5 if a.causal else 1.0)
print(json.dumps({"impl": "torch-sdpa", "dtype": a.dtype, "B": a.batch, "H": a.heads, "T": a.seq, "hd": a.hd,
                  "causal": a.causal, "fwd_ms": round(fwd, 3), "fwd_bwd_ms": round(both, 3),
                  "fwd_tflops": round(flops / (fwd * 1e-3) / 1e12, 1)}))
