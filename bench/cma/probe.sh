#!/usr/bin/env bash
# bench/cma/probe.sh: the ceiling of one core's cross-memory attach on this
# host (probe.c), the limit probe of the mid-size path with Go buffers as
# `amibench -b floor` is the small path's. Medians of ROUNDS runs (default
# 5) of each case, under the benchmark lock. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock "$@"
bench_work
bench_priority
ROUNDS=${ROUNDS:-5}
gcc -O2 -o "$work/probe" bench/cma/probe.c
cases=(
  "16384 64 read small" "16384 64 read huge" "16384 64 write huge"
  "16384 8 read huge" "16384 1 read huge"
  "131072 8 read huge" "1048576 1 read huge"
)
for c in "${cases[@]}"; do
  set -- $c
  for r in $(seq "$ROUNDS"); do
    ${prio[@]+"${prio[@]}"} "$work/probe" "$1" "$2" "$3" 2000 "$4"
  done | sort -t: -k2 -n | awk -v n="$ROUNDS" 'NR == int((n + 1) / 2)'
done
