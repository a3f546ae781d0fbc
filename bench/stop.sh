#!/usr/bin/env bash
# Large messages: plain rendezvous, pure eager streaming, and the three STOP
# variants, side by side in one run of this script, with early receivers
# (bw: buffers named as messages are announced) and late ones (bw_late: named
# once a whole window was announced), and ping-pong latency. Not part of CI.
#
#   bash bench/stop.sh [--transport shm|loop|tcp] [--max-size BYTES]
set -euo pipefail
cd "$(dirname "$0")/.."
transport=shm
max=$((64 << 20))
while [ $# -gt 0 ]; do
  case $1 in
    --transport) transport=$2; shift 2 ;;
    --max-size) max=$2; shift 2 ;;
    *) echo "usage: $0 [--transport shm|loop|tcp] [--max-size BYTES]" >&2; exit 2 ;;
  esac
done
go build -o /tmp/amibench.stop ./cmd/amibench
out=$(mktemp)
run() { # label, env...
  local label=$1; shift
  env "$@" /tmp/amibench.stop --transport "$transport" -b latency,bw,bw_late \
    --min-size 8 --max-size "$max" --json |
    sed "s/^{/{\"config\":\"$label\",/" >>"$out"
}
# One measurement at a time on this machine.
exec 9>/tmp/amigo-bench.lock
flock 9
run rendezvous AMIGO_PROTOCOL=rendezvous
run eager AMIGO_PROTOCOL=eager
run stop-auto AMIGO_PROTOCOL=stop AMIGO_STOP_VARIANT=auto
run stop-keep AMIGO_PROTOCOL=stop AMIGO_STOP_VARIANT=keep
run stop-discard AMIGO_PROTOCOL=stop AMIGO_STOP_VARIANT=discard
run stop-put AMIGO_PROTOCOL=stop AMIGO_STOP_VARIANT=put
python3 - "$out" <<'PY'
import json, sys, collections
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    o = json.loads(line)
    v = o.get("latency_us", o.get("mb_per_s"))
    rows[(o["benchmark"], o["size"])][o["config"]] = v
cfgs = ["rendezvous", "eager", "stop-auto", "stop-keep", "stop-discard", "stop-put"]
for bench, unit in (("latency", "us"), ("bw", "MB/s"), ("bw_late", "MB/s")):
    print(f"\n{bench} ({unit})")
    print(f"{'size':>10} " + " ".join(f"{c:>13}" for c in cfgs))
    for (b, size), r in sorted(rows.items()):
        if b != bench:
            continue
        print(f"{size:>10} " + " ".join(f"{r.get(c, float('nan')):>13.2f}" for c in cfgs))
PY
rm -f "$out"
