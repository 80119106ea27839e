#!/usr/bin/env bash
# test_daily_errors.sh — issue 33 item 4: errors a daily user meets.
#   - a results database whose directory is missing, not a directory or not
#     writable is bad input (exit 2) naming the directory and the system's
#     reason, for the commands that create one (run, audit, nightly);
#   - a bool knob is 0 or 1, as documented, wherever it is read (the
#     environment, an experiment's arm, the ledger): yes/true/on/no/false/off
#     are refused with the value they mean;
#   - test-only knobs (VT_TEST_*) are not listed by `vtlab knobs` nor in
#     docs/knobs.md, and are still accepted.
# Usage (from the repository root): bash tests/cli/test_daily_errors.sh ./vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
W=$(mktemp -d /tmp/vtlab-daily-errors.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE="$W/out"; ERR="$W/err"
. tests/cli/lib.sh
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "${3:-}"; fi; }

cat > "$W/e.json" <<'JSON'
{"id": "e", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 2, "length": 4, "seed": 5}}, "score": "all", "top_k": 2, "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "b", "knobs": {"VT_KIMI_BF16_STREAM": 1}}]}
JSON

# ------------------------------------------------------------ the database's directory
expect_exit "run --db in a missing directory: exit 2" 2 "$VTLAB" run "$W/e.json" --db "$W/no/such/dir/r.db"
stderr_has "... naming the directory" "directory $W/no/such/dir"
stderr_has "... and the system's reason" "No such file or directory"
check "... nothing created" "[ ! -e $W/no ]"
touch "$W/plain"
expect_exit "audit --db under a regular file: exit 2" 2 "$VTLAB" audit --db "$W/plain/r.db" --specs specs
stderr_has "... naming it and the reason" "directory $W/plain: Not a directory"
mkdir -p "$W/exp" && cp "$W/e.json" "$W/exp/"
expect_exit "nightly --db in a missing directory: exit 2" 2 "$VTLAB" nightly "$W/exp" --db "$W/gone/r.db" --out "$W/rep" --no-audit --no-plots
stderr_has "... naming the directory" "directory $W/gone"
# not writable: as another user (root may write anywhere)
mkdir -p "$W/ro" "$W/cache" && chmod 755 "$W/ro" "$W" && chmod 777 "$W/cache"
if [ "$(id -u)" != 0 ]; then
  chmod 555 "$W/ro"
  expect_exit "run --db in an unwritable directory: exit 2" 2 "$VTLAB" run "$W/e.json" --db "$W/ro/r.db"
  stderr_has "... naming the directory and the reason" "directory $W/ro: Permission denied"
  chmod 755 "$W/ro"
elif command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null &&
     setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$VTLAB" -a -r "$PWD/model/configs/kimi-linear-tiny.json"; then
  expect_exit "run --db in an unwritable directory (as nobody): exit 2" 2 \
    setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$W" VTLAB_CACHE="$W/cache" "$VTLAB" run "$W/e.json" --db "$W/ro/r.db"
  stderr_has "... naming the directory and the reason" "directory $W/ro: Permission denied"
else
  # (a checkout in a directory only root may enter, e.g. under mktemp -d: nobody cannot run vtlab there)
  echo "# root without setpriv, or vtlab not runnable as nobody from $PWD: the unwritable directory is not checked"
  ok "unwritable directory (skipped)"
fi

# ------------------------------------------------------------ bool knobs: 0 or 1
for v in yes true on Yes TRUE; do
  expect_exit "VT_KIMI_BF16_STREAM=$v in the environment: exit 2" 2 env VT_KIMI_BF16_STREAM=$v "$VTLAB" logits --model "$W/none" --tokens 1 --out "$W/l.bin"
  stderr_has "... expected 0 or 1, it means 1" "value \"$v\", expected 0 or 1 (did you mean 1?)"
done
for v in no false off; do
  expect_exit "VT_KIMI_BF16_STREAM=$v in the environment: exit 2" 2 env VT_KIMI_BF16_STREAM=$v "$VTLAB" logits --model "$W/none" --tokens 1 --out "$W/l.bin"
  stderr_has "... it means 0" "(did you mean 0?)"
done
sed 's/"VT_KIMI_BF16_STREAM": 1/"VT_KIMI_BF16_STREAM": "on"/' "$W/e.json" > "$W/on.json"
expect_exit "an arm's knob \"on\": exit 2, nothing run" 2 "$VTLAB" run "$W/on.json" --db "$W/on.db"
stderr_has "... naming the value" "value \"on\", expected 0 or 1 (did you mean 1?)"
sed 's/"VT_KIMI_BF16_STREAM": 1/"VT_KIMI_BF16_STREAM": true/' "$W/e.json" > "$W/json-true.json"
expect_exit "an arm's knob as the JSON boolean true is 1: the run goes ahead" 0 "$VTLAB" run "$W/json-true.json" --db "$W/t.db"
mkdir -p "$W/specs/claims" "$W/specs/defects"
sed 's/"VT_KIMI_BF16_STREAM": "1"/"VT_KIMI_BF16_STREAM": "yes"/' specs/claims/bf16-stream-refuted-4of128.json > "$W/specs/claims/bf16-stream-refuted-4of128.json"
cp specs/defects/*.json "$W/specs/defects/"
expect_exit "a ledger claim's knob \"yes\": specs check exits 2" 2 "$VTLAB" specs check --specs "$W/specs"
stderr_has "... naming the value" "value \"yes\", expected 0 or 1 (did you mean 1?)"

# ------------------------------------------------------------ test-only knobs
"$VTLAB" knobs > "$OUT_FILE" 2>&1
check "vtlab knobs lists no test-only knob" "! grep -q VT_TEST_ $OUT_FILE && grep -q VT_KIMI_BF16_STREAM $OUT_FILE" "$(grep VT_TEST_ $OUT_FILE)"
"$VTLAB" knobs --markdown > "$OUT_FILE" 2>&1
check "... nor vtlab knobs --markdown (docs/knobs.md)" "! grep -q VT_TEST_IGNORED_KNOB $OUT_FILE && ! grep -q VT_TEST_IGNORED_KNOB docs/knobs.md"
check "... which says that bools are 0 or 1" "grep -q 'A bool knob is \`0\`' docs/knobs.md"
expect_exit "VT_TEST_IGNORED_KNOB=1 is still accepted" 0 env VT_TEST_IGNORED_KNOB=1 "$VTLAB" knobs

finish
