#!/usr/bin/env bash
# make bench: the forward-pass benchmark on the tiny model (and, with
# BENCH_SMALL=1, on the 288M-parameter benchmark config, where GEMMs dominate).
set -eu
VTLAB=${1:-./vtlab}
BUILD=${BUILD:-build}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out "$W/tiny" >/dev/null
"$BUILD/bench" "$W/tiny" 128
if [ "${BENCH_SMALL:-0}" = 1 ]; then
  "$VTLAB" synth --config model/configs/kimi-linear-small.json --seed 1 --out "$W/small" >/dev/null
  "$BUILD/bench" "$W/small" 256
fi
