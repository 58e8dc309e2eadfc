#!/usr/bin/python3
"""Reads a Hugging Face model directory into the PyTorch references' parameter names.

A directory holds config.json (model_type gpt2 or llama) and either model.safetensors or the
shards model-0000i-of-0000n.safetensors listed by model.safetensors.index.json. Names and the
config are read with tools/torch_export_check.py's tables (one definition of the HF layout);
GPT-2 names may carry GPT2LMHeadModel's `transformer.` prefix (save_pretrained writes it, the
original checkpoints and `strata export` do not).
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_export_check as tec  # noqa: E402
import torch_gpt2 as tg  # noqa: E402

GPT2_PREFIX = "transformer."
# GPT-2's causal-mask buffers, which some Hugging Face checkpoints store beside the parameters:
# not weights, so not read.
GPT2_BUFFER = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")


def model_type(config_path):
    with open(config_path) as f:
        return json.load(f).get("model_type")


def weight_files(model_dir):
    """The safetensors files of a model directory, refusing an ambiguous or partial one."""
    single = os.path.join(model_dir, "model.safetensors")
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    has_single, has_index = os.path.isfile(single), os.path.isfile(index_path)
    if has_single and has_index:
        raise ValueError(f"{model_dir}: both model.safetensors and an index: which is the model?")
    if has_single:
        return [single], None
    if not has_index:
        raise ValueError(f"{model_dir}: neither model.safetensors nor "
                         f"model.safetensors.index.json")
    with open(index_path) as f:
        weight_map = json.load(f).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index_path}: no weight_map")
    shards = sorted(set(weight_map.values()))
    return [os.path.join(model_dir, s) for s in shards], weight_map


def read_tensors(model_dir):
    """{HF name: RawTensor} of every tensor in the directory, each name once, as indexed."""
    files, weight_map = weight_files(model_dir)
    raw = {}
    for path in files:
        tensors, meta = tg.read_safetensors(path)
        if meta.get("format") != "pt":
            raise ValueError(f"{path}: metadata format is {meta.get('format')!r}, HF's loader "
                             f"wants 'pt'")
        for name, t in tensors.items():
            if name in raw:
                raise ValueError(f"{path}: tensor '{name}' appears twice in {model_dir}")
            if weight_map is not None and weight_map.get(name) != os.path.basename(path):
                raise ValueError(f"{path}: tensor '{name}' is not indexed to this shard")
            raw[name] = t
    if weight_map is not None and set(weight_map) != set(raw):
        missing = sorted(set(weight_map) - set(raw))
        raise ValueError(f"{model_dir}: indexed tensors missing from the shards: {missing[:3]}")
    return raw


def strip_gpt2_prefix(hf_name, arch_type):
    if arch_type == "gpt2" and hf_name.startswith(GPT2_PREFIX):
        return hf_name[len(GPT2_PREFIX):]
    return hf_name


def load_hf_dir(model_dir):
    """(cfg, tec.Arch, model type, {Strata name: F32 tensor}) of a Hugging Face model directory;
    every parameter of the config's model present exactly once, Conv1D weights transposed to
    (out, in)."""
    config_path = os.path.join(model_dir, "config.json")
    cfg, arch = tec.config_from_hf(config_path)
    arch_type = model_type(config_path)
    params = {}
    for hf_name, t in read_tensors(model_dir).items():
        short = strip_gpt2_prefix(hf_name, arch_type)
        if arch_type == "gpt2" and GPT2_BUFFER.match(short):
            continue
        name, transposed = arch.strata_name(short)
        if t.dtype != "F32":
            raise ValueError(f"{model_dir}: tensor '{hf_name}' is {t.dtype}, expected F32")
        if name in params:
            raise ValueError(f"{model_dir}: '{hf_name}' names {name} a second time")
        value = tg.to_torch(t)
        params[name] = value.t().contiguous() if transposed else value
    expected = {name for name, _ in arch.module.param_shapes(cfg)}
    missing, extra = sorted(expected - params.keys()), sorted(params.keys() - expected)
    if missing or extra:
        raise ValueError(f"{model_dir}: missing {missing[:3]}, unexpected {extra[:3]} for "
                         f"{cfg.n_layer} layers")
    return cfg, arch, arch_type or "gpt2", params
