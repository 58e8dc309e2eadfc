"""Pools the repetitions written by bench/kernels_vs_torch.sh and prints the comparison table,
then one JSON object as the last line."""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    out, threads = sys.argv[1], int(sys.argv[2])
    rows = []
    for B in (1, 2, 3, 4):
        s_times = [t for run in load(f"{out}/strata_block.jsonl")
                   for row in run["rows"] if row["B"] == B for t in row["times_s"]]
        t_best = None
        for run in load(f"{out}/torch_block.jsonl"):
            for row in run["rows"]:
                if row["B"] != B:
                    continue
                for impl in ("explicit", "sdpa"):
                    if f"{impl}_times_s" in row:
                        t_best = t_best or {}
                        t_best.setdefault(impl, []).extend(row[f"{impl}_times_s"])
        # PyTorch's figure is its faster attention path.
        impl, t_times = min(t_best.items(), key=lambda kv: statistics.median(kv[1]))
        tokens = B * 1024
        s_tps = tokens / statistics.median(s_times)
        t_tps = tokens / statistics.median(t_times)
        rows.append({"B": B, "strata_tokens_per_s": round(s_tps, 1),
                     "torch_tokens_per_s": round(t_tps, 1), "torch_attention": impl,
                     "ratio": round(s_tps / t_tps, 3), "strata_reps": len(s_times),
                     "torch_reps": len(t_times)})
    s_step = [t for run in load(f"{out}/strata_step.jsonl") for t in run["times_s"]]
    t_step = [t for run in load(f"{out}/torch_step.jsonl") for t in run["times_s"]]
    step = {"strata_s": round(statistics.median(s_step), 3),
            "torch_s": round(statistics.median(t_step), 3),
            "strata_tokens_per_s": round(1024 / statistics.median(s_step), 1),
            "torch_tokens_per_s": round(1024 / statistics.median(t_step), 1)}
    step["ratio"] = round(step["torch_s"] / step["strata_s"], 3)

    print(f"GPT-2-small block fwd+bwd, C=768 NH=12 T=1024, {threads} threads (medians)")
    print(f"{'B':>2} {'strata tok/s':>13} {'torch tok/s':>12} {'ratio':>6}  torch attention")
    for r in rows:
        print(f"{r['B']:>2} {r['strata_tokens_per_s']:>13.1f} {r['torch_tokens_per_s']:>12.1f} "
              f"{r['ratio']:>6.3f}  {r['torch_attention']}")
    print(f"GPT-2 124M training step (B=1, T=1024): strata {step['strata_s']} s, "
          f"torch {step['torch_s']} s, ratio {step['ratio']}")
    print(json.dumps({"threads": threads, "block": rows, "step": step,
                      "block_ratio_vs_torch": min(r["ratio"] for r in rows),
                      "step_ratio_vs_torch": step["ratio"]}))


if __name__ == "__main__":
    main()
