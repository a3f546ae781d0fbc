#!/usr/bin/env bash
# bench/compare_coll.sh: the collectives of amigo's package mpi (amibench's
# osu_* collective benchmarks) next to MPICH and Open MPI on this host,
# measured in the same run, with the ratios. Not part of CI.
#
#   bash bench/compare_coll.sh                 # ROUNDS=5 rounds, medians
#   ROUNDS=5 RANKS="2 4 8 16" bash bench/compare_coll.sh
#   ROUNDS=5 RANKS="2 4 8 16" BENCHES="allreduce barrier" SIZES=64 ITERS=10000 \
#       bash bench/compare_coll.sh             # the oversubscription figures
#   BENCHES="bcast barrier" SIZES=64 bash bench/compare_coll.sh   # a subset
#   ITERS=100000 BENCHES=allreduce SIZES=64 bash bench/compare_coll.sh
#
# RANKS (default "2 4 8"), BENCHES (default all six) and SIZES (default 64,
# 1 MiB and 8 MiB) choose what runs; the oversubscription line above gives
# 64 B allreduce and barrier on 2, 4, 8 and 16 ranks.
#
# MPICH_MAX, if set, skips MPICH above that many ranks: it busy-polls, and
# oversubscribed its small collectives take milliseconds each.
#
# ITERS, if set, replaces OSU's iteration counts (1000 up to 8 KiB, 100
# above) for both sides: a run of 1000 small collectives lasts under a
# millisecond, and one preemption of either rank moves its average.
#
# It installs Debian's mpich, openmpi-bin and their -dev packages if they are
# missing (as root, keeping MPICH the default MPI if it was), builds
# bench/coll/osu_coll.c with each MPI's mpicc and amibench, and holds
# /tmp/amigo-bench.lock while it runs, so that measurements on a shared
# machine do not overlap. In each round every measurement runs amigo, then
# MPICH, then Open MPI, one right after the other, so each ratio compares
# runs seconds apart. Ranks are processes on this host (amigo over its
# shared-memory adapter, with Barrier and Allreduce up to 256 B through a
# shared-memory segment of the communicator, AMIGO_MPI_SHARED_COLL; each
# MPI over its own: MPICH's busy-polls, Open MPI's vader yields when
# oversubscribed); 4 and more ranks oversubscribe a 2-core host.
#
# Measured (elements are doubles, sizes in bytes, roots rank 0): allreduce of
# 8 doubles (64 B) and of 1M doubles (8 MiB); reduce, bcast, allgather and
# alltoall at 64 B and 1 MiB; barrier.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-5}
RANKS=${RANKS:-"2 4 8"}
BENCHES=${BENCHES:-"allreduce reduce bcast allgather alltoall barrier"}
SIZES=${SIZES:-"64 1048576 8388608"}
TIMEOUT=${TIMEOUT:-600}
bench_work
if ! command -v mpicc.mpich >/dev/null || ! command -v mpicc.openmpi >/dev/null; then
  before=$(readlink -f /usr/bin/mpicc 2>/dev/null || true)
  need_debs mpich libmpich-dev openmpi-bin libopenmpi-dev
  # Installing Open MPI may make it the default MPI; keep MPICH if it was.
  if [ "$before" = /usr/bin/mpicc.mpich ] || [ -z "$before" ]; then
    update-alternatives --set mpi /usr/bin/mpicc.mpich >/dev/null 2>&1 || true
    update-alternatives --set mpirun /usr/bin/mpirun.mpich >/dev/null 2>&1 || true
  fi
fi
mpicc.mpich -O2 -Wall -o "$work/osu_coll" bench/coll/osu_coll.c
mpicc.openmpi -O2 -Wall -o "$work/osu_coll_ompi" bench/coll/osu_coll.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
go build -o "$work/amibench" ./cmd/amibench
# Every run takes the processors before other sessions' builds and tests
# (bench_priority); MPICH's ranks, which hydra starts in sessions of their
# own, as well.
bench_priority
mpiexec=mpiexec.hydra
command -v $mpiexec >/dev/null || mpiexec=mpiexec


# pair BENCH N SIZE: amigo, then MPICH, then Open MPI (if BENCHES and SIZES
# select it).
pair() {
  local b=$1 n=$2 s=$3
  [[ " $BENCHES " == *" $b "* ]] || return 0
  [ "$b" = barrier ] || [[ " $SIZES " == *" $s "* ]] || return 0
  local sz=(--min-size "$s" --max-size "$s")
  [ "$b" = barrier ] && sz=()
  [ -n "${ITERS:-}" ] && sz+=(--iterations "$ITERS")
  rec "amigo/$b/$n/$s" "$work/amibench" --json -n "$n" -b "$b" "${sz[@]}"
  if [ "$n" -le "${MPICH_MAX:-1000000}" ]; then
    rec "mpich/$b/$n/$s" "$mpiexec" -n "$n" ${prio[@]+"${prio[@]}"} "$work/osu_coll" "$b" --json "${sz[@]}"
  fi
  rec "ompi/$b/$n/$s" mpirun.openmpi -n "$n" "$work/osu_coll_ompi" "$b" --json "${sz[@]}"
}

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(mpichversion 2>/dev/null | sed -n 's/MPICH Version:\s*/MPICH /p'); $(ompi_info --version 2>/dev/null | head -1)"
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  for n in $RANKS; do
    pair allreduce "$n" 64
    pair allreduce "$n" 8388608
    for b in reduce bcast allgather alltoall; do
      pair "$b" "$n" 64
      pair "$b" "$n" 1048576
    done
    pair barrier "$n" 0
  done
done
python3 - "$work/results" "$RANKS" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
ranks = [int(x) for x in sys.argv[2].split()]
def med(run):
    v = [r["latency_us"] for r in rows if r.get("run") == run and "latency_us" in r]
    return statistics.median(v) if v else None
def fmt(v):
    return "-" if v is None else (f"{v:,.2f}" if v < 100 else f"{v:,.0f}")
names = {64: "64 B", 1048576: "1 MiB", 8388608: "8 MiB", 0: ""}
items = [("allreduce", 64, "8 doubles"), ("allreduce", 8388608, "1M doubles")]
for b in ("reduce", "bcast", "allgather", "alltoall"):
    items += [(b, 64, ""), (b, 1048576, "")]
items.append(("barrier", 0, ""))
print()
print("latency in us (average over ranks, median of the rounds); ratios amigo / MPICH and amigo / Open MPI, below 1 is faster")
print()
print(f"| {'collective':<30} | {'ranks':>5} | {'amigo':>9} | {'MPICH':>9} | {'Open MPI':>9} | {'amigo/MPICH':>11} | {'amigo/Open MPI':>14} |")
print(f"|{'-'*32}|{'-'*7}|{'-'*11}|{'-'*11}|{'-'*11}|{'-'*13}|{'-'*16}|")
def ratio(a, m):
    return "-" if a is None or not m else f"{a / m:.2f}"
for b, s, note in items:
    for n in ranks:
        a, m, o = med(f"amigo/{b}/{n}/{s}"), med(f"mpich/{b}/{n}/{s}"), med(f"ompi/{b}/{n}/{s}")
        if a is None and m is None and o is None:
            continue  # not selected (BENCHES, SIZES)
        label = f"{b} {names[s]}" + (f" ({note})" if note else "")
        print(f"| {label:<30} | {n:>5} | {fmt(a):>9} | {fmt(m):>9} | {fmt(o):>9} | {ratio(a, m):>11} | {ratio(a, o):>14} |")
print()
print("amigo: amibench -b <collective> (package mpi over the shared-memory adapter, ranks as processes);")
print("MPICH and Open MPI: bench/coll/osu_coll.c under mpiexec.hydra and mpirun.openmpi; same sizes,")
print("iteration counts, roots and element type.")
import os
if os.environ.get("MPICH_MAX"):
    print(f"MPICH skipped above {os.environ['MPICH_MAX']} ranks (MPICH_MAX): \"-\" in its column.")
fails = sorted({r["run"] for r in rows if r.get("failed")})
if fails:
    print("failed or timed out:", ", ".join(fails))
PY
