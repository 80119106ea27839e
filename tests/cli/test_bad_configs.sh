#!/usr/bin/env bash
# test_bad_configs.sh — `vtlab synth` refuses malformed configs the way the
# design promises: exit status exactly 2, a message on stderr that names the
# file and the field, and no checkpoint left behind.
#
# Why a CLI test when the parser has unit tests: the unit tests prove the
# library returns VT_EINPUT with the right text; only running the binary
# proves that main maps it to exit 2, prints it, and refuses before writing
# DIR/model.safetensors (a half-written model from a bad config would be
# picked up by the next experiment as if it were real).
#
# Usage (from the repository root): bash tests/cli/test_bad_configs.sh ./vtlab
# Prints "ok - NAME" / "not ok - NAME: why" per case and "N passed, M failed";
# exits 1 if any case failed.
set -u

VTLAB=${1:-./vtlab}
TINY=model/configs/kimi-linear-tiny.json
PY=/usr/bin/python3

if [ ! -x "$VTLAB" ]; then echo "not ok - setup: $VTLAB is not an executable"; echo "0 passed, 1 failed"; exit 1; fi
if [ ! -f "$TINY" ]; then echo "not ok - setup: $TINY not found (run from the repository root)"; echo "0 passed, 1 failed"; exit 1; fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/vt_bad_configs.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# Writes TMP/NAME.json: the tiny config with one edit applied by Python's json
# (EDIT is a Python statement on `c`), or the raw text in RAW when given.
make_variant() {
    local name=$1 edit=$2
    "$PY" - "$TINY" "$TMP/$name.json" "$edit" <<'EOF'
import json, sys
src, dst, edit = sys.argv[1], sys.argv[2], sys.argv[3]
c = json.load(open(src))
exec(edit)
json.dump(c, open(dst, "w"), indent=2)
EOF
}

pass=0
fail=0

# run_case NAME FIELD_SUBSTRING: runs synth on TMP/NAME.json and checks the
# exit status, that stderr names the file and FIELD_SUBSTRING, and that no
# model.safetensors was written.
run_case() {
    local name=$1 field=$2
    local cfg="$TMP/$name.json" out="$TMP/out-$name" errf="$TMP/$name.stderr"
    "$VTLAB" synth --config "$cfg" --seed 1 --out "$out" >"$TMP/$name.stdout" 2>"$errf"
    local rc=$?
    local why=""
    if [ "$rc" -ne 2 ]; then
        why="exit status $rc, expected 2"
    elif ! grep -qF -- "$cfg" "$errf"; then
        why="stderr does not name the file $cfg"
    elif ! grep -qF -- "$field" "$errf"; then
        why="stderr does not name '$field'"
    elif [ -e "$out/model.safetensors" ]; then
        why="$out/model.safetensors was created"
    fi
    if [ -z "$why" ]; then
        echo "ok - $name"
        pass=$((pass + 1))
    else
        echo "not ok - $name: $why; stderr: $(head -c 400 "$errf" | tr '\n' ' ')"
        fail=$((fail + 1))
    fi
}

make_variant missing_field 'del c["num_experts"]'
run_case missing_field "field num_experts: missing"

make_variant missing_nested_field 'del c["linear_attn_config"]["head_dim"]'
run_case missing_nested_field "field linear_attn_config.head_dim: missing"

make_variant overlapping_layer_lists 'c["linear_attn_config"]["full_attn_layers"] = [4, 8, 5]'
run_case overlapping_layer_lists "layer 5 is in both kda_layers and full_attn_layers"

make_variant gap_in_layer_lists 'c["linear_attn_config"]["kda_layers"] = [1, 2, 3, 6, 7]'
run_case gap_in_layer_lists "layer 5 is in neither kda_layers nor full_attn_layers"

make_variant out_of_range_layer 'c["linear_attn_config"]["full_attn_layers"] = [4, 9]'
run_case out_of_range_layer "field linear_attn_config.full_attn_layers: layer 9 is out of range"

make_variant topk_more_than_experts 'c["num_experts_per_token"] = c["num_experts"] + 1'
run_case topk_more_than_experts "field num_experts_per_token"

make_variant wrong_type 'c["hidden_size"] = "abc"'
run_case wrong_type 'field hidden_size: expected a positive integer, got "abc"'

make_variant non_integral 'c["moe_intermediate_size"] = 96.5'
run_case non_integral "field moe_intermediate_size: expected a positive integer"

make_variant q_lora_rank 'c["q_lora_rank"] = 1536'
run_case q_lora_rank "field q_lora_rank"

make_variant wrong_model_type 'c["model_type"] = "deepseek_v3"'
run_case wrong_model_type "field model_type"

printf '{"model_type": "kimi_linear", "vocab_size": ' >"$TMP/not_json.json"
run_case not_json "not valid JSON"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
