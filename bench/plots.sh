#!/usr/bin/env bash
# bench/plots.sh: the latency and bandwidth plots under docs/ — amibench
# over shared memory and over TCP next to the C benchmark (bench/osu/osu.c)
# under MPICH and Open MPI, two ranks on this host, full OSU size sweeps
# (0 B to 4 MiB). Not part of CI.
#
#   bash bench/plots.sh                  # ROUNDS=3 interleaved rounds, medians
#   OUT=/tmp/plots bash bench/plots.sh   # somewhere else than docs/
#
# Every run writes the JSON lines of compare.sh (amibench --json, osu
# --json, each line tagged with its run's name); they are kept in
# $OUT/pt2pt.json, and `amibench compare` draws $OUT/pt2pt.png from them
# and prints the ratio table, kept in $OUT/pt2pt.txt. It holds
# /tmp/amigo-bench.lock while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
need_debs mpich libmpich-dev openmpi-bin libopenmpi-dev
bench_work
OUT=${OUT:-docs}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"

cflags="-O2 -Wall -Wno-stringop-overflow"
mpicc.mpich $cflags -o "$work/osu-mpich" bench/osu/osu.c
mpicc.openmpi $cflags -o "$work/osu-ompi" bench/osu/osu.c
go build -o "$work/amibench" ./cmd/amibench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

about="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; $(mpichversion | sed -n 's/MPICH Version:\s*/MPICH /p'); $(ompi_info --version 2>/dev/null | head -1)"
echo "$about" >&2
# Runs of one round go one after the other, so the curves of a round are
# measured within a minute of each other.
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  rec "amigo shm" "$work/amibench" --json -b latency,bw
  rec "amigo tcp" "$work/amibench" --json --transport tcp -b latency,bw
  for b in latency bw; do
    rec "MPICH" mpiexec.hydra -n 2 "$work/osu-mpich" $b --json
    rec "Open MPI" mpirun.openmpi -n 2 "$work/osu-ompi" $b --json
  done
done
cp "$work/results" "$OUT/pt2pt.json"
{
  echo "# $about; medians of $ROUNDS rounds; ratios to amigo shm"
  "$work/amibench" compare -o "$OUT/pt2pt.png" --title "2 ranks, one host" "$OUT/pt2pt.json"
} | tee "$OUT/pt2pt.txt"
