#!/usr/bin/env bash
# bench/all.sh: every side-by-side figure of the small and mid-size message
# work in one command, each script with ROUNDS interleaved rounds
# (default 5) and medians. Not part of CI; it takes a quarter of an hour on a
# 2-core machine.
#
#   bash bench/all.sh
#   ROUNDS=7 bash bench/all.sh
#
# 1. bench/compare_pt2pt.sh: shared memory, two ranks: 8 B latency and
#    message rate, 4 KiB-4 MiB bandwidth, next to MPICH, Open MPI and UCX,
#    and 1 and 4 MiB of amibench as built at BASE_REV (default fa72c74, the
#    large-message path before the small and mid-size work) in the same
#    rounds, which those sizes must stay within 10% of.
# 2. bench/compare_lat.sh: 8 B latency over shared memory, the AMI's and
#    package mpi's, next to MPICH, Open MPI and UCX, each run counted in
#    the state of the host it ran in.
# 3. bench/compare_coll.sh: 64 B allreduce and barrier on 2, 4, 8 and 16
#    ranks of this host, next to Open MPI (and MPICH on 2 ranks: it
#    busy-polls, and oversubscribed takes milliseconds a collective).
# 4. bench/tcp/compare.sh: TCP over loopback, next to a Go busy-poll
#    ping-pong and UCX over TCP.
# 5. bench/shm_mem.sh: shared memory at the peak of a 1 MiB all-to-all, 8,
#    16 and 32 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_lock "$@"
export ROUNDS=${ROUNDS:-5}
echo "== shared memory, two ranks (bench/compare_pt2pt.sh)"
BASE_REV=${BASE_REV:-fa72c74} bash bench/compare_pt2pt.sh
echo
echo "== 8 B latency by the host's state (bench/compare_lat.sh)"
ROUNDS=${LAT_ROUNDS:-20} bash bench/compare_lat.sh
echo
echo "== collectives, 2 to 16 ranks (bench/compare_coll.sh)"
RANKS="2 4 8 16" BENCHES="allreduce barrier" SIZES=64 ITERS=${ITERS:-10000} MPICH_MAX=2 bash bench/compare_coll.sh
echo
echo "== TCP over loopback (bench/tcp/compare.sh)"
bash bench/tcp/compare.sh
echo
echo "== shared memory held, all-to-all of 1 MiB (bench/shm_mem.sh)"
bash bench/shm_mem.sh
