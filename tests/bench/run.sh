#!/usr/bin/env bash
# make bench: the forward-pass benchmark on the tiny model (and, with
# BENCH_SMALL=1, on the 288M-parameter benchmark config, where GEMMs dominate).
# Each benchmark's throughput phases are recorded as runs in $BENCH_DB
# (default results.db) through `vtlab record-bench`; BENCH_DB= (empty) skips that.
set -eu
VTLAB=${1:-./vtlab}
BUILD=${BUILD:-build}
DB=${BENCH_DB-results.db}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
bench() {   # bench NAME CONFIG T
  "$VTLAB" synth --config "$2" --seed 1 --out "$W/$1" >/dev/null
  "$BUILD/bench" "$W/$1" "$3" --json "$W/$1.bench.json"
  if [ -n "$DB" ]; then "$VTLAB" record-bench "$W/$1.bench.json" --db "$DB"; fi
}
bench tiny model/configs/kimi-linear-tiny.json 128
if [ "${BENCH_SMALL:-0}" = 1 ]; then
  bench small model/configs/kimi-linear-small.json 256
fi
# The GEMM kernels against OpenBLAS sgemm and a STREAM triad (tests/bench/gemm_bench.c).
"$BUILD/gemm_bench" --rounds "${GEMM_BENCH_ROUNDS:-5}"
# The engine protocol's overhead against the builtin path (issue 11).
bash tests/bench/engine_overhead.sh "$VTLAB" 3
