#!/usr/bin/env bash
# CTest `progress_tty`: what `strata train` shows while training.
#  - Under a pseudo-terminal: the progress line is rewritten in place (carriage return and
#    erase-line before each step's line), kept every train.log_every steps, and carries loss,
#    tokens/s, the storage read and write rates (an offloaded run with state on storage) and an
#    ETA that ends at 0s.
#  - Piped: plain lines only (no carriage return, no escape), one every log_every steps plus the
#    first and the last, each with the ETA.
set -euo pipefail
: "${STRATA_BIN:?}" "${STRATA_BINARY_DIR:?}"
work="$STRATA_BINARY_DIR/test_tmp/progress_tty"
rm -rf "$work" && mkdir -p "$work/store"
args=(train --set train.steps=12 --set train.log_every=5 --set model.n_layer=2
      --set model.n_embd=64 --set train.schedule=vertical --set offload.params_on_host=0
      --set offload.optim_on_host=0 --set "io.dirs=[\"$work/store\"]")

/usr/bin/python3 - "$STRATA_BIN" "${args[@]}" <<'PY'
import os, pty, re, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
text = out.decode()
def fail(why):
    sys.exit(f"progress_tty: FAILED under a terminal: {why}; output: {text!r}")
if os.waitstatus_to_exitcode(status) != 0:
    fail("the run failed")
rewrites = re.findall(r"\r\x1b\[Kstep +(\d+)/12  loss [0-9.]+ [^\r\x1b]*? tok/s [^\r\x1b]*?"
                      r"storage r [0-9.]+ w [0-9.]+ GB/s  ETA (\w+)", text)
if [int(s) for s, _ in rewrites] != list(range(1, 13)):
    fail(f"rewritten lines for steps {[s for s, _ in rewrites]}, expected 1..12")
if rewrites[-1][1] != "0s":
    fail(f"the last ETA is {rewrites[-1][1]}")
kept = re.findall(r"step +(\d+)/12[^\r\n\x1b]*\r?\n", text)
if [int(s) for s in kept] != [1, 5, 10, 12]:
    fail(f"kept lines for steps {kept}, expected 1, 5, 10, 12")
print("ok   terminal: 12 rewritten lines, steps 1, 5, 10, 12 kept, storage rates and ETA shown")
PY

"$STRATA_BIN" "${args[@]}" 2>"$work/piped.log"
/usr/bin/python3 - "$work/piped.log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
if "\r" in text or "\x1b" in text:
    sys.exit(f"progress_tty: FAILED piped: control characters in {text!r}")
steps = [int(s) for s in re.findall(r"^step +(\d+)/12 .*ETA \w+$", text, re.M)]
if steps != [1, 5, 10, 12]:
    sys.exit(f"progress_tty: FAILED piped: lines for steps {steps}, expected 1, 5, 10, 12")
print("ok   piped: plain lines for steps 1, 5, 10, 12")
PY
