#!/usr/bin/env bash
# bench/compare_bcast.sh: large broadcasts of amigo's package mpi by the
# AMI's RDMA multicast (seed 004), by a binomial tree and by the pipelined
# chain, next to MPICH's MPI_Bcast, measured in the same run, with the
# ratios. Not part of CI.
#
#   bash bench/compare_bcast.sh                    # 1 MiB to 64 MiB, 4 and 8 ranks
#   ROUNDS=5 RANKS="4 8" ITERS=30 bash bench/compare_bcast.sh
#
# amibench -b bcast runs each algorithm, forced by package mpi's settings:
#   multicast  AMIGO_MPI_BCAST_MULTICAST=0 (every size by multicast)
#   binomial   multicast off, AMIGO_MPI_BCAST_SHORT at its largest (a
#              binomial tree of whole messages at every size)
#   chain      multicast off (the pipelined chain, package mpi's choice
#              without multicast above 64 KiB)
# and bench/coll/osu_coll.c runs MPI_Bcast under mpiexec.hydra. Each size is
# ITERS broadcasts after OSU's 10 warm-up ones, from rank 0, each followed by
# a barrier (not timed); latency_us is the average over ranks. In each round
# the four run one right after the other, so ratios compare runs seconds
# apart; the table gives medians over the rounds. Ranks are processes on this
# host (amigo over shared memory); 4 and 8 ranks oversubscribe a 2-core host.
# The script holds /tmp/amigo-bench.lock while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-3}
RANKS=${RANKS:-"4 8"}
ITERS=${ITERS:-30}
MIN=${MIN:-1048576}
MAX=${MAX:-67108864}
TIMEOUT=${TIMEOUT:-900}
bench_work
need_debs mpich libmpich-dev
mpicc=mpicc.mpich
command -v $mpicc >/dev/null || mpicc=mpicc
$mpicc -O2 -Wall -o "$work/osu_coll" bench/coll/osu_coll.c
go build -o "$work/amibench" ./cmd/amibench
mpiexec=mpiexec.hydra
command -v $mpiexec >/dev/null || mpiexec=mpiexec
never=9223372036854775807


sz=(--min-size "$MIN" --max-size "$MAX" --iterations "$ITERS")
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(mpichversion 2>/dev/null | sed -n 's/MPICH Version:\s*/MPICH /p'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  for n in $RANKS; do
    rec "multicast/$n" env AMIGO_MPI_BCAST_MULTICAST=0 "$work/amibench" --json -n "$n" -b bcast "${sz[@]}"
    rec "binomial/$n" env AMIGO_MPI_BCAST_MULTICAST=$never AMIGO_MPI_BCAST_SHORT=$never "$work/amibench" --json -n "$n" -b bcast "${sz[@]}"
    rec "chain/$n" env AMIGO_MPI_BCAST_MULTICAST=$never "$work/amibench" --json -n "$n" -b bcast "${sz[@]}"
    rec "mpich/$n" "$mpiexec" -n "$n" "$work/osu_coll" bcast --json "${sz[@]}"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/results" "$RANKS" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
ranks = [int(x) for x in sys.argv[2].split()]
sizes = sorted({r["size"] for r in rows if "size" in r})
def med(run, size):
    v = [r["latency_us"] for r in rows if r.get("run") == run and r.get("size") == size and "latency_us" in r]
    return statistics.median(v) if v else None
def fmt(v):
    return "-" if v is None else f"{v:,.0f}"
def ratio(a, m):
    return "-" if a is None or not m else f"{a / m:.2f}"
print()
print("MPI_Bcast-style latency in us (average over ranks, median of the rounds); x = amigo / MPICH, below 1 is faster")
print()
print("| ranks | size | multicast | binomial | chain | MPICH | multicast x | binomial x | chain x |")
print("|------:|-----:|----------:|---------:|------:|------:|------------:|-----------:|--------:|")
for n in ranks:
    for s in sizes:
        mc, bi, ch, mp = (med(f"{k}/{n}", s) for k in ("multicast", "binomial", "chain", "mpich"))
        print(f"| {n} | {s >> 20} MiB | {fmt(mc)} | {fmt(bi)} | {fmt(ch)} | {fmt(mp)} | {ratio(mc, mp)} | {ratio(bi, mp)} | {ratio(ch, mp)} |")
fails = sorted({r["run"] for r in rows if r.get("failed")})
if fails:
    print("failed or timed out:", ", ".join(fails))
PY
