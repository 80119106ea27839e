#!/usr/bin/env bash
# test_engine_faults.sh — an engine that fails while a sweep runs (issue 11,
# item 1, "Faults"): a crash mid-run, a timeout, NaN logits, logits of the
# wrong shape, an out-of-order response and a malformed probe record each end
# that run FAILED with the reason (and the engine's stderr tail for a crash),
# never FINISHED with partial data; the other arms go on; the sweep resumes.
#
# Usage (from the repository root): bash tests/cli/test_engine_faults.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-efault.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
E=$PWD/tests/engines
DB=$W/results.db
q() { sqlite3 "$DB" "$1"; }

cat > "$W/faults.json" <<JSON
{"id": "faults", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "engine": ["$E/good.py"],
 "dataset": {"inline": [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14], [15, 16]]},
 "top_k": 4, "reference": "ref",
 "arms": [{"name": "ref"},
          {"name": "crash", "engine": ["$E/crash_mid.py"]},
          {"name": "slow", "engine": {"argv": ["$E/slow.py"], "env": {"SLOW_SECONDS": "60"}, "timeout_s": 2}},
          {"name": "nan", "engine": ["$E/bad_nan.py"]},
          {"name": "shape", "engine": ["$E/bad_shape.py"]},
          {"name": "order", "engine": ["$E/bad_order.py"]},
          {"name": "probes", "engine": ["$E/bad_probes.py"]},
          {"name": "scaled", "knobs": {"FAKE_SCALE": 2}}],
 "metrics": ["top1_agreement", "kl"]}
JSON

expect_exit "a sweep with failing engines: exit 1 (runs failed)" 1 "$VTLAB" run "$W/faults.json" --db "$DB"
st() { q "select status from runs where arm = '$1'"; }
why() { q "select coalesce(error, '') from runs where arm = '$1'"; }
has() { # ARM STATUS TEXT
    if [ "$(st "$1")" = "$2" ] && why "$1" | grep -qF -- "$3"; then ok "$1: $2, the reason says \"$3\""
    else not_ok "$1" "status $(st "$1"), reason: $(why "$1")"; fi
}
has crash FAILED "(it exited with status 70); its stderr ends: crash_mid: simulated crash on request 2 after 2 answered forwards"
has slow FAILED "reading a response: timed out"
has nan FAILED "is NaN"
has shape FAILED "logits of the wrong shape"
has order FAILED "response out of order: id 1, expected 0"
has probes FAILED "probes: site"
if [ "$(st ref)" = FINISHED ] && [ "$(st scaled)" = FINISHED ]; then ok "the other arms went on: ref and scaled FINISHED"
else not_ok "others" "$(q "select arm, status from runs")"; fi
if [ "$(q "select count(*) from runs r where status = 'FINISHED' and (select count(*) from logits_topk t where t.run_id = r.id) = 0")" = 0 ] &&
   [ "$(q "select count(*) from runs r where status != 'FINISHED' and exists (select 1 from comparisons c where c.run_id = r.id)")" = 0 ]; then
    ok "no FINISHED run without its data, no failed run with a comparison"
else not_ok "partial data" "$(q "select id, arm, status from runs")"; fi
if ! pgrep -f "$E/slow.py" >/dev/null; then ok "the engine that timed out was killed"; else not_ok "slow killed" "$(pgrep -af slow.py)"; fi

# Resume: the crashing engine now survives (CRASH_AFTER from the environment
# vtlab passes on); only the failed runs are redone, the finished skipped.
CRASH_AFTER=1000 "$VTLAB" run "$W/faults.json" --db "$DB" >"$OUT_FILE" 2>"$ERR"
if [ "$(q "select count(*) from runs where arm = 'crash' and status = 'FINISHED'")" = 1 ] &&
   grep -q "ref: already FINISHED with this identity, skipped" "$OUT_FILE" && grep -q "scaled: already FINISHED" "$OUT_FILE"; then
    ok "the sweep resumes: the crashed arm is redone and FINISHED, the finished arms skipped"
else not_ok "resume" "$(q "select arm, status from runs"; tail -5 "$OUT_FILE")"; fi

# An engine killed from outside mid-run (kill -9 of the engine process).
cat > "$W/killed.json" <<JSON
{"id": "killed", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "engine": ["$E/good.py"],
 "dataset": {"generate": {"n_sequences": 400, "length": 8, "seed": 3}},
 "top_k": 2, "reference": "ref",
 "arms": [{"name": "ref"}, {"name": "victim", "engine": {"argv": ["$E/slow.py"], "env": {"SLOW_SECONDS": "0", "SLOW_EACH": "0.05"}}}],
 "metrics": ["top1_agreement"]}
JSON
"$VTLAB" run "$W/killed.json" --db "$W/k.db" >"$OUT_FILE" 2>"$ERR" &
VP=$!
for i in $(seq 1 600); do pgrep -f "$E/slow.py" >/dev/null && break; sleep 0.1; done
sleep 1
pkill -9 -f "$E/slow.py"
wait $VP; rc=$?
if [ "$rc" = 1 ] && [ "$(sqlite3 "$W/k.db" "select status from runs where arm = 'victim'")" = FAILED ] &&
   sqlite3 "$W/k.db" "select error from runs where arm = 'victim'" | grep -q "killed by signal 9"; then
    ok "an engine killed with SIGKILL mid-run: that run FAILED ('killed by signal 9'), vtlab exits 1"
else not_ok "kill -9" "rc $rc: $(sqlite3 "$W/k.db" "select arm, status, error from runs")"; fi
finish
