#!/usr/bin/env bash
# The audit's blind spots (issue 12, items 1-3) and its failure mode (issue 10):
#  - a claim's own runs: missing runs and arm/reference pairs from another
#    model are flagged (R4 on the claim);
#  - code-range placement is three-valued: "cannot tell" (same-day date,
#    shallow clone, not a repository, unknown commit) is flagged with its reason;
#  - the reference side of a comparison can go through a defect too (R1),
#    a trigger on a knob's default value included;
#  - an audit that cannot read a table fails (error, not "no flags"), and so
#    does each rule whose read fails (VTLAB_TEST_AUDIT_FAIL, a test-only hook
#    in harness/store_audit.c: RULE or RULE:READER makes that reader fail).
set -u
VTLAB=$(readlink -f "${1:-./vtlab}")
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
# the ledgers made here name experiments/ as the shipped claim does: relative to
# the ledger directory's parent, which is this directory (docs/specs.md)
ln -s "$PWD/experiments" "$W/experiments"
OUT_FILE=$W/out; ERR=$W/err
PY=/usr/bin/python3
REPO=$(pwd)
q() { $PY -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); r=list(c.execute(sys.argv[2])); c.commit(); print('\n'.join('|'.join(str(x) for x in t) for t in r))" "$@"; }
flag() {  # db kind subject rule key -> reason of the open flag, empty if none
  q "$1" "SELECT reason FROM audit_flags WHERE subject_kind='$2' AND subject='$3' AND rule='$4' AND key='$5' AND resolved_at IS NULL"
}
S=$W/specs; mkdir -p "$S/claims" "$S/defects"
defect() {  # id codebase trigger-json introduced-json fixed-json
  cat > "$S/defects/$1.json" <<J
{"id": "$1", "title": "fixture", "site": "moe.scatter", "trigger": $3, "effect": "fixture",
 "code_range": {"codebase": "$2", "introduced": $4, "fixed": $5},
 "replay_fault": "moe_scatter_row_bytes_from_stream", "guard_test": "none (fixture)"}
J
}
claim() {  # id codebase commit-json date arm-knobs ref-knobs [runs-json]
  cat > "$S/claims/$1.json" <<J
{"id": "$1", "hypothesis": "fixture", "verdict": "INCONCLUSIVE",
 "evidence": {"metric": "top1_agreement", "k": 100, "n": 128, "threshold": 0.9, "direction": ">="},
 "arm": {"name": "arm", "knobs": $5}, "reference": {"name": "ref", "knobs": $6},
 "code": {"codebase": "$2", "commit": $3, "date": "$4"}, "measured_at": "$4",
 "experiment": "experiments/bf16-stream.json" ${7:+, \"runs\": $7}}
J
}

# ------------------------------------------------ placement (claims, three-valued)
HEAD=$(git rev-parse HEAD); ROOT=$(git rev-list --max-parents=0 HEAD | tail -1)
defect fixed-at-head tree-a '{"VT_KIMI_BF16_STREAM": "1"}' null "{\"commit\": \"$HEAD\", \"date\": \"2026-06-01\"}"
ON='{"VT_KIMI_BF16_STREAM": "1"}'
claim same-day tree-a null 2026-06-01 "$ON" '{}'
claim day-before tree-a null 2026-05-31 "$ON" '{}'
claim day-after tree-a null 2026-06-02 "$ON" '{}'
claim unknown-commit-same-day tree-a '"0123456789abcdef0123"' 2026-06-01 "$ON" '{}'
claim root-commit tree-a "\"$ROOT\"" 2026-06-05 "$ON" '{}'
claim ref-side tree-a null 2026-05-01 '{}' "$ON"
expect_exit "audit of the placement fixtures" 1 "$VTLAB" audit --db "$W/p.db" --specs "$S"
r=$(flag "$W/p.db" claim same-day R1 fixed-at-head)
echo "$r" | grep -q "cannot tell: measured on the bound's own day 2026-06-01" \
  && ok "a claim dated on the fix's own day is 'cannot tell', flagged, reason shown" || not_ok "same day" "$r $(cat $OUT_FILE)"
[ -n "$(flag "$W/p.db" claim day-before R1 fixed-at-head)" ] && ok "dated the day before the fix: inside" || not_ok "day before" "$(cat $OUT_FILE)"
[ -z "$(flag "$W/p.db" claim day-after R1 fixed-at-head)" ] && ok "dated the day after the fix: outside (by dates)" || not_ok "day after" "flagged"
r=$(flag "$W/p.db" claim unknown-commit-same-day R1 fixed-at-head)
echo "$r" | grep -q "unknown to git" && echo "$r" | grep -q "own day" \
  && ok "unknown commit on the fix's day: cannot tell, both reasons shown" || not_ok "unknown commit" "$r"
r=$(flag "$W/p.db" claim root-commit R1 fixed-at-head)
echo "$r" | grep -q "commit ancestry" && ok "a commit before the fix is inside by ancestry, though dated after it" || not_ok "ancestry" "$r"
r=$(flag "$W/p.db" claim ref-side R1 reference:fixed-at-head)
echo "$r" | grep -q "on the reference side" && ok "R1 on the reference side of a claim, side named" || not_ok "ref side claim" "$r $(cat $OUT_FILE)"
[ -z "$(flag "$W/p.db" claim ref-side R1 fixed-at-head)" ] && ok "the arm side of that claim is not flagged" || not_ok "ref side arm" "flagged"
# a default value triggers too: trigger VT_KIMI_BF16_STREAM=0 matches a reference with no knobs
defect default-trigger tree-b '{"VT_KIMI_BF16_STREAM": "0"}' null null
claim default-ref tree-b null 2026-05-01 "$ON" '{}'
"$VTLAB" audit --db "$W/p.db" --specs "$S" >"$OUT_FILE" 2>&1
[ -n "$(flag "$W/p.db" claim default-ref R1 reference:default-trigger)" ] && ok "a trigger on a knob's default value flags the reference side" || not_ok "default trigger" "$(cat $OUT_FILE)"
rm "$S/defects/default-trigger.json" "$S/claims/default-ref.json"
# a shallow clone cannot place the root commit: cannot tell, reason "shallow clone"
git clone -q --depth 1 "file://$REPO" "$W/shallow" 2>/dev/null
(cd "$W/shallow" && "$VTLAB" audit --db "$W/s.db" --specs "$S" >"$OUT_FILE" 2>&1)
r=$(flag "$W/s.db" claim root-commit R1 fixed-at-head)
echo "$r" | grep -q "shallow clone" && ok "in a shallow clone the old commit is 'cannot tell (shallow clone)', flagged" || not_ok "shallow" "$r $(cat $OUT_FILE)"
# outside any repository (the claims' experiment, relative to the ledger's parent, must exist)
mkdir -p "$W/experiments"; cp experiments/bf16-stream.json "$W/experiments/"
(cd "$W" && "$VTLAB" audit --db "$W/n.db" --specs "$S" >"$OUT_FILE" 2>&1)
r=$(flag "$W/n.db" claim root-commit R1 fixed-at-head)
echo "$r" | grep -q "not a git repository" && ok "outside a repository: cannot tell, said so" || not_ok "no repo" "$r $(cat $OUT_FILE)"
rm -f "$S/claims/"*.json "$S/defects/"*.json

# ------------------------------------------------ runs: the reference side, pairing, fail closed
cat > "$W/ref-bf16.json" <<'J'
{"id": "ref-side", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 3, "length": 6, "seed": 3}}, "score": "all", "reference": "bf16",
 "arms": [{"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": "1", "VT_PROBE": "off"}}, {"name": "f32", "knobs": {"VT_PROBE": "off"}}],
 "decision": {"metric": "top1_agreement", "threshold": 0.5, "direction": ">="}}
J
# probes off: runs with no records at the defect's site, so the trigger and the
# code range decide R1 (clean records there would clear them: docs/specs.md)
sed -e 's/"seed": 1}/"seed": 2}/' -e 's/"id": "ref-side"/"id": "other-model"/' "$W/ref-bf16.json" > "$W/other.json"
"$VTLAB" run "$W/ref-bf16.json" --db "$W/r.db" >/dev/null 2>&1 || not_ok "fixture run" "ref-bf16 failed"
"$VTLAB" run "$W/other.json" --db "$W/r.db" >/dev/null 2>&1 || not_ok "fixture run" "other failed"
id_of() { q "$W/r.db" "SELECT max(id) FROM runs WHERE experiment='$1' AND arm='$2' AND status='FINISHED'"; }
ARM=$(id_of ref-side f32); REF=$(id_of ref-side bf16); OREF=$(id_of other-model bf16)
defect vt-stream vtlab '{"VT_KIMI_BF16_STREAM": "1"}' null null
expect_exit "audit with a vtlab defect on the reference's knobs" 1 "$VTLAB" audit --db "$W/r.db" --specs "$S"
r=$(flag "$W/r.db" run "$ARM" R1 reference:vt-stream)
echo "$r" | grep -q "its reference run $REF was measured through defect vt-stream" \
  && ok "R1 on a run whose reference went through the defect, side named" || not_ok "ref side run" "$r $(cat $OUT_FILE)"
rm "$S/defects/vt-stream.json"
claim paired-ok vtlab null 2026-05-01 '{}' "$ON" "{\"arm\": $ARM, \"reference\": $REF}"
claim paired-other-model vtlab null 2026-05-01 '{}' "$ON" "{\"arm\": $ARM, \"reference\": $OREF}"
claim paired-missing vtlab null 2026-05-01 '{}' "$ON" "{\"arm\": $ARM, \"reference\": 99999}"
"$VTLAB" audit --db "$W/r.db" --specs "$S" >"$OUT_FILE" 2>&1
[ -z "$(flag "$W/r.db" claim paired-ok R4 runs.pairing)" ] && ok "a claim pairing runs of one model is not flagged" || not_ok "pairing ok" "flagged"
r=$(flag "$W/r.db" claim paired-other-model R4 runs.pairing)
echo "$r" | grep -q "differ in model" && ok "R4 on a claim pairing an arm run with a reference run of another model" || not_ok "pairing model" "$r $(cat $OUT_FILE)"
r=$(flag "$W/r.db" claim paired-missing R4 runs.reference)
echo "$r" | grep -q "99999, which is not in" && ok "a claim naming a run that is not in results.db is reported" || not_ok "missing run" "$r $(cat $OUT_FILE)"
rm -f "$S/claims/"*.json
# fail closed: a table the rules read is gone -> an error naming the rule, never "no flags"
defect vt-other-site vtlab '{"VT_KIMI_BF16_ACT": "1"}' null null   # not triggered: R1 reads probes
for t in run_knobs probes expectations comparisons verdicts; do
  cp "$W/r.db" "$W/broken.db"; rm -f "$W/broken.db-wal" "$W/broken.db-shm"
  q "$W/broken.db" "DROP TABLE $t" >/dev/null 2>&1
  "$VTLAB" audit --db "$W/broken.db" --specs "$S" >"$OUT_FILE" 2>"$ERR"; rc=$?
  if [ $rc -ne 0 ] && grep -q "no such table: $t" "$ERR" && ! grep -q "(no flags)" "$OUT_FILE"; then
    ok "audit with table $t unreadable fails closed (exit $rc, the error names it)"
  else not_ok "fail closed ($t)" "exit $rc; stderr: $(cat $ERR); out: $(tail -3 $OUT_FILE)"; fi
done
# fail closed, rule by rule: a read that fails inside a rule stops the audit with that error on stderr;
# nothing is printed (no table, no "(no flags)") and nothing is stored (the audits count is unchanged)
hook_case() {  # hook specs-dir what
  cp "$W/r.db" "$W/hook.db"; rm -f "$W/hook.db-wal" "$W/hook.db-shm"
  local before after rc
  before=$(q "$W/hook.db" "SELECT count(*) FROM audits")
  VTLAB_TEST_AUDIT_FAIL=$1 "$VTLAB" audit --db "$W/hook.db" --specs "$2" >"$OUT_FILE" 2>"$ERR"; rc=$?
  after=$(q "$W/hook.db" "SELECT count(*) FROM audits")
  if [ $rc -ne 0 ] && grep -q "^vtlab audit: .*injected failure (VTLAB_TEST_AUDIT_FAIL=$1)" "$ERR" && [ ! -s "$OUT_FILE" ] \
     && [ "$before" = "$after" ]; then
    ok "a failing read in $3 fails the audit closed (exit $rc: $(head -c 120 "$ERR"))"
  else not_ok "fail closed ($1)" "exit $rc; audits $before -> $after; stderr: $(cat $ERR); out: $(tail -3 $OUT_FILE)"; fi
}
hook_case R1 "$S" "R1 (a run's knobs)"
hook_case R1:probes "$S" "R1 (a run's probes)"
hook_case R1:references "$S" "R1 (the reference side)"
hook_case R2 "$S" "R2 (the finished runs)"
hook_case R3 "$S" "R3 (expectations)"
hook_case R3:references "$S" "R3 (bit-identical logits against the reference)"
hook_case R4 "$S" "R4 (the comparisons' references)"
hook_case R5 "$S" "R5 (the finished runs)"
hook_case R6 "$S" "R6 (a run's verdicts)"
claim paired-ok vtlab null 2026-05-01 '{}' "$ON" "{\"arm\": $ARM, \"reference\": $REF}"
hook_case R4:claim-runs "$S" "R4 (the runs a claim names)"
rm -f "$S/claims/"*.json
finish
