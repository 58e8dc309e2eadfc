#!/usr/bin/python3
"""Computes PyTorch's answers for a parity fixture written by Strata's C++ test.

usage: torch_parity.py INPUT OUTPUT

INPUT (safetensors) holds the config and hyperparameters as string metadata (metadata "arch"
picks tools/torch_gpt2.py or tools/torch_llama.py), every parameter (F32, Strata's names), `tokens` (I32, (steps, B, T+1)), `adamw.param0` (F32, (n,)) and
`adamw.grads` (F32, (K, n)), and optionally `targets_mask` (I32, (steps, B, T): 0 leaves a target
out of the loss, PyTorch's ignore_index -100, as a chat prompt's). OUTPUT holds everything in INPUT, metadata "generator", and:
  expected.logits (B, T, V), expected.loss (1,)  step-0 batch, initial weights
  expected.grad.<param>                          gradient of that loss (before clipping)
  expected.losses (steps,)                       loss at step k on batch k after k AdamW steps
  expected.bf16.losses (steps,)                  the same with bf16 working weights: AdamW
                                                 steps f32 masters, the model computes with
                                                 their bf16 rounding (widened to f32)
  expected.adamw.params (K, n)                   a lone tensor after each of K AdamW steps
Exits non-zero with a one-line message on any problem.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2 as tg  # noqa: E402
import torch_llama as tl  # noqa: E402

INT_KEYS = ["n_layer", "n_head", "n_embd", "vocab_size", "context_length", "B", "T", "steps",
            "warmup_steps"]
FLOAT_KEYS = ["lr", "min_lr_ratio", "weight_decay", "beta1", "beta2", "eps", "grad_clip",
              "adamw_lr", "adamw_wd", "adamw_beta1", "adamw_beta2", "adamw_eps"]


def parse_metadata(meta):
    """String metadata -> dict of ints and floats; every key is required."""
    out = {}
    for key in INT_KEYS + FLOAT_KEYS:
        if key not in meta:
            raise ValueError(f"metadata '{key}' missing")
        try:
            value = float(meta[key])
        except ValueError:
            raise ValueError(f"metadata '{key}' = {meta[key]!r} is not a number") from None
        if key in INT_KEYS:
            if not value.is_integer():
                raise ValueError(f"metadata '{key}' = {meta[key]!r} is not an integer")
            value = int(value)
        out[key] = value
    return out


class Arch:
    """The model module of one architecture: how to make it and its parameter table."""

    def __init__(self, make, param_shapes, load_params):
        self.make, self.param_shapes, self.load_params = make, param_shapes, load_params


def model_config(meta, h):
    """The model config and its Arch from the metadata (arch absent: gpt2)."""
    arch = meta.get("arch", "gpt2")
    if arch == "gpt2":
        cfg = tg.GPT2Config(vocab_size=h["vocab_size"], context_length=h["context_length"],
                            n_layer=h["n_layer"], n_head=h["n_head"], n_embd=h["n_embd"])
        return cfg, Arch(tg.GPT2, tg.param_shapes, tg.load_params)
    if arch != "llama":
        raise ValueError(f"metadata 'arch' = {arch!r} is not gpt2 or llama")
    scaling = {}
    if meta["rope_scaling"] == "llama3":
        scaling = {"factor": float(meta["rope_factor"]),
                   "low_freq_factor": float(meta["rope_low_freq_factor"]),
                   "high_freq_factor": float(meta["rope_high_freq_factor"]),
                   "original_context_length": int(meta["rope_original_context_length"])}
    cfg = tl.LlamaConfig(vocab_size=h["vocab_size"], context_length=h["context_length"],
                         n_layer=h["n_layer"], n_head=h["n_head"], n_embd=h["n_embd"],
                         n_kv_head=int(meta["n_kv_head"]), ffn_hidden=int(meta["ffn_hidden"]),
                         rope_theta=float(meta["rope_theta"]), norm_eps=float(meta["norm_eps"]),
                         tie_embeddings=meta["tie_embeddings"] == "1", rope_scaling=scaling)
    return cfg, Arch(tl.Llama, tl.param_shapes, tl.load_params)


def shape_of(tensors, name):
    if name not in tensors:
        raise ValueError(f"tensor '{name}' missing")
    return tuple(tensors[name].shape)


def tensor(tensors, name, dtype, shape):
    """The tensor `name` as torch, checked to have `dtype` and `shape`."""
    shape_of(tensors, name)
    t = tg.to_torch(tensors[name])
    if t.dtype != dtype or tuple(t.shape) != tuple(shape):
        raise ValueError(f"tensor '{name}' is {t.dtype} {tuple(t.shape)}, "
                         f"expected {dtype} {tuple(shape)}")
    return t


def reference_step0(model, inputs, targets):
    """Logits, loss and every parameter gradient for one batch with the current weights."""
    model.zero_grad(set_to_none=True)
    logits, loss = model(inputs, targets)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return logits.detach(), loss.detach().reshape(1), grads


def train_losses(model, inputs, targets, h):
    """Loss at each step k on batch k, with the weights after k optimizer steps."""
    opt = tg.make_adamw(model, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                        weight_decay=h["weight_decay"])
    losses = []
    for k in range(h["steps"]):
        lr = tg.lr_at(k, h["lr"], h["warmup_steps"], h["steps"], h["min_lr_ratio"])
        losses.append(tg.train_step(model, opt, inputs[k], targets[k], lr, h["grad_clip"]))
    return torch.tensor(losses, dtype=torch.float32)


def train_losses_bf16(model, inputs, targets, h):
    """As train_losses, with bf16 working weights (Strata's train.precision bf16): the optimizer
    holds f32 master copies of the weights; after each step (and at the start) the model's
    weights are the masters rounded to bf16 (round to nearest even) and widened back to f32, so
    forward, backward and clipping run in f32 on bf16 values, and the gradients step the masters.
    """
    masters = torch.nn.Module()
    masters.params = torch.nn.ParameterList(
        [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()])
    named = list(zip(model.parameters(), masters.params))
    decay = [m for p, m in named if p.dim() >= 2]
    no_decay = [m for p, m in named if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": h["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                            foreach=False)

    def round_working_weights():
        with torch.no_grad():
            for p, m in named:
                p.copy_(m.to(torch.bfloat16).to(torch.float32))

    round_working_weights()
    losses = []
    for k in range(h["steps"]):
        lr = tg.lr_at(k, h["lr"], h["warmup_steps"], h["steps"], h["min_lr_ratio"])
        for group in opt.param_groups:
            group["lr"] = lr
        model.zero_grad(set_to_none=True)
        _, loss = model(inputs[k], targets[k])
        loss.backward()
        if h["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=h["grad_clip"])
        for p, m in named:
            m.grad = p.grad.detach().clone()
        opt.step()
        round_working_weights()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float32)


def adamw_trajectory(param0, grads, h):
    """A single tensor stepped by AdamW with the given gradients; row k = value after step k."""
    p = torch.nn.Parameter(param0.clone())
    opt = torch.optim.AdamW([p], lr=h["adamw_lr"], betas=(h["adamw_beta1"], h["adamw_beta2"]),
                            eps=h["adamw_eps"], weight_decay=h["adamw_wd"], foreach=False)
    rows = []
    for k in range(grads.shape[0]):
        p.grad = grads[k].clone()
        opt.step()
        rows.append(p.detach().clone())
    return torch.stack(rows)


def run(input_path, output_path):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    raw, meta = tg.read_safetensors(input_path)
    h = parse_metadata(meta)
    cfg, arch = model_config(meta, h)
    B, T, steps = h["B"], h["T"], h["steps"]
    if B < 1 or steps < 1 or not 1 <= T <= cfg.context_length:
        raise ValueError(f"bad B={B}, T={T} or steps={steps} (context_length "
                         f"{cfg.context_length})")

    model = arch.make(cfg)
    params = {name: tensor(raw, name, torch.float32, shape)
              for name, shape in arch.param_shapes(cfg)}
    arch.load_params(model, params)
    tokens = tensor(raw, "tokens", torch.int32, (steps, B, T + 1))
    if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
        raise ValueError(f"tokens outside [0, {cfg.vocab_size})")
    p_shape = shape_of(raw, "adamw.param0")
    if len(p_shape) != 1:
        raise ValueError(f"tensor 'adamw.param0' has shape {p_shape}, expected (n,)")
    n = p_shape[0]
    param0 = tensor(raw, "adamw.param0", torch.float32, (n,))
    K = (shape_of(raw, "adamw.grads") or (0,))[0]
    adam_grads = tensor(raw, "adamw.grads", torch.float32, (K, n))

    inputs = tokens[:, :, :T].long()
    targets = tokens[:, :, 1:].long().clone()
    if "targets_mask" in raw:  # a chat prompt's targets: not trained (PyTorch's ignore_index)
        mask = tensor(raw, "targets_mask", torch.int32, (steps, B, T))
        targets[mask == 0] = -100
    logits, loss, grads = reference_step0(model, inputs[0], targets[0])
    losses = train_losses(model, inputs, targets, h)
    model_bf16 = arch.make(cfg)  # from the same initial weights: train_losses changed `model`
    arch.load_params(model_bf16, params)
    losses_bf16 = train_losses_bf16(model_bf16, inputs, targets, h)
    adam_params = adamw_trajectory(param0, adam_grads, h)

    out = dict(raw)  # the input, byte for byte, so OUTPUT alone is a complete fixture
    out["expected.logits"] = logits
    out["expected.loss"] = loss
    for name, _ in arch.param_shapes(cfg):
        out[f"expected.grad.{name}"] = grads[name]
    out["expected.losses"] = losses
    out["expected.bf16.losses"] = losses_bf16
    out["expected.adamw.params"] = adam_params
    meta = dict(meta)
    meta["generator"] = f"torch {torch.__version__}"
    tg.write_safetensors(output_path, out, meta)


def main():
    ap = argparse.ArgumentParser(description="PyTorch answers for a Strata parity fixture")
    ap.add_argument("input", help="safetensors written by the C++ test")
    ap.add_argument("output", help="safetensors to write: the input plus expected.*")
    args = ap.parse_args()
    try:
        run(args.input, args.output)
    except Exception as e:  # noqa: BLE001  one line for the calling test, whatever went wrong
        msg = str(e).splitlines()[0] if str(e) else ""
        print(f"torch_parity: {args.input}: {type(e).__name__}: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
