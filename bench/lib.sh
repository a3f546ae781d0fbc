# bench/lib.sh: what the comparison scripts share. Source it from a script
# after `cd` to the repository root:
#
#   . bench/lib.sh
#   bench_lock "$@"           # re-run the script holding /tmp/amigo-bench.lock
#   need_debs mpich libmpich-dev
#   need_mpis                 # MPICH and Open MPI, MPICH kept the default
#   build_osu                 # $work/osu-mpich, $work/osu-ompi
#   bench_work                # $work: a temporary directory, removed on exit
#   bench_priority            # after bench_work: what rec and ucx_run run
#                             # takes the processors first (see below)
#   rec NAME CMD...           # run CMD, keep its JSON lines under NAME
#   ucx_run NAME TLS TEST SIZE ITERS   # one ucx_perftest run over UCX_TLS=TLS
#
# rec appends to $work/results; a failed or timed-out command leaves a
# {"run":NAME,"failed":true} line and a note on standard error. TIMEOUT
# (seconds, default 600) bounds each command.

export PATH=$PATH:/usr/local/go/bin

# bench_lock re-executes the calling script under flock on the shared lock,
# so that measurements on a shared machine do not overlap.
bench_lock() {
  if [ -z "${AMIGO_BENCH_LOCKED:-}" ]; then
    exec env AMIGO_BENCH_LOCKED=1 flock /tmp/amigo-bench.lock bash "$0" "$@"
  fi
}

# need_debs installs the Debian packages named that are missing (as root).
need_debs() {
  local missing=() p
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# need_mpis installs Debian's MPICH and Open MPI with their compilers if
# either is missing. Installing Open MPI may make it the default MPI; a
# default MPICH is kept.
need_mpis() {
  if command -v mpicc.mpich >/dev/null && command -v mpicc.openmpi >/dev/null; then
    return 0
  fi
  local before
  before=$(readlink -f /usr/bin/mpicc 2>/dev/null || true)
  need_debs mpich libmpich-dev openmpi-bin libopenmpi-dev
  if [ "$before" = /usr/bin/mpicc.mpich ]; then
    update-alternatives --set mpi /usr/bin/mpicc.mpich >/dev/null
    update-alternatives --set mpirun /usr/bin/mpirun.mpich >/dev/null
  fi
}

# build_osu builds bench/osu/osu.c against each MPI: $work/osu-mpich and
# $work/osu-ompi (after bench_work and need_mpis).
build_osu() {
  local cflags="-O2 -Wall -Wno-stringop-overflow"
  mpicc.mpich $cflags -o "$work/osu-mpich" bench/osu/osu.c
  mpicc.openmpi $cflags -o "$work/osu-ompi" bench/osu/osu.c
}

bench_work() {
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  : >"$work/results"
}

# bench_priority makes what rec and ucx_run start take the processors
# before the builds and tests that others run on the machine meanwhile.
# Those run under nice 15, but where the kernel groups tasks by session
# (/proc/sys/kernel/sched_autogroup_enabled, 1 on our machines) a
# nice value weighs only against tasks of the same session: a test in a
# session of its own gets as much of a processor as a benchmark's rank
# bound to it, and takes it for slices of milliseconds, longer than a
# whole window of messages. Rounds of `amibench -b bw` with another
# session's tests running then swung 5-40x at one size (4 KiB to 4 MiB,
# two ranks on two cores), and their medians were set by such rounds.
# So each command runs in a session of its own (setsid), whose group has
# nice BENCH_NICE (default -15; "off" leaves it): against a test in
# another session of nice 0, a benchmark's rank keeps 93-97% of its
# processor, as against a nice 15 test in its own session without the
# grouping. A launcher whose ranks start sessions of their own (MPICH's
# hydra) must start them through "${prio[@]}" too, so that every
# implementation compared runs alike. It does nothing where the kernel has
# no autogroup or it may not be written (a negative nice needs root).
prio=()
bench_priority() {
  local nice=${BENCH_NICE:--15}
  if [ "$nice" = off ] || [ ! -w /proc/self/autogroup ]; then
    return 0
  fi
  cat >"$work/prio" <<'EOF'
#!/bin/sh
# prio NICE CMD...: CMD in a session of its own whose autogroup has nice NICE.
nice=$1
shift
set -- $(cut -d' ' -f5,6 /proc/$$/stat) "$@"
pgrp=$1 sid=$2
shift 2
if [ "$sid" != $$ ]; then
  if [ "$pgrp" != $$ ]; then
    # Not a group leader (a child of timeout): setsid execs in place, and
    # the pid timeout signals stays this command's.
    exec setsid "$0" "$nice" "$@"
  fi
  exec setsid -w "$0" "$nice" "$@"
fi
echo "$nice" >/proc/self/autogroup 2>/dev/null
exec "$@"
EOF
  chmod +x "$work/prio"
  prio=("$work/prio" "$nice")
}

rec() {
  local name=$1; shift
  if ! timeout -k 10 "${TIMEOUT:-600}" ${prio[@]+"${prio[@]}"} "$@" >"$work/out" 2>"$work/err"; then
    echo "  $name: failed or timed out: $(tail -n 3 "$work/err" | tr '\n' ' ')" >&2
    echo "{\"run\":\"$name\",\"failed\":true}" >>"$work/results"
    return 0
  fi
  grep '^{' "$work/out" | sed "s|^{|{\"run\":\"$name\",|" >>"$work/results" || true
}

# ucx_run NAME TLS TEST SIZE ITERS: one ucx_perftest run (Debian's
# ucx-utils) with UCX_TLS=TLS, server and client on loopback (port PORT,
# default 13411), its final figures kept under NAME as a JSON line:
# latency_us (half the round trip for the *_lat tests), mb_per_s (UCX's
# MiB/s converted to OSU's 10^6 bytes/s) and messages_per_s.
ucx_run() {
  local name=$1 tls=$2 test=$3 size=$4 iters=$5 out port=${PORT:-13411}
  UCX_TLS=$tls timeout -k 5 120 ${prio[@]+"${prio[@]}"} ucx_perftest -p "$port" -t "$test" -s "$size" -n "$iters" -f >/dev/null 2>&1 &
  local srv=$!
  out=""
  for _ in $(seq 50); do
    if out=$(UCX_TLS=$tls timeout -k 5 120 ${prio[@]+"${prio[@]}"} ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" -f 2>/dev/null); then
      break
    fi
    out=""
    sleep 0.1
  done
  wait "$srv" 2>/dev/null || true
  # The final line: iterations, latency 50th percentile, average, overall
  # (us), bandwidth average, overall (MiB/s), message rate average, overall.
  local line
  line=$(echo "$out" | awk 'NF==8 && $1 ~ /^[0-9]+$/ {l=$0} END {print l}')
  if [ -z "$line" ]; then
    echo "  $name: ucx_perftest -t $test -s $size over $tls failed" >&2
    echo "{\"run\":\"$name\",\"failed\":true}" >>"$work/results"
    return 0
  fi
  # A figure UCX could not compute (a latency of "inf" in a bandwidth
  # test) is left out, so that the line stays JSON.
  echo "$line" | awk -v run="$name" -v size="$size" 'function num(k, v) { return v ~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ ? sprintf(",\"%s\":%s", k, v) : "" }
    {printf "{\"run\":\"%s\",\"size\":%d%s,\"mb_per_s\":%.3f%s}\n", run, size, num("latency_us", $3), $6*1.048576, num("messages_per_s", $8)}' >>"$work/results"
}
