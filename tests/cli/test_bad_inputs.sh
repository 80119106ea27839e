#!/usr/bin/env bash
# test_bad_inputs.sh — inputs that used to be accepted wrongly or refused
# with the wrong words (issue 13, items 2, 7, 8 and 9). Every case must be
# exit 2 with a message naming the file (and the line, field or limit), and
# nothing written: no results.db, no output file, no checkpoint.
#
#   NUL bytes and \u0000 escapes: a dataset, an experiment, a claim, a defect,
#     a bench report and a model config (a NUL once cut the text short
#     silently: a run FINISHED on half of the dataset)
#   size limits: a dataset file's bytes, tokens per sequence, sequences,
#     tokens in all, and what a run would hold for the model's vocabulary
#   names longer than LAB_NAME_MAX (48): experiment id, arm, claim, bench id
#   a directory where a file should be, in every parser
#   `logits --tokens` syntax, and `--probes` checked before `--out` is written
#
# Usage (from the repository root): bash tests/cli/test_bad_inputs.sh ./vtlab
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed".
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
PY=/usr/bin/python3
TINY=model/configs/kimi-linear-tiny.json
W=$(mktemp -d /tmp/vtlab-bad-inputs.XXXXXX)
trap 'rm -rf "$W"' EXIT
# the ledgers made here name experiments/ as the shipped claim does: relative to
# the ledger directory's parent, which is this directory (docs/specs.md)
ln -s "$PWD/experiments" "$W/experiments"
OUT_FILE=$W/out; ERR=$W/err

# exp FILE ID DATASET_JSON [ARM] : a one-arm experiment on the tiny synthetic model
exp() {
    cat > "$1" <<JSON
{"id": "$2", "model": {"synth": "$TINY", "seed": 1}, "dataset": $3,
 "top_k": 2, "reference": "${4:-f32}", "arms": [{"name": "${4:-f32}"}], "metrics": ["top1_agreement"]}
JSON
}
# bad_run NAME FILE NEEDLE... : `run FILE` is exit 2, stderr holds every NEEDLE, no database
bad_run() {
    local name=$1 file=$2; shift 2
    rm -f "$W/r.db"
    "$VTLAB" run "$file" --db "$W/r.db" >"$OUT_FILE" 2>"$ERR"; local rc=$?
    local miss=""
    for n in "$@"; do grep -qF -- "$n" "$ERR" || miss="$miss [$n]"; done
    if [ $rc -eq 2 ] && [ -z "$miss" ] && [ ! -e "$W/r.db" ]; then ok "$name"
    else not_ok "$name" "rc=$rc db=$([ -e "$W/r.db" ] && echo yes || echo no) missing:$miss stderr: $(head -c 400 "$ERR")"; fi
}
# bad_cmd NAME NEEDLE CMD... : exit 2 and NEEDLE on stderr
bad_cmd() {
    local name=$1 needle=$2; shift 2
    "$@" >"$OUT_FILE" 2>"$ERR"; local rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$needle" "$ERR"; then ok "$name"
    else not_ok "$name" "rc=$rc, want 2 and \"$needle\"; stderr: $(head -c 400 "$ERR")"; fi
}

# ------------------------------------------------------------ item 2: NUL bytes and \u0000
printf '5 6\n7 8\n\0 9 10\n11 12\n' > "$W/nul.ids"
exp "$W/nul.json" nul '{"file": "'"$W/nul.ids"'"}'
bad_run "dataset file with a NUL byte is refused (was: ran on 2 of 4 sequences)" "$W/nul.json" "nul.ids" "line 3" "NUL byte"

exp "$W/idnul.json" 'ab\u0000cd' '{"inline": [[5, 6]]}'
bad_run "experiment id \"ab\\u0000cd\" is refused (was: recorded as \"ab\")" "$W/idnul.json" "idnul.json: line 1" '\u0000'
exp "$W/armnul.json" armnul '{"inline": [[5, 6]]}' 'f3\u00002'
bad_run "arm name with \\u0000 is refused" "$W/armnul.json" "armnul.json" '\u0000'
exp "$W/tail.json" tail '{"inline": [[5, 6]]}'
printf '\0{"junk": 1}' >> "$W/tail.json"
bad_run "experiment file with a NUL byte after the JSON is refused" "$W/tail.json" "tail.json: line 3" "NUL byte"

# an escaped backslash before u0000 is the six characters \u0000, not a NUL: accepted
cat > "$W/esc.json" <<JSON
{"id": "esc", "notes": "a \\\\u0000 b", "model": {"synth": "$TINY", "seed": 1}, "dataset": {"inline": [[5, 6]]},
 "top_k": 2, "reference": "f32", "arms": [{"name": "f32"}], "metrics": ["top1_agreement"]}
JSON
expect_exit "an escaped backslash followed by u0000 is ordinary text (exit 0)" 0 "$VTLAB" run "$W/esc.json" --db "$W/esc.db"

# the ledger: a claim and a defect
mkdir -p "$W/specs/claims" "$W/specs/defects"
cp specs/claims/*.json "$W/specs/claims/"
cp specs/defects/*.json "$W/specs/defects/"
expect_exit "the shipped ledger copy checks out" 0 "$VTLAB" specs check --specs "$W/specs"
claim=$(ls "$W"/specs/claims/*.json | head -1)
defect=$(ls "$W"/specs/defects/*.json | head -1)
cp "$claim" "$W/claim.bak"; cp "$defect" "$W/defect.bak"
$PY - "$claim" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["arm"]["name"] = c["arm"]["name"] + "\u0000x"
open(sys.argv[1], "w").write(json.dumps(c, indent=2))
PY
bad_cmd "claim with \\u0000 in arm.name is refused" "$(basename "$claim"): line" "$VTLAB" specs check --specs "$W/specs"
cp "$W/claim.bak" "$claim"
printf '\0' >> "$defect"
bad_cmd "defect file with a NUL byte is refused" "$(basename "$defect"): line" "$VTLAB" specs check --specs "$W/specs"
cp "$W/defect.bak" "$defect"

# a bench report
mk_report() { # OUT [python statement on r]
    $PY - "$1" "${2:-pass}" <<'PY'
import json, sys
r = {"format": "vtlab-bench", "version": 1, "code_version": "abc123|dirty=0|gcc 13|-O2",
     "backend": "cpu", "device": "cpu: test", "model": "model/configs/kimi-linear-tiny.json",
     "model_sha256": "a" * 64, "tokens_sha256": "b" * 64, "knobs": {"VT_BACKEND": "cpu"},
     "phases": [{"name": "prefill-t16", "batch": 1, "context": 0, "threads": 1, "tokens": 16, "seconds": 0.5,
                 "flops": 1e9, "bytes": 0, "peak_flops": 1e10, "peak_bytes": 0}]}
exec(sys.argv[2])
open(sys.argv[1], "w").write(json.dumps(r, indent=1))
PY
}
mk_report "$W/rep.json"
expect_exit "a hand-made bench report is recorded" 0 "$VTLAB" record-bench "$W/rep.json" --db "$W/rep.db"
mk_report "$W/repnul.json" 'r["device"] = "cpu: te\u0000st"'
rm -f "$W/b.db"
bad_cmd "bench report with \\u0000 in a string is refused" "repnul.json: line" "$VTLAB" record-bench "$W/repnul.json" --db "$W/b.db"
[ ! -e "$W/b.db" ] && ok "  ... and no database is created" || not_ok "bench \\u0000: database" "created"

# a model config
$PY - "$TINY" "$W/cfgnul.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["hidden_act"] = "silu\u0000gelu"
open(sys.argv[2], "w").write(json.dumps(c, indent=2))
PY
bad_cmd "config with \\u0000 in a string is refused (was: read as \"silu\")" "cfgnul.json: line" \
    "$VTLAB" synth --config "$W/cfgnul.json" --seed 1 --out "$W/m-cfgnul"
[ ! -e "$W/m-cfgnul/model.safetensors" ] && ok "  ... and no checkpoint is written" || not_ok "config \\u0000: checkpoint" "written"
$PY - "$TINY" "$W/cfgraw.json" <<'PY'
import sys
t = open(sys.argv[1]).read().replace('"silu"', '"silu\x00xx"')
open(sys.argv[2], "w").write(t)
PY
bad_cmd "config with a raw NUL inside a string is refused" "cfgraw.json: line" \
    "$VTLAB" synth --config "$W/cfgraw.json" --seed 1 --out "$W/m-cfgraw"

# ------------------------------------------------------------ item 7: size limits
truncate -s 65M "$W/big.ids"
exp "$W/big.json" big '{"file": "'"$W/big.ids"'"}'
bad_run "dataset file over 64 MiB is refused before it is read" "$W/big.json" "big.ids" "more than the limit of 67108864 bytes"
$PY -c 'print(" ".join(["5"] * 65537))' > "$W/long.ids"
exp "$W/long.json" long '{"file": "'"$W/long.ids"'"}'
bad_run "a dataset line of 65537 tokens is refused (was: 1.4 GB RSS)" "$W/long.json" "long.ids line 1 (sequence 0)" "limit of 65536 tokens"
$PY -c 'import sys; sys.stdout.write("5\n" * 1000001)' > "$W/many.ids"
exp "$W/many.json" many '{"file": "'"$W/many.ids"'"}'
bad_run "a dataset file of 1000001 sequences is refused" "$W/many.json" "many.ids line 1000001" "limit of 1000000 sequences"
$PY -c 'import sys; sys.stdout.write(("5 " * 50000 + "\n") * 201)' > "$W/total.ids"
exp "$W/total.json" total '{"file": "'"$W/total.ids"'"}'
bad_run "a dataset file over 10^7 tokens in all is refused" "$W/total.json" "total.ids line 201" "limit of 10000000 tokens in all"
exp "$W/gen.json" gen '{"generate": {"n_sequences": 1000, "length": 10001, "seed": 1}}'
bad_run "a generated dataset over 10^7 tokens is refused" "$W/gen.json" "dataset.generate" "10000000 tokens"
exp "$W/inl.json" inl '{"inline": [['"$($PY -c 'print(",".join(["5"] * 65537))')"']]}'
bad_run "an inline sequence of 65537 tokens is refused" "$W/inl.json" "dataset.inline[0]" "limit of 65536 tokens"
# what a run holds for the tiny model's vocabulary (1024): 150 x 65536 tokens, every position scored
exp "$W/mem.json" mem '{"generate": {"n_sequences": 150, "length": 65536, "seed": 1}}'
bad_run "a dataset whose run would hold over 8 GiB for this vocabulary is refused" "$W/mem.json" "mem.json: dataset" "GiB" "vocab_size 1024"

# ------------------------------------------------------------ item 8: long names
N48=$(printf 'n%.0s' $(seq 48)); N49=${N48}x
exp "$W/id49.json" "$N49" '{"inline": [[5, 6]]}'
bad_run "an experiment id of 49 characters is refused" "$W/id49.json" "id49.json: id:" "is 49 characters" "at most 48"
exp "$W/arm49.json" arm49 '{"inline": [[5, 6]]}' "$N49"
bad_run "an arm name of 49 characters is refused" "$W/arm49.json" "arm49.json: arms[0].name:" "at most 48"
exp "$W/n48.json" "$N48" '{"inline": [[5, 6], [7, 8]]}' "a$(printf 'r%.0s' $(seq 47))"
expect_exit "an experiment id and arm of 48 characters run" 0 "$VTLAB" run "$W/n48.json" --db "$W/n48.db"
"$VTLAB" runs --db "$W/n48.db" >"$OUT_FILE" 2>"$ERR"
grep -qF "$N48" "$OUT_FILE" && ok "  ... and \`vtlab runs\` shows the whole id" || not_ok "runs: 48-char id" "$(head -c 300 "$OUT_FILE")"
mkdir -p "$W/specs49/claims"
$PY - "$claim" "$W/specs49/claims/$N49.json" "$N49" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["id"] = sys.argv[3]
c.setdefault("history", {})["supersedes"] = None; c["history"]["superseded_by"] = None
open(sys.argv[2], "w").write(json.dumps(c, indent=2))
PY
bad_cmd "a claim id of 49 characters is refused" "$N49.json: id:" "$VTLAB" specs check --specs "$W/specs49"
mk_report "$W/replong.json" 'r["model"] = "models/" + "m" * 60'
rm -f "$W/b.db"
bad_cmd "a bench report whose experiment id would be over 48 characters is refused" "limit of 48 characters" \
    "$VTLAB" record-bench "$W/replong.json" --db "$W/b.db"

# ------------------------------------------------------------ item 9: a directory where a file should be
mkdir -p "$W/dir.json" "$W/ids.dir" "$W/specsdir/claims/x.json"
bad_run "experiment path is a directory" "$W/dir.json" "dir.json: is a directory"
exp "$W/dsdir.json" dsdir '{"file": "'"$W/ids.dir"'"}'
bad_run "dataset.file is a directory" "$W/dsdir.json" "ids.dir: is a directory"
bad_cmd "a claim path that is a directory" "x.json: is a directory" "$VTLAB" specs check --specs "$W/specsdir"
rm -f "$W/b.db"
bad_cmd "a bench report path that is a directory" "dir.json: is a directory" "$VTLAB" record-bench "$W/dir.json" --db "$W/b.db"
mkdir -p "$W/mdir/config.json"
bad_cmd "a model config that is a directory" "config.json: config is not a regular file (a directory)" \
    "$VTLAB" validate --model "$W/mdir"

# ------------------------------------------------------------ item 9: --tokens and --probes
"$VTLAB" synth --config "$TINY" --seed 1 --out "$W/m" >/dev/null 2>&1
for t in '5,,17' ',5' '5,' '+5' '-5' '5 x' '5;6' '' ' ' '2147483648' '5,17,'; do
    bad_cmd "logits --tokens '$t' is refused" "--tokens" "$VTLAB" logits --model "$W/m" --tokens "$t" --out "$W/t.bin"
done
[ ! -e "$W/t.bin" ] && ok "  ... and no --out file is written" || not_ok "--tokens: out" "written"
expect_exit "logits --tokens '5, 17 3' (commas and/or blanks) is accepted" 0 \
    "$VTLAB" logits --model "$W/m" --tokens '5, 17 3' --out "$W/t.bin"
echo previous > "$W/o.bin"
bad_cmd "logits --probes in a missing directory is exit 2" "nodir/p.json: cannot create" \
    "$VTLAB" logits --model "$W/m" --tokens 5,17 --out "$W/o.bin" --probes "$W/nodir/p.json"
[ "$(cat "$W/o.bin")" = previous ] && ok "  ... and --out is left as it was (not written first)" \
    || not_ok "--probes fails after --out was written" "$(wc -c < "$W/o.bin") bytes"
ls "$W" | grep -q '\.tmp$' && not_ok "--probes failure: temp files left" "$(ls "$W" | grep tmp)" || ok "  ... and no temp file is left"
bad_cmd "logits --probes naming a directory is exit 2" "is a directory" \
    "$VTLAB" logits --model "$W/m" --tokens 5,17 --out "$W/o.bin" --probes "$W/ids.dir"
[ "$(cat "$W/o.bin")" = previous ] && ok "  ... and --out is left as it was" || not_ok "--probes dir: out" "overwritten"
bad_cmd "logits --out naming a directory is exit 2" "is a directory" \
    "$VTLAB" logits --model "$W/m" --tokens 5,17 --out "$W/ids.dir"
expect_exit "logits --out and --probes both written when both can be" 0 \
    "$VTLAB" logits --model "$W/m" --tokens 5,17 --out "$W/o.bin" --probes "$W/p.json"
[ "$(wc -c < "$W/o.bin")" -eq $((2 * 1024 * 4)) ] && [ -s "$W/p.json" ] && ok "  ... with the logits and the probes" \
    || not_ok "logits + probes" "$(wc -c < "$W/o.bin") bytes"

finish
