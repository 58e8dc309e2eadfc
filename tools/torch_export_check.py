#!/usr/bin/python3
"""Checks a `strata export` against PyTorch: the exported weights, read by their Hugging Face
names alone, must give Strata's logits in tools/torch_gpt2.py's model (model_type gpt2) or
tools/torch_llama.py's (model_type llama).

usage: torch_export_check.py EXPORTED.safetensors LOGITS.safetensors

EXPORTED is `strata export`'s output; its config.json (HF's GPT2Config or LlamaConfig) is read
from the same directory. LOGITS is tests/parity/export_logits' output: "tokens" (I32, (B, T)), "targets",
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
import torch_llama as tl  # noqa: E402

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


# HF LlamaForCausalLM's module names -> Strata's, inside model.layers.{l} (src/model/layout.cpp);
# Linear weights are (out, in) in both, so nothing is transposed.
LLAMA_PARTS = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
               "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_out", "post_attention_layernorm": "mlp_norm",
               "mlp.gate_proj": "mlp_gate", "mlp.up_proj": "mlp_up", "mlp.down_proj": "mlp_down"}
LLAMA_BLOCK_NAME = re.compile(r"^model\.layers\.(\d+)\.(.+)\.weight$")
LLAMA_TOP = {"model.embed_tokens.weight": "wte.weight", "model.norm.weight": "norm.weight",
             "lm_head.weight": "lm_head.weight"}


def llama_strata_name(hf_name):
    """(Strata's name, transposed?) of an HF Llama parameter name."""
    if hf_name in LLAMA_TOP:
        return LLAMA_TOP[hf_name], False
    m = LLAMA_BLOCK_NAME.match(hf_name)
    if not m or m.group(2) not in LLAMA_PARTS:
        raise ValueError(f"tensor '{hf_name}' is not a Llama parameter name")
    return f"blk.{m.group(1)}.{LLAMA_PARTS[m.group(2)]}.weight", False


def llama_config_from_hf(c, path):
    """tl.LlamaConfig from HF's LlamaConfig fields."""
    for key, value in {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False}.items():
        if c.get(key, value) != value:
            raise ValueError(f"{path}: {key} is {c.get(key)!r}, expected {value!r}")
    scaling = {}
    r = c.get("rope_scaling")
    if r:
        if r.get("rope_type", r.get("type")) != "llama3":
            raise ValueError(f"{path}: rope_scaling {r!r} is not llama3's")
        scaling = {"factor": r["factor"], "low_freq_factor": r["low_freq_factor"],
                   "high_freq_factor": r["high_freq_factor"],
                   "original_context_length": r["original_max_position_embeddings"]}
    return tl.LlamaConfig(vocab_size=c["vocab_size"], context_length=c["max_position_embeddings"],
                          n_layer=c["num_hidden_layers"], n_head=c["num_attention_heads"],
                          n_embd=c["hidden_size"],
                          n_kv_head=c.get("num_key_value_heads", c["num_attention_heads"]),
                          ffn_hidden=c["intermediate_size"],
                          rope_theta=c.get("rope_theta", 10000.0), norm_eps=c["rms_norm_eps"],
                          tie_embeddings=c.get("tie_word_embeddings", False),
                          rope_scaling=scaling)


class Arch:
    """One architecture's reference model, its parameter table and HF -> Strata names."""

    def __init__(self, module, make, strata_name):
        self.module, self.make, self.strata_name = module, make, strata_name


def config_from_hf(path):
    """(config, Arch) from HF's config.json, refusing fields that describe another model."""
    with open(path) as f:
        c = json.load(f)
    if c.get("model_type") == "llama":
        return llama_config_from_hf(c, path), Arch(tl, tl.Llama, llama_strata_name)
    return gpt2_config_from_hf(c, path), Arch(tg, tg.GPT2, strata_name)


def gpt2_config_from_hf(c, path):
    """tg.GPT2Config from HF's GPT2Config fields."""
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


def load_export(path, cfg, arch):
    """The exported weights as {Strata name: tensor}, every parameter present exactly once."""
    raw, meta = tg.read_safetensors(path)
    if meta.get("format") != "pt":
        raise ValueError(f"{path}: metadata format is {meta.get('format')!r}, HF's loader wants "
                         f"'pt'")
    params = {}
    for hf_name, t in raw.items():
        name, transposed = arch.strata_name(hf_name)
        if t.dtype != "F32":
            raise ValueError(f"{path}: tensor '{hf_name}' is {t.dtype}, expected F32")
        value = tg.to_torch(t)
        params[name] = value.t().contiguous() if transposed else value
    expected = {name for name, _ in arch.module.param_shapes(cfg)}
    missing, extra = sorted(expected - params.keys()), sorted(params.keys() - expected)
    if missing or extra:
        raise ValueError(f"{path}: missing {missing[:3]}, unexpected {extra[:3]} for "
                         f"{cfg.n_layer} layers")
    return params  # load_params checks every shape


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
    cfg, arch = config_from_hf(
        os.path.join(os.path.dirname(os.path.abspath(exported)), "config.json"))
    model = arch.make(cfg)
    arch.module.load_params(model, load_export(exported, cfg, arch))

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
