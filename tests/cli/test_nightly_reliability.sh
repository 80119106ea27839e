#!/usr/bin/env bash
# test_nightly_reliability.sh — issue 13, items 5 and 6, end to end on a tiny
# experiment (8 sequences x 16 tokens, two arms, two repeats):
#   - outputs: a nightly whose outputs cannot be written is recorded FAILED
#     (never PASSED), exits 1, and leaves no junit.xml from an earlier night
#     looking current;
#   - throughput: noise is not flagged (a short no-change campaign under a CPU
#     burner), a planted 20% slowdown is (VTLAB_TEST_PLANT_SLOWDOWN, a
#     test-only hook), a persistent regression says so, and `vtlab ack`
#     silences a known one until it changes.
#
# Usage (from the repository root): bash tests/cli/test_nightly_reliability.sh ./vtlab
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed".
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
PY=/usr/bin/python3
T=$(mktemp -d /tmp/vtlab-nightly-rel.XXXXXX)
BURN=""
trap '[ -n "$BURN" ] && kill $BURN 2>/dev/null; rm -rf "$T"' EXIT
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
# junit_nightly FILE -> "NIGHTLY ERRORS+FAILURES" of the file's <testsuites>
junit_nightly() { "$PY" - "$1" <<'PYEOF'
import re, sys, xml.dom.minidom as m
top = m.parse(sys.argv[1]).documentElement
n = re.search(r"nightly (\d+)", top.getAttribute("name"))
print(n.group(1) if n else "?", int(top.getAttribute("failures") or 0) + int(top.getAttribute("errors") or 0))
PYEOF
}

mkdir -p "$T/exp"
cat > "$T/exp/tiny.json" <<'JSON'
{
  "id": "tiny",
  "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
  "dataset": {"generate": {"n_sequences": 8, "length": 16, "seed": 5}},
  "score": "all",
  "top_k": 8,
  "reference": "f32",
  "arms": [
    {"name": "f32"},
    {"name": "cand", "knobs": {"VT_KIMI_BF16_STREAM": 1}}
  ],
  "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="},
  "repeats": 2
}
JSON

# ------------------------------------------------------------ item 5: outputs
DB="$T/o.db"; R="$T/rep"
NIGHTLY=("$VTLAB" nightly "$T/exp" --db "$DB" --out "$R" --specs specs --no-plots --perf-min-drop 0.95)
# The shipped ledger's claim is confounded until reopened: nightly 1 is
# CONFOUNDED (exit 1, one failure: the confound); acknowledged, the later
# nights pass (tests/cli/test_nightly_confounds.sh).
expect_exit "outputs: nightly 1 exits 1 (CONFOUNDED by the shipped claim)" 1 "${NIGHTLY[@]}"
check "outputs: nightly 1 wrote junit.xml for nightly 1" "[ \"\$(junit_nightly $R/junit.xml)\" = '1 1' ]"
"$VTLAB" ack bf16-stream-refuted-4of128/R1/moe-scatter-row-bytes-from-stream --reason "reopen pending" --db "$DB" >/dev/null

# The report cannot be written (a directory where index.html goes).
rm -f "$R/index.html"; mkdir -p "$R/index.html/x"
expect_exit "outputs: nightly 2, index.html unwritable, exits 1" 1 "${NIGHTLY[@]}"
stderr_has "outputs: ... the error names the path" "index.html"
check "outputs: ... nightly 2 is recorded FAILED, not PASSED" "[ \"\$(q $DB 'select status from nightlies where id = 2')\" = FAILED ]" \
  "$(q $DB 'select id, status, error from nightlies')"
check "outputs: ... its error says the outputs failed" "q $DB 'select error from nightlies where id = 2' | grep -q index.html"
check "outputs: ... no junit.xml of nightly 1 is left for CI (absent, or nightly 2's with an error)" \
  "[ ! -e $R/junit.xml ] || [ \"\$(junit_nightly $R/junit.xml)\" = '2 1' ]" "$(head -c 400 $R/junit.xml 2>/dev/null)"
check "outputs: ... no nightly.md of nightly 1 left either" "[ ! -e $R/nightly.md ] || ! grep -q 'nightly 1' $R/nightly.md"
check "outputs: ... a FAILED nightly is never a baseline" \
  "[ \"\$(q $DB 'select count(*) from nightlies where status in (\"PASSED\",\"CONFOUNDED\",\"REGRESSED\")')\" = 1 ]"
rm -rf "$R/index.html"

# junit.xml itself cannot be written (a directory in its place): found before the sweep.
rm -f "$R/junit.xml"; mkdir -p "$R/junit.xml/x"
expect_exit "outputs: nightly 3, junit.xml unwritable, exits 1" 1 "${NIGHTLY[@]}"
stderr_has "outputs: ... the error names junit.xml" "junit.xml"
check "outputs: ... nightly 3 recorded FAILED before running anything" \
  "[ \"\$(q $DB 'select status, n_runs from nightlies where id = 3')\" = 'FAILED|0' ]" "$(q $DB 'select id, status, n_runs, error from nightlies')"
rm -rf "$R/junit.xml"

# --out under a regular file.
touch "$T/plain"
expect_exit "outputs: --out under a regular file exits 1" 1 "$VTLAB" nightly "$T/exp" --db "$DB" --out "$T/plain/rep" --specs specs --no-plots
check "outputs: ... recorded FAILED" "[ \"\$(q $DB 'select status from nightlies order by id desc limit 1')\" = FAILED ]"

expect_exit "outputs: a nightly with writable outputs passes again" 0 "${NIGHTLY[@]}"
check "outputs: ... and its junit.xml is current" "[ \"\$(junit_nightly $R/junit.xml)\" = \"\$(q $DB 'select max(id) from nightlies') 0\" ]"

# SIGTERM while the charts are drawn (a gnuplot on PATH that waits before a
# chart's script, then runs the real one): the night is FAILED ("interrupted"),
# never PASSED, and it exits non-zero.
if GP=$(command -v gnuplot); then
  mkdir -p "$T/gpbin"
  cat > "$T/gpbin/gnuplot" <<GPEOF
#!/bin/sh
for a in "\$@"; do case "\$a" in src/*.gp) touch "$T/gp-started"; sleep 30;; esac; done
exec "$GP" "\$@"
GPEOF
  chmod +x "$T/gpbin/gnuplot"; rm -f "$T/gp-started"
  PATH="$T/gpbin:$PATH" "$VTLAB" nightly "$T/exp" --db "$DB" --out "$R" --specs specs --perf-min-drop 0.95 >"$OUT_FILE" 2>"$ERR" &
  vp=$!
  for i in $(seq 600); do [ -e "$T/gp-started" ] && break; kill -0 $vp 2>/dev/null || break; sleep 0.2; done
  kill -TERM $vp 2>/dev/null; wait $vp; rc=$?
  check "outputs: SIGTERM while the charts are drawn: a chart had started" "[ -e $T/gp-started ]"
  check "outputs: ... exits non-zero" "[ $rc -ne 0 ]" "exit $rc"
  check "outputs: ... the night is recorded FAILED, not PASSED" \
    "[ \"\$(q $DB 'select status from nightlies order by id desc limit 1')\" = FAILED ]" \
    "$(q $DB 'select id, status, error from nightlies order by id desc limit 1')"
  check "outputs: ... its error says it was interrupted" \
    "q $DB 'select error from nightlies order by id desc limit 1' | grep -q interrupted"
  expect_exit "outputs: ... and the next nightly passes again" 0 "${NIGHTLY[@]}"
else
  echo "# gnuplot absent: the SIGTERM-during-charts case is not checked"; ok "outputs: SIGTERM during charts (skipped: no gnuplot)"
fi

# ------------------------------------------------------------ item 6: throughput
# History: 4 nightlies with no change. Then a planted slowdown far beyond any
# noise of this machine (x1e-6: VTLAB_TEST_PLANT_SLOWDOWN is a test-only hook
# that scales tonight's measured tokens/s), so the logic is tested, not luck.
DB="$T/p.db"; R="$T/prep"
NIGHTLY=("$VTLAB" nightly "$T/exp" --db "$DB" --out "$R" --no-audit --no-plots)
for i in 1 2 3 4; do "${NIGHTLY[@]}" >"$OUT_FILE" 2>"$ERR" || echo "# history nightly $i: exit $? $(tail -1 $ERR)"; done
check "perf: 4 quiet nightlies flag no throughput regression" \
  "[ \"\$(q $DB 'select count(*) from nightly_findings where kind = \"performance\" and regression = 1')\" = 0 ]" \
  "$(q $DB 'select nightly_id, arm, message from nightly_findings where kind = "performance"')"
export VTLAB_TEST_PLANT_SLOWDOWN=0.999999
expect_exit "perf: nightly 5 (planted slowdown) exits 1" 1 "${NIGHTLY[@]}"
stderr_has "perf: ... the test hook says it is on" "TEST HOOK VTLAB_TEST_PLANT_SLOWDOWN"
check "perf: ... both arms flagged, each confirmed by a re-measurement" \
  "[ \"\$(q $DB 'select count(*) from nightly_findings where nightly_id = 5 and kind = \"performance\" and regression = 1 and message like \"%re-measured%confirmed%\"')\" = 2 ]" \
  "$(q $DB 'select arm, regression, message from nightly_findings where nightly_id = 5')"
check "perf: ... the re-measurement runs are kept apart (not test cases, not repeats)" \
  "[ \"\$(q $DB 'select count(*) > 0 from nightly_remeasure_runs where nightly_id = 5')\" = 1 ] && [ \"\$(q $DB 'select n_runs from nightlies where id = 5')\" = 4 ]"
expect_exit "perf: nightly 6 (still slow) exits 1" 1 "${NIGHTLY[@]}"
check "perf: ... shown as persistent since nightly 5, not new" \
  "[ \"\$(q $DB 'select count(*) from nightly_findings where nightly_id = 6 and kind = \"performance\" and regression = 1 and message like \"persistent since nightly 5%\"')\" = 2 ]" \
  "$(q $DB 'select arm, regression, message from nightly_findings where nightly_id = 6')"
check "perf: ... the Atom feed announces only the new ones (nightly 5)" \
  "grep -q 'nightly 5: tiny/cand: performance' $R/regressions.atom && ! grep -q 'nightly 6: ' $R/regressions.atom"
expect_exit "ack: no reason is exit 2" 2 "$VTLAB" ack tiny/cand/performance --db "$DB"
expect_exit "ack: an unknown finding is exit 2" 2 "$VTLAB" ack tiny/nope/performance --reason x --db "$DB"
stderr_has "ack: ... and names it" "tiny/nope/performance"
expect_exit "ack: a missing database is exit 2 (not created)" 2 "$VTLAB" ack tiny/cand/performance --reason x --db "$T/none.db"
check "ack: ... not created" "[ ! -e $T/none.db ]"
expect_exit "ack: tiny/cand/performance exits 0" 0 "$VTLAB" ack tiny/cand/performance --reason "known: slower kernel" --db "$DB"
expect_exit "ack: tiny/f32/performance exits 0" 0 "$VTLAB" ack tiny/f32/performance --reason "known: slower kernel" --db "$DB"
# On a copy of this history: tonight's sweep far below the acknowledged level
# (x1e-14 against x1e-6), its re-measurement (x1e-4) far above it, though still
# a drop from the baseline far beyond any noise. Passing the level is a new
# drop, and a drop counts only when the re-measurement confirms it. (Every
# planted level here is 100x or more from the threshold it tests, and a level
# that must pass another by 1e8: under CI's load the tiny model's no-change
# nights spread by up to 5x, which put the threshold at x0.007; an x1e-8 night
# was then 1/100 of the x1e-6 one, not past it.)
cp "$DB" "$T/p2.db"
expect_exit "perf: sweep below the acknowledged level, re-measurement not: exits 0" 0 \
  env VTLAB_TEST_PLANT_SLOWDOWN=0.99999999999999 VTLAB_TEST_PLANT_REMEASURE=0.9999 \
  "$VTLAB" nightly "$T/exp" --db "$T/p2.db" --out "$T/prep2" --no-audit --no-plots
stderr_has "perf: ... the test hook for the re-measurement says it is on" "TEST HOOK VTLAB_TEST_PLANT_REMEASURE"
check "perf: ... both arms a confirmed drop from the baseline, still acknowledged, not flagged" \
  "[ \"\$(q $T/p2.db 'select count(*) from nightly_findings where nightly_id = 7 and kind = \"performance\" and regression = 0 and message like \"acknowledged%re-measured%confirmed\"')\" = 2 ]" \
  "$(q $T/p2.db 'select arm, regression, message from nightly_findings where nightly_id = 7')"
# Still slow, but above the acknowledged level (x1e-4 against x1e-6): the
# wide margin keeps a slow stretch of a shared host from passing the level
# (one CI run measured nightly 7 4.5x slower than nightly 6), and x1e-4 is
# still a drop from the baseline far beyond the noise, so it is judged.
export VTLAB_TEST_PLANT_SLOWDOWN=0.9999
expect_exit "perf: nightly 7 (still slow, acknowledged) exits 0" 0 "${NIGHTLY[@]}"
check "perf: ... no throughput regression; the drop still seen is a note that says acknowledged" \
  "[ \"\$(q $DB 'select count(*) from nightly_findings where nightly_id = 7 and kind = \"performance\" and regression = 1')\" = 0 ] && [ \"\$(q $DB 'select count(*) from nightly_findings where nightly_id = 7 and kind = \"performance\" and regression = 0 and message like \"acknowledged%known: slower kernel%\"')\" -ge 1 ]" \
  "$(q $DB 'select arm, regression, message from nightly_findings where nightly_id = 7')"
export VTLAB_TEST_PLANT_SLOWDOWN=0.99999999999999
expect_exit "perf: nightly 8 (slower still, re-measured too: the acknowledged level is passed) exits 1" 1 "${NIGHTLY[@]}"
check "perf: ... flagged again" \
  "[ \"\$(q $DB 'select count(*) from nightly_findings where nightly_id = 8 and kind = \"performance\" and regression = 1')\" -ge 1 ]" \
  "$(q $DB 'select arm, regression, message from nightly_findings where nightly_id = 8')"
unset VTLAB_TEST_PLANT_SLOWDOWN
expect_exit "perf: a bad VTLAB_TEST_PLANT_SLOWDOWN is exit 2" 2 env VTLAB_TEST_PLANT_SLOWDOWN=2 "${NIGHTLY[@]}"
expect_exit "perf: a bad VTLAB_TEST_PLANT_REMEASURE is exit 2" 2 env VTLAB_TEST_PLANT_REMEASURE=x "${NIGHTLY[@]}"
stderr_has "perf: ... and names it" "VTLAB_TEST_PLANT_REMEASURE"

# ------------------------------------------------------------ schema v5
# A v4 database as the nightly left it before schema v5: nightly_acks and
# nightly_remeasure_runs created at run time (as here), no nightlies.pid_start.
# Opening it (vtlab ack writes) migrates it: rows kept, pid_start added.
cp "$DB" "$T/v4.db"
"$PY" - "$T/v4.db" <<'PYEOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("ALTER TABLE nightlies DROP COLUMN pid_start")
# and nothing of v6 (views, meta, runs.layer_kinds)
for v in ("run_summary", "latest_verdicts", "open_confounds"): c.execute("DROP VIEW IF EXISTS " + v)
c.execute("DROP TABLE IF EXISTS meta")
c.execute("ALTER TABLE runs DROP COLUMN layer_kinds")
# and nothing of v7 (runs.engine_hello); a later migration adds its undo here
c.execute("ALTER TABLE runs DROP COLUMN engine_hello")
# and nothing of v8 (bisections, bisect_steps)
for t in ("bisect_steps", "bisections"): c.execute("DROP TABLE IF EXISTS " + t)
# and nothing of v8 (shards: runs.shard in the one-RUNNING index, run_sequences, run_shards, merged_shards)
c.execute("DROP INDEX runs_one_running")
c.execute("ALTER TABLE runs DROP COLUMN shard")
c.execute("CREATE UNIQUE INDEX runs_one_running ON runs(experiment, arm, knob_hash, model_sha256,"
          " dataset_sha256, code_version, repeat_idx) WHERE status = 'RUNNING'")
for t in ("run_sequences", "run_shards", "merged_shards"): c.execute("DROP TABLE " + t)
# and nothing of v9 (run_tags, run_notes, runs.rerun_of; PARTIAL not yet a status of runs)
for t in ("run_tags", "run_notes"): c.execute("DROP TABLE " + t)
c.execute("ALTER TABLE runs DROP COLUMN rerun_of")
# and nothing of v10 (nightly_confounds; CONFOUNDED not yet a status of nightlies)
c.execute("DROP TABLE nightly_confounds")
# and nothing of v11 (localizations, localize_steps)
for t in ("localize_steps", "localizations"): c.execute("DROP TABLE " + t)
v = c.execute("PRAGMA schema_version").fetchone()[0]
c.execute("PRAGMA writable_schema = ON")
c.execute("UPDATE sqlite_master SET sql = replace(sql, \"'FAILED','CONFOUNDED')\", \"'FAILED')\") WHERE name = 'nightlies'")
c.execute("PRAGMA schema_version = %d" % (v + 1))
c.execute("PRAGMA writable_schema = OFF")
c.execute("PRAGMA user_version = 4")
c.commit()
PYEOF
acks=$(q "$T/v4.db" 'select count(*) from nightly_acks'); rem=$(q "$T/v4.db" 'select count(*) from nightly_remeasure_runs')
expect_exit "schema: a v4 database with the nightly's run-time tables: vtlab ack on it exits 0" 0 \
  "$VTLAB" ack tiny/f32/performance --reason "known: slower kernel" --db "$T/v4.db"
check "schema: ... migrated to the version of a fresh database, acknowledgements and re-measurements kept" \
  "[ \"\$(q $T/v4.db 'pragma user_version')\" = \"\$(q $DB 'pragma user_version')\" ] && [ \"\$(q $T/v4.db 'select count(*) from nightly_acks')\" = $acks ] && [ \"\$(q $T/v4.db 'select count(*) from nightly_remeasure_runs')\" = $rem ] && [ \"\$(q $T/v4.db 'select count(*) from pragma_table_info(\"nightlies\") where name = \"pid_start\"')\" = 1 ]" \
  "$(q $T/v4.db 'pragma user_version') $(cat $ERR)"
check "schema: ... a migrated nightlies table takes the CONFOUNDED status" \
  "q $T/v4.db \"select sql from sqlite_master where name = 'nightlies'\" | grep -q \"'CONFOUNDED'\" && [ \"\$(q $T/v4.db 'select count(*) from nightly_confounds')\" = 0 ]" \
  "$(q $T/v4.db "select sql from sqlite_master where name = 'nightlies'")"

# A RUNNING nightly whose process is gone is marked FAILED by the next
# nightly on this host; a pid that was reused by another process (start time
# differs) counts as gone; a live one is left alone.
sleep 300 & LIVE=$!
"$PY" - "$DB" "$(hostname)" "$LIVE" <<'PYEOF'
import sqlite3, sys
db, host, live = sys.argv[1], sys.argv[2], int(sys.argv[3])
def start(pid):
    s = open("/proc/%d/stat" % pid).read()
    return int(s[s.rindex(")") + 2:].split()[19])
c = sqlite3.connect(db)
for nid, pid, ps in ((101, live, start(live) + 1), (102, live, start(live))):
    c.execute("INSERT INTO nightlies (id, started_at, status, git_commit, code_version, host, pid, pid_start,"
              " experiments_dir) VALUES (?, 't', 'RUNNING', 'g', 'c', ?, ?, ?, 'x')", (nid, host, pid, ps))
c.commit()
PYEOF
"${NIGHTLY[@]}" >"$OUT_FILE" 2>"$ERR"
check "reap: a RUNNING nightly whose pid was reused (other start time) is marked FAILED" \
  "[ \"\$(q $DB 'select status, error from nightlies where id = 101')\" = 'FAILED|the process died (found by a later nightly)' ]" \
  "$(q $DB 'select id, status, error from nightlies where id > 100')"
check "reap: ... a RUNNING nightly of a live process is left RUNNING" \
  "[ \"\$(q $DB 'select status from nightlies where id = 102')\" = RUNNING ]"
check "reap: ... the new nightly records its pid_start" \
  "[ \"\$(q $DB 'select pid_start > 0 from nightlies order by id desc limit 1')\" = 1 ]"
kill $LIVE 2>/dev/null; wait $LIVE 2>/dev/null

# A short no-change campaign under a CPU burner (tests/soak/nightly_noise.sh
# is the long one): no night may be marked REGRESSED for throughput noise.
out=$(bash tests/soak/nightly_noise.sh "$VTLAB" 4 0 2>&1)
fa=$(echo "$out" | sed -n 's/^false alarms: \([0-9]*\) of.*/\1/p')
check "noise: 4 no-change nightlies under load: no throughput false alarm" "[ \"$fa\" = 0 ]" "$(echo "$out" | tail -8)"
echo "$out" | grep -E '^(false alarms|detection):' | sed 's/^/# /'

finish
