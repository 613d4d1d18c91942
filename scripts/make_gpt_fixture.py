#!/usr/bin/python3
"""Writes tests/fixtures/gpt_parity.safetensors: a small GPT-2 built in PyTorch (float32), with
its weights under trireme's parameter names, a batch, the logits, the loss, every gradient
("grad."), the parameters after each of two AdamW steps on that batch ("step1.", "step2.") and
the gradients of the second step ("grad2."). tests/models/gpt_parity_test.cpp checks trireme
against it.

Run with Debian's PyTorch (no downloads):  /usr/bin/python3 scripts/make_gpt_fixture.py
The safetensors file is written by hand (json + struct) so the script needs only torch.
"""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(vocab_size=96, block_size=16, n_layer=2, n_head=4, d_model=48, ln_eps=1e-5)
B, T = 3, 16
ADAMW = dict(lr=1e-2, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8)
SEED = 1234


class Block(nn.Module):
    def __init__(self, d, n_head, eps):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d, eps=eps)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(d, 3 * d)
        self.attn.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=eps)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(d, 4 * d)
        self.mlp.c_proj = nn.Linear(4 * d, d)

    def attention(self, x):
        b, t, c = x.shape
        h, hd = self.n_head, c // self.n_head
        q, k, v = self.attn.c_attn(x).split(c, dim=2)  # columns q | k | v
        q, k, v = (z.view(b, t, h, hd).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        y = scores.softmax(-1) @ v
        return self.attn.c_proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(c["vocab_size"], c["d_model"])
        self.transformer.wpe = nn.Embedding(c["block_size"], c["d_model"])
        self.transformer.h = nn.ModuleList(
            Block(c["d_model"], c["n_head"], c["ln_eps"]) for _ in range(c["n_layer"]))
        self.transformer.ln_f = nn.LayerNorm(c["d_model"], eps=c["ln_eps"])

    def forward(self, ids):
        t = ids.shape[1]
        x = self.transformer.wte(ids) + self.transformer.wpe(torch.arange(t))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return x @ self.transformer.wte.weight.t()  # tied head

    def loss(self, ids, targets):
        logits = self(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), logits


def init_weights(model, n_layer):
    # GPT-2 scales, but biases and LayerNorm parameters random too so every path is exercised.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.02)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * n_layer))
            else:
                p.normal_(0.0, 0.02)


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        t = t.detach().contiguous()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    model = GPT(CONFIG)
    init_weights(model, CONFIG["n_layer"])
    ids = torch.randint(0, CONFIG["vocab_size"], (B, T))
    targets = torch.randint(0, CONFIG["vocab_size"], (B, T))

    out = [("param." + n, p.clone()) for n, p in model.named_parameters()]
    out += [("ids", ids), ("targets", targets)]

    opt = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]),
                            eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    loss, logits = model.loss(ids, targets)
    loss.backward()
    out += [("logits", logits), ("loss", loss.reshape(1))]
    out += [("grad." + n, p.grad.clone()) for n, p in model.named_parameters()]
    opt.step()
    out += [("step1." + n, p.clone()) for n, p in model.named_parameters()]
    opt.zero_grad()
    loss2, _ = model.loss(ids, targets)
    loss2.backward()
    out += [("loss_step2", loss2.detach().reshape(1))]
    out += [("grad2." + n, p.grad.clone()) for n, p in model.named_parameters()]
    opt.step()
    out += [("step2." + n, p.clone()) for n, p in model.named_parameters()]

    meta = dict(CONFIG, batch=B, seq=T, torch_version=torch.__version__, **ADAMW)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                        "gpt_parity.safetensors")
    write_safetensors(os.path.normpath(path), out, meta)
    print(f"wrote {os.path.normpath(path)}: {len(out)} tensors, loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
