#!/usr/bin/python3
"""PyTorch CPU timings to hold Strata's CPU backend against.

  --mode block  one GPT-2-small block (C=768, NH=12, T=1024), forward+backward, B = 1..4, with the
                explicit attention of tools/torch_gpt2.py and with PyTorch's causal
                scaled_dot_product_attention (sdpa: fused CPU kernels in torch 2.x; torch 1.13's
                private version is an unfused math path); the faster is the "torch" figure.
  --mode step   the whole GPT-2 124M at B=1, T=1024: forward, backward, clip_grad_norm_, AdamW
                (fused if this PyTorch supports it on CPU, else foreach).

Each case runs once to warm up, then --reps timed runs; the median is reported. The last line
printed is one JSON object with all figures.

Note [Bench allocator]: glibc serves blocks over 32 MB with fresh mmaps, so every attention
matrix (B*12*T*T floats) is page-faulted in again on every run. On a VM each fault is expensive
(here it made a block 4-5x slower). Strata keeps its buffers, so to time PyTorch's compute rather
than the kernel, the script re-executes itself with glibc's mmap path off and trimming disabled
(freed memory is reused); --system-malloc keeps the default.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import torch_gpt2 as tg  # noqa: E402


def sdpa_attention():
    """(name, attend function) for PyTorch's causal scaled-dot-product attention, or (None, None).


    Public since torch 2.0; 1.13 has it as a private function that returns (out, weights)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return "F.scaled_dot_product_attention", (
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    if hasattr(F, "_scaled_dot_product_attention"):
        return "F._scaled_dot_product_attention", (
            lambda q, k, v: F._scaled_dot_product_attention(q, k, v, is_causal=True)[0])
    return None, None


def time_runs(fn, reps):
    """Median wall seconds of reps runs after one warm-up, plus the per-run wall times, process
    CPU seconds and minor page faults. CPU/threads well below wall means other load shared the
    cores; many faults mean the allocator went back to the kernel."""
    fn()  # warm-up: allocator, thread pool, BLAS packing
    stats = {"times_s": [], "cpu_s": [], "page_faults": []}
    for _ in range(reps):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        fn()
        stats["times_s"].append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        stats["cpu_s"].append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        stats["page_faults"].append(r1.ru_minflt - r0.ru_minflt)
    return statistics.median(stats["times_s"]), stats


def rounded(values, digits=3):
    return [round(v, digits) for v in values]


def bench_block(reps, T=1024):
    cfg = tg.GPT2Config(vocab_size=50257, context_length=T, n_layer=1, n_head=12, n_embd=768)
    block = tg.Block(cfg)
    sdpa_name, sdpa = sdpa_attention()
    impls = [("explicit", tg.causal_attention)] + ([("sdpa", sdpa)] if sdpa else [])
    rows = []
    for B in (1, 2, 3, 4):
        x = torch.randn(B, T, cfg.n_embd, requires_grad=True)
        g = torch.randn(B, T, cfg.n_embd)  # fixed upstream gradient
        row = {"B": B}
        for name, attend in impls:
            def run():
                block.zero_grad(set_to_none=True)
                x.grad = None
                block(x, attend).backward(g)

            median, stats = time_runs(run, reps)
            row[f"{name}_median_s"] = median
            row[f"{name}_cpu_s"] = statistics.median(stats["cpu_s"])
            row[f"{name}_times_s"] = rounded(stats["times_s"], 4)
            print(f"block B={B} {name:8s} median {median:.3f} s  {B * T / median:6.0f} tok/s  "
                  f"wall {rounded(stats['times_s'])}  cpu {rounded(stats['cpu_s'], 2)}  "
                  f"faults {stats['page_faults']}", flush=True)
        best = min((name for name, _ in impls), key=lambda n: row[f"{n}_median_s"])
        row.update(impl=best, median_s=row[f"{best}_median_s"],
                   tokens_per_s=B * T / row[f"{best}_median_s"])
        rows.append(row)
    return {"mode": "block", "C": 768, "NH": 12, "T": T, "sdpa": sdpa_name, "rows": rows}


def make_optimizer(model):
    """AdamW, fused on CPU where this PyTorch has it (checked with one real step), else foreach."""
    params = list(model.parameters())
    try:
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
        for p in params:
            p.grad = torch.zeros_like(p)
        opt.step()
        return "fused", torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
    except (TypeError, RuntimeError, ValueError):
        return "foreach", torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, foreach=True)


def bench_step(reps, attn, B=1, T=1024):
    cfg = tg.GPT2_124M
    model = tg.GPT2(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    opt_kind, opt = make_optimizer(model)
    attn_name, attend = "explicit", tg.causal_attention
    if attn == "sdpa":
        attn_name, attend = sdpa_attention()
        if attend is None:
            raise SystemExit("torch_bench: this PyTorch has no scaled_dot_product_attention")
    tokens = torch.randint(0, cfg.vocab_size, (B, T + 1))

    def run():
        opt.zero_grad(set_to_none=True)
        _, loss = model(tokens[:, :T], tokens[:, 1:], attend)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()

    median, stats = time_runs(run, reps)
    print(f"step 124M B={B} T={T} median {median:.3f} s  {B * T / median:.0f} tok/s  "
          f"wall {rounded(stats['times_s'])}  cpu {rounded(stats['cpu_s'], 2)}  "
          f"faults {stats['page_faults']}", flush=True)
    return {"mode": "step", "model": "gpt2-124M", "B": B, "T": T, "attention": attn_name,
            "optimizer": opt_kind, "median_s": median, "tokens_per_s": B * T / median,
            "times_s": rounded(stats["times_s"], 4), "cpu_s": rounded(stats["cpu_s"], 2)}


MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
              "MALLOC_TOP_PAD_": str(1 << 30)}


def reexec_with_reusing_malloc():
    """See Note [Bench allocator]; glibc reads these only at start-up, hence the exec."""
    if all(os.environ.get(k) == v for k, v in MALLOC_ENV.items()):
        return
    os.environ.update(MALLOC_ENV)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable] + sys.argv)


def main():
    ap = argparse.ArgumentParser(description="PyTorch CPU baselines for Strata")
    ap.add_argument("--mode", choices=["block", "step"], default="block")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=None, help="timed runs (default 5 block, 3 step)")
    ap.add_argument("--attn", choices=["explicit", "sdpa"], default="sdpa",
                    help="attention for --mode step (block mode times both)")
    ap.add_argument("--system-malloc", action="store_true",
                    help="keep glibc's default allocator settings (see Note [Bench allocator])")
    args = ap.parse_args()
    if not args.system_malloc:
        reexec_with_reusing_malloc()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.mode == "block":
        result = bench_block(args.reps or 5)
    else:
        result = bench_step(args.reps or 3, args.attn)
    result = {"mode": result.pop("mode"), "threads": args.threads, "torch": torch.__version__,
              "malloc": "system" if args.system_malloc else "reuse", **result}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
