#!/usr/bin/env bash
# test_engine_faults.sh — an engine that fails while a sweep runs (issue 11,
# item 1, "Faults"): a crash mid-run, a timeout, NaN logits, logits of the
# wrong shape, an out-of-order response and a malformed probe record each end
# that run FAILED with the reason (and the engine's stderr tail for a crash),
# never FINISHED with partial data; the other arms go on; the sweep resumes.
#
# Issue 30 item 6: an engine that crashes while a process it started still
# holds its stdout fails its run at once, and nothing of the engine's process
# group outlives vtlab (after a crash, at close, on SIGTERM, on SIGKILL of vtlab); a hello with a
# payload, or an arm whose engine reports another model than the reference
# arm's, is bad input (exit 2, nothing written) unless allow_model_mismatch.
#
# Usage (from the repository root): bash tests/cli/test_engine_faults.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-efault.XXXXXX)
# the helpers fault_grandchild.py leaves (their pids in $W/*.pids): a vtlab that
# does not end them must not leave them to the machine
cleanup() {
    for f in "$W"/*.pids; do [ -f "$f" ] && read -r _ _ hp <"$f" && kill -9 "$hp" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
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
# ------------------------------------------------ issue 30 item 6: engine faults
# alive PID: a process that is running (a zombie no init reaps is not)
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$s" ] && [ "${s#Z}" = "$s" ]; }
# gone PIDS_FILE : after at most 5 s, neither the engine nor its helper runs
gone() {
    local ep eg hp i
    read -r ep eg hp <"$1" || return 1
    for i in $(seq 1 50); do alive "$ep" || alive "$hp" || return 0; sleep 0.1; done
    return 1
}
# leads_group PIDS_FILE : the engine led a process group of its own
leads_group() { local ep eg hp; read -r ep eg hp <"$1" && [ "$ep" = "$eg" ]; }
# guarded LIMIT_S ARGS... : vtlab ARGS in the background, stopped (SIGTERM) after
# LIMIT_S seconds as a hang; sets RC, HUNG (1: it had to be stopped), ELAPSED (s)
guarded() {
    local limit=$1 i=0 t0=$SECONDS vp; shift
    "$VTLAB" "$@" >"$OUT_FILE" 2>"$ERR" &
    vp=$!
    while kill -0 "$vp" 2>/dev/null && [ "$i" -lt $((limit * 10)) ]; do sleep 0.1; i=$((i + 1)); done
    HUNG=0
    if kill -0 "$vp" 2>/dev/null; then HUNG=1; kill -TERM "$vp"; fi
    wait "$vp"; RC=$?
    ELAPSED=$((SECONDS - t0))
}
# gcexp FILE PIDS_FILE ENV_JSON N_SEQ : ref good.py, arm "orphan" fault_grandchild.py (timeout 600 s)
gcexp() {
    cat > "$1" <<JSON
{"id": "gc", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "engine": ["$E/good.py"], "dataset": {"generate": {"n_sequences": $4, "length": 6, "seed": 3}},
 "top_k": 2, "reference": "ref",
 "arms": [{"name": "ref"},
          {"name": "orphan", "engine": {"argv": ["$E/fault_grandchild.py"], "timeout_s": 600,
                                        "env": {"FAULT_PID_FILE": "$2"$3}}}],
 "metrics": ["top1_agreement"]}
JSON
}

# A crash while the helper holds the engine's stdout: no end of file comes, yet
# the run fails within seconds (timeout_s is 600; 60 s is only a hang guard).
gcexp "$W/gc.json" "$W/gc.pids" "" 5
guarded 90 run "$W/gc.json" --db "$W/gc.db"
if [ "$RC" = 1 ] && [ "$HUNG" = 0 ] && [ "$ELAPSED" -lt 60 ] &&
   [ "$(sqlite3 "$W/gc.db" "select status from runs where arm = 'orphan'")" = FAILED ] &&
   sqlite3 "$W/gc.db" "select error from runs where arm = 'orphan'" | grep -qF "(it exited with status 70)"; then
    ok "a crash with a grandchild holding stdout: FAILED ('exited with status 70') in ${ELAPSED} s, not at timeout_s"
else not_ok "grandchild crash" "rc $RC, hung $HUNG, ${ELAPSED} s: $(sqlite3 "$W/gc.db" "select arm, status, error from runs" 2>&1 | head -c 400)"; fi
leads_group "$W/gc.pids" && ok "the engine leads a process group of its own" || not_ok "group" "engine pid, pgid, helper: $(cat "$W/gc.pids")"
gone "$W/gc.pids" && ok "after the crash nothing of the engine's group is alive" || not_ok "crash: group left" "$(cat "$W/gc.pids"): $(ps -o pid,pgid,stat,args -p "$(awk '{print $3}' "$W/gc.pids")")"

# At close: the engine exits when its stdin closes, its helper would stay.
gcexp "$W/gcc.json" "$W/gcc.pids" ', "FAULT_CRASH_AFTER": "-1"' 5
guarded 90 run "$W/gcc.json" --db "$W/gcc.db"
if [ "$RC" = 0 ] && [ "$(sqlite3 "$W/gcc.db" "select group_concat(status) from runs")" = "FINISHED,FINISHED" ] &&
   gone "$W/gcc.pids"; then ok "at close the engine's whole group is ended: no helper outlives vtlab"
else not_ok "close: group left" "rc $RC, $(cat "$W/gcc.pids"), $(head -c 300 "$ERR")"; fi

# midrun NAME : a run of 300 sequences through fault_grandchild.py (never
# crashing, 0.2 s an answer) started in the background as $VP, returned once
# the engine and its helper run (W/NAME.pids written) and a second has passed
midrun() {
    gcexp "$W/$1.json" "$W/$1.pids" ', "FAULT_CRASH_AFTER": "-1", "FAULT_SLEEP_EACH": "0.2"' 300
    "$VTLAB" run "$W/$1.json" --db "$W/$1.db" >"$OUT_FILE" 2>"$ERR" &
    VP=$!
    for i in $(seq 1 300); do [ -s "$W/$1.pids" ] && break; sleep 0.1; done
    sleep 1
}

# SIGTERM to vtlab mid-run: the engines are in groups of their own (a terminal's
# signal does not reach them), so vtlab must end them.
midrun gct
kill -TERM "$VP"
for i in $(seq 1 600); do kill -0 "$VP" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$VP" 2>/dev/null; then kill -KILL "$VP"; not_ok "SIGTERM" "vtlab still running 60 s after SIGTERM"; fi
wait "$VP"; rc=$?
if [ "$rc" != 0 ] && [ -s "$W/gct.pids" ] && gone "$W/gct.pids"; then
    ok "SIGTERM to vtlab: it exits ($rc) and ends the engine's group, helper included"
else not_ok "SIGTERM: group left" "rc $rc, $(cat "$W/gct.pids" 2>&1), $(head -c 300 "$ERR")"; fi

# SIGKILL (or the OOM killer) to vtlab mid-run: vtlab can do nothing, so a
# warden process it left for the engine's group ends that group, helper
# included, when vtlab's end of the warden's pipe closes.
midrun gck
kill -KILL "$VP"
wait "$VP"; rc=$?
if [ "$rc" = 137 ] && [ -s "$W/gck.pids" ] && gone "$W/gck.pids"; then
    ok "SIGKILL to vtlab: its warden ends the engine's group, helper included"
else not_ok "SIGKILL: group left" "rc $rc, $(cat "$W/gck.pids" 2>&1), $(head -c 300 "$ERR")"; fi
if [ "$(sqlite3 "$W/gck.db" "select count(*) from runs where status = 'FINISHED' and arm = 'orphan'" 2>/dev/null || echo 0)" = 0 ]; then
    ok "... and the killed run is not recorded as finished"
else not_ok "SIGKILL: finished row" "$(sqlite3 "$W/gck.db" "select arm, status from runs")"; fi

# A hello with a payload is bad input: exit 2 before anything is written.
cat > "$W/ph.json" <<JSON
{"id": "ph", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "engine": ["$E/good.py"], "dataset": {"inline": [[5, 6, 7], [8, 9]]}, "top_k": 2, "reference": "ref",
 "arms": [{"name": "ref"}, {"name": "payload", "engine": ["$E/fault_payload_hello.py"]}]}
JSON
expect_exit "a hello with payload_bytes 10^12: exit 2" 2 "$VTLAB" run "$W/ph.json" --db "$W/ph.db"
stderr_has "... naming the arm, the engine and the field" \
    "arm payload: engine $E/fault_payload_hello.py: hello: payload_bytes 1000000000000: a hello carries no payload"
if [ ! -e "$W/ph.db" ] || [ "$(sqlite3 "$W/ph.db" "select count(*) from runs")" = 0 ]; then ok "... and no run row is written"
else not_ok "payload hello rows" "$(sqlite3 "$W/ph.db" "select arm, status, error from runs")"; fi

# An arm whose engine reports another model than the reference arm's.
FAKE_SHA=$(printf '%s' "vtlab tests/engines/fake.py: vocab 64, hidden 8, 2 layers, v1" | sha256sum | cut -c1-12)
OTHER_SHA=$(printf '%s' "another model" | sha256sum | cut -c1-12)
mmexp() {
    cat > "$1" <<JSON
{"id": "mm", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "engine": ["$E/good.py"], "dataset": {"inline": [[5, 6, 7], [8, 9]]}, "top_k": 2, "reference": "ref",
 $2"arms": [{"name": "ref"}, {"name": "other-model", "engine": ["$E/fault_model_hash.py"]}],
 "metrics": ["top1_agreement"]}
JSON
}
mmexp "$W/mm.json" ""
expect_exit "an arm whose engine reports another model than the reference's: exit 2" 2 "$VTLAB" run "$W/mm.json" --db "$W/mm.db"
if grep -qF "arm other-model" "$ERR" && grep -qF "reference arm ref" "$ERR" && grep -qF "$OTHER_SHA" "$ERR" &&
   grep -qF "$FAKE_SHA" "$ERR" && grep -qF "allow_model_mismatch" "$ERR"; then
    ok "... naming both arms, both hashes ($OTHER_SHA, $FAKE_SHA) and allow_model_mismatch"
else not_ok "mismatch message" "$(head -c 400 "$ERR")"; fi
[ ! -e "$W/mm.db" ] && ok "... and nothing is written" || not_ok "mismatch db" "$W/mm.db exists"
mmexp "$W/mma.json" '"allow_model_mismatch": true, '
expect_exit "with \"allow_model_mismatch\": true it runs (exit 0)" 0 "$VTLAB" run "$W/mma.json" --db "$W/mma.db"
if [ "$(sqlite3 "$W/mma.db" "select count(distinct model_sha256) from runs where status = 'FINISHED'")" = 2 ]; then
    ok "... both arms FINISHED, each with its engine's model hash"
else not_ok "mismatch allowed" "$(sqlite3 "$W/mma.db" "select arm, status, model_sha256 from runs")"; fi
mkdir -p "$W/nospecs"
"$VTLAB" audit --db "$W/mma.db" --specs "$W/nospecs" >"$OUT_FILE" 2>"$ERR"
if [ "$(sqlite3 "$W/mma.db" "select count(*) from audit_flags f join runs r on f.subject_kind = 'run' and
        f.subject = r.id where r.arm = 'other-model' and f.rule = 'R4'")" -ge 1 ]; then
    ok "... and the audit flags the compared run (R4)"
else not_ok "mismatch R4" "$(head -c 300 "$OUT_FILE")"; fi
finish
