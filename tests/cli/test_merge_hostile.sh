#!/usr/bin/env bash
# test_merge_hostile.sh — `vtlab merge` on shards that were edited by hand
# (docs/reliability.md, "Hostile shards"): a name, an id or a recorded text the
# parsers would refuse, or a schema that is not the one its version claims, is
# exit 2 naming the shard, the table, the row and the field (or what the schema
# lacks), and the target database is unchanged (sha256 of `sqlite3 .dump`).
# Then a database that holds such names anyway (raw SQL) is read by export,
# runs, show, report, nightly, audit and the views: sane exit codes, no crash,
# HTML/XML/JSON outputs escaped and well-formed.
# Time: about 6 s on 2 cores.
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
PY=/usr/bin/python3
W=$(mktemp -d /tmp/vtlab-hostile.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
TINY=$PWD/model/configs/kimi-linear-tiny.json

mkexp() { # FILE ID
  cat > "$1" <<J
{"id": "$2", "model": {"synth": "$TINY", "seed": 1},
 "dataset": {"generate": {"n_sequences": 4, "length": 8, "seed": 2}}, "score": "all", "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": "1"}, "expect": {"residual.stream": "bf16"}}],
 "decision": {"metric": "top1_agreement", "threshold": 0.5, "direction": ">="}}
J
}
mkexp "$W/e.json" hostile
mkexp "$W/other.json" other
for i in 0 1; do "$VTLAB" run "$W/e.json" --shard $i/2 --db "$W/s$i.db" >/dev/null 2>&1 || not_ok "shard $i/2" "run failed"; done
"$VTLAB" run "$W/other.json" --db "$W/into.db" >/dev/null 2>&1 || not_ok "target database" "run failed"
dump() { sqlite3 "$1" .dump | sha256sum | cut -c1-64; }
cp "$W/into.db" "$W/into0.db"
BEFORE=$(dump "$W/into.db")
expect_exit "the clean shards merge (into a copy)" 0 bash -c "cp '$W/into.db' '$W/ok.db' && '$VTLAB' merge '$W/s0.db' '$W/s1.db' --into '$W/ok.db'"

# edit CASE SQL [PARAM]: copies of both shards with SQL applied (PARAM bound as ?1)
edit() {
  for i in 0 1; do
    cp "$W/s$i.db" "$W/h$i.db"
    $PY - "$W/h$i.db" "$1" "${2-}" <<'PY' || echo "edit failed: $1" >&2
import hashlib, sqlite3, sys
d = sqlite3.connect(sys.argv[1]); sql, p = sys.argv[2], sys.argv[3]
if sql == "SPEC-ARM":   # a consistent spec (its sha256 recomputed) whose second arm has a hostile name
    import json
    (sha, js), = d.execute("SELECT sha256, json FROM experiment_specs").fetchall()
    j = json.loads(js); j["arms"][1]["name"] = p; nj = json.dumps(j, separators=(",", ":"))
    ns = hashlib.sha256(nj.encode()).hexdigest()
    d.execute("PRAGMA foreign_keys = OFF")
    d.execute("UPDATE experiment_specs SET sha256 = ?, json = ? WHERE sha256 = ?", (ns, nj, sha))
    d.execute("UPDATE runs SET experiment_sha256 = ? WHERE experiment_sha256 = ?", (ns, sha))
else:
    d.execute(sql, (p,) if "?" in sql else ())
d.commit()
PY
  done
}
# hostile CASE_NAME EXPECTED_STDERR SQL [PARAM]
hostile() {
  local name=$1 want=$2; shift 2
  edit "$@"
  cp "$W/into0.db" "$W/into.db"; rm -f "$W/into.db-wal" "$W/into.db-shm"
  expect_exit "refused (exit 2): $name" 2 "$VTLAB" merge "$W/h0.db" "$W/h1.db" --into "$W/into.db"
  local tail="the shard is refused, nothing merged"
  case $want in *lacks*) tail=$want ;; esac   # a schema refusal names what is missing instead
  if grep -qF -- "$want" "$ERR" && grep -qF -- "$tail" "$ERR"; then ok "  ... names $want"
  else not_ok "  ... names $want" "$(head -c 400 "$ERR")"; fi
  [ "$(dump "$W/into.db")" = "$BEFORE" ] && ok "  ... target unchanged" || not_ok "  ... target unchanged" "into.db changed"
}
H0="$W/h0.db: table"
# names the experiment parser refuses
for n in "a'b" '<script>alert(1)</script>' '../../etc/passwd' $'two\nlines' 'system("id")' ''; do
  hostile "arm $(printf %q "$n")" "$H0 runs, row 2: arm:" "UPDATE runs SET arm = ?1 WHERE arm = 'bf16'" "$n"
done
for n in 'x"y' '<b>x</b>' $'e\x1b[31m'; do
  hostile "experiment $(printf %q "$n")" "$H0 runs, row 1: experiment:" "UPDATE runs SET experiment = ?1" "$n"
done
hostile "an arm name inside the stored experiment file" "arms[1].name:" SPEC-ARM '<img src=x onerror=alert(1)>'
hostile "experiment file edited (its sha256 no longer the run's)" "not the one its runs name" \
  "UPDATE experiment_specs SET json = replace(json, '\"bf16\"', '\"bf17\"')"
hostile "experiment_specs.id" "table experiment_specs, row 1: id:" "UPDATE experiment_specs SET id = ?1" "a'b"
# ids and hashes
hostile "knob_hash" "runs, row 1: knob_hash: expected 64 lowercase hex digits" "UPDATE runs SET knob_hash = ?1 WHERE id = 1" "abc' OR 1=1 --"
hostile "model_sha256" "model_sha256: expected 64 lowercase hex digits" "UPDATE runs SET model_sha256 = upper(model_sha256)"
hostile "logits_sha256" "logits_sha256: expected 64" "UPDATE runs SET logits_sha256 = ?1 WHERE id = 2" "\$(touch pwned)"
hostile "shard" "runs, row 1: shard: expected \"0/2\"" "UPDATE runs SET shard = ?1 WHERE id = 1" "0/2; rm -rf /"
hostile "a per-sequence logits hash" "$H0 run_sequences, row 0 (run 1): logits_sha256" "UPDATE run_sequences SET logits_sha256 = 'zz' WHERE seq = 0"
hostile "knob name" "(run 1): name: \"VT_X'; DROP TABLE runs;--\" is not a knob name" "UPDATE run_knobs SET name = ?1 WHERE name = 'VT_KIMI_BF16_STREAM'" "VT_X'; DROP TABLE runs;--"
hostile "probe site with a newline" "$H0 probes, row 0 (run 1): site: byte 8" "UPDATE probes SET site = ?1 WHERE idx = 0" $'residual\nstream'
# recorded provenance: one line of UTF-8
hostile "code_version with a newline" "runs, row 1: code_version:" "UPDATE runs SET code_version = code_version || ?1" $'\n<script>'
hostile "task with an escape sequence" "$H0 run_shards, row 1: task:" "UPDATE run_shards SET task = ?1" $'\x1b]0;pwned\x07'
hostile "host not UTF-8" "runs, row 1: host:" "UPDATE runs SET host = CAST(X'6869FF' AS TEXT)"
# a schema that is not the one its version claims: refused before anything is read
hostile "a dropped column" "lacks column runs.engine_hello" "ALTER TABLE runs DROP COLUMN engine_hello"
stderr_has "  ... names the shard and its version" "h0.db: its schema is not that of the version it claims ("
hostile "a dropped table" "lacks table run_sequences" "DROP TABLE run_sequences"
cp "$W/s0.db" "$W/h0.db"; sqlite3 "$W/h0.db" "ALTER TABLE runs DROP COLUMN engine_hello"
expect_exit "a broken shard is refused before the target is created" 2 "$VTLAB" merge "$W/h0.db" "$W/s1.db" --into "$W/new.db"
[ ! -e "$W/new.db" ] && ok "  ... no new database" || not_ok "  ... no new database" "new.db exists"
cp "$W/into.db" "$W/bad-into.db"; sqlite3 "$W/bad-into.db" "ALTER TABLE runs DROP COLUMN layer_kinds"
expect_exit "a target whose schema lacks a column is refused (exit 2)" 2 "$VTLAB" merge "$W/s0.db" "$W/s1.db" --into "$W/bad-into.db"
stderr_has "  ... naming it" "bad-into.db: its schema is not that of the version it claims ("
stderr_has "  ... and what it lacks" "): it lacks column runs.layer_kinds"

# ------------------------------------------------------------ readers of a database that holds hostile names
D=$W/names.db
cp "$W/ok.db" "$D"
$PY - "$D" <<'PY'
import sqlite3, sys
d = sqlite3.connect(sys.argv[1])
d.execute("UPDATE runs SET arm = ? WHERE arm = 'bf16'", ('<script>alert("a")</script>\n../../x\'y',))
d.execute("UPDATE runs SET experiment = ? WHERE experiment = 'hostile'", ('h"; system("id") <b>&amp;',))
d.execute("UPDATE run_knobs SET value = ? WHERE name = 'VT_KIMI_BF16_STREAM'", ('<i>1</i>',))
d.commit()
PY
rid=$(sqlite3 "$D" "select id from runs where arm like '<script>%' limit 1")
expect_exit "runs on hostile names" 0 "$VTLAB" runs --db "$D"
expect_exit "show on hostile names" 0 "$VTLAB" show "$rid" --db "$D"
expect_exit "export --format json on hostile names" 0 "$VTLAB" export "$rid" --db "$D" --format json --out "$W/x.json"
$PY -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['run']['arm'].startswith('<script>alert')" "$W/x.json" 2>/dev/null \
  && ok "  ... valid JSON, the name as stored" || not_ok "  ... valid JSON" "$(head -c 300 "$W/x.json")"
expect_exit "export --format csv on hostile names" 0 "$VTLAB" export "$rid" --db "$D" --format csv --out "$W/x.csv"
expect_exit "report on hostile names" 0 "$VTLAB" report --db "$D" --out "$W/rep"
! grep -q "<script>\|<blink>" "$W/rep/index.html" && ok "  ... index.html escapes them" || not_ok "  ... index.html escapes them" "$(grep -o '.\{30\}<script>.\{30\}' "$W/rep/index.html" | head -2)"
mkdir -p "$W/nexp" "$W/specs/claims" "$W/specs/defects"; cp "$W/e.json" "$W/nexp/"
"$VTLAB" nightly "$W/nexp" --db "$D" --out "$W/nout" --specs "$W/specs" >"$OUT_FILE" 2>"$ERR"; rc=$?
[ $rc -le 1 ] && ok "nightly on hostile names (exit $rc)" || not_ok "nightly on hostile names" "exit $rc: $(tail -3 "$ERR")"
bad=""
for f in "$W"/nout/*.html "$W"/nout/*.xml "$W"/nout/*.atom "$W"/nout/*.md; do
  grep -q "<script>\|<blink>" "$f" && bad="$bad ${f##*/}"
  case $f in *.xml|*.atom) $PY -c "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])" "$f" 2>/dev/null || bad="$bad ${f##*/}(not XML)";; esac
done
[ -z "$bad" ] && ok "  ... its outputs escape them (junit.xml and the feed well-formed)" || not_ok "  ... nightly outputs" "$bad"
"$VTLAB" audit --db "$D" --specs "$W/specs" >"$OUT_FILE" 2>"$ERR"; rc=$?
[ $rc -le 1 ] && ok "audit on hostile names (exit $rc)" || not_ok "audit on hostile names" "exit $rc: $(tail -3 "$ERR")"
v=$($PY -c "
import sqlite3,sys; d=sqlite3.connect(sys.argv[1])
print(d.execute('select count(*) from run_summary').fetchone()[0] == d.execute('select count(*) from runs').fetchone()[0],
      d.execute('select count(*) from latest_verdicts').fetchone()[0] >= 0, d.execute('select count(*) from open_confounds').fetchone()[0] >= 0)" "$D" 2>&1)
[ "$v" = "True True True" ] && ok "the views read them (run_summary: one row per run)" || not_ok "views" "$v"
finish
