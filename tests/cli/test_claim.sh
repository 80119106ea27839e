#!/usr/bin/env bash
# test_claim.sh — `vtlab claim RUN --id ID`: a claim record written from a
# recorded run (docs/specs.md, "Recording a claim from a run"). A tiny
# experiment on the synthetic model; the claim's fields must be the run's
# (k/n, verdict, decision, arm and reference knobs, run ids, code, date), the
# ledger it lands in must pass `specs check` and `audit`, and bad requests
# (an existing file, a bad id, a run that is unfinished, missing, a
# reference or without a verdict) are exit 2 with nothing written.
#
# Usage (from the repository root): bash tests/cli/test_claim.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-claim.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
PY=python3
q() { $PY -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); r=list(c.execute(sys.argv[2])); print('\n'.join('|'.join(str(x) for x in t) for t in r))" "$@"; }

mkdir -p "$W/exp" "$W/specs"
cat > "$W/exp/small.json" <<'J'
{"id": "claim-fixture",
 "hypothesis": "A bf16 residual stream keeps the tiny model's top-1 on at least half the positions.",
 "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 4, "length": 8, "seed": 3}}, "score": "all", "reference": "f32",
 "arms": [{"name": "f32", "knobs": {}},
          {"name": "bf16-stream", "knobs": {"VT_KIMI_BF16_STREAM": true}, "expect": {"residual.stream": "bf16"}}],
 "decision": {"metric": "top1_agreement", "threshold": 0.5, "direction": ">="}}
J
# the same arms without a decision rule: compared, but no verdict
$PY - "$W/exp/small.json" "$W/exp/no-decision.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1])); e["id"] = "claim-fixture-nodecision"; del e["decision"]
json.dump(e, open(sys.argv[2], "w"))
PY
DB=$W/r.db
expect_exit "the tiny experiment runs" 0 "$VTLAB" run "$W/exp/small.json" --db "$DB"
expect_exit "the experiment without a decision runs" 0 "$VTLAB" run "$W/exp/no-decision.json" --db "$DB"
id_of() { q "$DB" "SELECT max(id) FROM runs WHERE experiment='$1' AND arm='$2' AND status='FINISHED'"; }
ARM=$(id_of claim-fixture bf16-stream); REF=$(id_of claim-fixture f32); NOV=$(id_of claim-fixture-nodecision bf16-stream)
C=$W/specs/claims/bf16-small.json

expect_exit "claim RUN --id ID --specs DIR writes the claim" 0 "$VTLAB" claim "$ARM" --id bf16-small --specs "$W/specs" --db "$DB"
[ -f "$C" ] && ok "... to DIR/claims/ID.json" || not_ok "claim file" "$(ls -R "$W/specs")"
grep -qF "$C" "$OUT_FILE" && grep -qi "commit" "$OUT_FILE" && ok "... and says where, and that it is to be committed" \
  || not_ok "claim output" "$(cat "$OUT_FILE")"

# every field against what results.db recorded for the run
if $PY - "$C" "$DB" "$ARM" "$REF" "$W/exp/small.json" > "$W/fields" 2>&1 <<'PY'
import json, sqlite3, sys
c = json.load(open(sys.argv[1])); db = sqlite3.connect(sys.argv[2]); arm, ref = int(sys.argv[3]), int(sys.argv[4])
exp = json.load(open(sys.argv[5]))
k, n, verdict, metric, thr, d = db.execute("SELECT k, n, verdict, metric, threshold, direction FROM verdicts WHERE run_id = ?", (arm,)).fetchone()
ck, cn = db.execute("SELECT top1_k, top1_n FROM comparisons WHERE run_id = ?", (arm,)).fetchone()
commit, started = db.execute("SELECT git_commit, started_at FROM runs WHERE id = ?", (arm,)).fetchone()
want = {
  "id": "bf16-small", "verdict": verdict, "hypothesis": exp["hypothesis"],
  "evidence": {"metric": metric, "k": k, "n": n, "threshold": thr, "direction": d},
  "arm": {"name": "bf16-stream", "knobs": {"VT_KIMI_BF16_STREAM": "1"}},
  "reference": {"name": "f32", "knobs": {}},
  "code": {"codebase": "vtlab", "commit": commit, "date": started[:10]},
  "measured_at": started[:10],
  "history": {"supersedes": None, "superseded_by": None},
  "runs": {"arm": arm, "reference": ref},
}
bad = [f"{f}: {c.get(f)!r}, expected {v!r}" for f, v in want.items() if c.get(f) != v]
if (k, n) != (ck, cn): bad.append(f"verdict k/n {k}/{n} is not the comparison's {ck}/{cn}")
if not c["experiment"].endswith("exp/small.json"): bad.append(f"experiment: {c['experiment']!r}")
print("\n".join(bad) or "fields match")
sys.exit(1 if bad else 0)
PY
then ok "the claim's fields are the run's: k/n, verdict, decision, knobs, reference, runs, code, date, hypothesis"
else not_ok "claim fields" "$(cat "$W/fields")"; fi

expect_exit "specs check accepts the ledger with the new claim" 0 "$VTLAB" specs check --specs "$W/specs"
grep -qE "claim +bf16-small +(SUPPORTED|REFUTED|INCONCLUSIVE)" "$OUT_FILE" && ok "... and lists it" || not_ok "specs list" "$(cat "$OUT_FILE")"
expect_exit "audit accepts it: no open confound (exit 0)" 0 "$VTLAB" audit --db "$DB" --specs "$W/specs"
grep -q "bf16-small" "$OUT_FILE" && grep -qE "CONFOUND +claim bf16-small" "$OUT_FILE" && not_ok "audit" "$(cat "$OUT_FILE")" \
  || ok "... the claim is not flagged"

# --hypothesis; the experiment path as the ledger resolves it when vtlab runs elsewhere
expect_exit "claim --hypothesis TEXT" 0 "$VTLAB" claim "$ARM" --id bf16-small-2 --specs "$W/specs" --db "$DB" \
  --hypothesis "Said otherwise."
[ "$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['hypothesis'])" "$W/specs/claims/bf16-small-2.json")" = "Said otherwise." ] \
  && ok "... records the hypothesis given" || not_ok "--hypothesis" "$(cat "$W/specs/claims/bf16-small-2.json")"
mkdir -p "$W/elsewhere"
(cd "$W/elsewhere" && "$VTLAB" specs check --specs "$W/specs" >"$OUT_FILE" 2>"$ERR") \
  && ok "the ledger loads from another directory (the experiment path is the ledger's, not the cwd's)" \
  || not_ok "experiment path" "$(cat "$ERR")"
# a run made from the ledger's own directory, experiment given relative to it (its model
# config found from there too)
sed "s|\"model/configs/|\"$PWD/model/configs/|" "$W/exp/small.json" > "$W/exp/rel.json"
(cd "$W" && "$VTLAB" run exp/rel.json --db rel.db >/dev/null 2>&1)
RARM=$(q "$W/rel.db" "SELECT max(id) FROM runs WHERE arm='bf16-stream' AND status='FINISHED'")
(cd "$W" && "$VTLAB" claim "$RARM" --id rel --db rel.db >"$OUT_FILE" 2>"$ERR")
[ "$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['experiment'])" "$W/specs/claims/rel.json" 2>/dev/null)" = "exp/rel.json" ] \
  && ok "claim from the run's directory (default --specs specs): the experiment as recorded, exp/rel.json" \
  || not_ok "relative experiment" "$(cat "$ERR" "$W/specs/claims/rel.json" 2>/dev/null)"
expect_exit "... and that ledger checks" 0 "$VTLAB" specs check --specs "$W/specs"

# refusals: exit 2, nothing written or changed
before=$(sha256sum "$C")
expect_exit "the same id again is refused (exit 2)" 2 "$VTLAB" claim "$ARM" --id bf16-small --specs "$W/specs" --db "$DB" --hypothesis x
stderr_has "... naming the file" "$C"
[ "$(sha256sum "$C")" = "$before" ] && ok "... and the file is unchanged" || not_ok "overwrite" "$(cat "$C")"
n_files() { ls -A "$W/specs/claims" | wc -l; }
N0=$(n_files)
# the ledger's rules (letters, digits, '.', '_', '-'; at most 48), and no leading '.': the
# ledger never reads a hidden file, so such a claim would be written and never seen
bad_id() {  # id, text the error must hold
  expect_exit "bad id \"${1:0:20}\" is exit 2" 2 "$VTLAB" claim "$ARM" --id "$1" --specs "$W/specs" --db "$DB"
  stderr_has "... saying why" "$2"
}
bad_id "bad/id" "may use only letters, digits"
bad_id "has space" "may use only letters, digits"
bad_id "é" "may use only letters, digits"
bad_id "$(printf 'x%.0s' $(seq 49))" "is 49 characters; a claim id is at most 48"
bad_id ".hidden" "the ledger skips hidden files"
expect_exit "--id missing is exit 2" 2 "$VTLAB" claim "$ARM" --specs "$W/specs" --db "$DB"
expect_exit "a run id that is not a number is exit 2" 2 "$VTLAB" claim abc --id x1 --specs "$W/specs" --db "$DB"
expect_exit "a missing run is exit 2" 2 "$VTLAB" claim 9999 --id x2 --specs "$W/specs" --db "$DB"
stderr_has "... naming it" "no run 9999"
expect_exit "a reference run is exit 2" 2 "$VTLAB" claim "$REF" --id x3 --specs "$W/specs" --db "$DB"
stderr_has "... saying it is the reference arm's" "reference arm"
expect_exit "a run without a verdict is exit 2" 2 "$VTLAB" claim "$NOV" --id x4 --specs "$W/specs" --db "$DB"
stderr_has "... saying so" "has no verdict"
cp "$DB" "$W/k.db"
$PY -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE runs SET status='KILLED' WHERE id=?\", (int(sys.argv[2]),)); c.commit()" "$W/k.db" "$ARM"
expect_exit "an unfinished (KILLED) run is exit 2" 2 "$VTLAB" claim "$ARM" --id x5 --specs "$W/specs" --db "$W/k.db"
stderr_has "... saying it is not FINISHED" "is KILLED, not FINISHED"
expect_exit "a missing database is exit 2" 2 "$VTLAB" claim "$ARM" --id x6 --specs "$W/specs" --db "$W/none.db"
[ ! -e "$W/none.db" ] && ok "... and none is created" || not_ok "db created" "$W/none.db exists"
expect_exit "a missing ledger directory is exit 2" 2 "$VTLAB" claim "$ARM" --id x7 --specs "$W/no-specs" --db "$DB"
[ "$(n_files)" = "$N0" ] && ok "no refused claim left a file" || not_ok "leftovers" "$(ls -A "$W/specs/claims")"
# an experiment file edited since the run: recorded, with a warning (it is the recipe reopen runs)
sed -i 's/"seed": 3/"seed": 4/' "$W/exp/small.json"
expect_exit "a claim whose experiment file changed since the run is recorded" 0 \
  "$VTLAB" claim "$ARM" --id bf16-small-edited --specs "$W/specs" --db "$DB"
stderr_has "... with a warning that the file is not what the run executed" "is not the experiment run $ARM executed"
expect_exit "the ledger still checks" 0 "$VTLAB" specs check --specs "$W/specs"
finish
