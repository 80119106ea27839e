#!/usr/bin/env bash
# The ledger's own inputs (issue 12, items 4-6):
#  - a ledger that is not there (--specs no-such-dir, a file) is exit 2
#    naming the path, for specs check, audit and nightly;
#  - a claim whose experiment file does not exist is exit 2 naming it;
#  - a JSON syntax error in a ledger file gives its line and column;
#  - replay_fault is optional: a defect with no built-in replay is recorded,
#    audited ("no replay recorded") and reopened (rerun only, the old number
#    said to be unexplained); a replay fault acting at another site than the
#    defect's is refused;
#  - a nightly whose ledger is malformed is not green: exit 2 before anything
#    runs, no nightly recorded, last night's junit.xml untouched.
set -u
VTLAB=$(readlink -f "${1:-./vtlab}")
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
PY=/usr/bin/python3
q() { $PY -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print('\n'.join('|'.join(str(x) for x in t) for t in c.execute(sys.argv[2])))" "$@"; }

# A small experiment (the shipped one's arms, fewer and shorter sequences).
$PY - "$W/exp.json" <<'PY'
import json, sys
e = json.load(open("experiments/bf16-stream.json"))
e["id"] = "ledger-inputs"
e["dataset"] = {"generate": {"n_sequences": 8, "length": 8, "seed": 3}}
e["arms"] = [a for a in e["arms"] if a["name"] in ("f32", "bf16-stream")]
e["divergence"] = {"sequences": 2, "tolerance": 0.02}
json.dump(e, open(sys.argv[1], "w"), indent=1)
PY
S=$W/specs; mkdir -p "$S/claims" "$S/defects"
claim() {  # id experiment-path
  cat > "$S/claims/$1.json" <<J
{"id": "$1", "hypothesis": "fixture", "verdict": "REFUTED",
 "evidence": {"metric": "top1_agreement", "k": 4, "n": 8, "threshold": 0.9, "direction": ">="},
 "arm": {"name": "bf16-stream", "knobs": {"VT_KIMI_BF16_STREAM": "1"}}, "reference": {"name": "f32", "knobs": {}},
 "code": {"codebase": "other-engine", "date": "2026-05-01"}, "measured_at": "2026-05-01",
 "experiment": "$2"}
J
}
defect() {  # id site replay-fault-json-or-empty
  cat > "$S/defects/$1.json" <<J
{"id": "$1", "title": "fixture", "site": "$2", "trigger": {"VT_KIMI_BF16_STREAM": "1"}, "effect": "fixture",
 "code_range": {"codebase": "other-engine", "introduced": null, "fixed": null},
 ${3:+\"replay_fault\": $3,} "guard_test": "none (fixture)"}
J
}

# ------------------------------------------------ a ledger that is not there
for cmd in "specs check" "audit --db $W/none.db"; do
  expect_exit "$cmd --specs no-such-dir: exit 2" 2 "$VTLAB" $cmd --specs "$W/no-such-dir"
  stderr_has "$cmd --specs no-such-dir: the path is named" "$W/no-such-dir: no such ledger directory"
done
[ ! -e "$W/none.db" ] && ok "audit of a missing ledger creates no database" || not_ok "audit missing ledger" "none.db created"
mkdir -p "$W/empty"; touch "$W/afile"
expect_exit "an existing empty directory is an empty ledger: exit 0" 0 "$VTLAB" specs check --specs "$W/empty"
grep -q "0 claim(s), 0 defect(s)" "$OUT_FILE" && ok "... and says it holds nothing" || not_ok "empty ledger" "$(cat "$OUT_FILE")"
expect_exit "specs check of a file: exit 2" 2 "$VTLAB" specs check --specs "$W/afile"
stderr_has "... says it is not a directory" "$W/afile: not a directory"

# ------------------------------------------------ a claim whose experiment does not exist
claim dangling "$W/no-such-experiment.json"
expect_exit "a claim naming a missing experiment file: specs check exit 2" 2 "$VTLAB" specs check --specs "$S"
stderr_has "... names the claim file, the field and the path" "dangling.json: experiment: $W/no-such-experiment.json: no such experiment file"
expect_exit "... and the audit exits 2" 2 "$VTLAB" audit --db "$W/a.db" --specs "$S"
rm "$S/claims/dangling.json"
# a relative experiment path is also found next to the ledger (LEDGER/../experiments/...)
mkdir -p "$W/elsewhere/specs/claims" "$W/elsewhere/experiments"; cp "$W/exp.json" "$W/elsewhere/experiments/e.json"
claim relative experiments/e.json; mv "$S/claims/relative.json" "$W/elsewhere/specs/claims/"
expect_exit "a relative experiment path found from the ledger's parent: specs check exit 0" 0 "$VTLAB" specs check --specs "$W/elsewhere/specs"

# ------------------------------------------------ JSON syntax: line and column
printf '{\n  "id": "broken",\n  "hypothesis": "x",,\n}\n' > "$S/claims/broken.json"
expect_exit "a claim with a JSON syntax error: exit 2" 2 "$VTLAB" specs check --specs "$S"
stderr_has "... with its line and column" "broken.json: not valid JSON at line 3 column 2"
printf '{"id": "x"} {"id": "y"}\n' > "$S/claims/broken.json"
expect_exit "text after the JSON value: exit 2" 2 "$VTLAB" specs check --specs "$S"
stderr_has "... said so, with its column" "not valid JSON at line 1 column 13: text after the JSON value"
rm "$S/claims/broken.json"

# ------------------------------------------------ replay_fault: optional, and at the defect's site
defect wrong-site kda.state '"moe_scatter_row_bytes_from_stream"'
expect_exit "a replay fault acting at another site than the defect's: exit 2" 2 "$VTLAB" specs check --specs "$S"
stderr_has "... names both sites" "replay_fault: \"moe_scatter_row_bytes_from_stream\" acts at moe.scatter, but the defect's site is kda.state"
rm "$S/defects/wrong-site.json"
defect no-replay kda.state ''
defect null-replay kda.state null
claim elsewhere "$W/exp.json"
expect_exit "defects with no replay_fault (absent, null) are recorded: specs check exit 0" 0 "$VTLAB" specs check --specs "$S"
grep -q "no-replay .*site kda.state, no replay" "$OUT_FILE" && ok "specs check says 'no replay'" || not_ok "no replay listed" "$(cat "$OUT_FILE")"
rm "$S/defects/null-replay.json"
expect_exit "audit of a claim measured through a defect with no replay: exit 1 (flagged)" 1 "$VTLAB" audit --db "$W/a.db" --specs "$S"
r=$(q "$W/a.db" "SELECT reason FROM audit_flags WHERE subject='elsewhere' AND rule='R1' AND key='no-replay' AND resolved_at IS NULL")
echo "$r" | grep -q "no replay recorded for it" && ! echo "$r" | grep -q "VT_FAULT" \
  && ok "the flag says no replay is recorded, and advises no VT_FAULT" || not_ok "R1 no replay" "$r"
expect_exit "reopen through a defect with no replay: exit 0" 0 "$VTLAB" reopen elsewhere --db "$W/r.db" --specs "$S"
grep -q "no replay (the defect records no replay_fault), rerun only" "$OUT_FILE" && grep -q "is unexplained" "$OUT_FILE" \
  && ok "reopen reruns only and says the old number is unexplained" || not_ok "reopen no replay" "$(cat "$OUT_FILE" "$ERR")"
new=$(ls "$S/claims" | grep -v '^elsewhere.json$' | head -1)
[ -n "$new" ] && grep -q '"superseded_by": "'"${new%.json}"'"' "$S/claims/elsewhere.json" \
  && ok "the superseding claim is written and the old one points to it" || not_ok "superseding claim" "$(ls "$S/claims")"
r=$(q "$W/r.db" "SELECT coalesce(replay_run_id, 'NULL'), explained FROM reopens")
[ "$r" = "NULL|0" ] && ok "the reopens row has no replay run and explained = 0" || not_ok "reopens row" "$r"
[ "$(q "$W/r.db" "SELECT count(*) FROM runs WHERE arm LIKE '%.replay'")" = 0 ] \
  && ok "no replay arm was run" || not_ok "replay arm" "$(q "$W/r.db" "SELECT arm FROM runs")"
rm -f "$S/claims/"*.json "$S/defects/"*.json

# ------------------------------------------------ the nightly and a malformed ledger
mkdir -p "$W/exps" "$W/report"; cp "$W/exp.json" "$W/exps/"
echo "last night" > "$W/report/junit.xml"
printf '{"id": "half' > "$S/claims/half.json"
expect_exit "nightly with a malformed ledger: exit 2" 2 "$VTLAB" nightly "$W/exps" --db "$W/n.db" --out "$W/report" --specs "$S" --no-plots
stderr_has "... naming the file, line and column" "half.json: not valid JSON at line 1"
[ "$(cat "$W/report/junit.xml")" = "last night" ] && ok "... last night's junit.xml is untouched" || not_ok "junit touched" "$(head -c 200 "$W/report/junit.xml")"
[ ! -e "$W/n.db" ] || [ "$(q "$W/n.db" "SELECT count(*) FROM nightlies")" = 0 ] \
  && ok "... no nightly is recorded" || not_ok "nightly recorded" "$(q "$W/n.db" "SELECT id, status FROM nightlies")"
expect_exit "nightly --specs no-such-dir: exit 2" 2 "$VTLAB" nightly "$W/exps" --db "$W/n.db" --out "$W/report" --specs "$W/no-such-dir" --no-plots
stderr_has "... names the path" "$W/no-such-dir: no such ledger directory"
rm "$S/claims/half.json"

# ------------------------------------------------ commit fields are commit ids (issue 34 item 5)
# They reach git's command line in the audit: 7-40 hex digits (a claim's code
# may also be a dirty build's COMMIT+dirty.HASH), anything else refused.
rm -f "$S/claims/"*.json "$S/defects/"*.json
G=$W/commits; mkdir -p "$G/claims" "$G/defects"
for bad in 'abc; touch pwned' 'abc123' '$(id)' 'HEAD~1' '0123456789abcdef0123456789abcdef012345678' 'abc1234 ' ; do
  $PY - "$G/defects/d.json" "$bad" <<'PY'
import json, sys
json.dump({"id": "d", "title": "t", "site": "moe.scatter", "trigger": {}, "effect": "e",
           "code_range": {"codebase": "x", "introduced": None, "fixed": {"commit": sys.argv[2]}},
           "guard_test": "none"}, open(sys.argv[1], "w"))
PY
  expect_exit "a defect's fixed.commit \"$bad\" is refused (exit 2)" 2 "$VTLAB" specs check --specs "$G"
  stderr_has "... naming the field and what was expected" "code_range.fixed.commit: \"$bad\": expected a commit id, 7 to 40 hex digits"
done
rm -f "$G/defects/d.json"
$PY - "$G/claims/c.json" "$PWD/experiments/bf16-stream.json" <<'PY'
import json, sys
json.dump({"id": "c", "hypothesis": "h", "verdict": "INCONCLUSIVE",
           "evidence": {"metric": "top1_agreement", "k": 4, "n": 8, "threshold": 0.9, "direction": ">="},
           "arm": {"name": "a", "knobs": {}}, "reference": {"name": "r", "knobs": {}},
           "code": {"codebase": "x", "commit": "abc1234+dirty.`id`"}, "measured_at": "2026-05-01",
           "experiment": sys.argv[2]}, open(sys.argv[1], "w"))
PY
expect_exit "a claim's code.commit with a command in its dirty suffix is refused (exit 2)" 2 "$VTLAB" specs check --specs "$G"
stderr_has "... naming code.commit" "code.commit: \"abc1234+dirty.\`id\`\": expected a commit id"
sed -i 's/abc1234+dirty.`id`/5fb1e41d41a2+dirty.14db97c3ce28/' "$G/claims/c.json"
expect_exit "a dirty build's code version (COMMIT+dirty.HASH) is a valid claim commit" 0 "$VTLAB" specs check --specs "$G"

finish
