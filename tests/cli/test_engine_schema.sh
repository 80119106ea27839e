#!/usr/bin/env bash
# The engine protocol from python, independently of vtlab's own checker:
# specs/engine-protocol.schema.json against the hello/logits/error headers of
# tests/engines/good.py and tests/reference/engine.py (and bad_hello.py's hello
# must fail it); the reference engine's logits bit-for-bit equal to
# kimi_ref.py --out and within 1e-4 of `vtlab logits`; and every test engine in
# tests/engines/ breaks exactly its own rule (tests/engines/conformance.py).
set -u
VTLAB=${1:-./vtlab}
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
PY=/usr/bin/python3
CFG=model/configs/kimi-linear-tiny.json
TOK=5,17,3,900,42,7,1,512,1023,0,64

# run_py NAME SCRIPT ARGS...: a python check that prints "ok - ..." / "not ok - ..." lines
run_py() {
  local name=$1; shift
  "$PY" "$@" >"$W/py.out" 2>"$W/py.err"; local rc=$?
  while IFS= read -r line; do
    case $line in
      "ok - "*) ok "${line#ok - }" ;;
      "not ok - "*) echo "$line"; FAIL=$((FAIL + 1)) ;;
      "# done") ;;
      "#"*) echo "$line" ;;
    esac
  done <"$W/py.out"
  if ! grep -q "^# done" "$W/py.out"; then not_ok "$name ran to its end" "exit $rc: $(tail -c 600 "$W/py.err")"; fi
}

[ -x "$VTLAB" ] && ok "$VTLAB is an executable" || not_ok "vtlab binary" "$VTLAB is not executable"
"$PY" -c "import jsonschema, numpy" 2>"$ERR" && ok "python3-jsonschema and numpy import" \
  || not_ok "python modules" "$(cat "$ERR") (make deps installs python3-jsonschema)"

expect_exit "synth tiny" 0 "$VTLAB" synth --config $CFG --seed 1 --out "$W/tiny"
M=$W/tiny
expect_exit "vtlab logits" 0 "$VTLAB" logits --model "$M" --tokens $TOK --out "$W/vt.bin"
expect_exit "kimi_ref.py --out" 0 "$PY" tests/reference/kimi_ref.py --model "$M" --tokens $TOK --out "$W/ref.bin"
expect_exit "kimi_ref.py --out (biased, config eps)" 0 "$PY" tests/reference/kimi_ref.py --model "$M" --tokens $TOK \
  --out "$W/ref_bc.bin" --router-weights biased --kv-norm-eps config
expect_exit "kimi_ref.py --dump" 0 "$PY" tests/reference/kimi_ref.py --model "$M" --tokens $TOK --dump "$W/dump.npz"
MODEL_SHA=$(cat "$M/config.json" "$M"/*.safetensors | sha256sum | cut -c1-64)

# --- the schema and the reference engine
run_py "schema checks" - "$M" "$TOK" "$MODEL_SHA" "$W" <<'PY'
import json, sys
sys.path.insert(0, "tests/engines")
import numpy as np
from jsonschema import Draft202012Validator
import vtp
from conformance import schema_errors, bad_requests

model, toks, sha, w = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], sys.argv[3], sys.argv[4]
schema = json.load(open("specs/engine-protocol.schema.json"))

def check(name, cond, why=""):
    print(("ok - %s" % name) if cond else ("not ok - %s: %s" % (name, why)))

def valid(name, msg, definition):
    errs = schema_errors(msg, definition) + schema_errors(msg)      # its definition, and the whole
    check("%s is a valid %s header" % (name, definition), not errs, "; ".join(errs[:4]))

try:
    Draft202012Validator.check_schema(schema)
    check("the schema is a valid draft 2020-12 schema", schema["$schema"].endswith("/2020-12/schema"),
          schema["$schema"])
except Exception as e:
    check("the schema is a valid draft 2020-12 schema", False, e)
check("the schema has one definition per message type",
      all(t in schema["$defs"] for t in ("hello", "forward", "logits", "error")), sorted(schema["$defs"]))

def exercise(name, argv, model=None, env=None):
    c = vtp.Client(argv, env=env, model=model, timeout=60)
    try:
        valid(name + " hello", c.hello, "hello")
        T = 5
        ids = np.arange(T, dtype="<i4") * 3
        req = {"type": "forward", "id": 3, "tokens": T, "capture": False, "payload_bytes": 4 * T}
        valid(name + " request", req, "forward")
        c.send(req, ids.tobytes())
        h, _ = c.read_frame()
        valid(name + " logits", h, "logits")
        if c.hello["capture"]:
            r = c.forward(ids, capture=True)
            valid(name + " logits (capture)", r.header, "logits")
        c.send_raw(bad_requests(c.hello["model"]["vocab"])[0][1])
        h, _ = c.read_frame()
        valid(name + " error (id null)", h, "error")
        c.send_raw(bad_requests(c.hello["model"]["vocab"])[1][1])
        h, _ = c.read_frame()
        valid(name + " error (id 101)", h, "error")
        return c.hello
    finally:
        rc = c.close()
        check("%s exits 0 when its stdin closes" % name, rc == 0, "exit %s" % rc)

exercise("good.py", ["tests/engines/good.py"])
hello = exercise("reference engine", ["tests/reference/engine.py"], model=model)

# bad_hello.py's hello must fail: the schema is able to say no
c = vtp.Client(["tests/engines/bad_hello.py"])
errs = schema_errors(c.hello, "hello")
c.close()
check("bad_hello.py's hello fails the schema (%s)" % (errs[0] if errs else ""), errs, "it validates")
for what, edit in (("protocol 2", lambda h: h.update(protocol=2)),
                   ("a 63-hex sha256", lambda h: h["model"].update(sha256=h["model"]["sha256"][:63])),
                   ("uppercase sha256", lambda h: h["model"].update(sha256=h["model"]["sha256"].upper())),
                   ("knob type float", lambda h: h["knobs"][0].update(type="float")),
                   ("layer_kinds without /", lambda h: h["model"].update(layer_kinds="KKKMKKKM")),
                   ("layer_kinds with X", lambda h: h["model"].update(layer_kinds="KKKX/DEEE")),
                   ("a knob without read", lambda h: h["knobs"][0].pop("read"))):
    h = json.loads(json.dumps(hello))
    edit(h)
    check("a hello with %s fails the schema" % what, schema_errors(h, "hello"), "it validates")

# the reference engine: identity, knobs, logits
check("reference engine: model.sha256 is the vtlab model hash", hello["model"]["sha256"] == sha,
      "%s vs %s" % (hello["model"]["sha256"], sha))
check("reference engine: layer kinds KKKMKKKM/DEEEEEEE", hello["model"]["layer_kinds"] == "KKKMKKKM/DEEEEEEE",
      hello["model"]["layer_kinds"])
T = len(toks)
ref = np.fromfile(w + "/ref.bin", "<f4").reshape(T, -1)
vt = np.fromfile(w + "/vt.bin", "<f4").reshape(T, -1)
with vtp.Client(["tests/reference/engine.py", "--model", model], model=None, timeout=120) as c:
    r = c.forward(toks, capture=True)
check("reference engine (--model) == kimi_ref.py --out bit for bit (T=%d)" % T, np.array_equal(r.logits, ref),
      "max |diff| %.3g" % float(np.abs(r.logits - ref).max()))
d = float(np.abs(r.logits - vt).max())
check("reference engine vs vtlab logits: max |diff| %.3g <= 1e-4" % d, d <= 1e-4, "max |diff| %.3g" % d)
dump = np.load(w + "/dump.npz")
L = hello["model"]["n_layers"]
after_ffn = all(np.array_equal(r.residuals[i, 1], dump["L%d.resid" % i].astype("<f4")) for i in range(L))
prev = [dump["embed"]] + [dump["L%d.resid" % i] for i in range(L - 1)]
after_attn = all(np.array_equal(r.residuals[i, 0], (prev[i] + dump["L%d.mixer_out" % i]).astype("<f4"))
                 for i in range(L))
check("reference engine residuals [L][2][T][H] == kimi_ref's dump (after attention add, after FFN add)",
      after_attn and after_ffn, "attn %s ffn %s" % (after_attn, after_ffn))
env = {"REF_ROUTER_WEIGHTS": "biased", "REF_KV_NORM_EPS": "config"}
ref_bc = np.fromfile(w + "/ref_bc.bin", "<f4").reshape(T, -1)
with vtp.Client(["tests/reference/engine.py"], env=env, model=model, timeout=120) as c:
    kn = {k["name"]: (k["value"], k["read"]) for k in c.hello["knobs"]}
    r2 = c.forward(toks)
check("reference engine reports REF_ROUTER_WEIGHTS=biased REF_KV_NORM_EPS=config read",
      kn == {"REF_ROUTER_WEIGHTS": ("biased", True), "REF_KV_NORM_EPS": ("config", True)}, kn)
check("reference engine (biased, config eps) == kimi_ref.py --router-weights biased --kv-norm-eps config",
      np.array_equal(r2.logits, ref_bc), "max |diff| %.3g" % float(np.abs(r2.logits - ref_bc).max()))
print("# done")
PY

# --- every test engine breaks its own rule and no other (good.py: none)
run_py "conformance matrix" - <<'PY'
import sys
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, "tests/engines")
import conformance as cf

E = "tests/engines/"
# engine, the rule it must break, its env; the trigger-off env under which it must pass the rest
CASES = [("good.py", None, {}, None),
         ("bad_hello.py", "hello", {}, None),
         ("bad_knob_noop.py", "knob-numeric", {}, None),
         ("unread_knob.py", "knob-read", {}, None),
         ("bad_nondeterministic.py", "deterministic", {}, None),
         ("bad_prefix.py", "prefix", {}, None),
         ("bad_probes.py", "probes", {}, None),
         ("bad_crash_on_bad_request.py", "bad-request", {}, None),
         ("bad_nan.py", "finite", {}, None),
         ("bad_shape.py", "shape", {}, None),
         ("bad_order.py", "order", {}, None),
         ("slow.py", "timeout", {}, {"SLOW_SECONDS": "0"}),
         ("crash_mid.py", "stays-up", {}, {"CRASH_AFTER": "1000"})]
rules = dict(cf.RULES)

def run(case):
    name, broken, env, off = case
    eng = cf.Engine([E + name], env, timeout=20.0)
    if off is None:
        return case, cf.check(eng)
    res = cf.check(cf.Engine([E + name], off, timeout=20.0))        # the rest, trigger off
    res[broken] = None
    try:
        res[broken] = rules[broken](eng)
    except Exception as e:  # noqa: BLE001
        res[broken] = "%s: %s" % (type(e).__name__, e)
    return case, res

with ThreadPoolExecutor(4) as ex:
    for (name, broken, env, off), res in ex.map(run, CASES):
        others = {r: why for r, why in res.items() if r != broken and why is not None}
        if broken is None:
            print(("ok - %s keeps all %d rules" % (name, len(res))) if not others else
                  ("not ok - %s breaks %s" % (name, others)))
            continue
        if res[broken] is None:
            print("not ok - %s does not break %s" % (name, broken))
        else:
            print("ok - %s breaks %s: %s" % (name, broken, res[broken].splitlines()[0][:160]))
        print(("ok - %s keeps the other %d rules%s" % (name, len(res) - 1, " (with %s)" % off if off else ""))
              if not others else ("not ok - %s also breaks %s" % (name, others)))
# crash_mid: the message reaches stderr, CRASH_AFTER counts
import vtp
c = vtp.Client([E + "crash_mid.py"], env={"CRASH_AFTER": "3"}, timeout=20)
n = 0
try:
    for i in range(5):
        c.forward([1, 2])
        n += 1
except vtp.EngineDied:
    pass
rc = c.close()
print(("ok - crash_mid.py CRASH_AFTER=3: 3 answers, then exit %s with its message on stderr" % rc)
      if n == 3 and rc not in (0, None) and "simulated crash" in c.stderr() else
      "not ok - crash_mid.py CRASH_AFTER=3: %d answers, exit %s, stderr %r" % (n, rc, c.stderr()[-200:]))
print("# done")
PY

finish
