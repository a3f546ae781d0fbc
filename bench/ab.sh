#!/usr/bin/env bash
# bench/ab.sh: amibench built from two revisions of amigo, measured side by
# side in one run: ROUNDS interleaved rounds (default 5), medians of every
# figure and the ratio B/A. Not part of CI.
#
#   bash bench/ab.sh REV_A [REV_B] [-- amibench flags]
#   bash bench/ab.sh 72b414b^ HEAD -- -b latency --min-size 8 --max-size 8
#
# REV_B defaults to the working tree; TAGS are build tags for both (e.g.
# TAGS=ofi with --transport ofi). Both are built with the same Go, and
# each round runs A then B then B then A, so drift in the machine's load
# falls on both alike. Environment (AMIGO_*) reaches both. Each run takes
# the processors before other sessions' builds and tests (bench_priority in
# bench/lib.sh; BENCH_NICE=off runs it as any other command).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
ROUNDS=${ROUNDS:-5}
a=${1:?usage: bench/ab.sh REV_A [REV_B] [-- amibench flags]}
shift
b=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  b=$1
  shift
fi
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(-b latency --min-size 8 --max-size 8)
bench_work
bench_priority
build() { # build REV OUT: amibench at REV (empty: the working tree)
  if [ -z "$1" ]; then
    go build -tags "${TAGS:-}" -o "$2" ./cmd/amibench
    return
  fi
  git worktree add -q --detach "$work/src" "$1"
  (cd "$work/src" && go build -tags "${TAGS:-}" -o "$2" ./cmd/amibench)
  git worktree remove --force "$work/src"
}
build "$a" "$work/amibench-a"
build "$b" "$work/amibench-b"
echo "A: $(git rev-parse --short "$a") $(git log -1 --format=%s "$a" | cut -c1-60)"
echo "B: ${b:-working tree}"
echo "amibench ${flags[*]}, $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  rec A "$work/amibench-a" --json "${flags[@]}"
  rec B "$work/amibench-b" --json "${flags[@]}"
  rec B "$work/amibench-b" --json "${flags[@]}"
  rec A "$work/amibench-a" --json "${flags[@]}"
done
python3 - "$work/results" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("failed"):
        print("failed run:", r["run"]); continue
    for k, v in r.items():
        if k in ("run", "benchmark", "size", "transport", "ranks") or not isinstance(v, (int, float)):
            continue
        rows.setdefault((r["benchmark"], r["size"], k), {}).setdefault(r["run"], []).append(v)
print("| benchmark | size | figure | A | B | B/A | runs |")
print("|---|---|---|---|---|---|---|")
for (bm, size, k), v in sorted(rows.items()):
    if "A" not in v or "B" not in v:
        continue
    ma, mb = statistics.median(v["A"]), statistics.median(v["B"])
    ratio = f"{mb / ma:.3f}" if ma else "-"
    print(f"| {bm} | {size} | {k} | {ma:.4g} | {mb:.4g} | {ratio} | {len(v['A'])} |")
PY
