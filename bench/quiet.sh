# Sourced by the benchmarks: prints the 1-minute load average at the start and warns when the
# machine is busy (these 2-core machines are noisy: another heavy job moves the figures by tens of
# percent). Figures measured under a warning are not to be quoted.
bench_load=$(cut -d' ' -f1 /proc/loadavg)
echo "bench: load average $bench_load at start ($(nproc) cores)" >&2
if awk -v l="$bench_load" 'BEGIN { exit !(l > 0.5) }'; then
  echo "bench: WARNING: the machine is busy (load $bench_load > 0.5); figures will be noisy" >&2
fi
