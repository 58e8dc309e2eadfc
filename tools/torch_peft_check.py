#!/usr/bin/python3
"""Checks `strata export` of a LoRA run: base + PEFT adapter, applied unmerged in PyTorch, must
give the logits of the exported merged model.

usage: torch_peft_check.py BASE_DIR ADAPTER_DIR MERGED_DIR TOKENS

BASE_DIR and MERGED_DIR are Hugging Face model directories (config.json, model.safetensors or
shards with model.safetensors.index.json; tools/torch_hf_dir.py reads them). ADAPTER_DIR is a
PEFT adapter: adapter_config.json ("peft_type": "LORA", "r", "lora_alpha", "target_modules",
"fan_in_fan_out", "modules_to_save", "base_model_name_or_path") and adapter_model.safetensors
with PEFT's names base_model.model.<HF module path>.lora_A.weight (r, in) / .lora_B.weight
(out, r) and, for modules_to_save, base_model.model.<HF parameter name>. TOKENS is a
safetensors file with "tokens" (I32, (B, T)).

The adapter is applied as PEFT's forward does, y = W x + b + (alpha / r) * B (A x), by
tools/torch_lora.py's LoRALinear; the merged model is read as plain weights. Passes when
max |a - b| <= 1e-4 and max |a - b| / max |a| <= 1e-5, the adapter changes the base's logits
(else this check could not fail) and adapter_config.json's r matches the tensors. Prints the
errors; exits 1 on a mismatch or any problem, with one line saying why.
"""

import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2 as tg  # noqa: E402
import torch_hf_dir as hfd  # noqa: E402
import torch_lora as tlo  # noqa: E402

REL_TOL = 1e-5  # max |error| / max |logit|
ABS_TOL = 1e-4  # max |error|
PEFT_PREFIX = "base_model.model."
# PEFT's module path of layer l's module m, as it names it (GPT-2 under GPT2LMHeadModel).
LAYER_PATH = {"gpt2": "transformer.h.{l}.{m}", "llama": "model.layers.{l}.{m}"}
LORA_NAME = {"gpt2": re.compile(r"^h\.(\d+)\.(.+)\.lora_(A|B)\.weight$"),
             "llama": re.compile(r"^model\.layers\.(\d+)\.(.+)\.lora_(A|B)\.weight$")}


def peft_matches(module_path, target):
    """PEFT's rule for a list entry of target_modules / modules_to_save: the full module name
    is the entry or ends with "." + the entry."""
    return module_path == target or module_path.endswith("." + target)


def read_adapter_config(path, arch_type):
    """The fields this check uses, validated; refuses LoRA variants it does not implement."""
    with open(path) as f:
        c = json.load(f)
    if c.get("peft_type") != "LORA":
        raise ValueError(f"{path}: peft_type is {c.get('peft_type')!r}, expected 'LORA'")
    r, alpha = c.get("r"), c.get("lora_alpha")
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise ValueError(f"{path}: r is {r!r}, expected a positive integer")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise ValueError(f"{path}: lora_alpha is {alpha!r}, expected a number")
    targets = c.get("target_modules")
    if not isinstance(targets, list) or not targets or \
            not all(isinstance(t, str) for t in targets):
        raise ValueError(f"{path}: target_modules is {targets!r}, expected a list of names")
    if c.get("fan_in_fan_out") is not (arch_type == "gpt2"):
        raise ValueError(f"{path}: fan_in_fan_out is {c.get('fan_in_fan_out')!r}, expected "
                         f"{arch_type == 'gpt2'} for {arch_type}")
    to_save = c.get("modules_to_save")
    if to_save is not None and not (isinstance(to_save, list) and
                                    all(isinstance(t, str) for t in to_save)):
        raise ValueError(f"{path}: modules_to_save is {to_save!r}, expected null or a list")
    for key, plain in {"use_rslora": False, "use_dora": False, "bias": "none",
                       "rank_pattern": {}, "alpha_pattern": {}}.items():
        if c.get(key, plain) not in (plain, None):
            raise ValueError(f"{path}: {key} is {c[key]!r}; this check implements only "
                             f"{plain!r}")
    if "base_model_name_or_path" not in c:
        raise ValueError(f"{path}: base_model_name_or_path missing")
    return {"r": r, "alpha": float(alpha), "targets": targets, "to_save": to_save or [],
            "base": c["base_model_name_or_path"]}


def split_adapter(raw, arch_type, path):
    """PEFT's tensors -> ({(layer, module): {"A": t, "B": t}}, {HF parameter name: RawTensor}
    of modules_to_save)."""
    lora, saved = {}, {}
    for name, t in raw.items():
        if not name.startswith(PEFT_PREFIX):
            raise ValueError(f"{path}: tensor '{name}' does not start with '{PEFT_PREFIX}'")
        rest = hfd.strip_gpt2_prefix(name[len(PEFT_PREFIX):], arch_type)
        if ".lora_" not in rest:
            saved[rest] = t
            continue
        m = LORA_NAME[arch_type].match(rest)
        if not m or m.group(2) not in tlo.MODULES[arch_type]:
            raise ValueError(f"{path}: tensor '{name}' is not a LoRA target of {arch_type}")
        value = tg.to_torch(t)
        if value.dtype != torch.float32 or value.dim() != 2:
            raise ValueError(f"{path}: tensor '{name}' is {value.dtype} {tuple(value.shape)}, "
                             f"expected F32 2-D")
        lora.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = value
    return lora, saved


def check_targets(lora, cfg, conf, arch_type, path):
    """Every module target_modules names has both halves, nothing else has any, r agrees."""
    for layer in range(cfg.n_layer):
        for module in tlo.MODULES[arch_type]:
            full = LAYER_PATH[arch_type].format(l=layer, m=module)
            targeted = any(peft_matches(full, t) for t in conf["targets"])
            pair = lora.get((layer, module), {})
            if targeted and set(pair) != {"A", "B"}:
                raise ValueError(f"{path}: {full} is targeted but lora_A/lora_B are not both "
                                 f"present")
            if pair and not targeted:
                raise ValueError(f"{path}: {full} has an adapter but target_modules "
                                 f"{conf['targets']} does not name it")
    if not lora:
        raise ValueError(f"{path}: target_modules {conf['targets']} match no module")
    for (layer, module), pair in lora.items():
        ranks = {pair["A"].shape[0], pair["B"].shape[1]}
        if ranks != {conf["r"]}:
            raise ValueError(f"adapter_config.json: r = {conf['r']} but layer {layer} {module} "
                             f"has lora_A {tuple(pair['A'].shape)}, lora_B "
                             f"{tuple(pair['B'].shape)}")


def apply_saved(params, saved, conf, arch, path):
    """Replaces the base parameters of modules_to_save by the adapter's copies."""
    for hf_name, t in saved.items():
        module = hf_name.rsplit(".", 1)[0]
        if not any(peft_matches(module, m) for m in conf["to_save"]):
            raise ValueError(f"{path}: tensor '{hf_name}' is neither a LoRA tensor nor in "
                             f"modules_to_save {conf['to_save']}")
        name, transposed = arch.strata_name(hf_name)
        value = tg.to_torch(t)
        value = value.t().contiguous() if transposed else value
        if value.dtype != torch.float32 or value.shape != params[name].shape:
            raise ValueError(f"{path}: modules_to_save tensor '{hf_name}' is {value.dtype} "
                             f"{tuple(value.shape)}, expected F32 {tuple(params[name].shape)}")
        params[name] = value


def read_tokens(path, cfg):
    raw, _ = tg.read_safetensors(path)
    if "tokens" not in raw:
        raise ValueError(f"{path}: tensor 'tokens' missing")
    tokens = tg.to_torch(raw["tokens"])
    if tokens.dtype != torch.int32 or tokens.dim() != 2 or tokens.numel() == 0:
        raise ValueError(f"{path}: tokens are {tokens.dtype} {tuple(tokens.shape)}, "
                         f"expected I32 (B, T)")
    if tokens.shape[1] > cfg.context_length:
        raise ValueError(f"{path}: T = {tokens.shape[1]} exceeds context_length "
                         f"{cfg.context_length}")
    if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
        raise ValueError(f"{path}: tokens outside [0, {cfg.vocab_size})")
    return tokens.long()


def logits_of(arch, cfg, params, tokens, arch_type=None, lora=None, conf=None):
    """Logits of the reference model with `params`, LoRA applied unmerged when `lora` is given."""
    model = arch.make(cfg)
    arch.module.load_params(model, params)
    if lora is not None:
        adapters = {key: (pair["A"], pair["B"]) for key, pair in lora.items()}
        tlo.apply_lora(model, arch_type, adapters, conf["r"], conf["alpha"])
    with torch.no_grad():
        return model(tokens)[0]


def run(base_dir, adapter_dir, merged_dir, tokens_path):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    cfg, arch, arch_type, base = hfd.load_hf_dir(base_dir)
    conf = read_adapter_config(os.path.join(adapter_dir, "adapter_config.json"), arch_type)
    adapter_path = os.path.join(adapter_dir, "adapter_model.safetensors")
    lora, saved = split_adapter(tg.read_safetensors(adapter_path)[0], arch_type, adapter_path)
    check_targets(lora, cfg, conf, arch_type, adapter_path)
    cfg_m, arch_m, type_m, merged = hfd.load_hf_dir(merged_dir)
    if (type_m, cfg_m) != (arch_type, cfg):
        raise ValueError(f"{merged_dir}: config.json describes {type_m} {cfg_m}, the base is "
                         f"{arch_type} {cfg}")
    tokens = read_tokens(tokens_path, cfg)

    tuned = dict(base)
    apply_saved(tuned, saved, conf, arch, adapter_path)
    a = logits_of(arch, cfg, tuned, tokens, arch_type, lora, conf)
    b = logits_of(arch, cfg, merged, tokens)
    plain = logits_of(arch, cfg, base, tokens)
    err = (a - b).abs().max().item()
    scale = a.abs().max().item()
    rel = err / scale if scale > 0 else err
    effect = (a - plain).abs().max().item()
    ok = err <= ABS_TOL and rel <= REL_TOL and effect > 0
    B, T = tokens.shape
    print(f"torch_peft_check: {'ok' if ok else 'FAILED'}: {arch_type} r={conf['r']} "
          f"alpha={conf['alpha']:g}, {len(lora)} adapted modules, base "
          f"{conf['base']!r}; logits ({B}, {T}, {cfg.vocab_size}) merged vs unmerged max abs "
          f"error {err:.3e} (limit {ABS_TOL:g}), relative {rel:.3e} (limit {REL_TOL:g}); the "
          f"adapter moves the base's logits by {effect:.3e} (must be > 0)")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description="check a PEFT adapter against its merged export")
    ap.add_argument("base_dir", help="Hugging Face directory of the base model")
    ap.add_argument("adapter_dir", help="PEFT adapter directory")
    ap.add_argument("merged_dir", help="Hugging Face directory of the merged model")
    ap.add_argument("tokens", help="safetensors with 'tokens' (I32, (B, T))")
    args = ap.parse_args(argv)
    try:
        return run(args.base_dir, args.adapter_dir, args.merged_dir, args.tokens)
    except Exception as e:  # noqa: BLE001  one line for the calling test, whatever went wrong
        msg = str(e).splitlines()[0] if str(e) else ""
        print(f"torch_peft_check: FAILED: {type(e).__name__}: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
