#!/usr/bin/env python3
"""bench/lora.sh's helper: the disk it needs, a child's peak RSS, and the report.

  need --layers L --embd C --big-layers L --big-embd C --vocab V --seq T   bytes of free disk
  run OUT.rss CMD...                          runs CMD; writes its peak RSS (bytes, getrusage)
  report DIR --ram B ...                      the table and the last-line JSON
"""
import argparse
import json
import math
import statistics

from scale_report import cmd_run, param_count, rss, steps  # GPT-2's count, getrusage, metrics

GIB = 1 << 30
GOAL_READ_BF16 = 4.2       # bytes read per base parameter per step
GOAL_RSS = 4 * GIB         # (a), LoRA
GOAL_BIG_RSS = 6 * GIB     # (b)
GOAL_BIG_OVER_RAM = 1.3
GOAL_OVER_ROOFLINE = 1.15
GOAL_PLANNER = 0.15


def cmd_need(a):
    full = param_count(a.layers, a.embd, a.vocab, a.seq)
    big = param_count(a.big_layers, a.big_embd, a.vocab, 64)
    # (a) full: 18 B/param (bf16 params, f32 master, m, v, gradient); (b): 2 B/param of base and
    # the embed group's f32 state (12 B per element); 10% slack for padding and the file system.
    print(int(max(18 * full, 2 * big + 12 * a.vocab * a.big_embd) * 1.1))


def median_after_first(rows, key):
    kept = [r[key] for r in rows if r["step"] >= 2] or [r[key] for r in rows]
    return statistics.median(kept)


def plan(d, name):
    with open(f"{d}/plan_{name}.json") as f:
        return json.load(f)


def cmd_report(a):
    d = a.dir
    base = param_count(a.layers, a.embd, a.vocab, a.seq)
    lora, full = steps(f"{d}/a_lora.jsonl"), steps(f"{d}/a_full.jsonl")
    read = median_after_first(lora, "storage_read_bytes") / base
    write = median_after_first(lora, "storage_write_bytes") / base
    full_read = median_after_first(full, "storage_read_bytes") / base
    full_write = median_after_first(full, "storage_write_bytes") / base
    tps_lora, tps_full = (median_after_first(r, "tokens_per_s") for r in (lora, full))
    roofline = median_after_first(lora, "over_roofline")
    rss_lora, rss_full = rss(d, "a_lora"), rss(d, "a_full")

    big_params = param_count(a.big_layers, a.big_embd, a.vocab, a.big_seq)
    big = steps(f"{d}/b_lora.jsonl")
    big_losses = [r["loss"] for r in big]
    big_falling = all(math.isfinite(x) for x in big_losses) and big_losses[-1] < big_losses[0]
    big_over_ram = 2 * big_params / a.ram
    rss_big = rss(d, "b_lora")

    errors = {}
    for name, rows in (("a_lora", lora), ("a_full", full), ("b_lora", big)):
        measured = median_after_first(rows, "iter_s")
        errors[name] = abs(plan(d, name)["iter_s"] - measured) / measured
    predictions = {}
    for prof in ("a100-80gb-4nvme", "h200-141gb-4nvme"):
        l, f = plan(d, f"70b_lora_{prof}"), plan(d, f"70b_full_{prof}")
        predictions[prof] = {"lora_tokens_per_s": l["tokens_per_s"],
                             "full_tokens_per_s": f["tokens_per_s"],
                             "lora_over_full": l["tokens_per_s"] / f["tokens_per_s"]}

    print(f"(a) {a.layers} x {a.embd}: {base / 1e9:.2f}B base parameters; per step per base "
          f"parameter LoRA reads {read:.3f} B and writes {write:.4f} B (full fine-tuning "
          f"{full_read:.2f} B and {full_write:.2f} B); tokens/s LoRA {tps_lora:.1f}, full "
          f"{tps_full:.1f} ({tps_lora / tps_full:.2f}x); over_roofline {roofline:.3f}; peak RSS "
          f"LoRA {rss_lora / GIB:.2f} GiB, full {rss_full / GIB:.2f} GiB")
    print(f"(b) {a.big_layers} x {a.big_embd}: {big_params / 1e9:.2f}B, bf16 base "
          f"{big_over_ram:.2f}x RAM; losses {big_losses}; peak RSS {rss_big / GIB:.2f} GiB")
    print("(c) planner relative error: " +
          ", ".join(f"{k} {v * 100:.1f}%" for k, v in errors.items()))
    print("(d) Llama 3 70B tokens/s: " + "; ".join(
        f"{p}: LoRA {v['lora_tokens_per_s']:.0f}, full {v['full_tokens_per_s']:.0f} "
        f"({v['lora_over_full']:.2f}x)" for p, v in predictions.items()))
    print(json.dumps({
        "load_at_start": a.load,
        "base_params": base,
        "read_bytes_per_base_param_bf16": read,
        "write_bytes_per_base_param_bf16": write,
        "read_bytes_per_base_param_nf4": None,
        "full_read_bytes_per_param": full_read,
        "full_write_bytes_per_param": full_write,
        "read_goal_met": read <= GOAL_READ_BF16,
        "peak_rss_bytes": rss_lora,
        "peak_rss_ok": rss_lora <= GOAL_RSS,
        "full_peak_rss_bytes": rss_full,
        "lora_tokens_per_s": tps_lora,
        "full_tokens_per_s": tps_full,
        "lora_over_full_tokens_per_s": tps_lora / tps_full,
        "over_roofline": roofline,
        "over_roofline_ok": roofline <= GOAL_OVER_ROOFLINE,
        "big_params": big_params,
        "big_base_bytes_over_ram": big_over_ram,
        "big_losses": big_losses,
        "big_loss_falling": big_falling,
        "big_peak_rss_bytes": rss_big,
        "big_peak_rss_ok": rss_big <= GOAL_BIG_RSS and big_over_ram >= GOAL_BIG_OVER_RAM,
        "planner_rel_errors": errors,
        "planner_max_rel_error": max(errors.values()),
        "planner_ok": max(errors.values()) <= GOAL_PLANNER,
        "llama3_70b_predicted": predictions,
    }))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd_name", required=True)
    n = sub.add_parser("need")
    for k in ("layers", "embd", "big-layers", "big-embd", "vocab", "seq"):
        n.add_argument(f"--{k}", type=int, required=True)
    r = sub.add_parser("run")
    r.add_argument("rss_file")
    r.add_argument("cmd", nargs=argparse.REMAINDER)
    rep = sub.add_parser("report")
    rep.add_argument("dir")
    rep.add_argument("--ram", type=int, required=True)
    rep.add_argument("--load", type=float, required=True)
    for k in ("layers", "embd", "big-layers", "big-embd", "vocab", "seq", "big-seq"):
        rep.add_argument(f"--{k}", type=int, required=True)
    a = p.parse_args()
    {"need": cmd_need, "run": cmd_run, "report": cmd_report}[a.cmd_name](a)


if __name__ == "__main__":
    main()
