#!/usr/bin/env bash
# test_nightly_confounds.sh — issue 33 item 1: a nightly with an open,
# unacknowledged confound is not PASSED, and one cause reads as one line.
#
# A sequence of nightlies on a tiny experiment (4 sequences x 8 tokens, a
# reference, a bf16 arm and a replay of the scatter defect, 2 repeats) with
# the shipped ledger (its 4/128 claim is confounded, R1):
#   1. the first nightly is CONFOUNDED (exit 1): nightly.md, junit.xml (a
#      failure for the confound key) and the Atom feed say so, stderr names
#      the key and how to end it (reopen the claim, or ack it);
#   2. the next one: the same key, once, "persistent since nightly 1";
#   3. `vtlab ack KEY` (--list shows it): the night passes, the confound is
#      listed as acknowledged;
#   4. a planted confound (the replay arm's expect_assertions dropped): two
#      causes (R1 through the defect, R2 the failed assertion), each once with
#      tonight's two runs, new; the next night they are "persistent since",
#      still two (not one more per run: the issue saw 1 -> 3 -> 5);
#   5. `ack --remove` makes the claim fail the night again; fixing the arm
#      resolves its confounds (marked resolved) and ends their
#      acknowledgement, so the same cause alerts again when it comes back;
#   6. a --no-audit nightly judges no confound.
# Usage (from the repository root): bash tests/cli/test_nightly_confounds.sh ./vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
PY=/usr/bin/python3
T=$(mktemp -d /tmp/vtlab-confounds.XXXXXX)
trap 'rm -rf "$T"' EXIT
OUT_FILE="$T/stdout"; ERR="$T/stderr"
. tests/cli/lib.sh
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "${3:-}"; fi; }
q() { "$PY" - "$1" "$2" <<'PYEOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for row in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in row))
PYEOF
}
# junit FILE -> "tests failures failing-cases" (the counts checked against the cases)
junit() { "$PY" - "$1" <<'PYEOF'
import sys, xml.dom.minidom as m
d = m.parse(sys.argv[1]); top = d.documentElement
cases = d.getElementsByTagName("testcase")
failing = [c.getAttribute("classname") + ":" + c.getAttribute("name") for c in cases if c.getElementsByTagName("failure")]
assert sum(int(s.getAttribute("tests")) for s in d.getElementsByTagName("testsuite")) == len(cases) == int(top.getAttribute("tests"))
assert sum(int(s.getAttribute("failures")) for s in d.getElementsByTagName("testsuite")) == len(failing) == int(top.getAttribute("failures"))
print(top.getAttribute("tests"), top.getAttribute("failures"), ",".join(failing))
PYEOF
}

mkdir -p "$T/exp"
mk_exp() { # the replay arm's extra members
  cat > "$T/exp/tiny.json" <<JSON
{"id": "tiny", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 4, "length": 8, "seed": 5}}, "score": "all", "top_k": 4, "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "cand", "knobs": {"VT_KIMI_BF16_STREAM": 1}},
          {"name": "replay", "knobs": {"VT_KIMI_BF16_STREAM": 1, "VT_FAULT": "moe_scatter_row_bytes_from_stream"}$1}],
 "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="}, "repeats": 2}
JSON
}
mk_exp ', "expect_assertions": "fail"'
DB="$T/r.db"; R="$T/rep"
NIGHTLY=("$VTLAB" nightly "$T/exp" --db "$DB" --out "$R" --specs specs --no-plots --perf-min-drop 0.95)
CLAIM=bf16-stream-refuted-4of128
KEY=$CLAIM/R1/moe-scatter-row-bytes-from-stream
status() { q "$DB" "select status from nightlies where id = $1"; }
state() { q "$DB" "select state || ' ' || is_new || ' ' || since_nightly from nightly_confounds where nightly_id = $1 and key = '$2'"; }

# ------------------------------------------------------------ 1. the shipped claim's confound
expect_exit "nightly 1 with the shipped ledger's open confound exits 1" 1 "${NIGHTLY[@]}"
check "... recorded CONFOUNDED, not PASSED" "[ \"\$(status 1)\" = CONFOUNDED ]" "$(status 1)"
check "... stdout says CONFOUNDED" "grep -q '^nightly 1: CONFOUNDED' $OUT_FILE" "$(tail -2 $OUT_FILE)"
stderr_has "... stderr names the key" "open confound $KEY"
stderr_has "... and how to end it: reopen the claim" "vtlab reopen $CLAIM"
stderr_has "... or acknowledge it" "vtlab ack $KEY --reason"
check "... nightly.md: CONFOUNDED, the key once, new" \
  "head -1 $R/nightly.md | grep -q CONFOUNDED && [ \$(grep -c -- '$KEY' $R/nightly.md) = 1 ] && grep -- '$KEY' $R/nightly.md | grep -q 'new in nightly 1'" \
  "$(head -12 $R/nightly.md)"
j=$(junit "$R/junit.xml")
check "... junit.xml: 3 arms + the audit + the confound, its one failure the confound key" \
  "[ \"$j\" = '5 1 confound:$KEY' ]" "$j"
check "... the Atom feed announces it" "grep -q 'nightly 1 CONFOUNDED: new confound $KEY' $R/regressions.atom" "$(grep title $R/regressions.atom)"
check "... one row per cause in nightly_confounds" "[ \"\$(state 1 $KEY)\" = 'open 1 1' ] && [ \"\$(q $DB 'select count(*) from nightly_confounds')\" = 1 ]"

# ------------------------------------------------------------ 2. persistent
expect_exit "nightly 2, nothing changed, exits 1" 1 "${NIGHTLY[@]}"
check "... the key once, persistent since nightly 1, not new" \
  "[ \"\$(state 2 $KEY)\" = 'open 0 1' ] && grep -- '$KEY' $R/nightly.md | grep -q 'persistent since nightly 1'" "$(state 2 $KEY)"
check "... the feed announces only new confounds" "! grep -q 'nightly 2 ' $R/regressions.atom"

# ------------------------------------------------------------ 3. ack
expect_exit "ack: an unknown key is exit 2" 2 "$VTLAB" ack $CLAIM/R1/nope --reason x --db "$DB"
stderr_has "... naming it" "$CLAIM/R1/nope"
expect_exit "ack: without --reason is exit 2" 2 "$VTLAB" ack "$KEY" --db "$DB"
expect_exit "ack: the claim's confound key exits 0" 0 "$VTLAB" ack "$KEY" --reason "the 48B claim: reopen pending" --db "$DB"
expect_exit "ack --list exits 0" 0 "$VTLAB" ack --list --db "$DB"
check "... and lists it as a confound with its reason" "grep -q \"^$KEY  confound.*reopen pending\" $OUT_FILE" "$(cat $OUT_FILE)"
expect_exit "nightly 3 with the confound acknowledged exits 0" 0 "${NIGHTLY[@]}"
check "... PASSED, the confound listed as acknowledged" \
  "[ \"\$(status 3)\" = PASSED ] && [ \"\$(state 3 $KEY)\" = 'acknowledged 0 1' ] && grep -- '$KEY' $R/nightly.md | grep -q '^- acknowledged'" \
  "$(status 3) $(state 3 $KEY)"
j=$(junit "$R/junit.xml")
check "... junit.xml: its test case passes" "[ \"$j\" = '5 0 ' ]" "$j"

# ------------------------------------------------------------ 4. a planted confound: one line per cause
mk_exp ''
expect_exit "nightly 4, the replay arm's expect_assertions dropped, exits 1" 1 "${NIGHTLY[@]}"
R1=tiny/replay/R1/moe-scatter-row-bytes-from-stream; R2=tiny/replay/R2
RUNS4=$(q "$DB" "select group_concat(id, ', ') from (select r.id from runs r join nightly_runs n on n.run_id = r.id where n.nightly_id = 4 and r.arm = 'replay' order by r.id)")
check "... two causes, each once, new, on tonight's two runs ($RUNS4)" \
  "[ \"\$(q $DB 'select count(*) from nightly_confounds where nightly_id = 4 and state = \"open\"')\" = 2 ] && [ \"\$(state 4 $R1)\" = 'open 1 4' ] && [ \"\$(state 4 $R2)\" = 'open 1 4' ] && [ \"\$(q $DB 'select runs from nightly_confounds where nightly_id = 4 and key = \"$R2\"')\" = '$RUNS4' ]" \
  "$(q $DB 'select key, state, runs from nightly_confounds where nightly_id = 4')"
expect_exit "ack of the arm's check regression exits 0" 0 "$VTLAB" ack tiny/replay/check --reason "dropped on purpose" --db "$DB"
expect_exit "nightly 5: no regression left, the confounds are: exits 1" 1 "${NIGHTLY[@]}"
RUNS5=$(q "$DB" "select group_concat(id, ', ') from (select r.id from runs r join nightly_runs n on n.run_id = r.id where n.nightly_id = 5 and r.arm = 'replay' order by r.id)")
check "... CONFOUNDED (not PASSED), still two open causes" \
  "[ \"\$(status 5)\" = CONFOUNDED ] && [ \"\$(q $DB 'select count(*) from nightly_confounds where nightly_id = 5 and state = \"open\"')\" = 2 ]" \
  "$(status 5); $(q $DB 'select key, state from nightly_confounds where nightly_id = 5')"
check "... each one line: persistent since nightly 4: runs $RUNS5" \
  "[ \$(grep -c -- '$R2' $R/nightly.md) = 1 ] && grep -- '$R2' $R/nightly.md | grep -q 'persistent since nightly 4: runs $RUNS5'" \
  "$(grep -- "$R2" $R/nightly.md)"
j=$(junit "$R/junit.xml")
check "... junit.xml: a failure per open key" "[ \"$j\" = '7 2 confound:$R1,confound:$R2' ]" "$j"
check "... the feed: nightly 4's two new confounds, not nightly 5's" \
  "[ \$(grep -c 'nightly 4 REGRESSED: new confound' $R/regressions.atom) = 2 ] && ! grep -q 'nightly 5 ' $R/regressions.atom" \
  "$(grep title $R/regressions.atom)"

# ------------------------------------------------------------ 5. --remove, resolved, recurrence
expect_exit "ack --remove of the claim's acknowledgement exits 0" 0 "$VTLAB" ack --remove "$KEY" --db "$DB"
expect_exit "ack --remove of a key with none is exit 2" 2 "$VTLAB" ack --remove "$KEY" --db "$DB"
expect_exit "ack of the R2 confound exits 0" 0 "$VTLAB" ack "$R2" --reason "known" --db "$DB"
expect_exit "nightly 6 exits 1" 1 "${NIGHTLY[@]}"
check "... the claim is open again (persistent since 1), R2 acknowledged, R1 open" \
  "[ \"\$(state 6 $KEY)\" = 'open 0 1' ] && [ \"\$(state 6 $R2)\" = 'acknowledged 0 4' ] && [ \"\$(state 6 $R1)\" = 'open 0 4' ]" \
  "$(q $DB 'select key, state, is_new, since_nightly from nightly_confounds where nightly_id = 6')"
mk_exp ', "expect_assertions": "fail"'
expect_exit "nightly 7, the arm fixed (the claim still open) exits 1" 1 "${NIGHTLY[@]}"
check "... the arm's two causes resolved, the claim open" \
  "[ \"\$(state 7 $R1)\" = 'resolved 0 4' ] && [ \"\$(state 7 $R2)\" = 'resolved 0 4' ] && [ \"\$(state 7 $KEY)\" = 'open 0 1' ] && grep -- '$R2' $R/nightly.md | grep -q '^- resolved'" \
  "$(q $DB 'select key, state from nightly_confounds where nightly_id = 7')"
"$VTLAB" ack --list --db "$DB" >"$OUT_FILE" 2>&1
check "... and R2's acknowledgement ended with it" "! grep -q '^$R2 ' $OUT_FILE" "$(cat $OUT_FILE)"
mk_exp ''
expect_exit "nightly 8, the cause back, exits 1" 1 "${NIGHTLY[@]}"
check "... R2 is open and new again (its acknowledgement does not carry over)" "[ \"\$(state 8 $R2)\" = 'open 1 8' ]" "$(state 8 $R2)"

# ------------------------------------------------------------ 6. --no-audit
expect_exit "a --no-audit nightly judges no confound: exits 1 only for the regression" 1 \
  "$VTLAB" nightly "$T/exp" --db "$DB" --out "$R" --no-audit --no-plots --perf-min-drop 0.95
check "... no confound rows, REGRESSED" "[ \"\$(q $DB 'select count(*) from nightly_confounds where nightly_id = 9')\" = 0 ] && [ \"\$(status 9)\" = REGRESSED ]" "$(status 9)"

# (schema v10, the migration from v9: tests/unit/test_nightly_schema.c)

finish
