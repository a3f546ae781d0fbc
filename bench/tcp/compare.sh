#!/usr/bin/env bash
# bench/tcp/compare.sh: amigo over TCP (amibench --transport tcp, two ranks as
# processes on this host, over loopback) next to the plain Go TCP baseline
# (bench/tcp/plain: one connection, each side busy-polling its non-blocking
# socket for the ping-pong, blocking reads for the stream) and to UCX over
# TCP (ucx_perftest of Debian's ucx-utils, UCX_TLS=tcp: tag_lat and
# ucp_am_lat at 8 B, tag_bw at 1 and 4 MiB), measured in the same run. Not
# part of CI.
#
#   bash bench/tcp/compare.sh               # ROUNDS=5 rounds, medians
#   ROUNDS=9 bash bench/tcp/compare.sh
#
# Each round runs the baseline and amigo one after the other, so every ratio
# compares runs seconds apart; the table gives the medians over the rounds.
# Both use OSU's methodology and counts: one-way latency is half the round
# trip of a ping-pong of 8-byte messages (10000 iterations after 100 warm-up);
# bandwidth is windows of 64 messages of 1 MiB and 4 MiB answered by one
# short message per window. The script holds /tmp/amigo-bench.lock while it
# runs, so that measurements on a shared machine do not overlap.
#
# Targets: 8 B latency at most 1.3x the baseline's and at most UCX's (the
# lower of tag and AM; issue 18); bandwidth at 1 MiB and 4 MiB at least the
# baseline's (issue 5).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-5}
PORT=${PORT:-13421}
bench_work
need_debs ucx-utils
go build -o "$work/plain" ./bench/tcp/plain
go build -o "$work/amibench" ./cmd/amibench

M1=1048576
M4=4194304
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; $(go version | cut -d' ' -f3); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  rec plain-lat "$work/plain" -b latency --min-size 8 --max-size 8
  rec plain-lat-timer "$work/plain" -waiter timer -b latency --min-size 8 --max-size 8
  rec amigo-lat "$work/amibench" --json --transport tcp -b latency --min-size 8 --max-size 8
  rec plain-bw "$work/plain" -b bw --min-size $M1 --max-size $M4
  rec amigo-bw "$work/amibench" --json --transport tcp -b bw --min-size $M1 --max-size $M4
  ucx_run ucx-tag-lat tcp tag_lat 8 20000
  ucx_run ucx-am-lat tcp ucp_am_lat 8 20000
  ucx_run ucx-bw tcp tag_bw $M1 2000
  ucx_run ucx-bw tcp tag_bw $M4 500
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def vals(run, key, size):
    return [r[key] for r in rows if r.get("run") == run and key in r and r.get("size") == size]
def med(run, key, size):
    v = vals(run, key, size)
    return statistics.median(v) if v else None
def fmt(v):
    return "-" if v is None else (f"{v:,.2f}" if v < 100 else f"{v:,.0f}")
def least(*v):
    v = [x for x in v if x is not None]
    return min(v) if v else None
ut, ua = med("ucx-tag-lat", "latency_us", 8), med("ucx-am-lat", "latency_us", 8)
lines = [
    ("8 B one-way latency (us)", "lat", "latency_us", 8, least(ut, ua),
     lambda a, p, u: a <= 1.3 * p and (u is None or a <= u), "<= 1.3x plain, <= UCX"),
    ("1 MiB bandwidth (MB/s)", "bw", "mb_per_s", 1 << 20, med("ucx-bw", "mb_per_s", 1 << 20), lambda a, p, u: a >= p, "amigo >= plain"),
    ("4 MiB bandwidth (MB/s)", "bw", "mb_per_s", 4 << 20, med("ucx-bw", "mb_per_s", 4 << 20), lambda a, p, u: a >= p, "amigo >= plain"),
]
print()
print(f"medians of {len(vals('plain-lat', 'latency_us', 8))} rounds; UCX latency: tag {fmt(ut)} us, AM {fmt(ua)} us (UCX_TLS=tcp)")
print()
print(f"| {'measure':<26} | {'plain Go TCP':>12} | {'UCX tcp':>9} | {'amigo tcp':>10} | {'amigo/plain':>11} | {'amigo/UCX':>9} | {'target':<22} | {'met':<3} |")
print(f"|{'-'*28}|{'-'*14}|{'-'*11}|{'-'*12}|{'-'*13}|{'-'*11}|{'-'*24}|{'-'*5}|")
for name, kind, key, size, u, ok, target in lines:
    p, a = med("plain-" + kind, key, size), med("amigo-" + kind, key, size)
    r = "-" if p is None or a is None else f"{a / p:.2f}x"
    ru = "-" if u is None or a is None else f"{a / u:.2f}x"
    met = "-" if p is None or a is None else ("yes" if ok(a, p, u) else "no")
    print(f"| {name:<26} | {fmt(p):>12} | {fmt(u):>9} | {fmt(a):>10} | {r:>11} | {ru:>9} | {target:<22} | {met:<3} |")
pt = med("plain-lat-timer", "latency_us", 8)
print()
print(f"for reference, the same plain ping-pong with a 1 ms ticker running in each process (as most programs")
print(f"have; it puts the runtime's idle thread on the network poller): {fmt(pt)} us")
print()
print("per round (plain, amigo):")
for name, kind, key, size, _, _, _ in lines:
    print(f"  {name}: " + ", ".join(f"({fmt(p)}, {fmt(a)})" for p, a in zip(vals("plain-" + kind, key, size), vals("amigo-" + kind, key, size))))
fails = [r["run"] for r in rows if r.get("failed")]
if fails:
    print("failed:", ", ".join(sorted(set(fails))))
PY
