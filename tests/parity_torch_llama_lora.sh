#!/usr/bin/env bash
# CTest `parity_torch_llama_lora`: LoRA on every linear layer of a GQA Llama with an untied head,
# the adapters of q, k, v and of gate, up adding into their rows of the fused matmuls, against
# tools/torch_lora.py (parity_torch.sh; Note [LoRA] in src/model/lora.h).
exec bash "$(dirname "$0")/parity_torch.sh" llama lora
