#!/usr/bin/env bash
# test_peer_contention.sh - the contention table's peer rows end to end (make bench-test;
# by hand: BUILD=build bash tests/bench/test_peer_contention.sh ./vtlab). A short pass on a
# synthesised tiny checkpoint (T=64, 3 rounds, patterns quiet and steady1) with
# tests/bench/standin_modeling.py as PEER_MODELING: a stand-in for the official modeling
# file (NOT the official peer), so that the plumbing is tested where transformers cannot be.
# When python3-torch is missing it says "skip - ..." and "0 passed, 0 failed, 1 skipped":
# skipped, never passed. Not part of `make test` (torch is big).
# Checks: the peer's processes come up on 1 and on all cores (threads read back), its logits
# agree with vtlab's, a "+peer" row under each pattern (its tok/s, its ratio, vtlab default
# over peer default) and the closing range, its phases recorded by vtlab record-bench, no
# peer process left; "peer not run: PEER_MODELING not set" without it (and no peer phase),
# "peer not run: ..." for a bogus file; a peer that computes something else flagged
# MISMATCH; a peer that dies in the rounds: its later patterns "not run in this pattern",
# the bench still exit 0; and make bench-contention's wiring (PEER_MODELING passed, phases
# recorded).
set -u
VTLAB=${1:-./vtlab}
case $VTLAB in /*) ;; *) VTLAB=$PWD/$VTLAB ;; esac
NAME=test_peer_contention
PY=${BENCH_PEER_PYTHON:-/usr/bin/python3}
. "$(dirname "${BASH_SOURCE[0]}")/peer_test_lib.sh"
NP=$(nproc)
cont() {   # cont [ENV=VALUE ...]: the short contention pass, its output in $OUT, its status in $W/rc
  rm -f "$W/c.json"
  env BENCH_CONTENTION_ROUNDS=3 BENCH_PEER_PY="$HERE/peer.py" BENCH_PEER_PYTHON="$PY" "$@" \
    "$BENCH" "$W/tiny" 64 --json "$W/c.json" --contention quiet,steady1 >"$OUT" 2>&1
  echo $? >"$W/rc"
}
PEERROW='^  \+peer +the peer \(PEER_MODELING\), prefill +[0-9.]+ +[0-9.]+ +[0-9.]+ \| vtlab def / peer def [0-9.]+$'
delta_ok() {   # the printed max |delta| is a number <= 1e-4
  "$PY" - "$OUT" <<'PYEOF'
import re, sys
m = re.search(r"^peer: logits max \|delta\| vs vtlab = ([0-9.e+-]+) ", open(sys.argv[1]).read(), re.M)
sys.exit(0 if m and float(m.group(1)) <= 1e-4 else 1)
PYEOF
}
recorded() {   # the report's runs, as vtlab record-bench stores them, in $W/rec
  rm -f "$W/r.db"
  "$VTLAB" record-bench "$W/c.json" --db "$W/r.db" >"$W/rec" 2>&1
}
# no python process of ours may be left: peer.py --serve-peer on this run's checkpoint
no_peer_left() { ! pgrep -f "serve-peer --model $W/tiny" >/dev/null; }

# 1. the stand-in as the peer
cont PEER_MODELING="$STANDIN"
check "with the peer: exit 0" '[ "$(cat $W/rc)" = 0 ]'
check "the peer's processes on 1 and $NP threads, torch and OpenBLAS read back" \
  'grep -Eq "^  \[peer, 1 thread\] peer: threads: torch 1, OpenBLAS 1 " "$OUT" &&
   grep -Eq "^  \[peer, $NP threads?\] peer: threads: torch $NP, OpenBLAS $NP " "$OUT"'
check "the peer's logits agree with vtlab's (max |delta| printed, <= 1e-4)" 'grep -q "agree within" "$OUT" && delta_ok'
check "the header says what the peer rows are" 'grep -q "^peer: PEER_MODELING=$STANDIN in two processes of its own" "$OUT"'
check "a +peer row under each of the 2 patterns" \
  '[ "$(grep -Ec "$PEERROW" "$OUT")" = 2 ] && grep -A1 "^  quiet " "$OUT" | grep -Eq "$PEERROW" &&
   grep -A1 "^  steady1 " "$OUT" | grep -Eq "$PEERROW"'
check "the closing line gives vtlab default / peer default over the patterns" \
  'grep -Eq "^contention: vtlab default / peer default [0-9.]+ to [0-9.]+ over the patterns$" "$OUT"'
peer_phases() {   # every pattern's peer phases, 1 and $NP threads, are among the recorded runs
  local p t
  for p in quiet steady1; do for t in 1 "$NP"; do grep -q "cont-$p-peer-prefill-t$t " "$W/rec" || return 1; done; done
}
check "record-bench stores the peer's phases, 1 and $NP threads, each pattern" \
  'recorded && peer_phases && grep -q "cont-quiet-prefill-t1 " "$W/rec"'
check "no peer process left after the bench" 'no_peer_left'

# 2. no peer: said, never silent; nothing recorded for it
cont PEER_MODELING=
check "PEER_MODELING unset: 'peer not run: PEER_MODELING not set', exit 0, vtlab's rows" \
  '[ "$(cat $W/rc)" = 0 ] && grep -q "^peer not run: PEER_MODELING not set" "$OUT" && grep -q "^  steady1 " "$OUT" &&
   ! grep -q "^  +peer" "$OUT" && ! grep -q "peer-prefill" "$W/c.json"'
cont PEER_MODELING="$W/no/such/modeling_kimi_linear.py"
check "a bogus PEER_MODELING: 'peer not run: ... no such file', exit 0" \
  '[ "$(cat $W/rc)" = 0 ] && grep -q "^peer not run: PEER_MODELING=$W/no/such/modeling_kimi_linear.py: no such file" "$OUT" &&
   grep -q "^  quiet " "$OUT" && ! grep -q "^  +peer" "$OUT"'

# 3. a peer that computes something else, and one that dies in the rounds
cat >"$W/off_modeling.py" <<PYEOF
import os, sys; sys.path.insert(0, "$HERE")
from standin_modeling import KimiLinearConfig, KimiLinearForCausalLM as _Base
CALLS = [0]
class KimiLinearForCausalLM(_Base):
    def forward(self, input_ids, **kw):
        CALLS[0] += 1
        if CALLS[0] > int(os.environ.get("TEST_PEER_DIE_AFTER", "1000000")):
            raise RuntimeError("planted: the peer fails on call %d" % CALLS[0])
        out = _Base.forward(self, input_ids, **kw)
        out.logits = out.logits + float(os.environ.get("TEST_PEER_OFFSET", "0"))
        return out
PYEOF
cont PEER_MODELING="$W/off_modeling.py" TEST_PEER_OFFSET=0.01
check "a peer off by 0.01: MISMATCH, and the closing line warns" \
  '[ "$(cat $W/rc)" = 0 ] && grep -q "^peer: logits max |delta| vs vtlab = .*MISMATCH" "$OUT" &&
   grep -q "WARNING: the peer.s logits disagree with vtlab.s" "$OUT"'
# each peer: its first prefill (logits check or warm-up), then one per round: the 5th call is
# the steady1 pattern's first round
cont PEER_MODELING="$W/off_modeling.py" TEST_PEER_DIE_AFTER=4
check "a peer that fails in the rounds: quiet's row, steady1 'not run in this pattern', exit 0" \
  '[ "$(cat $W/rc)" = 0 ] && grep -A1 "^  quiet " "$OUT" | grep -Eq "$PEERROW" &&
   grep -A1 "^  steady1 " "$OUT" | grep -q "^  +peer    not run in this pattern: the peer stopped answering" &&
   grep -q "planted: the peer fails on call 5" "$OUT" && grep -q "^contention: lowest ratio" "$OUT"'
check "... and only the quiet pattern's peer phases are recorded" \
  'recorded && grep -q "cont-quiet-peer-prefill-t1 " "$W/rec" && ! grep -q "cont-steady1-peer-prefill" "$W/rec" &&
   grep -q "cont-steady1-prefill-t1 " "$W/rec"'
check "no peer process left after it" 'no_peer_left'

# 4. make bench-contention's wiring: PEER_MODELING reaches the bench, the phases are recorded
make --no-print-directory BUILD="$BUILD" bench-contention CONTENTION_CONFIG=model/configs/kimi-linear-tiny.json \
  CONTENTION_T=64 BENCH_CONTENTION=quiet BENCH_CONTENTION_ROUNDS=2 BENCH_DB="$W/make.db" \
  PEER_MODELING="$STANDIN" >"$OUT" 2>&1; echo $? >"$W/rc"
check "make bench-contention PEER_MODELING=...: a +peer row, its phases recorded" \
  '[ "$(cat $W/rc)" = 0 ] && grep -Eq "$PEERROW" "$OUT" && grep -q "cont-quiet-peer-prefill-t1 " "$OUT"'

echo "$NAME: $pass passed, $fail failed, 0 skipped"
[ "$fail" -eq 0 ]
