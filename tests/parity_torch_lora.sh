#!/usr/bin/env bash
# CTest `parity_torch_lora`: LoRA on every linear layer of a GPT-2 against tools/torch_lora.py
# (parity_torch.sh; Note [LoRA] in src/model/lora.h).
exec bash "$(dirname "$0")/parity_torch.sh" gpt2 lora
