#!/usr/bin/env bash
# bench/compare.sh: amibench next to MPICH and Open MPI on this host, all
# measured in the same run, with the ratios. Not part of CI.
#
#   bash bench/compare.sh             # ROUNDS=3 rounds, medians
#   ROUNDS=5 FULL=1 bash bench/compare.sh   # also print full size sweeps
#
# It installs Debian's mpich, openmpi-bin and their -dev packages if they
# are missing (as root), keeping MPICH as the default mpicc/mpirun if it was,
# builds bench/osu/osu.c against each MPI and amibench, and holds
# /tmp/amigo-bench.lock while it runs, so that measurements on a shared
# machine do not overlap. The pairs of each round run one after the other
# (amigo, MPICH, Open MPI), so each ratio compares runs seconds apart.
#
# Measured: the cross-core floor (an atomic-flag ping-pong between two Go
# processes), 8-byte one-way latency, bandwidth at 1 MiB and 4 MiB (windows of
# 64), and 16 ranks on this host doing an all-to-all of 1 KiB messages (the
# oversubscription case on a small machine).
#
#   bash bench/compare.sh small        # the small and mid-size set instead:
#                                       # bench/all.sh (pt2pt vs MPICH, Open MPI
#                                       # and UCX; oversubscribed collectives;
#                                       # TCP; shared memory by ranks)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = small ]; then
  shift
  exec bash bench/all.sh "$@"
fi
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-3}
FULL=${FULL:-0}
A2A_TIMEOUT=${A2A_TIMEOUT:-600}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- install and build ------------------------------------------------------
need_mpis
build_osu
go build -o "$work/amibench" ./cmd/amibench

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# rec NAME KIND ARGS...: run amibench (KIND amigo) or the C benchmark under an
# MPI (KIND mpich N or ompi N), keep its JSON lines under NAME, and its wall
# time.
rec() {
  local name=$1 kind=$2
  shift 2
  local cmd
  case $kind in
    amigo) cmd=("$work/amibench" --json "$@") ;;
    mpich) local n=$1; shift; cmd=(mpiexec.hydra -n "$n" "$work/osu-mpich" "$@" --json) ;;
    ompi) local n=$1; shift; cmd=(mpirun.openmpi --oversubscribe -n "$n" "$work/osu-ompi" "$@" --json) ;;
  esac
  local t0 t1
  t0=$(date +%s.%N)
  if ! timeout -k 10 "$A2A_TIMEOUT" "${cmd[@]}" >"$work/out" 2>"$work/err"; then
    echo "  $name: failed or timed out: $(tail -n 3 "$work/err" | tr '\n' ' ')" >&2
    echo "{\"run\":\"$name\",\"failed\":true}" >>"$work/results"
    return 0
  fi
  t1=$(date +%s.%N)
  grep '^{' "$work/out" | sed "s|^{|{\"run\":\"$name\",|" >>"$work/results" || true
  echo "{\"run\":\"$name\",\"wall_s\":$(awk "BEGIN{print $t1 - $t0}")}" >>"$work/results"
}

M1=1048576
M4=4194304
measure() {
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(mpichversion | sed -n 's/MPICH Version:\s*/MPICH /p'); $(ompi_info --version 2>/dev/null | head -1)"
  for r in $(seq "$ROUNDS"); do
    echo "round $r of $ROUNDS" >&2
    rec floor amigo -b floor
    rec amigo-lat amigo -b latency --min-size 8 --max-size 8
    rec mpich-lat mpich 2 latency --min-size 8 --max-size 8
    rec ompi-lat ompi 2 latency --min-size 8 --max-size 8
    rec amigo-bw amigo -b bw --min-size $M1 --max-size $M4
    rec amigo-bw-shared amigo -b bw --buffers shared --min-size $M1 --max-size $M4
    rec mpich-bw mpich 2 bw --min-size $M1 --max-size $M4
    rec ompi-bw ompi 2 bw --min-size $M1 --max-size $M4
  done
  echo "16 ranks, all-to-all of 1 KiB" >&2
  rec amigo-a2a16 amigo -n 16 -b a2a --min-size 1024 --max-size 1024
  rec mpich-a2a16 mpich 16 a2a --min-size 1024 --max-size 1024
  rec ompi-a2a16 ompi 16 a2a --min-size 1024 --max-size 1024
  if [ "$FULL" = 1 ]; then
    for b in latency bw; do
      rec amigo-full-$b amigo -b $b
      rec mpich-full-$b mpich 2 $b
      rec ompi-full-$b ompi 2 $b
    done
  fi
}
: >"$work/results"
measure
python3 - "$work/results" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
def vals(run, key, size=None):
    return [r[key] for r in rows if r.get("run") == run and key in r and (size is None or r.get("size") == size)]
def med(run, key, size=None):
    v = vals(run, key, size)
    return statistics.median(v) if v else None
def fmt(v, unit=""):
    return "-" if v is None else (f"{v:,.2f}" if v < 100 else f"{v:,.0f}") + unit
def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"
floor = med("floor", "latency_us")
table = [
    ("8 B latency (us), lower is better", med("amigo-lat", "latency_us", 8), None, med("mpich-lat", "latency_us", 8), med("ompi-lat", "latency_us", 8)),
    ("1 MiB bandwidth (MB/s)", med("amigo-bw", "mb_per_s", 1 << 20), med("amigo-bw-shared", "mb_per_s", 1 << 20), med("mpich-bw", "mb_per_s", 1 << 20), med("ompi-bw", "mb_per_s", 1 << 20)),
    ("4 MiB bandwidth (MB/s)", med("amigo-bw", "mb_per_s", 4 << 20), med("amigo-bw-shared", "mb_per_s", 4 << 20), med("mpich-bw", "mb_per_s", 4 << 20), med("ompi-bw", "mb_per_s", 4 << 20)),
    ("16-rank all-to-all 1 KiB, per iteration (us)", med("amigo-a2a16", "latency_us", 1024), None, med("mpich-a2a16", "latency_us", 1024), med("ompi-a2a16", "latency_us", 1024)),
    ("16-rank all-to-all 1 KiB, whole job (s)", med("amigo-a2a16", "wall_s"), None, med("mpich-a2a16", "wall_s"), med("ompi-a2a16", "wall_s")),
]
allocs = [
    ("allocations per message, 8 B latency", med("amigo-lat", "allocs_per_msg", 8), None),
    ("allocations per message, 1 MiB bandwidth", med("amigo-bw", "allocs_per_msg", 1 << 20), med("amigo-bw-shared", "allocs_per_msg", 1 << 20)),
    ("allocations per message, 4 MiB bandwidth", med("amigo-bw", "allocs_per_msg", 4 << 20), med("amigo-bw-shared", "allocs_per_msg", 4 << 20)),
    ("allocations per message, 16-rank all-to-all", med("amigo-a2a16", "allocs_per_msg", 1024), None),
]
print()
print(f"medians of the rounds; cross-core floor (atomic-flag ping-pong between two Go processes, one way): {fmt(floor)} us")
print()
w = 46
print(f"| {'measure':<{w}} | {'amigo heap':>11} | {'amigo shared':>12} | {'MPICH':>9} | {'Open MPI':>9} | {'amigo/MPICH':>11} | {'shared/MPICH':>12} |")
print(f"|{'-'*(w+2)}|{'-'*13}|{'-'*14}|{'-'*11}|{'-'*11}|{'-'*13}|{'-'*14}|")
for name, a, s, m, o in table:
    print(f"| {name:<{w}} | {fmt(a):>11} | {fmt(s):>12} | {fmt(m):>9} | {fmt(o):>9} | {ratio(a, m):>11} | {ratio(s, m):>12} |")
for name, a, s in allocs:
    print(f"| {name:<{w}} | {fmt(a):>11} | {fmt(s):>12} | {'':>9} | {'':>9} | {'':>11} | {'':>12} |")
print()
print("amigo heap: amibench with Go buffers (as OSU's malloc); amigo shared: buffers from AllocMemory;")
print("allocations: heap allocations of amibench's rank 0 per message in the timed loop (all of the process's).")
print("MPICH and Open MPI: bench/osu/osu.c, same sizes, iteration counts and window.")
# Each round's figures, in the order they ran: this machine changes state
# within minutes, and a median of few rounds hides how far apart they fall.
print()
print("each round (in order):")
for label, run, key, size in [
    ("8 B latency us, amigo", "amigo-lat", "latency_us", 8),
    ("8 B latency us, MPICH", "mpich-lat", "latency_us", 8),
    ("1 MiB MB/s, amigo heap", "amigo-bw", "mb_per_s", 1 << 20),
    ("1 MiB MB/s, MPICH", "mpich-bw", "mb_per_s", 1 << 20),
    ("4 MiB MB/s, amigo heap", "amigo-bw", "mb_per_s", 4 << 20),
    ("4 MiB MB/s, MPICH", "mpich-bw", "mb_per_s", 4 << 20),
]:
    print(f"  {label:<24} " + " ".join(fmt(v) for v in vals(run, key, size)))
fails = [r["run"] for r in rows if r.get("failed")]
if fails:
    print("failed or timed out:", ", ".join(sorted(set(fails))))
full = [r for r in rows if r.get("run", "").find("-full-") > 0 and "size" in r]
if full:
    print()
    print("full sweeps:")
    for r in full:
        print(json.dumps(r))
PY
