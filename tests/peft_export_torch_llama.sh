#!/usr/bin/env bash
# CTest `peft_export_torch_llama`: tests/peft_export_torch.sh for a GQA Llama with an untied head.
exec bash "$(dirname "$0")/peft_export_torch.sh" llama
