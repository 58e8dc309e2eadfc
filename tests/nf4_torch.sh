#!/usr/bin/env bash
# CTest `nf4_torch`: Strata's block quantization (backend/quant.h; nf4, int8, nf4_dq) against the
# independent PyTorch reference tools/nf4_reference.py, bit for bit: codes, absmax (nf4_dq: mean,
# scales, int8 absmax) and dequantized values (tests/parity/nf4_check.cpp). python3-torch is a
# project dependency (scripts/setup.sh): without it the test fails, it does not skip.
set -euo pipefail
: "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/nf4_torch"
mkdir -p "$work"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "nf4_torch: FAILED: /usr/bin/python3 cannot import torch (apt-get install python3-torch; scripts/setup.sh)" >&2
  exit 1
fi
check="$STRATA_BINARY_DIR/tests/nf4_check"
"$check" write "$work/input.safetensors"
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/nf4_reference.py" "$work/input.safetensors" \
  "$work/reference.safetensors"
"$check" compare "$work/input.safetensors" "$work/reference.safetensors"
