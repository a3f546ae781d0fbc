#!/usr/bin/env bash
# bench/tcp/compare.sh: amigo over TCP (amibench --transport tcp, two ranks as
# processes on this host, over loopback) next to the plain Go TCP baseline
# (bench/tcp/plain: one connection, each side busy-polling its non-blocking
# socket for the ping-pong, blocking reads for the stream) and to UCX over
# TCP (ucx_perftest of Debian's ucx-utils with UCX_TLS=tcp and
# UCX_NET_DEVICES=lo: tag_lat and ucp_am_lat at 8 B, tag_bw at 1 and 4 MiB),
# measured in the same run. Not part of CI.
#
#   bash bench/tcp/compare.sh               # ROUNDS=5 rounds, medians
#   ROUNDS=9 bash bench/tcp/compare.sh
#
# Each round runs the baseline, amigo and UCX one after the other (UCX's
# server and client on 127.0.0.1, port PORT, default 13421), so every ratio
# compares runs seconds apart; the table gives the medians over the rounds.
# The baseline and amigo use OSU's methodology and counts: one-way latency
# is half the round trip of a ping-pong of 8-byte messages (10000 iterations
# after 100 warm-up); bandwidth is windows of 64 messages of 1 MiB and 4 MiB
# answered by one short message per window. UCX's latency is half the round
# trip too (20000 iterations), its bandwidth converted from MiB/s to MB/s.
# The script holds /tmp/amigo-bench.lock while it runs, so that measurements
# on a shared machine do not overlap.
#
# Targets: 8 B latency at most 1.3x the baseline's and at most UCX's (the
# lower of tag and AM); bandwidth at 1 MiB and 4 MiB at least the
# baseline's.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-5}
PORT=${PORT:-13421}
bench_work
need_debs ucx-utils
# UCX's tcp transport would otherwise open lanes on every interface it
# finds; loopback alone is what amigo and the Go baseline use.
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
go build -o "$work/plain" ./bench/tcp/plain
go build -o "$work/amibench" ./cmd/amibench
# Every run (the baseline, amigo and UCX alike) takes the processors before
# other sessions' builds and tests (bench_priority).
bench_priority

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
python3 - "$work/results" "$UCX_NET_DEVICES" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from results import load
rows = load(sys.argv[1])
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
def lat_ok(a, p, ut, ua):
    u = least(ut, ua)
    return None if u is None else a <= 1.3 * p and a <= u
lines = [
    # name, kind, key, size, UCX tag, UCX AM, the UCX figure amigo is held to, target check, target
    ("8 B one-way latency (us)", "lat", "latency_us", 8, ut, ua, least(ut, ua), lat_ok, "<= 1.3x Go, <= UCX"),
    ("1 MiB bandwidth (MB/s)", "bw", "mb_per_s", 1 << 20, med("ucx-bw", "mb_per_s", 1 << 20), None,
     med("ucx-bw", "mb_per_s", 1 << 20), lambda a, p, ut, ua: a >= p, "amigo >= Go"),
    ("4 MiB bandwidth (MB/s)", "bw", "mb_per_s", 4 << 20, med("ucx-bw", "mb_per_s", 4 << 20), None,
     med("ucx-bw", "mb_per_s", 4 << 20), lambda a, p, ut, ua: a >= p, "amigo >= Go"),
]
print()
print(f"medians of {len(vals('plain-lat', 'latency_us', 8))} rounds; UCX: ucx_perftest with UCX_TLS=tcp UCX_NET_DEVICES={sys.argv[2]} (tag_lat, ucp_am_lat, tag_bw)")
print()
hdr = f"| {'measure':<26} | {'Go busy-poll':>12} | {'UCX tag':>9} | {'UCX AM':>9} | {'amigo tcp':>10} | {'amigo/Go':>8} | {'amigo/UCX':>9} | {'target':<20} | met |"
print(hdr)
print("|" + "|".join("-" * len(c) for c in hdr.strip("|").split("|")) + "|")
for name, kind, key, size, t, m, u, ok, target in lines:
    p, a = med("plain-" + kind, key, size), med("amigo-" + kind, key, size)
    r = "-" if p is None or a is None else f"{a / p:.2f}x"
    ru = "-" if u is None or a is None else f"{a / u:.2f}x"
    met = None if p is None or a is None else ok(a, p, t, m)
    met = "-" if met is None else ("yes" if met else "no")
    print(f"| {name:<26} | {fmt(p):>12} | {fmt(t):>9} | {fmt(m):>9} | {fmt(a):>10} | {r:>8} | {ru:>9} | {target:<20} | {met:<3} |")
print()
print("Go busy-poll: bench/tcp/plain, one connection, each side spinning on its non-blocking socket;")
print("amigo/UCX: latency against the lower of UCX tag and AM, bandwidth against UCX tag_bw.")
pt = med("plain-lat-timer", "latency_us", 8)
print()
print(f"for reference, the same plain ping-pong with a 1 ms ticker running in each process (as most programs")
print(f"have; it puts the runtime's idle thread on the network poller): {fmt(pt)} us")
print()
print("per round (Go busy-poll, UCX tag, amigo):")
for name, kind, key, size, _, _, _, _, _ in lines:
    ucx = "ucx-tag-lat" if kind == "lat" else "ucx-bw"
    print(f"  {name}: " + ", ".join(f"({fmt(p)}, {fmt(u)}, {fmt(a)})" for p, u, a in zip(vals("plain-" + kind, key, size), vals(ucx, key, size), vals("amigo-" + kind, key, size))))
fails = [r["run"] for r in rows if r.get("failed")]
if fails:
    print("failed:", ", ".join(sorted(set(fails))))
PY
