#!/usr/bin/python3
"""Block quantization written from the QLoRA paper (Dettmers et al. 2023, arXiv 2305.14314), the
independent reference tests/nf4_torch.sh holds Strata's quantizer to, bit for bit.

    nf4_reference.py IN.safetensors OUT.safetensors

For every F32 tensor X of IN (flattened), for each format, OUT gets:
  X.<fmt>.codes   I32 (n)       one code per element, unpacked (nf4: 0..15, int8: -127..127)
  X.<fmt>.absmax  F32 (blocks)  nf4, int8: each block's absmax
  X.nf4_dq.mean F32 (1), X.nf4_dq.scales F32 (groups), X.nf4_dq.qabsmax I32 (blocks)
  X.<fmt>.dequant F32 (n)
The algorithm (Note [Quantized tensor format], backend/quant.h), in PyTorch f32 ops:
  - blocks of 64 (the last zero-padded, which leaves max |x| unchanged), absmax = max |x|;
  - nf4: the code minimising |x/absmax - q_i| over the paper's 16 NF4 values (Appendix E),
    torch.argmin, whose ties go to the first (lower) index; absmax 0 gives the code of 0.0;
    dequant q_c * absmax;
  - int8: round(x/absmax*127) (torch.round: half to even) clamped to +-127; q*absmax/127;
  - nf4_dq: nf4 codes, the absmax double-quantized as Strata does (QLoRA's with an int8 in
    place of its 8-bit float): mean in double over blocks in order, per group of 256 blocks
    the int8 of absmax - mean with scale max |absmax - mean|, rebuilt as q*scale/127 + mean.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2 as tg  # noqa: E402  (read_safetensors, write_safetensors)

BLOCK = 64
GROUP = 256
# QLoRA Appendix E: the NF4 data type's 16 values (also bitsandbytes' table).
NF4 = torch.tensor([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=torch.float32)


def block_absmax(x):
    """(blocks,) max |x| over each block of 64, the last zero-padded."""
    pad = (-x.numel()) % BLOCK
    padded = torch.cat([x, x.new_zeros(pad)])
    return padded.view(-1, BLOCK).abs().amax(dim=1)


def per_element(absmax, n):
    return absmax.repeat_interleave(BLOCK)[:n]


def nf4_codes(x, absmax):
    a = per_element(absmax, x.numel())
    v = torch.where(a == 0, torch.zeros_like(x), x / torch.where(a == 0, torch.ones_like(a), a))
    return (v[:, None] - NF4[None, :]).abs().argmin(dim=1)


def int8_codes(x, absmax):
    """round-half-even((x / absmax) * 127), clamped; 0 where absmax is 0."""
    safe = torch.where(absmax == 0, torch.ones_like(absmax), absmax)
    q = torch.round((x / safe) * 127.0).clamp(-127, 127)
    # Integers, as stored: torch.round(-0.3) is -0.0, and an int8 0 has no sign.
    return torch.where(absmax == 0, torch.zeros_like(q), q).to(torch.int32)


def int8_values(q, scale):
    """q * scale / 127 from the integer codes, two f32 roundings."""
    return (q.to(torch.float32) * scale) / 127.0


def double_quantize(absmax):
    """(mean (1,), scales (groups,), q (blocks,), rebuilt absmax (blocks,))."""
    total = 0.0  # a Python float is a double: summed in block order, as Strata does
    for a in absmax.tolist():
        total += a
    blocks = absmax.numel()
    mean = torch.tensor([total / blocks if blocks else 0.0], dtype=torch.float64).float()
    centered = absmax - mean
    pad = (-blocks) % GROUP
    scales = torch.cat([centered.abs(), centered.new_zeros(pad)]).view(-1, GROUP).amax(dim=1)
    scale_each = scales.repeat_interleave(GROUP)[:blocks]
    q = int8_codes(centered, scale_each)
    return mean, scales, q, int8_values(q, scale_each) + mean


def quantize_all(name, x, out):
    n = x.numel()
    absmax = block_absmax(x)
    codes = nf4_codes(x, absmax)
    out[f"{name}.nf4.codes"] = codes.to(torch.int32)
    out[f"{name}.nf4.absmax"] = absmax
    out[f"{name}.nf4.dequant"] = NF4[codes] * per_element(absmax, n)
    q = int8_codes(x, per_element(absmax, n))
    out[f"{name}.int8.codes"] = q
    out[f"{name}.int8.absmax"] = absmax
    out[f"{name}.int8.dequant"] = int8_values(q, per_element(absmax, n))
    mean, scales, qabs, rebuilt = double_quantize(absmax)
    out[f"{name}.nf4_dq.codes"] = codes.to(torch.int32)
    out[f"{name}.nf4_dq.mean"] = mean
    out[f"{name}.nf4_dq.scales"] = scales
    out[f"{name}.nf4_dq.qabsmax"] = qabs
    out[f"{name}.nf4_dq.dequant"] = NF4[codes] * per_element(rebuilt, n)


def main(argv):
    if len(argv) != 3:
        print("usage: nf4_reference.py IN.safetensors OUT.safetensors", file=sys.stderr)
        return 2
    tensors, _ = tg.read_safetensors(argv[1])
    out = {}
    for name, raw in tensors.items():
        if raw.dtype != "F32":
            print(f"{argv[1]}: tensor {name} is {raw.dtype}, not F32", file=sys.stderr)
            return 1
        x = tg.to_torch(raw).reshape(-1)
        if not torch.isfinite(x).all():
            print(f"{argv[1]}: tensor {name} has a NaN or an infinity", file=sys.stderr)
            return 1
        quantize_all(name, x, out)
    tg.write_safetensors(argv[2], out, {"torch": torch.__version__})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
