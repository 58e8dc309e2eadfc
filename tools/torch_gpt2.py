#!/usr/bin/python3
"""GPT-2 in PyTorch, written to match Strata's definition: the reference for parity tests.

The model is defined here independently of the C++ code; what must agree is the math:
  pre-LN blocks   x = x + attn_proj(attn(ln1(x)));  x = x + mlp_proj(gelu_tanh(mlp_fc(ln2(x))))
  final           logits = lnf(x) @ wte^T          (tied head)
  LayerNorm eps 1e-5; causal attention with scale 1/sqrt(C/NH); qkv split as q|k|v by column
  blocks of C, head h taking columns h*hs..(h+1)*hs of each.
Parameter names follow Strata's table (wte.weight, blk.{l}.attn_qkv.weight, ...), Linear weights
in PyTorch's (out, in) layout.

Also here: a plain safetensors reader/writer (struct + json, no `safetensors` package), the LR
schedule and the AdamW setup. `python3 tools/torch_gpt2.py --self-check` checks the model's
autograd gradients against finite differences in float64.
"""

import argparse
import json
import math
import os
import struct
import sys
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5


@dataclass
class GPT2Config:
    vocab_size: int
    context_length: int
    n_layer: int
    n_head: int
    n_embd: int


GPT2_124M = GPT2Config(vocab_size=50257, context_length=1024, n_layer=12, n_head=12, n_embd=768)


# ---------------------------------------------------------------------------------------------
# Model


def causal_attention(q, k, v):
    """Explicit float attention. q, k, v: (B, NH, T, hs) -> (B, NH, T, hs).

    Written out (scores, -inf mask, softmax, weighted sum) rather than through a fused kernel,
    so the reference takes one well-understood path.
    """
    T, hs = q.size(-2), q.size(-1)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, NH, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        C = cfg.n_embd
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(C, eps=LN_EPS)
        self.attn_qkv = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=LN_EPS)
        self.mlp_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attention(self, x, attend=causal_attention):
        B, T, C = x.shape
        hs = C // self.n_head
        qkv = self.attn_qkv(x)  # (B, T, 3C)
        q, k, v = qkv.split(C, dim=2)  # each (B, T, C); head h is columns h*hs..(h+1)*hs
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
        y = attend(q, k, v)  # (B, NH, T, hs)
        return self.attn_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x, attend=causal_attention):
        x = x + self.attention(self.ln1(x), attend)
        h = F.gelu(self.mlp_fc(self.ln2(x)), approximate="tanh")  # (B, T, 4C)
        return x + self.mlp_proj(h)


class GPT2(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        if cfg.n_embd % cfg.n_head != 0:
            raise ValueError(f"n_embd {cfg.n_embd} is not a multiple of n_head {cfg.n_head}")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.context_length, cfg.n_embd)
        self.blk = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.lnf = nn.LayerNorm(cfg.n_embd, eps=LN_EPS)

    def forward(self, tokens, targets=None, attend=causal_attention):
        """tokens, targets: (B, T) int64. Returns (logits (B, T, V), mean loss or None).

        `attend` replaces the attention kernel (the benchmark times a fused one); the reference
        always uses causal_attention.
        """
        B, T = tokens.shape
        if T > self.cfg.context_length:
            raise ValueError(f"sequence of {T} exceeds context_length {self.cfg.context_length}")
        pos = torch.arange(T, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)  # (B, T, C)
        for block in self.blk:
            x = block(x, attend)
        logits = self.lnf(x) @ self.wte.weight.t()  # (B, T, V)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
        return logits, loss


def param_shapes(cfg: GPT2Config):
    """Strata's parameter table: (name, shape) in table order."""
    V, C = cfg.vocab_size, cfg.n_embd
    shapes = [("wte.weight", (V, C)), ("wpe.weight", (cfg.context_length, C))]
    for l in range(cfg.n_layer):
        p = f"blk.{l}."
        shapes += [
            (p + "ln1.weight", (C,)), (p + "ln1.bias", (C,)),
            (p + "attn_qkv.weight", (3 * C, C)), (p + "attn_qkv.bias", (3 * C,)),
            (p + "attn_proj.weight", (C, C)), (p + "attn_proj.bias", (C,)),
            (p + "ln2.weight", (C,)), (p + "ln2.bias", (C,)),
            (p + "mlp_fc.weight", (4 * C, C)), (p + "mlp_fc.bias", (4 * C,)),
            (p + "mlp_proj.weight", (C, 4 * C)), (p + "mlp_proj.bias", (C,)),
        ]
    shapes += [("lnf.weight", (C,)), ("lnf.bias", (C,))]
    return shapes


def load_params(model: GPT2, tensors):
    """Copies every parameter from a dict name -> tensor, checking names and shapes."""
    params = dict(model.named_parameters())
    for name, shape in param_shapes(model.cfg):
        if name not in tensors:
            raise KeyError(f"missing parameter {name}")
        t = tensors[name]
        if tuple(t.shape) != shape:
            raise ValueError(f"parameter {name} has shape {tuple(t.shape)}, expected {shape}")
        with torch.no_grad():
            params[name].copy_(t)


# ---------------------------------------------------------------------------------------------
# Training pieces


def lr_at(step, max_lr, warmup, total, min_lr_ratio):
    """Linear warmup over `warmup` steps, then cosine decay to max_lr*min_lr_ratio (0-based)."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    progress = min(max(progress, 0.0), 1.0)
    min_lr = max_lr * min_lr_ratio
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_adamw(model, lr, betas, eps, weight_decay):
    """AdamW with decay on matrices (wte, wpe, every Linear weight), none on biases and LN."""
    named = list(model.named_parameters())
    decay = [p for _, p in named if p.dim() >= 2]
    no_decay = [p for _, p in named if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=False)


def train_step(model, opt, tokens, targets, lr, grad_clip):
    """One step: loss on the current weights, backward, clip, AdamW at `lr`. Returns the loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    _, loss = model(tokens, targets)
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=grad_clip)
    opt.step()
    return loss.item()


# ---------------------------------------------------------------------------------------------
# safetensors: u64 LE header length | JSON header | data (offsets relative to the data start)


class RawTensor(NamedTuple):
    """A tensor exactly as stored: safetensors dtype string, shape, little-endian bytes."""

    dtype: str
    shape: tuple
    data: bytes


# dtype -> (numpy dtype of the stored bytes, torch dtype it becomes). torch has no uint16, so U16
# widens to int32; BF16 is read as int16 bits and reinterpreted.
_ST_DTYPES = {
    "F32": (np.float32, torch.float32),
    "F64": (np.float64, torch.float64),
    "BF16": (np.int16, torch.bfloat16),
    "F16": (np.float16, torch.float16),
    "I64": (np.int64, torch.int64),
    "I32": (np.int32, torch.int32),
    "U16": (np.uint16, torch.int32),
    "U8": (np.uint8, torch.uint8),
}
_TORCH_TO_ST = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16",
                torch.float16: "F16", torch.int64: "I64", torch.int32: "I32",
                torch.uint8: "U8"}


def to_torch(raw: RawTensor) -> torch.Tensor:
    np_dtype, torch_dtype = _ST_DTYPES[raw.dtype]
    a = np.frombuffer(raw.data, dtype=np.dtype(np_dtype).newbyteorder("<")).reshape(raw.shape)
    t = torch.from_numpy(a.astype(np_dtype, copy=True))
    if raw.dtype == "BF16":
        return t.view(torch.bfloat16)
    return t.to(torch_dtype)


def from_torch(t: torch.Tensor) -> RawTensor:
    t = t.detach().cpu().contiguous()
    if t.dtype not in _TORCH_TO_ST:
        raise ValueError(f"no safetensors dtype for {t.dtype}")
    st_dtype = _TORCH_TO_ST[t.dtype]
    bits = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
    data = bits.numpy().astype(np.dtype(_ST_DTYPES[st_dtype][0]).newbyteorder("<")).tobytes()
    return RawTensor(st_dtype, tuple(t.shape), data)


def read_safetensors(path):
    """Returns ({name: RawTensor} in header order, {metadata key: value})."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: {len(blob)} bytes is too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError(f"{path}: header length {n} does not fit in {len(blob)} bytes")
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        dtype, shape = info["dtype"], tuple(info["shape"])
        begin, end = info["data_offsets"]
        if dtype not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(_ST_DTYPES[dtype][0]).itemsize
        if not 0 <= begin <= end <= len(data) or end - begin != size:
            raise ValueError(f"{path}: tensor {name} has bad data_offsets {[begin, end]}")
        tensors[name] = RawTensor(dtype, shape, bytes(data[begin:end]))
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: RawTensor or torch.Tensor}, written in dict order; metadata: str -> str."""
    raws = {name: t if isinstance(t, RawTensor) else from_torch(t) for name, t in tensors.items()}
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, raw in raws.items():
        header[name] = {"dtype": raw.dtype, "shape": list(raw.shape),
                        "data_offsets": [offset, offset + len(raw.data)]}
        offset += len(raw.data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)  # data starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in raws.values():
            f.write(raw.data)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Self-check: autograd gradients against central finite differences, in float64.


def self_check(seed=0):
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=11, context_length=8, n_layer=2, n_head=2, n_embd=8)
    model = GPT2(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)  # non-trivial LN weights and biases too
    tokens = torch.randint(0, cfg.vocab_size, (2, 7))
    targets = torch.randint(0, cfg.vocab_size, (2, 7))
    model.zero_grad()
    _, loss = model(tokens, targets)
    loss.backward()
    worst = 0.0
    h = 1e-5
    for name, p in model.named_parameters():
        flat = p.data.view(-1)
        for i in torch.randperm(flat.numel())[:4].tolist():
            old = flat[i].item()
            with torch.no_grad():
                flat[i] = old + h
                up = model(tokens, targets)[1].item()
                flat[i] = old - h
                down = model(tokens, targets)[1].item()
                flat[i] = old
            numeric = (up - down) / (2 * h)
            analytic = p.grad.view(-1)[i].item()
            err = abs(numeric - analytic) / (1e-4 + abs(numeric))
            worst = max(worst, err)
            if err > 1e-5:
                raise AssertionError(f"{name}[{i}]: autograd {analytic} vs numeric {numeric}")
    print(f"self-check ok: worst relative gradient error {worst:.2e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--self-check", action="store_true", help="finite-difference gradient check")
    args = ap.parse_args()
    if args.self_check:
        self_check()
    else:
        ap.print_help()


if __name__ == "__main__":
    sys.exit(main())
