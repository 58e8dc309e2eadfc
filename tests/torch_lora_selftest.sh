#!/usr/bin/env bash
# CTest `torch_lora_selftest`: the PyTorch LoRA reference (tools/torch_lora.py) and the PEFT
# export check (tools/torch_peft_check.py) checked on tiny random GPT-2 and GQA Llama models by
# tools/torch_lora_selftest.py: B = 0 gives the base's logits, gradients against finite
# differences in float64, a q_proj LoRA touches only q's rows, the PEFT check passes on a true
# merge and fails on wrong ones. Fails (never skips) without Debian's python3-torch: the LoRA
# parity tests rest on these tools.
set -euo pipefail
: "${STRATA_SOURCE_DIR:?}"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "torch_lora_selftest: FAILED: /usr/bin/python3 cannot import torch (Debian's python3-torch)" >&2
  exit 1
fi
/usr/bin/python3 "$STRATA_SOURCE_DIR/tools/torch_lora_selftest.py"
