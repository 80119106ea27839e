#!/usr/bin/env bash
# test_engine_loop.sh — the user's own engine, end to end (issue 30 items 1
# and 2): an engine (tests/engines/carry.py) with a probe site only it
# declares (kda.state_carry), a defect recorded at that site with an open code
# range, a claim measured through it. specs check validates the site against
# the engine's hello and replays the fault; run, audit (the claim is flagged),
# reopen, and the audit again: clean, because the rerun's own probes at the
# defect's site passed with the replay knob off (runtime evidence decides R1
# where it exists; the open range alone would flag the new claim forever).
#
# Usage (from the repository root): bash tests/cli/test_engine_loop.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-loop.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
E=$PWD/tests/engines
DB=$W/results.db
mkdir -p "$W/specs/claims" "$W/specs/defects"

cat > "$W/carry.json" <<JSON
{"id": "carry-bf16", "hypothesis": "With CARRY_BF16=1 the last-position top-1 token agrees with the f32 carry on at least 90% of sequences.",
 "engine": ["$E/carry.py"],
 "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 64, "length": 12, "seed": 5}},
 "score": "last", "probe": "audit", "reference": "f32",
 "arms": [{"name": "f32", "knobs": {}},
          {"name": "bf16", "knobs": {"CARRY_BF16": "1"}}],
 "metrics": ["top1_agreement", "kl"],
 "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="}}
JSON
cat > "$W/specs/defects/carry-half-row-bytes.json" <<'JSON'
{"id": "carry-half-row-bytes",
 "title": "carry's state copy sizes rows from the bf16 dtype while copying f32 rows",
 "site": "kda.state_carry",
 "trigger": {"CARRY_BF16": "1"},
 "effect": "with CARRY_BF16=1 every carried state row is copied at half length",
 "code_range": {"codebase": "carry", "introduced": null, "fixed": null},
 "replay_fault": "carry_half", "replay_knob": "CARRY_FAULT",
 "guard_test": "tests/cli/test_engine_loop.sh"}
JSON
# the recorded negative result, measured (by hand, before vtlab) through the defect
cat > "$W/specs/claims/carry-bf16-refuted-28of64.json" <<JSON
{"id": "carry-bf16-refuted-28of64",
 "hypothesis": "The bf16 carry keeps the next-token choice on at least 90% of sequences.",
 "verdict": "REFUTED",
 "evidence": {"metric": "top1_agreement", "k": 28, "n": 64, "threshold": 0.9, "direction": ">="},
 "arm": {"name": "bf16", "knobs": {"CARRY_BF16": "1"}},
 "reference": {"name": "f32", "knobs": {}},
 "code": {"codebase": "carry", "commit": null, "date": "2026-11-30"},
 "measured_at": "2026-11-30",
 "experiment": "$W/carry.json"}
JSON

expect_exit "engine-check: the engine passes, its fault replayed at its own site" 0 "$VTLAB" engine-check "$E/carry.py"
if grep -q "^ok    fault carry_half (CARRY_FAULT): 2 violation(s) at kda.state_carry" "$OUT_FILE"; then ok "... the fault line names the site"
else not_ok "engine-check fault line" "$(cat "$OUT_FILE")"; fi

expect_exit "specs check: a defect at a site only the engine declares is accepted and checked" 0 \
    "$VTLAB" specs check --specs "$W/specs"
if grep -q "defect carry-half-row-bytes: site kda.state_carry is one of the engine's probe sites" "$OUT_FILE" &&
   grep -q "CARRY_FAULT=carry_half acts at kda.state_carry" "$OUT_FILE"; then
    ok "... the site checked against the hello, the fault replayed at it"
else not_ok "site check lines" "$(cat "$OUT_FILE")"; fi

# a site the engine does not declare: refused, naming the engine's sites
cp -r "$W/specs" "$W/specs-badsite"
sed -i 's/"kda.state_carry"/"kda.state_carri"/' "$W/specs-badsite/defects/carry-half-row-bytes.json"
expect_exit "specs check: a defect at a site the engine does not declare is a problem (exit 2)" 2 \
    "$VTLAB" specs check --specs "$W/specs-badsite"
if grep -q "site kda.state_carri: engine carry declares no such probe site (its probe_sites: logits, kda.state_carry)" "$OUT_FILE"; then
    ok "... naming the site and the engine's probe sites"
else not_ok "bad site message" "$(cat "$OUT_FILE")"; fi

# no claim reaches an engine of the defect's codebase: said, never silent
mkdir -p "$W/specs-noengine/defects"
cp "$W/specs/defects/carry-half-row-bytes.json" "$W/specs-noengine/defects/"
expect_exit "specs check: an engine-only site with no engine to ask loads (exit 0)" 0 \
    "$VTLAB" specs check --specs "$W/specs-noengine"
if grep -q "site kda.state_carry not checked: no engine could be started" "$OUT_FILE"; then
    ok "... and says the site was not checked"
else not_ok "not-checked note" "$(cat "$OUT_FILE")"; fi

# vtlab's own defects stay at vtlab's sites
sed 's/"codebase": "carry"/"codebase": "vtlab"/; s/"replay_fault": "carry_half", "replay_knob": "CARRY_FAULT",//' \
    "$W/specs/defects/carry-half-row-bytes.json" > "$W/vtlab-defect.json"
mkdir -p "$W/specs-vtlab/defects"; cp "$W/vtlab-defect.json" "$W/specs-vtlab/defects/carry-half-row-bytes.json"
expect_exit "specs check: a vtlab defect at a site vtlab's model lacks is refused (exit 2)" 2 \
    "$VTLAB" specs check --specs "$W/specs-vtlab"
stderr_has "... naming the field and vtlab's sites" "site: \"kda.state_carry\" is not a probe site of vtlab's model"

expect_exit "the experiment runs through the engine" 0 "$VTLAB" run "$W/carry.json" --db "$DB"

# a claim recorded from a run, not by hand: the engine's numbers, codebase and
# run ids; its commit "release-0.3.1" is a tag, not a commit id, so the claim
# keeps none (the ledger loads) and its date places it
BF16_RUN=$(sqlite3 "$DB" "SELECT id FROM runs WHERE experiment = 'carry-bf16' AND arm = 'bf16'")
expect_exit "vtlab claim records the bf16 run's result" 0 \
    "$VTLAB" claim "$BF16_RUN" --id carry-bf16-supported --specs "$W/specs" --db "$DB"
if python3 - "$W/specs/claims/carry-bf16-supported.json" "$BF16_RUN" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["code"]["codebase"] == "carry" and c["code"].get("commit") is None, c["code"]
assert c["verdict"] == "SUPPORTED" and c["evidence"]["n"] == 64 and c["runs"]["arm"] == int(sys.argv[2]), c
assert c["arm"]["knobs"] == {"CARRY_BF16": "1"}, c["arm"]
PY
then ok "... codebase carry, no commit (a tag is not a commit id), SUPPORTED on 64, its run named"
else not_ok "claim record" "$(cat "$W/specs/claims/carry-bf16-supported.json")"; fi
expect_exit "... and the ledger still loads and checks against the engine" 0 "$VTLAB" specs check --specs "$W/specs"

expect_exit "audit: the recorded claim is flagged (exit 1)" 1 "$VTLAB" audit --db "$DB" --specs "$W/specs"
if grep -Eq "^CONFOUND +claim carry-bf16-refuted-28of64 +R1 +measured through defect carry-half-row-bytes \(kda.state_carry\)" "$OUT_FILE"; then
    ok "... R1: measured through the defect at the engine's own site"
else not_ok "first audit" "$(head -c 900 "$OUT_FILE")"; fi

expect_exit "reopen the claim" 0 "$VTLAB" reopen carry-bf16-refuted-28of64 --db "$DB" --specs "$W/specs"
if grep -q "explained: through CARRY_FAULT=carry_half the arm scores" "$OUT_FILE"; then ok "... the replay explains the recorded number"
else not_ok "reopen explained" "$(tail -8 "$OUT_FILE")"; fi
NEW=$(basename "$(ls "$W"/specs/claims/*-reopened-*.json 2>/dev/null | head -1)" .json)

expect_exit "audit after reopen: clean (exit 0) although the defect's code range is open" 0 \
    "$VTLAB" audit --db "$DB" --specs "$W/specs"
if grep -q "^0 confound(s) open" "$OUT_FILE" 2>/dev/null || grep -q "^0 confound(s) open" <(tail -1 "$OUT_FILE"); then
    ok "... 0 confounds open"
else not_ok "open count" "$(tail -3 "$OUT_FILE")"; fi
if grep -Eq "^clean +claim carry-bf16-supported +R1" "$OUT_FILE"; then ok "... the claim recorded from a clean run is cleared too"
else not_ok "recorded claim cleared" "$(head -c 1200 "$OUT_FILE")"; fi
if grep -Eq "^resolved +claim carry-bf16-refuted-28of64 +R1" "$OUT_FILE"; then ok "... the old claim's flag resolved (superseded)"
else not_ok "old claim resolved" "$(head -c 1200 "$OUT_FILE")"; fi
if grep -Eq "^clean +claim ${NEW:0:36}" "$OUT_FILE" &&
   grep -q "own probes at kda.state_carry passed on 2 layer(s) (2 record(s)); replay knob off (CARRY_FAULT not set)" "$OUT_FILE"; then
    ok "... the new claim is clean, and the audit says why: its run's probes at the site passed, replay knob off"
else not_ok "clearance basis" "$(grep -A3 cleared "$OUT_FILE" | head -c 1200)"; fi

# the report and `runs` name the engine the numbers came from
expect_exit "report" 0 "$VTLAB" report --db "$DB" --out "$W/report" --no-plots
if grep -q "carry 0.3.1" "$W/report/index.html" && grep -q "carry 0.3.1" "$W/report/summary.md"; then
    ok "... names the engine (carry 0.3.1) in the HTML and the summary"
else not_ok "report engine" "$(grep -c carry "$W/report/index.html" 2>&1)"; fi
"$VTLAB" runs --db "$DB" >"$OUT_FILE" 2>&1
if [ "$(grep -c "carry 0.3.1" "$OUT_FILE")" -ge 4 ]; then ok "runs: every run names the engine"
else not_ok "runs engine" "$(cat "$OUT_FILE")"; fi

"$VTLAB" audit --db "$DB" --specs "$W/specs" --json >"$OUT_FILE" 2>"$ERR"
if python3 - "$OUT_FILE" "$NEW" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
c = [x for x in o["cleared"] if x["subject"] == sys.argv[2]]
assert o["open"] == 0, o["open"]
assert c and c[0]["evidence"]["site"] == "kda.state_carry" and c[0]["evidence"]["layers_passed"] == 2, c
PY
then ok "audit --json: open 0, the clearance with its evidence (site, layers passed)"
else not_ok "audit json" "$(head -c 800 "$OUT_FILE")"; fi

# Runtime evidence overrules the range only where it is clean: the same new
# claim pointed at the replay's run (its probes at the site violated) is flagged.
python3 - "$W/specs/claims/$NEW.json" "$DB" <<'PY'
import json, sqlite3, sys
p, db = sys.argv[1], sys.argv[2]
replay = sqlite3.connect(db).execute("SELECT id FROM runs WHERE arm LIKE '%replay%' ORDER BY id DESC").fetchone()[0]
c = json.load(open(p)); c["runs"]["arm"] = replay; json.dump(c, open(p, "w"))
PY
expect_exit "audit: a claim whose run's probes at the site failed is flagged (exit 1)" 1 \
    "$VTLAB" audit --db "$DB" --specs "$W/specs"
if grep -Eq "^CONFOUND +claim ${NEW:0:36}[^ ]* +R1 +measured through defect carry-half-row-bytes \(kda.state_carry\) on the arm side: its arm run [0-9]+'s own probes show kda.state_carry violated on 2 layer" "$OUT_FILE"; then
    ok "... by its run's own probes"
else not_ok "violated evidence" "$(head -c 1200 "$OUT_FILE")"; fi

finish
