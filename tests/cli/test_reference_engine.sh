#!/usr/bin/env bash
# test_reference_engine.sh — the independent f64 numpy reference served over
# the engine protocol (tests/reference/engine.py) as an experiment's reference
# arm (issue 11, item 4): vtlab's f32 model agrees with it at every position
# (SUPPORTED, with a Wilson interval), its KL is at the f32 rounding floor and
# no layer diverges past 1e-3; the bf16-stream arm agrees less. A reference
# changed on purpose (REF_ROUTER_WEIGHTS=biased) must move vtlab's f32 arm
# away from it: the comparison can fail.
#
# Usage (from the repository root): bash tests/cli/test_reference_engine.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-refeng.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
X=tests/reference/experiment-f64.json
DB=$W/r.db
q() { sqlite3 "$1" "$2"; }
cmp_row() { q "$1" "select c.top1_k || '/' || c.top1_n, c.kl_mean, coalesce(c.first_div_layer, -1), coalesce(v.verdict, '') from runs r join comparisons c on c.run_id = r.id left join verdicts v on v.run_id = r.id where r.arm = '$2'"; }

expect_exit "the experiment runs with the numpy engine as its reference arm" 0 "$VTLAB" run $X --db "$DB"
IFS='|' read -r kn kl div verdict <<<"$(cmp_row "$DB" vtlab-f32)"
n=${kn#*/}
if [ "$kn" = "$n/$n" ] && [ "$verdict" = SUPPORTED ] && python3 -c "import sys; sys.exit(0 if float('$kl') < 1e-9 else 1)" && [ "$div" = -1 ]; then
    ok "vtlab f32 vs the f64 reference: top-1 $kn, SUPPORTED, KL $kl, no layer past 1e-3"
else not_ok "f32 vs f64" "k/n $kn KL $kl first_div $div verdict $verdict"; fi
if grep -q "vtlab-f32 .*top1 $n/$n \[0.9[0-9]*, 1.000\]" "$OUT_FILE"; then ok "... printed with its interval"
else not_ok "interval" "$(grep vtlab-f32 "$OUT_FILE")"; fi
kb=$(cmp_row "$DB" vtlab-bf16-stream | cut -d'|' -f1)
if [ "${kb%/*}" -lt "$n" ]; then ok "the bf16-stream arm agrees less: $kb"; else not_ok "bf16" "$kb"; fi
if [ "$(q "$DB" "select json_extract(engine_hello, '$.engine.name') from runs where arm = 'numpy-f64'")" != "" ] &&
   [ "$(q "$DB" "select model_sha256 from runs where arm = 'numpy-f64'")" = "$(q "$DB" "select model_sha256 from runs where arm = 'vtlab-f32'")" ]; then
    ok "the reference engine reports the same model hash as vtlab computes (no R4 mismatch)"
else not_ok "model hash" "$(q "$DB" "select arm, model_sha256 from runs")"; fi

# The comparison can fail: a reference that routes with the biased weights.
python3 - "$W" <<'PY'
import json, sys
e = json.load(open("tests/reference/experiment-f64.json"))
e["arms"][0]["knobs"] = {"REF_ROUTER_WEIGHTS": "biased"}
json.dump(e, open(sys.argv[1] + "/biased.json", "w"))
PY
"$VTLAB" run "$W/biased.json" --db "$W/b.db" >"$OUT_FILE" 2>"$ERR"
klb=$(cmp_row "$W/b.db" vtlab-f32 | cut -d'|' -f2)
if python3 -c "import sys; sys.exit(0 if float('$klb') > 1e-6 else 1)"; then ok "a reference changed on purpose: vtlab f32's KL against it rises to $klb"
else not_ok "biased reference" "KL $klb; $(tail -3 "$OUT_FILE")"; fi
finish
