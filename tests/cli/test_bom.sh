#!/usr/bin/env bash
# test_bom.sh — a UTF-8 byte-order mark before a JSON input (docs/reliability.md,
# "Byte-order mark"): one BOM at the start is accepted and skipped, the same way
# for experiment, claim, defect and bench-report files; nothing computed from the
# file depends on it (the same experiment with and without a BOM is one identity:
# the second run is skipped as already finished, one experiment_specs row; a bench
# report with a BOM is stored under the same spec sha256); positions in messages
# count from the character after it; a second BOM is refused (exit 2).
# Time: about 1 s.
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
PY=/usr/bin/python3
W=$(mktemp -d /tmp/vtlab-bom.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
BOM=$'\xef\xbb\xbf'
q() { $PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$@"; }

cat > "$W/e.json" <<J
{"id": "bom", "model": {"synth": "$PWD/model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 2, "length": 8, "seed": 2}}, "score": "all", "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": "1"}}]}
J
{ printf '%s' "$BOM"; cat "$W/e.json"; } > "$W/e-bom.json"
expect_exit "the experiment without a BOM runs" 0 "$VTLAB" run "$W/e.json" --db "$W/r.db"
expect_exit "the same experiment with a BOM runs" 0 "$VTLAB" run "$W/e-bom.json" --db "$W/r.db"
grep -q "0 run(s) done, 2 skipped (already finished)" "$W/out" \
  && ok "with a BOM it is the same identity: both runs skipped as already finished" \
  || not_ok "BOM: same identity" "$(tail -3 "$W/out")"
[ "$(q "$W/r.db" "select count(*) from experiment_specs")" = 1 ] && [ "$(q "$W/r.db" "select count(*) from runs")" = 2 ] \
  && ok "one experiment_specs row (same spec sha256), 2 runs" \
  || not_ok "BOM: spec rows" "$(q "$W/r.db" "select count(*) from experiment_specs") specs, $(q "$W/r.db" "select count(*) from runs") runs"

# positions count from the character after the BOM: the same column as without it
printf '{"id": x}' > "$W/bad.json"; { printf '%s' "$BOM"; cat "$W/bad.json"; } > "$W/bad-bom.json"
expect_exit "a syntax error after a BOM is exit 2" 2 "$VTLAB" run "$W/bad-bom.json" --db "$W/x.db"
stderr_has "  ... at the column a person sees (8, as without the BOM)" "bad-bom.json: not valid JSON at line 1 column 8"
# a second BOM is not a BOM any more: refused, nothing written
{ printf '%s%s' "$BOM" "$BOM"; cat "$W/e.json"; } > "$W/e-2bom.json"
expect_exit "two BOMs are refused (exit 2)" 2 "$VTLAB" run "$W/e-2bom.json" --db "$W/x.db"
stderr_has "  ... saying so" "e-2bom.json: not valid JSON at line 1 column 1: a second byte-order mark"
{ printf ' %s' "$BOM"; cat "$W/e.json"; } > "$W/e-late.json"
expect_exit "a BOM after a blank is refused (exit 2)" 2 "$VTLAB" run "$W/e-late.json" --db "$W/x.db"
[ ! -e "$W/x.db" ] && ok "refused files wrote nothing" || not_ok "refused files wrote nothing" "x.db exists"

# claims and defects: the repo's ledger with a BOM before every file (and before the
# experiments its claims name, relative to the ledger's parent)
mkdir -p "$W/specs/claims" "$W/specs/defects" "$W/experiments"
for f in specs/claims/*.json specs/defects/*.json; do { printf '%s' "$BOM"; cat "$f"; } > "$W/specs/${f#specs/}"; done
for f in experiments/*.json; do { printf '%s' "$BOM"; cat "$f"; } > "$W/$f"; done
expect_exit "specs check: claims and defects with a BOM" 0 "$VTLAB" specs check --specs "$W/specs"
d1=$(ls specs/defects/*.json | head -1)
{ printf '%s%s' "$BOM" "$BOM"; sed 's/"id": *"\([^"]*\)"/"id": "\1-2bom"/' "$d1"; } > "$W/specs/defects/zz-2bom.json"
expect_exit "specs check: a defect with two BOMs is refused (exit 2)" 2 "$VTLAB" specs check --specs "$W/specs"
stderr_has "  ... naming the file" "zz-2bom.json: not valid JSON at line 1 column 1: a second byte-order mark"

# a bench report: stored under the same spec sha256 with and without a BOM
$PY - "$W/rep.json" <<'PY'
import json, sys
r = {"format": "vtlab-bench", "version": 1, "code_version": "abc123|dirty=0|gcc 13|-O2",
     "backend": "cpu", "device": "cpu: test", "model": "model/configs/kimi-linear-tiny.json",
     "model_sha256": "a" * 64, "tokens_sha256": "b" * 64, "knobs": {"VT_BACKEND": "cpu"},
     "phases": [{"name": "prefill-t16", "batch": 1, "context": 0, "threads": 1, "tokens": 16, "seconds": 0.5,
                 "flops": 1e9, "bytes": 0, "peak_flops": 1e10, "peak_bytes": 0}]}
open(sys.argv[1], "w").write(json.dumps(r, indent=1))
PY
{ printf '%s' "$BOM"; cat "$W/rep.json"; } > "$W/rep-bom.json"
expect_exit "record-bench without a BOM" 0 "$VTLAB" record-bench "$W/rep.json" --db "$W/b.db"
expect_exit "record-bench with a BOM" 0 "$VTLAB" record-bench "$W/rep-bom.json" --db "$W/b.db"
[ "$(q "$W/b.db" "select count(*) from experiment_specs")" = 1 ] && [ "$(q "$W/b.db" "select count(distinct experiment_sha256) from runs")" = 1 ] \
  && ok "bench report: one spec sha256 with and without a BOM" \
  || not_ok "bench report: spec sha256" "$(q "$W/b.db" "select group_concat(experiment_sha256) from runs")"
finish
