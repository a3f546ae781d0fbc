# bench/lib.sh: what the comparison scripts share. Source it from a script
# after `cd` to the repository root:
#
#   . bench/lib.sh
#   bench_lock "$@"           # re-run the script holding /tmp/amigo-bench.lock
#   need_debs mpich libmpich-dev
#   bench_work                # $work: a temporary directory, removed on exit
#   rec NAME CMD...           # run CMD, keep its JSON lines under NAME
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

bench_work() {
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  : >"$work/results"
}

rec() {
  local name=$1; shift
  if ! timeout -k 10 "${TIMEOUT:-600}" "$@" >"$work/out" 2>"$work/err"; then
    echo "  $name: failed or timed out: $(tail -n 3 "$work/err" | tr '\n' ' ')" >&2
    echo "{\"run\":\"$name\",\"failed\":true}" >>"$work/results"
    return 0
  fi
  grep '^{' "$work/out" | sed "s|^{|{\"run\":\"$name\",|" >>"$work/results" || true
}
