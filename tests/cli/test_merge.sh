#!/usr/bin/env bash
# test_merge.sh — sequence shards and their merge (docs/slurm.md), without Slurm.
#
# A 12-sequence cut of experiments/bf16-stream.json (4 arms, score last,
# divergence over 5 sequences, so shard boundaries cut the captured ones) is
# run whole into local.db and as 3 shards, one database per shard; the merge
# must equal the whole run field by field (tests/slurm/same_results.py: k/n,
# intervals, verdicts, KL, per-layer divergence, logits hashes, top-k,
# probes, pair tests). Then: merging twice changes nothing; a shard of
# another code version is refused and nothing is written; incomplete arms
# are refused unless --partial; SIGKILL at random points of a merge leaves
# results.db as before or fully merged; bad input exits 2; submit --dry-run,
# and submit/status/--resume through a stand-in sbatch.
# Time: about 15 s on 2 cores.
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
PY=/usr/bin/python3
W=$(mktemp -d /tmp/vtlab-merge.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

$PY - "$W/mini.json" <<'PY'
import json, sys
e = json.load(open("experiments/bf16-stream.json"))
e["id"] = "bf16-mini"; e["dataset"]["generate"]["n_sequences"] = 12; e["divergence"]["sequences"] = 5
e["slurm"] = {"partition": "gpu", "time": "00:10:00", "gpus_per_task": 1}
json.dump(e, open(sys.argv[1], "w"), indent=1)
PY
M=$W/mini.json
expect_exit "whole run" 0 "$VTLAB" run "$M" --db "$W/local.db"
for i in 0 1 2; do
  expect_exit "shard $i/3 (every arm)" 0 "$VTLAB" run "$M" --shard $i/3 --db "$W/s$i.db"
done
expect_exit "merge 3 shards" 0 "$VTLAB" merge "$W/s0.db" "$W/s1.db" "$W/s2.db" --into "$W/merged.db"
if $PY tests/slurm/same_results.py "$W/local.db" "$W/merged.db" > "$W/same" 2>&1; then ok "merged runs equal the whole runs ($(cat "$W/same"))"
else not_ok "merged runs equal the whole runs" "$(head -c 1500 "$W/same")"; fi
n_prov=$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM merged_shards').fetchone()[0])" "$W/merged.db")
[ "$n_prov" = 12 ] && ok "provenance: 12 merged_shards rows" || not_ok "provenance rows" "$n_prov"

# merging twice adds nothing: every table's rows are the same
dump() { $PY - "$1" <<'PY'
import hashlib, sqlite3, sys
db = sqlite3.connect(sys.argv[1]); h = hashlib.sha256()
for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"):
    for r in db.execute("SELECT * FROM %s ORDER BY 1, 2" % t if t != "meta" else "SELECT * FROM meta"):
        h.update(repr(r).encode())
print(h.hexdigest())
PY
}
before=$(dump "$W/merged.db")
expect_exit "merge the same shards again" 0 "$VTLAB" merge "$W/s2.db" "$W/s0.db" "$W/s1.db" --into "$W/merged.db"
grep -q "0 run(s) merged" "$W/out" && ok "second merge merges nothing" || not_ok "second merge merges nothing" "$(cat "$W/out")"
[ "$(dump "$W/merged.db")" = "$before" ] && ok "second merge changes no row" || not_ok "second merge changes no row" "dump differs"

# a shard of another code version is refused, nothing written
cp "$W/s1.db" "$W/other.db"
$PY -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute(\"UPDATE runs SET code_version = 'deadbeef|dirty=0|gcc|-O2'\"); d.commit()" "$W/other.db"
expect_exit "shard of another code version refused (exit 2)" 2 "$VTLAB" merge "$W/s0.db" "$W/other.db" "$W/s2.db" --into "$W/new.db"
stderr_has "the message names the field" "disagree on the code version"
stderr_has "the message names the database" "other.db"
[ ! -e "$W/new.db" ] && ok "refused merge wrote nothing" || not_ok "refused merge wrote nothing" "new.db exists"

# incomplete arms
expect_exit "incomplete arms refused (exit 2)" 2 "$VTLAB" merge "$W/s0.db" "$W/s1.db" --into "$W/part.db"
stderr_has "incomplete: names the missing shard" "(missing: 2)"
expect_exit "reference shard 2 alone" 0 "$VTLAB" run "$M" --arm f32 --shard 2/3 --db "$W/s2ref.db"
expect_exit "--partial merges the complete arms" 0 "$VTLAB" merge "$W/s0.db" "$W/s1.db" "$W/s2ref.db" --into "$W/part.db" --partial
grep -q "1 run(s) merged" "$W/out" && ok "--partial: only the complete reference merged" || not_ok "--partial" "$(cat "$W/out")"
expect_exit "the rest later" 0 "$VTLAB" merge "$W/s0.db" "$W/s1.db" "$W/s2.db" --into "$W/part.db"
if $PY tests/slurm/same_results.py "$W/local.db" "$W/part.db" > "$W/same" 2>&1; then ok "partial then complete merge equals the whole runs"
else not_ok "partial then complete merge equals the whole runs" "$(head -c 1500 "$W/same")"; fi

# SIGKILL at random points: results.db (holding another run) is as before or fully merged
$PY -c "
import json; e=json.load(open('$M')); e['id']='other-exp'; e['arms']=e['arms'][:1]; e['dataset']['generate']['n_sequences']=2
json.dump(e, open('$W/other.json','w'))"
"$VTLAB" run "$W/other.json" --db "$W/base.db" >/dev/null 2>&1
# the kill lands uniformly within the time one merge takes (measured here)
rm -f "$W/t.db"; cp "$W/base.db" "$W/t.db"; t0=$(date +%s%N)
"$VTLAB" merge "$W/s0.db" "$W/s1.db" "$W/s2.db" --into "$W/t.db" >/dev/null 2>&1
dur_us=$(( ($(date +%s%N) - t0) / 1000 )); [ $dur_us -lt 1000 ] && dur_us=1000
echo "# one merge (process included): $((dur_us / 1000)) ms"
kills=0; states=""; badk=0
for k in $(seq 1 20); do
  rm -f "$W/k.db" "$W/k.db-wal" "$W/k.db-shm"; cp "$W/base.db" "$W/k.db"
  "$VTLAB" merge "$W/s0.db" "$W/s1.db" "$W/s2.db" --into "$W/k.db" >/dev/null 2>&1 &
  pid=$!
  us=$(( (RANDOM * 32768 + RANDOM) % dur_us )); sleep "$((us / 1000000)).$(printf %06d $((us % 1000000)))"
  kill -9 $pid 2>/dev/null && kills=$((kills + 1))
  wait $pid 2>/dev/null
  st=$($PY -c "
import sqlite3,sys; d=sqlite3.connect(sys.argv[1])
ic=d.execute('PRAGMA integrity_check').fetchone()[0]
n=d.execute(\"SELECT count(*) FROM runs WHERE experiment='bf16-mini'\").fetchone()[0]
f=d.execute(\"SELECT count(*) FROM runs WHERE experiment='bf16-mini' AND status='FINISHED'\").fetchone()[0]
o=d.execute(\"SELECT count(*) FROM runs WHERE experiment='other-exp' AND status='FINISHED'\").fetchone()[0]
p=d.execute('SELECT count(*) FROM merged_shards').fetchone()[0] if d.execute(\"SELECT 1 FROM sqlite_master WHERE name='merged_shards'\").fetchone() else 0
print(ic, n, f, o, p)" "$W/k.db")
  case "$st" in "ok 0 0 1 0") states="${states}b" ;; "ok 4 4 1 12") states="${states}m" ;; *) badk=$((badk + 1)); echo "# kill $k: state $st" ;; esac
  "$VTLAB" merge "$W/s0.db" "$W/s1.db" "$W/s2.db" --into "$W/k.db" >/dev/null 2>&1 || badk=$((badk + 1))
  $PY tests/slurm/same_results.py "$W/local.db" "$W/k.db" bf16-mini >/dev/null 2>&1 || { badk=$((badk + 1)); echo "# kill $k: rerun differs"; }
done
[ $badk -eq 0 ] && ok "20 merges SIGKILLed at random points ($kills killed in flight): each left results.db as before or fully merged ($states: b before, m merged), and a rerun completed it" \
  || not_ok "merges under SIGKILL" "$badk inconsistent states ($states)"

# bad input: exit 2, nothing written
expect_exit "--shard 3/3 is usage (exit 2)" 2 "$VTLAB" run "$M" --shard 3/3 --db "$W/bad.db"
expect_exit "--shard 0/20 on 12 sequences (exit 2)" 2 "$VTLAB" run "$M" --shard 0/20 --db "$W/bad.db"
stderr_has "names the file and the count" "fewer than 20 shards"
[ ! -e "$W/bad.db" ] && ok "bad --shard wrote nothing" || not_ok "bad --shard wrote nothing" "bad.db exists"
expect_exit "merge without --into (exit 2)" 2 "$VTLAB" merge "$W/s0.db"
expect_exit "merge of a missing file (exit 2)" 2 "$VTLAB" merge "$W/nope.db" --into "$W/bad2.db"
$PY -c "import json; e=json.load(open('$M')); e['slurm']={'partiton':'x'}; json.dump(e, open('$W/bad.json','w'))"
expect_exit "unknown slurm field (exit 2)" 2 "$VTLAB" submit "$W/bad.json" --dry-run --results "$W/r0"
stderr_has "names slurm.partiton" "slurm.partiton"

# submit --dry-run: the script, nothing written
expect_exit "submit --dry-run" 0 "$VTLAB" submit "$M" --shards-per-arm 3 --results "$W/r0" --time 00:05:00 --merge-into "$W/sweep.db" --dry-run
grep -q "^#SBATCH --partition=gpu" "$W/out" && grep -q "^#SBATCH --time=00:05:00" "$W/out" && grep -q "^#SBATCH --gpus-per-task=1" "$W/out" \
  && ok "dry run: Slurm options from the experiment's slurm object, --time overrides" || not_ok "dry run options" "$(head -c 800 "$W/out")"
grep -q -- "--array=0-2 " "$W/out" && grep -q -- "--array=3-11 --dependency=afterok:REFJOB" "$W/out" \
  && ok "dry run: reference shards first, the 9 arm shards afterok" || not_ok "dry run arrays" "$(grep sbatch "$W/out")"
[ ! -e "$W/r0" ] && ok "dry run wrote nothing" || not_ok "dry run wrote nothing" "r0 exists"

# submit / status / --resume through a stand-in sbatch (records, runs nothing)
mkdir -p "$W/bin"
cat > "$W/bin/sbatch" <<SH
#!/bin/bash
n=\$(( \$(cat "$W/bin/n" 2>/dev/null || echo 100) + 1 )); echo \$n > "$W/bin/n"
echo "\$*" >> "$W/bin/calls"; echo "\$n"
SH
chmod +x "$W/bin/sbatch"
expect_exit "submit (stand-in sbatch)" 0 env PATH="$W/bin:$PATH" "$VTLAB" submit "$M" --shards-per-arm 3 --results "$W/r1"
grep -q -- "--array=3-11 --dependency=afterok:101 --kill-on-invalid-dep=yes" "$W/bin/calls" && ok "the arm array depends on the reference array" \
  || not_ok "dependency" "$(cat "$W/bin/calls")"
# run the tasks of lines 1-3 (reference) and 4-9 by hand, as Slurm would
for idx in 0 1 2 3 4 5 6 7 8; do
  line=$(sed -n "$((idx + 1))p" "$W/r1/bf16-mini/tasks.tsv"); IFS=$'\t' read -r i ex arm shard db kind <<<"$line"
  "$VTLAB" run "$ex" --arm "$arm" --shard "$shard" --db "$db" >/dev/null 2>&1
done
expect_exit "status: incomplete exits 1" 1 "$VTLAB" status --results "$W/r1"
grep -q "9 done, 0 running, 0 pending, 0 failed, 3 missing" "$W/out" && ok "status counts 9 done, 3 missing" || not_ok "status counts" "$(cat "$W/out")"
: > "$W/bin/calls"
expect_exit "submit --resume" 0 env PATH="$W/bin:$PATH" "$VTLAB" submit "$M" --shards-per-arm 3 --results "$W/r1" --resume
[ "$(wc -l < "$W/bin/calls")" = 1 ] && grep -q -- "--array=9-11 " "$W/bin/calls" && ok "--resume submits only the 3 missing tasks" \
  || not_ok "--resume" "$(cat "$W/bin/calls")"
for idx in 9 10 11; do
  line=$(sed -n "$((idx + 1))p" "$W/r1/bf16-mini/tasks.tsv"); IFS=$'\t' read -r i ex arm shard db kind <<<"$line"
  "$VTLAB" run "$ex" --arm "$arm" --shard "$shard" --db "$db" >/dev/null 2>&1
done
expect_exit "status: complete exits 0" 0 "$VTLAB" status --results "$W/r1"
expect_exit "merge the task databases" 0 "$VTLAB" merge "$W"/r1/*/*.db --into "$W/r1.db"
if $PY tests/slurm/same_results.py "$W/local.db" "$W/r1.db" > "$W/same" 2>&1; then ok "task databases merge to the whole runs"
else not_ok "task databases merge to the whole runs" "$(head -c 1500 "$W/same")"; fi
finish
