#!/usr/bin/env bash
# bench/shm_mem.sh: shared memory that amigo's shm adapter holds at the peak
# of an all-to-all, by the number of ranks on this host. Not part of CI.
#
#   bash bench/shm_mem.sh                   # 8, 16 and 32 ranks, 1 MiB
#   RANKS="32 64" SIZE=65536 bash bench/shm_mem.sh
#
# For each rank count it runs `amibench -n N -b alltoall` (package mpi's
# Alltoall, SIZE bytes per pair, ITERS iterations) and samples Shmem in
# /proc/meminfo every 5 ms: the rise from before the job to its peak is the
# shared memory the ranks' segments made (control segments, descriptor
# buffers, the pools of pipelined-copy rings; message buffers are Go memory,
# --buffers heap, and not in Shmem). The bytes in flight at the peak are at
# most what each rank's transfers still hold at once: a chunk ring of an
# owner's pool (Options.ChunkRings, 1 MiB each) per pipelined copy, and the
# eager packets in descriptor buffers, which the descriptor buffers bound.
# The aim: at 32 ranks and 1 MiB, at most 4 MiB a rank plus the
# bytes in flight.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
RANKS=${RANKS:-"8 16 32"}
SIZE=${SIZE:-1048576}
ITERS=${ITERS:-3}
bench_work
go build -o "$work/amibench" ./cmd/amibench
shmem() { awk '/^Shmem:/ {print $2}' /proc/meminfo; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; all-to-all of $SIZE bytes per pair, $ITERS iterations"
printf '| %5s | %14s | %14s | %14s | %14s | %s |\n' ranks "Shmem before" "peak rise" "per rank" "per pair" "all-to-all us"
printf '|%s|%s|%s|%s|%s|%s|\n' ------- ---------------- ---------------- ---------------- ---------------- ---------------
for n in $RANKS; do
  base=$(shmem)
  peak=$base
  timeout -k 10 "${TIMEOUT:-900}" "$work/amibench" -n "$n" -b alltoall --min-size "$SIZE" --max-size "$SIZE" \
    --iterations "$ITERS" --warmup 1 --json >"$work/out" 2>"$work/err" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    v=$(shmem)
    if [ "$v" -gt "$peak" ]; then peak=$v; fi
    sleep 0.005
  done
  if ! wait "$pid"; then
    echo "  $n ranks: amibench failed: $(tail -n 3 "$work/err" | tr '\n' ' ')" >&2
    continue
  fi
  lat=$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]; print(round(r[-1]["latency_us"]) if r else "-")' "$work/out")
  rise=$((peak - base))
  awk -v n="$n" -v b="$base" -v r="$rise" -v lat="$lat" 'BEGIN {
    printf "| %5d | %10.1f MiB | %10.1f MiB | %10.2f MiB | %10.1f KiB | %13s |\n", n, b/1024, r/1024, r/1024/n, r/(n*(n-1)), lat }'
done
echo "target: at 32 ranks and 1 MiB, at most 4 MiB a rank plus the bytes in flight"
