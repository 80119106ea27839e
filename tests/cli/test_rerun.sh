#!/usr/bin/env bash
# test_rerun.sh — issue 31 items 2, 4 and 5 on the tiny model:
#   paths relative to the file that names them (an experiment's, a ledger's),
#     the synthetic-model cache never in the current directory, and a run's
#     identity unchanged by where it is run from;
#   `vtlab rerun RUN` / `--experiment ID` from the spec stored with the run
#     (identical, rerun_of, a missing model is exit 2 naming hash and path);
#   `vtlab tag`, `vtlab note`, the filters of `vtlab runs`, tags and notes in
#     show, export and the views; `run --limit N` as PARTIAL runs.
# Usage (from the repository root): bash tests/cli/test_rerun.sh ./vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
ROOT=$PWD
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-rerun.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
PY=/usr/bin/python3
export VTLAB_CACHE=$W/cache
q() { $PY -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print('\n'.join('|'.join(str(x) for x in r) for r in c.execute(sys.argv[2])))" "$@"; }

# ---- a project: experiments/ with a dataset file beside the experiment, specs/
mkdir -p "$W/p/experiments" "$W/p/specs/claims" "$W/p/specs/defects" "$W/elsewhere"
printf '5 17 3 9 11 40 2 7\n8 8 9 10 11 12 13 14\n100 200 300 400 5 6 7 8\n9 9 9 9 1 2 3 4\n' > "$W/p/experiments/ids.txt"
cat > "$W/p/experiments/x.json" <<'JSON'
{"id": "x", "hypothesis": "the bf16 stream keeps the top-1", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"file": "ids.txt"}, "score": "all", "top_k": 4, "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": 1}, "expect": {"residual.stream": "bf16"}}],
 "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="},
 "divergence": {"sequences": 2, "tolerance": 0.02}}
JSON
DB=$W/r.db
cd "$W/elsewhere" || exit 2
expect_exit "run from another directory: the dataset file is found next to the experiment" 0 \
  "$VTLAB" run ../p/experiments/x.json --db "$DB"
[ "$(q "$DB" "select count(*) from runs where status = 'FINISHED'")" = 2 ] && ok "... two FINISHED runs" \
  || not_ok "runs" "$(cat "$ERR")"
[ -z "$(ls -A "$W/elsewhere")" ] && [ -d "$W/cache/models" ] && ok "... the synthetic model went to VTLAB_CACHE, nothing into the current directory" \
  || not_ok "cache" "$(ls -A "$W/elsewhere") / $(ls "$W/cache" 2>&1)"
cd "$W/p" || exit 2
expect_exit "the same experiment from its project root, by another path" 0 "$VTLAB" run experiments/x.json --db "$DB"
[ "$(grep -c "already FINISHED with this identity, skipped" "$OUT_FILE")" = 2 ] && [ "$(q "$DB" "select count(*) from runs")" = 2 ] \
  && ok "... is the same run: identity is by content, not path text (both skipped)" || not_ok "identity" "$(cat "$OUT_FILE")"
cd "$ROOT" || exit 2
expect_exit "... and from the repository root with a third path" 0 "$VTLAB" run "$W/p/experiments/x.json" --db "$DB"
[ "$(q "$DB" "select count(*) from runs")" = 2 ] && ok "... still skipped" || not_ok "identity 3" "$(cat "$OUT_FILE")"
mv "$W/p/experiments/ids.txt" "$W/p/ids.txt"
cp "$W/p/ids.txt" "$W/elsewhere/ids.txt"
(cd "$W/elsewhere" && "$VTLAB" run ../p/experiments/x.json --db "$W/bad.db" >"$OUT_FILE" 2>"$ERR"); rc=$?
[ $rc -eq 2 ] && grep -q "dataset.file: .*p/experiments/ids.txt" "$ERR" && [ ! -e "$W/bad.db" ] \
  && ok "a dataset file only in the current directory is not taken: exit 2 naming the path next to the experiment" \
  || not_ok "dataset beside" "rc=$rc $(cat "$ERR")"
mv "$W/p/ids.txt" "$W/p/experiments/ids.txt"
sed 's|"model/configs/kimi-linear-tiny.json"|"configs/nope.json"|' "$W/p/experiments/x.json" > "$W/p/experiments/nope.json"
expect_exit "a model.synth that is neither next to the experiment nor shipped: exit 2" 2 "$VTLAB" run "$W/p/experiments/nope.json" --db "$W/bad.db"
stderr_has "... naming the path it looked at" "p/experiments/configs/nope.json"
# a ledger names its experiment relative to its parent, read from anywhere
python3 - "$DB" "$W/p/specs/claims/x-bf16.json" <<'PY'
import json, sqlite3, sys
# written with vtlab claim below; this only checks the db is readable
sqlite3.connect(sys.argv[1]).execute("select 1").fetchone()
PY
ARM=$(q "$DB" "select id from runs where arm = 'bf16'"); REF=$(q "$DB" "select id from runs where arm = 'f32'")
(cd "$W/p" && "$VTLAB" claim "$ARM" --id x-bf16 --db "$DB" >"$OUT_FILE" 2>"$ERR"); rc=$?
[ $rc -eq 0 ] && grep -q '"experiment": "experiments/x.json"' "$W/p/specs/claims/x-bf16.json" \
  && ok "claim: the experiment relative to the ledger's parent" || not_ok "claim" "rc=$rc $(cat "$ERR")"
(cd "$W/elsewhere" && "$VTLAB" specs check --specs ../p/specs >"$OUT_FILE" 2>"$ERR"); rc=$?
[ $rc -eq 0 ] && ok "specs check of that ledger from another directory" || not_ok "specs check elsewhere" "$(cat "$ERR")"

# ---- rerun
LOG=$(q "$DB" "select logits_sha256 from runs where id = $ARM")
expect_exit "rerun RUN" 0 "$VTLAB" rerun "$ARM" --db "$DB"
grep -q "^  identical (logits sha256 $LOG)$" "$OUT_FILE" && ok "... identical, the whole logits hash" || not_ok "rerun identical" "$(cat "$OUT_FILE")"
NEW=$(q "$DB" "select max(id) from runs where rerun_of = $ARM")
[ -n "$NEW" ] && [ "$NEW" != None ] && [ "$(q "$DB" "select logits_sha256 || status from runs where id = $NEW")" = "${LOG}FINISHED" ] \
  && ok "... a new FINISHED run $NEW, rerun_of $ARM, same logits" || not_ok "rerun row" "$(q "$DB" "select id, arm, status, rerun_of from runs")"
expect_exit "compare RUN and its rerun" 0 "$VTLAB" compare "$ARM" "$NEW" --db "$DB"
grep -q "^identical (logits sha256 $LOG)$" "$OUT_FILE" && grep -q "^model sha256 *[0-9a-f]\{64\}  (both)$" "$OUT_FILE" \
  && ok "... says identical, hashes whole" || not_ok "compare identical" "$(cat "$OUT_FILE")"
expect_exit "rerun the reference run" 0 "$VTLAB" rerun "$REF" --db "$DB"
grep -q "identical (logits sha256" "$OUT_FILE" && ok "... identical" || not_ok "rerun reference" "$(cat "$OUT_FILE")"
n=$(q "$DB" "select count(*) from runs")
expect_exit "rerun --experiment x: every arm's latest run" 0 "$VTLAB" rerun --experiment x --db "$DB"
[ "$(grep -c "identical (logits sha256" "$OUT_FILE")" = 2 ] && [ "$(q "$DB" "select count(*) from runs")" = $((n + 2)) ] \
  && ok "... two reruns, both identical" || not_ok "rerun --experiment" "$(cat "$OUT_FILE")"
# the stored spec is the source of truth: the experiment file edited or gone
mv "$W/p/experiments/x.json" "$W/p/experiments/x.json.away"
expect_exit "rerun with the experiment file gone (the stored spec; its dataset file still there)" 0 \
  "$VTLAB" rerun "$ARM" --db "$DB"
mv "$W/p/experiments/x.json.away" "$W/p/experiments/x.json"
expect_exit "rerun --engine vtlab engine: the same model through the engine protocol" 0 \
  "$VTLAB" rerun "$ARM" --db "$DB" --engine "vtlab engine"
[ "$(q "$DB" "select backend from runs where rerun_of = $ARM order by id desc limit 1")" = engine ] \
  && ok "... the rerun went through the engine" || not_ok "rerun --engine" "$(cat "$OUT_FILE")"
expect_exit "rerun of a run that does not exist: exit 2" 2 "$VTLAB" rerun 999 --db "$DB"
expect_exit "rerun without a RUN: exit 2" 2 "$VTLAB" rerun --db "$DB"
expect_exit "rerun --engine '': exit 2" 2 "$VTLAB" rerun "$ARM" --db "$DB" --engine " "
# a checkpoint that is gone: exit 2 naming the hash and the path, nothing written
mkdir -p "$W/q/experiments"
"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 4 --out "$W/q/experiments/ckpt" >/dev/null
cat > "$W/q/experiments/c.json" <<'JSON'
{"id": "c", "model": "ckpt", "dataset": {"generate": {"n_sequences": 3, "length": 6, "seed": 1}},
 "reference": "f32", "arms": [{"name": "f32"}, {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": 1}}]}
JSON
expect_exit "a checkpoint dir next to the experiment" 0 "$VTLAB" run "$W/q/experiments/c.json" --db "$W/c.db"
CR=$(q "$W/c.db" "select id from runs where arm = 'bf16'"); MS=$(q "$W/c.db" "select model_sha256 from runs where id = $CR")
rm -rf "$W/q/experiments/ckpt"
n=$(q "$W/c.db" "select count(*) from runs")
expect_exit "rerun with its checkpoint gone: exit 2" 2 "$VTLAB" rerun "$CR" --db "$W/c.db"
stderr_has "... naming the model hash" "$MS"
stderr_has "... and the path" "q/experiments/ckpt"
[ "$(q "$W/c.db" "select count(*) from runs")" = "$n" ] && ok "... nothing written" || not_ok "rerun gone wrote" "$(q "$W/c.db" "select count(*) from runs")"

# a synthetic model whose config changed since: another model hash, exit 2 (both
# hashes named); --force reruns on the new one and says the model changed
mkdir -p "$W/s/experiments"
cp model/configs/kimi-linear-tiny.json "$W/s/experiments/cfg.json"
sed 's|"model": "ckpt"|"model": {"synth": "cfg.json", "seed": 2}|; s|"id": "c"|"id": "s"|' "$W/q/experiments/c.json" > "$W/s/experiments/s.json"
expect_exit "a synthetic model from a config next to the experiment" 0 "$VTLAB" run "$W/s/experiments/s.json" --db "$W/s.db"
SR=$(q "$W/s.db" "select id from runs where arm = 'bf16'"); SM=$(q "$W/s.db" "select model_sha256 from runs where id = $SR")
sed -i 's/"rms_norm_eps": 1e-05/"rms_norm_eps": 0.01/' "$W/s/experiments/cfg.json"
rm -rf "$VTLAB_CACHE/models"
expect_exit "rerun after its config changed (not in the cache): exit 2" 2 "$VTLAB" rerun "$SR" --db "$W/s.db"
stderr_has "... naming the run's model hash" "$SM"
stderr_has "... and the config" "cfg.json"
expect_exit "rerun --force: on the config as it is now" 0 "$VTLAB" rerun "$SR" --db "$W/s.db" --force
grep -q "^  differs: logits sha256 [0-9a-f]\{64\} -> [0-9a-f]\{64\}$" "$OUT_FILE" && grep -q "^  identity: model$" "$OUT_FILE" \
  && grep -q "^  McNemar  against reference run" "$OUT_FILE" \
  && ok "... the deltas: both hashes, the identity part that changed (model), McNemar" || not_ok "rerun deltas" "$(cat "$OUT_FILE")"

# ---- tags, notes, filters
expect_exit "tag RUN k=v k=v" 0 "$VTLAB" tag "$ARM" reviewed=yes owner=ana --db "$DB"
expect_exit "tag again replaces a key's value" 0 "$VTLAB" tag "$ARM" owner=bo --db "$DB"
expect_exit "note RUN TEXT" 0 "$VTLAB" note "$ARM" "checked by hand: fine" --db "$DB"
expect_exit "a tag without '=': exit 2" 2 "$VTLAB" tag "$ARM" reviewed --db "$DB"
expect_exit "a tag key with a blank: exit 2" 2 "$VTLAB" tag "$ARM" "a b=1" --db "$DB"
expect_exit "tags of a run that does not exist: exit 2" 2 "$VTLAB" tag 999 a=1 --db "$DB"
expect_exit "an empty note: exit 2" 2 "$VTLAB" note "$ARM" "" --db "$DB"
expect_exit "tag on a database that does not exist: exit 2" 2 "$VTLAB" tag 1 a=1 --db "$W/none.db"
[ ! -e "$W/none.db" ] && ok "... none created" || not_ok "tag created a db" ""
[ "$(q "$DB" "select group_concat(key || '=' || value, ',') from (select * from run_tags order by key)")" = "owner=bo,reviewed=yes" ] \
  && ok "tags stored: owner replaced, one value per key" || not_ok "tags" "$(q "$DB" "select * from run_tags")"
expect_exit "show" 0 "$VTLAB" show "$ARM" --db "$DB"
grep -q "^  reviewed  *yes$" "$OUT_FILE" && grep -q "checked by hand: fine" "$OUT_FILE" && grep -q "^  experiment_file .*x.json" "$OUT_FILE" \
  && ok "... tags, notes and the experiment file" || not_ok "show" "$(cat "$OUT_FILE")"
expect_exit "show --json" 0 "$VTLAB" show "$ARM" --db "$DB" --json
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [t["key"] for t in d["tags"]] == ["owner", "reviewed"] and d["notes"][0]["text"] == "checked by hand: fine", d' "$OUT_FILE" \
  && ok "... tags and notes in --json" || not_ok "show --json" "$(head -c 300 "$OUT_FILE")"
runs_ids() { "$VTLAB" runs --db "$DB" "$@" 2>"$ERR" | awk 'NR > 1 && $1 ~ /^[0-9]+$/ {print $1}' | sort -un | tr '\n' ' '; }
[ "$(runs_ids --tag reviewed=yes)" = "$ARM " ] && ok "runs --tag" || not_ok "runs --tag" "$(runs_ids --tag reviewed=yes)"
[ "$(runs_ids --tag reviewed=no)" = "" ] && ok "runs --tag with another value: none" || not_ok "runs --tag no" ""
# the text listing shows a tagged run's tags on the line below its row, in key order
"$VTLAB" runs --db "$DB" >"$OUT_FILE" 2>"$ERR"
awk -v id="$ARM" '$1 == id {getline; print; exit}' "$OUT_FILE" | grep -qx "      tags: owner=bo, reviewed=yes" \
  && [ "$(grep -c "^      tags:" "$OUT_FILE")" = 1 ] && ok "runs: the tagged run's tags on the line below it, and no other tags line" \
  || not_ok "runs tags line" "$(head -c 600 "$OUT_FILE")"
[ "$(runs_ids --arm f32)" = "$(q "$DB" "select id from runs where arm = 'f32' order by id" | tr '\n' ' ')" ] && ok "runs --arm" || not_ok "runs --arm" "$(runs_ids --arm f32)"
[ "$(runs_ids --knob VT_KIMI_BF16_STREAM=1)" = "$(q "$DB" "select id from runs where arm = 'bf16' order by id" | tr '\n' ' ')" ] \
  && ok "runs --knob NAME=VALUE" || not_ok "runs --knob" "$(runs_ids --knob VT_KIMI_BF16_STREAM=1)"
[ "$(runs_ids --engine vtlab-builtin)" = "$(q "$DB" "select id from runs where backend = 'engine' order by id" | tr '\n' ' ')" ] \
  && [ -n "$(runs_ids --engine builtin)" ] && ok "runs --engine NAME and builtin" || not_ok "runs --engine" "$(runs_ids --engine vtlab-builtin)"
[ -n "$(runs_ids --since 2000-01-01)" ] && [ -z "$(runs_ids --since 2999-01-01T00:00:00Z)" ] && ok "runs --since DATE" || not_ok "runs --since" ""
[ "$(runs_ids --status FINISHED --experiment x --arm bf16 --tag owner=bo)" = "$ARM " ] && ok "runs: the filters together" || not_ok "runs all" ""
[ "$(runs_ids --tag owner=bo --tag reviewed=yes)" = "$ARM " ] && [ "$(runs_ids --tag reviewed=no --tag owner=bo)" = "" ] \
  && [ "$(runs_ids --tag=reviewed=yes --tag=owner=bo)" = "$ARM " ] && ok "runs --tag twice: both must hold" \
  || not_ok "runs --tag twice" "$(runs_ids --tag owner=bo --tag reviewed=no)"
[ "$(runs_ids --knob VT_KIMI_BF16_STREAM=1 --tag reviewed=yes)" = "$ARM " ] \
  && [ "$(runs_ids --knob VT_KIMI_BF16_STREAM=1 --knob VT_KIMI_BF16_STREAM=0)" = "" ] \
  && ok "runs --knob with --tag, and --knob twice: every one must hold" || not_ok "runs --knob twice" ""
# a value option given twice: refused, not the first value silently dropped
expect_exit "runs --arm twice: exit 2" 2 "$VTLAB" runs --db "$DB" --arm f32 --arm bf16
grep -q -- "--arm is given twice" "$ERR" && ok "... naming the option" || not_ok "twice" "$(cat "$ERR")"
expect_exit "runs --db twice: exit 2" 2 "$VTLAB" runs --db "$DB" --db="$DB"
expect_exit "runs --tag without =: exit 2" 2 "$VTLAB" runs --db "$DB" --tag owner=bo --tag reviewed
expect_exit "runs --since with a bad date: exit 2" 2 "$VTLAB" runs --db "$DB" --since yesterday
expect_exit "runs --status with a bad status: exit 2" 2 "$VTLAB" runs --db "$DB" --status DONE
expect_exit "runs --json --tag" 0 "$VTLAB" runs --db "$DB" --json --tag reviewed=yes
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d) == 1 and d[0]["tags"] == {"owner": "bo", "reviewed": "yes"}, d' "$OUT_FILE" \
  && ok "... with the tags as an object" || not_ok "runs --json" "$(head -c 300 "$OUT_FILE")"
[ "$(q "$DB" "select tags || '|' || notes || '|' || (rerun_of is null) from run_summary where run_id = $ARM")" = \
  '{"owner":"bo","reviewed":"yes"}|["checked by hand: fine"]|1' ] && [ "$(q "$DB" "select count(*) from latest_verdicts where tags is not null")" = 0 ] \
  && ok "views: run_summary has tags, notes and rerun_of; latest_verdicts has tags" || not_ok "views" "$(q "$DB" "select run_id, tags, notes, rerun_of from run_summary")"

LATEST=$(q "$DB" "select max(id) from runs where arm = 'bf16' and status = 'FINISHED'")
"$VTLAB" tag "$LATEST" shown=yes --db "$DB" >/dev/null && "$VTLAB" note "$LATEST" "a <b> & note" --db "$DB" >/dev/null
expect_exit "report" 0 "$VTLAB" report --db "$DB" --out "$W/report" --no-plots
grep -q "tags: shown=yes<br>notes: a &lt;b&gt; &amp; note" "$W/report/index.html" && grep -q "(tags: shown=yes)" "$W/report/summary.md" \
  && ok "... the arm's run with its tags and notes (HTML escaped), in the page and the summary" \
  || not_ok "report tags" "$(grep -o "tags:[^|]*" "$W/report/summary.md" | head -3)"

# ---- run --limit N: PARTIAL, never the arm's finished run
n=$(q "$DB" "select count(*) from runs")
expect_exit "run --limit 2" 0 "$VTLAB" run "$W/p/experiments/x.json" --db "$DB" --limit 2
[ "$(q "$DB" "select group_concat(status || ':' || n_sequences) from runs where id > $n")" = "PARTIAL:2,PARTIAL:2" ] \
  && ok "... two PARTIAL runs of 2 sequences (reference and arm)" || not_ok "limit" "$(q "$DB" "select id, arm, status, n_sequences from runs where id > $n")"
P=$(q "$DB" "select id from runs where id > $n and arm = 'bf16'")
[ "$(q "$DB" "select run_id from latest_verdicts where arm = 'bf16'")" != "$P" ] && ok "... not the arm's latest verdict" || not_ok "latest_verdicts" ""
expect_exit "claim of a PARTIAL run: exit 2" 2 "$VTLAB" claim "$P" --id partial --specs "$W/p/specs" --db "$DB"
m=$(q "$DB" "select count(*) from runs")
expect_exit "run without --limit after it" 0 "$VTLAB" run "$W/p/experiments/x.json" --db "$DB"
[ "$(q "$DB" "select count(*) from runs")" = "$m" ] && ok "... skips the FINISHED runs (the PARTIAL ones do not count)" || not_ok "after limit" "$(cat "$OUT_FILE")"
expect_exit "rerun of a PARTIAL run" 0 "$VTLAB" rerun "$P" --db "$DB"
[ "$(q "$DB" "select status || ':' || n_sequences from runs where rerun_of = $P")" = "PARTIAL:2" ] && grep -q identical "$OUT_FILE" \
  && ok "... PARTIAL over the same 2 sequences, identical" || not_ok "rerun partial" "$(cat "$OUT_FILE")"
expect_exit "--limit 0: exit 2" 2 "$VTLAB" run "$W/p/experiments/x.json" --db "$DB" --limit 0
finish
