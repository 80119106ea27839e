# lib.sh — helpers for the CLI test scripts: `check NAME CMD...` records ok/not ok.
PASS=0; FAIL=0
ok()     { echo "ok - $1"; PASS=$((PASS + 1)); }
not_ok() { echo "not ok - $1: $2"; FAIL=$((FAIL + 1)); }
# expect_exit NAME CODE CMD... : runs CMD, stderr to $ERR, checks the exit status
expect_exit() {
  local name=$1 code=$2; shift 2
  "$@" >"$OUT_FILE" 2>"$ERR"; local rc=$?
  if [ "$rc" -eq "$code" ]; then ok "$name"; else not_ok "$name" "exit $rc, expected $code; stderr: $(head -c 300 "$ERR")"; fi
}
# stderr_has NAME TEXT : the last command's stderr contains TEXT
stderr_has() { if grep -qF -- "$2" "$ERR"; then ok "$1"; else not_ok "$1" "stderr lacks \"$2\": $(head -c 300 "$ERR")"; fi; }
finish() { echo "$PASS passed, $FAIL failed"; [ "$FAIL" -eq 0 ]; }
