#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# deb_test.sh BUILD_DIR: the Debian package, built from BUILD_DIR with CPack,
# passes lintian with no error, holds what it should, and mounts the way
# users mount once it is installed.
#
# The package is not installed: it is extracted (dpkg-deb -x) into a
# scratch root, and the mounts run in a private mount namespace (unshare -m)
# in which read-only overlays put the scratch root's usr/bin and usr/sbin
# over /usr/bin and /usr/sbin.  Inside, mount(8) finds /sbin/mount.fuse.norefs
# and /bin/sh finds norefs in its default PATH exactly as on a machine with
# the package installed (mount(8) clears PATH for its helpers, so a PATH
# entry would not do), while the real system is unchanged: the overlays, the
# scratch fstab and every mount vanish with the namespace.  /etc/fstab is
# never read for a mount here (mount -T names a scratch fstab).
#
# Forms (each: mount, read through it, check type, source and which program
# serves it, umount, the daemon exits cleanly), first without the helper
# link (mount(8) runs mount.fuse3, which runs norefs through /bin/sh), then
# with it (mount(8) runs /sbin/mount.fuse.norefs itself):
#   mount -t fuse.norefs B M -o cache_size=1G,read_path=noref
#   fstab: B M fuse.norefs cache_size=1G,nofail,... 0 0      (mount -T FILE M)
#   fstab: norefs#B M fuse cache_size=1G 0 0                 (always mount.fuse3)
# and an unknown option fails (the daemon's exit 2) with nothing mounted.
#
# cpack first runs the build's `preinstall` target, which builds whatever is
# out of date: run this after a full build (tools/test.sh does), or it
# compiles first.
set -euo pipefail

build=$(cd "${1:?usage: deb_test.sh BUILD_DIR}" && pwd)
for tool in cpack lintian dpkg-deb unshare findmnt; do
  command -v "$tool" >/dev/null ||
    { echo "FAIL: $tool is missing (tools/setup-deps.sh installs it)"; exit 1; }
done
[ -e /dev/fuse ] || { echo "FAIL: no /dev/fuse"; exit 1; }

scratch=$(mktemp -d /tmp/norefs-pkg-XXXXXX)
stats=$scratch/stats
mkdir -p "$stats"
# Every outcome: kill the daemons still running (found by their counter
# files, cache.<pid>, by pid), which ends the namespace and its mounts.
cleanup() {
  local f pid
  for f in "$stats"/cache.*; do
    [ -e "$f" ] || continue
    pid=${f##*.}
    if [ -d "/proc/$pid" ]; then
      echo "cleanup: killing daemon $pid"
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# ── Build the package ──
t0=$(date +%s.%N)
(cd "$build" && cpack -G DEB -B "$scratch/cpack") >"$scratch/cpack.log" 2>&1 ||
  { cat "$scratch/cpack.log"; echo "FAIL: cpack"; exit 1; }
t1=$(date +%s.%N)
deb=$(ls "$scratch"/cpack/norefs_*.deb)
echo "package: $(basename "$deb"), $(stat -c %s "$deb") bytes, cpack $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"

# ── lintian: no error (warnings are listed, not fatal) ──
lintian --tag-display-limit 0 "$deb" >"$scratch/lintian.log" 2>&1 || true
t2=$(date +%s.%N)
sed 's/^/lintian: /' "$scratch/lintian.log"
echo "lintian: $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s"
if grep -q '^E: ' "$scratch/lintian.log"; then fail "lintian reports errors"; else ok "lintian: no errors"; fi

# ── Control fields ──
control=$(dpkg-deb -f "$deb")
depends=$(dpkg-deb -f "$deb" Depends)
for d in libfuse3-3 liburcu8 libjemalloc2 liburing2 fuse3; do
  [[ ", $depends," == *", $d"[\ ,]* ]] || fail "Depends lacks $d: $depends"
done
for r in fio python3; do
  [[ ", $(dpkg-deb -f "$deb" Recommends)," == *", $r,"* ]] || fail "Recommends lacks $r"
done
echo "$control" | grep -E '^(Package|Version|Architecture|Depends|Recommends|Installed-Size):' | sed 's/^/control: /'

# ── Contents ──
root=$scratch/root
dpkg-deb -x "$deb" "$root"
for f in usr/bin/norefs usr/bin/norefsctl usr/bin/norefs_pread_scaling usr/bin/norefs_evict_race \
  usr/bin/norefs_alloc_stat usr/bin/norefs_punch_wait usr/lib/norefs/fill_free_bench usr/lib/norefs/norefs_minimal_fuse; do
  [ -x "$root/$f" ] && [ -f "$root/$f" ] || fail "$f missing or not executable"
done
[ "$(readlink "$root/usr/sbin/mount.fuse.norefs")" = ../bin/norefs ] ||
  fail "usr/sbin/mount.fuse.norefs is not a link to ../bin/norefs"
for f in usr/share/norefs/fs_bench.sh usr/share/norefs/fs_bench_report.py usr/share/norefs/plot.py; do
  [ -x "$root/$f" ] && [ -f "$root/$f" ] || fail "$f missing or not executable"
done
for f in usr/share/norefs/fs_bench.sh usr/share/norefs/fio/pread16.fio \
  usr/share/man/man8/norefs.8.gz usr/share/man/man1/norefsctl.1.gz usr/share/man/man1/norefs-bench.1.gz \
  usr/lib/systemd/system/norefs@.service usr/share/doc/norefs/copyright \
  usr/share/doc/norefs/changelog.Debian.gz usr/share/doc/norefs/examples/mnt-data.mount; do
  [ -f "$root/$f" ] || fail "$f missing"
done
for l in man8/mount.fuse.norefs.8.gz man1/norefs_pread_scaling.1.gz; do
  [ -f "$root/usr/share/man/$l" ] || fail "man page link $l does not resolve"
done
"$root/usr/bin/norefs" --version >/dev/null || fail "the extracted norefs does not run"
[ $fails -eq 0 ] && ok "contents"

# ── Mounts, in a private mount namespace ──
backing=$scratch/backing
mkdir -p "$backing" "$scratch"/m{1,2,3,4,5,6}
echo "through the package" >"$backing/f"
# mount -T takes a whole fstab; entries name the scratch mountpoints only.
cat >"$scratch/fstab" <<FSTAB
$backing $scratch/m2 fuse.norefs cache_size=1G,nofail,stats_dir=$stats 0 0
norefs#$backing $scratch/m3 fuse cache_size=1G,stats_dir=$stats 0 0
$backing $scratch/m5 fuse.norefs cache_size=1G,nofail,_netdev,x-systemd.requires=local-fs.target,comment=x,stats_dir=$stats 0 0
FSTAB

cat >"$scratch/inner.sh" <<'INNER'
set -uo pipefail
root=$1 scratch=$2 backing=$3 stats=$4
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
t() { timeout -k 5 30 "$@"; }  # no single step may hang the test
overlay() {  # overlay DIR: the package's DIR over the system's, here only
  mount -t overlay overlay -o "lowerdir=$root$1:$1" "$1" || { echo "FAIL: overlay on $1"; exit 1; }
}
# daemon_of M: the pid serving M (its stats file is cache.<pid>), newest first
daemon_for() {
  local before=$1 f
  for f in "$stats"/cache.*; do
    [ -e "$f" ] || continue
    [[ " $before " == *" ${f##*.} "* ]] || { echo "${f##*.}"; return; }
  done
}
pids_now() { local f; for f in "$stats"/cache.*; do [ -e "$f" ] && echo -n "${f##*.} "; done; }

# check NAME MOUNTPOINT WANT_ARGV0 COMMAND...: mount with COMMAND, then check
# and unmount it.
check() {
  local name=$1 m=$2 want=$3
  shift 3
  local before out pid argv0
  before=$(pids_now)
  if ! out=$(t "$@" 2>&1); then
    fail "$name: '$*' failed: $out"
    return
  fi
  # The command returned: the mount must be live now (no waiting).
  if [ "$(findmnt -rn -o FSTYPE --mountpoint "$m")" != fuse.norefs ]; then
    fail "$name: no fuse.norefs mount on $m after '$*' returned"
    return
  fi
  [ "$(findmnt -rn -o SOURCE --mountpoint "$m")" = "$backing" ] || fail "$name: source is not $backing"
  [ "$(t cat "$m/f")" = "through the package" ] || fail "$name: reading through the mount"
  pid=$(daemon_for "$before")
  argv0=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -1)
  [ "$argv0" = "$want" ] || fail "$name: served by '$argv0', want '$want'"
  t "$root/usr/bin/norefsctl" stats "$m" >/dev/null || fail "$name: the package's norefsctl stats"
  t umount "$m" || fail "$name: umount $m"
  findmnt -rn --mountpoint "$m" >/dev/null && { fail "$name: still mounted"; umount -l "$m"; }
  # A clean exit removes the counter files; wait for it (bounded).
  for _ in $(seq 100); do [ -e "$stats/cache.$pid" ] || break; sleep 0.1; done
  if [ -e "$stats/cache.$pid" ]; then fail "$name: daemon $pid did not exit cleanly"; else ok "$name ($argv0)"; fi
}

# 1. Without the helper link: the package's usr/bin only.  mount(8) runs
#    /sbin/mount.fuse (mount.fuse3), which runs norefs through /bin/sh.
overlay /usr/bin
[ ! -e /sbin/mount.fuse.norefs ] || { echo "FAIL: /sbin/mount.fuse.norefs exists on this system"; exit 1; }
check "mount -t fuse.norefs via mount.fuse3" "$scratch/m1" norefs \
  mount -t fuse.norefs "$backing" "$scratch/m1" -o "cache_size=1G,read_path=noref,stats_dir=$stats"
check "fstab fuse.norefs,nofail via mount.fuse3" "$scratch/m2" norefs \
  mount -T "$scratch/fstab" "$scratch/m2"
check "fstab norefs# legacy via mount.fuse3" "$scratch/m3" norefs \
  mount -T "$scratch/fstab" "$scratch/m3"

# 2. The package as installed: /sbin/mount.fuse.norefs -> ../bin/norefs, which
#    mount(8) runs itself with the fstab options (nofail, _netdev) included.
overlay /usr/sbin
[ -L /sbin/mount.fuse.norefs ] || { echo "FAIL: the overlay shows no /sbin/mount.fuse.norefs"; exit 1; }
check "mount -t fuse.norefs via mount.fuse.norefs" "$scratch/m4" /sbin/mount.fuse.norefs \
  mount -t fuse.norefs "$backing" "$scratch/m4" -o "cache_size=1G,read_path=noref,stats_dir=$stats"
check "fstab fuse.norefs,nofail,_netdev,x-*,comment= via mount.fuse.norefs" "$scratch/m5" /sbin/mount.fuse.norefs \
  mount -T "$scratch/fstab" "$scratch/m5"
check "fstab norefs# legacy, helper installed" "$scratch/m3" norefs \
  mount -T "$scratch/fstab" "$scratch/m3"

# 3. An unknown option: the daemon's exit 2 comes back through mount(8); nothing mounted.
for via in "mount -t fuse.norefs" "mount.fuse3"; do
  if [ "$via" = mount.fuse3 ]; then
    out=$(t mount.fuse3 "$backing" "$scratch/m6" -o "no_such_option,stats_dir=$stats" -t fuse.norefs 2>&1)
  else
    out=$(t mount -t fuse.norefs "$backing" "$scratch/m6" -o "no_such_option,stats_dir=$stats" 2>&1)
  fi
  rc=$?
  if findmnt -rn --mountpoint "$scratch/m6" >/dev/null; then
    fail "unknown option via $via: mounted"
    umount -l "$scratch/m6"
  elif [ $rc -ne 2 ]; then
    fail "unknown option via $via: exit $rc, want 2 ($out)"
  elif [[ $out != *no_such_option* ]]; then
    fail "unknown option via $via: the message does not name it: $out"
  else
    ok "unknown option via $via: exit 2, nothing mounted"
  fi
done
exit $((fails > 0))
INNER

unshare -m --propagation private timeout -k 5 240 \
  bash "$scratch/inner.sh" "$root" "$scratch" "$backing" "$stats" || fails=$((fails + 1))
for m in "$scratch"/m*; do
  findmnt -rn --mountpoint "$m" >/dev/null && { fail "$m is mounted outside the namespace"; umount -l "$m"; }
done
echo "$fails failed"
[ $fails -eq 0 ]
