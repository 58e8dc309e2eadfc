#!/usr/bin/python3
"""Compares two Strata checkpoints tensor by tensor: the master weights (model.safetensors) and
AdamW's moments (exp_avg, exp_avg_sq).

usage: compare_checkpoints.py A_STEP_DIR B_STEP_DIR --rtol R [--key-bias-atol A]

For every tensor, the relative error |a - b| / |b| in the L2 norm (|a - b| alone where b is all
zero). Passes when each is at most R (R = 0: bit-identical files). Prints one JSON line
{"tensors", "max_rel", "worst", "bit_identical", "key_bias_max_abs"}; exits 1 on a mismatch or
any problem, with one line saying why.

--key-bias-atol A: GPT-2's attention key bias (the middle third of each h.L.attn.c_attn.bias)
has a gradient that is zero in exact arithmetic (softmax over keys ignores a shift that is the
same for every key), so in floating point it is rounding noise, and AdamW, which divides by the
gradient's own scale, turns noise summed in another order into a different update of up to
about lr per step. Those elements are left out of the relative errors (of the weights and both
moments) and the weights' are bounded by A in absolute value instead.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

FILES = ["model.safetensors", "exp_avg.safetensors", "exp_avg_sq.safetensors"]


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[base + begin : base + end], dtype=np.float32)
    return tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, required=True)
    ap.add_argument("--key-bias-atol", type=float, default=None)
    args = ap.parse_args()
    worst, worst_name, count, identical, key_worst = 0.0, "", 0, True, 0.0
    for file in FILES:
        pa, pb = os.path.join(args.a, file), os.path.join(args.b, file)
        for p in (pa, pb):
            if not os.path.exists(p):
                sys.exit(f"{p} does not exist")
        ta, tb = read_safetensors(pa), read_safetensors(pb)
        if ta.keys() != tb.keys():
            sys.exit(f"{file}: the checkpoints hold different tensors")
        for name, a in ta.items():
            b = tb[name]
            if a.shape != b.shape:
                sys.exit(f"{file}: {name} has {a.size} elements in one and {b.size} in the other")
            if not np.all(np.isfinite(a)) or not np.all(np.isfinite(b)):
                sys.exit(f"{file}: {name} is not finite")
            identical = identical and a.tobytes() == b.tobytes()
            if args.key_bias_atol is not None and name.endswith("attn.c_attn.bias"):
                third = a.size // 3
                if file == "model.safetensors":
                    key = np.abs(a[third : 2 * third] - b[third : 2 * third]).max()
                    key_worst = max(key_worst, float(key))
                a = np.concatenate([a[:third], a[2 * third :]])
                b = np.concatenate([b[:third], b[2 * third :]])
            diff = np.linalg.norm(a.astype(np.float64) - b.astype(np.float64))
            scale = np.linalg.norm(b.astype(np.float64))
            rel = diff / scale if scale > 0 else diff
            count += 1
            if rel > worst:
                worst, worst_name = rel, f"{file}:{name}"
    print(json.dumps({"tensors": count, "max_rel": worst, "worst": worst_name,
                      "bit_identical": identical, "key_bias_max_abs": key_worst}))
    if args.key_bias_atol is not None and key_worst > args.key_bias_atol:
        sys.exit(f"checkpoints differ: an attention key bias by {key_worst:.3g} > "
                 f"{args.key_bias_atol:g}")
    if worst > args.rtol or (args.rtol == 0 and not identical):
        sys.exit(f"checkpoints differ: {worst_name} relative error {worst:.3g} > {args.rtol:g}")


if __name__ == "__main__":
    main()
