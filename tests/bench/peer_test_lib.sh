# peer_test_lib.sh — what the peer-mode tests share (sourced by test_peer_mode.sh
# and test_peer_contention.sh after they set NAME, PY and VTLAB): the counters and
# check(), the skip when python3-torch is missing (skipped, never passed), the
# build check, the work directory $W with $OUT, and the tiny checkpoint $W/tiny.
BUILD=${BUILD:-build}
BENCH=$PWD/$BUILD/bench
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STANDIN=$HERE/standin_modeling.py
pass=0 fail=0
ok()    { echo "ok - $*"; pass=$((pass + 1)); }
notok() { echo "not ok - $*"; fail=$((fail + 1)); }
check() { if eval "$2"; then ok "$1"; else notok "$1"; sed 's/^/#   /' "$OUT"; fi; }

if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "skip - $NAME: python3-torch is not installed in $PY (apt-get install python3-torch, or make deps-peer)"
  echo "$NAME: 0 passed, 0 failed, 1 skipped"
  exit 0
fi
if [ ! -x "$BENCH" ] || [ ! -x "$VTLAB" ]; then echo "not ok - build $BENCH and $VTLAB first (make vtlab $BUILD/bench)"; exit 1; fi
W=$(mktemp -d "${TMPDIR:-/tmp}/$NAME.XXXXXX"); trap 'rm -rf "$W"' EXIT
OUT=$W/out
"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out "$W/tiny" >/dev/null || { echo "not ok - synth"; exit 1; }
