#!/usr/bin/python3
"""Computes PyTorch's answers for a LoRA parity fixture written by Strata's C++ test.

usage: torch_lora.py INPUT OUTPUT

LoRA as PEFT defines it (Hu et al. 2021), written here from the formula, not from the peft
library: a targeted linear layer y = W x + b becomes
  y = W x + b + (alpha / r) * B (A dropout(x))        A (r, in), B (out, r)
and only A and B are trained; every other parameter (the base) is frozen and never changes.
With metadata lora_dropout p > 0 (and seed), the dropout masks are Strata's (Note [Adapter
dropout] in src/model/lora.h: SplitMix64 of the seed, step, micro-batch, layer, module slot and
element), drawn here from that definition.

INPUT (safetensors) is tools/torch_parity.py's format (metadata arch, n_layer, ..., lr,
min_lr_ratio, weight_decay, beta1, beta2, eps, grad_clip, warmup_steps, steps, B, T and Llama's
fields; every base parameter under Strata's names; `tokens` (I32, (steps, B, T+1)); the adamw.*
entries are not needed) plus metadata `lora_rank` (r) and `lora_alpha`, and adapters
`blk.{l}.{module}.lora_A` (F32, (r, in)) and `blk.{l}.{module}.lora_B` (F32, (out, r)), {module}
the Hugging Face module path inside layer l (MODULES below). The adapters present are the
targets; at least one is required.
OUTPUT holds everything in INPUT, metadata "generator", and:
  expected.lora.logits (B, T, V), expected.lora.loss (1,)   step-0 batch, the given weights
  expected.lora.grad.<adapter>       gradient of that loss (before clipping), every adapter
  expected.lora.losses (steps,)      loss at step k on batch k after k AdamW steps of the
                                     adapters only (clipping over the adapters' global norm)
  expected.lora.final.<adapter>      each adapter after the last step
  expected.lora.base_unchanged (1,)  1.0: every base parameter is bit-identical after training
Exits non-zero with a one-line message on any problem.
"""

import argparse
import math
import os
import re
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2 as tg  # noqa: E402
import torch_parity as tp  # noqa: E402

# Hugging Face module path inside a layer -> the nn.Linear attribute of the reference Block
# (tools/torch_gpt2.py, tools/torch_llama.py). The references keep one Linear per HF module
# (Llama's q, k, v, gate and up are separate; GPT-2's c_attn is one fused q|k|v in HF too), so
# a LoRA on one module adds its delta to that module's output rows only.
MODULES = {
    "gpt2": {"attn.c_attn": "attn_qkv", "attn.c_proj": "attn_proj", "mlp.c_fc": "mlp_fc",
             "mlp.c_proj": "mlp_proj"},
    "llama": {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_out",
              "mlp.gate_proj": "mlp_gate", "mlp.up_proj": "mlp_up", "mlp.down_proj": "mlp_down"},
}
ADAPTER_NAME = re.compile(r"^blk\.(\d+)\.(.+)\.lora_(A|B)$")

INT_KEYS = ["n_layer", "n_head", "n_embd", "vocab_size", "context_length", "B", "T", "steps",
            "warmup_steps", "lora_rank"]
FLOAT_KEYS = ["lr", "min_lr_ratio", "weight_decay", "beta1", "beta2", "eps", "grad_clip",
              "lora_alpha"]


MASK64 = (1 << 64) - 1


def splitmix64(z):
    """SplitMix64's finalizer on a Python int, or elementwise on a numpy uint64 array (wrapping)."""
    if isinstance(z, int):
        z = (z + 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class DropoutPlace:
    """Where training is (Strata's Note [Adapter dropout]): the seed, the 0-based step and the
    micro-batch; `p` 0 or `active` False: no dropout (PEFT's eval mode)."""

    def __init__(self, p, seed):
        self.p, self.seed, self.step, self.micro_batch, self.active = p, seed, 0, 0, False

    def mask(self, layer, slot, shape):
        """The keep mask times 1 / (1 - p) as float32 (0 where dropped), of `shape`."""
        key = splitmix64(self.seed)
        for part in (self.step, self.micro_batch, layer):
            key = splitmix64(key ^ part)
        stream = splitmix64(key ^ slot)
        n = int(np.prod(shape))
        h = splitmix64(np.arange(n, dtype=np.uint64) + np.uint64(stream))
        keep = (h >> np.uint64(40)) >= np.uint64(int(self.p * 16777216.0))
        scale = np.float32(1.0) / (np.float32(1.0) - np.float32(self.p))
        return torch.from_numpy(np.where(keep, scale, np.float32(0.0)).astype(np.float32)
                                .reshape(shape))


class LoRALinear(nn.Module):
    """A frozen Linear plus PEFT's low-rank update: base(x) + lora_B(lora_A(dropout(x))) * scale,
    dropout drawn as `place` says (layer and slot name the mask)."""

    def __init__(self, base: nn.Linear, A, B, scale, place=None, layer=0, slot=0):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(A.clone())  # (r, in)
        self.lora_B = nn.Parameter(B.clone())  # (out, r)
        self.scale = scale
        self.place, self.layer, self.slot = place, layer, slot

    def forward(self, x):
        xd = x
        if self.place is not None and self.place.active and self.place.p > 0:
            m = self.place.mask(self.layer, self.slot, tuple(x.shape))
            xd = torch.where(m != 0, x * m, torch.zeros_like(x))
        return self.base(x) + F.linear(F.linear(xd, self.lora_A), self.lora_B) * self.scale


def parse_numbers(meta, int_keys, float_keys):
    """String metadata -> dict of ints and floats; every key is required."""
    out = {}
    for key in int_keys + float_keys:
        if key not in meta:
            raise ValueError(f"metadata '{key}' missing")
        try:
            value = float(meta[key])
        except ValueError:
            raise ValueError(f"metadata '{key}' = {meta[key]!r} is not a number") from None
        if not math.isfinite(value):
            raise ValueError(f"metadata '{key}' = {meta[key]!r} is not finite")
        if key in int_keys:
            if not value.is_integer():
                raise ValueError(f"metadata '{key}' = {meta[key]!r} is not an integer")
            value = int(value)
        out[key] = value
    return out


def module_order(arch_name):
    return list(MODULES[arch_name])


def target_linear(model, layer, module, arch_name):
    """The reference model's nn.Linear for HF module `module` of layer `layer`."""
    if module not in MODULES[arch_name]:
        raise ValueError(f"'{module}' is not a LoRA target of {arch_name} "
                         f"(one of {', '.join(MODULES[arch_name])})")
    if layer >= len(model.blk):
        raise ValueError(f"layer {layer} of '{module}' is not below n_layer {len(model.blk)}")
    return getattr(model.blk[layer], MODULES[arch_name][module])


def check_adapters(model, arch_name, adapters, rank):
    """adapters: {(layer, module): (A, B)}; checks every target and shape against the model."""
    if not adapters:
        raise ValueError("no LoRA adapter (blk.{l}.{module}.lora_A / lora_B) present")
    for (layer, module), (A, B) in adapters.items():
        linear = target_linear(model, layer, module, arch_name)
        out_f, in_f = linear.weight.shape
        where = f"blk.{layer}.{module}"
        if tuple(A.shape) != (rank, in_f):
            raise ValueError(f"{where}.lora_A has shape {tuple(A.shape)}, expected "
                             f"{(rank, in_f)}")
        if tuple(B.shape) != (out_f, rank):
            raise ValueError(f"{where}.lora_B has shape {tuple(B.shape)}, expected "
                             f"{(out_f, rank)}")


def apply_lora(model, arch_name, adapters, rank, alpha, place=None):
    """Freezes every parameter of `model` and wraps each targeted Linear in a LoRALinear.

    adapters: {(layer, module): (A, B)}. Returns {adapter name: nn.Parameter} in canonical order
    (layer, module, A then B): the trainable parameters, named as in the fixture.
    """
    if rank < 1:
        raise ValueError(f"lora rank {rank} is not positive")
    check_adapters(model, arch_name, adapters, rank)
    for p in model.parameters():
        p.requires_grad_(False)
    order = module_order(arch_name)
    trainable = {}
    for layer, module in sorted(adapters, key=lambda k: (k[0], order.index(k[1]))):
        A, B = adapters[(layer, module)]
        block, attr = model.blk[layer], MODULES[arch_name][module]
        wrapped = LoRALinear(getattr(block, attr), A, B, alpha / rank, place, layer,
                             order.index(module))
        setattr(block, attr, wrapped)
        trainable[f"blk.{layer}.{module}.lora_A"] = wrapped.lora_A
        trainable[f"blk.{layer}.{module}.lora_B"] = wrapped.lora_B
    return trainable


def base_parameters(model):
    """{name: parameter} of every frozen (non-adapter) parameter."""
    return {n: p for n, p in model.named_parameters() if not n.endswith((".lora_A", ".lora_B"))}


def read_adapters(raw, dtype=torch.float32):
    """{(layer, module): (A, B)} from the fixture's blk.{l}.{module}.lora_A / lora_B tensors."""
    found = {}
    for name in raw:
        if "lora" not in name:
            continue
        m = ADAPTER_NAME.match(name)
        if not m:
            raise ValueError(f"tensor '{name}' is not named blk.{{l}}.{{module}}.lora_A|lora_B")
        t = tg.to_torch(raw[name])
        if t.dtype != torch.float32 or t.dim() != 2:
            raise ValueError(f"tensor '{name}' is {t.dtype} {tuple(t.shape)}, expected F32 2-D")
        found.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = t.to(dtype)
    adapters = {}
    for (layer, module), pair in found.items():
        for half in ("A", "B"):
            if half not in pair:
                raise ValueError(f"tensor 'blk.{layer}.{module}.lora_{half}' missing (its "
                                 f"other half is present)")
        adapters[(layer, module)] = (pair["A"], pair["B"])
    return adapters


def step0(model, trainable, inputs, targets):
    """Logits, loss and every adapter gradient for one batch with the current weights."""
    model.zero_grad(set_to_none=True)
    logits, loss = model(inputs, targets)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in trainable.items()}
    model.zero_grad(set_to_none=True)
    return logits.detach(), loss.detach().reshape(1), grads


def train_adapters(model, trainable, tokens, T, h, place=None):
    """AdamW on the adapters only; the loss at step k on batch k after k steps (a list of
    floats). Weight decay applies
    to every adapter (all are matrices); clipping is over the adapters' global norm."""
    params = list(trainable.values())
    opt = torch.optim.AdamW(params, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                            weight_decay=h["weight_decay"], foreach=False)
    losses = []
    for k in range(h["steps"]):
        if place is not None:
            place.step = k
        for group in opt.param_groups:
            group["lr"] = tg.lr_at(k, h["lr"], h["warmup_steps"], h["steps"], h["min_lr_ratio"])
        opt.zero_grad(set_to_none=True)
        batch = tokens[k].long()
        _, loss = model(batch[:, :T], batch[:, 1:])
        loss.backward()
        if h["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, max_norm=h["grad_clip"])
        opt.step()
        losses.append(loss.item())
    return losses


def check_base_unchanged(model, before):
    """Raises unless every base parameter has no gradient and the bits it had `before`."""
    for name, p in base_parameters(model).items():
        if p.requires_grad or p.grad is not None:
            raise RuntimeError(f"base parameter '{name}' is not frozen")
        if not torch.equal(p.detach().view(torch.int32), before[name].view(torch.int32)):
            raise RuntimeError(f"base parameter '{name}' changed during LoRA training")


def load_fixture(input_path):
    """(raw, meta, h, model with adapters, trainable, tokens) from a fixture file."""
    raw, meta = tg.read_safetensors(input_path)
    h = parse_numbers(meta, INT_KEYS, FLOAT_KEYS)
    p = float(meta.get("lora_dropout", "0"))
    if not 0 <= p < 1:
        raise ValueError(f"metadata 'lora_dropout' = {meta['lora_dropout']!r} is not in [0, 1)")
    place = DropoutPlace(p, int(meta.get("seed", "0")))
    cfg, arch = tp.model_config(meta, h)
    B, T, steps = h["B"], h["T"], h["steps"]
    if B < 1 or steps < 1 or not 1 <= T <= cfg.context_length:
        raise ValueError(f"bad B={B}, T={T} or steps={steps} (context_length "
                         f"{cfg.context_length})")
    model = arch.make(cfg)
    arch.load_params(model, {name: tp.tensor(raw, name, torch.float32, shape)
                             for name, shape in arch.param_shapes(cfg)})
    tokens = tp.tensor(raw, "tokens", torch.int32, (steps, B, T + 1))
    if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
        raise ValueError(f"tokens outside [0, {cfg.vocab_size})")
    trainable = apply_lora(model, meta.get("arch", "gpt2"), read_adapters(raw),
                           h["lora_rank"], h["lora_alpha"], place)
    return raw, meta, h, model, trainable, tokens, place


def run(input_path, output_path):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    raw, meta, h, model, trainable, tokens, place = load_fixture(input_path)
    before = {n: p.detach().clone() for n, p in base_parameters(model).items()}
    T = h["T"]
    batch0 = tokens[0].long()
    place.active = True  # training from here: step k, micro-batch 0
    logits, loss, grads = step0(model, trainable, batch0[:, :T], batch0[:, 1:])
    losses = train_adapters(model, trainable, tokens, T, h, place)
    check_base_unchanged(model, before)

    out = dict(raw)  # the input, byte for byte, so OUTPUT alone is a complete fixture
    out["expected.lora.logits"] = logits
    out["expected.lora.loss"] = loss
    for name in trainable:
        out[f"expected.lora.grad.{name}"] = grads[name]
    out["expected.lora.losses"] = torch.tensor(losses, dtype=torch.float32)
    for name, p in trainable.items():
        out[f"expected.lora.final.{name}"] = p.detach().clone()
    out["expected.lora.base_unchanged"] = torch.ones(1, dtype=torch.float32)
    meta = dict(meta)
    meta["generator"] = f"torch {torch.__version__} (tools/torch_lora.py)"
    tg.write_safetensors(output_path, out, meta)


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch answers for a Strata LoRA parity fixture")
    ap.add_argument("input", help="safetensors written by the C++ test")
    ap.add_argument("output", help="safetensors to write: the input plus expected.lora.*")
    args = ap.parse_args(argv)
    try:
        run(args.input, args.output)
    except Exception as e:  # noqa: BLE001  one line for the calling test, whatever went wrong
        msg = str(e).splitlines()[0] if str(e) else ""
        print(f"torch_lora: {args.input}: {type(e).__name__}: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
