#!/usr/bin/env bash
# test_harness.sh — end-to-end tests of the lab commands (run, sweep, runs,
# show, compare, export) on the synthetic tiny model.
#
# Usage (from the repository root): bash tests/cli/test_harness.sh ./vtlab
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed";
# exits 1 when any case failed. Databases are inspected with python3's
# sqlite3 module (the sqlite3 shell is not assumed to be installed).
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
PY=/usr/bin/python3
# the synthetic-model cache this test looks into (below): build/models/ unless set
export VTLAB_CACHE=${VTLAB_CACHE:-$PWD/build}
T=$(mktemp -d /tmp/vtlab-harness-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
PASS=0
FAIL=0
ok() { echo "ok - $1"; PASS=$((PASS + 1)); }
notok() { echo "not ok - $1"; FAIL=$((FAIL + 1)); [ -n "${2:-}" ] && echo "$2" | sed 's/^/#   /' | head -20; }
check() { if eval "$2"; then ok "$1"; else notok "$1" "${3:-}"; fi; }

# q DB SQL -> the first column of every row, one per line
q() { "$PY" - "$1" "$2" <<'PYEOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for row in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in row))
PYEOF
}

TINY=model/configs/kimi-linear-tiny.json
# A small experiment: 3 arms, one of them expected to fail its assertions.
mk_exp() { # file id n_seq len [extra arms json]
    cat > "$1" <<JSON
{
  "id": "$2",
  "model": {"synth": "$TINY", "seed": 1},
  "dataset": {"generate": {"n_sequences": $3, "length": $4, "seed": 5}},
  "score": "all",
  "top_k": 4,
  "probe": "audit",
  "reference": "f32",
  "arms": [
    {"name": "f32", "expect": {"residual.stream": "f32"}},
    {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": 1}, "expect": {"residual.stream": "bf16", "moe.scatter": "f32"}},
    {"name": "replay", "knobs": {"VT_KIMI_BF16_STREAM": 1, "VT_FAULT": "moe_scatter_row_bytes_from_stream"},
     "expect_assertions": "fail"}${5:-}
  ],
  "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="},
  "divergence": {"sequences": 2, "tolerance": 0.02}
}
JSON
}

mkdir -p "$T/exp" "$T/bad"
mk_exp "$T/exp/small.json" small 6 8

# ------------------------------------------------------------ bad input
bad_case() { # name file needle
    local db="$T/bad.db"
    rm -f "$db"
    "$VTLAB" run "$2" --db "$db" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$3" "$T/err" && [ ! -e "$db" ]; then ok "bad input: $1 (exit 2, named, nothing written)"
    else notok "bad input: $1" "rc=$rc db_exists=$([ -e "$db" ] && echo yes || echo no) want: $3
$(cat "$T/err")"; fi
}
printf '{"id": "x", ' > "$T/bad/syntax.json"
bad_case "invalid JSON" "$T/bad/syntax.json" "syntax.json: not valid JSON at line"
sed 's/"top_k": 4/"top_kk": 4/' "$T/exp/small.json" > "$T/bad/field.json"
bad_case "unknown field" "$T/bad/field.json" "field.json: top_kk: unknown field"
sed 's/"VT_KIMI_BF16_STREAM": 1}, "expect": {"residual.stream": "bf16"/"VT_KIMI_BF16_STRAEM": 1}, "expect": {"residual.stream": "bf16"/' "$T/exp/small.json" > "$T/bad/knob.json"
bad_case "unknown knob (did-you-mean)" "$T/bad/knob.json" "knob.json: arms[1].knobs.VT_KIMI_BF16_STRAEM"
grep -qi "did you mean" "$T/err" && ok "unknown knob message suggests the right name" || notok "unknown knob did-you-mean" "$(cat "$T/err")"
sed 's/"VT_KIMI_BF16_STREAM": 1}, "expect"/"VT_KIMI_BF16_STREAM": "maybe"}, "expect"/' "$T/exp/small.json" > "$T/bad/value.json"
bad_case "bad knob value" "$T/bad/value.json" "value.json: arms[1].knobs.VT_KIMI_BF16_STREAM"
sed 's/"generate": {"n_sequences": 6, "length": 8, "seed": 5}/"inline": [[5, 17, 3], [9, 99999]]/' "$T/exp/small.json" > "$T/bad/vocab.json"
bad_case "token beyond vocab" "$T/bad/vocab.json" "vocab.json: dataset.inline[1][1]: token 99999 is not below the model's vocab_size"
sed 's/"reference": "f32"/"reference": "f16"/' "$T/exp/small.json" > "$T/bad/ref.json"
bad_case "reference names no arm" "$T/bad/ref.json" "ref.json: reference: \"f16\" names no arm"
sed "s|$TINY|model/configs/nope.json|" "$T/exp/small.json" > "$T/bad/model.json"
bad_case "missing synth config" "$T/bad/model.json" "model.json: model.synth"
bad_case "missing experiment file" "$T/bad/absent.json" "absent.json: cannot open"
"$VTLAB" run >"$T/out" 2>"$T/err"; rc=$?
check "usage: run without a file is exit 2" "[ $rc -eq 2 ]" "rc=$rc"
"$VTLAB" run "$T/exp/small.json" --arm nosuch --db "$T/bad.db" >"$T/out" 2>"$T/err"; rc=$?
check "usage: --arm naming no arm is exit 2, nothing written" "[ $rc -eq 2 ] && [ ! -e $T/bad.db ] && grep -q 'no arm of that name' $T/err" "$(cat $T/err)"
"$VTLAB" show 1 --db "$T/none.db" >"$T/out" 2>"$T/err"; rc=$?
check "show on a missing database is exit 2" "[ $rc -eq 2 ] && [ ! -e $T/none.db ]" "rc=$rc"

# ------------------------------------------------------------ a run
DB="$T/r.db"
"$VTLAB" run "$T/exp/small.json" --db "$DB" >"$T/out" 2>"$T/err"; rc=$?
check "run: exit 0 (the replay arm fails its assertions as it declares)" "[ $rc -eq 0 ]" "rc=$rc $(cat $T/err)"
check "run: three FINISHED runs" "[ \"$(q $DB "select count(*) from runs where status='FINISHED'")\" = 3 ]"
check "run: knobs recorded for every run" "[ \"$(q $DB "select count(distinct run_id) from run_knobs")\" = 3 ]"
check "run: probes recorded with invariant results" "[ \"$(q $DB "select count(*) > 0 from probes where ok = 1")\" = 1 ]"
check "run: the replay arm's moe.scatter invariant is violated" \
    "[ \"$(q $DB "select count(*) > 0 from probes p join runs r on r.id=p.run_id where r.arm='replay' and p.site='moe.scatter' and p.ok=0")\" = 1 ]"
check "run: replay arm assertions_ok = 0, bf16 arm = 1" \
    "[ \"$(q $DB "select group_concat(arm||'='||assertions_ok) from (select arm, assertions_ok from runs order by arm)")\" = 'bf16=1,f32=1,replay=0' ]"
check "run: replay arm's first divergent site is an MoE layer's FFN (layer >= 1)" \
    "[ \"$(q $DB "select c.first_div_layer >= 1 and c.first_div_site = 1 from comparisons c join runs r on r.id=c.run_id where r.arm='replay'")\" = 1 ]"
check "run: comparisons with Wilson interval for both arms" \
    "[ \"$(q $DB "select count(*) from comparisons where top1_n = 48 and top1_lo <= 1.0*top1_k/top1_n and top1_hi >= 1.0*top1_k/top1_n")\" = 2 ]"
check "run: per-layer divergence rows (8 layers x 2 sites per arm)" "[ \"$(q $DB "select count(*) from layer_divergence")\" = 32 ]"
check "run: verdicts stored with evidence" "[ \"$(q $DB "select count(*) from verdicts where n = 48 and verdict in ('SUPPORTED','REFUTED','INCONCLUSIVE')")\" = 2 ]"
check "run: top-k per position (6 sequences x 8 positions x k=4)" "[ \"$(q $DB "select sum(n_pos), min(k), sum(length(ids)) from logits_topk where run_id=1")\" = '48|4|768' ]"
check "run: pair test between the two non-reference arms" "[ \"$(q $DB "select count(*) from pair_tests")\" = 1 ]"
check "run: perplexity metric" "[ \"$(q $DB "select count(*) from metrics where name='perplexity' and value > 1")\" = 3 ]"
check "run: provenance (commit, host, backend, device)" "[ \"$(q $DB "select count(*) from runs where git_commit <> '' and host <> '' and backend = 'cpu' and device like 'cpu%'")\" = 3 ]"

# ------------------------------------------------------------ idempotency
before=$(q $DB "select count(*) from runs")
"$VTLAB" run "$T/exp/small.json" --db "$DB" >"$T/out" 2>"$T/err"; rc=$?
check "idempotent: a second run exits 0 and adds no runs" "[ $rc -eq 0 ] && [ \"$(q $DB "select count(*) from runs")\" = $before ] && grep -q 'skipped' $T/out" "$(cat $T/out $T/err)"
"$VTLAB" run "$T/exp/small.json" --db "$DB" --force --arm bf16 >"$T/out" 2>"$T/err"; rc=$?
check "--force --arm bf16 reruns the reference and that arm only" "[ $rc -eq 0 ] && [ \"$(q $DB "select count(*) from runs")\" = $((before + 2)) ]" "$(cat $T/err)"
check "determinism: the rerun's logits hash equals the first run's" \
    "[ \"$(q $DB "select count(distinct logits_sha256) from runs where arm in ('f32')")\" = 1 ] && [ \"$(q $DB "select count(distinct logits_sha256) from runs where arm='bf16'")\" = 1 ]"
# An arm that is not the reference, with the reference FINISHED: it is
# compared against recomputed reference logits, whose hash must match.
"$VTLAB" run "$T/exp/small.json" --db "$DB" --force --arm replay >/dev/null 2>&1
rm -f "$T/r2.db"
cp "$T/exp/small.json" "$T/exp2.json"
"$VTLAB" run "$T/exp2.json" --db "$T/r2.db" --arm f32 >/dev/null 2>&1
"$VTLAB" run "$T/exp2.json" --db "$T/r2.db" --arm bf16 >"$T/out" 2>"$T/err"; rc=$?
check "a later arm compares against the recomputed reference (hash matches)" \
    "[ $rc -eq 0 ] && [ \"$(q $T/r2.db "select reference_recomputed||reference_hash_match from comparisons")\" = 11 ]" "$(cat $T/err)"

# The sequence's logits hash is the sha256 of the raw f32 logits, the bytes
# `vtlab logits` writes for the same tokens; the run's is the sha256 of its
# sequences' hashes, one hex line each (schema v8, docs/slurm.md).
cat > "$T/one.json" <<JSON
{"id": "one", "model": {"synth": "$TINY", "seed": 1}, "dataset": {"inline": [[5, 17, 3, 99]]},
 "reference": "f32", "arms": [{"name": "f32"}]}
JSON
"$VTLAB" run "$T/one.json" --db "$T/one.db" >/dev/null 2>&1
# The synthesized model this run used: the cache directory whose recorded
# hash is the run's model_sha256 (other tests may have cached other models).
msha=$(q $T/one.db 'select model_sha256 from runs')
mdir=$(for d in "$VTLAB_CACHE"/models/*/; do [ -f "$d/model.sha256" ] && [ "$(tail -n 1 "$d/model.sha256")" = "$msha" ] && echo "$d"; done | head -1)
"$VTLAB" logits --model "$mdir" --tokens 5,17,3,99 --out "$T/one.bin" >/dev/null 2>&1
check "sequence logits hash = sha256 of the raw logits vtlab logits writes" \
    "[ \"$(q $T/one.db 'select logits_sha256 from run_sequences')\" = \"$(sha256sum $T/one.bin | cut -c1-64)\" ]"
check "run logits hash = sha256 of its sequences' hashes, one line each" \
    "[ \"$(q $T/one.db 'select logits_sha256 from runs')\" = \"$(sha256sum $T/one.bin | cut -c1-64 | sha256sum | cut -c1-64)\" ]"

# ------------------------------------------------------------ expectations
mk_exp "$T/exp/expect.json" expect 2 4 ', {"name": "ignored", "knobs": {"VT_TEST_IGNORED_KNOB": 1}, "expect": {"residual.stream": "bf16"}}'
"$VTLAB" run "$T/exp/expect.json" --db "$T/e.db" --arm ignored >"$T/out" 2>"$T/err"; rc=$?
check "expect: an arm whose knob does not take effect fails (exit 1)" "[ $rc -eq 1 ]" "rc=$rc"
check "expect: reason 'knob did not take effect: arm expects residual.stream bf16, probe saw f32'" \
    "q $T/e.db \"select assertion_reason from runs where arm='ignored'\" | grep -q 'knob did not take effect: arm expects residual.stream bf16, probe saw f32 (layer 0)'" \
    "$(q $T/e.db "select assertion_reason from runs")"

# ------------------------------------------------------------ read commands
"$VTLAB" runs --db "$DB" >"$T/out" 2>&1; rc=$?
check "runs lists every run" "[ $rc -eq 0 ] && [ \$(grep -c FINISHED $T/out) -ge 3 ]" "$(cat $T/out)"
"$VTLAB" show 3 --db "$DB" >"$T/out" 2>&1; rc=$?
check "show prints probes, divergence and verdict" "[ $rc -eq 0 ] && grep -q VIOLATED $T/out && grep -q 'first divergence' $T/out && grep -q 'verdict:' $T/out" "$(cat $T/out)"
"$VTLAB" compare 2 3 --db "$DB" >"$T/out" 2>&1; rc=$?
check "compare prints agreement and McNemar" "[ $rc -eq 0 ] && grep -q 'McNemar exact' $T/out && grep -q 'VT_FAULT' $T/out" "$(cat $T/out)"
"$VTLAB" export 3 --db "$DB" --format json --out "$T/x.json" >/dev/null 2>&1; rc=$?
check "export json is valid JSON with the run's records" \
    "[ $rc -eq 0 ] && $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[\"run\"][\"id\"]==3 and d[\"probes\"] and d[\"topk\"] and d[\"comparisons\"]' $T/x.json" "$(head -c 300 $T/x.json)"
"$VTLAB" export 3 --db "$DB" --format csv >"$T/x.csv" 2>&1; rc=$?
check "export csv: header and one row per (position, rank)" \
    "[ $rc -eq 0 ] && head -1 $T/x.csv | grep -q '^run_id,seq,pos,rank,token_id,logprob$' && [ \$(wc -l < $T/x.csv) -eq $((48 * 4 + 1)) ]"
"$VTLAB" show 999 --db "$DB" >"$T/out" 2>"$T/err"; rc=$?
check "show of an unknown run is exit 2" "[ $rc -eq 2 ] && grep -q 'no such run' $T/err"
"$VTLAB" export 3 --db "$DB" --format xml >"$T/out" 2>"$T/err"; rc=$?
check "export --format xml is exit 2" "[ $rc -eq 2 ]"

# ------------------------------------------------------------ migration
"$PY" - "$T/old.db" <<'PYEOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.executescript("""
CREATE TABLE runs (id INTEGER PRIMARY KEY, experiment TEXT NOT NULL, arm TEXT NOT NULL, status TEXT NOT NULL,
  knob_hash TEXT NOT NULL, model_sha256 TEXT NOT NULL, dataset_sha256 TEXT NOT NULL, code_version TEXT NOT NULL,
  started_at TEXT NOT NULL, finished_at TEXT);
CREATE TABLE run_knobs (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, name TEXT NOT NULL,
  value TEXT NOT NULL, PRIMARY KEY (run_id, name));
CREATE TABLE metrics (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, name TEXT NOT NULL,
  value REAL, PRIMARY KEY (run_id, name));
INSERT INTO runs VALUES (1, 'old', 'f32', 'done', 'k', 'm', 'd', 'c', 't0', 't1');
PRAGMA user_version = 1;
""")
c.commit()
PYEOF
"$VTLAB" runs --db "$T/old.db" >"$T/out" 2>"$T/err"; rc=$?
check "migration: a v1 database opens, is migrated to the current version (that of a fresh database), rows kept" \
    "[ $rc -eq 0 ] && [ \"$(q $T/old.db 'pragma user_version')\" = \"$(q $T/r.db 'pragma user_version')\" ] && [ \"$(q $T/old.db "select status from runs where id=1")\" = FINISHED ]" "$(cat $T/err)"

# ------------------------------------------------------------ kill -9 and resume
mkdir -p "$T/sweep"
# runs long enough (64 x 64 tokens) that the poll below sees one FINISHED and one
# RUNNING before the sweep ends: packed forwards made 16 x 24 finish between polls
mk_exp "$T/sweep/a.json" killa 64 64
mk_exp "$T/sweep/b.json" killb 64 64
KDB="$T/k.db"
"$VTLAB" sweep "$T/sweep" --db "$KDB" >"$T/kout" 2>&1 &
pid=$!
for i in $(seq 1 600); do
    [ -e "$KDB" ] && [ "$(q $KDB "select count(*) from runs where status='FINISHED'" 2>/dev/null)" = 1 ] \
        && [ "$(q $KDB "select count(*) from runs where status='RUNNING'" 2>/dev/null)" = 1 ] && break
    sleep 0.1
done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
check "kill -9: the sweep was killed with a run in flight" "[ \"$(q $KDB "select count(*) from runs where status='RUNNING'")\" = 1 ]" "$(q $KDB 'select id, arm, status from runs')"
check "kill -9: PRAGMA integrity_check is ok" "[ \"$(q $KDB 'pragma integrity_check')\" = ok ]"
check "kill -9: no result rows of the unfinished run" \
    "[ \"$(q $KDB "select count(*) from logits_topk t join runs r on r.id=t.run_id where r.status <> 'FINISHED'")\" = 0 ]"
"$VTLAB" sweep "$T/sweep" --db "$KDB" >"$T/out" 2>"$T/err"; rc=$?
check "resume: the rerun completes (exit 0)" "[ $rc -eq 0 ]" "$(cat $T/err)"
check "resume: the dead run is marked KILLED and redone" \
    "[ \"$(q $KDB "select count(*) from runs where status='KILLED' and error like '%died while running%'")\" = 1 ]"
check "resume: all 6 identities FINISHED exactly once, nothing RUNNING" \
    "[ \"$(q $KDB "select count(*), count(distinct experiment||arm) from runs where status='FINISHED'")\" = '6|6' ] && [ \"$(q $KDB "select count(*) from runs where status='RUNNING'")\" = 0 ]"

# ------------------------------------------------------------ concurrent sweeps
CDB="$T/c.db"
"$VTLAB" sweep "$T/sweep" --db "$CDB" >"$T/c1" 2>&1 &
p1=$!
"$VTLAB" sweep "$T/sweep" --db "$CDB" >"$T/c2" 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
check "concurrent sweeps: both exit 0" "[ $r1 -eq 0 ] && [ $r2 -eq 0 ]" "$(cat $T/c1 $T/c2)"
check "concurrent sweeps: every identity FINISHED exactly once, no rows lost" \
    "[ \"$(q $CDB "select count(*), count(distinct experiment||arm) from runs where status='FINISHED'")\" = '6|6' ] && [ \"$(q $CDB "select count(*) from runs")\" = 6 ]" \
    "$(q $CDB 'select id, experiment, arm, status from runs')"
check "concurrent sweeps: every non-reference run has its comparison and verdict" \
    "[ \"$(q $CDB "select count(*) from comparisons c join verdicts v on v.run_id = c.run_id")\" = 4 ]"
check "concurrent sweeps: integrity_check ok" "[ \"$(q $CDB 'pragma integrity_check')\" = ok ]"

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
