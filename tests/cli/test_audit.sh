#!/usr/bin/env bash
# The ledger, the audit rules R1-R6 and reopen, end to end on the tiny model.
# Fixture claims and defects are written here, in the documented format, to a
# temporary specs dir: the audit must flag them with no code change.
set -u
VTLAB=${1:-./vtlab}
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
# the ledgers made here name experiments/ as the shipped claim does: relative to
# the ledger directory's parent, which is this directory (docs/specs.md)
ln -s "$PWD/experiments" "$W/experiments"
OUT_FILE=$W/out; ERR=$W/err
PY=/usr/bin/python3
q() { $PY -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); r=list(c.execute(sys.argv[2])); c.commit(); print('\n'.join('|'.join(str(x) for x in t) for t in r))" "$@"; }
has_flag() {  # db kind subject rule status(open|resolved|expected)
  local cond="resolved_at IS NULL AND expected = 0"
  [ "$5" = resolved ] && cond="resolved_at IS NOT NULL"
  [ "$5" = expected ] && cond="resolved_at IS NULL AND expected = 1"
  [ "$(q "$1" "SELECT count(*) FROM audit_flags WHERE subject_kind='$2' AND subject='$3' AND rule='$4' AND $cond")" -ge 1 ]
}

# --- the shipped ledger
expect_exit "specs check on the shipped ledger" 0 "$VTLAB" specs check
grep -q "bf16-stream-refuted-4of128" "$OUT_FILE" && ok "specs check lists the shipped claim" || not_ok "specs list" "$(cat "$OUT_FILE")"
expect_exit "audit on an empty db flags the shipped claim (exit 1)" 1 "$VTLAB" audit --db "$W/empty.db"
grep -qE "CONFOUND +claim bf16-stream-refuted-4of128 +R1 +measured through defect moe-scatter-row-bytes-from-stream" "$OUT_FILE" \
  && ok "R1 on the shipped claim, with the reason" || not_ok "R1 shipped" "$(cat "$OUT_FILE")"

# --- fixture ledger: another defect at another site, other knobs, other codebase
S=$W/specs; mkdir -p "$S/claims" "$S/defects"
cat > "$S/defects/kda-state-bf16.json" <<'J'
{"id": "kda-state-bf16", "title": "made-up: KDA state kept in bf16 under bf16 activations", "site": "kda.state",
 "trigger": {"VT_KIMI_BF16_ACT": "1"}, "effect": "the delta-rule state is rounded every token",
 "code_range": {"codebase": "other-tree", "introduced": {"commit": null, "date": "2026-03-01"}, "fixed": {"commit": null, "date": "2026-06-01"}},
 "guard_test": "none (fixture)"}
J
claim() {  # id verdict k n date knobs-json [codebase]
  cat > "$S/claims/$1.json" <<J
{"id": "$1", "hypothesis": "fixture", "verdict": "$2",
 "evidence": {"metric": "top1_agreement", "k": $3, "n": $4, "threshold": 0.9, "direction": ">="},
 "arm": {"name": "arm", "knobs": $6}, "reference": {"name": "f32", "knobs": {}},
 "code": {"codebase": "${7:-other-tree}", "commit": null, "date": "$5"}, "measured_at": "$5",
 "experiment": "experiments/bf16-act.json", "history": {"supersedes": null, "superseded_by": null}}
J
}
claim in-range REFUTED 10 128 2026-05-01 '{"VT_KIMI_BF16_ACT": "1"}'
# a range with one end git cannot place (unknown commit) and the other end deciding "outside"
cat > "$S/defects/half-known.json" <<'J'
{"id": "half-known", "title": "fixture: introduced at an unknown commit, fixed on a date", "site": "moe.scatter",
 "trigger": {"VT_KIMI_BF16_STREAM": "1"}, "effect": "none",
 "code_range": {"codebase": "tree-3", "introduced": {"commit": "deadbeef", "date": null}, "fixed": {"commit": null, "date": "2026-06-01"}},
 "replay_fault": "moe_scatter_row_bytes_from_stream", "guard_test": "none (fixture)"}
J
claim half-known-after REFUTED 10 128 2026-07-01 '{"VT_KIMI_BF16_STREAM": "1"}' tree-3
claim after-fix REFUTED 10 128 2026-07-01 '{"VT_KIMI_BF16_ACT": "1"}'
claim other-knobs REFUTED 10 128 2026-05-01 '{"VT_KIMI_BF16_STREAM": "1"}'
claim underpowered SUPPORTED 9 10 2026-05-01 '{}'
claim well-powered SUPPORTED 127 128 2026-05-01 '{}'
expect_exit "audit on the fixture ledger (exit 1)" 1 "$VTLAB" audit --db "$W/f.db" --specs "$S"
has_flag "$W/f.db" claim in-range R1 open && ok "R1: a new defect record flags the claim in its range" || not_ok "R1 fixture" "$(cat "$OUT_FILE")"
has_flag "$W/f.db" claim after-fix R1 open && not_ok "R1 range" "a claim measured after the fix was flagged" || ok "R1: a claim measured after the fix is not flagged"
has_flag "$W/f.db" claim other-knobs R1 open && not_ok "R1 trigger" "a claim without the trigger was flagged" || ok "R1: a claim without the trigger is not flagged"
has_flag "$W/f.db" claim half-known-after R1 open && not_ok "R1 half-placed range" "a claim after the fix was flagged as unplaceable" || ok "R1: one bound deciding 'outside' is enough (the other unplaceable)"
has_flag "$W/f.db" claim underpowered R6 open && ok "R6: SUPPORTED on 9/10 against 0.9 is underpowered" || not_ok "R6" "$(cat "$OUT_FILE")"
has_flag "$W/f.db" claim well-powered R6 open && not_ok "R6 false positive" "127/128 flagged" || ok "R6: 127/128 is not flagged"
# durable: removing the made-up defect resolves the flag, it is not deleted
rm "$S/defects/kda-state-bf16.json"
"$VTLAB" audit --db "$W/f.db" --specs "$S" >"$OUT_FILE" 2>&1
has_flag "$W/f.db" claim in-range R1 resolved && ok "a flag no longer found is kept, resolved" || not_ok "durable flags" "$(cat "$OUT_FILE")"

# --- bad ledger records: exit 2, file and field named
B=$W/bad; mkdir -p "$B/claims"
bad_claim() {  # name, python expression editing dict c, expected text
  $PY - "$B/claims" "$1" "$2" <<'PY'
import json, sys
d, name, edit = sys.argv[1:4]
c = json.load(open("specs/claims/bf16-stream-refuted-4of128.json"))
c["id"] = name
exec(edit)
open(f"{d}/{name}.json", "w").write(json.dumps(c))
PY
  expect_exit "bad claim ($1) is exit 2" 2 "$VTLAB" specs check --specs "$B"
  stderr_has "bad claim ($1) names file and field" "$B/claims/$1.json: $3"
  rm -f "$B/claims/$1.json"
}
bad_claim misspelt-knob 'c["arm"]["knobs"] = {"VT_KIMI_BF16_STRAEM": "1"}' "arm.knobs.VT_KIMI_BF16_STRAEM"
bad_claim bad-verdict 'c["verdict"] = "FALSE"' "verdict"
bad_claim k-over-n 'c["evidence"]["k"] = 200' "evidence"
bad_claim dangling 'c["history"]["superseded_by"] = "nope"' "history.superseded_by"
bad_claim unknown-field 'c["verdcit"] = "x"' "verdcit"
bad_claim id-mismatch 'c["id"] = "something-else"' "id"

# --- runs: R3 (ignored knob; contradicted expectation), R4, R5 on a small experiment
mkdir -p "$W/exp"
cat > "$W/exp/small.json" <<'J'
{"id": "audit-fixture", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 6, "length": 12, "seed": 3}}, "score": "all", "reference": "f32",
 "arms": [{"name": "f32", "knobs": {}},
          {"name": "ignored-knob", "knobs": {"VT_TEST_IGNORED_KNOB": "1"}},
          {"name": "bf16-stream", "knobs": {"VT_KIMI_BF16_STREAM": "1"}, "expect": {"residual.stream": "bf16"}}],
 "decision": {"metric": "top1_agreement", "threshold": 0.5, "direction": ">="}}
J
cat > "$W/exp/claims-bf16-not-set.json" <<'J'
{"id": "audit-fixture-2", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 4, "length": 8, "seed": 3}}, "score": "all", "reference": "f32",
 "arms": [{"name": "f32", "knobs": {}},
          {"name": "says-bf16", "knobs": {"VT_TEST_IGNORED_KNOB": "1"}, "expect": {"residual.stream": "bf16"}}]}
J
E=$W/empty-specs; mkdir -p "$E"
# an expectation at a site the model does not have is bad input, not a failed run
sed 's/"expect": {"residual.stream": "bf16"}/"expect": {"residual.stream": "bf16", "moe.scater": "f32"}/' "$W/exp/small.json" > "$W/typo.json"
expect_exit "expect at an unknown probe site is exit 2" 2 "$VTLAB" run "$W/typo.json" --db "$W/typo.db"
stderr_has "the error names the field" 'expect.moe.scater'
[ ! -e "$W/typo.db" ] && ok "nothing written for a bad experiment" || not_ok "typo db" "a database was created"
"$VTLAB" run "$W/exp/small.json" --db "$W/r.db" >/dev/null 2>&1
"$VTLAB" run "$W/exp/claims-bf16-not-set.json" --db "$W/r.db" >/dev/null 2>&1
id_of() { q "$W/r.db" "SELECT max(id) FROM runs WHERE experiment='$1' AND arm='$2' AND status='FINISHED'"; }
IGN=$(id_of audit-fixture ignored-knob); SAYS=$(id_of audit-fixture-2 says-bf16); B16=$(id_of audit-fixture bf16-stream)
REF=$(id_of audit-fixture f32)
expect_exit "audit of the fixture runs (exit 1)" 1 "$VTLAB" audit --db "$W/r.db" --specs "$E"
has_flag "$W/r.db" run "$IGN" R3 open && ok "R3: a numeric knob with bit-identical logits did not take effect" || not_ok "R3 ignored" "$(cat "$OUT_FILE")"
has_flag "$W/r.db" run "$SAYS" R3 open && ok "R3: arm expects bf16, the probe saw f32" || not_ok "R3 expect" "$(cat "$OUT_FILE")"
grep -q "knob did not take effect" "$OUT_FILE" && ok "R3 reason says the knob did not take effect" || not_ok "R3 reason" "$(cat "$OUT_FILE")"
has_flag "$W/r.db" run "$B16" R3 open && not_ok "R3 false positive" "the working bf16 arm was flagged" || ok "R3: the working bf16-stream arm is not flagged"
# R4: the reference run's model differs
q "$W/r.db" "UPDATE runs SET model_sha256 = 'ffff' || substr(model_sha256, 5) WHERE id = $REF" >/dev/null
"$VTLAB" audit --db "$W/r.db" --specs "$E" >"$OUT_FILE" 2>&1
has_flag "$W/r.db" run "$B16" R4 open && ok "R4: a reference run with another model is a mismatched reference" || not_ok "R4" "$(cat "$OUT_FILE")"
# R5: a second run of the same identity with other logits
"$VTLAB" run "$W/exp/small.json" --db "$W/r.db" --arm bf16-stream --force >/dev/null 2>&1
B16B=$(id_of audit-fixture bf16-stream)
"$VTLAB" audit --db "$W/r.db" --specs "$E" >"$OUT_FILE" 2>&1
has_flag "$W/r.db" run "$B16B" R5 open && not_ok "R5 false positive" "identical repeats flagged" || ok "R5: identical repeats are not flagged"
q "$W/r.db" "UPDATE runs SET logits_sha256 = '0000' || substr(logits_sha256, 5) WHERE id = $B16B" >/dev/null
"$VTLAB" audit --db "$W/r.db" --specs "$E" >"$OUT_FILE" 2>&1
has_flag "$W/r.db" run "$B16B" R5 open && ok "R5: repeats with different logits are not reproducible" || not_ok "R5" "$(cat "$OUT_FILE")"

# --- reopen end to end on the tiny model (shipped claim, copied ledger)
R=$W/reopen-specs; cp -r specs "$R"
expect_exit "reopen the shipped claim" 0 "$VTLAB" reopen bf16-stream-refuted-4of128 --db "$W/ro.db" --specs "$R"
grep -q "explained:" "$OUT_FILE" && ok "the replay explains the recorded verdict" || not_ok "explained" "$(tail -5 "$OUT_FILE")"
grep -qE "^verdict +REFUTED +(SUPPORTED|INCONCLUSIVE)" "$OUT_FILE" && ok "before/after side by side" || not_ok "side by side" "$(cat "$OUT_FILE")"
new=$(ls "$R/claims" | grep reopened | head -1)
[ -n "$new" ] && ok "a new claim file was written ($new)" || not_ok "new claim" "$(ls "$R/claims")"
grep -q "\"superseded_by\": \"${new%.json}\"" "$R/claims/bf16-stream-refuted-4of128.json" && ok "the old claim says it is superseded" || not_ok "superseded_by" "$(cat "$R/claims/bf16-stream-refuted-4of128.json")"
expect_exit "the ledger still checks after reopen" 0 "$VTLAB" specs check --specs "$R"
[ "$(q "$W/ro.db" "SELECT explained FROM reopens")" = 1 ] && ok "reopens row: explained" || not_ok "reopens row" "$(q "$W/ro.db" "SELECT * FROM reopens")"
expect_exit "audit after reopen: no open confound (exit 0)" 0 "$VTLAB" audit --db "$W/ro.db" --specs "$R"
has_flag "$W/ro.db" claim bf16-stream-refuted-4of128 R1 resolved && ok "the old claim's R1 flag is resolved, kept" || not_ok "resolved by reopen" "$(cat "$OUT_FILE")"
expect_exit "reopening a superseded claim is refused" 2 "$VTLAB" reopen bf16-stream-refuted-4of128 --db "$W/ro.db" --specs "$R"
expect_exit "reopening an unknown claim is exit 2" 2 "$VTLAB" reopen no-such-claim --db "$W/ro.db" --specs "$R"
finish
