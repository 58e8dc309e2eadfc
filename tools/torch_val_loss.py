#!/usr/bin/python3
"""Checks Strata's validation loss against PyTorch on the same weights and batches.

usage: torch_val_loss.py EXPORTED.safetensors VAL.bin B T BATCHES STRATA_VAL_LOSS

EXPORTED is `strata export`'s output (config.json beside it), read as torch_export_check.py reads
it (Hugging Face names only). VAL.bin is the llm.c token file given to `strata train` as data.val;
Strata's validation takes its first BATCHES (B, T) batches, llm.c style: batch i's inputs are the
B*T tokens from i*B*T, its targets the same shifted by one (a file too short for them wraps to
its start; this check refuses one). The loss is the mean over batches of each batch's mean loss.
With VAL.bin.mask beside it (Strata's loss mask: bit 1 of a token's byte set when it is trained
as a target), the other targets are -100 (ignore_index) and the loss is the mean over the
counted targets of all the batches.

Passes when the two agree to 1e-5 relative; prints both; exits 1 otherwise.
"""

import argparse
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_export_check as tec  # noqa: E402

REL_TOL = 1e-5
LLMC_MAGIC = 20240520


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    if header[0] != LLMC_MAGIC or header[1] != 1:
        raise ValueError(f"{path}: not an llm.c token file (magic {header[0]}, version {header[1]})")
    n = header[2]
    return torch.tensor(struct.unpack(f"<{n}H", data[1024:1024 + 2 * n]), dtype=torch.long)


def main():
    ap = argparse.ArgumentParser(description="check Strata's validation loss against PyTorch")
    ap.add_argument("exported")
    ap.add_argument("val")
    ap.add_argument("B", type=int)
    ap.add_argument("T", type=int)
    ap.add_argument("batches", type=int)
    ap.add_argument("strata_val_loss", type=float)
    a = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    cfg, arch = tec.config_from_hf(os.path.join(os.path.dirname(os.path.abspath(a.exported)),
                                                "config.json"))
    model = arch.make(cfg)
    arch.module.load_params(model, tec.load_export(a.exported, cfg, arch))
    tokens = read_tokens(a.val)
    targets_all = tokens.clone()
    mask_path = a.val + ".mask"
    masked = os.path.exists(mask_path)
    if masked:
        with open(mask_path, "rb") as f:
            bits = torch.tensor(list(f.read()[1024:]), dtype=torch.long)
        if bits.numel() != tokens.numel():
            raise ValueError(f"{mask_path}: {bits.numel()} entries for {tokens.numel()} tokens")
        targets_all[(bits & 1) == 0] = -100
    bt = a.B * a.T
    if tokens.numel() < a.batches * bt + 1:
        raise ValueError(f"{a.val}: {tokens.numel()} tokens, fewer than {a.batches} batches need")
    total, counted = 0.0, 0
    with torch.no_grad():
        for i in range(a.batches):
            inputs = tokens[i * bt:i * bt + bt].view(a.B, a.T)
            targets = targets_all[i * bt + 1:i * bt + bt + 1].view(a.B, a.T)
            n = int((targets != -100).sum()) if masked else bt
            if n == 0:
                continue
            _, loss = model(inputs, targets)
            total += loss.item() * (n if masked else 1)
            counted += n
    want = total / counted if masked else total / a.batches
    rel = abs(want - a.strata_val_loss) / abs(want)
    ok = rel <= REL_TOL
    print(f"torch_val_loss: {'ok' if ok else 'FAILED'}: PyTorch {want:.7f}, Strata "
          f"{a.strata_val_loss:.7f} over {a.batches} batches of ({a.B}, {a.T}), relative "
          f"{rel:.3e} (limit {REL_TOL:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError) as e:
        print(f"torch_val_loss: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
