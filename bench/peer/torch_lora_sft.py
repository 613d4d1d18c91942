#!/usr/bin/env python3
"""Peer baseline for LoRA supervised fine-tuning: a Qwen2-shaped model from transformers with
LoRA adapters written here (PEFT's formulation: y = W x + b + (alpha/r) B A dropout(x), A drawn
like a linear weight, B zero, base frozen), trained on packed sequences, for tokens/s and peak
memory beside `trireme train` (bench/gpu/lora_sft.sh runs both in one go).

  python3 torch_lora_sft.py make-model --out DIR [--shape qwen2-0.5b|tiny]    # random weights, seeded
  python3 torch_lora_sft.py make-data --out FILE --examples N                 # JSONL prompt/response
  python3 torch_lora_sft.py trireme-config --model DIR --data FILE --out-dir RUN --batch 8 --seq 1024 > run.toml
  python3 torch_lora_sft.py bench --model DIR --batch 8 --seq 1024 --steps 20 [--base-dtype f32|bf16]

`bench` trains the adapters of every linear layer of the blocks (q, k, v, o, gate, up, down) with
AdamW, the loss on the second half of each sequence (the response; the cost does not depend on
which tokens count), bf16 autocast, and prints one JSON object: tokens/s over the timed steps,
peak memory allocated, and the adapters' parameter count. --base-dtype f32 keeps the frozen
weights in f32 under autocast (trireme's train.precision = "bf16"); bf16 stores them in bf16.
"""
import argparse, json, math, os, random, time

SHAPES = {  # hidden, intermediate, layers, heads, kv heads, vocab
    "qwen2-0.5b": (896, 4864, 24, 14, 2, 151936),
    "tiny": (64, 96, 2, 4, 2, 512),
}
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def make_model(out, shape, tokenizer):
    import shutil, torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    d, inter, layers, heads, kv, vocab = SHAPES[shape]
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=d, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=32768,
                      rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, hidden_act="silu",
                      use_sliding_window=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(1234)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(tokenizer, os.path.join(out, "tokenizer.json"))
    print(json.dumps({"model": out, "shape": shape, "parameters": sum(p.numel() for p in model.parameters())}))


def make_data(out, examples):
    rng = random.Random(7)
    words = ["床前明月光", "疑是地上霜", "举头望明月", "低头思故乡", "春眠不觉晓", "处处闻啼鸟",
             "the quick brown fox", "jumps over", "the lazy dog", "你好", "world", "12345"]
    with open(out, "w", encoding="utf-8") as f:
        for _ in range(examples):
            prompt = " ".join(rng.choice(words) for _ in range(rng.randint(5, 20)))
            response = " ".join(rng.choice(words) for _ in range(rng.randint(20, 80)))
            f.write(json.dumps({"prompt": prompt, "response": response}, ensure_ascii=False) + "\n")


def add_lora(model, rank, alpha, dropout):
    import torch, torch.nn as nn

    class LoraLinear(nn.Module):
        def __init__(s, base):
            super().__init__()
            s.base = base
            s.A = nn.Parameter(torch.empty(rank, base.in_features, device=base.weight.device))
            s.B = nn.Parameter(torch.zeros(base.out_features, rank, device=base.weight.device))
            nn.init.uniform_(s.A, -1 / math.sqrt(base.in_features), 1 / math.sqrt(base.in_features))
            s.drop = nn.Dropout(dropout)
            s.scale = alpha / rank

        def forward(s, x):
            return s.base(x) + s.scale * nn.functional.linear(nn.functional.linear(s.drop(x), s.A), s.B)

    for p in model.parameters():
        p.requires_grad_(False)
    for name, module in list(model.named_modules()):
        for t in TARGETS:
            child = getattr(module, t, None)
            if isinstance(child, nn.Linear):
                setattr(module, t, LoraLinear(child))
    return [p for p in model.parameters() if p.requires_grad]


def bench(a):
    import torch
    from transformers import Qwen2ForCausalLM
    torch.manual_seed(0)
    dtype = torch.bfloat16 if a.base_dtype == "bf16" else torch.float32
    model = Qwen2ForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="sdpa").cuda()
    model.config.use_cache = False
    params = add_lora(model, a.rank, a.alpha, a.dropout)
    opt = torch.optim.AdamW(params, lr=2e-4, weight_decay=0.0, fused=True)
    vocab = a.token_ids
    inputs = torch.randint(0, vocab, (a.batch, a.seq), device="cuda")
    labels = inputs.clone()  # transformers shifts them: position t predicts labels[t + 1]
    labels[:, : a.seq // 2] = -100
    model.train()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=inputs, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"side": "pytorch", "base_dtype": a.base_dtype, "batch": a.batch, "seq": a.seq,
                      "steps": a.steps, "ms_per_step": 1000 * dt / a.steps,
                      "tokens_per_s": a.batch * a.seq * a.steps / dt,
                      "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "adapter_parameters": sum(p.numel() for p in params), "loss": float(loss),
                      "torch": torch.__version__}))


def trireme_config(a):
    """The same run for `trireme train --init-from DIR` (TOML on stdout), [model] from DIR/config.json."""
    c = json.load(open(os.path.join(a.model, "config.json")))
    theta = c.get("rope_theta") or c.get("rope_parameters", {}).get("rope_theta", 10000.0)
    print(f"""[model]
arch = "llama"
d_model = {c["hidden_size"]}
n_layer = {c["num_hidden_layers"]}
n_head = {c["num_attention_heads"]}
n_kv_head = {c["num_key_value_heads"]}
intermediate_size = {c["intermediate_size"]}
vocab_size = {c["vocab_size"]}
norm_eps = {c["rms_norm_eps"]}
rope_theta = {theta}
qkv_bias = true
tie_embeddings = {str(c["tie_word_embeddings"]).lower()}
block_size = {a.seq}

[finetune]
task = "sft"
train_file = "{a.data}"
val_fraction = 0.01
template = "{{prompt}}{{response}}"

[lora]
rank = {a.rank}
alpha = {a.alpha}
dropout = {a.dropout}
targets = ["all"]

[optim]
lr = 2e-4
weight_decay = 0.0
grad_clip = 1.0

[schedule]
kind = "constant"
warmup_steps = 0

[train]
steps = {a.warmup + a.steps}
batch_size = {a.batch}
device = "cuda"
precision = "bf16"
log_interval = 1
eval_interval = {10 * (a.warmup + a.steps)}
checkpoint_interval = {10 * (a.warmup + a.steps)}
out_dir = "{a.out_dir}"
""")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-model"); m.add_argument("--out", required=True)
    m.add_argument("--shape", default="qwen2-0.5b", choices=SHAPES); m.add_argument("--tokenizer", required=True)
    d = sub.add_parser("make-data"); d.add_argument("--out", required=True); d.add_argument("--examples", type=int, default=2000)
    b = sub.add_parser("bench"); b.add_argument("--model", required=True)
    b.add_argument("--base-dtype", default="f32", choices=["f32", "bf16"])
    b.add_argument("--token-ids", type=int, default=300, help="draw input ids below this (the tokenizer's vocabulary)")
    for c in (b, sub.add_parser("trireme-config")):
        c.add_argument("--warmup", type=int, default=5); c.add_argument("--steps", type=int, default=20)
        c.add_argument("--batch", type=int, default=8); c.add_argument("--seq", type=int, default=1024)
        c.add_argument("--rank", type=int, default=16); c.add_argument("--alpha", type=float, default=32)
        c.add_argument("--dropout", type=float, default=0.05)
    c.add_argument("--model", required=True); c.add_argument("--data", required=True); c.add_argument("--out-dir", required=True)
    a = p.parse_args()
    if a.cmd == "make-model":
        make_model(a.out, a.shape, a.tokenizer)
    elif a.cmd == "make-data":
        make_data(a.out, a.examples)
    elif a.cmd == "trireme-config":
        trireme_config(a)
    else:
        bench(a)


if __name__ == "__main__":
    main()
