# PyTorch's peer of bench/attention_step.cpp: F.scaled_dot_product_attention forward + backward on
# head views of one fused (B, T, 3·H·hd) tensor, the backward seeded with w, with the flash backend
# (memory-efficient for f32) and then cuDNN's (what torch.compile picks on an H200), one line each.
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

B = torch.nn.attention.SDPBackend
backend = B.FLASH_ATTENTION if dt != torch.float32 else B.EFFICIENT_ATTENTION

def step(fwd_only):
    q, k, v = (qkv[:, :, i * C:(i + 1) * C].view(a.batch, a.seq, a.heads, a.hd).transpose(1, 2) for i in range(3))
    with torch.nn.attention.sdpa_kernel(backend):
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

flops = 4.0 * a.batch * a.heads * a.seq * a.seq * a.hd * (0.5 if a.causal else 1.0)
for impl, backend in [("torch-sdpa", backend)] + ([("torch-cudnn", B.CUDNN_ATTENTION)] if dt != torch.float32 else []):
    try:
        fwd = time_it(True)
        both = time_it(False)
    except RuntimeError as e:  # no cuDNN attention for this shape or build
        print(f"{impl}: {e}".splitlines()[0])
        continue
    print(json.dumps({"impl": impl, "dtype": a.dtype, "B": a.batch, "H": a.heads, "T": a.seq, "hd": a.hd,
                      "causal": a.causal, "fwd_ms": round(fwd, 3), "fwd_bwd_ms": round(both, 3),
                      "fwd_tflops": round(flops / (fwd * 1e-3) / 1e12, 1)}))
