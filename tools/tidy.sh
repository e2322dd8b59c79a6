#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# tidy.sh BUILD_DIR [DIR...]: the curated clang-tidy (.clang-tidy) over the
# .cc files of DIR... (default: alloc cache fs), compiled as BUILD_DIR
# compiles them (its compile_commands.json), one process per core.  Every
# report is an error (.clang-tidy: WarningsAsErrors); exits 1 if any file
# has one.  tools/test.sh runs it when NOREFS_TIDY=1 (docs/testing.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
shift
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(alloc cache fs)
# A directory's files and those of its subdirectories (tools/bench/...).
pattern="^$root/($(IFS='|'; echo "${dirs[*]}"))/.*\.cc\$"
out=$(mktemp)
db=$(mktemp -d)
trap 'rm -rf "$out" "$db"' EXIT
# The compile commands without the GCC-only options clang does not know
# (CMakeLists.txt: -fno-extern-tls-init), and with each file of a unity
# build (tools/CMakeLists.txt: the tools' libraries) as its own entry,
# compiled as the unity file that includes it is, so that clang-tidy sees
# the files themselves.
python3 - "$build/compile_commands.json" >"$db/compile_commands.json" <<'PY'
import json, re, sys
entries = []
for e in json.load(open(sys.argv[1])):
    e["command"] = e["command"].replace(" -fno-extern-tls-init", "")
    if not re.search(r"/unity_[0-9]+_cxx\.cxx$", e["file"]):
        entries.append(e)
        continue
    for line in open(e["file"]):
        m = re.match(r'#include "(.*)"', line)
        if m:
            entries.append(dict(e, file=m.group(1), command=e["command"].replace(e["file"], m.group(1))))
json.dump(entries, sys.stdout, indent=1)
PY
mapfile -t files < <(jq -r '.[].file' "$db/compile_commands.json" | grep -E "$pattern" | sort -u)
if [ ${#files[@]} -eq 0 ]; then
  echo "tidy: no .cc file of ${dirs[*]} in $build/compile_commands.json" >&2
  exit 2
fi
set +e
printf '%s\0' "${files[@]}" |
  xargs -0 -n1 -P"$(nproc)" clang-tidy -p "$db" --quiet >"$out" 2>&1
rc=$?
set -e
# clang prints "N warnings generated." for the warnings the header filter
# hides (system headers); what is left is the reports.
grep -v ' warnings\? generated\.$' "$out" || true
if [ "$rc" -ne 0 ]; then
  echo "tidy: reports in ${dirs[*]} (fix them, or NOLINT(check) with the reason at the site)" >&2
  exit 1
fi
echo "tidy: ${#files[@]} files of ${dirs[*]}: no reports"
