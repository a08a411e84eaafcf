# Shared by the bench/*.sh scripts, which source it after cd'ing to the
# repository's root. Not run on its own.

# bench_workdir NAME: a fresh folder on tmpfs (/dev/shm when there is one,
# or $BENCH_DIR), so that the tools are measured and not this VM's disk.
bench_workdir() {
  local base=${BENCH_DIR:-/dev/shm}
  [ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
  mktemp -d "$base/$1.XXXXXX"
}

# secs COMMAND...: its wall time in seconds; on failure nothing (the figure
# stays unmeasured) and the command's error on stderr. Needs $work.
secs() {
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$@" >/dev/null 2>"$work/err"; then
    echo "$(basename "$0"): $1 failed: $(head -c 300 "$work/err")" >&2
    return 1
  fi
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.3f", $2-$1}'
}

# keep KEY SECONDS: best[KEY] becomes the fastest time seen (the caller
# declares the associative array best); an empty time is ignored.
keep() {
  [ -n "$2" ] || return 0
  if [ -z "${best[$1]:-}" ] || awk "BEGIN{exit !($2 < ${best[$1]})}"; then best[$1]=$2; fi
}

# qemu_luks1 IMG SIZE_MIB CIPHER_OPTS PASSFILE: a LUKS1 image made by
# qemu-img. qemu 7.2 times its PBKDF and fails with "Unable to get accurate
# CPU usage" when its first timed run measures 0 ms, as it mostly does on a
# fast core (fixed in qemu 9.2.1): on the 4.1 GHz Xeon VM of 2026-12-01 in 2
# to 6 of 8 tries, and one whole bench/all.sh run lost its path section
# after 6 retries. That, and only that, is retried.
qemu_luks1() {
  local out try
  for try in $(seq 40); do
    if out=$(qemu-img create -q --object secret,id=s0,file="$4" -f luks \
      -o "key-secret=s0,$3,hash-alg=sha256,iter-time=100" "$1" "${2}M" 2>&1); then return 0; fi
    case "$out" in *"accurate CPU usage"*) [ "$try" -lt 40 ] && sleep 0.2 && continue ;; esac
    echo "$out" >&2
    return 1
  done
}

# wait_port: wait up to 10 s for an NBD server on 127.0.0.1:$port.
wait_port() {
  for _ in $(seq 100); do nbdinfo --size "nbd://127.0.0.1:$port" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server on $port did not come up" >&2
  return 1
}
