#!/usr/bin/python3
"""Parsing and arithmetic for bench/schedules.sh (standard library only).

  schedules_report.py rate CALIB.jsonl --layers L --embd C --micro-batches M
      The calibration: from an unthrottled vertical run, the compute time c of one micro-batch
      through one block (forward + recompute + backward), and the rate r = P / c that makes
      x = P / (r c) = 1 (P: one block's f32 parameter bytes). Prints "r c" on stdout (r in
      bytes/s, a whole MB/s; c in seconds) and the derivation on stderr.
  schedules_report.py report RUNS_DIR --rate R --layers L --embd C --vocab V --seq T --batch B
                      --alpha A --ms "1 2 4 8 16" [--calib-c S] [--trace FILE] [--wall-s S]
      The table, the trace summary, and as the last line one JSON object.

Figures per run are medians over the steps after step 0: step 0 is warm-up (first touch of
every buffer) and, for vertical, a different iteration (no pending optimizer steps yet).
"""
import argparse
import json
import statistics
import sys

RUNS = ("horizontal", "vertical", "vertical_clip", "vertical_spec", "vertical_always")
RESOURCES = ("compute", "cpu_optim", "h2d", "d2h", "storage_read", "storage_write")
GOAL_RATIO = 1.9      # vertical tokens/s >= 1.9x horizontal's where horizontal is storage-bound
GOAL_ROOFLINE = 1.15  # vertical iter_s <= 1.15x its roofline ideal
GOAL_CLIP = 1.03      # clipping with speculation: <= 1.03x clip off (rare), alpha 1 (always)


def block_param_bytes(c):
    # One GPT-2 block: qkv C*3C+3C, proj C*C+C, fc C*4C+4C, fc.proj 4C*C+C, 2 layernorms 4C.
    return 4 * (12 * c * c + 13 * c)


def param_count(layers, c, vocab, ctx):
    # Blocks, token and position embeddings (the head is tied to wte), final layernorm.
    return layers * (12 * c * c + 13 * c) + vocab * c + ctx * c + 2 * c


def load_steps(path):
    with open(path) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    if not steps:
        sys.exit(f"schedules_report: {path} holds no steps")
    return steps


def summarize(path):
    """Medians over the steps after step 0 (all steps if there is only one)."""
    steps = load_steps(path)
    kept = [s for s in steps if s["step"] >= 2] or steps
    med = lambda key: statistics.median(s[key] for s in kept)
    busy = {r: statistics.median(s["busy_s"].get(r, 0.0) for s in kept) for r in RESOURCES}
    out = {
        "tokens_per_s": med("tokens_per_s"),
        "iter_s": med("iter_s"),
        "roofline_s": med("roofline_s"),
        "busy_s": busy,
        "storage_read_bytes": med("storage_read_bytes"),
        "storage_write_bytes": med("storage_write_bytes"),
        "steps_used": len(kept),
        # Note [Speculative steps]: steps whose part 0 was repaired, of all steps.
        "repaired_steps": sum(1 for s in steps if s.get("speculation") == "repaired"),
        "speculated_steps": sum(1 for s in steps
                                if s.get("speculation") in ("speculated", "repaired")),
        "steps": len(steps),
    }
    out["over_roofline"] = out["iter_s"] / out["roofline_s"]
    cores = busy["compute"] + busy["cpu_optim"]
    out["storage_bound"] = max(busy["storage_read"], busy["storage_write"]) > cores
    return out


def cmd_rate(a):
    steps = load_steps(a.calib)
    kept = [s for s in steps if s["step"] >= 2] or steps
    # The least busy step: other work on the machine only ever inflates compute time, and the
    # rate is meant to match this CPU's own speed.
    busy = min(s["busy_s"]["compute"] for s in kept)
    c = busy / (a.micro_batches * a.layers)
    p = block_param_bytes(a.embd)
    rate = max(1, round(p / c / 1e6)) * 1_000_000
    print(f"calibration: unthrottled vertical, M={a.micro_batches}: compute busy {busy:.3f} s "
          f"per iteration (least of {len(kept)} steps) / ({a.micro_batches} micro-batches x "
          f"{a.layers} blocks) = c = {c * 1e3:.1f} ms per micro-batch per block", file=sys.stderr)
    print(f"rate = P / c = {p / 1e6:.2f} MB / {c * 1e3:.1f} ms = {p / c / 1e6:.1f} MB/s -> "
          f"{rate // 1_000_000} MB/s each direction (x = P/(r c) = {p / (rate * c):.2f})",
          file=sys.stderr)
    print(rate, f"{c:.6f}")


def trace_summary(path):
    """Per resource: busy seconds, share of the step, first and last task; compute's largest
    idle gaps and what the other resources were running meanwhile."""
    with open(path) as f:
        trace = json.load(f)
    names, by_tid = {}, {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            by_tid.setdefault(e["tid"], []).append(e)
    events = [e for es in by_tid.values() for e in es]
    if not events:
        return ["trace: no tasks"], {}
    t0 = min(e["ts"] for e in events)
    span = (max(e["ts"] + e["dur"] for e in events) - t0) / 1e6
    lines = [f"trace of the last vertical step: {span:.3f} s, {len(events)} tasks"]
    lines.append(f"  {'resource':<14}{'busy_s':>8}{'share':>7}{'tasks':>7}  first task (start s)"
                 f" .. last task (end s)")
    summary = {"span_s": round(span, 4), "resources": {}}
    for tid in sorted(by_tid):
        es = sorted(by_tid[tid], key=lambda e: e["ts"])
        busy = sum(e["dur"] for e in es) / 1e6
        first, last = es[0], max(es, key=lambda e: e["ts"] + e["dur"])
        name = names.get(tid, str(tid))
        lines.append(f"  {name:<14}{busy:8.3f}{busy / span:7.0%}{len(es):7d}  "
                     f"{first['name']} ({(first['ts'] - t0) / 1e6:.3f}) .. {last['name']} "
                     f"({(last['ts'] + last['dur'] - t0) / 1e6:.3f})")
        summary["resources"][name] = {"busy_s": round(busy, 4), "tasks": len(es)}
    # Phases: the forward (with the last block's fused forward+backward), the backward of the
    # other blocks, and the tail after the last block's backward (optimizer I/O left over).
    def busy_in(tid, a, b):
        return sum(max(0.0, min(b, e["ts"] + e["dur"]) - max(a, e["ts"])) for e in by_tid[tid]) / 1e6
    blocks = [e["args"].get("block", -1) for e in events if "args" in e]
    last = max(blocks) if blocks else -1
    bwd_start = [e["ts"] for e in events if e["name"].startswith(f"bwd blk.{last - 1} ")]
    bwd_end = [e["ts"] + e["dur"] for e in events if e["name"].startswith("bwd blk.0 ")]
    if last >= 1 and bwd_start and bwd_end:
        t_end = t0 + span * 1e6
        phases = [("forward", t0, min(bwd_start)), ("backward", min(bwd_start), max(bwd_end)),
                  ("tail", max(bwd_end), t_end)]
        shown = [t for t in sorted(by_tid) if names.get(t) in
                 ("compute", "storage_read", "storage_write")]
        lines.append("  phases, share of each busy:")
        for nm, a, b in phases:
            lines.append(f"    {nm:<9}{(b - a) / 1e6:7.3f} s: " + ", ".join(
                f"{names[t]} {busy_in(t, a, b) / max((b - a) / 1e6, 1e-9):.0%}" for t in shown))
        summary["phases_s"] = {nm: round((b - a) / 1e6, 4) for nm, a, b in phases}
    # Compute's idle gaps: where the cores waited, and on what.
    ctid = next((t for t, n in names.items() if n == "compute"), None)
    if ctid in by_tid:
        ces = sorted(by_tid[ctid], key=lambda e: e["ts"])
        gaps = []
        for prev, nxt in zip(ces, ces[1:]):
            g0, g1 = prev["ts"] + prev["dur"], nxt["ts"]
            if g1 > g0:
                gaps.append((g1 - g0, g0, g1, nxt["name"]))
        idle = sum(g[0] for g in gaps) / 1e6 + (ces[0]["ts"] - t0) / 1e6
        lines.append(f"  compute idle {idle:.3f} s ({idle / span:.0%} of the step), "
                     f"{len(gaps)} gaps; the largest:")
        for dur, g0, g1, nxt in sorted(gaps, reverse=True)[:3]:
            busy_others = []
            for tid, es in by_tid.items():
                if tid == ctid:
                    continue
                for e in es:
                    if e["ts"] < g1 and e["ts"] + e["dur"] > g0:
                        busy_others.append(f"{names.get(tid, tid)}:{e['name']}")
            lines.append(f"    {dur / 1e6:.3f} s at {(g0 - t0) / 1e6:.3f} before '{nxt}'; "
                         f"meanwhile {', '.join(busy_others[:4]) or 'nothing'}")
        summary["compute_idle_s"] = round(idle, 4)
    return lines, summary


def fmt_bool(b):
    return "yes" if b else "no"


def alpha_of(a, m):
    """The vertical run's alpha at M: chosen per M (file written by schedules.sh) or fixed."""
    try:
        return float(open(f"{a.runs}/alpha_M{m}").read())
    except OSError:
        return float(a.alpha)


def cmd_report(a):
    ms = [int(m) for m in a.ms.split()]
    p = block_param_bytes(a.embd)
    x = p / (a.rate * a.calib_c) if a.calib_c else None
    rows = []
    for m in ms:
        r = {"M": m, "tokens_per_iter": m * a.batch * a.seq, "alpha": alpha_of(a, m)}
        for name in RUNS:
            r[name] = summarize(f"{a.runs}/{name}_M{m}.jsonl")
        h, v, vc = r["horizontal"], r["vertical"], r["vertical_clip"]
        r["vertical_over_horizontal"] = v["tokens_per_s"] / h["tokens_per_s"]
        r["vertical_over_roofline"] = v["over_roofline"]
        r["clip_on_cost"] = v["tokens_per_s"] / vc["tokens_per_s"]
        r["clip_spec_cost"] = v["tokens_per_s"] / r["vertical_spec"]["tokens_per_s"]
        r["clip_always_cost"] = vc["tokens_per_s"] / r["vertical_always"]["tokens_per_s"]
        hb = h["storage_read_bytes"] + h["storage_write_bytes"]
        vb = v["storage_read_bytes"] + v["storage_write_bytes"]
        r["bytes_bound"] = hb / vb
        # Reads and writes have separate buckets, so the busier direction is each schedule's
        # storage time: with horizontal at its storage roofline this is the most vertical can
        # gain over it (vertical's iteration is never shorter than its own storage time).
        r["direction_bound"] = (max(h["storage_read_bytes"], h["storage_write_bytes"]) /
                                max(v["storage_read_bytes"], v["storage_write_bytes"]))
        # All three runs do the same compute work; a spread in their compute busy time is other
        # load on the machine, which moves runs towards compute-bound.
        cb = [r[name]["busy_s"]["compute"] for name in RUNS]
        r["compute_spread"] = max(cb) / min(cb)
        rows.append(r)

    print()
    print(f"schedules: {a.layers} blocks x C={a.embd}, {param_count(a.layers, a.embd, a.vocab, a.seq) / 1e6:.2f}M "
          f"params, f32 on the CPU; B={a.batch} T={a.seq}; params and optimizer state on storage "
          f"at {a.rate / 1e6:.0f} MB/s read and write; checkpoints on host")
    if a.calib_c:
        print(f"rate {a.rate / 1e6:.0f} MB/s = P / c: block params P = {p / 1e6:.2f} MB, compute "
              f"c = {a.calib_c * 1e3:.1f} ms per micro-batch per block (fwd + recompute + bwd, "
              f"unthrottled vertical calibration), so x = P/(r c) = {x:.2f}: horizontal reads "
              f"(2M+3)xc per block vs Mc of compute (storage-bound at every M), vertical "
              f"(5-alpha)xc (compute-bound from M ~ 4.5 at alpha 0.5)")
    else:
        print(f"rate {a.rate / 1e6:.0f} MB/s given (no calibration)")
    alphas = ", ".join(f"M={r['M']}: {r['alpha']:g}" for r in rows)
    print(f"horizontal and vertical: grad_clip 0, vertical alpha {a.alpha} ({alphas}); "
          f"vertical_clip: grad_clip 1, alpha 1; vertical_spec and vertical_always: grad_clip "
          f"1e6 and 1e-6 at vertical's alpha; medians over steps 1.. of each run")
    hdr = (f"{'M':>3}{'tok/it':>7} | {'h tok/s':>8}{'iter_s':>8}{'roof_s':>8}{'/roof':>6}{'s-bnd':>6} |"
           f" {'v tok/s':>8}{'iter_s':>8}{'roof_s':>8}{'/roof':>6} | {'v/h':>5} | {'vc tok/s':>8}"
           f"{'v/vc':>6} | {'bytes':>6}{'dir':>6}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        h, v, vc = r["horizontal"], r["vertical"], r["vertical_clip"]
        print(f"{r['M']:>3}{r['tokens_per_iter']:>7} | {h['tokens_per_s']:8.0f}{h['iter_s']:8.3f}"
              f"{h['roofline_s']:8.3f}{h['over_roofline']:6.2f}{fmt_bool(h['storage_bound']):>6} |"
              f" {v['tokens_per_s']:8.0f}{v['iter_s']:8.3f}{v['roofline_s']:8.3f}"
              f"{v['over_roofline']:6.2f} | {r['vertical_over_horizontal']:5.2f} |"
              f" {vc['tokens_per_s']:8.0f}{r['clip_on_cost']:6.2f} | {r['bytes_bound']:6.2f}"
              f"{r['direction_bound']:6.2f} | {r['compute_spread']:5.2f}")
    print("columns: s-bnd = horizontal storage-bound (max storage busy > compute + cpu_optim busy);"
          " v/h = vertical / horizontal tokens/s; v/vc = vertical (clip off, alpha "
          f"{a.alpha}) / vertical_clip tokens/s; bytes = horizontal / vertical storage bytes "
          "(read+write); dir = the same for the busier direction, the ceiling on v/h when both "
          "are storage-bound; noise = max/min compute busy over the three runs, which do the same "
          "compute (above ~1.15: other load on the machine slowed some of them)")
    print("busy seconds per iteration (compute+cpu_optim | storage read | storage write):")
    for r in rows:
        cells = []
        for name in RUNS:
            b = r[name]["busy_s"]
            cells.append(f"{name} {b['compute'] + b['cpu_optim']:.2f}|{b['storage_read']:.2f}|"
                         f"{b['storage_write']:.2f}")
        print(f"  M={r['M']:<3}" + "   ".join(cells))

    sb = [r for r in rows if r["horizontal"]["storage_bound"]]
    min_ratio = min((r["vertical_over_horizontal"] for r in sb), default=None)
    max_roof = max(r["vertical_over_roofline"] for r in rows)
    met = [r["M"] for r in sb if r["vertical_over_horizontal"] >= GOAL_RATIO]
    reachable = [r for r in sb if r["direction_bound"] >= GOAL_RATIO]
    min_reachable = min((r["vertical_over_horizontal"] for r in reachable), default=None)
    clip_med = statistics.median(r["clip_on_cost"] for r in rows)
    spec_med = statistics.median(r["clip_spec_cost"] for r in rows)
    always_med = statistics.median(r["clip_always_cost"] for r in rows)
    print()
    print(f"goal 1: vertical >= {GOAL_RATIO}x horizontal tokens/s where horizontal is "
          f"storage-bound (M = {[r['M'] for r in sb]}): min {min_ratio and round(min_ratio, 3)}; "
          f"met at M = {met}")
    unreachable = [r["M"] for r in sb if r["direction_bound"] < GOAL_RATIO]
    if unreachable:
        print(f"  not reachable at M = {unreachable}: there the two schedules' storage traffic "
              f"differs by less than {GOAL_RATIO}x (dir column), so with horizontal at its storage "
              "roofline no overlap can make up the difference. Per block and iteration horizontal reads "
              "(2M+3)P (params in every micro-batch's forward and backward, optimizer state 3P "
              f"once), vertical (5-alpha)P: at M=1 there is nothing to "
              "amortise. Where reachable the min is "
              f"{min_reachable and round(min_reachable, 3)}")
    print(f"goal 2: vertical iteration within {GOAL_ROOFLINE}x of its roofline at every M: max "
          f"{max_roof:.3f} ({'met' if max_roof <= GOAL_ROOFLINE else 'NOT met'})")
    print(f"clipping on at alpha 1 (every optimizer step waits for the norm) costs vertical a "
          f"median {clip_med:.3f}x tokens/s vs clipping off")
    spec_share = [f"M={r['M']}: {r['vertical_spec']['repaired_steps']}/"
                  f"{r['vertical_spec']['steps']} repaired" for r in rows]
    print(f"goal 3: clipping with speculation, where no step clips ({', '.join(spec_share)}): "
          f"median {spec_med:.3f}x clip off ({'met' if spec_med <= GOAL_CLIP else 'NOT met'}, "
          f"goal <= {GOAL_CLIP}); per M "
          + ", ".join(f"{r['clip_spec_cost']:.3f}" for r in rows))
    always = [f"M={r['M']}: {r['vertical_always']['speculated_steps']}/"
              f"{r['vertical_always']['steps']} speculated" for r in rows]
    print(f"goal 4: clipping in every step, speculation auto ({', '.join(always)}): median "
          f"{always_med:.3f}x alpha 1 ({'met' if always_med <= GOAL_CLIP else 'NOT met'}, goal <= "
          f"{GOAL_CLIP}); per M " + ", ".join(f"{r['clip_always_cost']:.3f}" for r in rows))

    trace_info = None
    if a.trace:
        print()
        lines, trace_info = trace_summary(a.trace)
        print(f"trace: {a.trace}")
        for line in lines:
            print(line)
    if a.wall_s is not None:
        print(f"benchmark wall time: {a.wall_s:.0f} s")

    def rnd(v):
        if isinstance(v, float):
            return round(v, 4)
        if isinstance(v, dict):
            return {k: rnd(x) for k, x in v.items() if k != "steps_used"}
        return v

    result = {
        "min_vertical_over_horizontal_storage_bound": min_ratio and round(min_ratio, 4),
        "max_vertical_over_roofline": round(max_roof, 4),
        "rate_bytes_per_s": a.rate,
        "params": param_count(a.layers, a.embd, a.vocab, a.seq),
        "block_param_bytes": p,
        "x": x and round(x, 3),
        "goal_ratio_met_at": met,
        "goal_ratio_reachable_at": [r["M"] for r in reachable],
        "min_vertical_over_horizontal_where_reachable": min_reachable and round(min_reachable, 4),
        "clip_on_cost_median": round(clip_med, 4),
        "clip_spec_cost_median": round(spec_med, 4),
        "clip_always_cost_median": round(always_med, 4),
        "alpha_per_m": {str(r["M"]): r["alpha"] for r in rows},
        "rows": [rnd(r) for r in rows],
        "trace": a.trace,
        "trace_summary": trace_info,
        "wall_s": a.wall_s,
    }
    print(json.dumps(result, separators=(",", ":")))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rate")
    r.add_argument("calib")
    r.add_argument("--layers", type=int, required=True)
    r.add_argument("--embd", type=int, required=True)
    r.add_argument("--micro-batches", type=int, required=True)
    p = sub.add_parser("report")
    p.add_argument("runs")
    p.add_argument("--rate", type=int, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--embd", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--alpha", required=True)  # a number, or "auto" (the trainer's, per M)
    p.add_argument("--ms", required=True)
    p.add_argument("--calib-c", type=float, default=None)
    p.add_argument("--trace", default=None)
    p.add_argument("--wall-s", type=float, default=None)
    a = ap.parse_args()
    {"rate": cmd_rate, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
