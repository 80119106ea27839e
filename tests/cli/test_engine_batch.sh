#!/usr/bin/env bash
# test_engine_batch.sh — several sequences in one forward request (issue 32
# item 3; docs/engine-protocol.md, "Several sequences in one request"). An
# engine that declares max_batch gets requests of up to that many sequences;
# one that does not (or VTLAB_ENGINE_BATCH=0) gets one sequence per request;
# and a run records the same numbers either way:
#   - vtlab's model: the builtin engine in process, `vtlab engine` with
#     batches and `vtlab engine` one sequence per request give identical
#     logits hashes (run and per sequence), top-1, assertions, verdicts, probe
#     records and layer divergence on the bf16-stream design over mixed lengths;
#   - a python engine (tests/engines/batch.py, fake.py's model) with batches
#     of up to 4, of 1, and good.py (no max_batch): the same numbers;
#   - an engine that declares max_batch and answers a batch wrongly (fewer
#     sequences; the batch run as one sequence) fails its run cleanly;
#   - a hello with a max_batch out of range is a bad hello (exit 2);
#   - the batched headers conform to specs/engine-protocol.schema.json.
# What vtlab sent is logged by tests/engines/tap.py, between vtlab and the engine.
#
# Usage (from the repository root): bash tests/cli/test_engine_batch.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-ebatch.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset VTLAB_BATCH_ROWS VTLAB_ENGINE_BATCH VTLAB_ENGINE_AHEAD
E=$PWD/tests/engines
PY=/usr/bin/python3
q() { sqlite3 "$1" "$2"; }

# --- vtlab's model: the bf16-stream design on mixed lengths (as tests/cli/test_batch.sh)
"$PY" - "$W" "$VTLAB" "$E" <<'PY'
import json, random, sys
w, vtlab, e_dir = sys.argv[1:4]
e = json.load(open("experiments/bf16-stream.json"))
r = random.Random(32)
lens = [1, 2, 7, 31, 32, 33, 67] + [r.randint(1, 70) for _ in range(23)]
e["dataset"] = {"inline": [[r.randint(3, 1023) for _ in range(n)] for n in lens]}
e["score"] = "all"
e["divergence"]["sequences"] = 6
json.dump(e, open(w + "/builtin.json", "w"))
e["engine"] = [e_dir + "/tap.py", w + "/served.log", vtlab, "engine"]
json.dump(e, open(w + "/served.json", "w"))
e["engine"] = [e_dir + "/tap.py", w + "/one.log", vtlab, "engine"]
json.dump(e, open(w + "/one.json", "w"))
PY
"$VTLAB" run "$W/builtin.json" --db "$W/builtin.db" >"$W/builtin.out" 2>&1
"$VTLAB" run "$W/served.json" --db "$W/served.db" >"$W/served.out" 2>&1
VTLAB_ENGINE_BATCH=0 "$VTLAB" run "$W/one.json" --db "$W/one.db" >"$W/one.out" 2>&1

runs() { q "$1" "select r.arm, r.status, r.logits_sha256, c.top1_k, c.top1_n, r.assertions_ok from runs r left join comparisons c on c.run_id = r.id order by r.arm"; }
seqs() { q "$1" "select r.arm, s.seq, s.logits_sha256, s.n_pos from run_sequences s join runs r on r.id = s.run_id order by r.arm, s.seq"; }
probes() { q "$1" "select r.arm, p.idx, p.site, p.layer, p.dtype, p.src_dtype, p.calls, p.rows, p.bytes_per_row, p.src_row_bytes, p.dst_row_bytes, p.converting, p.violations, p.rows_unwritten, p.detail from probes p join runs r on r.id = p.run_id order by r.arm, p.idx"; }
div() { q "$1" "select r.arm, d.layer, d.site, d.rel_l2 from layer_divergence d join runs r on r.id = d.run_id order by r.arm, d.layer, d.site"; }
verdicts() { q "$1" "select r.arm, v.verdict, v.k, v.n from verdicts v join runs r on r.id = v.run_id order by r.arm"; }
# same NAME A B: every recorded number of A equals B's
same() {
    local f
    for f in runs seqs probes div verdicts; do
        if [ -z "$($f "$2")" ] || [ "$($f "$2")" != "$($f "$3")" ]; then
            not_ok "$1: $f" "$(diff <($f "$2") <($f "$3") | head -4 | tr '\n' ' ') $(tail -2 "${3%.db}.out" 2>/dev/null)"
            return
        fi
    done
    ok "$1: identical logits hashes (run and per sequence), top-1, assertions, verdicts, probe records, layer divergence"
}
if [ "$(q "$W/builtin.db" "select count(*) from runs where status = 'FINISHED'")" = 4 ]; then ok "builtin: 4 runs"
else not_ok "builtin" "$(tail -3 "$W/builtin.out")"; fi
same "vtlab engine with batches vs the builtin engine" "$W/builtin.db" "$W/served.db"
same "vtlab engine one sequence per request (VTLAB_ENGINE_BATCH=0) vs the builtin engine" "$W/builtin.db" "$W/one.db"
MB=$(q "$W/served.db" "select min(json_extract(engine_hello, '$.max_batch')) from runs")
if [ -n "$MB" ] && [ "$MB" -gt 1 ]; then ok "vtlab engine's hello declares max_batch $MB"
else not_ok "max_batch" "the stored hello says '$MB'"; fi
# the tap's log: one line "SEQUENCES TOKENS" per request
if [ -s "$W/served.log" ] && awk -v mb="${MB:-1}" '$1 > 1 { multi++ } $1 > mb { bad++ } END { exit !(multi > 0 && !bad) }' "$W/served.log"; then
    ok "vtlab sent batches to it: $(awk '$1 > 1' "$W/served.log" | wc -l) of $(wc -l < "$W/served.log") requests carried several sequences (up to $(sort -n "$W/served.log" | tail -1 | cut -d' ' -f1))"
else not_ok "batches sent" "$(sort -n "$W/served.log" 2>/dev/null | uniq -c | tail -3 | tr '\n' ' ')"; fi
if [ -s "$W/one.log" ] && awk '$1 != 1 { bad = 1 } END { exit bad }' "$W/one.log"; then
    ok "VTLAB_ENGINE_BATCH=0: one sequence per request ($(wc -l < "$W/one.log") requests)"
else not_ok "VTLAB_ENGINE_BATCH=0" "$(sort -n "$W/one.log" 2>/dev/null | tail -1)"; fi

# --- a python engine: batch.py (max_batch 4 or 1) and good.py (none) on fake.py's model
cat > "$W/fake.json" <<JSON
{"id": "fakebatch", "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"inline": [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14], [15, 16], [1, 2, 3, 4, 5, 6, 7, 8, 9],
                        [20, 21], [30], [40, 41, 42], [50, 51, 52, 53, 54]]},
 "score": "all", "top_k": 4, "reference": "ref", "engine": "builtin",
 "arms": [{"name": "ref"}, {"name": "scaled", "knobs": {"FAKE_SCALE": 2}}],
 "metrics": ["top1_agreement", "kl", "layer_divergence"], "divergence": {"sequences": 3, "tolerance": 0.02},
 "decision": {"metric": "top1_agreement", "threshold": 0.5, "direction": ">="}}
JSON
# fake_exp NAME ENGINE_JSON: $W/NAME.json, the experiment above through that engine
fake_exp() {
    "$PY" -c 'import json, sys; e = json.load(open(sys.argv[1])); e["engine"] = json.loads(sys.argv[2]); json.dump(e, open(sys.argv[3], "w"))' \
        "$W/fake.json" "$2" "$W/$1.json"
}
fake_exp p4 "{\"argv\": [\"$E/batch.py\"], \"env\": {\"BATCH_LOG\": \"$W/p4.log\"}}"
fake_exp p1 "{\"argv\": [\"$E/batch.py\"], \"env\": {\"BATCH_LOG\": \"$W/p1.log\", \"BATCH_MAX\": \"1\"}}"
fake_exp good "[\"$E/good.py\"]"
"$VTLAB" run "$W/p4.json" --db "$W/p4.db" >"$W/p4.out" 2>&1
"$VTLAB" run "$W/p1.json" --db "$W/p1.db" >"$W/p1.out" 2>&1
"$VTLAB" run "$W/good.json" --db "$W/good.db" >"$W/good.out" 2>&1
if [ "$(q "$W/p1.db" "select count(*) from runs where status = 'FINISHED'")" = 2 ]; then ok "batch.py max_batch 1: 2 runs"
else not_ok "batch.py max_batch 1" "$(tail -3 "$W/p1.out")"; fi
same "batch.py with batches of up to 4 vs max_batch 1" "$W/p1.db" "$W/p4.db"
same "good.py (no max_batch) vs batch.py max_batch 1" "$W/p1.db" "$W/good.db"
if awk '$1 > 1 { multi++ } $1 > 4 { bad++ } END { exit !(multi > 0 && !bad) }' "$W/p4.log"; then
    ok "batch.py max_batch 4: requests of $(cut -d' ' -f1 "$W/p4.log" | sort -un | tr '\n' ' ')sequences, never more than 4"
else not_ok "batch.py requests" "$(tr '\n' ' ' < "$W/p4.log")"; fi
if [ -s "$W/p1.log" ] && awk '$1 != 1 { bad = 1 } END { exit bad }' "$W/p1.log"; then ok "batch.py max_batch 1: one sequence per request"
else not_ok "max_batch 1" "$(tr '\n' ' ' < "$W/p1.log")"; fi

# --- an engine that declares max_batch and answers a batch wrongly: its run FAILS
for mode in fewer joined; do
    fake_exp "bad-$mode" "[\"$E/batch.py\"]"
    "$PY" - "$W/bad-$mode.json" "$E/bad_batch.py" "$mode" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
e["arms"][1] = {"name": "bad", "engine": {"argv": [sys.argv[2]], "env": {"BAD_BATCH": sys.argv[3]}}}
json.dump(e, open(sys.argv[1], "w"))
PY
    expect_exit "bad_batch.py BAD_BATCH=$mode: the sweep exits 1 (a run failed)" 1 "$VTLAB" run "$W/bad-$mode.json" --db "$W/bad-$mode.db"
    st=$(q "$W/bad-$mode.db" "select group_concat(arm || '=' || status, ' ') from (select arm, status from runs order by arm)")
    why=$(q "$W/bad-$mode.db" "select coalesce(error, '') from runs where arm = 'bad'")
    if [ "$st" = "bad=FAILED ref=FINISHED" ] && echo "$why" | grep -q "sequences"; then
        ok "... the bad arm FAILED, the reference FINISHED; the reason: $(echo "$why" | cut -c1-150)"
    else not_ok "bad_batch $mode" "$st; $why"; fi
    if [ "$(q "$W/bad-$mode.db" "select count(*) from run_sequences s join runs r on r.id = s.run_id where r.arm = 'bad'")" = 0 ]; then
        ok "... and none of its logits were scored"
    else not_ok "bad_batch $mode scored" "run_sequences rows for the failed run"; fi
done

# --- a max_batch out of range is a bad hello: exit 2, nothing written
for mb in 0 65537 '"4"'; do
    fake_exp mb "{\"argv\": [\"$E/batch.py\"], \"env\": {\"BATCH_MAX_RAW\": \"${mb//\"/\\\"}\"}}"
    expect_exit "a hello with max_batch $mb: exit 2" 2 "$VTLAB" run "$W/mb.json" --db "$W/mb.db"
    stderr_has "... naming the member" "hello: max_batch: expected an integer 1..65536"
    if [ ! -e "$W/mb.db" ]; then ok "... nothing written"; else not_ok "max_batch $mb" "a database was written"; rm -f "$W/mb.db"; fi
done

# --- the headers of a batch against the schema; vtlab engine's batched answer equals its single ones
"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out "$W/m" >/dev/null 2>&1
if "$PY" - "$VTLAB" "$W/m" <<'PY'
import json, sys
sys.path.insert(0, "tests/engines")
import numpy as np
import jsonschema
import vtp
v = jsonschema.Draft202012Validator(json.load(open("specs/engine-protocol.schema.json")))
errs = []
def valid(msg, what):
    errs.extend("%s: %s" % (what, e.message) for e in v.iter_errors(msg))
def invalid(msg, what):
    if not list(v.iter_errors(msg)):
        errs.append("%s validates" % what)
seqs = [[5, 6, 7], [8], [9, 10, 11, 12, 13]]
env = {"VT_KIMI_BF16_STREAM": "1"}
with vtp.Client([sys.argv[1], "engine"], env=env, model=sys.argv[2], probe="audit", timeout=60) as c:
    valid(c.hello, "hello")
    r = c.forward_batch(seqs, capture=True)
    one = [c.forward(s, capture=True) for s in seqs]
req = {"type": "forward", "id": 0, "tokens": 9, "sequences": [3, 1, 5], "capture": True, "payload_bytes": 36}
valid(req, "batched request")
valid(r.header, "batched logits")
for what, edit in (("sequences []", {"sequences": []}), ("a length 0", {"sequences": [3, 0, 6]}),
                   ("a length that is not an integer", {"sequences": [3, 1.5, 4.5]})):
    invalid(dict(req, **edit), "a request with " + what)
invalid(dict(c.hello, max_batch=0), "a hello with max_batch 0")
invalid(dict(c.hello, max_batch=65537), "a hello with max_batch 65537")
if not np.array_equal(r.logits, np.concatenate([o.logits for o in one])):
    errs.append("batched logits differ from one request per sequence")
if not all(np.array_equal(a, b.residuals) for a, b in zip(r.residuals, one)):
    errs.append("batched residuals differ")
merged = []
for o in one:
    vtp.merge_records(merged, o.probes)
if r.probes != merged or not merged:
    errs.append("batched probe records differ: %s vs %s" % (r.probes[:1], merged[:1]))
print("\n".join(errs))
sys.exit(1 if errs else 0)
PY
then ok "vtlab engine: a batch of 3 (capture, audit) gives the bytes of 3 requests (logits, residuals, merged probes); the batched headers conform to the schema, bad ones do not"
else not_ok "batched headers / vtlab engine" "see above"; fi

finish
