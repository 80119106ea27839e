#!/usr/bin/env bash
# test_bad_checkpoints.sh — `vtlab validate` refuses corrupt checkpoints the
# way the design promises: exit status exactly 2 and a message on stderr that
# names the file and, where there is one, the tensor.
#
# Why a CLI test when the reader has unit tests: the unit tests prove the
# library returns VT_EINPUT with the right text for hand-made files; only
# corrupting a real `vtlab synth` checkpoint and running the binary proves
# that the whole path (reader, model validation, main) refuses it, maps it to
# exit 2 and prints the message. A corrupt checkpoint that loaded would feed
# garbage weights into every experiment run on it.
#
# Each case copies the good tiny model and edits model.safetensors with
# Python's stdlib (struct + json): the header is re-serialised and re-padded,
# the data section is kept byte for byte, so each case has exactly one defect.
#
# Usage (from the repository root): bash tests/cli/test_bad_checkpoints.sh ./vtlab
# Prints "ok - NAME" / "not ok - NAME: why" per case and "N passed, M failed";
# exits 1 if any case failed. KEEP_TMP=1 keeps the scratch directory (its
# *.stderr files hold each case's message) for debugging.
set -u

VTLAB=${1:-./vtlab}
TINY=model/configs/kimi-linear-tiny.json
PY=/usr/bin/python3

if [ ! -x "$VTLAB" ]; then echo "not ok - setup: $VTLAB is not an executable"; echo "0 passed, 1 failed"; exit 1; fi
if [ ! -f "$TINY" ]; then echo "not ok - setup: $TINY not found (run from the repository root)"; echo "0 passed, 1 failed"; exit 1; fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/vt_bad_ckpts.XXXXXX")
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT

pass=0
fail=0
ok()     { echo "ok - $1"; pass=$((pass + 1)); }
not_ok() { echo "not ok - $1: $2"; fail=$((fail + 1)); }

GOOD="$TMP/good"
if ! "$VTLAB" synth --config "$TINY" --seed 1 --out "$GOOD" >"$TMP/synth.stdout" 2>"$TMP/synth.stderr" \
   || [ ! -f "$GOOD/model.safetensors" ]; then
    not_ok "synth" "vtlab synth failed: $(head -c 400 "$TMP/synth.stderr" | tr '\n' ' ')"
    echo "$pass passed, $fail failed"
    exit 1
fi
if "$VTLAB" validate --model "$GOOD" >"$TMP/good.stdout" 2>"$TMP/good.stderr"; then
    ok "good model validates"
else
    not_ok "good model validates" "exit status $?; stderr: $(head -c 400 "$TMP/good.stderr" | tr '\n' ' ')"
fi

# corrupt NAME MODE [ARG]: writes TMP/NAME/ (config.json + a corrupted
# model.safetensors) and prints the tensor names the error must mention, one
# per line (none when the defect is in no tensor). Python exits non-zero when
# the good file does not look as the case expects (so a case cannot pass
# vacuously after the synth layout changes).
corrupt() {
    local name=$1 mode=$2 arg=${3:-}
    mkdir -p "$TMP/$name"
    cp "$GOOD/config.json" "$TMP/$name/config.json"
    "$PY" - "$GOOD/model.safetensors" "$TMP/$name/model.safetensors" "$mode" "$arg" <<'EOF'
import json, struct, sys
src, dst, mode, arg = sys.argv[1:5]
raw = open(src, "rb").read()
(hlen,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + hlen])
data = raw[8 + hlen:]
tensors = [(k, v) for k, v in hdr.items() if k != "__metadata__"]

def write_header(h, d=data):
    text = json.dumps(h, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(text)) + text + d)

def need(name):
    if name not in hdr:
        sys.exit("tensor %s is not in the good checkpoint" % name)
    return hdr[name]

if mode == "truncate":              # cut in the middle of the data section
    cut = len(data) // 2
    open(dst, "wb").write(raw[:8 + hlen + cut])
    print(next(k for k, v in tensors if v["data_offsets"][1] > cut))
elif mode == "hlen_past_end":       # length field larger than the rest of the file
    open(dst, "wb").write(struct.pack("<Q", len(raw) - 8 + 1) + raw[8:])
elif mode == "hlen_huge":
    open(dst, "wb").write(struct.pack("<Q", 1 << 40) + raw[8:])
elif mode == "not_json":            # same length, first byte no longer '{'
    open(dst, "wb").write(raw[:8] + b"#" + raw[9:])
elif mode == "overlap":             # two same-sized tensors given one byte range
    by_size = {}
    for k, v in tensors:
        b, e = v["data_offsets"]
        if e > b:
            by_size.setdefault(e - b, []).append(k)
    a, b = next(ks for ks in by_size.values() if len(ks) >= 2)[:2]
    hdr[b]["data_offsets"] = list(hdr[a]["data_offsets"])
    write_header(hdr)
    print(a); print(b)
elif mode == "out_of_range":        # the last tensor moved past the end of the data
    k, v = max(tensors, key=lambda kv: kv[1]["data_offsets"][1])
    v["data_offsets"] = [o + len(data) for o in v["data_offsets"]]
    write_header(hdr)
    print(k)
elif mode == "shape_bytes":         # one more row than the byte range holds
    v = need(arg)
    v["shape"][0] += 1
    write_header(hdr)
    print(arg)
elif mode == "dtype":
    need(arg)["dtype"] = "F64"
    write_header(hdr)
    print(arg)
elif mode == "drop":                # tensor removed; its bytes stay as a gap
    need(arg)
    del hdr[arg]
    write_header(hdr)
    print(arg)
elif mode == "shard_drop":          # resharded in two files with an index; the tensor is in neither
    import os
    need(arg)
    d = os.path.dirname(dst)
    names = sorted(k for k, v in tensors if k != arg)
    halves = [names[:len(names) // 2], names[len(names) // 2:]]
    wmap = {}
    for i, part in enumerate(halves):
        fname = "model-%05d-of-00002.safetensors" % (i + 1)
        h, blob = {}, b""
        for k in part:
            b, e = hdr[k]["data_offsets"]
            h[k] = {"dtype": hdr[k]["dtype"], "shape": hdr[k]["shape"], "data_offsets": [len(blob), len(blob) + e - b]}
            blob += data[b:e]
            wmap[k] = fname
        text = json.dumps(h, separators=(",", ":")).encode()
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
        open(os.path.join(d, fname), "wb").write(struct.pack("<Q", len(text)) + text + blob)
    json.dump({"metadata": {}, "weight_map": wmap}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    print(arg)
elif mode == "reshape":             # same byte count, wrong shape for the model
    v = need(arg)
    if len(v["shape"]) != 1 or v["shape"][0] % 2:
        sys.exit("%s has shape %s, expected one even dimension" % (arg, v["shape"]))
    v["shape"] = [2, v["shape"][0] // 2]
    write_header(hdr)
    print(arg)
elif mode == "extra_evil":          # an extra zero-byte tensor whose name holds a newline and an escape
    end = max(v["data_offsets"][1] for k, v in hdr.items() if k != "__metadata__")
    hdr["evil\nline2\x1b[31m"] = {"dtype": "F32", "shape": [0], "data_offsets": [end, end]}
    write_header(hdr)
else:
    sys.exit("unknown mode " + mode)
EOF
}

# run_case NAME MODE [ARG] [PHRASE] [FILE]: corrupts, validates, and checks exit
# status 2 and that stderr names the file (FILE, default model.safetensors),
# every tensor corrupt() printed, and PHRASE when given.
run_case() {
    local name=$1 mode=$2 arg=${3:-} phrase=${4:-} file=${5:-model.safetensors}
    local dir="$TMP/$name" errf="$TMP/$name.stderr" tensors
    if ! tensors=$(corrupt "$name" "$mode" "$arg" 2>"$TMP/$name.py.stderr"); then
        not_ok "$name" "could not build the case: $(tr '\n' ' ' <"$TMP/$name.py.stderr")"
        return
    fi
    "$VTLAB" validate --model "$dir" >"$TMP/$name.stdout" 2>"$errf"
    local rc=$?
    local why="" t
    if [ "$rc" -ne 2 ]; then
        why="exit status $rc, expected 2"
    elif ! grep -qF -- "$dir/$file" "$errf"; then
        why="stderr does not name the file $dir/$file"
    elif [ -n "$phrase" ] && ! grep -qF -- "$phrase" "$errf"; then
        why="stderr does not say '$phrase'"
    else
        while IFS= read -r t; do
            [ -z "$t" ] && continue
            if ! grep -qF -- "$t" "$errf"; then why="stderr does not name tensor $t"; break; fi
        done <<<"$tensors"
    fi
    if [ -z "$why" ]; then
        ok "$name"
    else
        not_ok "$name" "$why; stderr: $(head -c 400 "$errf" | tr '\n' ' ')"
    fi
}

run_case truncated_file        truncate      ""                                            "truncated"
run_case header_length_past_end hlen_past_end ""                                           "past the end"
run_case header_length_huge    hlen_huge     ""                                            "limit"
run_case header_not_json       not_json      ""                                            "not valid JSON"
run_case overlapping_offsets   overlap       ""                                            "overlap"
run_case out_of_range_offsets  out_of_range  ""                                            "past the end"
run_case shape_byte_mismatch   shape_bytes   model.embed_tokens.weight                     "bytes"
run_case unknown_dtype         dtype         model.layers.0.input_layernorm.weight         "F64"
run_case missing_tensor        drop          model.layers.1.block_sparse_moe.gate.weight
# a sharded checkpoint lacking a tensor: the index is what lists the tensors, so it is named
run_case sharded_missing_tensor shard_drop   model.layers.1.block_sparse_moe.gate.weight "missing" \
         model.safetensors.index.json
run_case wrong_shape           reshape       model.norm.weight
run_case extra_tensor_escaped  extra_evil    ""                                            'evil\x0aline2\x1b[31m'
# an untrusted name must not break the one-line message
if [ "$(wc -l <"$TMP/extra_tensor_escaped.stderr")" -eq 1 ]; then ok "extra tensor: the message stays one line"
else not_ok "extra tensor: one line" "$(cat -A "$TMP/extra_tensor_escaped.stderr" | head -3)"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
