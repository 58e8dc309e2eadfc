#!/usr/bin/env bash
# CTest `parity_torch_masked`: parity_torch.sh with targets left out of the loss, as a chat
# prompt's (Note [Ignored targets] in src/core/targets.h), for both families: logits, the loss
# over the counted targets, every gradient and 10 AdamW steps (f32 and bf16) against PyTorch's
# cross_entropy with ignore_index -100. Step 0's first row counts no target at all.
set -euo pipefail
bash "$(dirname "$0")/parity_torch.sh" gpt2 masked
exec bash "$(dirname "$0")/parity_torch.sh" llama masked
