#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# run_spin.sh EXPECT [-DNAME ...]: checks tests/model/deferral.pml with spin
# (docs/model-check.md) under the given switches: spin -a, cc pan.c
# (-DSAFETY, exhaustive), ./pan, all in a temporary directory.
#
#   EXPECT = pass         the search must be complete with errors: 0.
#   EXPECT = fail:TEXT    pan must report errors: 1 with an assertion
#                         violation whose text contains TEXT (e.g.
#                         "poisoned[found]", the reader's property).
#
# Environment: MODEL_TRACE=1 prints the counterexample (spin -t -p) of a
# failing run.  Exit: 0 as expected, 1 not as expected, 2 bad usage,
# 77 skipped (spin or cc not installed).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
model=$here/deferral.pml

usage() {
  echo "usage: $0 pass|fail:ASSERTION-TEXT [-DNAME ...]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
expect=$1
shift
case $expect in
  pass) ;;
  fail:?*) ;;
  *) usage ;;
esac
for d in "$@"; do
  [[ $d =~ ^-D[A-Z0-9_]+$ ]] || { echo "run_spin.sh: not a -DNAME switch: $d" >&2; exit 2; }
done

for tool in spin cc; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: '$tool' is not installed (tools/setup-deps.sh installs the Debian package" \
      "$([ "$tool" = spin ] && echo spin || echo gcc))" >&2
    exit 77
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$model" "$tmp/deferral.pml"
cd "$tmp"

label="deferral.pml ${*:-(correct)}"
if ! spin "$@" -a deferral.pml >spin.log 2>&1; then
  cat spin.log >&2
  echo "FAIL: spin -a failed for $label" >&2
  exit 1
fi
# -O0: the state spaces are small; compiling pan.c is what costs.  -w:
# pan.c's own code draws warnings from newer compilers.
if ! cc -O0 -w -DSAFETY -o pan pan.c >cc.log 2>&1; then
  cat cc.log >&2
  echo "FAIL: cc pan.c failed for $label" >&2
  exit 1
fi
# -m: search depth bound (the model's deepest path is a few hundred steps);
# -w21: 2^21 hash slots, exhaustive storage (no bitstate).
./pan -m20000 -w21 >pan.log 2>&1 || true

summary() {
  grep -E "^State-vector|states, stored|assertion violated" pan.log | sed 's/^ */  /' || true
}
errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.log | head -1)
if [ -z "$errors" ]; then
  cat pan.log >&2
  echo "FAIL: no result from pan for $label" >&2
  exit 1
fi
if grep -q "max search depth too small" pan.log; then
  cat pan.log >&2
  echo "FAIL: search truncated (depth bound) for $label" >&2
  exit 1
fi

if [ "$expect" = pass ]; then
  if [ "$errors" = 0 ]; then
    echo "PASS: $label: errors: 0, search complete"
    summary
    exit 0
  fi
  summary >&2
  spin "$@" -t -p deferral.pml >&2 || true
  echo "FAIL: $label: expected errors: 0, pan found $errors (counterexample above)" >&2
  exit 1
fi

text=${expect#fail:}
if [ "$errors" = 1 ] && grep "assertion violated" pan.log | grep -qF -- "$text"; then
  echo "PASS: $label fails as it must: errors: 1, assertion violated containing '$text'"
  summary
  if [ "${MODEL_TRACE:-0}" = 1 ]; then spin "$@" -t -p deferral.pml || true; fi
  exit 0
fi
summary >&2
echo "FAIL: $label: expected errors: 1 with an assertion containing '$text', pan found" \
  "$errors error(s)" >&2
exit 1
