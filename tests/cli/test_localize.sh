#!/bin/bash
# test_localize.sh — `vtlab localize` (docs/localize.md) on the tiny model (8
# layers, 8 sequences x 16 tokens) with planted per-layer faults
# (VT_TEST_LOSSY_LAYERS: the lever's bf16 rounding keeps one mantissa bit
# there), and on a python engine that declares a scoped knob
# (tests/engines/localize_engine.py). Checks: a fault on layer k is localized
# to exactly {k} within 2*ceil(log2 8) + 1 search runs; two planted layers
# give both; a site (3.ffn) by --by site; the largest passing plan; a lever
# harmless everywhere is "nothing to localize"; a lever inside the noise ends
# UNDECIDED; kill -9 mid-search, then the same command resumes with the same
# answer; the run budget; the final run is claimable; scopes through `vtlab
# engine` give the builtin's numbers; engine-check's scope check; bad input
# is exit 2 with nothing written.
# Usage (from the repository root): bash tests/cli/test_localize.sh [VTLAB]
cd "$(dirname "$0")/../.." || exit 2
VTLAB=$(realpath "${1:-./vtlab}")
. tests/cli/lib.sh
export VTLAB_CACHE=${VTLAB_CACHE:-$PWD/build}
ROOT=$PWD
E=$ROOT/tests/engines
T=$(mktemp -d /tmp/vtlab-localize.XXXXXX)
[ -n "${KEEP:-}" ] && echo "# kept $T" || trap 'rm -rf "$T"' EXIT
OUT_FILE=$T/out; ERR=$T/err
cd "$T" || exit 2
T0=$(date +%s)

# the experiment: one arm per scenario, threshold 0.85 (the tiny model's bf16
# stream scores 124/128 [0.92, 0.99] on this dataset, a one-bit layer 68-98/128)
cat > exp.json <<'EOF'
{"id": "loc-tiny",
 "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 8, "length": 16, "seed": 3}},
 "score": "all", "top_k": 4, "reference": "f32",
 "arms": [{"name": "f32", "knobs": {}},
          {"name": "harmless", "knobs": {"VT_KIMI_BF16_STREAM": "1"}},
          {"name": "k3", "knobs": {"VT_KIMI_BF16_STREAM": "1", "VT_TEST_LOSSY_LAYERS": "3"}},
          {"name": "k5", "knobs": {"VT_KIMI_BF16_STREAM": "1", "VT_TEST_LOSSY_LAYERS": "5"}},
          {"name": "two", "knobs": {"VT_KIMI_BF16_STREAM": "1", "VT_TEST_LOSSY_LAYERS": "2,6"}},
          {"name": "site", "knobs": {"VT_KIMI_BF16_STREAM": "1", "VT_TEST_LOSSY_LAYERS": "3.ffn"}},
          {"name": "act", "knobs": {"VT_KIMI_BF16_ACT": "1", "VT_TEST_LOSSY_LAYERS": "4"}},
          {"name": "scoped", "knobs": {"VT_KIMI_BF16_STREAM": "1"}, "scope": {"VT_KIMI_BF16_STREAM": "0-3"}},
          {"name": "router", "knobs": {"VT_KIMI_ROUTER_WEIGHTS": "biased"}}],
 "decision": {"metric": "top1_agreement", "threshold": 0.85, "direction": ">="}}
EOF
python3 -c 'import json; e = json.load(open("exp.json")); del e["decision"]; e["id"] = "loc-nodecision"; json.dump(e, open("nodecision.json", "w"))' 
L() { "$VTLAB" localize "$@" --workdir "$T/work"; }
# the line of localize's output that starts with $1
line() { grep -m1 "^$1" "$2"; }
# search runs as the runs: line says them
search_runs() { sed -n 's/^runs: \([0-9]*\) for the search.*/\1/p' "$1"; }

# ---- bad input: exit 2, nothing written
expect_exit "no --arm is exit 2" 2 L exp.json --db bad.db
expect_exit "an unknown arm is exit 2" 2 L exp.json --arm nosuch --db bad.db
stderr_has "... named" 'no arm named "nosuch"'
expect_exit "the reference arm is exit 2" 2 L exp.json --arm f32 --db bad.db
expect_exit "an arm with no scoped lever is exit 2" 2 L exp.json --arm router --db bad.db
stderr_has "... said" "sets no scoped lever"
expect_exit "an arm already scoped is exit 2" 2 L exp.json --arm scoped --db bad.db
expect_exit "no decision rule is exit 2" 2 L nodecision.json --arm harmless --db bad.db
stderr_has "... said" "no decision rule"
expect_exit "--by bogus is exit 2" 2 L exp.json --arm k3 --by block --db bad.db
expect_exit "--goal bogus is exit 2" 2 L exp.json --arm k3 --goal smallest --db bad.db
expect_exit "--max-runs 0 is exit 2" 2 L exp.json --arm k3 --max-runs 0 --db bad.db
if [ -e bad.db ]; then not_ok "bad input writes nothing" "bad.db exists"; else ok "bad input writes nothing"; fi

# ---- one planted layer: exactly {3}, within the bound, with the table
L exp.json --arm k3 --db r.db > k3.out 2> k3.err; rc=$?
sed 's/^/# /' k3.out
[ "$rc" -eq 0 ] && ok "a planted layer: exit 0" || not_ok "a planted layer" "exit $rc: $(cat k3.err)"
if line "result: FOUND: the levers fail on {3}:" k3.out >/dev/null; then ok "... localized to exactly {3}"
else not_ok "... localized to {3}" "$(line result: k3.out)"; fi
n=$(search_runs k3.out)
[ -n "$n" ] && [ "$n" -le 7 ] && ok "... in $n search runs (bound 2*ceil(log2 8) + 1 = 7)" || not_ok "run bound" "$n search runs"
if grep -q "the levers on the rest (0-2,4-7) pass" k3.out; then ok "... the rest passes"; else not_ok "the rest" "$(line result: k3.out)"; fi
if grep -qE '^  3 +[0-9]+/128 .* REFUTED .* fail x1' k3.out && [ "$(grep -cE '^  [0-7] +[0-9]+/128 .* pass x1' k3.out)" = 7 ]; then
    ok "... the table: layer 3 alone fails, the 7 others pass"
else not_ok "the table" "$(grep -A9 '^each layer alone' k3.out)"; fi
grep -q '"scope":{"VT_KIMI_BF16_STREAM":"3"}' k3.out && ok "... the arm to paste scopes the lever to 3" || not_ok "arm to paste" "$(grep -A1 'arm to paste' k3.out)"
steps=$(sqlite3 r.db "SELECT count(*) FROM localize_steps WHERE localization_id = 1")
[ "$steps" -ge 10 ] && ok "... its steps are stored ($steps)" || not_ok "steps stored" "$steps"

# the arm pasted into an experiment reproduces the failure
python3 - "$T" <<'PY'
import json, re, sys
t = sys.argv[1]
arm = json.loads(re.search(r'arm to paste \(the failure[^\n]*\n  (\{.*\})', open(t + "/k3.out").read()).group(1))
e = json.load(open(t + "/exp.json")); e["id"] = "pasted"; e["arms"] = [e["arms"][0], arm]
json.dump(e, open(t + "/pasted.json", "w"))
PY
"$VTLAB" run pasted.json --db p.db > p.out 2>&1
grep -q "REFUTED" p.out && ok "... the pasted arm is REFUTED in an experiment of its own" || not_ok "pasted arm" "$(cat p.out)"

# the same command again: every step stored, nothing run
L exp.json --arm k3 --db r.db > k3b.out 2>&1
if grep -q "finished earlier" k3b.out && [ "$(line result: k3b.out)" = "$(line result: k3.out)" ]; then ok "the same command again: stored, the same result"
else not_ok "again" "$(head -3 k3b.out)"; fi

# the final run is a normal run: vtlab claim records it
run=$(sed -n 's/^record it: vtlab claim \([0-9]*\) .*/\1/p' k3.out)
mkdir -p specs/claims specs/defects
expect_exit "vtlab claim records the localization's run" 0 "$VTLAB" claim "$run" --id loc-k3 --db r.db --specs specs
grep -q '"verdict": "REFUTED"' specs/claims/loc-k3.json && ok "... as a REFUTED claim" || not_ok "claim" "$(cat specs/claims/loc-k3.json 2>&1 | head -5)"

# ---- two planted layers: both
L exp.json --arm two --db r.db --no-sensitivity > two.out 2>&1
if line "result: FOUND: the levers fail on {2}:" two.out >/dev/null && grep -q "and on {6}" two.out &&
   grep -q "the levers on the rest (0-1,3-5,7) pass" two.out; then ok "two planted layers: {2} and {6}, the rest passes"
else not_ok "two planted layers" "$(line result: two.out)"; fi

# ---- a site: --by site finds 3.ffn among 16 sites
L exp.json --arm site --by site --db r.db --no-sensitivity > site.out 2>&1
n=$(search_runs site.out)
if line "result: FOUND: the levers fail on {3.ffn}:" site.out >/dev/null && [ "$n" -le 9 ]; then
    ok "--by site: exactly {3.ffn} in $n search runs (bound 2*ceil(log2 16) + 1 = 9)"
else not_ok "--by site" "$n runs; $(line result: site.out)"; fi

# ---- largest-passing: the plan keeps the lever off layer 4 only
L exp.json --arm act --goal largest-passing --db r.db --no-sensitivity > act.out 2>&1
if line "result: FOUND: the levers can stay on 0-3,5-7 (7 of 8 layers), off on 4:" act.out >/dev/null &&
   grep -q '"scope":{"VT_KIMI_BF16_ACT":"0-3,5-7"}' act.out; then ok "largest-passing: the lever on 0-3,5-7, off on 4"
else not_ok "largest-passing" "$(line result: act.out)"; fi

# ---- a lever harmless everywhere
L exp.json --arm harmless --db r.db > harmless.out 2>&1; rc=$?
if [ "$rc" -eq 0 ] && line "result: NONE: nothing to localize" harmless.out >/dev/null; then ok "a harmless lever: nothing to localize"
else not_ok "a harmless lever" "exit $rc; $(line result: harmless.out)"; fi

# ---- inside the noise: the threshold at the bf16 stream's own agreement
agree=$(sqlite3 r.db "SELECT top1_k * 1.0 / top1_n FROM localize_steps s JOIN localizations l ON l.id = s.localization_id
                      WHERE l.arm = 'harmless' AND s.layer_set = 'all'")
sed -e "s/\"loc-tiny\"/\"loc-noise\"/" -e "s/\"threshold\": 0.85/\"threshold\": $agree/" exp.json > noise.json
L noise.json --arm harmless --db r.db --max-scale 2 > noise.out 2>&1; rc=$?
if [ "$rc" -eq 0 ] && line "result: UNDECIDED" noise.out >/dev/null && grep -q "grows to x2" noise.out; then
    ok "inside the noise (threshold $agree): the dataset grows, then UNDECIDED, no set named"
else not_ok "inside the noise" "exit $rc; $(cat noise.out | tail -5)"; fi

# ---- a step inside the noise: {2} is named, whether the rest (6 with its one bit) passes is not
sed -e "s/\"loc-tiny\"/\"loc-und\"/" -e "s/\"threshold\": 0.85/\"threshold\": 0.75/" exp.json > und.json
L und.json --arm two --db r.db --max-scale 1 --no-sensitivity > und.out 2>&1; rc=$?
if [ "$rc" -eq 0 ] && line "result: UNDECIDED: the levers fail on {2}:" und.out >/dev/null &&
   grep -q "whether the rest (0-1,3-7) passes is inside the noise" und.out; then
    ok "a step inside the noise: UNDECIDED, {2} named, the undecided rest said, no set guessed"
else not_ok "step inside the noise" "exit $rc; $(line result: und.out)"; fi

# ---- kill -9 mid-search, then the same command: resumed, the same answer
"$VTLAB" localize exp.json --arm k5 --db kill.db --no-sensitivity --workdir "$T/work" > kill1.out 2>&1 &
pid=$!
for _ in $(seq 1 600); do
    s=$(sqlite3 kill.db "SELECT count(*) FROM localize_steps" 2>/dev/null || echo 0)
    [ "${s:-0}" -ge 4 ] && break
    sleep 0.02
done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
before=$(sqlite3 kill.db "SELECT count(*) FROM localize_steps")
L exp.json --arm k5 --db kill.db --no-sensitivity > kill2.out 2> kill2.err; rc=$?
L exp.json --arm k5 --db fresh.db --no-sensitivity > fresh.out 2>&1
if grep -q "^record it" kill1.out; then not_ok "kill -9 mid-search" "the search ended before the kill: $(line result: kill1.out)"; fi
if [ "$rc" -eq 0 ] && grep -q ", resumed" kill2.out && [ "$(grep -c '(stored,' kill2.out)" -eq "$before" ] &&
   line "result: FOUND: the levers fail on {5}:" kill2.out >/dev/null &&
   [ "$(line 'result:' kill2.out | sed 's/(run [0-9]*)//g')" = "$(line 'result:' fresh.out | sed 's/(run [0-9]*)//g')" ]; then
    ok "kill -9 after $before steps: the same command resumes ($before stored) and gives the same answer"
else not_ok "kill -9 resume" "exit $rc, $before steps before; $(head -3 kill2.out); $(line result: kill2.out) vs $(line result: fresh.out)"; fi
dups=$(sqlite3 kill.db "SELECT count(*) FROM (SELECT layer_set, scale FROM localize_steps GROUP BY 1, 2 HAVING count(*) > 1)")
[ "$dups" = 0 ] && ok "... no step twice" || not_ok "steps twice" "$dups"

# ---- the run budget: stopped, then continued by a larger one
L exp.json --arm k5 --db budget.db --no-sensitivity --max-runs 3 > b1.out 2>&1; rc=$?
L exp.json --arm k5 --db budget.db --no-sensitivity > b2.out 2>&1; rc2=$?
if [ "$rc" -eq 1 ] && line "result: BUDGET" b1.out >/dev/null && [ "$rc2" -eq 0 ] &&
   line "result: FOUND: the levers fail on {5}:" b2.out >/dev/null; then ok "--max-runs 3: BUDGET (exit 1); then without: FOUND {5}"
else not_ok "budget" "exit $rc/$rc2: $(line result: b1.out) / $(line result: b2.out)"; fi

# ---- a python engine that declares a scoped knob
cat > eng.json <<EOF
{"id": "loc-engine", "engine": ["$E/localize_engine.py"],
 "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 32, "length": 12, "seed": 5}},
 "score": "all", "reference": "f32",
 "arms": [{"name": "f32", "knobs": {}},
          {"name": "lossy5", "knobs": {"LOC_BF16": "1", "LOC_LOSSY_LAYERS": "5"}},
          {"name": "lossy16", "knobs": {"LOC_BF16": "1", "LOC_LOSSY_LAYERS": "1,6"}},
          {"name": "scoped", "knobs": {"LOC_BF16": "1"}, "scope": {"LOC_BF16": "0-3"}}],
 "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="}}
EOF
python3 -c 'import json; e = json.load(open("eng.json")); e["id"] = "loc-engine-site"
e["arms"] = [e["arms"][0], {"name": "site", "knobs": {"LOC_BF16": "1"}, "scope": {"LOC_BF16": "2.ffn"}}]
json.dump(e, open("eng-site.json", "w"))' 
L eng.json --arm lossy5 --db e.db > e5.out 2>&1
n=$(search_runs e5.out)
if line "result: FOUND: the levers fail on {5}:" e5.out >/dev/null && [ "$n" -le 7 ] &&
   grep -qE '^  5 +[0-9]+/384 .* fail x1' e5.out; then ok "engine: a planted layer of a scoped engine knob: {5} in $n search runs, the table"
else not_ok "engine {5}" "$n; $(line result: e5.out)"; fi
LOC_HELLO_STYLE=declared L eng.json --arm lossy5 --db e2.db --no-sensitivity > e5d.out 2>&1
if line "result: FOUND: the levers fail on {5}:" e5d.out >/dev/null; then
    ok "engine: a hello that says \"scope\": \"layer\" and declares LOC_BF16_LAYERS itself: {5}"
else not_ok "engine, declared scope knob" "$(tail -3 e5d.out)"; fi
L eng.json --arm lossy16 --db e.db --no-sensitivity > e16.out 2>&1
if line "result: FOUND: the levers fail on {1}:" e16.out >/dev/null && grep -q "and on {6}" e16.out; then ok "engine: two planted layers, both"
else not_ok "engine two" "$(line result: e16.out)"; fi
expect_exit "engine: --by site on a knob scoped by layers is exit 2" 2 L eng.json --arm lossy5 --by site --db bad.db
"$VTLAB" run eng.json --db e.db --arm scoped > es.out 2>&1
if grep -q "scoped .*FINISHED  assertions ok" es.out; then ok "engine: an arm's scope reaches the engine (reported back, checked)"
else not_ok "engine scoped arm" "$(cat es.out)"; fi
scoped=$(sqlite3 e.db "SELECT value FROM run_knobs k JOIN runs r ON r.id = k.run_id WHERE r.arm = 'scoped' AND k.name = 'LOC_BF16_LAYERS'")
[ "$scoped" = "0-3" ] && ok "... the scope is a knob of the run (LOC_BF16_LAYERS=0-3)" || not_ok "scope knob" "$scoped"
expect_exit "engine: a site scope on a knob scoped by layers is exit 2 (the engine refuses it)" 2 "$VTLAB" run eng-site.json --db bad.db
stderr_has "... said" "LOC_BF16_LAYERS=2.ffn: expected all, none or layers 0-7"

# ---- engine-check: the scope check
"$VTLAB" engine-check "$E/localize_engine.py" > ec.out 2>&1
grep -q "^ok    scope of LOC_BF16=1: none = the default, 0-7 = unscoped, 0-3 and 4-7 change the logits apart" ec.out &&
    ok "engine-check: the scope of LOC_BF16 checked" || not_ok "engine-check scope" "$(grep -i scope ec.out)"
"$VTLAB" engine-check --env LOC_IGNORE_SCOPE=1 "$E/localize_engine.py" > ec2.out 2>&1; rc=$?
if [ "$rc" -eq 1 ] && grep -q "^FAIL  scope of LOC_BF16: LOC_BF16_LAYERS=none changes the logits" ec2.out; then
    ok "engine-check: an engine that ignores its scope fails the check"
else not_ok "engine-check ignored scope" "exit $rc: $(grep -i scope ec2.out)"; fi

# ---- vtlab engine (the builtin over the protocol) takes scopes as the builtin does
cat > proto.json <<'EOF'
{"id": "loc-proto",
 "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 4, "length": 12, "seed": 9}},
 "score": "all", "top_k": 4, "reference": "f32",
 "arms": [{"name": "f32", "knobs": {}},
          {"name": "s", "knobs": {"VT_KIMI_BF16_STREAM": "1", "VT_KIMI_BF16_ACT": "1"},
           "scope": {"VT_KIMI_BF16_STREAM": "1-2,5.ffn", "VT_KIMI_BF16_ACT": "6"}}]}
EOF
sed -e 's/"loc-proto"/"loc-proto-engine"/' -e 's/"score"/"engine": ["vtlab", "engine"], "score"/' proto.json > proto-engine.json
"$VTLAB" run proto.json --db q.db > /dev/null 2>&1
"$VTLAB" run proto-engine.json --db q.db > /dev/null 2>&1
h=$(sqlite3 q.db "SELECT count(DISTINCT logits_sha256), count(*) FROM runs WHERE arm = 's' AND status = 'FINISHED'")
[ "$h" = "1|2" ] && ok "vtlab engine: the scoped arm's logits equal the builtin's" || not_ok "vtlab engine scope" "$h"

# ---- the report: a Localizations section, a chart per localization, no ID.loc experiment section
"$VTLAB" report --db r.db --out rep > rep.out 2>&1; rc=$?
if [ "$rc" -eq 0 ] && grep -q '<h2 id="localize">Localizations</h2>' rep/index.html && grep -q 'href="#localize"' rep/index.html &&
   grep -q "^## Localizations" rep/summary.md && ! grep -q 'id="exp-[0-9]*">loc-tiny.loc' rep/index.html; then
    ok "report: the Localizations section (and no section for the derived experiment)"
else not_ok "report" "exit $rc: $(cat rep.out)"; fi
n=$(grep -c "<h3>localization [0-9]*: loc-" rep/index.html)
[ "$n" -ge 6 ] && ok "... one block per localization ($n)" || not_ok "localization blocks" "$n"
if command -v gnuplot > /dev/null; then
    [ -s rep/plots/localize-1.svg ] && grep -q "each layer alone" rep/plots/localize-1.svg &&
        ok "... the chart of each layer alone" || not_ok "localize chart" "$(ls rep/plots | head)"
fi

T1=$(date +%s)
echo "# test_localize: $((T1 - T0)) s"
finish
