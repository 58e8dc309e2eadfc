#!/usr/bin/env bash
# CTest `parity_torch_llama`: the Llama case of parity_torch.sh (a GQA Llama with an untied head
# and llama3 rope scaling against tools/torch_llama.py).
exec bash "$(dirname "$0")/parity_torch.sh" llama
