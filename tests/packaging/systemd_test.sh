#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# systemd_test.sh verify|unstale SOURCE_DIR DAEMON MAN_DIR:
#   verify   the units in packaging/systemd pass `systemd-analyze verify`
#            with no message at all (it exits 0 on a bad Type= too, with
#            only a message).  systemd need not be running: verify loads the
#            files itself.  Without systemd-analyze: a message and exit 77
#            (ctest: skipped).
#   unstale  the template's ExecStartPre detaches a dead mount (a daemon
#            killed with SIGKILL) so that the restart mounts again, and
#            leaves a live one alone.  Temporary mountpoints, detached and
#            their daemons killed in every outcome.
set -euo pipefail
mode=$1 src=$2 daemon=$3 man_dir=$4
units=$src/packaging/systemd
scratch=$(mktemp -d /tmp/norefs-unit-XXXXXX)
pids=()
cleanup() {
  local m p
  for m in "$scratch"/m*; do findmnt -rn --mountpoint "$m" >/dev/null 2>&1 && umount -l "$m"; done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# ── systemd-analyze verify ──
if [ "$mode" = verify ]; then
  if ! command -v systemd-analyze >/dev/null; then
    echo "SKIP: systemd-analyze is not installed (apt-get install systemd): units not verified"
    exit 77
  fi
  # The template as shipped, but for the one path that is not installed
  # here: /usr/bin/norefs is the build's daemon.  The instance is a link, as
  # systemctl enable makes it; MANPATH lets verify find man:norefs(8).
  v=$scratch/units
  mkdir -p "$v"
  sed "s|/usr/bin/norefs |$daemon |" "$units/norefs@.service" >"$v/norefs@.service"
  ln -s norefs@.service "$v/norefs@mnt-data.service"
  cp "$units/mnt-data.mount" "$v/"
  mkdir -p "$scratch/man/man8" "$scratch/man/man1"
  cp "$man_dir"/*.8 "$scratch/man/man8/"
  cp "$man_dir"/*.1 "$scratch/man/man1/"
  out=$(cd "$v" && MANPATH=$scratch/man systemd-analyze verify ./norefs@mnt-data.service ./mnt-data.mount 2>&1) ||
    fail "systemd-analyze verify exited non-zero"
  if [ -n "$out" ]; then fail "systemd-analyze verify says:"; echo "$out"; else ok "systemd-analyze verify: nothing to say"; fi
  echo "$fails failed"
  [ $fails -eq 0 ]
  exit
fi
[ "$mode" = unstale ] || { echo "usage: systemd_test.sh verify|unstale SOURCE_DIR DAEMON MAN_DIR" >&2; exit 2; }

# ── ExecStartPre: a dead mount is detached, a live one is not ──
pre=$(sed -n 's/^ExecStartPre=//p' "$units/norefs@.service")
[ -n "$pre" ] || { echo "FAIL: the template has no ExecStartPre"; exit 1; }
mkdir -p "$scratch/b" "$scratch/m1" "$scratch/m2" "$scratch/stats"
echo data >"$scratch/b/f"
start_fg() {  # start_fg M: a foreground daemon on M, its pid in $pid once mounted
  "$daemon" -f -o "stats_dir=$scratch/stats" "$scratch/b" "$1" >"$scratch/log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 100); do findmnt -rn --mountpoint "$1" >/dev/null && return 0; sleep 0.1; done
  echo "FAIL: the daemon did not mount $1"; cat "$scratch/log"; exit 1
}
run_pre() { eval "${pre//%f/$1}"; }  # systemd's quoting here is the shell's
stop_wait() {  # stop_wait: the daemon $pid exits within 10 s (else killed); its status
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { fail "daemon $pid still runs after the unmount"; kill -9 "$pid"; }
  wait "$pid"
}

start_fg "$scratch/m1"
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
if stat "$scratch/m1" >/dev/null 2>&1; then fail "killing the daemon left a working mount?"; fi
out=$(run_pre "$scratch/m1" 2>&1) || fail "ExecStartPre failed on a dead mount: $out"
if findmnt -rn --mountpoint "$scratch/m1" >/dev/null; then fail "ExecStartPre left the dead mount"; else ok "dead mount detached ($out)"; fi
# ... after which the service's ExecStart mounts again.
start_fg "$scratch/m1"
[ "$(cat "$scratch/m1/f")" = data ] || fail "remount after the clean-up does not read"
umount "$scratch/m1" || fail "umount m1"
stop_wait || fail "the remounted daemon exited $?"

start_fg "$scratch/m2"
out=$(run_pre "$scratch/m2" 2>&1) || fail "ExecStartPre failed on a live mount: $out"
if [ "$(cat "$scratch/m2/f" 2>&1)" = data ]; then ok "live mount left alone"; else fail "ExecStartPre touched a live mount"; fi
umount "$scratch/m2" || fail "umount m2"
stop_wait || fail "the daemon exited $?"

out=$(run_pre "$scratch/m1" 2>&1) || fail "ExecStartPre failed with nothing mounted: $out"
[ -z "$out" ] || fail "ExecStartPre printed '$out' with nothing mounted"

echo "$fails failed"
[ $fails -eq 0 ]
