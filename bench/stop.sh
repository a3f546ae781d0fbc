#!/usr/bin/env bash
# Large messages: plain rendezvous, pure eager streaming, and the STOP
# variants (auto, the default; keep; discard; put), side by side, with early
# receivers (bw: buffers named as messages are announced) and late ones
# (bw_late: named once a whole window was announced), and ping-pong latency.
# Not part of CI.
#
#   bash bench/stop.sh [--transport shm|loop|tcp] [--max-size BYTES]
#   ROUNDS=5 bash bench/stop.sh
#   ROUNDS=8 ONLY="rendezvous stop-auto" LATENCY=0 MIN_BW=1048576 bash bench/stop.sh
#   ROUNDS=8 ONLY="eager stop-auto" BW=0 bash bench/stop.sh
#
# Each round runs every protocol one after the other, so the ratios compare
# runs seconds apart; the tables give medians over the rounds. Latency runs
# from 8 B to 1 MiB, bandwidth from 64 KiB to --max-size (64 MiB). The ratio
# columns: latency of STOP (auto) over pure eager, bandwidth of STOP (auto)
# over plain rendezvous, each the median of the per-round ratios (rounds
# alternate the order of the protocols). The script holds /tmp/amigo-bench.lock while it
# runs, so that measurements on a shared machine do not overlap.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
transport=shm
max=$((64 << 20))
ROUNDS=${ROUNDS:-3}
ONLY=${ONLY:-"rendezvous eager stop-auto stop-keep stop-discard stop-put"}
LATENCY=${LATENCY:-1}
BW=${BW:-1}
MIN_BW=${MIN_BW:-$((64 << 10))}
while [ $# -gt 0 ]; do
  case $1 in
    --transport) transport=$2; shift 2 ;;
    --max-size) max=$2; shift 2 ;;
    *) echo "usage: $0 [--transport shm|loop|tcp] [--max-size BYTES]" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/amibench" ./cmd/amibench
out=$work/results
: >"$out"
run() { # label, env...
  local label=$1; shift
  case " $ONLY " in *" $label "*) ;; *) return 0 ;; esac
  local runs=()
  [ "$LATENCY" = 1 ] && runs+=("-b latency --min-size 8 --max-size $((1 << 20))")
  [ "$BW" = 1 ] && runs+=("-b bw,bw_late --min-size $MIN_BW --max-size $max")
  for args in "${runs[@]}"; do
    # shellcheck disable=SC2086
    if ! env "$@" timeout -k 10 900 "$work/amibench" --transport "$transport" $args --json >"$work/out" 2>"$work/err"; then
      echo "  $label $args: failed: $(tail -n 3 "$work/err" | tr '\n' ' ')" >&2
      continue
    fi
    grep '^{' "$work/out" | sed "s|^{|{\"config\":\"$label\",|" >>"$out" || true
  done
}
# One measurement at a time on this machine.
exec 9>/tmp/amigo-bench.lock
flock 9
echo "transport $transport; $ROUNDS rounds; cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
configs=(
  "rendezvous AMIGO_PROTOCOL=rendezvous"
  "eager AMIGO_PROTOCOL=eager"
  "stop-auto AMIGO_PROTOCOL=stop AMIGO_STOP_VARIANT=auto"
  "stop-keep AMIGO_PROTOCOL=stop AMIGO_STOP_VARIANT=keep"
  "stop-discard AMIGO_PROTOCOL=stop AMIGO_STOP_VARIANT=discard"
  "stop-put AMIGO_PROTOCOL=stop AMIGO_STOP_VARIANT=put"
)
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  # Even rounds run the protocols in reverse order, so that a drift of the
  # machine during a round favours none of them.
  order=("${configs[@]}")
  if [ $((r % 2)) = 0 ]; then
    order=()
    for ((i = ${#configs[@]} - 1; i >= 0; i--)); do order+=("${configs[i]}"); done
  fi
  for c in "${order[@]}"; do
    # shellcheck disable=SC2086
    run $c
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import json, sys, collections, statistics
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    o = json.loads(line)
    v = o.get("latency_us", o.get("mb_per_s"))
    if v is not None:
        vals[(o["benchmark"], o["size"], o["config"])].append(v)
med = {k: statistics.median(v) for k, v in vals.items()}
cfgs = ["rendezvous", "eager", "stop-auto", "stop-keep", "stop-discard", "stop-put"]
def size(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1 << 10 else f"{s} B"
for bench, unit, base in (("latency", "us", "eager"), ("bw", "MB/s", "rendezvous"), ("bw_late", "MB/s", "rendezvous")):
    sizes = sorted({s for (b, s, _) in med if b == bench})
    if not sizes:
        continue
    print(f"\n{bench} ({unit}, median of the rounds); x = stop-auto / {base}, median of the per-round ratios")
    print("| size | " + " | ".join(cfgs) + " | x |")
    print("|-----:|" + "|".join("-" * (len(c) + 1) + ":" for c in cfgs) + "|--:|")
    for s in sizes:
        row = [med.get((bench, s, c)) for c in cfgs]
        pairs = list(zip(vals.get((bench, s, "stop-auto"), []), vals.get((bench, s, base), [])))
        x = f"{statistics.median(a / b for a, b in pairs if b):.2f}" if pairs else "-"
        cells = ["-" if v is None else f"{v:,.2f}" if unit == "us" else f"{v:,.0f}" for v in row]
        print(f"| {size(s)} | " + " | ".join(cells) + f" | {x} |")
PY
