#!/usr/bin/env bash
# Runs every tests/cli/test_*.sh against the given vtlab binary and sums their
# "N passed, M failed" lines. Exit 1 if any script failed or did not report.
set -u
VTLAB=${1:-./vtlab}
# synthetic models in build/models/, as `make cli-test` keeps them (not ~/.cache/vtlab)
export VTLAB_CACHE=${VTLAB_CACHE:-$PWD/build}
total_pass=0; total_fail=0; bad=0
for t in tests/cli/test_*.sh; do
  echo "== $t"
  out=$(bash "$t" "$VTLAB" 2>&1); rc=$?
  # each case's line, and the diagnostics ("#   ...") a failing case prints under it
  echo "$out" | grep -E "^(not ok|ok) |^#" | sed 's/^/  /'
  line=$(echo "$out" | grep -E "^[0-9]+ passed, [0-9]+ failed$" | tail -1)
  if [ -z "$line" ]; then
    echo "  $t did not report a result (exit $rc); last lines:"; echo "$out" | tail -15 | sed 's/^/    /'
    bad=1; continue
  fi
  p=${line%% passed*}; f=${line#*, }; f=${f%% failed}
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  [ "$rc" -eq 0 ] || bad=1
done
echo "cli: $total_pass passed, $total_fail failed"
[ "$bad" -eq 0 ] && [ "$total_fail" -eq 0 ]
