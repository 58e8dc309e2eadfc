#!/usr/bin/env python3
"""bench/scale.sh's helper: the disk it needs, a child's peak RSS, and the report.

  need --layers L --embd C --vocab V --seq T   bytes of free disk the benchmark needs
  run OUT.rss CMD...                          runs CMD; writes its peak RSS (bytes, getrusage)
  report DIR --ram B ...                      the table and the last-line JSON
"""
import argparse
import json
import math
import resource
import statistics
import subprocess
import sys

GIB = 1 << 30
GOAL_RSS = 6 * GIB
GOAL_DEPTH_RATIO = 1.10
GOAL_BF16 = 1.6


def param_count(layers, c, vocab, seq):
    return layers * (12 * c * c + 13 * c) + vocab * c + seq * c + 2 * c


def cmd_need(a):
    big = param_count(a.layers, a.embd, a.vocab, a.seq)
    resume = param_count(18, a.embd, a.vocab, a.seq)
    # (a): 18 B/param in the store (2 bf16 + 12 master, m, v + 4 gradient) and some checkpoints;
    # (c): its store and two 12 B/param checkpoints. 10% slack for padding and the file system.
    print(int(max(18 * big, 18 * resume + 2 * 12 * resume) * 1.1))


def cmd_run(a):
    with open(a.rss_file, "w") as f:
        proc = subprocess.run(a.cmd)
        # ru_maxrss of the children: the largest resident set of any child, in KiB (Linux).
        f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024) + "\n")
    sys.exit(proc.returncode)


def steps(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def rss(d, name):
    with open(f"{d}/{name}.rss") as f:
        return int(f.read())


def tokens_per_s(path):
    kept = [s for s in steps(path) if s["step"] >= 2]
    return statistics.median(s["tokens_per_s"] for s in kept)


def cmd_report(a):
    d = a.dir
    big, depth = steps(f"{d}/big.jsonl"), steps(f"{d}/depth.jsonl")
    losses = [s["loss"] for s in big]
    finite = all(math.isfinite(x) for x in losses)
    falling = finite and losses[-1] < losses[0]
    state = big[-1]["store_bytes"]
    params = param_count(a.layers, a.embd, a.vocab, a.seq)
    rss_big, rss_depth = rss(d, "big"), rss(d, "depth")
    ratio = max(rss_big, rss_depth) / min(rss_big, rss_depth)

    straight, resumed = steps(f"{d}/straight.jsonl"), steps(f"{d}/resumed.jsonl")
    tail = [s["loss"] for s in straight if s["step"] >= 3]
    same_losses = tail == [s["loss"] for s in resumed]
    with open(f"{d}/straight_step4_manifest.json") as f:
        want = {e["name"]: e["crc32c"] for e in json.load(f)["files"]}
    # The resumed run's step-4 checkpoint was removed after the export; its manifest was kept.
    with open(f"{d}/resumed_step4_manifest.json") as f:
        got = {e["name"]: e["crc32c"] for e in json.load(f)["files"]}
    # Every file the same, names and CRC32C, but trainer_state.json, which also names the run
    # that wrote it (Note [Checkpoint lineage]): its other fields must be equal.
    def run_free_state(name):
        with open(f"{d}/{name}_step4_trainer_state.json") as f:
            return {k: v for k, v in json.load(f).items() if k not in ("run_id", "lineage")}
    want.pop("trainer_state.json", None)
    got.pop("trainer_state.json", None)
    same_files = got == want and run_free_state("straight") == run_free_state("resumed")
    rss_save, rss_resume, rss_export = rss(d, "straight"), rss(d, "resumed"), rss(d, "export")

    d_tps = {}
    for prec in ("f32", "bf16"):
        for optim in ("storage", "host"):
            d_tps[(prec, optim)] = statistics.median(
                tokens_per_s(f"{d}/d_{prec}_{optim}_{r}.jsonl") for r in (1, 2, 3))
    bf16_over_f32 = d_tps[("bf16", "storage")] / d_tps[("f32", "storage")]
    bf16_over_f32_optim_host = d_tps[("bf16", "host")] / d_tps[("f32", "host")]

    print(f"(a) {a.layers} x {a.embd}: {params / 1e9:.2f}B parameters, state {state / GIB:.1f} GiB "
          f"= {state / a.ram:.2f}x RAM ({a.ram / GIB:.1f} GiB); losses {losses}; peak RSS "
          f"{rss_big / GIB:.2f} GiB (planned device + host "
          f"{(big[-1]['planned_device_bytes'] + big[-1]['planned_host_bytes']) / GIB:.2f} GiB); "
          f"iteration {statistics.median(s['iter_s'] for s in big[1:] or big):.0f} s")
    print(f"(b) {a.small_layers} x {a.embd}: peak RSS {rss_depth / GIB:.2f} GiB; "
          f"ratio {ratio:.3f}")
    print(f"(c) resume: losses equal {same_losses}, step-4 files equal {same_files}; peak RSS "
          f"training with saves {rss_save / GIB:.2f} GiB, resume {rss_resume / GIB:.2f} GiB, "
          f"export {rss_export / GIB:.2f} GiB")
    print(f"(d) rate {a.rate / 1e6:.0f} MB/s; median tokens/s: " +
          ", ".join(f"{p}/{o} {v:.0f}" for (p, o), v in d_tps.items()) +
          f"; bf16/f32 {bf16_over_f32:.2f}x (optimizer state on storage), "
          f"{bf16_over_f32_optim_host:.2f}x (on host)")
    print(json.dumps({
        "load_at_start": a.load,
        "params": params,
        "state_bytes": state,
        "ram_bytes": a.ram,
        "state_over_ram": state / a.ram,
        "losses": losses,
        "loss_finite_and_falling": falling,
        "host_peak_rss_bytes": rss_big,
        "host_peak_rss_ok": rss_big <= GOAL_RSS,
        "depth_peak_rss_bytes": rss_depth,
        "host_peak_depth_ratio": ratio,
        "host_peak_depth_ok": ratio <= GOAL_DEPTH_RATIO,
        "save_peak_rss_bytes": rss_save,
        "resume_peak_rss_bytes": rss_resume,
        "export_peak_rss_bytes": rss_export,
        "resume_identical": same_losses and same_files,
        "bf16_over_f32": bf16_over_f32,
        "bf16_over_f32_optim_on_host": bf16_over_f32_optim_host,
        "bf16_goal_met": bf16_over_f32 >= GOAL_BF16,
    }))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd_name", required=True)
    n = sub.add_parser("need")
    for k in ("layers", "embd", "vocab", "seq"):
        n.add_argument(f"--{k}", type=int, required=True)
    r = sub.add_parser("run")
    r.add_argument("rss_file")
    r.add_argument("cmd", nargs=argparse.REMAINDER)
    rep = sub.add_parser("report")
    rep.add_argument("dir")
    for k in ("ram", "rate", "layers", "small-layers", "embd", "vocab", "seq"):
        rep.add_argument(f"--{k}", type=int, required=True)
    rep.add_argument("--load", type=float, required=True)
    a = p.parse_args()
    {"need": cmd_need, "run": cmd_run, "report": cmd_report}[a.cmd_name](a)


if __name__ == "__main__":
    main()
