#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# xfstests.sh: run xfstests (github:kdave/xfstests) through a norefs mount,
# or through libfuse's example passthrough_hp for comparison.  Run as root.
# docs/xfstests.md has the results and what each failure is.
#
# usage: tools/check/xfstests.sh -x XFSTESTS_DIR [options] [TEST...] [-- CHECK_ARGS...]
#
#   -x DIR      an xfstests tree that is already built (its README: the
#               packages, then `make`); env XFSTESTS_DIR.  The tree is not
#               changed: the config and the results live outside it.
#   -d BIN      the norefs daemon to test (env NOREFS_BIN; default
#               build/release/fs/norefs of this checkout)
#   -p BIN      test BIN, a passthrough_hp (libfuse's example/passthrough_hp.cc)
#               instead of norefs (env PASSTHROUGH_HP).  It must accept -o
#               and go to the background only after it has mounted, which
#               libfuse 3.14's does not: docs/xfstests.md says what to change.
#   -o OPTS     mount options (default -oallow_other,default_permissions;
#               env XFSTESTS_MOUNT_OPTS)
#   -g GROUP    the group to run (default quick; ignored when tests are named)
#   -i N        run each test N times (check -i N); the summary has a row
#               per run, the diff is the last failing run's
#   -t SECONDS  per-test time limit (default 600): a test still running then
#               is killed (TERM, then KILL) and recorded as a timeout
#   -s SIZE     size of each sparse ext4 backing image (default 4G)
#   -r DIR      results (default ./xfstests-results/<fs>-<UTC time>)
#   -w DIR      scratch directory for images and mount points (default: a
#               new /tmp/norefs-xfstests.XXXXXX, removed at the end)
#   -k          keep the scratch directory (the images) at the end
#   -n          no apt-get: fail if a package is missing instead
#   -h          this help
#   TEST...     tests to run instead of the group (generic/001 ...)
#   -- ARGS     passed to xfstests' ./check as they are (-E exclude-file, ...)
#
# What it does, in order:
#  1. installs the Debian packages xfstests runs (apt-get) if any is missing;
#  2. creates users fsgqa, fsgqa2, 123456-fsgqa and group fsgqa if missing;
#  3. makes two sparse ext4 images (TEST and SCRATCH), loop-mounted, and a
#     backing directory on each;
#  4. enters a private mount namespace (unshare -m), in which a read-only
#     overlay puts mount.fuse.norefs (or mount.fuse.passthrough_hp) into
#     /sbin, where mount(8) looks for helpers: nothing outside the namespace
#     changes, and every mount of the run is made in the namespace;
#  5. writes local.config (FSTYP=fuse, FUSE_SUBTYP=.norefs or
#     .passthrough_hp) in the scratch directory (HOST_OPTIONS points at it)
#     and puts an umount wrapper first in PATH: xfstests unmounts by source,
#     the backing directory, and umount(8) given a directory that is not a
#     mount point says "not mounted"; the wrapper turns a FUSE mount's source
#     into its mount point;
#  6. runs ./check with a watchdog beside it that kills a test past the time
#     limit and puts /dev/null back (and records the test) if a test left it
#     anything but the character device (in the namespace /dev/null is also
#     bind-mounted on itself, so that it cannot be removed);
#  7. in every outcome (EXIT, INT, TERM): unmounts the FUSE mounts and the
#     images, ends the daemons (they are the processes in the namespace),
#     detaches the loop devices, removes the images;
#  8. prints pass/fail/not-run counts, each failure with the first lines of
#     its diff, the not-run reasons, and writes summary.json and summary.csv
#     into the results directory beside xfstests' own results.
# Exit status: 0 if no test failed, 1 if one did, 2 on a usage or setup error.

# (SC2317: ShellCheck 0.9 takes the trap handlers for unreachable code.)
# shellcheck disable=SC2317
set -euo pipefail
shopt -s nullglob

prog=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

die() { echo "$prog: $*" >&2; exit 2; }
say() { echo "$prog: $*" >&2; }
usage() { sed -n '/^# usage:/,/^# Exit status/s/^# \{0,1\}//p' "$0"; }

# The packages xfstests needs to run (its README lists them with the ones
# needed to build it).
packages=(acl attr bc dbench e2fsprogs fio gawk psmisc python3 quota sed
  uuid-runtime xfsprogs util-linux fuse3 libcap2-bin)

# ---------------------------------------------------------------- options
xfstests=${XFSTESTS_DIR:-}
norefs_bin=${NOREFS_BIN:-$root/build/release/fs/norefs}
php_bin=${PASSTHROUGH_HP:-}
mount_opts=${XFSTESTS_MOUNT_OPTS:--oallow_other,default_permissions}
group=quick
iterations=
limit=600
img_size=4G
results=
work=
keep=false
use_apt=true
inner=false

if [[ ${1:-} == --inner ]]; then
  inner=true
  shift
fi

while getopts ':x:d:p:o:g:i:t:s:r:w:knh' opt; do
  case $opt in
    x) xfstests=$OPTARG ;;
    d) norefs_bin=$OPTARG ;;
    p) php_bin=$OPTARG ;;
    o) mount_opts=$OPTARG ;;
    g) group=$OPTARG ;;
    i) iterations=$OPTARG ;;
    t) limit=$OPTARG ;;
    s) img_size=$OPTARG ;;
    r) results=$OPTARG ;;
    w) work=$OPTARG ;;
    k) keep=true ;;
    n) use_apt=false ;;
    h) usage; exit 0 ;;
    :) die "-$OPTARG needs a value (-h for help)" ;;
    *) die "unknown option -$OPTARG (-h for help)" ;;
  esac
done
shift $((OPTIND - 1))
tests=()
check_args=()
while (($#)); do
  if [[ $1 == -- ]]; then
    shift
    check_args=("$@")
    break
  fi
  tests+=("$1")
  shift
done

[[ $limit =~ ^[0-9]+$ && $limit -gt 0 ]] || die "-t wants a number of seconds, not '$limit'"
[[ -z $iterations || $iterations =~ ^[0-9]+$ ]] || die "-i wants a number, not '$iterations'"

if [[ -n $php_bin ]]; then
  subtype=passthrough_hp
  daemon=$php_bin
else
  subtype=norefs
  daemon=$norefs_bin
fi

# ------------------------------------------------------- the inner part
# Runs in the private mount namespace: everything from the config to the
# summary.  $work, $results and the rest come from the outer part.
run_inner() {
  # Not local: inner_cleanup runs on EXIT, after this function returned.
  local status=0
  ext4=$work/ext4
  mnt=$work/mnt
  bin=$work/bin
  sbin=$work/sbin
  log=$results/check.log
  ns_self=$(readlink /proc/self/ns/mnt)
  # The cleanup ends every process of this namespace: it must be our own.
  [[ $ns_self != "$(readlink "/proc/$PPID/ns/mnt")" ]] ||
    die "--inner is for the script itself (it runs it under unshare -m)"
  echo "$ns_self" >"$work/ns"
  check_pid=
  watchdog_pid=
  tail_pid=

  inner_cleanup() {
    local rc=$? m p left
    trap - EXIT INT TERM
    set +eu
    [[ -n $watchdog_pid ]] && kill "$watchdog_pid" 2>/dev/null && wait "$watchdog_pid" 2>/dev/null
    if [[ -n $check_pid ]] && kill -0 "$check_pid" 2>/dev/null; then
      say "stopping ./check (pid $check_pid)"
      kill -TERM "$check_pid" 2>/dev/null
      for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$check_pid" 2>/dev/null || break; sleep 1; done
      kill -KILL "$check_pid" 2>/dev/null
    fi
    [[ -n $tail_pid ]] && kill "$tail_pid" 2>/dev/null
    # The FUSE mounts, newest first: umount, or if that does not finish
    # (a daemon that no longer answers), abort the connection and detach.
    local conn
    for m in $(our_mounts "$mnt"); do
      timeout -k 5 30 umount "$m" 2>/dev/null && continue
      conn=$(awk -v m="$m" '$5 == m { split($3, d, ":"); c = d[2] } END { print c }' /proc/self/mountinfo)
      [[ -n $conn && -e /sys/fs/fuse/connections/$conn/abort ]] &&
        echo 1 >"/sys/fs/fuse/connections/$conn/abort"
      umount -l "$m" 2>/dev/null || say "could not unmount $m"
    done
    # What is left in the namespace (daemons, a test's stray children) was
    # started by this run: end it.
    left=$(ns_pids "$ns_self")
    if [[ -n $left ]]; then
      # shellcheck disable=SC2086
      kill -TERM $left 2>/dev/null
      sleep 2
      left=$(ns_pids "$ns_self")
      # shellcheck disable=SC2086
      [[ -n $left ]] && kill -KILL $left 2>/dev/null
    fi
    # The images last (their loop devices go with them: mount -o loop).
    for m in $(our_mounts "$ext4"); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "could not unmount $m"
    done
    guard_devnull "(at the end)"
    exit "$rc"
  }
  trap inner_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  # The backing filesystems: ext4 on loop devices, a directory on each as
  # the FUSE source (not the ext4 root: no lost+found in the mount).
  mkdir -p "$ext4/test" "$ext4/scratch" "$mnt/test" "$mnt/scratch" "$bin" "$sbin"
  local d
  for d in test scratch; do
    mount -o loop "$work/$d.img" "$ext4/$d" || die "cannot loop-mount $work/$d.img"
    mkdir -p "$ext4/$d/base"
    chmod 755 "$ext4/$d" "$ext4/$d/base"
  done

  # The helper, where mount(8) looks: an overlay of our directory on /sbin.
  local sbin_real
  sbin_real=$(realpath /sbin)
  if [[ $subtype == norefs ]]; then
    # packaging: /usr/sbin/mount.fuse.norefs is a link to the daemon.
    ln -sf "$daemon" "$sbin/mount.fuse.norefs"
  else
    # passthrough_hp calls itself hpps in the mount table; the source and
    # the subtype make it look as xfstests expects (and as norefs does).
    cat >"$sbin/mount.fuse.passthrough_hp" <<EOF
#!/bin/sh
# mount(8) runs: mount.fuse.passthrough_hp SOURCE MOUNTPOINT -o OPTIONS
ulimit -n 1048576 2>/dev/null
src=\$(realpath "\$1")
exec "$daemon" "\$@" -o "fsname=\$src,subtype=passthrough_hp"
EOF
    chmod 755 "$sbin/mount.fuse.passthrough_hp"
  fi
  mount -t overlay overlay -o "ro,lowerdir=$sbin:$sbin_real" "$sbin_real" ||
    die "cannot put the helper over $sbin_real (overlay)"
  # /dev/null bind-mounted on itself: in this namespace it cannot be
  # removed or renamed over (EBUSY), so no test can leave a regular file
  # there (an earlier run by hand did); a test that tries fails with
  # "Device or resource busy" in its output.  The watchdog still checks.
  mount --bind /dev/null /dev/null || say "could not bind /dev/null on itself"
  # The cleanup's way out of a hung FUSE connection.
  [[ -d /sys/fs/fuse/connections ]] && ! mountpoint -q /sys/fs/fuse/connections &&
    mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null

  # umount wrapper: a FUSE source (backing directory) -> its mount point.
  local real_umount
  real_umount=$(type -P umount)
  cat >"$bin/umount" <<EOF
#!/bin/bash
# xfstests unmounts by source (\$TEST_DEV, \$SCRATCH_DEV): for a FUSE mount
# that is the backing directory, which umount(8) takes for a mount point
# and says "not mounted".  Replace such an argument by the mount point of
# the newest FUSE mount with that source (what umount does for a device).
args=()
skip=false
for a in "\$@"; do
  if \$skip; then args+=("\$a"); skip=false; continue; fi
  case \$a in
    -t|-O|-N|--types|--test-opts|--namespace) skip=true ;;
    -*) ;;
    *)
      if ! findmnt -rn --mountpoint "\$a" >/dev/null 2>&1; then
        t=\$(findmnt -rn -o SOURCE,FSTYPE,TARGET | awk -v s="\$a" '\$1 == s && \$2 ~ /^fuse/ { t = \$3 } END { print t }')
        [ -n "\$t" ] && a=\$t
      fi ;;
  esac
  args+=("\$a")
done
exec $real_umount "\${args[@]}"
EOF
  chmod 755 "$bin/umount"

  # df wrapper: xfstests checks that TEST_DEV is mounted as $FSTYP with
  # _fs_type, the type column of df -T, which is fuse.SUBTYPE for a helper
  # that sets a subtype (norefs does; libfuse's examples do not): "is
  # mounted but not a type fuse filesystem".  Show our sources as fuse.
  local real_df
  real_df=$(type -P df)
  cat >"$bin/df" <<EOF
#!/bin/bash
# xfstests' _fs_type compares df -T's type with \$FSTYP (fuse): show this
# run's FUSE mounts (sources under $ext4/) as fuse, not fuse.$subtype.
set -o pipefail
$real_df "\$@" | sed -E 's#^($ext4/[^ ]*)( +)fuse\\.$subtype( |\$)#\\1\\2fuse\\3#'
EOF
  chmod 755 "$bin/df"

  # local.config: HOST_OPTIONS names it, the tree stays as it is.
  cat >"$work/local.config" <<EOF
# written by $prog
export FSTYP=fuse
export FUSE_SUBTYP=.$subtype
export TEST_DEV=$ext4/test/base
export TEST_DIR=$mnt/test
export SCRATCH_DEV=$ext4/scratch/base
export SCRATCH_MNT=$mnt/scratch
export TEST_FS_MOUNT_OPTS="$mount_opts"
export MOUNT_OPTIONS="$mount_opts"
export RESULT_BASE=$results/xfstests
EOF
  cp "$work/local.config" "$results/local.config"

  local args=(-R xunit-quiet)
  [[ -n $iterations ]] && args+=(-i "$iterations")
  if ((${#tests[@]})); then
    args+=("${tests[@]}")
  else
    args+=(-g "$group")
  fi
  args+=("${check_args[@]}")

  say "daemon: $daemon (fuse.$subtype), options $mount_opts"
  say "xfstests: $xfstests; results: $results; limit ${limit}s per test"
  say "./check ${args[*]}"
  date -u +%FT%TZ >"$results/start"
  (
    cd "$xfstests"
    export HOST_OPTIONS=$work/local.config PATH="$bin:$PATH"
    exec ./check "${args[@]}"
  ) >"$log" 2>&1 &
  check_pid=$!
  tail -n +1 -F --pid="$check_pid" "$log" 2>/dev/null &
  tail_pid=$!
  watchdog "$check_pid" &
  watchdog_pid=$!
  wait "$check_pid" || status=$?
  wait "$tail_pid" 2>/dev/null || true
  tail_pid=
  date -u +%FT%TZ >"$results/end"
  echo "$status" >"$results/check.status"
  check_pid=
  kill "$watchdog_pid" 2>/dev/null
  wait "$watchdog_pid" 2>/dev/null || true
  watchdog_pid=
  # inner_cleanup runs on exit
}

# Mount points under $1 in this namespace, newest first.
our_mounts() {
  awk -v p="$1/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | tac
}

# Pids in mount namespace $1, but this shell and its subshells' parents.
ns_pids() {
  local p ns
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" || $p == "$BASHPID" ]] && continue
    ns=$(readlink "/proc/$p/ns/mnt" 2>/dev/null) || continue
    [[ $ns == "$1" ]] && echo "$p"
  done
}

# /dev/null must stay the character device 1,3: if it is not, put it back
# and record what was running ($1).
guard_devnull() {
  if [[ ! -c /dev/null ]] || [[ $(stat -c %t:%T /dev/null) != 1:3 ]]; then
    local what
    what=$(stat -c '%F %s bytes' /dev/null 2>/dev/null || echo missing)
    rm -f /dev/null
    mknod -m 666 /dev/null c 1 3
    echo "$(date -u +%FT%TZ) $1: /dev/null was $what; recreated" | tee -a "$results/devnull.txt" >&2
  fi
}

# Descendants of pid $1 (not $1 itself).
descendants() {
  local kids k
  kids=$(pgrep -P "$1" || true)
  for k in $kids; do
    echo "$k"
    descendants "$k"
  done
}

# Beside ./check (pid $1): the test now running is its child
# "/bin/bash <xfstests>/tests/<dir>/<name>".  Kill one that has run $limit seconds;
# guard /dev/null every 2 s.
watchdog() {
  local check_pid=$1 cur='' cur_pid='' since=0 now p cmd name pids
  while kill -0 "$check_pid" 2>/dev/null; do
    name=
    for p in $(pgrep -P "$check_pid" || true); do
      cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
      if [[ $cmd =~ tests/([a-z0-9_-]+/[0-9]+)\ *$ ]]; then
        name=${BASH_REMATCH[1]}
        break
      fi
    done
    now=$(date +%s)
    if [[ -n $name && ( $name != "$cur" || $p != "$cur_pid" ) ]]; then
      cur=$name cur_pid=$p since=$now
    fi
    guard_devnull "${cur:-before any test} (last test seen)"
    if [[ -n $name && $((now - since)) -ge $limit ]]; then
      echo "$cur $limit" >>"$results/timeouts.txt"
      say "$cur: over ${limit}s, killing it"
      pids="$cur_pid $(descendants "$cur_pid")"
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null
      sleep 10
      pids="$cur_pid $(descendants "$cur_pid")"
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null
      # Wait for this pid to go before looking again.
      while kill -0 "$cur_pid" 2>/dev/null; do sleep 1; done
      cur=
    fi
    sleep 2
  done
}

# ------------------------------------------------------------ summary
summarize() {
  python3 - "$results" "$xfstests" "$subtype" "${iterations:-1}" <<'EOF'
import csv, json, os, re, sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict

results, xfstests, subtype, iterations = sys.argv[1:5]
base = os.path.join(results, "xfstests")
# Reasons name this run's scratch paths: the variables instead, so that the
# same reason is one line however many runs there were.
paths = []
try:
    for line in open(os.path.join(results, "local.config")):
        m = re.match(r"export (TEST_DEV|TEST_DIR|SCRATCH_DEV|SCRATCH_MNT)=(\S+)", line)
        if m:
            paths.append((m.group(2), "$" + m.group(1)))
except FileNotFoundError:
    pass
paths.sort(key=lambda p: -len(p[0]))
def generic(text):
    for p, v in paths:
        text = text.replace(p, v)
    return text
timeouts = {}
try:
    for line in open(os.path.join(results, "timeouts.txt")):
        t, s = line.split()
        timeouts[t] = int(s)
except FileNotFoundError:
    pass

def diff_head(test, n=8):
    bad = os.path.join(base, test + ".out.bad")
    good = os.path.join(xfstests, "tests", test + ".out")
    if not os.path.exists(bad):
        return []
    import difflib
    a = open(good, errors="replace").read().splitlines() if os.path.exists(good) else []
    b = open(bad, errors="replace").read().splitlines()
    lines = [generic(l) for l in difflib.unified_diff(a, b, lineterm="", n=0)
             if not l.startswith(("---", "+++", "@@"))]
    return lines[:n]

runs = []
xml_path = os.path.join(base, "result.xml")
# With -i N each iteration rewrites result.xml: then the log has them all.
if os.path.exists(xml_path) and iterations == "1":
    for tc in ET.parse(xml_path).getroot().iter("testcase"):
        name = tc.get("name")
        sk, fa = tc.find("skipped"), tc.find("failure")
        if sk is not None:
            runs.append((name, "notrun", (sk.get("message") or "").strip(), tc.get("time")))
        elif fa is not None:
            runs.append((name, "fail", (fa.get("message") or "").strip(), tc.get("time")))
        else:
            runs.append((name, "pass", "", tc.get("time")))
else:
    # No report (./check interrupted) or -i N: read its log.
    pat = re.compile(r"^(\w+/\d+)\s+(.*)$")
    for line in open(os.path.join(results, "check.log"), errors="replace"):
        m = pat.match(line.rstrip("\n"))
        if not m:
            continue
        name, rest = m.groups()
        if "[not run]" in rest:
            runs.append((name, "notrun", rest.split("[not run]", 1)[1].strip(), None))
        elif "[expunged]" in rest:
            continue
        elif re.search(r"output mismatch|failed|_check_dmesg|\[dumped core\]", rest):
            # "26s ... " before it is the time of the previous run
            runs.append((name, "fail", re.sub(r"^\d+s \.\.\.\s*", "", rest.strip()), None))
        elif re.search(r"\d+s\s*$", rest):
            runs.append((name, "pass", "", rest.split()[-1].rstrip("s")))

rows = []
for name, st, reason, secs in runs:
    if name in timeouts and st != "notrun":
        st, reason = "timeout", "killed by the harness after %ds (%s)" % (timeouts[name], reason)
    rows.append({"test": name, "status": st, "seconds": secs, "reason": generic(reason),
                 "diff": diff_head(name) if st in ("fail", "timeout") else []})

counts = Counter(r["status"] for r in rows)
summary = {"fs": "fuse." + subtype, "counts": dict(counts), "tests": rows}
for f in ("start", "end", "check.status"):
    try:
        summary[f.replace(".", "_")] = open(os.path.join(results, f)).read().strip()
    except FileNotFoundError:
        pass
json.dump(summary, open(os.path.join(results, "summary.json"), "w"), indent=1)
with open(os.path.join(results, "summary.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["test", "status", "seconds", "reason", "diff"])
    for r in rows:
        w.writerow([r["test"], r["status"], r["seconds"] or "", r["reason"], "\n".join(r["diff"])])

print()
print("fuse.%s: %d ran: %d passed, %d failed, %d timed out; %d not run" % (
    subtype, counts["pass"] + counts["fail"] + counts["timeout"], counts["pass"],
    counts["fail"], counts["timeout"], counts["notrun"]))
shown = set()
for r in rows:
    if r["status"] in ("fail", "timeout"):
        print("%s %s: %s" % (r["status"].upper(), r["test"], r["reason"]))
        # xfstests keeps the last iteration's .out.bad only: show it once
        if r["test"] not in shown:
            shown.add(r["test"])
            for l in r["diff"]:
                print("    " + l)
reasons = defaultdict(list)
for r in rows:
    if r["status"] == "notrun":
        reasons[r["reason"]].append(r["test"])
if iterations != "1":
    per = defaultdict(Counter)
    for r in rows:
        per[r["test"]][r["status"]] += 1
    print("per test, of %s iterations:" % iterations)
    for t, c in sorted(per.items()):
        print("  %s  %s" % (t, ", ".join("%s %d" % kv for kv in sorted(c.items()))))
if reasons:
    print("not run, by reason:")
    for why, ts in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        print("  %3d  %s  (%s)" % (len(ts), why, " ".join(ts) if len(ts) <= 6 else
                                   " ".join(ts[:6]) + " ..."))
print("%d passed, %d failed" % (counts["pass"], counts["fail"] + counts["timeout"]))
sys.exit(1 if counts["fail"] + counts["timeout"] else 0)
EOF
}

# The rest is one brace group, parsed whole before it runs: bash reads a
# script as it goes, and a run would otherwise execute whatever an edit of
# this file put at its reading position.
{
if $inner; then
  # The outer part exported what we need.
  work=$XFS_WORK results=$XFS_RESULTS daemon=$XFS_DAEMON
  run_inner
  exit
fi

# ------------------------------------------------------- the outer part
[[ $(id -u) == 0 ]] || die "run me as root (loop devices, mounts, users)"
[[ -n $xfstests ]] || die "name a built xfstests tree with -x DIR (or XFSTESTS_DIR); -h for help"
xfstests=$(cd "$xfstests" && pwd) || die "no such directory: $xfstests"
[[ -x $xfstests/check ]] || die "$xfstests has no ./check: not an xfstests tree"
[[ -x $xfstests/ltp/fsstress ]] || die "$xfstests is not built (no ltp/fsstress): build it as its README says"
[[ -x $daemon ]] || die "no daemon at $daemon (build it: tools/build.sh build/release; or -d/-p BIN)"
daemon=$(realpath "$daemon")
[[ -c /dev/fuse ]] || die "no /dev/fuse"

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  $use_apt || die "missing packages: ${missing[*]} (-n given: not installing)"
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 ||
    die "apt-get install ${missing[*]} failed"
fi

# The users and groups xfstests' _require_user/_require_group look for.
getent group fsgqa >/dev/null || groupadd fsgqa
getent passwd fsgqa >/dev/null || useradd -m -g fsgqa fsgqa
getent passwd fsgqa2 >/dev/null || useradd -m fsgqa2
getent passwd 123456-fsgqa >/dev/null || useradd -m 123456-fsgqa 2>/dev/null ||
  say "cannot create user 123456-fsgqa (a few tests need it)"

stamp=$(date -u +%Y%m%dT%H%M%SZ)
results=${results:-$PWD/xfstests-results/$subtype-$stamp}
mkdir -p "$results"
results=$(cd "$results" && pwd)
made_work=false
if [[ -z $work ]]; then
  work=$(mktemp -d /tmp/norefs-xfstests.XXXXXX)
  made_work=true
else
  mkdir -p "$work"
  work=$(cd "$work" && pwd)
fi
# fsgqa must reach the mount points.
chmod 755 "$work"

inner_pid=
summary_done=false
outer_cleanup() {
  local rc=$? ns p img dev left
  trap - EXIT INT TERM
  set +eu
  if [[ -n $inner_pid ]] && kill -0 "$inner_pid" 2>/dev/null; then
    kill -TERM "$inner_pid" 2>/dev/null
    wait "$inner_pid" 2>/dev/null
  fi
  # Whatever the namespace still holds (the inner part was killed before
  # it could clean up): its processes are ours.
  ns=$(cat "$work/ns" 2>/dev/null)
  if [[ -n $ns && $ns != "$(readlink /proc/self/ns/mnt)" ]]; then
    left=$(ns_pids "$ns")
    if [[ -n $left ]]; then
      say "ending what the namespace still runs: $left"
      # shellcheck disable=SC2086
      kill -KILL $left 2>/dev/null
      sleep 1
    fi
  fi
  for img in "$work/test.img" "$work/scratch.img"; do
    [[ -e $img ]] || continue
    for dev in $(losetup -n -O NAME -j "$img" 2>/dev/null); do
      losetup -d "$dev" 2>/dev/null || say "could not detach $dev ($img)"
    done
  done
  guard_devnull "(after the run)"
  # Interrupted: what ran so far.
  if ! $summary_done && [[ -s $results/check.log ]]; then
    summarize
  fi
  if ! $keep; then
    rm -f "$work/test.img" "$work/scratch.img"
    if $made_work; then rm -rf "$work"; fi
  else
    say "kept $work"
  fi
  exit "$rc"
}
trap outer_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for d in test scratch; do
  rm -f "$work/$d.img"
  truncate -s "$img_size" "$work/$d.img"
  mkfs.ext4 -q -F "$work/$d.img" || die "mkfs.ext4 $work/$d.img failed"
done

export XFS_WORK=$work XFS_RESULTS=$results XFS_DAEMON=$daemon
inner_args=(-x "$xfstests" -o "$mount_opts" -g "$group" -t "$limit")
[[ -n $iterations ]] && inner_args+=(-i "$iterations")
[[ -n $php_bin ]] && inner_args+=(-p "$php_bin")
inner_args+=("${tests[@]}" -- "${check_args[@]}")
SECONDS=0
unshare -m --propagation private -- "$0" --inner "${inner_args[@]}" &
inner_pid=$!
wait "$inner_pid" || true
inner_pid=
say "the run took $((SECONDS / 60)) min $((SECONDS % 60)) s"
summary_done=true
rc=0
summarize || rc=$?
say "results in $results"
exit "$rc"
}
