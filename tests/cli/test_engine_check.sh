#!/usr/bin/env bash
# test_engine_check.sh — `vtlab engine-check` (issue 11, item 5): a conforming
# engine passes (exit 0), and each test engine of tests/engines that breaks one
# rule fails exactly that check (exit 1, its FAIL line); the builtin model
# served by `vtlab engine` passes (one knob that changes nothing on the tiny
# model allowed explicitly). Issue 30 item 4: the audit-mode check (the
# sentinel contract under VTP_PROBE=audit), one replay per declared fault
# (check_fault_*.py, devengine, the builtin), and --env NAME=VALUE. Issue 32
# item 3: the batch check of an engine that declares max_batch (each sequence
# of a request of several bit-identical to the sequence alone, the same probe
# records, more than max_batch refused), skipped without max_batch; the same
# engines through tests/engines/conformance.py's batch rules.
#
# Usage (from the repository root): bash tests/cli/test_engine_check.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-echeck.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
E=tests/engines

expect_exit "good.py passes every check" 0 "$VTLAB" engine-check $E/good.py
cp "$OUT_FILE" "$W/good.out"
if grep -q "^engine-check: [0-9]* ok, 0 failed" "$OUT_FILE" && grep -q "^ok    bad requests" "$OUT_FILE"; then ok "... one line per check and a summary"
else not_ok "good output" "$(cat "$OUT_FILE")"; fi
if grep -q "^ok    audit mode: logits finite and bit-identical to VTP_PROBE=on's" "$OUT_FILE"; then ok "... including audit mode"
else not_ok "good audit mode" "$(cat "$OUT_FILE")"; fi

# fails ENGINE PATTERN: exit 1, a FAIL line matching PATTERN, and only one check failed
fails() {
    local eng=$1 pat=$2; shift 2
    "$@" "$VTLAB" engine-check --timeout 3 $E/$eng >"$OUT_FILE" 2>"$ERR"; local rc=$?
    local nfail; nfail=$(grep -c "^FAIL" "$OUT_FILE")
    if [ "$rc" -eq 1 ] && grep -E "^FAIL +$pat" "$OUT_FILE" >/dev/null && [ "$nfail" -eq 1 ]; then ok "$eng fails: $pat"
    else not_ok "$eng" "exit $rc, $nfail FAIL line(s), expected one matching '$pat': $(grep -v '^ok' "$OUT_FILE" | head -c 500)"; fi
}
fails bad_hello.py "hello: .*model.sha256: expected 64 lowercase hex digits"
fails bad_knob_noop.py "knob FAKE_SCALE=2: declared numeric but the logits are bit-identical"
fails bad_nondeterministic.py "determinism: the hello says deterministic"
fails bad_knob_hidden_numeric.py "knob FAKE_UNUSED=1: declared non-numeric but the logits change"
fails bad_prefix.py "prefix: the first 5 positions differ"
fails bad_probes.py "forward: .*probes: site"
fails bad_crash_on_bad_request.py "bad request \(header not JSON\): .*closed its stdout"
fails bad_nan.py "forward: .*logits\[11\]\[0\] is NaN"
fails bad_shape.py "forward: .*logits of the wrong shape: \[12, 63\], expected \[12, 64\]"
fails bad_order.py "forward: .*response out of order: id 1, expected 0"
fails slow.py "forward: .*reading a response: timed out" env SLOW_SECONDS=60
fails crash_mid.py "(determinism|prefix|forward).*closed its stdout \(it exited with status 70\)" env CRASH_AFTER=1
# The audit sentinel contract (docs/engine-protocol.md, "logits"), under VTP_PROBE=audit only:
# each of these engines passed every check before the audit-mode check existed.
fails check_audit_nan.py "audit mode: .*logits\[0\]\[0\] is NaN"
fails check_audit_nan.py "audit mode: record 1 \(site state.copy, layer -1\): rows_unwritten 1 without a violation" \
    env CHECK_AUDIT_BUG=count
fails check_audit_nan.py "audit mode: the logits differ from those under VTP_PROBE=on" env CHECK_AUDIT_BUG=numbers
fails check_audit_nan.py "audit mode: record 1 \(site state.copy, layer -1\): rows_unwritten 13 of 12 rows" \
    env CHECK_AUDIT_BUG=over
# A declared fault must act at its declared site when replayed.
fails check_fault_inert.py "fault half_rows \(CHECK_FAULT\): no violation at state.copy \(alone, nor with FAKE_UNUSED=1\)"
if ! pgrep -f "tests/engines/slow.py" >/dev/null; then ok "the timed-out engine was killed (no slow.py left running)"
else not_ok "slow.py killed" "$(pgrep -af tests/engines/slow.py)"; fi

# ---- batches (max_batch): each sequence of a request of several as it is alone
if grep -q "^skip  batch: the hello declares no max_batch (one sequence per request)" "$W/good.out" &&
   ! grep -q "^ok    batch" "$W/good.out"; then ok "good.py (no max_batch): the batch check is skipped, saying why (not passed)"
else not_ok "good batch skip" "$(grep -i batch "$W/good.out")"; fi
expect_exit "batch.py (max_batch 4) passes" 0 "$VTLAB" engine-check --timeout 5 $E/batch.py
if grep -Eq "^ok +batch: a request of 4 sequences of 1-15 tokens \(16 tokens; max_batch 4\) and one of 2 sequences of 5 tokens, both in flight, gave each sequence the logits it gets alone, bit for bit, and the same probe records" "$OUT_FILE" &&
   grep -Eq "^ok +batch limits: a request of 5 sequences \(max_batch 4\) and one whose lengths do not sum to its tokens answered with errors" "$OUT_FILE" &&
   grep -Eq "^ok +batch capture: a request of 4 sequences with capture gave each sequence the residual stream it captures alone \(2 layers, after attention and FFN\), bit for bit$" "$OUT_FILE" &&
   grep -q "^ok    hello: .*, max_batch 4$" "$OUT_FILE"; then ok "... its batch and batch limits lines"
else not_ok "batch.py lines" "$(cat "$OUT_FILE")"; fi
expect_exit "batch.py BATCH_MAX=2 passes" 0 env BATCH_MAX=2 "$VTLAB" engine-check --timeout 5 $E/batch.py
if grep -Eq "^ok +batch: a request of 2 sequences of 1-15 tokens \(4 tokens; max_batch 2\) gave each" "$OUT_FILE"; then
    ok "... one request of max_batch = 2 sequences"; else not_ok "batch.py max 2" "$(grep batch "$OUT_FILE")"; fi
expect_exit "batch.py BATCH_MAX=256 passes" 0 env BATCH_MAX=256 "$VTLAB" engine-check --timeout 5 $E/batch.py
if grep -Eq "^ok +batch: a request of 256 sequences of 1-15 tokens \(2048 tokens; max_batch 256\)" "$OUT_FILE" &&
   grep -Eq "^ok +batch limits: a request of 257 sequences" "$OUT_FILE"; then ok "... 256 sequences, 2048 tokens: as much as vtlab sends"
else not_ok "batch.py max 256" "$(grep batch "$OUT_FILE")"; fi
expect_exit "batch.py BATCH_MAX=1 passes" 0 env BATCH_MAX=1 "$VTLAB" engine-check --timeout 5 $E/batch.py
if grep -q "^skip  batch: the hello says max_batch 1" "$OUT_FILE" && grep -q "^engine-check: [0-9]* ok, 0 failed, 1 skipped" "$OUT_FILE"
then ok "... max_batch 1: skipped, counted as skipped"; else not_ok "batch.py max 1" "$(grep -E "batch|engine-check" "$OUT_FILE")"; fi
# An engine that mixes the sequences of a request, each way its own FAIL (and the only one).
fails bad_batch_mix.py "batch: sequence 0 of the request of 4 sequences \(3 tokens\) differs from the same sequence sent alone, first at position 0, vocab index [0-9]+: "
fails bad_batch_mix.py "batch: sequence 2 of the request of 4 sequences \(7 tokens\) differs from the same sequence sent alone, first at position 0, vocab index 0: " env BAD_MIX=swap
fails bad_batch_mix.py "batch: sequence 0 of the request of 2 sequences \(3 tokens\) differs" env BAD_MIX=swap BAD_MIX_MAX=2
fails bad_batch_mix.py "batch: the probe records of the request of 4 sequences are not those of its sequences sent alone \(summed\): site logits layer -1 \(f32\): calls 1, rows 16" env BAD_MIX=probes
fails bad_batch_mix.py "batch limits \(5 sequences, max_batch 4\): the answer is not an error" env BAD_MIX=limit
fails bad_batch_mix.py "batch capture: sequence 1 of the request of 4 sequences: the residual after layer 0's attention differs from the same sequence's captured alone, first at position 0, index 0: " env BAD_MIX=capture
fails bad_batch.py "batch: the request of 4 sequences \(16 tokens\): .*sequences \[3,1,7\], expected \[3,1,7,5\]"
fails bad_batch.py "batch: the request of 4 sequences \(16 tokens\): .*sequences none, expected \[3,1,7,5\]" env BAD_BATCH=joined
# A hello whose max_batch is no integer 1..65536: a FAIL hello line naming the member.
for raw in 0 -1 65537 1e300 2.5 '"4"' true null '[4]'; do
    fails batch.py "hello: .*hello: max_batch: expected an integer 1\.\.65536" env BATCH_MAX_RAW="$raw"
done
# The same engines through conformance.py's batch rules (the engine's side, without vtlab).
conf() {
    local want=$1; shift
    /usr/bin/python3 $E/conformance.py --timeout 5 "$@" >"$W/conf.out" 2>&1
    local bad; bad=$(grep "^not ok" "$W/conf.out" | sed 's/^not ok - [^:]*: \([a-z-]*\):.*/\1/' | sort | tr '\n' ' ')
    if [ "$bad" = "$want" ]; then ok "conformance.py $*: ${want:-every rule kept}"
    else not_ok "conformance.py $*" "broken: '$bad', expected '$want': $(grep '^not ok' "$W/conf.out" | head -c 400)"; fi
}
conf "" $E/batch.py
if grep -q "^ok - $E/batch.py: batch$" "$W/conf.out"; then ok "... its batch rule applied"; else not_ok "conf batch" "$(cat "$W/conf.out")"; fi
conf "" $E/good.py
if grep -q "^ok - $E/good.py: batch (does not apply: the hello declares no max_batch)" "$W/conf.out"; then ok "... good.py: the batch rules do not apply, and it says so"
else not_ok "conf good" "$(grep batch "$W/conf.out")"; fi
conf "batch " $E/bad_batch_mix.py BAD_MIX=ulp
conf "batch " $E/bad_batch_mix.py BAD_MIX=swap
conf "batch " $E/bad_batch_mix.py BAD_MIX=probes
conf "batch-limit " $E/bad_batch_mix.py BAD_MIX=limit
conf "batch " $E/bad_batch_mix.py BAD_MIX=capture
conf "batch " $E/bad_batch.py BAD_BATCH=joined

expect_exit "unread_knob.py is honest about its unread knob: it passes" 0 "$VTLAB" engine-check $E/unread_knob.py
if grep -q "knob FAKE_SCALE: declared as not read" "$OUT_FILE"; then ok "... and the unread knob is said"
else not_ok "unread said" "$(cat "$OUT_FILE")"; fi

# A fault that acts only together with another knob (as devengine's needs DEV_BF16_STREAM=1):
# found by the retry with each bool knob set to 1 (one at a time, then all together), or alone
# when --env sets that knob.
expect_exit "check_fault_ok.py passes: its fault acts at its site" 0 "$VTLAB" engine-check --timeout 5 $E/check_fault_ok.py
if grep -Eq "^ok +fault row_bytes_from_state \(CHECK_FAULT\): 1 violation\(s\) at state.copy \(12 rows unwritten\) with CHECK_F16_STATE=1; none alone" "$OUT_FILE"
then ok "... found with its bool trigger set to 1, none alone"; else not_ok "fault ok retry" "$(cat "$OUT_FILE")"; fi
expect_exit "check_fault_ok.py --env CHECK_F16_STATE=1 passes" 0 \
    "$VTLAB" engine-check --timeout 5 --env CHECK_F16_STATE=1 $E/check_fault_ok.py
if grep -Eq "^ok +fault row_bytes_from_state \(CHECK_FAULT\): 1 violation\(s\) at state.copy \(12 rows unwritten\)$" "$OUT_FILE" &&
   grep -Eq "^ok +knob CHECK_F16_STATE=0: reported as set; logits change" "$OUT_FILE"; then
    ok "... the fault acts alone, and the knob --env set is tried at its other value (0)"
else not_ok "fault ok env" "$(cat "$OUT_FILE")"; fi

# --env reaches every engine start (check_env.py will not start without CHECK_ENV_TOKEN=42).
expect_exit "check_env.py with --env CHECK_ENV_TOKEN=42 passes" 0 \
    "$VTLAB" engine-check --timeout 5 --env CHECK_ENV_TOKEN=42 --env CHECK_OTHER= $E/check_env.py
if ! grep -q "did not start" "$OUT_FILE" && grep -q "^ok    audit mode" "$OUT_FILE" && grep -q "^ok    knob FAKE_SCALE=2" "$OUT_FILE"
then ok "... every start (knobs, audit mode) had it"; else not_ok "env every start" "$(cat "$OUT_FILE")"; fi
expect_exit "check_env.py without --env: exit 1" 1 "$VTLAB" engine-check --timeout 5 $E/check_env.py
if grep -q "^FAIL  hello: .*CHECK_ENV_TOKEN=None" "$OUT_FILE"; then ok "... its hello FAIL line says why"
else not_ok "env missing" "$(cat "$OUT_FILE")"; fi
for bad in NOEQUALS =x 1ABC=x A-B=x VTP_PROBE=audit; do
    expect_exit "--env $bad: usage error (exit 2)" 2 "$VTLAB" engine-check --env "$bad" $E/good.py
done
stderr_has "... naming the reserved variable" "VTP_PROBE"
expect_exit "--env without a value: usage error (exit 2)" 2 "$VTLAB" engine-check --env

expect_exit "an engine that cannot start: exit 1 with a FAIL hello line" 1 "$VTLAB" engine-check ./no/such/engine
if grep -q "^FAIL  hello: .*cannot start it" "$OUT_FILE"; then ok "... naming why"; else not_ok "no engine" "$(cat "$OUT_FILE")"; fi
expect_exit "no command: usage error (exit 2)" 2 "$VTLAB" engine-check --timeout 3

"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out "$W/m" >/dev/null 2>&1
expect_exit "vtlab engine (the builtin model) passes, with --allow-noop for the router renorm knob (top-k > 1 here)" 0 \
    "$VTLAB" engine-check --model "$W/m" --allow-noop VT_KIMI_ROUTER_RENORM "$VTLAB" engine
if grep -q "knob VT_KIMI_BF16_EXPERT_OUT=1: reported as set; logits change together with VT_KIMI_BF16_STREAM" "$OUT_FILE"; then
    ok "... a knob that acts only with another is found to act with it"
else not_ok "dependent knob" "$(grep EXPERT_OUT "$OUT_FILE")"; fi
if grep -Eq "^ok +fault moe_scatter_row_bytes_from_stream \(VT_FAULT\): [0-9]+ violation\(s\) at moe.scatter \([0-9]+ rows unwritten\) with VT_KIMI_BF16_STREAM=1; none alone" "$OUT_FILE" &&
   grep -q "^ok    audit mode" "$OUT_FILE"; then
    ok "... its audit mode and its fault replay pass (the fault found with VT_KIMI_BF16_STREAM=1 alone: with VT_KIMI_BF16_EXPERT_OUT=1 too it does not act)"
else not_ok "builtin fault" "$(grep -E "audit|fault" "$OUT_FILE")"; fi
if grep -Eq "^ok +batch: a request of 256 sequences of 1-15 tokens \(2048 tokens; max_batch 256\) and one of 2 sequences of 5 tokens, both in flight, gave each sequence the logits it gets alone, bit for bit, and the same probe records \([0-9]+\)" "$OUT_FILE" &&
   grep -q "^ok    batch limits: a request of 257 sequences (max_batch 256)" "$OUT_FILE"; then
    ok "... its batches (vt_session_prefill_batch) give each sequence its bits alone, the same records, and 257 sequences are refused"
else not_ok "builtin batch" "$(grep -E "batch" "$OUT_FILE")"; fi
expect_exit "... and without --allow-noop the knob that changes nothing fails it" 1 \
    "$VTLAB" engine-check --model "$W/m" "$VTLAB" engine

# devengine (examples/engines/devengine): its fault scatter_row_bytes acts only with DEV_BF16_STREAM=1.
if make -s -C examples/engines/devengine >"$ERR" 2>&1; then
    DEV=./examples/engines/devengine/devengine
    expect_exit "devengine passes" 0 "$VTLAB" engine-check --model "$W/m" $DEV
    if grep -Eq "^ok +fault scatter_row_bytes \(DEV_FAULT\): [0-9]+ violation\(s\) at moe.scatter \([0-9]+ rows unwritten\) with DEV_BF16_STREAM=1; none alone" "$OUT_FILE" &&
       grep -q "^ok    audit mode" "$OUT_FILE"; then ok "... its fault found with DEV_BF16_STREAM=1 (the bool-knob retry)"
    else not_ok "devengine fault" "$(cat "$OUT_FILE")"; fi
    expect_exit "devengine --env DEV_BF16_STREAM=1 passes" 0 \
        "$VTLAB" engine-check --model "$W/m" --env DEV_BF16_STREAM=1 $DEV
    if grep -Eq "^ok +fault scatter_row_bytes \(DEV_FAULT\): [0-9]+ violation\(s\) at moe.scatter \([0-9]+ rows unwritten\)$" "$OUT_FILE" &&
       grep -q "^ok    knob DEV_BF16_STREAM=0: reported as set; logits change" "$OUT_FILE"; then
        ok "... its fault acts alone with the bf16 stream --env sets"
    else not_ok "devengine env" "$(cat "$OUT_FILE")"; fi
else not_ok "make -C examples/engines/devengine" "$(head -c 300 "$ERR")"; fi
finish
