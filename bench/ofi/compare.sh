#!/usr/bin/env bash
# bench/ofi/compare.sh: amigo over libfabric (amibench --transport ofi, built
# with -tags ofi, two ranks as processes of this host) next to libfabric's
# own fi_pingpong (Debian libfabric-bin) on the same provider, measured in
# the same run. Not part of CI.
#
#   bash bench/ofi/compare.sh                       # PROVIDERS="tcp;ofi_rxm shm", ROUNDS=5
#   PROVIDERS=shm ROUNDS=9 bash bench/ofi/compare.sh
#
# Each round runs, per provider, fi_pingpong then amibench, one after the
# other, so every ratio compares runs seconds apart; the table gives the
# medians over the rounds.
#
# Both figures compared are fi_pingpong's own definitions, measured the
# same way on both sides (libfabric's util/pingpong.c):
#   - latency: fi_pingpong's "usec/xfer" is the time of its ping-pong per
#     transfer, two transfers a round trip: half a round trip. amibench's
#     latency (osu_latency) is half the round trip of its ping-pong of
#     8-byte messages: the same.
#   - bandwidth: fi_pingpong has only a ping-pong; its "MB/sec" is the
#     bytes of both directions' transfers over the elapsed time, that is
#     the size over half a round trip (10^6 bytes/s). The amigo figure set
#     next to it is the same: 1 MiB over half the round trip of amibench's
#     ping-pong of 1 MiB messages (-b latency at 1 MiB). A stream's
#     bandwidth (osu_bw, windows of 64 messages) is higher than a
#     ping-pong's; it is printed below the table for reference only, with
#     no fi_pingpong figure to compare it with.
# Both run with bench_priority (bench/lib.sh): in a session of their own
# whose group weighs more than the builds and tests others run meanwhile.
# amibench also prints allocations per message on the Go side
# (allocs_per_msg, of the 8-byte ping-pong). The script holds
# /tmp/amigo-bench.lock while it runs, so that measurements on a shared
# machine do not overlap.
#
# Targets: latency at most 1.2x fi_pingpong's, ping-pong bandwidth at
# least 0.9x, no allocation per message.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-5}
PROVIDERS=${PROVIDERS:-"tcp;ofi_rxm shm"}
bench_work
bench_priority
need_debs libfabric-dev libfabric-bin
go build -tags ofi -o "$work/amibench" ./cmd/amibench
M1=1048576
# fi_pingpong's server and client are bound to a core each, as amibench
# binds its two ranks (--bind-to core, the default, on a host of two or
# more cores): unbound, the two spinning processes shared a core in
# rounds where other work held the other one.
bind0=() bind1=()
cores=($(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])'))
if [ ${#cores[@]} -ge 2 ] && command -v taskset >/dev/null; then
  bind0=(taskset -c "${cores[0]}") bind1=(taskset -c "${cores[1]}")
fi

# pingpong NAME PROV SIZE ITERS: one fi_pingpong run (server and client on
# this host), its figures kept under NAME as a JSON line.
pingpong() {
  local name=$1 prov=$2 size=$3 iters=$4 out=""
  timeout -k 5 120 ${prio[@]+"${prio[@]}"} ${bind0[@]+"${bind0[@]}"} fi_pingpong -p "$prov" -e rdm -S "$size" -I "$iters" >/dev/null 2>&1 &
  local srv=$!
  for _ in $(seq 50); do
    if out=$(timeout -k 5 120 ${prio[@]+"${prio[@]}"} ${bind1[@]+"${bind1[@]}"} fi_pingpong -p "$prov" -e rdm -S "$size" -I "$iters" 127.0.0.1 2>/dev/null); then
      break
    fi
    out=""
    sleep 0.1
  done
  wait "$srv" 2>/dev/null || true
  # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
  local line
  line=$(echo "$out" | awk 'NF==8 && $1 ~ /^[0-9]+[kmg]?$/ {l=$0} END {print l}')
  if [ -z "$line" ]; then
    echo "  $name: fi_pingpong -p $prov -S $size failed" >&2
    echo "{\"run\":\"$name\",\"failed\":true}" >>"$work/results"
    return 0
  fi
  echo "$line" | awk -v n="$name" -v s="$size" '{printf "{\"run\":\"%s\",\"size\":%s,\"mb_per_s\":%s,\"latency_us\":%s}\n", n, s, $6, $7}' >>"$work/results"
}

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(go version | cut -d' ' -f3); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  for prov in $PROVIDERS; do
    pingpong "fi-lat/$prov" "$prov" 8 10000
    pingpong "fi-bw/$prov" "$prov" $M1 200
    AMIGO_OFI_PROVIDER=$prov rec "amigo-lat/$prov" "$work/amibench" --json --transport ofi -b latency --min-size 8 --max-size 8
    AMIGO_OFI_PROVIDER=$prov rec "amigo-bw/$prov" "$work/amibench" --json --transport ofi -b latency --min-size $M1 --max-size $M1
    AMIGO_OFI_PROVIDER=$prov rec "amigo-stream/$prov" "$work/amibench" --json --transport ofi -b bw --min-size $M1 --max-size $M1
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/results" "$PROVIDERS" "$M1" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
size = int(sys.argv[3])
# amibench's ping-pong at 1 MiB gives its bandwidth as fi_pingpong counts
# it: the size over half a round trip.
for r in rows:
    if r.get("run", "").startswith("amigo-bw/") and r.get("latency_us"):
        r["mb_per_s"] = size / r["latency_us"]
def med(run, key):
    v = [r[key] for r in rows if r.get("run") == run and key in r]
    return (statistics.median(v), len(v)) if v else (None, 0)
print("%-14s %-12s %12s %12s %8s %8s" % ("provider", "figure", "amigo", "fi_pingpong", "ratio", "target"))
for prov in sys.argv[2].split():
    a, na = med("amigo-lat/" + prov, "latency_us")
    f, nf = med("fi-lat/" + prov, "latency_us")
    if a and f:
        print("%-14s %-12s %10.2fus %10.2fus %8.2f %8s  (%d/%d rounds)" % (prov, "lat 8B", a, f, a / f, "<=1.2", na, nf))
    a, na = med("amigo-bw/" + prov, "mb_per_s")
    f, nf = med("fi-bw/" + prov, "mb_per_s")
    if a and f:
        print("%-14s %-12s %8.0fMB/s %8.0fMB/s %8.2f %8s  (%d/%d rounds)" % (prov, "pp-bw 1MiB", a, f, a / f, ">=0.9", na, nf))
    al, n = med("amigo-lat/" + prov, "allocs_per_msg")
    if n:
        print("%-14s %-12s %12.3f %12s %8s %8s" % (prov, "allocs", al, "", "", "0"))
print()
print("8 B latency by round (us), amigo / fi_pingpong: the host's state can change between rounds")
for prov in sys.argv[2].split():
    a = [r["latency_us"] for r in rows if r.get("run") == "amigo-lat/" + prov and "latency_us" in r]
    f = [r["latency_us"] for r in rows if r.get("run") == "fi-lat/" + prov and "latency_us" in r]
    print("%-14s " % prov + "  ".join("%.2f/%.2f" % x for x in zip(a, f)))
    rr = [x / y for x, y in zip(a, f) if y > 0]
    if rr:
        print("%-14s ratio by round %s; median %.2f (a round whose two runs met different states reads far off)" % ("", " ".join("%.2f" % x for x in rr), statistics.median(rr)))
print()
print("for reference, not compared: amibench's stream bandwidth at 1 MiB (osu_bw)")
for prov in sys.argv[2].split():
    a, na = med("amigo-stream/" + prov, "mb_per_s")
    if a:
        print("%-14s %-12s %8.0fMB/s  (%d rounds)" % (prov, "stream 1MiB", a, na))
PY
