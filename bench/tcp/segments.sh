#!/usr/bin/env bash
# bench/tcp/segments.sh: TCP segments per message of the 8-byte ping-pong,
# for amigo (amibench --transport tcp -b latency) and the plain Go baseline
# (bench/tcp/plain), each run alone in a network namespace of its own (so
# that the kernel's counters, read with nstat, count its segments and no
# one else's). Needs root (unshare -n) and iproute2. Not part of CI.
#
#   bash bench/tcp/segments.sh            # at HEAD's tree
#   REV=9062c65 bash bench/tcp/segments.sh  # amibench built at REV too
#
# A ping-pong whose replies carry the TCP acknowledgements of the requests
# costs one segment per message. One connection per direction costs more:
# the receiver of each connection acknowledges every other packet with a
# segment of its own, from its read, before it answers. This is a count,
# not a timing: it does not drift with the machine's load, and needs no
# lock.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/plain" ./bench/tcp/plain
go build -o "$work/amibench" ./cmd/amibench
bins=(amibench)
if [ -n "${REV:-}" ]; then
  git worktree add -q --detach "$work/src" "$REV"
  (cd "$work/src" && go build -o "$work/amibench-rev" ./cmd/amibench)
  git worktree remove --force "$work/src"
  bins+=(amibench-rev)
fi
# count NAME CMD...: messages and segments of one run in a fresh namespace.
count() {
  local name=$1; shift
  unshare -n bash -c '
    ip link set lo up
    nstat -n >/dev/null
    "$@" >/dev/null
    nstat -a TcpOutSegs TcpExtTCPOrigDataSent | awk "/^Tcp/ {print \$1, \$2}"
  ' _ "$@" | awk -v name="$name" '
    $1 == "TcpOutSegs" {segs = $2}
    $1 == "TcpExtTCPOrigDataSent" {data = $2}
    END {printf "%-14s %9d segments, %9d with data: %.2f segments per data segment\n", name, segs, data, segs / data}'
}
flags=(-b latency --min-size 8 --max-size 8 --iterations 10000 --warmup 100)
count plain "$work/plain" -b latency --min-size 8 --max-size 8
for b in "${bins[@]}"; do
  count "$b" "$work/$b" --transport tcp "${flags[@]}"
done
