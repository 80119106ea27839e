#!/usr/bin/env bash
# test_engine_named.sh — the engine is named everywhere a run is (issue 30,
# item 3): a run through a command engine (tests/engines/good.py, "good" 1.0)
# is named "good 1.0" in `runs`, `show`, `show --json`, `compare` (and its
# --json), the report (index.html and summary.md), the nightly's nightly.md
# and its JUnit properties; a run of vtlab's own model is named "builtin",
# with vtlab's commit. An engine whose name is hostile (markup, quotes, pipes,
# an escape sequence) is shown escaped in HTML, XML and markdown and with its
# control characters as '?' on a terminal, never breaking a table. A file
# older than runs.engine_hello (v7), read-only (never migrated), still lists,
# shows and compares, its runs builtin.
#
# Usage (from the repository root): bash tests/cli/test_engine_named.sh ./build/vtlab
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed".
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-engname.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
E=$PWD/tests/engines
PY=/usr/bin/python3
DB=$W/r.db
R=$W/rep
q() { "$PY" -c 'import sqlite3, sys
for row in sqlite3.connect(sys.argv[1]).execute(sys.argv[2]): print("|".join("" if v is None else str(v) for v in row))' "$DB" "$1"; }
# pyok NAME SCRIPT ARGS...: the python script prints "ok" or what is wrong
pyok() {
    local name=$1 script=$2; shift 2
    local got; got=$("$PY" -c "$script" "$@" 2>&1)
    if [ "$got" = ok ]; then ok "$name"; else not_ok "$name" "$(echo "$got" | tail -3)"; fi
}

# A conforming engine with a hostile name: good.py's fake model under another hello.
EVIL='ev<i>l&"|*`x\x1b[31m'          # as python writes it; shown with '?' for the escape
EVIL_SHOWN='ev<i>l&"|*`x?[31m'
cat > "$W/evil.py" <<PY
#!/usr/bin/python3
import sys
sys.path.insert(0, "$E")
import fake, vtp
knobs, scale = fake.make_knobs()
h = fake.hello('$EVIL', knobs)
h["engine"]["version"] = "2.0<b>"
h["engine"]["commit"] = "c0ffee"
sys.exit(vtp.serve(h, lambda req: fake.response(req, scale)))
PY
chmod +x "$W/evil.py"

mkdir -p "$W/exp"
cat > "$W/exp/eng.json" <<JSON
{"id": "eng", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "engine": ["$E/good.py"], "dataset": {"inline": [[5, 6, 7], [8, 9], [10, 11, 12]]},
 "top_k": 4, "reference": "ref",
 "arms": [{"name": "ref"}, {"name": "evil", "engine": ["$W/evil.py"]}], "metrics": ["top1_agreement"]}
JSON
cat > "$W/exp/bi.json" <<JSON
{"id": "bi", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"inline": [[5, 6, 7], [8, 9]]}, "top_k": 4, "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": "1"}}], "metrics": ["top1_agreement"]}
JSON

expect_exit "a nightly of a command-engine experiment and a builtin one exits 0" 0 \
    "$VTLAB" nightly "$W/exp" --db "$DB" --out "$R" --no-audit --no-plots --perf-min-drop 0.95
GOOD=$(q "select id from runs where experiment = 'eng' and arm = 'ref' order by id desc limit 1")
BAD=$(q "select id from runs where experiment = 'eng' and arm = 'evil' order by id desc limit 1")
BI=$(q "select id from runs where experiment = 'bi' and arm = 'f32' order by id desc limit 1")
COMMIT=$(q "select git_commit from runs where id = ${BI:-0}")
MODEL=$(q "select json_extract(engine_hello, '\$.model.sha256') from runs where id = ${GOOD:-0}")
if [ -n "$GOOD" ] && [ -n "$BAD" ] && [ -n "$BI" ] && [ -n "$COMMIT" ] && [ ${#MODEL} = 64 ]; then
    ok "the runs are there (good $GOOD, evil $BAD, builtin $BI at vtlab $COMMIT)"
else not_ok "runs" "$(q 'select id, experiment, arm, status, error from runs') $(tail -5 "$OUT_FILE" "$ERR")"; fi

# ------------------------------------------------------------ runs
"$VTLAB" runs --db "$DB" >"$W/runs.txt" 2>"$ERR"
line() { grep -E "^$1 " "$W/runs.txt"; }
if head -1 "$W/runs.txt" | grep -qE ' engine$' && line "$GOOD" | grep -qE ' good 1\.0$' && line "$BI" | grep -qE ' builtin$'; then
    ok "runs: an engine column names good 1.0 and builtin"
else not_ok "runs engine column" "$(cat "$W/runs.txt")"; fi
if ! grep -q $'\x1b' "$W/runs.txt" && line "$BAD" | grep -qF -- "$EVIL_SHOWN 2.0<b>"; then
    ok "runs: a control character in an engine's name is shown as '?'"
else not_ok "runs sanitized" "$(line "$BAD" | od -c | head -5)"; fi
"$VTLAB" runs --db "$DB" --json >"$W/runs.json" 2>"$ERR"
pyok "runs --json: each run has an engine object (good 1.0, builtin), not the whole hello" '
import json, sys
d = {r["id"]: r for r in json.load(open(sys.argv[1]))}
g, b = d[int(sys.argv[2])], d[int(sys.argv[3])]
assert (g["engine"]["name"], g["engine"]["version"], g["engine"]["label"]) == ("good", "1.0", "good 1.0"), g.get("engine")
assert b["engine"]["name"] == "builtin" and b["engine"]["builtin"] is True, b.get("engine")
assert "engine_hello" not in g, "the listing carries the whole hello"
print("ok")' "$W/runs.json" "$GOOD" "$BI"

# ------------------------------------------------------------ show
"$VTLAB" show "$GOOD" --db "$DB" >"$W/show.txt" 2>"$ERR"
grep -qE "^  engine +good 1\.0, model ${MODEL:0:12}$" "$W/show.txt" && ok "show: the engine line (good 1.0, its model)" \
    || not_ok "show engine" "$(grep -n engine "$W/show.txt")"
"$VTLAB" show "$BAD" --db "$DB" >"$W/showbad.txt" 2>"$ERR"
if ! grep -q $'\x1b' "$W/showbad.txt"; then ok "show: no control character of an engine's name reaches the terminal (device line too)"
else not_ok "show sanitized" "$(grep -n $'\x1b' "$W/showbad.txt" | od -c | head -5)"; fi
"$VTLAB" show "$BI" --db "$DB" >"$W/showb.txt" 2>"$ERR"
grep -E "^  engine +builtin, commit .*, model [0-9a-f]{12}$" "$W/showb.txt" | grep -qF " commit $COMMIT, model " && ok "show: a builtin run: builtin, vtlab's commit" \
    || not_ok "show builtin" "$(grep -n engine "$W/showb.txt")"
"$VTLAB" show "$GOOD" --db "$DB" --json >"$W/show.json" 2>"$ERR"
"$VTLAB" show "$BI" --db "$DB" --json >"$W/showb.json" 2>"$ERR"
"$VTLAB" show "$BAD" --db "$DB" --json >"$W/showe.json" 2>"$ERR"
pyok "show --json: run.engine names good 1.0 (commit, model), builtin with vtlab's commit, the hostile name as shown" '
import json, sys
g, b, e = (json.load(open(f))["run"]["engine"] for f in sys.argv[1:4])
assert (g["name"], g["version"], g["commit"], g["model_sha256"], g["builtin"]) == ("good", "1.0", "", sys.argv[5], False), g
assert (b["name"], b["version"], b["commit"], b["builtin"], b["label"]) == ("builtin", "", sys.argv[4], True, "builtin"), b
assert (e["name"], e["version"], e["commit"]) == (sys.argv[6], "2.0<b>", "c0ffee"), e
print("ok")' "$W/show.json" "$W/showb.json" "$W/showe.json" "$COMMIT" "$MODEL" "$EVIL_SHOWN"

# ------------------------------------------------------------ compare
"$VTLAB" compare "$GOOD" "$BI" --db "$DB" >"$W/cmp.txt" 2>"$ERR"
grep -qE '^engine +good 1\.0 +builtin +\(differs\)$' "$W/cmp.txt" && ok "compare: an engine row, good 1.0 vs builtin, marked as differing" \
    || not_ok "compare engine" "$(cat "$W/cmp.txt" "$ERR")"
"$VTLAB" compare "$GOOD" "$BI" --db "$DB" --json >"$W/cmp.json" 2>"$ERR"
pyok "compare --json: a.engine and b.engine" '
import json, sys
d = json.load(open(sys.argv[1]))
assert (d["a"]["engine"]["label"], d["b"]["engine"]["label"]) == ("good 1.0", "builtin"), (d["a"].get("engine"), d["b"].get("engine"))
print("ok")' "$W/cmp.json"

# ------------------------------------------------------------ the report (written by the nightly)
pyok "report: each arm's row names its engine (name version, commit, short model hash)" '
import re, sys
t = open(sys.argv[1]).read()
def row(arm):
    m = re.search(r"<tr><td><b>" + re.escape(arm) + r"</b>.*?</tr>", t, re.S)
    assert m, "no row for " + arm
    return m.group(0)
g, b = row("ref"), row("f32")
assert "<td>good 1.0<br><small>model " + sys.argv[3][:12] + "</small></td>" in g, g
assert re.search(r"<td>builtin<br><small>commit " + re.escape(sys.argv[2]) + r"<br>model [0-9a-f]{12}</small></td>", b), b
assert "<th>engine</th>" in t
print("ok")' "$R/index.html" "$COMMIT" "$MODEL"
pyok "report: a hostile engine name is escaped in the page" '
import sys
t = open(sys.argv[1]).read()
assert "ev<i>" not in t and "2.0<b>" not in t and "\x1b" not in t, "raw markup on the page"
assert "ev&lt;i&gt;l&amp;&quot;|*`x?[31m 2.0&lt;b&gt;<br><small>commit c0ffee<br>model " in t, "the escaped name is missing"
print("ok")' "$R/index.html"
pyok "report summary.md: the arms table names the engine; the hostile name escaped, the table whole" '
import re, sys
rows = [l for l in open(sys.argv[1]) if l.startswith("| ")]
head = [l for l in rows if l.startswith("| arm |")]
assert head and "| engine |" in head[0], head
g = [l for l in rows if l.startswith("| ref ")]
b = [l for l in rows if l.startswith("| f32 ")]
e = [l for l in rows if l.startswith("| evil ")]
assert g and "| good 1.0, model " + sys.argv[2][:12] + " |" in g[0], g
assert b and "| builtin, commit " in b[0], b
assert e and "<" not in e[0] and "\x1b" not in e[0] and "ev&lt;i&gt;l&amp;" in e[0], e
cols = lambda l: len(re.findall(r"(?<!\\)\|", l))
assert cols(e[0]) == cols(head[0]), (e[0], head[0])
print("ok")' "$R/summary.md" "$MODEL"

# ------------------------------------------------------------ the nightly's nightly.md and junit.xml
pyok "nightly.md: each case names its engine; the hostile name escaped, the table whole" '
import re, sys
rows = [l for l in open(sys.argv[1]) if l.startswith("| ")]
head = rows[0]
assert head.startswith("| experiment | arm | engine |"), head
g = [l for l in rows if l.startswith("| eng | ref |")]
b = [l for l in rows if l.startswith("| bi | f32 |")]
e = [l for l in rows if l.startswith("| eng | evil |")]
assert g and g[0].startswith("| eng | ref | good 1.0, model " + sys.argv[2][:12] + " |"), g
assert b and re.sub(r"\\(.)", r"\1", b[0]).startswith("| bi | f32 | builtin, commit " + sys.argv[3] + ", model "), b
assert e and "<" not in e[0] and "\x1b" not in e[0] and "ev&lt;i&gt;l&amp;" in e[0], e
cols = lambda l: len(re.findall(r"(?<!\\)\|", l))
assert cols(e[0]) == cols(head), (e[0], head)
print("ok")' "$R/nightly.md" "$MODEL" "$COMMIT"
pyok "junit.xml: each test case has engine properties (good 1.0, builtin, the hostile name as shown)" '
import sys, xml.dom.minidom as m
d = m.parse(sys.argv[1])
def props(cls, name):
    for c in d.getElementsByTagName("testcase"):
        if (c.getAttribute("classname"), c.getAttribute("name")) == (cls, name):
            return {p.getAttribute("name"): p.getAttribute("value") for p in c.getElementsByTagName("property")}
    raise AssertionError("no test case " + cls + "/" + name)
g, b, e = props("eng", "ref"), props("bi", "f32"), props("eng", "evil")
assert (g.get("engine"), g.get("engine.name"), g.get("engine.version"), g.get("engine.commit"), g.get("engine.model_sha256")) == ("good 1.0", "good", "1.0", "", sys.argv[3]), g
assert (b.get("engine"), b.get("engine.name"), b.get("engine.commit")) == ("builtin", "builtin", sys.argv[2]), b
assert (e.get("engine.name"), e.get("engine.version")) == (sys.argv[4], "2.0<b>"), e
s = [x for x in d.getElementsByTagName("testsuite") if x.getAttribute("name") == "eng"][0]
sp = {p.getAttribute("name"): p.getAttribute("value") for p in s.getElementsByTagName("property") if p.parentNode.parentNode is s}
assert sp.get("engines") == "good 1.0, " + sys.argv[4] + " 2.0<b>", sp
print("ok")' "$R/junit.xml" "$COMMIT" "$MODEL" "$EVIL_SHOWN"

# ------------------------------------------------------------ a file older than v7, read-only
# A read-only file is read as it is, never migrated: one from before
# runs.engine_hello (v7) still lists, shows and compares, its runs builtin.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
    mkdir -p "$W/old"
    cp "$DB" "$W/old/r.db"
    "$PY" -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("delete from runs where engine_hello is not null"); c.execute("alter table runs drop column engine_hello")
c.execute("pragma user_version = 6"); c.commit(); c.execute("pragma wal_checkpoint(truncate)"); c.close()' "$W/old/r.db"
    chmod 444 "$W/old/r.db"; chmod 555 "$W/old"; chmod o+x "$W"   # nobody reaches it, cannot write it
    AS="setpriv --reuid=nobody --regid=nogroup --clear-groups"
    $AS "$VTLAB" runs --db "$W/old/r.db" >"$W/old.runs" 2>"$ERR"; rc=$?
    $AS "$VTLAB" show "$BI" --db "$W/old/r.db" --json >"$W/old.json" 2>>"$ERR"; rc2=$?
    $AS "$VTLAB" compare "$BI" "$BI" --db "$W/old/r.db" >"$W/old.cmp" 2>>"$ERR"; rc3=$?
    if [ $rc$rc2$rc3 = 000 ] && grep -E "^$BI " "$W/old.runs" | grep -qE ' builtin$' && grep -qE '^engine +builtin +builtin' "$W/old.cmp" &&
       "$PY" -c 'import json, sys; assert json.load(open(sys.argv[1]))["run"]["engine"]["name"] == "builtin"' "$W/old.json"; then
        ok "a read-only v6 file (no engine_hello): runs, show --json and compare name its runs builtin"
    else not_ok "read-only v6" "rc $rc $rc2 $rc3: $(cat "$ERR") $(cat "$W/old.runs")"; fi
    chmod 755 "$W/old"
else
    ok "read-only v6 case skipped: not root, or no setpriv # SKIP"
fi

finish
