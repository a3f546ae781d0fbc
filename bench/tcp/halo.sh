#!/usr/bin/env bash
# bench/tcp/halo.sh: the halo exchange of bench/tcp/halo (4 ranks as
# processes sharing 2 processors, 8 rows of 16 doubles each, edge rows
# exchanged with the ranks above and below over package mpi) over TCP and
# over shared memory, interleaved in each round; medians of the time an
# iteration takes and of the most sleeps and sleep timeouts of a rank over
# the timed iterations. Not part of CI.
#
#   bash bench/tcp/halo.sh                 # ROUNDS=5
#   ROUNDS=9 N=8 CPUS=2 bash bench/tcp/halo.sh
#
# A sleep timeout is a sleep that ran to its bound (Config.SleepMax, 1 ms)
# without a wake-up: on a quiet host, a rank waiting for a halo should be
# woken by the socket (or the futex) of the message it waits for.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-5}
N=${N:-4}
CPUS=${CPUS:-2}
bench_work
go build -o "$work/halo" ./bench/tcp/halo
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  rec tcp "$work/halo" -transport tcp -n "$N" -cpus "$CPUS"
  rec shm "$work/halo" -transport shm -n "$N" -cpus "$CPUS"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/results" "$N" "$CPUS" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
print(f"\n{sys.argv[2]} ranks on {sys.argv[3]} processors, medians of {sum(1 for r in rows if r.get('run') == 'tcp')} rounds\n")
print("| transport | us an iteration | sleeps a rank | sleep timeouts a rank | per round (us) |")
print("|---|---|---|---|---|")
for run in ("tcp", "shm"):
    rs = [r for r in rows if r.get("run") == run and not r.get("failed")]
    if not rs:
        print(f"| {run} | failed | | | |")
        continue
    med = lambda k: statistics.median(r[k] for r in rs)
    per = ", ".join(f"{r['us_per_iter']:.1f}" for r in rs)
    print(f"| {run} | {med('us_per_iter'):.1f} | {med('sleeps_per_rank'):.0f} | {med('sleep_timeouts_per_rank'):.0f} | {per} |")
PY
