#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# tests/layering/layering_test.sh [BUILD_DIR] — the source tree keeps the
# include rules (check_layering.py), and the check catches each kind of
# violation: a copy of the tree with one bad include must fail, naming that
# file and line.  With BUILD_DIR, the tools' link rules too
# (check_links.py on the build's CMake codemodel), and a copy of the
# codemodel with one bad link must fail, naming that target.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
check=$root/tests/layering/check_layering.py
py=/usr/bin/python3
"$py" "$check" "$root"
build=${1:-}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# fresh_copy: $tmp/tree, a copy of the sources.
fresh_copy() {
  rm -rf "$tmp/tree"
  mkdir -p "$tmp/tree"
  (cd "$root" && cp -r --parents alloc cache fs tools tests "$tmp/tree"/)
}
# must_fail WHAT LINE CHECK ARG: CHECK on ARG must exit 1 and print a line
# that starts with LINE; WHAT names the case in the failure.
cases=0
must_fail() {
  local what=$1 line=$2 out rc
  shift 2
  set +e
  out=$("$py" "$@" 2>&1)
  rc=$?
  set -e
  if [ "$rc" -ne 1 ] || ! grep -q "^$line" <<<"$out"; then
    echo "FAIL: $what: exit $rc, expected 1 and a line starting '$line':"
    echo "$out"
    exit 1
  fi
  cases=$((cases + 1))
}
# break_one FILE HEADER: a fresh copy of the sources with "#include HEADER"
# added at the end of FILE; the check must fail naming FILE and that line.
break_one() {
  local file=$1 header=$2
  fresh_copy
  [ -f "$tmp/tree/$file" ] || { echo "FAIL: $file does not exist (update this test)"; exit 1; }
  printf '#include %s\n' "$header" >>"$tmp/tree/$file"
  must_fail "#include $header in $file" "$file:$(wc -l <"$tmp/tree/$file"): " "$check" "$tmp/tree"
}
break_one alloc/page_pool.cc '"cache/page.h"'
break_one alloc/page.h '"fs/options.h"'
break_one alloc/die.cc '"tools/ctl/ctl.h"'
break_one cache/page_cache.cc '"fs/options.h"'
break_one cache/page_index.h '"tools/lib/progress.h"'
break_one fs/daemon.cc '"tools/ctl/ctl.h"'
break_one tools/ctl/ctl.cc '"fs/options.h"'
break_one cache/page_cache.cc '"../fs/options.h"'
break_one cache/page_index.h '<urcu/rculist.h>'
break_one alloc/page_pool.cc '<urcu-qsbr.h>'
break_one tests/cache/page_index_test.cc '<urcu.h>'
break_one alloc/page_pool.cc '<jemalloc/jemalloc.h>'
break_one cache/page_cache.cc '<fuse_lowlevel.h>'
break_one tools/ctl/ctl.cc '<fuse3/fuse.h>'
break_one tests/fs/helpers/as_user.cc '<fuse.h>'
# The tools' groups (tools/README.md): bench/ and check/ never include each
# other, ctl/ neither of them, lib/ nothing of the others; the FUSE
# transport is the minimal server's alone.
break_one tools/bench/punch_wait.cc '"tools/check/evict_race.h"'
break_one tools/check/evict_race.cc '"tools/bench/pread_scaling.h"'
break_one tools/ctl/ctl.cc '"tools/bench/fill_free.h"'
break_one tools/ctl/norefsctl.cc '"tools/check/soak_monitor.h"'
break_one tools/lib/report.cc '"tools/ctl/ctl.h"'
break_one tools/check/mount_race.cc '"fs/fuse_io.h"'
break_one tools/check/evict_race_main.cc '<fuse_lowlevel.h>'
break_one tools/bench/pread_scaling.cc '"fs/options.h"'
# A C++ file in tools/ itself is in no group.
fresh_copy
printf '// stray\n' >"$tmp/tree/tools/stray.cc"
must_fail "tools/stray.cc" "tools/stray.cc:1: " "$check" "$tmp/tree"
ncopies=$cases

if [ -n "$build" ]; then
  links_check=$root/tests/layering/check_links.py
  reply=$build/.cmake/api/v1/reply
  # CMake answers a query that was there when it started: a build configured
  # once by hand (not by tools/build.sh, which asks first) has no reply yet.
  if ! compgen -G "$reply/index-*.json" >/dev/null; then
    cmake "$build" >/dev/null
  fi
  "$py" "$links_check" "$reply"
  # break_link TARGET WHAT EXPECT: a copy of the codemodel in which TARGET
  # depends on the target WHAT (or, WHAT = -lfuse3, links libfuse); the
  # check must exit 1 with a line "TARGET: ...EXPECT".
  break_link() {
    local target=$1 what=$2 expect=$3 copy=$tmp/reply
    rm -rf "$copy"
    cp -r "$reply" "$copy"
    "$py" - "$copy" "$target" "$what" <<'PY'
import json, pathlib, sys
reply, target, what = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
idx = json.loads(sorted(reply.glob("index-*.json"))[-1].read_text())
cm = next(o for o in idx["objects"] if o["kind"] == "codemodel")
conf = json.loads((reply / cm["jsonFile"]).read_text())["configurations"][0]
by_name = {t["name"]: t for t in conf["targets"]}
path = reply / by_name[target]["jsonFile"]
data = json.loads(path.read_text())
if what == "-lfuse3":
    data.setdefault("link", {}).setdefault("commandFragments", []).append(
        {"fragment": "-lfuse3", "role": "libraries"})
else:
    data.setdefault("dependencies", []).append({"id": by_name[what]["id"]})
path.write_text(json.dumps(data))
PY
    must_fail "$target -> $what" "$target: .*$expect" "$links_check" "$copy"
  }
  break_link norefsctl norefs_bench "depends on norefs_bench"
  break_link norefs_ctl norefs_check "depends on norefs_check"
  break_link norefs_evict_race norefs_bench "depends on norefs_bench"
  break_link norefs_bench norefs_check "depends on norefs_check"
  break_link norefs_pread_scaling -lfuse3 "links libfuse"
  break_link norefs_soak norefs_fuse_io "links norefs_fuse_io"
  break_link norefs_alloc_stat norefs_fs "links norefs_fs"
fi
if [ -n "$build" ]; then
  echo "layering: ok (the tree and the build pass; $ncopies broken copies and $((cases - ncopies)) broken links fail)"
else
  echo "layering: ok (the tree passes; $ncopies broken copies fail; no build dir, links not checked)"
fi
