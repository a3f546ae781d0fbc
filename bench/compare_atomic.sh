#!/usr/bin/env bash
# bench/compare_atomic.sh: remote atomics of amigo next to UCX's
# ucx_perftest on this host, measured in the same run, with the ratios.
# Not part of CI.
#
#   bash bench/compare_atomic.sh           # ROUNDS=5 rounds, medians
#
# Each round runs, one after the other:
# - amibench -b atomic_lat,atomic_rate over shared memory on a word of a
#   shared allocation (the initiator's own atomic instruction) and of
#   registered Go memory (the owner's engine performs it), and over TCP on
#   loopback;
# - ucx_perftest -t ucp_fadd (fetch-add latency) and -t ucp_add (add rate)
#   with UCX_TLS=sm,self (its shared-memory transports perform atomics with
#   the processor's instructions on the mapped segment) and UCX_TLS=tcp over
#   loopback (UCX_NET_DEVICES=lo).
# The aim: fetch-add latency over shared memory at or below UCX's.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-5}
PORT=${PORT:-13431}
bench_work
need_debs ucx-utils
go build -o "$work/amibench" ./cmd/amibench
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

start=$(date +%s)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(ucx_info -v | sed -n 's/# Version /UCX /p')"
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  rec amigo-shm-shared "$work/amibench" --json -b atomic_lat,atomic_rate --iterations 1000000
  rec amigo-shm-heap "$work/amibench" --json -b atomic_lat,atomic_rate --atomic-target heap --iterations 20000
  rec amigo-tcp "$work/amibench" --json -b atomic_lat,atomic_rate --transport tcp --iterations 20000
  ucx_run ucx-shm-fadd sm,self ucp_fadd 8 1000000
  ucx_run ucx-shm-add sm,self ucp_add 8 1000000
  ucx_run ucx-tcp-fadd tcp ucp_fadd 8 20000
  ucx_run ucx-tcp-add tcp ucp_add 8 20000
done
echo "measured in $(( $(date +%s) - start )) s"
python3 - "$work/results" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
def med(run, key, bench=None):
    v = [r[key] for r in rows if r.get("run") == run and key in r and (bench is None or r.get("benchmark") == bench)]
    return (statistics.median(v), len(v)) if v else (None, 0)
def fmt(v):
    return "-" if v is None else (f"{v:,.3f}" if v < 1 else f"{v:,.2f}" if v < 100 else f"{v:,.0f}")
print()
print("| measure | amigo | UCX | amigo/UCX | rounds |")
print("|---|---|---|---|---|")
for name, arun, urun, lat in [
    ("shm fetch-add latency (us), shared word", "amigo-shm-shared", "ucx-shm-fadd", True),
    ("shm fetch-add latency (us), Go memory", "amigo-shm-heap", "ucx-shm-fadd", True),
    ("shm add rate (ops/s), shared word", "amigo-shm-shared", "ucx-shm-add", False),
    ("shm add rate (ops/s), Go memory", "amigo-shm-heap", "ucx-shm-add", False),
    ("tcp fetch-add latency (us)", "amigo-tcp", "ucx-tcp-fadd", True),
    ("tcp add rate (ops/s)", "amigo-tcp", "ucx-tcp-add", False),
]:
    if lat:
        a, n = med(arun, "latency_us", "atomic_lat")
        u, _ = med(urun, "latency_us")
    else:
        a, n = med(arun, "messages_per_s", "atomic_rate")
        u, _ = med(urun, "messages_per_s")
    ratio = "-" if a is None or not u else f"{a / u:.2f}x"
    print(f"| {name} | {fmt(a)} | {fmt(u)} | {ratio} | {n} |")
print()
print("per round (amigo):")
for r in rows:
    if r.get("run", "").startswith("amigo"):
        print(" ", json.dumps(r))
PY
