#!/usr/bin/env bash
# CTest `report_browser`: the run report (src/report/run_report.h) drawn by a real browser,
# Debian's Chromium, headless.
#  - A short vertical run with its state on storage, validation, checkpoints behind training and
#    a trace writes its report (strata train --report). Chromium loads the page with a checker
#    script appended (tests/report_check.js): every chart is laid out, and each one this run has
#    data for drew non-empty marks (line paths of positive length, dots, bars). The checker's
#    verdict comes back through the DOM (--dump-dom); the browser's log must hold no console
#    error. A screenshot is kept at test_tmp/report_browser/report.png.
#  - Reports that must still render: a metrics file of one step, one cut off mid-line (a failed
#    run), and an in-memory run's (no storage traffic, busy time or trace): every chart laid out,
#    the ones without data saying so (the in-memory run: bytes, checkpoints, timeline).
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_SOURCE_DIR:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/report_browser"
rm -rf "$work" && mkdir -p "$work/store"
fail() { echo "report_browser: FAILED: $*" >&2; exit 1; }
command -v chromium >/dev/null || fail "chromium is not installed (scripts/setup.sh installs it)"

small=(--set model.n_layer=2 --set model.n_embd=64 --set train.batch_size=4 --set train.seq_len=64
       --set model.context_length=64 --set train.steps=12 --set data.val=embedded
       --set train.eval_every=4)
"$STRATA_BIN" train "${small[@]}" --set train.schedule=vertical --set offload.params_on_host=0 \
  --set offload.optim_on_host=0 --set "io.dirs=[\"$work/store\"]" --save-every 4 \
  --checkpoint-dir "$work/ckpt" --metrics "$work/run.jsonl" --trace "$work/trace.json" \
  --report "$work/report.html" --quiet 2>"$work/train.log" || fail "training: $(cat "$work/train.log")"

# check NAME REPORT EXPECTED_WITH_DATA: loads REPORT with the checker in Chromium; the charts
# named in EXPECTED_WITH_DATA (space-separated ids) must have drawn marks, the rest say "no data".
check() {
  local name=$1 report=$2 expected=$3
  {
    sed 's|</body></html>||' "$report"
    echo "<script>const expected = \"$expected\".split(\" \").filter(Boolean);"
    cat "$STRATA_SOURCE_DIR/tests/report_check.js"
    echo "</script></body></html>"
  } >"$work/$name.check.html"
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$work/profile.$name" --enable-logging=stderr --v=0 \
    --window-size=1400,2600 --virtual-time-budget=2000 --dump-dom \
    "file://$work/$name.check.html" >"$work/$name.dom" 2>"$work/$name.browser.log" ||
    fail "$name: chromium failed: $(tail -5 "$work/$name.browser.log")"
  verdict=$(grep -o '<p id="verdict">[^<]*' "$work/$name.dom" | tail -1 | sed 's/<p id="verdict">//') ||
    fail "$name: the checker left no verdict"
  [ "${verdict%%:*}" = ok ] || fail "$name: $verdict"
  ! grep -E 'CONSOLE.*(Uncaught|Error|error)' "$work/$name.browser.log" ||
    fail "$name: console errors in the browser log"
  echo "ok   $name: $verdict"
}
all="loss lr grad_norm tokens_per_s flops bytes busy memory checkpoints timeline"
check full "$work/report.html" "$all"
timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$work/profile.shot" --window-size=1400,2600 --hide-scrollbars \
  --screenshot="$work/report.png" "file://$work/report.html" 2>/dev/null
[ -s "$work/report.png" ] || fail "no screenshot"
echo "ok   screenshot: $work/report.png"

head -1 "$work/run.jsonl" >"$work/one.jsonl"
"$STRATA_BIN" report "$work/one.jsonl" --out "$work/one.html" 2>/dev/null
check one_step "$work/one.html" "loss lr grad_norm tokens_per_s flops bytes busy memory"
# Cut inside line 4: the first checkpoint (after step 4) and validation are not in it, whenever
# the save behind training finished.
{ head -3 "$work/run.jsonl"; head -c 40 <(sed -n 4p "$work/run.jsonl"); } >"$work/cut.jsonl"
"$STRATA_BIN" report "$work/cut.jsonl" --trace "$work/trace.json" --out "$work/cut.html" \
  2>"$work/cut.log"
grep -q "line 4 of .*cut.jsonl is not a metrics record" "$work/cut.log" ||
  fail "the cut-off line was not reported: $(cat "$work/cut.log")"
check cut_off "$work/cut.html" "loss lr grad_norm tokens_per_s flops bytes busy memory timeline"
"$STRATA_BIN" train "${small[@]}" --metrics "$work/mem.jsonl" --report "$work/mem.html" --quiet \
  2>/dev/null
check in_memory "$work/mem.html" "loss lr grad_norm tokens_per_s flops busy memory"
