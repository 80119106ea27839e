#!/usr/bin/env bash
# test_weights_load.sh — the three ways of holding the weights
# (VTLAB_WEIGHTS, model/forward.c) give the same bits: the default (read into
# anonymous memory, matrices rearranged into panels, tensor.h), map (the
# file's mapping, rows as in the file) and load (anonymous memory, rows).
# Logits and greedy decoding of the tiny model (its kv_a_proj has 80 rows:
# two panels of 32 and a row tail of 16; b_proj 4 rows, no panel), f32 and bf16,
# one file and two shards with an index; a value other than panel/map/load is
# refused (exit 2, the variable named, no output file). And a long prefill in
# pieces (VTLAB_PREFILL_PIECE, the default 512 tokens) gives the bits of one
# pass (0); a value that is not a token count is refused the same way.
#
# Usage (from the repository root): bash tests/cli/test_weights_load.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-weights-load.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset VTLAB_WEIGHTS VTLAB_PREFILL_PIECE
TOK=$(/usr/bin/python3 -c "print(','.join(str(3 + (i * 7919) % 500) for i in range(40)))")

# reshard DIR: DIR/model.safetensors -> two shards and an index (same tensors, same bytes)
reshard() {
  /usr/bin/python3 - "$1" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
raw = open(os.path.join(d, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
hdr.pop("__metadata__", None)
names = sorted(hdr); wmap = {}
for i, part in enumerate([names[:len(names) // 2], names[len(names) // 2:]]):
    fname = "model-%05d-of-00002.safetensors" % (i + 1)
    h, blob = {}, b""
    for k in part:
        b, e = hdr[k]["data_offsets"]
        h[k] = {"dtype": hdr[k]["dtype"], "shape": hdr[k]["shape"], "data_offsets": [len(blob), len(blob) + e - b]}
        blob += data[b:e]; wmap[k] = fname
    text = json.dumps(h, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    open(os.path.join(d, fname), "wb").write(struct.pack("<Q", len(text)) + text + blob)
os.remove(os.path.join(d, "model.safetensors"))
json.dump({"metadata": {}, "weight_map": wmap}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
PY
}

for dt in f32 bf16; do
  "$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 5 --dtype $dt --out "$W/m-$dt" >/dev/null
  cp -r "$W/m-$dt" "$W/s-$dt" && reshard "$W/s-$dt"
  for m in m s; do
    what=$([ $m = m ] && echo "one file" || echo "two shards")
    "$VTLAB" logits --model "$W/$m-$dt" --tokens "$TOK" --out "$W/panel.bin" >/dev/null 2>"$ERR"
    a=$("$VTLAB" generate --model "$W/$m-$dt" --tokens 5,17,3 -n 12 2>&1)
    for mode in map load; do
      VTLAB_WEIGHTS=$mode "$VTLAB" logits --model "$W/$m-$dt" --tokens "$TOK" --out "$W/$mode.bin" >/dev/null 2>>"$ERR"
      if [ -s "$W/panel.bin" ] && cmp -s "$W/panel.bin" "$W/$mode.bin"; then
        ok "$dt, $what: logits with VTLAB_WEIGHTS=$mode are byte-identical to the default's panels"
      else not_ok "$dt $what logits $mode" "$(cmp "$W/panel.bin" "$W/$mode.bin" 2>&1; head -c 300 "$ERR")"; fi
      b=$(VTLAB_WEIGHTS=$mode "$VTLAB" generate --model "$W/$m-$dt" --tokens 5,17,3 -n 12 2>&1)
      if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "$dt, $what: greedy decoding identical with VTLAB_WEIGHTS=$mode"
      else not_ok "$dt $what generate $mode" "panels: $a / $mode: $b"; fi
    done
  done
done
# the shards' files really were the ones read (not a leftover single file)
if [ ! -e "$W/s-f32/model.safetensors" ] && [ -f "$W/s-f32/model.safetensors.index.json" ]; then ok "the sharded copy has only shards and an index"
else not_ok "reshard" "$(ls "$W/s-f32")"; fi

VTLAB_WEIGHTS=mmap expect_exit "VTLAB_WEIGHTS=mmap is refused with exit 2" 2 \
  "$VTLAB" logits --model "$W/m-f32" --tokens 5,17 --out "$W/bad.bin"
stderr_has "the message names the variable and the accepted values" "VTLAB_WEIGHTS=mmap: expected panel (the default), map or load"
if [ ! -e "$W/bad.bin" ]; then ok "no output file after the refusal"; else not_ok "output after refusal" "$W/bad.bin exists"; fi
VTLAB_WEIGHTS=panel expect_exit "VTLAB_WEIGHTS=panel (the default, spelled out) is accepted" 0 \
  "$VTLAB" logits --model "$W/m-f32" --tokens 5,17 --out "$W/ok.bin"

# 1100 tokens: the default pieces (512 asked; the tiny model's 4 heads need at
# least 512, attn.h) are 512 and the last 588; VTLAB_PREFILL_PIECE=0 is one pass
LONG=$(/usr/bin/python3 -c "print(','.join(str(3 + (i * 7919) % 1000) for i in range(1100)))")
"$VTLAB" logits --model "$W/m-f32" --tokens "$LONG" --out "$W/pieces.bin" >/dev/null 2>"$ERR"
VTLAB_PREFILL_PIECE=0 "$VTLAB" logits --model "$W/m-f32" --tokens "$LONG" --out "$W/onepass.bin" >/dev/null 2>>"$ERR"
if [ -s "$W/pieces.bin" ] && cmp -s "$W/pieces.bin" "$W/onepass.bin"; then
  ok "1100 tokens: logits of the prefill in pieces are byte-identical to one pass"
else not_ok "prefill pieces" "$(cmp "$W/pieces.bin" "$W/onepass.bin" 2>&1 | head -1); $(head -c 300 "$ERR")"; fi
VTLAB_PREFILL_PIECE=1k expect_exit "VTLAB_PREFILL_PIECE=1k is refused with exit 2" 2 \
  "$VTLAB" logits --model "$W/m-f32" --tokens 5,17 --out "$W/bad2.bin"
stderr_has "the message names the variable and what it expects" "VTLAB_PREFILL_PIECE=1k: expected a token count"
if [ ! -e "$W/bad2.bin" ]; then ok "no output file after that refusal"; else not_ok "output after refusal" "$W/bad2.bin exists"; fi
finish
