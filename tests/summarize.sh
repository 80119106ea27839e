#!/usr/bin/env bash
# Sums the suites' results from the logs `make test` leaves in DIR (unit.log:
# cmocka output; cli.log and reference.log: "N passed, M failed" lines) and
# prints one closing line: "tests: P passed, F failed, S skipped".
set -u
D=${1:-build/logs}
sum() { grep -hoE "$1" "$2" 2>/dev/null | grep -oE '[0-9]+' | awk '{s += $1} END {print s + 0}'; }
up=$(sum '\[  PASSED  \] [0-9]+ test' "$D/unit.log")
uf=$(sum '\[  FAILED  \] [0-9]+ test' "$D/unit.log")
us=$(sum '\[  SKIPPED \] [0-9]+ test' "$D/unit.log")
line() { grep -E "^(cli: )?[0-9]+ passed, [0-9]+ failed$" "$1" 2>/dev/null | tail -1; }
cl=$(line "$D/cli.log"); rl=$(line "$D/reference.log")
num() { echo "$1" | grep -oE "[0-9]+ $2" | grep -oE '[0-9]+' || echo 0; }
p=$((up + $(num "$cl" passed) + $(num "$rl" passed)))
f=$((uf + $(num "$cl" failed) + $(num "$rl" failed)))
echo "tests: $p passed, $f failed, $us skipped"
[ "$f" -eq 0 ]
