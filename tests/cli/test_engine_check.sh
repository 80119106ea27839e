#!/usr/bin/env bash
# test_engine_check.sh — `vtlab engine-check` (issue 11, item 5): a conforming
# engine passes (exit 0), and each test engine of tests/engines that breaks one
# rule fails exactly that check (exit 1, its FAIL line); the builtin model
# served by `vtlab engine` passes (one knob that changes nothing on the tiny
# model allowed explicitly).
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
if grep -q "^engine-check: [0-9]* ok, 0 failed" "$OUT_FILE" && grep -q "^ok    bad requests" "$OUT_FILE"; then ok "... one line per check and a summary"
else not_ok "good output" "$(cat "$OUT_FILE")"; fi

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
if ! pgrep -f "tests/engines/slow.py" >/dev/null; then ok "the timed-out engine was killed (no slow.py left running)"
else not_ok "slow.py killed" "$(pgrep -af tests/engines/slow.py)"; fi

expect_exit "unread_knob.py is honest about its unread knob: it passes" 0 "$VTLAB" engine-check $E/unread_knob.py
if grep -q "knob FAKE_SCALE: declared as not read" "$OUT_FILE"; then ok "... and the unread knob is said"
else not_ok "unread said" "$(cat "$OUT_FILE")"; fi

expect_exit "an engine that cannot start: exit 1 with a FAIL hello line" 1 "$VTLAB" engine-check ./no/such/engine
if grep -q "^FAIL  hello: .*cannot start it" "$OUT_FILE"; then ok "... naming why"; else not_ok "no engine" "$(cat "$OUT_FILE")"; fi
expect_exit "no command: usage error (exit 2)" 2 "$VTLAB" engine-check --timeout 3

"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out "$W/m" >/dev/null 2>&1
expect_exit "vtlab engine (the builtin model) passes, with --allow-noop for the router renorm knob (top-k > 1 here)" 0 \
    "$VTLAB" engine-check --model "$W/m" --allow-noop VT_KIMI_ROUTER_RENORM "$VTLAB" engine
if grep -q "knob VT_KIMI_BF16_EXPERT_OUT=1: reported as set; logits change together with VT_KIMI_BF16_STREAM" "$OUT_FILE"; then
    ok "... a knob that acts only with another is found to act with it"
else not_ok "dependent knob" "$(grep EXPERT_OUT "$OUT_FILE")"; fi
expect_exit "... and without --allow-noop the knob that changes nothing fails it" 1 \
    "$VTLAB" engine-check --model "$W/m" "$VTLAB" engine
finish
