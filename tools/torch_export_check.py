#!/usr/bin/python3
"""Checks a `strata export` against PyTorch: the exported weights, read by their Hugging Face
names alone, must give Strata's logits in tools/torch_gpt2.py's model.

usage: torch_export_check.py EXPORTED.safetensors LOGITS.safetensors

EXPORTED is `strata export`'s output; its config.json (HF's GPT2Config) is read from the same
directory. LOGITS is tests/parity/export_logits' output: "tokens" (I32, (B, T)), "targets",
"logits" (F32, (B, T, V)) and "loss" (F32, ()), computed by Strata from the same export.
The model shape comes only from HF's config.json and the weights only from HF names, mapped to
Strata's names with the Conv1D weights transposed back: a wrong name, shape, transpose or
config field in the export makes the logits disagree.

Passes when max |error| / max |logit| <= 1e-5 and max |error| <= 1e-4 (and the loss agrees to
1e-5 relative). Prints the errors; exits 1 on a mismatch or any problem, with one line saying why.
"""

import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2 as tg  # noqa: E402

REL_TOL = 1e-5  # max |error| / max |logit|
ABS_TOL = 1e-4  # max |error|
LOSS_REL_TOL = 1e-5

# HF GPT-2 module name -> Strata's, inside block h.{l} (Note [Hugging Face GPT-2 layout] in
# src/model/hf_names.h). The four Conv1D modules hold their weight as (in, out).
BLOCK_PARTS = {"ln_1": "ln1", "ln_2": "ln2", "attn.c_attn": "attn_qkv",
               "attn.c_proj": "attn_proj", "mlp.c_fc": "mlp_fc", "mlp.c_proj": "mlp_proj"}
CONV1D = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}
BLOCK_NAME = re.compile(r"^h\.(\d+)\.(.+)\.(weight|bias)$")


def strata_name(hf_name):
    """(Strata's name, transposed?) of an HF GPT-2 parameter name."""
    if hf_name in ("wte.weight", "wpe.weight"):
        return hf_name, False
    if hf_name in ("ln_f.weight", "ln_f.bias"):
        return "lnf." + hf_name.split(".")[1], False
    m = BLOCK_NAME.match(hf_name)
    if not m or m.group(2) not in BLOCK_PARTS:
        raise ValueError(f"tensor '{hf_name}' is not a GPT-2 parameter name")
    layer, part, kind = m.groups()
    return f"blk.{layer}.{BLOCK_PARTS[part]}.{kind}", part in CONV1D and kind == "weight"


def config_from_hf(path):
    """tg.GPT2Config from HF's config.json, refusing fields that describe another model."""
    with open(path) as f:
        c = json.load(f)
    want = {"model_type": "gpt2", "activation_function": "gelu_new", "tie_word_embeddings": True,
            "n_inner": None}
    for key, value in want.items():
        if c.get(key, "<absent>") != value:
            raise ValueError(f"{path}: {key} is {c.get(key, '<absent>')!r}, expected {value!r}")
    if c.get("layer_norm_epsilon") != tg.LN_EPS:
        raise ValueError(f"{path}: layer_norm_epsilon is {c.get('layer_norm_epsilon')!r}, "
                         f"expected {tg.LN_EPS}")
    if c.get("n_ctx", c.get("n_positions")) != c.get("n_positions"):
        raise ValueError(f"{path}: n_ctx {c['n_ctx']} differs from n_positions {c['n_positions']}")
    for key in ("vocab_size", "n_positions", "n_layer", "n_head", "n_embd"):
        if not isinstance(c.get(key), int):
            raise ValueError(f"{path}: {key} is {c.get(key)!r}, expected an integer")
    return tg.GPT2Config(vocab_size=c["vocab_size"], context_length=c["n_positions"],
                         n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"])


def load_export(path, cfg):
    """The exported weights as {Strata name: tensor}, every parameter present exactly once."""
    raw, meta = tg.read_safetensors(path)
    if meta.get("format") != "pt":
        raise ValueError(f"{path}: metadata format is {meta.get('format')!r}, HF's loader wants "
                         f"'pt'")
    params = {}
    for hf_name, t in raw.items():
        name, transposed = strata_name(hf_name)
        if t.dtype != "F32":
            raise ValueError(f"{path}: tensor '{hf_name}' is {t.dtype}, expected F32")
        value = tg.to_torch(t)
        params[name] = value.t().contiguous() if transposed else value
    expected = {name for name, _ in tg.param_shapes(cfg)}
    missing, extra = sorted(expected - params.keys()), sorted(params.keys() - expected)
    if missing or extra:
        raise ValueError(f"{path}: missing {missing[:3]}, unexpected {extra[:3]} for "
                         f"{cfg.n_layer} layers")
    return params  # tg.load_params checks every shape


def tensor(raw, name, dtype, path):
    if name not in raw:
        raise ValueError(f"{path}: tensor '{name}' missing")
    t = tg.to_torch(raw[name])
    if t.dtype != dtype:
        raise ValueError(f"{path}: tensor '{name}' is {t.dtype}, expected {dtype}")
    return t


def run(exported, logits_path):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    cfg = config_from_hf(os.path.join(os.path.dirname(os.path.abspath(exported)), "config.json"))
    model = tg.GPT2(cfg)
    tg.load_params(model, load_export(exported, cfg))

    raw, _ = tg.read_safetensors(logits_path)
    tokens = tensor(raw, "tokens", torch.int32, logits_path).long()
    targets = tensor(raw, "targets", torch.int32, logits_path).long()
    strata_logits = tensor(raw, "logits", torch.float32, logits_path)
    strata_loss = tensor(raw, "loss", torch.float32, logits_path).item()
    B, T = tokens.shape
    if tuple(strata_logits.shape) != (B, T, cfg.vocab_size):
        raise ValueError(f"{logits_path}: logits have shape {tuple(strata_logits.shape)}, "
                         f"expected {(B, T, cfg.vocab_size)}")

    with torch.no_grad():
        logits, loss = model(tokens, targets)
    err = (logits - strata_logits).abs().max().item()
    scale = logits.abs().max().item()
    rel = err / scale if scale > 0 else err
    loss_rel = abs(loss.item() - strata_loss) / abs(loss.item())
    ok = rel <= REL_TOL and err <= ABS_TOL and loss_rel <= LOSS_REL_TOL
    print(f"torch_export_check: {'ok' if ok else 'FAILED'}: logits ({B}, {T}, {cfg.vocab_size}) "
          f"max abs error {err:.3e} (limit {ABS_TOL:g}), max abs logit {scale:.3e}, "
          f"relative {rel:.3e} (limit {REL_TOL:g}); loss {loss.item():.6f} vs Strata "
          f"{strata_loss:.6f}, relative {loss_rel:.3e} (limit {LOSS_REL_TOL:g})")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description="check a strata export against PyTorch")
    ap.add_argument("exported", help="strata export's model.safetensors (config.json beside it)")
    ap.add_argument("logits", help="export_logits' output for the same export")
    args = ap.parse_args()
    try:
        return run(args.exported, args.logits)
    except Exception as e:  # noqa: BLE001  one line for the calling test, whatever went wrong
        msg = str(e).splitlines()[0] if str(e) else ""
        print(f"torch_export_check: {args.exported}: {type(e).__name__}: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
