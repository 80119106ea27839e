#!/usr/bin/env bash
# Benchmark reports as runs: `bench --json` (the same writer bench_cuda uses,
# model/bench_report.c) then `vtlab record-bench` into results.db. A good report
# becomes one FINISHED run per phase whose numbers are the report's, with the
# provenance of the build that measured it; every bad report is exit 2 with
# nothing written (not even a new database file).
set -u
VTLAB=${1:-./vtlab}
BENCH=${BENCH:-build/bench}
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
PY=/usr/bin/python3

"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out "$W/tiny" >/dev/null
# the quick phases only: no T-scaling table (BENCH_TMAX=0), no STREAM triad (BENCH_TRIAD_MIB=0);
# prefill and decode at 1 and 2 threads, and decode with the weights mapped (VTLAB_WEIGHTS=map) at 1 and 2
expect_exit "bench --json writes a report" 0 env BENCH_TMAX=0 BENCH_TRIAD_MIB=0 "$BENCH" "$W/tiny" 16 --json "$W/r.json"
expect_exit "record-bench records it" 0 "$VTLAB" record-bench "$W/r.json" --db "$W/a.db"
# the runs hold exactly what the report says
$PY - "$W/r.json" "$W/a.db" >"$W/py" 2>&1 <<'PYEOF'
import json, sqlite3, sys
r = json.load(open(sys.argv[1])); db = sqlite3.connect(sys.argv[2])
runs = db.execute("SELECT id, experiment, arm, status, backend, device, model_sha256, dataset_sha256, code_version,"
                  " assertions_ok, logits_sha256, n_tokens, forward_s FROM runs ORDER BY id").fetchall()
assert len(runs) == len(r["phases"]) == 6, (len(runs), len(r["phases"]))
assert [p["name"] for p in r["phases"]][-2:] == ["decode-mapped-t1", "decode-mapped-t2"], r["phases"]
for row, p in zip(runs, r["phases"]):
    rid, exp, arm, status, be, dev, msha, dsha, code, aok, lsha, ntok, fwd = row
    assert (exp, arm, status, be, dev) == ("bench-tiny", p["name"], "FINISHED", "cpu", r["device"]), row
    assert (msha, dsha, code) == (r["model_sha256"], r["tokens_sha256"], r["code_version"]), row
    assert aok is None and lsha is None, "a benchmark asserts nothing and has no logits: NULL, not ok/''"
    assert ntok == p["tokens"] and fwd == p["seconds"], row
    m = dict(db.execute("SELECT name, value FROM metrics WHERE run_id = ?", (rid,)).fetchall())
    want = p["tokens"] / p["seconds"]
    assert abs(m["tokens_per_s"] - want) <= 1e-9 * want, (m["tokens_per_s"], want)
    assert abs(m["flops_frac_of_peak"] - p["flops"] / p["seconds"] / p["peak_flops"]) < 1e-9, m
    assert "bytes_frac_of_peak" not in m, "no triad measured (BENCH_TRIAD_MIB=0): no bandwidth ratio"
    th = db.execute("SELECT value FROM run_knobs WHERE run_id = ? AND name = 'VT_THREADS'", (rid,)).fetchone()[0]
    assert th == str(p["threads"]), (th, p["threads"])
spec = db.execute("SELECT json FROM experiment_specs").fetchall()
assert len(spec) == 1 and json.loads(spec[0][0]) == r, "the report is stored verbatim as the runs' spec"
print("checked", len(runs), "runs")
PYEOF
if [ $? -eq 0 ]; then ok "one FINISHED run per phase with the report's identity, knobs and numbers"; else not_ok "runs hold the report" "$(tail -3 "$W/py")"; fi
expect_exit "recording again adds new runs (a new measurement)" 0 "$VTLAB" record-bench "$W/r.json" --db "$W/a.db"
n=$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from runs').fetchone()[0])" "$W/a.db")
[ "$n" = 12 ] && ok "second record: 12 runs" || not_ok "second record" "$n runs"
# all or nothing: another live process holds the last phase's run, so recording fails at that
# phase; the phases before it must not be left behind (one transaction)
sleep 60 & holder=$!
$PY - "$W/a.db" "$holder" "$(hostname)" <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); pid = int(sys.argv[2])
start = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
cols = "experiment, arm, knob_hash, model_sha256, dataset_sha256, code_version, repeat_idx"
db.execute(f"INSERT INTO runs ({cols}, status, started_at, host, pid, pid_start) SELECT {cols}, 'RUNNING',"
           " '2026-01-01T00:00:00Z', ?, ?, ? FROM runs WHERE arm = 'decode-t2' LIMIT 1", (sys.argv[3], pid, start))
db.commit()
PYEOF
count() { $PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from runs').fetchone()[0])" "$W/a.db"; }
before=$(count)
"$VTLAB" record-bench "$W/r.json" --db "$W/a.db" >"$OUT_FILE" 2>"$ERR"; rc=$?
kill $holder 2>/dev/null; wait $holder 2>/dev/null
after=$(count)
if [ $rc -ne 0 ] && grep -q "held by another process" "$ERR" && [ "$before" = "$after" ] && [ ! -s "$OUT_FILE" ]; then
  ok "a phase held by another process: the command fails and none of the report is written"
else not_ok "all or nothing" "exit $rc, runs $before -> $after, stdout: $(head -c 200 "$OUT_FILE"), stderr: $(head -c 200 "$ERR")"; fi
$PY -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute(\"delete from runs where status='RUNNING'\"); d.commit()" "$W/a.db"
expect_exit "runs lists them" 0 "$VTLAB" runs --db "$W/a.db" --experiment bench-tiny
grep -q "decode-t2" "$OUT_FILE" && ok "runs shows the phases as arms" || not_ok "runs output" "$(head -3 "$OUT_FILE")"
expect_exit "report renders a database with benchmark runs" 0 "$VTLAB" report --db "$W/a.db" --out "$W/rep" --no-plots
want=$(/usr/bin/python3 -c "
import json,sys; p=json.load(open(sys.argv[1]))['phases'][0]
print('%.3g (%.1f%% of peak FLOP/s)' % (p['tokens']/p['seconds'], 100*p['flops']/p['seconds']/p['peak_flops']))" "$W/r.json")
grep -qF -- "| prefill-t1 | VT\_THREADS=1 |" "$W/rep/summary.md" && grep -F -- "| prefill-t1 |" "$W/rep/summary.md" | head -1 | grep -qF -- "$want |" \
  && ok "the report shows a phase's tokens/s and fraction of peak ($want)" \
  || not_ok "report bench row" "want \"$want\" in: $(grep -F 'prefill-t1' "$W/rep/summary.md" | head -1)"

# bad reports: mutate one field each; exit 2, a message naming it, no database created
bad() {   # bad NAME EXPECTED_TEXT PYTHON_EXPR_ON_r
  $PY - "$W/r.json" "$W/bad.json" "$3" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1])); exec(sys.argv[3]); open(sys.argv[2], "w").write(json.dumps(r))
PYEOF
  rm -f "$W/b.db"
  expect_exit "bad report ($1): exit 2" 2 "$VTLAB" record-bench "$W/bad.json" --db "$W/b.db"
  stderr_has "bad report ($1): says why" "$2"
  [ ! -e "$W/b.db" ] && ok "bad report ($1): no database written" || not_ok "bad report ($1)" "database created"
}
bad "malformed code version" '"code_version" must be "COMMIT|dirty=N|COMPILER|FLAGS"' 'r["code_version"] = "0123abcd"'
# a report measured by another build keeps that build's provenance, not the recorder's
$PY - "$W/r.json" "$W/other.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1])); r["code_version"] = "0123abcd4567|dirty=1|11.4.0 gcc|-O3 cuda"
open(sys.argv[2], "w").write(json.dumps(r))
PYEOF
expect_exit "a report from another build is recorded" 0 "$VTLAB" record-bench "$W/other.json" --db "$W/o.db"
got=$($PY -c "import sqlite3,sys; print('|'.join(map(str, sqlite3.connect(sys.argv[1]).execute('select code_version, git_commit, git_dirty, compiler, build_flags from runs limit 1').fetchone())))" "$W/o.db")
[ "$got" = "0123abcd4567|dirty=1|11.4.0 gcc|-O3 cuda|0123abcd4567|1|11.4.0 gcc|-O3 cuda" ] \
  && ok "with the code version that measured it (commit, dirty, compiler, flags)" || not_ok "provenance of another build" "$got"
bad "not a report" "not a benchmark report" 'r["format"] = "something"'
bad "zero seconds" '"seconds" must be a number > 0' 'r["phases"][1]["seconds"] = 0'
bad "fractional tokens" '"tokens" must be an integral number' 'r["phases"][0]["tokens"] = 1.5'
bad "duplicate phase" 'phase name "prefill-t1" appears twice' 'r["phases"][1]["name"] = "prefill-t1"'
bad "bad phase name" '"name" must be 1-31 of [a-z0-9_-]' 'r["phases"][2]["name"] = "Pre fill"'
bad "unknown knob" "VT_KIMI_BF16_STREM" 'r["knobs"]["VT_KIMI_BF16_STREM"] = "1"'
bad "backend mismatch" 'VT_BACKEND is "cpu" but "backend" is "cuda"' 'r["backend"] = "cuda"'
bad "bad model hash" '"model_sha256" and "tokens_sha256" must be 64 lowercase hex digits' 'r["model_sha256"] = "abc"'
bad "no phases" '"phases" must be an array of 1 to' 'r["phases"] = []'
bad "overflowing rate" 'the rates derived from these numbers overflow' 'r["phases"][0]["seconds"] = 1e-320'
bad "empty compiler" '"code_version" must be' 'r["code_version"] = "abc|dirty=0||-O2"'
# text after the report, and a key given twice (cJSON would keep the first, Python the last)
$PY -c "import sys; open(sys.argv[2], 'w').write(open(sys.argv[1]).read() + '{\"garbage\": ')" "$W/r.json" "$W/bad.json"
rm -f "$W/b.db"
expect_exit "text after the report: exit 2" 2 "$VTLAB" record-bench "$W/bad.json" --db "$W/b.db"
stderr_has "text after the report: says so" "text after the JSON value"
$PY -c "import sys; t = open(sys.argv[1]).read(); open(sys.argv[2], 'w').write(t.replace('\"backend\"', '\"backend\": \"cuda\", \"backend\"', 1))" "$W/r.json" "$W/bad.json"
expect_exit "a key given twice: exit 2" 2 "$VTLAB" record-bench "$W/bad.json" --db "$W/b.db"
stderr_has "a key given twice: names it" 'key "backend" appears twice'
[ ! -e "$W/b.db" ] && ok "raw bad reports: no database written" || not_ok "raw bad reports" "database created"
printf '{"format": "vtlab-bench", ' >"$W/bad.json"
rm -f "$W/b.db"
expect_exit "truncated report: exit 2" 2 "$VTLAB" record-bench "$W/bad.json" --db "$W/b.db"
stderr_has "truncated report: says so" "not valid JSON"
expect_exit "missing report: exit 2" 2 "$VTLAB" record-bench "$W/none.json" --db "$W/b.db"

# the sgemm peak's OpenBLAS kernels (tests/bench/blas_core.h): on a CPU with the AVX-512 of
# OpenBLAS's SkylakeX kernels, a core type without AVX-512 (pinned here by OPENBLAS_CORETYPE,
# as the Zen 5 VM's environment does) is replaced, and the answer names what it replaced;
# VTLAB_BENCH_BLAS_KEEP=1 keeps it
blas() { printf 'blas\nquit\n' | env "$@" "$BENCH" "$W/tiny" --serve 2>&1 | sed -n 2p; }
if awk '/^flags/ { for (i = 1; i <= NF; i++) f[$i] = 1; exit }
        END { exit !(f["avx512f"] && f["avx512cd"] && f["avx512bw"] && f["avx512dq"] && f["avx512vl"]) }' /proc/cpuinfo; then
  got=$(blas OPENBLAS_CORETYPE=Haswell)
  case "$got" in "ok OpenBLAS kernels SkylakeX, set by the bench in place of Haswell (from OPENBLAS_CORETYPE)"*)
    ok "an AVX2 OpenBLAS core on an AVX-512 CPU: the peak runs SkylakeX and says what it replaced" ;;
    *) not_ok "an AVX2 OpenBLAS core on an AVX-512 CPU: replaced" "$got" ;; esac
  got=$(blas OPENBLAS_CORETYPE=Haswell VTLAB_BENCH_BLAS_KEEP=1)
  [ "$got" = "ok OpenBLAS kernels Haswell (OPENBLAS_CORETYPE)" ] && ok "VTLAB_BENCH_BLAS_KEEP=1 keeps the core type" ||
    not_ok "VTLAB_BENCH_BLAS_KEEP=1 keeps the core type" "$got"
else
  got=$(blas OPENBLAS_CORETYPE=Haswell)
  [ "$got" = "ok OpenBLAS kernels Haswell (OPENBLAS_CORETYPE)" ] && ok "no AVX-512 here: OpenBLAS's core type is kept" ||
    not_ok "no AVX-512 here: OpenBLAS's core type is kept" "$got"
fi
finish
