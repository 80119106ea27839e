#!/usr/bin/env bash
# make bench: the forward-pass benchmark on the tiny model (and, with
# BENCH_SMALL=1, on the 288M-parameter benchmark config, where GEMMs dominate),
# then the peer mode (tests/bench/peer.py) on the same checkpoint: vtlab's
# prefill against the official implementation when PEER_MODELING names its
# modeling file, else vtlab's figures alone with "peer: not run - <why>".
# Each benchmark's phases are recorded as runs in $BENCH_DB (default
# results.db) through `vtlab record-bench`; BENCH_DB= (empty) skips that.
# docs/bench.md lists every variable and every printed figure; among them the
# batched sweep (8 x 32-token sequences one per forward vs packed into one,
# against T = 256; phases batch-*-tN), which BENCH_BATCH=0 skips.
set -eu
VTLAB=${1:-./vtlab}
BUILD=${BUILD:-build}
DB=${BENCH_DB-results.db}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUSY=; [ "${BENCH_BUSY:-1}" = 1 ] && BUSY=--busy
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
record() { if [ -n "$DB" ] && [ -f "$1" ]; then "$VTLAB" record-bench "$1" --db "$DB"; fi; }
bench() {   # bench NAME CONFIG T
  "$VTLAB" synth --config "$2" --seed 1 --out "$W/$1" >/dev/null
  "$BUILD/bench" "$W/$1" "$3" $BUSY --json "$W/$1.bench.json"
  record "$W/$1.bench.json"
  # the peer never fails the bench: a peer that cannot run says why and exits 0
  if ! "$PY" "$HERE/peer.py" --bench "$BUILD/bench" --model "$W/$1" --T "${PEER_T:-256}" \
       --json "$W/$1.peer.json"; then
    echo "peer: failed (see above); vtlab's figures above stand"
  fi
  record "$W/$1.peer.json"
}
bench tiny model/configs/kimi-linear-tiny.json 128
if [ "${BENCH_SMALL:-0}" = 1 ]; then
  bench small model/configs/kimi-linear-small.json 256
fi
# The GEMM kernels against OpenBLAS sgemm and a STREAM triad (tests/bench/gemm_bench.c).
"$BUILD/gemm_bench" --rounds "${GEMM_BENCH_ROUNDS:-5}"
# The engine protocol's overhead against the builtin path (issue 11).
bash tests/bench/engine_overhead.sh "$VTLAB" 3
