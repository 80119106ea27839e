#!/usr/bin/env bash
# Sums the suites' results from the logs `make test` leaves in DIR (unit.log:
# cmocka output; cli.log and reference.log: "N passed, M failed" lines;
# slurm.log: "slurm: N passed, M failed, S skipped" (S counts as skipped);
# suites: one "SUITE EXIT-STATUS" line per suite) and prints one closing line:
# "tests: P passed, F failed, S skipped". A suite that exited non-zero without
# a failure in its log (a build error, a crash, a missing summary) counts as
# one failure, so the line never reads clean over a broken suite.
set -u
D=${1:-build/logs}
sum() { grep -hoE "$1" "$2" 2>/dev/null | grep -oE '[0-9]+' | awk '{s += $1} END {print s + 0}'; }
up=$(sum '\[  PASSED  \] [0-9]+ test' "$D/unit.log")
uf=$(sum '\[  FAILED  \] [0-9]+ test' "$D/unit.log")
us=$(sum '\[  SKIPPED \] [0-9]+ test' "$D/unit.log")
line() { grep -E "^(cli: |fuzz: |cuda: |slurm: )?[0-9]+ passed, [0-9]+ failed" "$1" 2>/dev/null | tail -1; }
num() { echo "$1" | grep -oE "[0-9]+ $2" | grep -oE '[0-9]+' || echo 0; }
p=$up; f=$uf
declare -A logof=([unit]=unit.log [cli-test]=cli.log [reference-test]=reference.log [fuzz]=fuzz.log [cuda-compile]=cuda.log [slurm-test]=slurm.log)
for suite in cli-test reference-test slurm-test fuzz cuda-compile; do
  l=$(line "$D/${logof[$suite]}")
  p=$((p + $(num "$l" passed))); f=$((f + $(num "$l" failed))); us=$((us + $(num "$l" skipped)))
done
if [ -f "$D/suites" ]; then
  while read -r suite rc; do
    [ "$rc" = 0 ] && continue
    case $suite in
      unit) counted=$uf ;;
      *) counted=$(num "$(line "$D/${logof[$suite]:-none}")" failed) ;;
    esac
    if [ "${counted:-0}" -eq 0 ]; then
      echo "suite $suite exited $rc without reporting a failed test (build error or crash; see $D/${logof[$suite]:-})"
      f=$((f + 1))
    fi
  done < "$D/suites"
fi
echo "tests: $p passed, $f failed, $us skipped"
[ "$f" -eq 0 ]
