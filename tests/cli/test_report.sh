#!/usr/bin/env bash
# test_report.sh — `vtlab nightly` and `vtlab report` end to end on a tiny
# experiment (8 sequences x 16 tokens, three arms, two repeats) in a
# temporary directory: three nightlies (a baseline, an unchanged rerun, and
# one with a planted accuracy drop), then the report from that database.
#
# Usage (from the repository root): bash tests/cli/test_report.sh ./vtlab
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed".
# The audit step reads the repository's ledger (specs/), as `make nightly` does.
# XML well-formedness is checked with python3's xml.dom.minidom; the
# database with its sqlite3 module.
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
PY=/usr/bin/python3
T=$(mktemp -d /tmp/vtlab-report-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
OUT_FILE="$T/stdout"; ERR="$T/stderr"
. tests/cli/lib.sh
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "${3:-}"; fi; }
q() { "$PY" - "$1" "$2" <<'PYEOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for row in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in row))
PYEOF
}
# junit FILE -> "tests failures cases failing-case-names" (exit 1 if not well-formed)
junit() { "$PY" - "$1" <<'PYEOF'
import sys, xml.dom.minidom as m
d = m.parse(sys.argv[1])
top = d.documentElement
cases = d.getElementsByTagName("testcase")
failing = [c.getAttribute("classname") + "/" + c.getAttribute("name") for c in cases if c.getElementsByTagName("failure")]
suites = d.getElementsByTagName("testsuite")
assert sum(int(s.getAttribute("tests")) for s in suites) == len(cases) == int(top.getAttribute("tests"))
assert sum(int(s.getAttribute("failures")) for s in suites) == len(failing) == int(top.getAttribute("failures"))
print(top.getAttribute("tests"), top.getAttribute("failures"), len(cases), ",".join(failing))
PYEOF
}
wellformed() { "$PY" -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$1" 2>/dev/null; }

mkdir -p "$T/exp"
mk_exp() { # cand-knobs
    cat > "$T/exp/tiny.json" <<JSON
{
  "id": "tiny",
  "description": "A tiny <script>alert('x')</script> & \"quoted\" experiment",
  "hypothesis": "bf16 stream <b>keeps</b> top-1 & more",
  "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
  "dataset": {"generate": {"n_sequences": 8, "length": 16, "seed": 5}},
  "score": "all",
  "top_k": 8,
  "reference": "f32",
  "arms": [
    {"name": "f32", "expect": {"residual.stream": "f32"}},
    {"name": "cand", "description": "<img src=x onerror=alert(1)>", "knobs": {$1}, "expect": {"residual.stream": "bf16"}},
    {"name": "replay", "knobs": {"VT_KIMI_BF16_STREAM": 1, "VT_FAULT": "moe_scatter_row_bytes_from_stream"},
     "expect_assertions": "fail"}
  ],
  "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="},
  "divergence": {"sequences": 2, "tolerance": 0.02},
  "repeats": 2
}
JSON
}
mk_exp '"VT_KIMI_BF16_STREAM": 1'
DB="$T/r.db"
# The e2e nightlies do not judge throughput (a shared CI machine is too
# noisy for 1-second runs); tests/unit/test_report.c covers it on fixtures.
NIGHTLY=("$VTLAB" nightly "$T/exp" --db "$DB" --out "$T/report" --specs specs --perf-min-drop 0.95)

# ------------------------------------------------------------ bad input
expect_exit "nightly: a missing experiments dir is exit 2" 2 "$VTLAB" nightly "$T/nope" --db "$T/bad.db" --out "$T/badrep"
check "nightly: ... and nothing is written" "[ ! -e $T/bad.db ] && [ ! -e $T/badrep ]"
stderr_has "nightly: the message names the directory" "$T/nope"
expect_exit "nightly: an unknown option is exit 2" 2 "$VTLAB" nightly --frobnicate
expect_exit "nightly: --alpha out of range is exit 2" 2 "$VTLAB" nightly --alpha 2
expect_exit "report: a missing database is exit 2" 2 "$VTLAB" report --db "$T/none.db" --out "$T/none"
check "report: ... and nothing is written" "[ ! -e $T/none.db ] && [ ! -e $T/none ]"

# ------------------------------------------------------------ nightly 1: the baseline
# The shipped ledger's 4/128 claim is confounded (R1) until it is reopened:
# the first nightly is CONFOUNDED (exit 1), a baseline all the same; once the
# confound is acknowledged, the nightlies pass (tests/cli/test_nightly_confounds.sh
# has the rest of that story).
CONFOUND=bf16-stream-refuted-4of128/R1/moe-scatter-row-bytes-from-stream
expect_exit "nightly 1 (baseline) exits 1: the shipped claim's confound is open" 1 "${NIGHTLY[@]}"
for f in junit.xml nightly.md regressions.atom index.html summary.md; do
  check "nightly 1 wrote $f" "[ -s $T/report/$f ]"
done
j=$(junit "$T/report/junit.xml"); rc=$?
check "nightly 1: junit.xml is well-formed, 3 arms + the audit case + the confound, its one failure" \
  "[ $rc -eq 0 ] && [ \"$j\" = '5 1 5 confound/$CONFOUND' ]" "$j"
check "nightly 1: regressions.atom is well-formed" "wellformed $T/report/regressions.atom"
# one nightly: every history chart has one point per arm (an "empty y range"
# to gnuplot, which it widened with a warning four times a nightly)
check "nightly 1: no gnuplot warning on stderr nor in the charts' logs" \
  "! grep -qi 'warning' $ERR && ! grep -qil 'warning' $T/report/plots/src/*.log" \
  "$(grep -i warning $ERR $T/report/plots/src/*.log | head -3)"
check "nightly 1: the page links only to sections it has (no nightly before a nightly, no ledger without claims)" \
  "$PY tests/cli/report_layout.py links $T/report/index.html" "$($PY tests/cli/report_layout.py links $T/report/index.html)"
check "nightly 1: recorded CONFOUNDED with its 6 runs" \
  "[ \"$(q $DB "select status, n_runs from nightlies where id = 1")\" = 'CONFOUNDED|6' ] && [ \"$(q $DB "select count(*) from nightly_runs where nightly_id = 1")\" = 6 ]"
expect_exit "ack of the claim's confound exits 0" 0 "$VTLAB" ack "$CONFOUND" --reason "reopen pending" --db "$DB"

# ------------------------------------------------------------ nightly 2: unchanged, fresh runs
expect_exit "nightly 2 (unchanged code and experiments) exits 0" 0 "${NIGHTLY[@]}"
check "nightly 2 ran fresh runs (--force), not the ones of nightly 1" \
  "[ \"$(q $DB "select count(*) from nightly_runs a join nightly_runs b on a.run_id = b.run_id where a.nightly_id = 1 and b.nightly_id = 2")\" = 0 ] && [ \"$(q $DB "select count(*) from nightly_runs where nightly_id = 2")\" = 6 ]"
check "nightly 2: no regression, identical logits" \
  "[ \"$(q $DB "select count(*) from nightly_findings where nightly_id = 2 and regression = 1")\" = 0 ] && [ \"$(q $DB "select count(*) from nightly_findings where nightly_id = 2 and kind in ('accuracy','numerics')")\" = 0 ]" \
  "$(q $DB "select kind, message from nightly_findings where nightly_id = 2")"
j=$(junit "$T/report/junit.xml"); rc=$?
check "nightly 2: recorded PASSED, the acknowledged confound a passing case" \
  "[ \"$(q $DB "select status from nightlies where id = 2")\" = PASSED ] && [ $rc -eq 0 ] && [ \"$j\" = '5 0 5 ' ]" "$j"
check "nightly 2: the run identity is kept (same identity as nightly 1, a new row)" \
  "[ \"$(q $DB "select count(distinct knob_hash || model_sha256 || dataset_sha256 || code_version) from runs where arm = 'cand' and repeat_idx = 0")\" = 1 ]"

# ------------------------------------------------------------ nightly 3: a planted accuracy drop
mk_exp '"VT_KIMI_BF16_STREAM": 1, "VT_KIMI_ROUTER_WEIGHTS": "biased"'
expect_exit "nightly 3 (planted regression) exits 1" 1 "${NIGHTLY[@]}"
j=$(junit "$T/report/junit.xml"); rc=$?
check "nightly 3: junit.xml well-formed, 5 cases, the failing one is tiny/cand" "[ $rc -eq 0 ] && [ \"$j\" = '5 1 5 tiny/cand' ]" "$j"
check "nightly 3: an accuracy regression with a McNemar p below 0.05" \
  "[ \"$(q $DB "select count(*) from nightly_findings where nightly_id = 3 and kind = 'accuracy' and regression = 1 and arm = 'cand' and p < 0.05")\" = 1 ]" \
  "$(q $DB "select kind, regression, message from nightly_findings where nightly_id = 3")"
check "nightly 3: recorded REGRESSED" "[ \"$(q $DB "select status from nightlies where id = 3")\" = REGRESSED ]"
check "nightly 3: the Atom feed is well-formed and names the regression" \
  "wellformed $T/report/regressions.atom && grep -q 'tiny/cand: accuracy regression' $T/report/regressions.atom"
check "nightly 3: the CI summary says REGRESSED" "grep -q 'REGRESSED' $T/report/nightly.md && grep -q 'McNemar' $T/report/nightly.md"

# ------------------------------------------------------------ the report
expect_exit "report exits 0" 0 "$VTLAB" report --db "$DB" --out "$T/rep"
H="$T/rep/index.html"
check "report: index.html and summary.md exist" "[ -s $H ] && [ -s $T/rep/summary.md ]"
check "report: no markup from the spec reaches the page" \
  "! grep -q '<script>' $H && ! grep -q '<img src=x' $H && ! grep -q '<b>keeps' $H"
check "report: the spec's text is there, escaped" \
  "grep -qF '&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;quoted&quot;' $H && grep -qF '&lt;img src=x' $H"
check "report: the markdown has no raw markup either" "! grep -q '<script>' $T/rep/summary.md"
check "report: verdicts with intervals" "grep -qE 'SUPPORTED|INCONCLUSIVE' $H && grep -q 'REFUTED' $H && grep -qE '\[0\.[0-9]+, [01]\.[0-9]+\]' $H"
check "report: the replay's expected confound flag is shown" "grep -q 'expected: the arm replays the defect' $H"
check "report: the probe summary names the violated site" "grep -q 'moe.scatter' $H && grep -q 'copied 384 bytes per row' $H"
if gnuplot -e "set terminal svg" >/dev/null 2>&1; then
  for c in top1 divergence kl-cdf history throughput; do
    check "report: chart $c drawn as PNG and SVG" "[ -s $T/rep/plots/e0-tiny-$c.png ] && [ -s $T/rep/plots/e0-tiny-$c.svg ] && [ \$(stat -c %s $T/rep/plots/e0-tiny-$c.png) -gt 5000 ]"
  done
  check "report: no half-written images" "[ -z \"\$(ls $T/rep/plots | grep '\.tmp$')\" ]"
  check "report: every image the page shows exists" \
    "$PY -c \"import re,os,sys; h=open('$H').read(); s=re.findall(r'src=\\\"([^\\\"]+)\\\"', h); sys.exit(0 if s and all(os.path.getsize(os.path.join('$T/rep', x)) > 0 for x in s) else 1)\""
  check "report: the divergence chart marks MoE and MLA layers" \
    "grep -q 'MoE FFN (shaded)' $T/rep/plots/src/e0-tiny-divergence.gp && grep -q 'MLA' $T/rep/plots/src/e0-tiny-divergence.gp"
  check "report: the history chart marks the regressed nightly" "grep -q ' top1' $T/rep/plots/src/e0-tiny-history.dat"
  # one colour per arm across charts: the colour each chart gives an arm's title is the same everywhere
  check "report: each arm has one colour in every line chart (divergence, KL CDF, history, throughput)" \
    "$PY -c \"
import re, glob, sys
seen = {}
for f in glob.glob('$T/rep/plots/src/e0-tiny-*.gp'):
    for col, arm in re.findall(r\\\"lc rgb '(#[0-9a-f]{6})' title \\\\\\\"([^\\\\\\\"]+)\\\\\\\"\\\", open(f).read()):
        arm = arm.replace(' (replay)', '')
        seen.setdefault(arm, set()).add(col)
sys.exit(0 if seen and all(len(c) == 1 for c in seen.values()) and len(seen) >= 2 else 1)
\""
  check "report: a synthetic model's perplexity is not drawn, and the caption says why" \
    "! grep -q \"ylabel 'perplexity'\" $T/rep/plots/src/e0-tiny-history.gp && grep -q 'Perplexity is not shown: the model is synthetic' $H"
  # issue 33 item 5: what a browser would cut, measured without one
  canvas=$("$PY" tests/cli/chart_canvas.py "$T"/rep/plots/*.svg "$T"/rep/plots/*.png); crc=$?
  check "report: every chart keeps its labels and keys inside its canvas (SVG text extents, PNG edges)" \
    "[ $crc -eq 0 ]" "$(echo "$canvas" | head -5)"
  check "report: no gnuplot warning in the charts' logs" "! grep -qil 'warning' $T/rep/plots/src/*.log" \
    "$(grep -i warning $T/rep/plots/src/*.log | head -3)"
  check "report: the HTML is well-formed enough for an XML parser" "$PY -c \"import html.parser,sys; p=html.parser.HTMLParser(); p.feed(open('$H').read())\""
else
  echo "# gnuplot is not installed: charts not checked"
fi
check "report: the summary's confound reasons are whole, code cells break only at _ = , /, links only to sections it has" \
  "$PY tests/cli/report_layout.py all $H" "$($PY tests/cli/report_layout.py all $H)"
check "report: the summary names the ledger the audit read" "grep -q 'against the ledger <code>' $H && grep -q 'specs' $T/rep/summary.md"
check "report: read only (no nightly or run rows added)" "[ \"$(q $DB "select count(*) from nightlies")\" = 3 ]"

# ------------------------------------------------------------ one compared arm, no nightly yet
# A report before any nightly and audit links to no nightly or ledger
# section; the first nightly of an experiment with one compared arm draws
# history charts of one value each, with no gnuplot warning.
mkdir -p "$T/one"
cat > "$T/one/one.json" <<'JSON'
{"id": "one", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 4, "length": 8, "seed": 5}}, "score": "all", "top_k": 4, "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "cand", "knobs": {"VT_KIMI_BF16_STREAM": 1}}]}
JSON
"$VTLAB" run "$T/one/one.json" --db "$T/one0.db" >/dev/null 2>&1
expect_exit "report of a database with no nightly and no audit exits 0" 0 "$VTLAB" report --db "$T/one0.db" --out "$T/one0" --no-plots
check "... it links only to sections it has" "$PY tests/cli/report_layout.py links $T/one0/index.html" \
  "$($PY tests/cli/report_layout.py links $T/one0/index.html)"
if gnuplot -e "set terminal svg" >/dev/null 2>&1; then
  expect_exit "a first nightly of one compared arm exits 0" 0 "$VTLAB" nightly "$T/one" --db "$T/one1.db" --out "$T/one1" --no-audit --perf-min-drop 0.95
  check "... no gnuplot warning on stderr nor in the charts' logs" \
    "! grep -qi 'warning' $ERR && ! grep -qil 'warning' $T/one1/plots/src/*.log" \
    "$(grep -i warning $ERR $T/one1/plots/src/*.log | head -3)"
  canvas=$("$PY" tests/cli/chart_canvas.py "$T"/one1/plots/*.svg "$T"/one1/plots/*.png); crc=$?
  check "... its charts keep their labels and keys inside their canvases" "[ $crc -eq 0 ]" "$(echo "$canvas" | head -5)"
fi

finish
