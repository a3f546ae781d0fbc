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
#
# Beside the ratio of the medians it prints the median and the range of
# the ratios within each round: the host's state can change between two
# rounds a minute apart (the same binary's 8-byte message rate has moved
# from 12 to 25 M/s), and a wide range says the run settled nothing.
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
  rec "A.$r" "$work/amibench-a" --json "${flags[@]}"
  rec "B.$r" "$work/amibench-b" --json "${flags[@]}"
  rec "B.$r" "$work/amibench-b" --json "${flags[@]}"
  rec "A.$r" "$work/amibench-a" --json "${flags[@]}"
done
python3 - "$work/results" <<'PY'
import json, statistics, sys
# rows[(benchmark, size, figure)][round] = {"A": [...], "B": [...]}
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    side, _, rnd = r["run"].partition(".")
    if r.get("failed"):
        print("failed run:", r["run"]); continue
    for k, v in r.items():
        if k in ("run", "benchmark", "size", "transport", "ranks") or not isinstance(v, (int, float)):
            continue
        rows.setdefault((r["benchmark"], r["size"], k), {}).setdefault(rnd, {}).setdefault(side, []).append(v)
# B/A: of the medians over all rounds; and, per round, of the means of
# its two A and two B runs (seconds apart, so a change in the machine's
# state between rounds falls on both): their median and range.
print("| benchmark | size | figure | A | B | B/A | B/A by round: median (range) | runs |")
print("|---|---|---|---|---|---|---|---|")
for (bm, size, k), rounds in sorted(rows.items()):
    a = [v for rd in rounds.values() for v in rd.get("A", [])]
    b = [v for rd in rounds.values() for v in rd.get("B", [])]
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    ratio = f"{mb / ma:.3f}" if ma else "-"
    per = [statistics.mean(rd["B"]) / statistics.mean(rd["A"]) for rd in rounds.values()
           if rd.get("A") and rd.get("B") and statistics.mean(rd["A"])]
    byround = f"{statistics.median(per):.3f} ({min(per):.2f}-{max(per):.2f})" if per else "-"
    print(f"| {bm} | {size} | {k} | {ma:.4g} | {mb:.4g} | {ratio} | {byround} | {len(a)} |")
PY
