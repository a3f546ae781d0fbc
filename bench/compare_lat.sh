#!/usr/bin/env bash
# bench/compare_lat.sh: 8-byte one-way latency over shared memory, two ranks,
# amigo next to MPICH, Open MPI and UCX, each run counted in the state of
# the host it ran in.
#
#   bash bench/compare_lat.sh
#   ROUNDS=12 ITERS=100000 bash bench/compare_lat.sh
#
# This host alternates between two states, minute by minute, and faster:
# the cross-core floor (amibench -b floor: an atomic flag between two Go
# processes, one way) reads some 0.035 us in one and 0.19 in the other,
# and every latency follows it (bench/SMALL_PATH.md). compare_pt2pt.sh
# takes the median of each implementation over rounds of some 17 s whose
# state it reads at their ends only; a round that changes state between
# amigo's run and a peer's sets them in different states, and the medians
# of a run whose rounds are mixed compare the two states as much as the
# implementations. Here every run is short (ITERS round trips, default
# 50,000) and bracketed by a floor reading before and after it; a run is
# counted in the state both readings agree on, and dropped when they do
# not. The order of the implementations turns by one each round. Printed:
# for each state, each implementation's median over the runs in that
# state, and amigo's ratio to the best of MPICH, Open MPI and UCX AM (the
# aim of bench/compare_pt2pt.sh's latency row); the same for package mpi's
# Send and Recv (amibench -b mpi_latency) against the MPIs' osu_latency.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-20}
ITERS=${ITERS:-50000}
PORT=${PORT:-13411}
bench_work
need_debs ucx-utils
need_mpis
build_osu
go build -o "$work/amibench" ./cmd/amibench
bench_priority
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

lat_args=(--min-size 8 --max-size 8 --iterations "$ITERS" --json)
run_one() {
  case $1 in
  amigo) rec amigo "$work/amibench" -b latency "${lat_args[@]}" ;;
  amigo-mpi) rec amigo-mpi "$work/amibench" -b mpi_latency "${lat_args[@]}" ;;
  mpich) rec mpich mpiexec.hydra -n 2 ${prio[@]+"${prio[@]}"} "$work/osu-mpich" latency "${lat_args[@]}" ;;
  ompi) rec ompi mpirun.openmpi -n 2 "$work/osu-ompi" latency "${lat_args[@]}" ;;
  ucx-am) ucx_run ucx-am sm,self ucp_am_lat 8 "$ITERS" ;;
  ucx-tag) ucx_run ucx-tag sm,self tag_lat 8 "$ITERS" ;;
  esac
}

impls=(amigo amigo-mpi mpich ompi ucx-am ucx-tag)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(mpichversion | sed -n 's/MPICH Version:\s*/MPICH /p'); $(ompi_info --version 2>/dev/null | head -1); $(ucx_info -v | sed -n 's/# Version /UCX /p')"
start=$(date +%s)
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  n=${#impls[@]}
  for i in $(seq 0 $((n - 1))); do
    rec floor "$work/amibench" --json -b floor
    run_one "${impls[$(((i + r) % n))]}"
  done
  rec floor "$work/amibench" --json -b floor
done
echo "measured in $(($(date +%s) - start)) s"
python3 - "$work/results" <<'PY'
import statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
# The results lie in the order they were taken: floor, run, floor, run, ...
# Each run is counted in the state of the floor readings on both sides.
floors = [r["latency_us"] for r in rows if r.get("run") == "floor" and "latency_us" in r]
lo = min(floors) if floors else 0
state = lambda f: "fast" if f < 2 * lo else "slow"
by = {"fast": {}, "slow": {}}
dropped = {}
prev = None
pending = None
for r in rows:
    if r.get("run") == "floor":
        f = r.get("latency_us")
        if pending is not None and prev is not None and f is not None:
            name, v = pending
            if state(prev) == state(f):
                by[state(f)].setdefault(name, []).append(v)
            else:
                dropped[name] = dropped.get(name, 0) + 1
        pending, prev = None, f
        continue
    if r.get("failed"):
        print(f"failed or timed out: {r['run']}")
        continue
    if r.get("size") == 8 and "latency_us" in r:
        pending = (r["run"], r["latency_us"])
names = [("amigo", "amigo (AMI)"), ("amigo-mpi", "amigo (package mpi)"), ("mpich", "MPICH"), ("ompi", "Open MPI"), ("ucx-am", "UCX AM"), ("ucx-tag", "UCX tag")]
print()
print(f"8-byte one-way latency (us), each run counted in the state of the floor readings before and after it (fast: below {2 * lo:.3f} us, twice the least reading, {lo:.3f})")
print()
hdr = f"| {'state':<5} | " + " | ".join(f"{label:>19}" for _, label in names) + f" | {'AMI/best':>8} | {'mpi/best MPI':>12} |"
print(hdr)
print("|" + "|".join("-" * len(c) for c in hdr.strip("|").split("|")) + "|")
for st in ("fast", "slow"):
    d = by[st]
    if not d:
        continue
    med = {k: statistics.median(v) for k, v in d.items()}
    cell = lambda k: f"{med[k]:.3f} n{len(d[k])}" if k in med else "-"
    best = [med[k] for k in ("mpich", "ompi", "ucx-am") if k in med]
    best_mpi = [med[k] for k in ("mpich", "ompi") if k in med]
    ami = f"{med['amigo'] / min(best):.2f}x" if "amigo" in med and best else "-"
    mpi = f"{med['amigo-mpi'] / min(best_mpi):.2f}x" if "amigo-mpi" in med and best_mpi else "-"
    print(f"| {st:<5} | " + " | ".join(f"{cell(k):>19}" for k, _ in names) + f" | {ami:>8} | {mpi:>12} |")
print()
print("AMI/best: amibench -b latency against the least of MPICH's, Open MPI's (osu_latency) and UCX's ucp_am_lat;")
print("mpi/best MPI: amibench -b mpi_latency (package mpi's Send and Recv) against the least of the MPIs'.")
if dropped:
    print("runs dropped (the state changed during them): " + ", ".join(f"{k} {v}" for k, v in sorted(dropped.items())))
PY
