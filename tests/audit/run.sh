#!/usr/bin/env bash
# The planted-confound suite: each tests/audit/cases/NAME/ is a ledger
# (claims/, defects/, in the documented format), optionally experiments/ whose
# runs are made first (run-level rules), and `expected`, the open flags
# the audit must raise on it, one per line: "KIND SUBJECT RULE KEY". A case is
# as expected when the open flags are exactly those: nothing planted missed
# (recall), nothing clean flagged (precision). Prints one line per case, the
# flag tally, "audit cases: N as expected of M" and "N passed, M failed".
#   bash tests/audit/run.sh ./vtlab        (from the repository root)
set -u
VTLAB=$(readlink -f "${1:-./vtlab}")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=/usr/bin/python3
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0; found=0; missed=0; false_flags=0
mkdir -p "$W/project" && ln -s "$(cd "$HERE/../.." && pwd)/experiments" "$W/project/experiments"
for case_dir in "$HERE"/cases/*/; do
  name=$(basename "$case_dir")
  db=$W/$name.db
  # run-level cases carry experiments/: their runs go into the case's fresh
  # database first (run ids follow: the reference arm's run is 1, ...); a run
  # with failed assertions exits 1, which is part of what is planted
  bad_run=0
  for e in "$case_dir"experiments/*.json; do
    [ -e "$e" ] || continue
    "$VTLAB" run "$e" --db "$db" >"$W/run.out" 2>&1; rc=$?
    if [ $rc -gt 1 ]; then bad_run=1; echo "not ok - $name: vtlab run $(basename "$e") exited $rc"; sed 's/^/#   /' "$W/run.out" | tail -5; fi
  done
  if [ $bad_run -ne 0 ]; then fail=$((fail + 1)); continue; fi
  # the case's ledger as a project's specs/: its claims name the shipped
  # experiments/bf16-stream.json, relative to the ledger directory's parent
  ln -sfn "$case_dir" "$W/project/specs"
  "$VTLAB" audit --db "$db" --specs "$W/project/specs" >"$W/out" 2>&1; rc=$?
  if [ $rc -gt 1 ]; then
    echo "not ok - $name: audit exited $rc"; sed 's/^/#   /' "$W/out"; fail=$((fail + 1)); continue
  fi
  $PY - "$db" >"$W/got" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for r in c.execute("SELECT subject_kind, subject, rule, key FROM audit_flags WHERE resolved_at IS NULL AND expected = 0"):
    print(" ".join(r))
PY
  sort "$W/got" -o "$W/got"; sort "$case_dir/expected" -o "$W/want"
  tp=$(comm -12 "$W/got" "$W/want" | wc -l); fp=$(comm -23 "$W/got" "$W/want" | wc -l); fn=$(comm -13 "$W/got" "$W/want" | wc -l)
  found=$((found + tp)); false_flags=$((false_flags + fp)); missed=$((missed + fn))
  if [ "$fp" -eq 0 ] && [ "$fn" -eq 0 ]; then
    echo "ok - $name ($tp flag(s) as planted)"; pass=$((pass + 1))
  else
    echo "not ok - $name: $fn planted flag(s) missed, $fp raised that were not planted"
    comm -13 "$W/got" "$W/want" | sed 's/^/#   missed: /'; comm -23 "$W/got" "$W/want" | sed 's/^/#   not planted: /'
    grep -E "^(CONFOUND|expected) " "$W/out" | sed 's/^/#   /' | head -10
    fail=$((fail + 1))
  fi
done
echo "flags: $found planted and found, $missed planted and missed, $false_flags raised on clean subjects"
echo "audit cases: $pass as expected of $((pass + fail))"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
