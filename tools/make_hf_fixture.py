#!/usr/bin/python3
"""Tiny random-weight Hugging Face models, as save_pretrained lays them out, for import tests.

usage: make_hf_fixture.py OUT_DIR --arch gpt2|llama [--dtype f32|bf16|f16] [--shards N]
           [--layers L] [--embd C] [--heads NH] [--kv-heads NKV] [--ffn F] [--vocab V]
           [--ctx T] [--tied | --untied] [--rope-scaling [--original-ctx N]] [--prefix] [--buffers]
           [--lm-head]
           [--seed S] [--tokenizer] [--config KEY=JSON ...]
       make_hf_fixture.py --each-line FILE|-
           one fixture per non-empty line of FILE (or stdin), each line the arguments above
           as shell words: one Python start and one torch import for all of them

Writes OUT_DIR/config.json (HF's GPT2Config or LlamaConfig) and the weights under HF's names and
shapes: OUT_DIR/model.safetensors, or with --shards N >= 2 the shards
model-0000i-of-0000N.safetensors and model.safetensors.index.json ({"metadata": {"total_size"},
"weight_map"}), tensors split in state-dict order into N groups of about equal bytes.

  GPT-2:  wte.weight (V, C), wpe.weight (T, C), h.{l}.ln_{1,2}.{weight,bias},
          h.{l}.attn.c_attn.{weight (C, 3C), bias}, h.{l}.attn.c_proj.{weight (C, C), bias},
          h.{l}.mlp.c_fc.{weight (C, 4C), bias}, h.{l}.mlp.c_proj.{weight (4C, C), bias},
          ln_f.{weight,bias}: Conv1D weights (in, out). --prefix writes GPT2LMHeadModel's
          "transformer." prefix; --buffers adds h.{l}.attn.bias (1, 1, T, T) and
          h.{l}.attn.masked_bias (); --lm-head adds the tied lm_head.weight (a copy of wte).
  Llama:  model.embed_tokens.weight (V, C), model.layers.{l}.input_layernorm.weight,
          model.layers.{l}.self_attn.{q,k,v,o}_proj.weight ((C, C), (Ckv, C), (Ckv, C), (C, C)),
          model.layers.{l}.post_attention_layernorm.weight,
          model.layers.{l}.mlp.{gate,up,down}_proj.weight ((F, C), (F, C), (C, F)),
          model.norm.weight, lm_head.weight (V, C) unless --tied: Linear weights (out, in).
          Grouped-query attention by default (--kv-heads 2 of --heads 4). --buffers adds
          model.layers.{l}.self_attn.rotary_emb.inv_freq; --lm-head writes lm_head.weight even
          when tied (a copy of the embedding).

Values are drawn from a seeded torch.Generator, large enough (std 0.1 for matrices, norm gains
around 1) that a wrong name, transpose or conversion changes the loss well beyond rounding, then
rounded to --dtype. --config KEY=JSON sets or overrides a config.json field (JSON null removes
it), for tests of configs Strata refuses.

The safetensors writer here is its own (8-byte little-endian header length, JSON header padded
with spaces to 8 bytes, raw little-endian data): no `safetensors` package. read_model(DIR) reads
such a directory back as {name: float32 tensor} (single file or shards, any of the three dtypes),
for reference computations in PyTorch. Needs only Debian's python3-torch (/usr/bin/python3).
"""

import argparse
import shlex
import json
import os
import struct
import sys

import torch

DTYPES = {"f32": (torch.float32, "F32"), "bf16": (torch.bfloat16, "BF16"),
          "f16": (torch.float16, "F16")}
ST_TO_TORCH = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


# ---------------------------------------------------------------------------------------------
# safetensors


def tensor_bytes(t):
    """The raw little-endian bytes of a float32, bfloat16 or float16 tensor."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)  # numpy has no bfloat16
    return t.numpy().tobytes()


def write_safetensors(path, tensors):
    """tensors: [(name, tensor)] written in that order, with metadata {"format": "pt"}."""
    header = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, t in tensors:
        data = tensor_bytes(t)
        header[name] = {"dtype": {v[0]: v[1] for v in DTYPES.values()}[t.dtype],
                        "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def read_safetensors(path):
    """{name: float32 tensor} of one file's float tensors, in header order."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = ST_TO_TORCH[info["dtype"]]
        raw = bytearray(blob[base + begin:base + end])
        if dtype == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(raw, dtype=dtype) if raw else torch.zeros(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).to(torch.float32)
    return out


def read_model(out_dir):
    """(config.json as a dict, {name: float32 tensor}) of a model directory."""
    with open(os.path.join(out_dir, "config.json")) as f:
        config = json.load(f)
    single = os.path.join(out_dir, "model.safetensors")
    if os.path.exists(single):
        return config, read_safetensors(single)
    with open(os.path.join(out_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    tensors = {}
    for shard in dict.fromkeys(index["weight_map"].values()):
        tensors.update(read_safetensors(os.path.join(out_dir, shard)))
    return config, tensors


# ---------------------------------------------------------------------------------------------
# Models


def gpt2_model(a, gen):
    V, C, T, L = a.vocab, a.embd, a.ctx, a.layers
    rand = lambda *shape, std=0.1: torch.randn(*shape, generator=gen) * std  # noqa: E731
    gain = lambda n: 1.0 + rand(n)  # noqa: E731
    tensors = [("wte.weight", rand(V, C, std=0.5)), ("wpe.weight", rand(T, C))]
    for l in range(L):
        p = f"h.{l}."
        tensors += [
            (p + "ln_1.weight", gain(C)), (p + "ln_1.bias", rand(C)),
            (p + "attn.c_attn.weight", rand(C, 3 * C)), (p + "attn.c_attn.bias", rand(3 * C)),
            (p + "attn.c_proj.weight", rand(C, C)), (p + "attn.c_proj.bias", rand(C)),
            (p + "ln_2.weight", gain(C)), (p + "ln_2.bias", rand(C)),
            (p + "mlp.c_fc.weight", rand(C, 4 * C)), (p + "mlp.c_fc.bias", rand(4 * C)),
            (p + "mlp.c_proj.weight", rand(4 * C, C)), (p + "mlp.c_proj.bias", rand(C)),
        ]
        if a.buffers:
            tensors += [(p + "attn.bias", torch.ones(T, T).tril().view(1, 1, T, T)),
                        (p + "attn.masked_bias", torch.tensor(-1e4))]
    tensors += [("ln_f.weight", gain(C)), ("ln_f.bias", rand(C))]
    if a.prefix:
        tensors = [("transformer." + n, t) for n, t in tensors]
    if a.lm_head:
        tensors.append(("lm_head.weight", tensors[0][1].clone()))
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
              "n_positions": T, "n_ctx": T, "n_embd": C, "n_layer": L, "n_head": a.heads,
              "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
              "tie_word_embeddings": True, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
              "attn_pdrop": 0.0, "bos_token_id": 0, "eos_token_id": 0}
    return config, tensors


def llama_model(a, gen):
    V, C, L, F = a.vocab, a.embd, a.layers, a.ffn
    hs = C // a.heads
    ckv = a.kv_heads * hs
    rand = lambda *shape, std=0.1: torch.randn(*shape, generator=gen) * std  # noqa: E731
    gain = lambda n: 1.0 + rand(n)  # noqa: E731
    tensors = [("model.embed_tokens.weight", rand(V, C, std=0.5))]
    for l in range(L):
        p = f"model.layers.{l}."
        tensors += [
            (p + "input_layernorm.weight", gain(C)),
            (p + "self_attn.q_proj.weight", rand(C, C)),
            (p + "self_attn.k_proj.weight", rand(ckv, C)),
            (p + "self_attn.v_proj.weight", rand(ckv, C)),
            (p + "self_attn.o_proj.weight", rand(C, C)),
            (p + "post_attention_layernorm.weight", gain(C)),
            (p + "mlp.gate_proj.weight", rand(F, C)),
            (p + "mlp.up_proj.weight", rand(F, C)),
            (p + "mlp.down_proj.weight", rand(C, F)),
        ]
        if a.buffers:
            inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, hs, 2).float() / hs))
            tensors.append((p + "self_attn.rotary_emb.inv_freq", inv_freq))
    tensors.append(("model.norm.weight", gain(C)))
    if not a.tied:
        tensors.append(("lm_head.weight", rand(V, C)))
    elif a.lm_head:
        tensors.append(("lm_head.weight", tensors[0][1].clone()))
    rope_scaling = None
    if a.rope_scaling:
        rope_scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0,
                        "original_max_position_embeddings": a.original_ctx or a.ctx // 2}
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": V,
              "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
              "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
              "max_position_embeddings": a.ctx, "rope_theta": a.rope_theta,
              "rope_scaling": rope_scaling, "rms_norm_eps": 1e-5, "tie_word_embeddings": a.tied,
              "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
              "attention_dropout": 0.0, "initializer_range": 0.02, "bos_token_id": 1,
              "eos_token_id": 2}
    return config, tensors


def shard(tensors, n):
    """tensors split in order into n non-empty groups of about equal bytes."""
    if n > len(tensors):
        raise ValueError(f"--shards {n} is more than the {len(tensors)} tensors")
    sizes = [t.numel() * t.element_size() for _, t in tensors]
    total, groups, start, done = sum(sizes), [], 0, 0
    for g in range(n):
        end = start + 1  # at least one tensor
        target = total * (g + 1) / n
        while end < len(tensors) - (n - g - 1) and done + sum(sizes[start:end]) < target:
            end += 1
        if g == n - 1:
            end = len(tensors)
        groups.append(tensors[start:end])
        done += sum(sizes[start:end])
        start = end
    return groups


def write_model(out_dir, config, tensors, shards):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    if shards <= 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
        return
    groups = shard(tensors, shards)
    weight_map, total = {}, 0
    for i, group in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        write_safetensors(os.path.join(out_dir, name), group)
        for tensor_name, t in group:
            weight_map[tensor_name] = name
            total += t.numel() * t.element_size()
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


def write_tokenizer(out_dir):
    """A byte-level BPE tokenizer.json (GPT-2's byte map, merges "a b" -> 256 and "Ġ ab" -> 257,
    added token <|eot|> = 300) and a tokenizer_config.json naming it the eos token."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): b for b, c in zip(bs, cs)}
    vocab.update({"ab": 256, "\u0120ab": 257})
    tok = {"normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
           "added_tokens": [{"id": 300, "content": "<|eot|>", "special": True}],
           "model": {"type": "BPE", "vocab": vocab, "merges": ["a b", "\u0120 ab"]}}
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|eot|>"}, f)


def make_fixture(argv):
    ap = argparse.ArgumentParser(description="write a tiny random Hugging Face model")
    ap.add_argument("out")
    ap.add_argument("--arch", choices=["gpt2", "llama"], required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=96)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rope-scaling", action="store_true", help="Llama 3's llama3 scaling")
    ap.add_argument("--original-ctx", type=int, default=0,
                    help="llama3 scaling's original_max_position_embeddings (default: ctx / 2)")
    tie = ap.add_mutually_exclusive_group()
    tie.add_argument("--tied", dest="tied", action="store_true", help="Llama: tied head")
    tie.add_argument("--untied", dest="tied", action="store_false", help="Llama (default)")
    ap.set_defaults(tied=False)
    ap.add_argument("--prefix", action="store_true", help="GPT-2: 'transformer.' names")
    ap.add_argument("--buffers", action="store_true", help="the buffers HF's loader ignores")
    ap.add_argument("--lm-head", action="store_true", help="a tied model's lm_head.weight copy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", action="store_true",
                    help="a small byte-level BPE tokenizer.json (301 ids) beside the model")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=JSON")
    a = ap.parse_args(argv)
    if a.arch == "gpt2" and a.tied is False and "--untied" in argv:
        ap.error("--untied: GPT-2's head is always tied")
    gen = torch.Generator().manual_seed(a.seed)
    config, tensors = (gpt2_model if a.arch == "gpt2" else llama_model)(a, gen)
    dtype, st_name = DTYPES[a.dtype]
    tensors = [(n, t.to(dtype)) for n, t in tensors]
    config["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[st_name]
    for item in a.config:
        key, _, value = item.partition("=")
        v = json.loads(value)
        if v is None:
            config.pop(key, None)
        else:
            config[key] = v
    write_model(a.out, config, tensors, a.shards)
    if a.tokenizer:
        if a.vocab < 301:
            ap.error("--tokenizer: its 301 ids need --vocab 301 or more")
        write_tokenizer(a.out)


def main():
    argv = sys.argv[1:]
    if argv[:1] != ["--each-line"]:
        make_fixture(argv)
        return 0
    if len(argv) != 2:
        sys.exit("usage: make_hf_fixture.py --each-line FILE|-")
    lines = sys.stdin if argv[1] == "-" else open(argv[1])
    for line in lines:
        if line.strip():
            make_fixture(shlex.split(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
