#!/usr/bin/env bash
# test_gemm_isa.sh — the whole forward pass gives the same bytes whichever
# kernels compute its products (gemm.h's contract: one FMA chain per element):
# VTLAB_GEMM_ISA=scalar (the reference loops) and =avx2 (the kernels of a CPU
# without AVX-512, where this CPU has AVX2) against the default AVX-512
# kernels, and VT_THREADS=1 against 2, on the tiny model in f32 and bf16 with
# 64 tokens (so the chunked KDA and blocked attention run on those products).
#
# Usage (from the repository root): bash tests/cli/test_gemm_isa.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-gemm-isa.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
TOK=$(/usr/bin/python3 -c "print(','.join(str(3 + (i * 7919) % 500) for i in range(64)))")
for dt in f32 bf16; do
  "$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 3 --dtype $dt --out "$W/m-$dt" >/dev/null
  "$VTLAB" logits --model "$W/m-$dt" --tokens "$TOK" --out "$W/avx-$dt.bin" >/dev/null 2>"$ERR"
  VTLAB_GEMM_ISA=scalar "$VTLAB" logits --model "$W/m-$dt" --tokens "$TOK" --out "$W/scalar-$dt.bin" >/dev/null 2>>"$ERR"
  VT_THREADS=1 "$VTLAB" logits --model "$W/m-$dt" --tokens "$TOK" --out "$W/t1-$dt.bin" >/dev/null 2>>"$ERR"
  VTLAB_GEMM_ISA=avx2 "$VTLAB" logits --model "$W/m-$dt" --tokens "$TOK" --out "$W/avx2-$dt.bin" >/dev/null 2>>"$ERR"
  if [ -s "$W/avx-$dt.bin" ] && cmp -s "$W/avx-$dt.bin" "$W/scalar-$dt.bin"; then
    ok "$dt weights: scalar reference kernels and AVX-512 kernels give byte-identical logits"
  else not_ok "$dt scalar vs avx512" "$(cmp "$W/avx-$dt.bin" "$W/scalar-$dt.bin" 2>&1; cat "$ERR")"; fi
  if [ -s "$W/t1-$dt.bin" ] && cmp -s "$W/avx-$dt.bin" "$W/t1-$dt.bin"; then
    ok "$dt weights: VT_THREADS=1 and the default thread count give byte-identical logits"
  else not_ok "$dt threads" "$(cmp "$W/avx-$dt.bin" "$W/t1-$dt.bin" 2>&1)"; fi
  if [ -s "$W/avx2-$dt.bin" ] && cmp -s "$W/avx-$dt.bin" "$W/avx2-$dt.bin"; then
    ok "$dt weights: VTLAB_GEMM_ISA=avx2 and the default kernels give byte-identical logits"
  else not_ok "$dt avx2" "$(cmp "$W/avx-$dt.bin" "$W/avx2-$dt.bin" 2>&1; cat "$ERR")"; fi
done
finish
