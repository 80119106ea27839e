#!/usr/bin/env bash
# test_demo.sh — issue 33 item 2: `make run` (harness/run-demo.sh) and what
# the user runs next agree.
#   - the demo works on a database and a ledger of its own (DEMO: build/demo
#     by default, here a temporary directory) and says so; the checkout's
#     specs/ and results.db are not touched;
#   - it prints the exact commands that look at what it did, and they agree
#     with it: the audit it names finds no open confound (the claim it
#     reopened), and the report names the ledger of that audit;
#   - `vtlab reopen` on a ledger git tracks prints the files it wrote and the
#     git add that commits them; on a copy outside git it says there is
#     nothing to commit.
# Usage (from the repository root): bash tests/cli/test_demo.sh ./vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
SCRIPT=${DEMO_SCRIPT:-harness/run-demo.sh}
W=$(mktemp -d /tmp/vtlab-demo.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE="$W/out"; ERR="$W/err"
. tests/cli/lib.sh
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "${3:-}"; fi; }
CLAIM=bf16-stream-refuted-4of128

specs_before=$(git status --porcelain -- specs 2>/dev/null; find specs -type f -exec sha256sum {} + | sort)
db_before=$( [ -e results.db ] && stat -c %Y results.db || echo none)
D="$W/demo"
DEMO="$D" bash "$SCRIPT" "$VTLAB" >"$W/demo.out" 2>&1; rc=$?
check "make run's script exits 0" "[ $rc -eq 0 ]" "$(tail -5 $W/demo.out)"
check "... it says which database and ledger it works on" "grep -q \"database is $D/results.db and its ledger $D/specs\" $W/demo.out" \
  "$(head -3 $W/demo.out)"
check "... the checkout's specs/ and results.db are untouched" \
  "[ \"\$(git status --porcelain -- specs 2>/dev/null; find specs -type f -exec sha256sum {} + | sort)\" = \"\$specs_before\" ] && [ \"\$( [ -e results.db ] && stat -c %Y results.db || echo none)\" = '$db_before' ]"
AUDIT="./vtlab audit  --db $D/results.db --specs $D/specs"
check "... it prints the exact audit command for its database and ledger" "grep -qF \"$AUDIT\" $W/demo.out" "$(tail -12 $W/demo.out)"
check "... and the report command" "grep -qF \"./vtlab report --db $D/results.db\" $W/demo.out"
check "... and says that the checkout's ledger still has the claim open (audit, make nightly)" \
  "grep -q 'make nightly' $W/demo.out && grep -q 'CONFOUNDED' $W/demo.out"
expect_exit "the audit it names agrees with it: no confound open (exit 0)" 0 "$VTLAB" audit --db "$D/results.db" --specs "$D/specs"
expect_exit "the report of its database exits 0" 0 "$VTLAB" report --db "$D/results.db" --out "$W/rep" --no-plots
check "... 0 open confounds, as of the audit of the demo's ledger, which it names" \
  "grep -q '<b>0 open confound(s)</b>' $W/rep/index.html && grep -q \"against the ledger <code>.*specs\" $W/rep/index.html && grep -qF \"$D/specs\" $W/rep/summary.md" \
  "$(grep -o 'open confound(s)</b>[^<]*' $W/rep/index.html | head -2)"
check "reopen on a ledger copy git does not track: nothing to commit, said" \
  "grep -q 'written: .*(new)' $W/demo.out && grep -q 'nothing to commit' $W/demo.out" "$(grep -A2 '^written' $W/demo.out)"

# ------------------------------------------------------------ reopen in a git checkout's ledger
R="$W/repo"
mkdir -p "$R" && cp -r specs experiments "$R/"
(cd "$R" && git init -q && git config user.email t@t && git config user.name t && git add -A && git commit -qm ledger) \
  || { not_ok "setting up a git ledger" ""; finish; exit 1; }
"$VTLAB" reopen "$CLAIM" --db "$D/results.db" --specs "$R/specs" >"$OUT_FILE" 2>"$ERR"; rc=$?
check "reopen on a ledger in git exits 0" "[ $rc -eq 0 ]" "$(tail -3 $ERR)"
NEW=$(cd "$R" && git status --porcelain | sed -n 's/^?? //p')
check "... it names the files it wrote and the git add that commits them" \
  "grep -q 'the ledger is in git' $OUT_FILE && grep -qF \"git add $R/$NEW $R/specs/claims/$CLAIM.json\" $OUT_FILE" \
  "$(grep -A2 '^written' $OUT_FILE); new: $NEW"
check "... which are exactly what git sees changed" \
  "[ \"\$(cd $R && git status --porcelain | sort)\" = \"\$(printf ' M specs/claims/$CLAIM.json\n?? $NEW\n' | sort)\" ]" \
  "$(cd $R && git status --porcelain)"

finish
