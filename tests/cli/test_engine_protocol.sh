#!/usr/bin/env bash
# test_engine_protocol.sh — experiments through a command engine (issue 11,
# docs/engine-protocol.md): the builtin model in process and the same model
# served by `vtlab engine` give identical logits hashes, top-1 k/n and probe
# records; what can be wrong with an engine at start-up is bad input (exit 2,
# no database); a knob the engine did not read is a failed expectation that
# the audit flags as R3.
#
# Usage (from the repository root): bash tests/cli/test_engine_protocol.sh ./build/vtlab
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed".
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
TINY=model/configs/kimi-linear-tiny.json
W=$(mktemp -d /tmp/vtlab-engine.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
q() { sqlite3 "$1" "$2"; }

# The shipped bf16-stream experiment, smaller, with the engine ENGINE (JSON).
python3 - "$W" "$VTLAB" <<'PY'
import json, sys
w, vtlab = sys.argv[1], sys.argv[2]
e = json.load(open("experiments/bf16-stream.json"))
e["dataset"]["generate"]["n_sequences"] = 24
json.dump(e, open(w + "/builtin.json", "w"))
e["engine"] = [vtlab, "engine"]
json.dump(e, open(w + "/served.json", "w"))
PY

"$VTLAB" run "$W/builtin.json" --db "$W/a.db" >"$W/a.out" 2>&1
"$VTLAB" run "$W/served.json" --db "$W/b.db" >"$W/b.out" 2>&1
runs() { q "$1" "select r.arm, r.logits_sha256, c.top1_k, c.top1_n, r.assertions_ok from runs r left join comparisons c on c.run_id = r.id order by r.arm"; }
probes() { q "$1" "select r.arm, p.idx, p.site, p.layer, p.dtype, p.src_dtype, p.calls, p.rows, p.bytes_per_row, p.src_row_bytes, p.dst_row_bytes, p.converting, p.violations, p.rows_unwritten, p.detail from probes p join runs r on r.id = p.run_id order by r.arm, p.idx"; }
if [ "$(q "$W/b.db" "select count(*) from runs where status = 'FINISHED'")" = 4 ] && [ "$(runs "$W/a.db")" = "$(runs "$W/b.db")" ]; then
    ok "builtin and 'vtlab engine': the same logits hashes, top-1 k/n and assertion outcomes on all 4 arms"
else
    not_ok "builtin vs served" "$(runs "$W/a.db") // $(runs "$W/b.db") // $(tail -3 "$W/b.out")"
fi
if [ -n "$(probes "$W/a.db")" ] && [ "$(probes "$W/a.db")" = "$(probes "$W/b.db")" ]; then
    ok "builtin and 'vtlab engine': identical probe records ($(probes "$W/a.db" | wc -l) records)"
else
    not_ok "probe records" "$(diff <(probes "$W/a.db") <(probes "$W/b.db") | head -5)"
fi
if [ "$(q "$W/b.db" "select count(*) from runs where backend = 'engine' and json_extract(engine_hello, '$.engine.name') = 'vtlab-builtin' and json_extract(engine_hello, '$.protocol') = 1")" = 4 ] &&
   [ "$(q "$W/a.db" "select count(*) from runs where engine_hello is null")" = 4 ]; then
    ok "each run through an engine stores its hello; builtin runs store none"
else
    not_ok "engine_hello" "$(q "$W/b.db" "select backend, substr(engine_hello, 1, 80) from runs")"
fi
if [ "$(q "$W/a.db" "select group_concat(knob_hash) from runs order by arm")" != "$(q "$W/b.db" "select group_concat(knob_hash) from runs order by arm")" ]; then
    ok "the engine is part of the run identity (knob hashes differ from the builtin's)"
else
    not_ok "identity" "same knob hashes through another engine"
fi

# exp FILE ENGINE_JSON ARM_KNOBS : two arms on the tiny model, the second through ENGINE
exp() {
    cat > "$1" <<JSON
{"id": "eng", "model": {"synth": "$TINY", "seed": 1}, "dataset": {"inline": [[5, 6, 7], [8, 9]]},
 "top_k": 2, "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "other", "engine": $2, "knobs": {$3}}], "metrics": ["top1_agreement"]}
JSON
}
nodb() { if [ ! -e "$1" ]; then ok "$2: no database created"; else not_ok "$2" "$1 exists"; fi; }

exp "$W/typo.json" "[\"$VTLAB\", \"engine\"]" '"VT_KIMI_BF16_STREM": "1"'
expect_exit "a knob the engine does not declare: exit 2" 2 "$VTLAB" run "$W/typo.json" --db "$W/typo.db"
stderr_has "... suggesting the engine's knob (vtlab engine refuses it before its hello)" "did you mean VT_KIMI_BF16_STREAM?"
nodb "$W/typo.db" "unknown knob"

exp "$W/val.json" "[\"$VTLAB\", \"engine\"]" '"VT_KIMI_ROUTER_WEIGHTS": "sideways"'
expect_exit "a value outside the engine's declared values: exit 2" 2 "$VTLAB" run "$W/val.json" --db "$W/val.db"
stderr_has "... naming the allowed values" 'expected one of unbiased|biased'

# an engine that declares an enum it leaves to vtlab to check (vtp.py's own check
# would refuse the value before its hello)
cat >"$W/enum_engine.py" <<PY
#!/usr/bin/python3
import sys
sys.path.insert(0, "$PWD/tests/engines")
import fake, vtp
knobs, scale = fake.make_knobs()
knobs.enum("FAKE_MODE", ["fast", "exact"], "exact", numeric=True, read=False)
sys.exit(vtp.serve(fake.hello("enum_engine", knobs), lambda req: fake.response(req, scale)))
PY
chmod +x "$W/enum_engine.py"
exp "$W/eval.json" "[\"$W/enum_engine.py\"]" '"FAKE_MODE": "exakt"'
expect_exit "a value outside a command engine's enum: exit 2" 2 "$VTLAB" run "$W/eval.json" --db "$W/eval.db"
stderr_has "... naming its values and the one meant" "\"exakt\" is not one of the engine's values (fast|exact) (did you mean exact?)"
nodb "$W/eval.db" "bad enum value"

exp "$W/noexec.json" '["./no/such/engine"]' ''
expect_exit "an engine that cannot be started: exit 2" 2 "$VTLAB" run "$W/noexec.json" --db "$W/noexec.db"
stderr_has "... saying why" "engine ./no/such/engine: cannot start it: No such file or directory"
stderr_has "... and from which directory a relative program was looked for" "(looked for from the current directory $PWD; an engine's argv runs there, or in its \"cwd\")"
nodb "$W/noexec.db" "no such program"

printf '#!/bin/sh\necho "engine: cannot load weights from /nowhere" >&2\nexit 3\n' > "$W/dies.sh"; chmod +x "$W/dies.sh"
exp "$W/dies.json" "[\"$W/dies.sh\"]" ''
expect_exit "an engine that exits before its hello: exit 2" 2 "$VTLAB" run "$W/dies.json" --db "$W/dies.db"
stderr_has "... with its exit status and stderr tail" "(it exited with status 3); its stderr ends: engine: cannot load weights from /nowhere"
nodb "$W/dies.db" "no hello"

printf '#!/bin/sh\necho "{\\"type\\":\\"hello\\",\\"protocol\\":2}"\nsleep 5\n' > "$W/v2.sh"; chmod +x "$W/v2.sh"
exp "$W/v2.json" "[\"$W/v2.sh\"]" ''
expect_exit "a hello of another protocol version: exit 2" 2 "$VTLAB" run "$W/v2.json" --db "$W/v2.db"
stderr_has "... naming the member" "hello: protocol: expected 1"

exp "$W/cwd.json" "{\"argv\": [\"./vtlab-not-here\"], \"cwd\": \"$W/nodir\"}" ''
expect_exit "an engine cwd that does not exist: exit 2" 2 "$VTLAB" run "$W/cwd.json" --db "$W/cwd.db"
stderr_has "... naming it" "cannot start it in $W/nodir"

exp "$W/badspec.json" '{"argv": []}' ''
expect_exit "an empty engine argv: exit 2" 2 "$VTLAB" run "$W/badspec.json" --db "$W/badspec.db"
stderr_has "... naming the field" "arms[1].engine.argv: expected 1..256 argument strings, got 0"

# R3: the builtin registry's test knob is declared and never read.
exp "$W/r3.json" "[\"$VTLAB\", \"engine\"]" '"VT_TEST_IGNORED_KNOB": "1"'
expect_exit "a knob the engine says it did not read: the run fails its assertions (exit 1)" 1 "$VTLAB" run "$W/r3.json" --db "$W/r3.db"
if [ "$(q "$W/r3.db" "select e.site, e.ok from expectations e join runs r on r.id = e.run_id where r.arm = 'other'")" = "knob:VT_TEST_IGNORED_KNOB|0" ]; then
    ok "... recorded as a failed expectation at knob:VT_TEST_IGNORED_KNOB"
else
    not_ok "expectation" "$(q "$W/r3.db" "select * from expectations")"
fi
"$VTLAB" audit --db "$W/r3.db" >"$OUT_FILE" 2>"$ERR"
if grep -q "R3" "$OUT_FILE" && grep -q "did not read" "$OUT_FILE"; then ok "... and the audit flags it as R3"
else not_ok "audit R3" "$(head -c 600 "$OUT_FILE")"; fi

# keep_running false: at most one engine process at a time (each logs its
# start and end; the log must alternate), with the same results.
cat > "$W/logged.sh" <<SH
#!/bin/sh
echo "start \$\$" >> "$W/engines.log"
"$VTLAB" engine
echo "end \$\$" >> "$W/engines.log"
SH
chmod +x "$W/logged.sh"
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
e = json.load(open(w + "/served.json"))
e["engine"] = {"argv": [w + "/logged.sh"], "keep_running": False}
json.dump(e, open(w + "/one.json", "w"))
PY
"$VTLAB" run "$W/one.json" --db "$W/one.db" >"$OUT_FILE" 2>&1
if [ "$(runs "$W/one.db")" = "$(runs "$W/a.db")" ] &&
   awk '{ if ($1 == "start") { if (open) bad = 1; open = 1; n++ } else { if (!open) bad = 1; open = 0 } } END { exit (bad || n < 8) }' "$W/engines.log"; then
    ok "keep_running false: one engine process at a time ($(grep -c start "$W/engines.log") starts for 4 arms), the same results"
else not_ok "keep_running" "$(cat "$W/engines.log" | tr '\n' ' '); $(runs "$W/one.db")"; fi

# vtlab engine's hello and a logits header (with its probe records) against the schema.
"$VTLAB" synth --config "$TINY" --seed 1 --out "$W/m" >/dev/null 2>&1
if /usr/bin/python3 - "$VTLAB" "$W/m" <<'PY'
import json, os, struct, subprocess, sys
import jsonschema
schema = json.load(open("specs/engine-protocol.schema.json"))
v = jsonschema.Draft202012Validator(schema)
env = dict(os.environ, VTP_PROTOCOL="1", VTP_PROBE="audit", VTP_MODEL=sys.argv[2], VT_KIMI_BF16_STREAM="1")
p = subprocess.Popen([sys.argv[1], "engine"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
hello = json.loads(p.stdout.readline())
req = {"type": "forward", "id": 0, "tokens": 3, "capture": True, "payload_bytes": 12}
p.stdin.write((json.dumps(req) + "\n").encode() + struct.pack("<3i", 5, 6, 7)); p.stdin.flush()
resp = json.loads(p.stdout.readline())
p.stdout.read(resp["payload_bytes"])
p.stdin.close(); p.wait()
errs = [e.message for m in (hello, req, resp) for e in v.iter_errors(m)]
sys.exit(1 if errs or not resp["probes"] or not resp["residuals"] else 0)
PY
then ok "vtlab engine's hello, a request and its logits header (probes, residuals) conform to specs/engine-protocol.schema.json"
else not_ok "schema" "see above"; fi

# vtprobe.h is one dependency-free header for C99 and C++11 engines.
printf '#define VTPROBE_IMPLEMENTATION\n#include "vtprobe.h"\nint main(void) { vtp_probes p; memset(&p, 0, sizeof p); p.mode = VTP_ON; vtp_probe_buffer(&p, \"logits\", -1, \"f32\", 1, 4); vtp_probes_free(&p); return 0; }\n' > "$W/h.c"
cp "$W/h.c" "$W/h.cpp"
expect_exit "vtprobe.h compiles as C99 (-pedantic -Werror)" 0 gcc -std=c99 -pedantic -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -Imodel "$W/h.c" -o "$W/h99"
expect_exit "vtprobe.h compiles as C++11 (-pedantic -Werror)" 0 g++ -std=c++11 -pedantic -Wall -Wextra -Werror -Imodel "$W/h.cpp" -o "$W/h11"

finish
