#!/usr/bin/env bash
# CTest `parity_torch`: Strata's in-memory GPT-2 against PyTorch (tests/parity/parity_check.cpp).
# With Debian's python3-torch present, the fixture is regenerated from the weights Strata writes
# now; without it, the committed fixture is used; with neither, the test fails.
set -euo pipefail
: "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
committed="$STRATA_SOURCE_DIR/tests/fixtures/parity_tiny.safetensors"
work="$STRATA_BINARY_DIR/test_tmp/parity_torch"
mkdir -p "$work"

if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  "$STRATA_BINARY_DIR/tests/parity_make_input" "$work/input.safetensors"
  /usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_parity.py" "$work/input.safetensors" \
    "$work/expected.safetensors"
  fixture="$work/expected.safetensors"
  echo "parity_torch: fixture regenerated with $(/usr/bin/python3 -c 'import torch; print("torch", torch.__version__)')"
elif [ -f "$committed" ]; then
  fixture="$committed"
  echo "parity_torch: python3-torch is not installed; using the committed fixture $committed"
else
  echo "parity_torch: FAILED: neither python3-torch nor the committed fixture is available" >&2
  exit 1
fi
STRATA_PARITY_FIXTURE="$fixture" "$STRATA_BINARY_DIR/tests/parity_check"
