#!/usr/bin/env bash
# bench/compare_pt2pt.sh: the small and mid-size point-to-point figures of
# amigo over shared memory next to MPICH, Open MPI and UCX on this host, all
# measured in the same run, with the ratios and the targets they are held
# to. Not part of CI.
#
#   bash bench/compare_pt2pt.sh                    # ROUNDS=5 rounds, medians
#   ROUNDS=7 bash bench/compare_pt2pt.sh
#   BASE=/tmp/amibench-old bash bench/compare_pt2pt.sh   # an older amibench too
#   BASE_REV=fa72c74 bash bench/compare_pt2pt.sh  # amibench built at a commit,
#                                                 # its 1 and 4 MiB bandwidth only
#
# Each round runs, one after the other: amigo (amibench), bench/osu/osu.c
# under MPICH and under Open MPI, and UCX's ucx_perftest over shared memory
# (UCX_TLS=sm,self: its posix/sysv segments and cross-memory attach), so
# every ratio compares runs seconds apart; the table gives medians over the
# rounds, and the figures of each round follow it. Every run takes the
# processors before other sessions' builds and tests (bench_priority in
# bench/lib.sh), MPICH's ranks, which hydra starts in sessions of their
# own, as well.
#
# Measured, two ranks (processes) on this host:
# - one-way latency of 8 bytes (osu_latency; ucx_perftest tag_lat and
#   ucp_am_lat, which report half the round trip too), and the cross-core
#   floor (amibench -b floor: an atomic flag between two Go processes) at
#   the start and at the end of every round: the host alternates between
#   two states (the floor some 0.035 or 0.19 us here), and a round whose
#   two readings differ ran its programs in different states, so that its
#   ratios compare the states as much as the programs. The rounds are
#   listed by state after the table;
# - message rate of 8 bytes, one pair, windows of 64 (osu_mbw_mr; for one
#   pair its loop is osu_bw's, so the MPIs' rate is their bw at 8 bytes
#   divided by 8; amibench prints both mbw_mr and bw, which must agree);
#   UCX's tag_bw of 8 bytes. Every rate run moves the same 1,000,000
#   messages as UCX's (RATE_ITERS windows of 64, default 15625), not OSU's
#   default of 100 windows: a run of 100 windows lasts about a millisecond,
#   starts with empty queues and measures a burst, not a sustained rate;
# - bandwidth at 4 KiB to 256 KiB and at 1 and 4 MiB (osu_bw, windows of
#   64; UCX tag_bw, ucp_am_bw and ucp_put_bw, converted from UCX's MiB/s
#   to OSU's 10^6 bytes/s). From 4 KiB to 256 KiB every osu_bw-style run
#   (amigo's and both MPIs') moves BW_ITERS windows a size (default 1000),
#   not OSU's 100 (20 above 8 KiB): 20 windows of 16 KiB last half a
#   millisecond, and this host's speed changes from minute to minute (see
#   bench/MID_PATH.md), so such a run reads a burst in whichever state it
#   lands. 1 and 4 MiB keep OSU's counts, as the figures they are held
#   against were measured.
# Two receive semantics are compared, each with its like:
# - amigo's bw (its handler copies every message into the receive buffer,
#   as MPI_Recv does) against osu_bw under MPICH and Open MPI and UCX's
#   tag_bw (ucp_tag_recv into a buffer);
# - amigo's am_bw against UCX's ucp_am_bw. ucx_perftest's active-message
#   handler does not copy an eager message: it counts it and returns, the
#   data left where UCX delivered it (it copies only with a test flag this
#   script does not set); only a rendezvous message lands in its receive
#   buffer (ucp_am_recv_data_nbx). amigo's am_bw does the same: its handler
#   uses inline data in place, and receives larger messages into the
#   buffer. Set against amigo's copying bw, UCX AM's eager sizes would
#   compare a copy with none.
# The aims: latency <= the best of MPICH, Open MPI and UCX AM;
# message rate >= 1.5x the best of MPICH, Open MPI and UCX tag_bw; at every
# size from 4 KiB to 256 KiB bandwidth >= the best of its likes (bw: MPICH,
# Open MPI, UCX tag; am_bw: UCX AM), from 16 KiB on >= 1.5x it and >= 25
# GB/s, and no size below a smaller one; allocations per message 0.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-5}
RATE_ITERS=${RATE_ITERS:-15625}
BW_ITERS=${BW_ITERS:-1000}
BASE=${BASE:-}
BASE_REV=${BASE_REV:-}
PORT=${PORT:-13411}
bench_work
need_debs ucx-utils
need_mpis
build_osu
go build -o "$work/amibench" ./cmd/amibench
# BASE_REV: the same amibench as it was at that commit, for the rows that must
# not regress (1 and 4 MiB); only those are measured with it.
base_runs=all
if [ -z "$BASE" ] && [ -n "$BASE_REV" ]; then
  mkdir "$work/base-src"
  git archive "$BASE_REV" | tar -x -C "$work/base-src"
  (cd "$work/base-src" && go build -o "$work/amibench-base" ./cmd/amibench)
  BASE=$work/amibench-base base_runs=big
  echo "base: amibench at $(git rev-parse --short "$BASE_REV"), 1 and 4 MiB"
fi
bench_priority
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

SIZES="4096 8192 16384 32768 65536 131072 262144"

amigo_round() {
  local tag=$1 bin=$2
  if [ "${3:-all}" = big ]; then
    rec "$tag-big" "$bin" --json -b bw --min-size 1048576 --max-size 4194304
    return
  fi
  rec "$tag-lat" "$bin" --json -b latency --min-size 8 --max-size 8
  rec "$tag-mr" "$bin" --json -b mbw_mr --min-size 8 --max-size 8 --iterations "$RATE_ITERS"
  rec "$tag-bw8" "$bin" --json -b bw --min-size 8 --max-size 8 --iterations "$RATE_ITERS"
  rec "$tag-bw" "$bin" --json -b bw --min-size 4096 --max-size 262144 --iterations "$BW_ITERS"
  rec "$tag-ambw" "$bin" --json -b am_bw --min-size 4096 --max-size 262144 --iterations "$BW_ITERS"
  rec "$tag-shbw" "$bin" --json -b bw --buffers shared --min-size 4096 --max-size 262144 --iterations "$BW_ITERS"
  rec "$tag-big" "$bin" --json -b bw --min-size 1048576 --max-size 4194304
}

mpi_round() {
  local tag=$1 shift_cmd
  local -a run
  if [ "$tag" = mpich ]; then run=(mpiexec.hydra -n 2 ${prio[@]+"${prio[@]}"} "$work/osu-mpich"); else run=(mpirun.openmpi -n 2 "$work/osu-ompi"); fi
  rec "$tag-lat" "${run[@]}" latency --min-size 8 --max-size 8 --json
  rec "$tag-bw8" "${run[@]}" bw --min-size 8 --max-size 8 --json --iterations "$RATE_ITERS"
  rec "$tag-bw" "${run[@]}" bw --min-size 4096 --max-size 262144 --json --iterations "$BW_ITERS"
  rec "$tag-big" "${run[@]}" bw --min-size 1048576 --max-size 4194304 --json
}

ucx_round() {
  ucx_run ucx-tag-lat sm,self tag_lat 8 100000
  ucx_run ucx-am-lat sm,self ucp_am_lat 8 100000
  ucx_run ucx-tag-mr sm,self tag_bw 8 $((RATE_ITERS * 64))
  local s
  for s in $SIZES; do
    ucx_run ucx-tag-bw sm,self tag_bw "$s" 20000
    ucx_run ucx-am-bw sm,self ucp_am_bw "$s" 20000
    ucx_run ucx-put-bw sm,self ucp_put_bw "$s" 20000
  done
}

start=$(date +%s)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(mpichversion | sed -n 's/MPICH Version:\s*/MPICH /p'); $(ompi_info --version 2>/dev/null | head -1); $(ucx_info -v | sed -n 's/# Version /UCX /p')"
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  rec floor "$work/amibench" --json -b floor
  amigo_round amigo "$work/amibench"
  if [ -n "$BASE" ]; then amigo_round base "$BASE" "$base_runs"; fi
  mpi_round mpich
  mpi_round ompi
  ucx_round
  rec floor-end "$work/amibench" --json -b floor
done
echo "measured in $(( $(date +%s) - start )) s"
python3 - "$work/results" "$SIZES" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
sizes = [int(s) for s in sys.argv[2].split()]
def vals(run, key, size=None):
    return [r[key] for r in rows if r.get("run") == run and key in r and (size is None or r.get("size") == size)]
def med(run, key, size=None):
    v = vals(run, key, size)
    return statistics.median(v) if v else None
def fmt(v):
    return "-" if v is None else (f"{v:,.3f}" if v < 1 else f"{v:,.2f}" if v < 100 else f"{v:,.0f}")
def best(*v):
    v = [x for x in v if x is not None]
    return max(v) if v else None
def least(*v):
    v = [x for x in v if x is not None]
    return min(v) if v else None
def yes(ok):
    return "-" if ok is None else ("yes" if ok else "no")
have_base = any(r.get("run", "").startswith("base-") for r in rows)
print()
print(f"medians of {len(vals('amigo-lat', 'latency_us', 8))} rounds; cross-core floor (atomic flag between two Go processes, one way): {fmt(med('floor', 'latency_us'))} us")
print()
hdr = f"| {'measure':<34} | {'amigo':>9} |" + (f" {'amigo base':>10} |" if have_base else "") + f" {'MPICH':>9} | {'Open MPI':>9} | {'UCX tag':>9} | {'UCX AM':>9} | {'UCX put':>9} | {'amigo/best':>10} | {'target':<22} | met |"
print(hdr)
print("|" + "|".join("-" * len(c) for c in hdr.strip("|").split("|")) + "|")
def row(name, a, b, m, o, ut, ua, up, ref, target, ok):
    ratio = "-" if a is None or ref in (None, 0) else f"{a / ref:.2f}x"
    cells = f"| {name:<34} | {fmt(a):>9} |" + (f" {fmt(b):>10} |" if have_base else "")
    print(cells + f" {fmt(m):>9} | {fmt(o):>9} | {fmt(ut):>9} | {fmt(ua):>9} | {fmt(up):>9} | {ratio:>10} | {target:<22} | {yes(ok):<3} |")
# Latency.
a, b = med("amigo-lat", "latency_us", 8), med("base-lat", "latency_us", 8)
m, o = med("mpich-lat", "latency_us", 8), med("ompi-lat", "latency_us", 8)
ut, ua = med("ucx-tag-lat", "latency_us", 8), med("ucx-am-lat", "latency_us", 8)
ref = least(m, o, ua)
row("8 B one-way latency (us)", a, b, m, o, ut, ua, None, ref, "<= best of MPI, UCX AM", None if a is None or ref is None else a <= ref)
# Message rate.
a, b = med("amigo-mr", "messages_per_s", 8), med("base-mr", "messages_per_s", 8)
m = (med("mpich-bw8", "mb_per_s", 8) or 0) * 1e6 / 8 or None
o = (med("ompi-bw8", "mb_per_s", 8) or 0) * 1e6 / 8 or None
ut = med("ucx-tag-mr", "messages_per_s", 8)
ref = best(m, o, ut)
M = lambda v: None if v is None else v / 1e6
row("8 B message rate (M/s)", M(a), M(b), M(m), M(o), M(ut), None, None, M(ref), ">= 1.5x best", None if a is None or ref is None else a >= 1.5 * ref)
a8 = med("amigo-bw8", "mb_per_s", 8)
agree = None if a is None or a8 is None else abs(a / (a8 * 1e6 / 8) - 1)
# The two runs of each round follow each other: their difference within a
# round, whose median says less about the host's state changing between
# rounds (printed beside the medians' difference, which the target is
# checked on).
pairs = list(zip(vals("amigo-mr", "messages_per_s", 8), vals("amigo-bw8", "mb_per_s", 8)))
by_round = statistics.median(abs(m / (b * 1e6 / 8) - 1) for m, b in pairs) if pairs else None
print(f"| {'amigo bw / mbw_mr at 8 B':<34} | {'':>9} |" + (f" {'':>10} |" if have_base else "") + f" bw {fmt(None if a8 is None else a8 * 1e6 / 8 / 1e6)} M/s, mbw_mr {fmt(M(a))} M/s: differ by {'-' if agree is None else f'{agree:.0%}'} (target <= 20%: {yes(None if agree is None else agree <= 0.2)}; within a round, median {'-' if by_round is None else f'{by_round:.0%}'})")
# Bandwidth.
prev = None
for s in sizes + [1 << 20, 4 << 20]:
    big = s >= 1 << 20
    a = med("amigo-big" if big else "amigo-bw", "mb_per_s", s)
    b = med("base-big" if big else "base-bw", "mb_per_s", s)
    m = med("mpich-big" if big else "mpich-bw", "mb_per_s", s)
    o = med("ompi-big" if big else "ompi-bw", "mb_per_s", s)
    ut, ua, up = (None, None, None) if big else (med("ucx-tag-bw", "mb_per_s", s), med("ucx-am-bw", "mb_per_s", s), med("ucx-put-bw", "mb_per_s", s))
    ref = best(m, o, ut)
    label = f"{s >> 10} KiB" if s < 1 << 20 else f"{s >> 20} MiB"
    if big:
        target, ok = "no regression (base)", None if a is None or b is None else a >= 0.9 * b
    elif s < 16384:
        target, ok = ">= best", None if a is None or ref is None else a >= ref
    else:
        target, ok = ">= 1.5x best, >= 25 GB/s", None if a is None or ref is None else a >= 1.5 * ref and a >= 25000
    if not big and prev is not None and a is not None and a < prev:
        target += ", < smaller"
        ok = False
    row(f"bandwidth {label} (MB/s)", a, b, m, o, ut, ua, up, ref, target, ok)
    if not big and a is not None:
        prev = a if prev is None else max(prev, a)  # the fastest smaller size
# Active-message bandwidth, without the receiver's copy of eager data.
prev = None
for s in sizes:
    a, b = med("amigo-ambw", "mb_per_s", s), med("base-ambw", "mb_per_s", s)
    ua = med("ucx-am-bw", "mb_per_s", s)
    if s < 16384:
        target, ok = ">= UCX AM", None if a is None or ua is None else a >= ua
    else:
        target, ok = ">= 1.5x UCX AM, >= 25 GB/s", None if a is None or ua is None else a >= 1.5 * ua and a >= 25000
    if prev is not None and a is not None and a < prev:
        target += ", < smaller"
        ok = False
    row(f"am_bw {s >> 10} KiB (MB/s)", a, b, None, None, None, ua, None, ua, target, ok)
    if a is not None:
        prev = a if prev is None else max(prev, a)
# bw with buffers from AllocMemory (MPI_Alloc_mem's), for reference.
for s in sizes:
    a = med("amigo-shbw", "mb_per_s", s)
    if a is None:
        continue
    up = med("ucx-put-bw", "mb_per_s", s)
    row(f"bw, shared buffers {s >> 10} KiB (MB/s)", a, None, None, None, None, None, up, up, "reference (UCX put)", None)
allocs = [r["allocs_per_msg"] for r in rows if r.get("run", "").startswith("amigo-") and "allocs_per_msg" in r]
print()
print(f"allocations per message in amigo's timed loops: at most {fmt(max(allocs)) if allocs else '-'}")
print("UCX put: ucp_put_bw, one-sided, for reference (no matching, no receive buffer); bandwidth rows: amigo bw against the best of MPICH, Open MPI and UCX tag;")
print("am_bw rows: amigo am_bw against UCX AM (neither copies eager data out of the transport).")
print("shared buffers rows: amigo bw with send and receive buffers from AllocMemory (amibench --buffers shared), against UCX put.")
print()
print("each round (in order):")
for label, run, key, size in [
    ("8 B latency us, amigo", "amigo-lat", "latency_us", 8),
    ("8 B latency us, MPICH", "mpich-lat", "latency_us", 8),
    ("8 B latency us, UCX AM", "ucx-am-lat", "latency_us", 8),
    ("8 B M msg/s, amigo", "amigo-mr", "messages_per_s", 8),
    ("8 B M msg/s, UCX tag", "ucx-tag-mr", "messages_per_s", 8),
    ("16 KiB MB/s, amigo", "amigo-bw", "mb_per_s", 16384),
    ("16 KiB MB/s, MPICH", "mpich-bw", "mb_per_s", 16384),
    ("64 KiB MB/s, amigo", "amigo-bw", "mb_per_s", 65536),
    ("64 KiB MB/s, UCX tag", "ucx-tag-bw", "mb_per_s", 65536),
    ("256 KiB MB/s, amigo", "amigo-bw", "mb_per_s", 262144),
    ("256 KiB MB/s, MPICH", "mpich-bw", "mb_per_s", 262144),
]:
    v = vals(run, key, size)
    if key == "messages_per_s":
        v = [x / 1e6 for x in v]
    print(f"  {label:<24} " + " ".join(fmt(x) for x in v))
f0, f1 = vals("floor", "latency_us"), vals("floor-end", "latency_us")
if f0 and f1:
    lo = min(f0 + f1)
    state = lambda f: "fast" if f < 2 * lo else "slow"
    print()
    print("cross-core floor by round, start / end (us): " + ", ".join(f"{a:.3f} / {b:.3f}" for a, b in zip(f0, f1)))
    if max(f0 + f1) < 2 * lo:
        print(f"  every reading within a factor of 2 of the least ({lo:.3f} us): the rounds ran in one state")
    for name in ("fast", "slow") if max(f0 + f1) >= 2 * lo else ():
        rr = [str(i + 1) for i, (a, b) in enumerate(zip(f0, f1)) if state(a) == state(b) == name]
        print(f"  rounds in the {name} state at both ends (floor {'below' if name == 'fast' else 'at least'} {2 * lo:.3f} us): {', '.join(rr) or 'none'}")
    mixed = [str(i + 1) for i, (a, b) in enumerate(zip(f0, f1)) if state(a) != state(b)]
    if mixed:
        print(f"  rounds that changed state: {', '.join(mixed)}")
fails = [r["run"] for r in rows if r.get("failed")]
if fails:
    print("failed or timed out:", ", ".join(sorted(set(fails))))
PY
