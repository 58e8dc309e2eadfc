#!/usr/bin/python3
"""Greedy continuation in PyTorch of a `strata export` (GPT-2 or Llama), for
tests/sample_torch.sh.

usage: torch_sample.py EXPORTED.safetensors "PROMPT TOKEN IDS" N

Prints the prompt followed by N greedy tokens, space-separated, as `strata sample
--temperature 0 --print-tokens` does: each step runs the model on the window Note [Sampling]
(src/model/sample.h) documents and appends the argmax of the last position's logits (the lowest
index among equal maxima, as torch.argmax). The window starts as the prompt's last
context_length tokens; when it would pass context_length it slides to keep its last
max(1, context_length // 2) tokens, and grows again from there.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_export_check as tec  # noqa: E402


def main():
    exported, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(2)
    cfg, arch = tec.config_from_hf(os.path.join(os.path.dirname(os.path.abspath(exported)),
                                                "config.json"))
    model = arch.make(cfg)
    arch.module.load_params(model, tec.load_export(exported, cfg, arch))
    tokens = [int(t) for t in prompt.split()]
    context = cfg.context_length
    start = max(0, len(tokens) - context)
    with torch.no_grad():
        for _ in range(n):
            if len(tokens) - start > context:
                start = len(tokens) - max(1, context // 2)
            window = torch.tensor([tokens[start:]], dtype=torch.long)
            logits, _ = model(window)
            tokens.append(int(torch.argmax(logits[0, -1])))
    print(" ".join(str(t) for t in tokens))


if __name__ == "__main__":
    main()
