#!/usr/bin/env bash
# bench/compare_win.sh: one-sided latencies through MPI windows, amigo's
# package mpi (amibench win_put, win_get, win_acc, win_fop) next to MPICH
# and Open MPI running bench/osu/osu_rma.c, the same definitions (OSU's
# osu_put_latency, osu_get_latency, osu_acc_latency, osu_fop_latency in
# their default mode: MPI_Win_allocate, MPI_Win_lock_all once, a flush
# after each operation), two ranks on this host, ROUNDS interleaved rounds
# (default 5), medians and ratios. Not part of CI.
#
#   bash bench/compare_win.sh
#   ROUNDS=3 SIZES="8 4096" bash bench/compare_win.sh
#
# The aim: each latency at or below MPICH's in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-5}
SIZES=${SIZES:-"8 64 1024 4096"}
bench_work
need_mpis
cflags="-O2 -Wall"
mpicc.mpich $cflags -o "$work/rma-mpich" bench/osu/osu_rma.c
mpicc.openmpi $cflags -o "$work/rma-ompi" bench/osu/osu_rma.c
go build -o "$work/amibench" ./cmd/amibench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
lo=$(echo $SIZES | tr ' ' '\n' | sort -n | head -1)
hi=$(echo $SIZES | tr ' ' '\n' | sort -n | tail -1)

start=$(date +%s)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(mpichversion | sed -n 's/MPICH Version:\s*/MPICH /p'); $(ompi_info --version 2>/dev/null | head -1)"
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  for op in put get acc fop; do
    rec "amigo-$op" "$work/amibench" --json -b "win_$op" --min-size "$lo" --max-size "$hi"
    rec "mpich-$op" mpiexec.hydra -n 2 "$work/rma-mpich" "$op" --min-size "$lo" --max-size "$hi" --json
    rec "ompi-$op" mpirun.openmpi -n 2 "$work/rma-ompi" "$op" --min-size "$lo" --max-size "$hi" --json
  done
done
echo "measured in $(( $(date +%s) - start )) s"
python3 - "$work/results" "$SIZES" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
sizes = [int(s) for s in sys.argv[2].split()]
def med(run, size):
    v = [r["latency_us"] for r in rows if r.get("run") == run and r.get("size") == size and "latency_us" in r]
    return (statistics.median(v), len(v)) if v else (None, 0)
def fmt(v):
    return "-" if v is None else f"{v:,.3f}" if v < 1 else f"{v:,.2f}"
print()
print("| operation | size | amigo (us) | MPICH | Open MPI | amigo/MPICH | amigo/Open MPI | at or below MPICH | rounds |")
print("|---|---|---|---|---|---|---|---|---|")
for op in ["put", "get", "acc", "fop"]:
    for s in ([8] if op == "fop" else sizes):
        if op == "acc" and s < 4:
            continue
        a, n = med("amigo-" + op, s)
        m, _ = med("mpich-" + op, s)
        o, _ = med("ompi-" + op, s)
        rm = "-" if a is None or not m else f"{a / m:.2f}x"
        ro = "-" if a is None or not o else f"{a / o:.2f}x"
        ok = "-" if a is None or m is None else ("yes" if a <= m else "no")
        print(f"| {op} | {s} | {fmt(a)} | {fmt(m)} | {fmt(o)} | {rm} | {ro} | {ok} | {n} |")
PY
