#!/usr/bin/python3
"""Llama in PyTorch, written for Strata's parity tests: the reference for model.arch llama.

Written independently of the C++ code, following Hugging Face transformers' LlamaForCausalLM
math (what imported checkpoints were trained with):
  x = x + o(attention(rope(q(n1)), rope(k(n1)), v(n1)))   n1 = rmsnorm1(x)
  x = x + down(silu(gate(n2)) * up(n2))                    n2 = rmsnorm2(x)
  logits = rmsnorm_f(x) @ head^T        head = lm_head, or wte when tied
  RMSNorm:  x * rsqrt(mean(x^2) + eps) * weight, in float32
  RoPE:     rotate-half convention; inv_freq = 1 / theta^(2i/hs) in float32 (llama3 scaling as
            HF's _compute_llama3_parameters); angle = t * inv_freq; cos/sin of cat(angle, angle)
  GQA:      query head h reads key/value head h // (NH / NKV)
Parameter names follow Strata's table (wte.weight, blk.{l}.attn_q.weight, ..., norm.weight,
lm_head.weight), Linear weights (out, in) as PyTorch's.

`python3 tools/torch_llama.py --self-check` checks autograd gradients against finite
differences in float64 for a tiny GQA model.
"""

import argparse
import math
import sys
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    vocab_size: int
    context_length: int
    n_layer: int
    n_head: int
    n_embd: int
    n_kv_head: int = 0            # 0: n_head
    ffn_hidden: int = 0           # 0: 4 * n_embd
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    rope_scaling: dict = field(default_factory=dict)  # {} or llama3's fields

    def kv_heads(self):
        return self.n_kv_head or self.n_head

    def ffn(self):
        return self.ffn_hidden or 4 * self.n_embd

    def head_size(self):
        return self.n_embd // self.n_head


def inv_freq(cfg: LlamaConfig):
    hs = cfg.head_size()
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    r = cfg.rope_scaling
    if not r:
        return inv
    factor, low, high = r["factor"], r["low_freq_factor"], r["high_freq_factor"]
    old = r["original_context_length"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(cfg: LlamaConfig, T, dtype):
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq(cfg)[None, :]  # (T, hs/2)
    emb = torch.cat((freqs, freqs), dim=-1)                                          # (T, hs)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        C, hs, F_ = cfg.n_embd, cfg.head_size(), cfg.ffn()
        self.cfg = cfg
        self.attn_norm = RMSNorm(C, cfg.norm_eps)
        self.attn_q = nn.Linear(C, C, bias=False)
        self.attn_k = nn.Linear(C, cfg.kv_heads() * hs, bias=False)
        self.attn_v = nn.Linear(C, cfg.kv_heads() * hs, bias=False)
        self.attn_out = nn.Linear(C, C, bias=False)
        self.mlp_norm = RMSNorm(C, cfg.norm_eps)
        self.mlp_gate = nn.Linear(C, F_, bias=False)
        self.mlp_up = nn.Linear(C, F_, bias=False)
        self.mlp_down = nn.Linear(F_, C, bias=False)

    def attention(self, x, cos, sin):
        B, T, C = x.shape
        NH, NKV, hs = self.cfg.n_head, self.cfg.kv_heads(), self.cfg.head_size()
        q = self.attn_q(x).view(B, T, NH, hs).transpose(1, 2)    # (B, NH, T, hs)
        k = self.attn_k(x).view(B, T, NKV, hs).transpose(1, 2)   # (B, NKV, T, hs)
        v = self.attn_v(x).view(B, T, NKV, hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = NH // NKV
        k = k.repeat_interleave(rep, dim=1)                       # (B, NH, T, hs)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.attn_out(y)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attn_norm(x), cos, sin)
        n = self.mlp_norm(x)
        return x + self.mlp_down(F.silu(self.mlp_gate(n)) * self.mlp_up(n))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        if cfg.n_embd % cfg.n_head or cfg.n_head % cfg.kv_heads() or cfg.head_size() % 2:
            raise ValueError("n_embd, n_head and n_kv_head do not make a Llama")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blk = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        if not cfg.tie_embeddings:
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, tokens, targets=None):
        B, T = tokens.shape
        if T > self.cfg.context_length:
            raise ValueError(f"sequence of {T} exceeds context_length {self.cfg.context_length}")
        cos, sin = rope_cos_sin(self.cfg, T, self.wte.weight.dtype)
        x = self.wte(tokens)
        for block in self.blk:
            x = block(x, cos, sin)
        head = self.wte.weight if self.cfg.tie_embeddings else self.lm_head.weight
        logits = self.norm(x) @ head.t()
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
        return logits, loss


def param_shapes(cfg: LlamaConfig):
    """Strata's parameter table: (name, shape) in table order."""
    V, C, F_ = cfg.vocab_size, cfg.n_embd, cfg.ffn()
    Ckv = cfg.kv_heads() * cfg.head_size()
    shapes = [("wte.weight", (V, C))]
    for l in range(cfg.n_layer):
        p = f"blk.{l}."
        shapes += [
            (p + "attn_norm.weight", (C,)), (p + "attn_q.weight", (C, C)),
            (p + "attn_k.weight", (Ckv, C)), (p + "attn_v.weight", (Ckv, C)),
            (p + "attn_out.weight", (C, C)), (p + "mlp_norm.weight", (C,)),
            (p + "mlp_gate.weight", (F_, C)), (p + "mlp_up.weight", (F_, C)),
            (p + "mlp_down.weight", (C, F_)),
        ]
    shapes += [("norm.weight", (C,))]
    if not cfg.tie_embeddings:
        shapes += [("lm_head.weight", (V, C))]
    return shapes


def load_params(model: Llama, tensors):
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


def self_check(seed=0):
    """Autograd against central finite differences in float64 on a tiny GQA model."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=11, context_length=6, n_layer=2, n_head=4, n_embd=8,
                      n_kv_head=2, ffn_hidden=12, tie_embeddings=False,
                      rope_scaling={"factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_context_length": 4})
    model = Llama(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    tokens = torch.randint(0, cfg.vocab_size, (2, 5))
    targets = torch.randint(0, cfg.vocab_size, (2, 5))
    _, loss = model(tokens, targets)
    loss.backward()
    worst = 0.0
    for name, p in model.named_parameters():
        flat, grad = p.data.view(-1), p.grad.view(-1)
        for i in range(0, flat.numel(), max(1, flat.numel() // 7)):
            old = flat[i].item()
            flat[i] = old + 1e-6
            up = model(tokens, targets)[1].item()
            flat[i] = old - 1e-6
            down = model(tokens, targets)[1].item()
            flat[i] = old
            fd = (up - down) / 2e-6
            # relative, against at least 1e-3: tiny gradients are dominated by rounding in fd
            err = abs(fd - grad[i].item()) / max(1e-3, abs(fd))
            worst = max(worst, err)
            if err > 1e-5:
                raise AssertionError(f"{name}[{i}]: autograd {grad[i].item()} vs fd {fd}")
    print(f"torch_llama self-check: worst relative gradient error {worst:.2e}")


def main():
    ap = argparse.ArgumentParser(description="PyTorch Llama reference for Strata")
    ap.add_argument("--self-check", action="store_true")
    args = ap.parse_args()
    if args.self_check:
        self_check()
        return 0
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
