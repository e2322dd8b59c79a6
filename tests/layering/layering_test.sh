#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# tests/layering/layering_test.sh — the source tree keeps the include rules
# (check_layering.py), and the check catches each kind of violation: a copy
# of the tree with one bad include must fail, naming that file and line.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
check=$root/tests/layering/check_layering.py
py=/usr/bin/python3
"$py" "$check" "$root"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# break FILE HEADER: a fresh copy of the sources with "#include HEADER" added
# at the end of FILE; the check must exit 1 and name FILE and that line.
cases=0
break_one() {
  local file=$1 header=$2 copy=$tmp/tree
  rm -rf "$copy"
  mkdir -p "$copy"
  (cd "$root" && cp -r --parents alloc cache fs tools tests "$copy"/)
  [ -f "$copy/$file" ] || { echo "FAIL: $file does not exist (update this test)"; exit 1; }
  printf '#include %s\n' "$header" >>"$copy/$file"
  local line out rc
  line=$(wc -l <"$copy/$file")
  set +e
  out=$("$py" "$check" "$copy" 2>&1)
  rc=$?
  set -e
  if [ "$rc" -ne 1 ] || ! grep -q "^$file:$line: " <<<"$out"; then
    echo "FAIL: #include $header in $file: exit $rc, expected 1 and a line naming $file:$line:"
    echo "$out"
    exit 1
  fi
  cases=$((cases + 1))
}
break_one alloc/page_pool.cc '"cache/page.h"'
break_one alloc/page.h '"fs/options.h"'
break_one alloc/die.cc '"tools/ctl.h"'
break_one cache/page_cache.cc '"fs/options.h"'
break_one cache/page_index.h '"tools/progress.h"'
break_one fs/daemon.cc '"tools/ctl.h"'
break_one tools/ctl.cc '"fs/options.h"'
break_one cache/page_cache.cc '"../fs/options.h"'
break_one cache/page_index.h '<urcu/rculist.h>'
break_one alloc/page_pool.cc '<urcu-qsbr.h>'
break_one tests/cache/page_index_test.cc '<urcu.h>'
break_one alloc/page_pool.cc '<jemalloc/jemalloc.h>'
break_one cache/page_cache.cc '<fuse_lowlevel.h>'
break_one tools/ctl.cc '<fuse3/fuse.h>'
break_one tests/fs/helpers/as_user.cc '<fuse.h>'
echo "layering: ok (the tree passes; $cases broken copies fail)"
