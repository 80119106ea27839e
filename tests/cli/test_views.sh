#!/usr/bin/env bash
# The SQL views of results.db (schema v6, docs/schema.md): run_summary (one
# row per run, comparison, verdict, metrics, knobs pivoted), latest_verdicts
# and open_confounds, checked against the tables they summarise after a real
# run, a rerun and an audit.
set -u
VTLAB=${1:-./vtlab}
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
q() { /usr/bin/python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print('\n'.join('|'.join(str(x) for x in t) for t in c.execute(sys.argv[2])))" "$@"; }
cat > "$W/e.json" <<'J'
{"id": "views", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 4, "length": 8, "seed": 2}}, "score": "all", "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": "1"}},
          {"name": "ignored", "knobs": {"VT_TEST_IGNORED_KNOB": "1"}, "expect": {"residual.stream": "bf16"}}],
 "decision": {"metric": "top1_agreement", "threshold": 0.5, "direction": ">="}, "store_full_logits": true}
J
"$VTLAB" run "$W/e.json" --db "$W/r.db" >/dev/null 2>&1
"$VTLAB" run "$W/e.json" --db "$W/r.db" --force --arm bf16 >/dev/null 2>&1
D=$W/r.db
[ "$(q $D 'select count(*) from run_summary')" = "$(q $D 'select count(*) from runs')" ] \
  && ok "run_summary: one row per run" || not_ok "run_summary rows" "$(q $D 'select count(*) from run_summary')"
[ "$(q $D 'select count(*) from run_summary s join comparisons c on c.run_id = s.run_id where s.top1_k = c.top1_k and s.top1_n = c.top1_n and abs(s.top1_agreement - 1.0 * c.top1_k / c.top1_n) < 1e-12')" = "$(q $D 'select count(*) from comparisons')" ] \
  && ok "run_summary: top-1 k/n and agreement as in comparisons" || not_ok "run_summary top1" "$(q $D 'select run_id, top1_k, top1_n from run_summary')"
[ "$(q $D "select count(*) from run_summary s join metrics m on m.run_id = s.run_id and m.name = 'tokens_per_s' where s.tokens_per_s = m.value")" = "$(q $D "select count(*) from metrics where name = 'tokens_per_s'")" ] \
  && ok "run_summary: tokens_per_s pivoted from metrics" || not_ok "run_summary metrics" ""
[ "$(q $D "select group_concat(VT_KIMI_BF16_STREAM, '') from (select VT_KIMI_BF16_STREAM from run_summary order by run_id)")" = "$(q $D "select group_concat(value, '') from (select value from run_knobs where name = 'VT_KIMI_BF16_STREAM' order by run_id)")" ] \
  && [ "$(q $D "select json_extract(knobs, '\$.VT_TEST_IGNORED_KNOB') from run_summary where arm = 'ignored'")" = 1 ] \
  && ok "run_summary: knobs pivoted into columns and the knobs JSON" || not_ok "run_summary knobs" "$(q $D 'select run_id, VT_KIMI_BF16_STREAM, knobs from run_summary')"
want=$(q $D "select r.experiment || '/' || r.arm || '=' || max(r.id) from runs r join verdicts v on v.run_id = r.id where r.status = 'FINISHED' group by r.experiment, r.arm order by 1")
got=$(q $D "select experiment || '/' || arm || '=' || run_id from latest_verdicts order by 1")
[ -n "$got" ] && [ "$got" = "$want" ] && ok "latest_verdicts: the latest verdict of each experiment/arm (the rerun's)" || not_ok "latest_verdicts" "got $got want $want"
"$VTLAB" audit --db "$D" --specs specs >/dev/null 2>&1
[ "$(q $D 'select count(*) from open_confounds')" = "$(q $D 'select count(*) from audit_flags where resolved_at is null and expected = 0')" ] \
  && [ "$(q $D "select count(*) from open_confounds where arm = 'ignored' and rule = 'R3'")" -ge 1 ] \
  && ok "open_confounds: the open, unexpected flags, with their run's arm" || not_ok "open_confounds" "$(q $D 'select * from open_confounds')"
# --json for scripts: runs, show, audit
"$VTLAB" runs --db "$D" --json >"$W/runs.json" 2>"$ERR"
[ "$(/usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(len(d), sorted(set(r['status'] for r in d)))" "$W/runs.json")" = "$(q $D 'select count(*) from runs') ['FINISHED']" ] \
  && ok "runs --json: one object per run" || not_ok "runs --json" "$(head -c 300 "$W/runs.json")"
sid=$(q $D "select min(run_id) from run_summary where arm = 'bf16'")
"$VTLAB" show "$sid" --db "$D" --json 2>"$ERR" | /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); assert d['run']['id'] == int(sys.argv[1]) and d['comparisons']" "$sid" \
  && ok "show --json: the run's records as JSON" || not_ok "show --json" "$(cat "$ERR")"
"$VTLAB" audit --db "$D" --specs specs --json >"$W/audit.json" 2>"$ERR"; rc=$?
[ $rc = 1 ] && /usr/bin/python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['open'] == sum(f['status'] == 'confound' for f in d['flags']) >= 1, d
assert any(f['rule'] == 'R3' and f.get('run', '').endswith('/ignored') for f in d['flags'])" "$W/audit.json" \
  && ok "audit --json: counts and flags as one JSON object, exit 1 with a confound open" || not_ok "audit --json" "exit $rc $(head -c 300 "$W/audit.json") $(cat "$ERR")"
# the report shows what matters first: the summary (open confounds, verdicts) before any experiment
sed -e 's/"id": "views"/"id": "views-healthy"/' -e '/"ignored"/d' -e 's/"VT_KIMI_BF16_STREAM": "1"}},/"VT_KIMI_BF16_STREAM": "1"}}],/' "$W/e.json" > "$W/e2.json"
"$VTLAB" run "$W/e2.json" --db "$W/r2.db" >/dev/null 2>&1 || echo "# healthy fixture run failed: $("$VTLAB" run "$W/e2.json" --db "$W/r2.db" 2>&1 | tail -2)"
"$VTLAB" report --db "$W/r2.db" --out "$W/rep2" --no-plots >/dev/null 2>&1
grep -q '<details><summary><b>Runtime dtype probes</b>: [0-9]* row(s), all healthy' "$W/rep2/index.html" \
  && ok "report: a healthy experiment's probe table is collapsed" || not_ok "healthy details" "$(grep -o '<details.\{0,100\}' "$W/rep2/index.html")"
"$VTLAB" report --db "$D" --out "$W/rep" --no-plots >/dev/null 2>&1
/usr/bin/python3 - "$W/rep/index.html" >"$W/py" 2>&1 <<'PY'
import re, sys
t = open(sys.argv[1]).read()
s, e = t.index('id="summary"'), t.index('id="exp-0"')
assert s < e, "summary after the first experiment"
summ = t[s:e]
assert "1 open confound(s)" in summ or re.search(r"<b>[1-9]\d* open confound", summ), "open confounds not counted"
assert "R3" in summ and "ignored" in summ, "the open R3 confound of arm 'ignored' is not in the summary"
assert "SUPPORTED" in summ or "REFUTED" in summ or "INCONCLUSIVE" in summ, "no verdict in the summary"
assert '<meta name="viewport"' in t, "no viewport meta"
dets = re.findall(r'<details( open)?><summary><b>Runtime dtype probes</b>: (\d+) row\(s\), (all healthy|<span class="bad">some failed)', t)
assert dets, "probe tables not in <details>"
for op, n, word in dets:
    assert (op == " open") == (word != "all healthy"), (op, word)
print("ok")
PY
[ "$(cat "$W/py")" = ok ] && ok "report: summary first (open confounds, verdicts), viewport meta, probe tables collapsed when healthy" || not_ok "report summary" "$(tail -3 "$W/py")"
# compare: metric differences and ratios, each run against its reference, significance marked
ra=$(q $D "select run_id from run_summary where arm = 'bf16' order by run_id limit 1")
rb=$(q $D "select run_id from run_summary where arm = 'ignored' order by run_id limit 1")
"$VTLAB" compare "$ra" "$rb" --db "$D" >"$W/cmp" 2>&1
ka=$(q $D "select kl_mean from comparisons where run_id = $ra"); kb=$(q $D "select kl_mean from comparisons where run_id = $rb")
want=$(/usr/bin/python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print('B-A %+.4g' % (b - a))" "$ka" "$kb")
grep -q "^kl_mean .*$want" "$W/cmp" && grep -q "^top1 vs ref .*B/A" "$W/cmp" && grep -qE "^McNemar exact .*p = [0-9.e+-]+ (\*+|\(not significant at 0.05\))$" "$W/cmp" \
  && ok "compare: deltas and ratios, each run against its reference, McNemar with a significance marker" || not_ok "compare" "want '$want'; $(cat "$W/cmp")"
# the distribution statistics of a compared run, checked against an independent
# computation from the per-position export (exact KL from the stored f16 logits)
# and from the runs' own perplexities
ra=$(q $D "select run_id from run_summary where arm = 'bf16' order by run_id limit 1")
"$VTLAB" export "$ra" --db "$D" --format positions >"$W/pos0.jsonl" 2>"$ERR"
got=$(/usr/bin/python3 - "$W/pos0.jsonl" "$D" "$ra" <<'PY' 2>&1
import json, math, sqlite3, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sc = [r for r in rows if r["scored"]]
c = sqlite3.connect(sys.argv[2]); run = int(sys.argv[3])
m = dict(c.execute("select name, value from metrics where run_id = ?", (run,)))
ref = c.execute("select reference_run_id from comparisons where run_id = ?", (run,)).fetchone()[0]
mref = dict(c.execute("select name, value from metrics where run_id = ?", (ref,)))
bad = []
assert all(r["kl_exact"] for r in sc), "the export's KL is not exact"
kl = sorted(r["kl"] for r in sc)
med = statistics.median(kl)
if abs(m["kl_median"] - med) > 0.05 * abs(med) + 1e-6: bad.append(f"kl_median {m['kl_median']} vs {med}")
dps = [r["dp"] for r in sc if r["dp"] is not None]
if len(dps) == len(sc) and abs(m["dp_mean"] - sum(dps) / len(dps)) > 1e-4: bad.append(f"dp_mean {m['dp_mean']} vs {sum(dps)/len(dps)}")
p = sum(r["agree"] for r in sc) / len(sc)
if abs(m["top1_agree_se"] - math.sqrt(p * (1 - p) / len(sc))) > 1e-12: bad.append("top1_agree_se")
ratio = m["perplexity"] / mref["perplexity"]
if abs(m["ppl_ratio"] - ratio) > 1e-6 * ratio: bad.append(f"ppl_ratio {m['ppl_ratio']} vs {ratio}")
for k in ("kl_mean_se", "kl_p90", "kl_p999", "dp_mean_se", "dp_p01", "dp_p05", "dp_median", "dp_p95", "dp_p99", "ppl_ratio_se"):
    if k not in m or m[k] is None: bad.append("missing " + k)
print("ok" if not bad else "; ".join(bad))
PY
)
[ "$got" = ok ] && ok "distribution metrics (KL se/quantiles, top-1 se, dp mean/se/quantiles, PPL ratio/se) agree with an independent computation" || not_ok "distribution metrics" "$got"
"$VTLAB" compare "$ra" "$rb" --db "$D" --json >"$W/cmp.json" 2>"$ERR"
/usr/bin/python3 - "$W/cmp.json" "$W/cmp" <<'PY' >"$W/py2" 2>&1
import json, re, sys
d = json.load(open(sys.argv[1])); text = open(sys.argv[2]).read()
m = re.search(r"A-only agree (\d+), B-only agree (\d+)", text)
assert d["mcnemar"] and m and (d["mcnemar"]["a_only_agree"], d["mcnemar"]["b_only_agree"]) == (int(m[1]), int(m[2])), d["mcnemar"]
names = [x["name"] for x in d["metrics"]]
# cJSON prints a double with 15 digits when that reads back within an epsilon of it (not always
# exactly), so a throughput of ~1e4 may come back an ulp off: the tolerance is relative.
assert "kl_mean_se" in names and all(abs(x["b_minus_a"] - (x["b"] - x["a"])) <= 1e-12 * max(1, abs(x["a"]), abs(x["b"]))
                                     for x in d["metrics"]), names
assert d["a"]["arm"] == "bf16" and d["b"]["arm"] == "ignored" and d["top1_a_vs_b"]["n"] > 0
print("ok")
PY
[ "$(cat "$W/py2")" = ok ] && ok "compare --json: the same comparison as one object" || not_ok "compare --json" "$(tail -3 "$W/py2")"
# the per-position export (the equivalent of --log_samples): one record per position
run=$(q $D "select run_id from run_summary where arm = 'bf16' order by run_id desc limit 1")
"$VTLAB" export "$run" --db "$D" --format positions >"$W/pos.jsonl" 2>"$ERR"
got=$(/usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sc = [r for r in rows if r['scored']]
ok_dp = all((r['dp'] is None) == (r['p_of_ref_top1'] is None) for r in rows)
ok_dp = ok_dp and all(r['dp'] is None or abs(r['dp'] - (r['p_of_ref_top1'] - r['ref_p'])) < 1e-6 for r in rows)
ok_dp = ok_dp and all((r['kl'] is not None and r['kl'] >= -1e-9) == r['scored'] for r in rows)
print(len(rows), len(sc), sum(r['agree'] for r in sc), ok_dp)" "$W/pos.jsonl" 2>&1)
want="$(q $D "select n_tokens, top1_n, top1_k from run_summary where run_id = $run" | tr '|' ' ') True"
[ "$got" = "$want" ] && ok "export --format positions: one JSON line per position; scored agreements = top1_k/top1_n" || not_ok "positions" "got '$got' want '$want'"
"$VTLAB" export "$run" --db "$D" --format positions-csv >"$W/pos.csv"
[ "$(head -1 "$W/pos.csv")" = "run_id,reference_run_id,seq,pos,scored,ref_top1,ref_p,top1,agree,p_of_ref_top1,dp,kl,kl_exact" ] \
  && [ $(($(wc -l <"$W/pos.csv") - 1)) = "$(wc -l <"$W/pos.jsonl")" ] && ok "export --format positions-csv: header and the same rows" || not_ok "positions-csv" "$(head -2 "$W/pos.csv")"
ref=$(q $D "select run_id from run_summary where arm = 'f32' limit 1")
expect_exit "export --format positions of a reference run: exit 2 (nothing to compare)" 2 "$VTLAB" export "$ref" --db "$D" --format positions
# the Atom feed's ids come from the database (meta.feed_id), not the host name
mkdir -p "$W/nx"; cp "$W/e.json" "$W/nx/"
"$VTLAB" nightly "$W/nx" --db "$W/n.db" --out "$W/nr" --no-audit --no-plots >/dev/null 2>&1
"$VTLAB" nightly "$W/nx" --db "$W/n.db" --out "$W/nr2" --no-audit --no-plots >/dev/null 2>&1
fid=$(q "$W/n.db" "select value from meta where key = 'feed_id'")
id1=$(sed -n 's|^  <id>\(.*\)</id>|\1|p' "$W/nr/regressions.atom"); id2=$(sed -n 's|^  <id>\(.*\)</id>|\1|p' "$W/nr2/regressions.atom")
[ ${#fid} = 32 ] && [ "$id1" = "urn:vtlab:feed:$fid" ] && [ "$id1" = "$id2" ] && ! grep -q "$(hostname)" "$W/nr/regressions.atom" \
  && grep -q '<link rel="self" href="regressions.atom"/>' "$W/nr/regressions.atom" \
  && ok "regressions.atom: feed id from the database's feed_id (stable, no host name), rel=self" || not_ok "atom ids" "fid=$fid id1=$id1 id2=$id2"
finish
