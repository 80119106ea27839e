#!/usr/bin/python3
"""conformance.py - the conformance rules of docs/engine-protocol.md checked from python with
vtp.Client, independently of `vtlab engine-check` (tests/cli/test_engine_schema.sh uses it to
prove that good.py passes every rule and that each broken test engine breaks its own rule and
no other).

    conformance.py [--model DIR] [--timeout S] ENGINE [ENV=VALUE ...]
        runs every rule on ENGINE; prints "ok - ..." / "not ok - ..." per rule; exit 1 if any
        rule is broken.

Each rule is a function rule(engine) -> None when kept, or a string saying how it was broken.
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vtp  # noqa: E402

SCHEMA_PATH = os.path.join(HERE, "..", "..", "specs", "engine-protocol.schema.json")


def schema_errors(msg, definition=None):
    """Messages of every way msg fails the schema (as a whole, or one of its $defs)."""
    from jsonschema import Draft202012Validator
    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    if definition is not None:
        schema = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/" + definition}
    v = Draft202012Validator(schema)
    return ["%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(top)", e.message)
            for e in v.iter_errors(msg)]


class Engine:
    """How to start one engine: argv, extra env, model dir, client timeout (s)."""

    def __init__(self, argv, env=None, model=None, timeout=20.0, grace=2.0):
        self.argv, self.env, self.model, self.timeout, self.grace = list(argv), dict(env or {}), model, timeout, grace

    def start(self, **env):
        e = dict(self.env)
        e.update(env)
        return vtp.Client(self.argv, env=e, model=self.model, timeout=self.timeout, grace=self.grace)


def tokens_for(c, n, seed=1):
    return list(np.random.default_rng(seed).integers(0, c.hello["model"]["vocab"], n))


def lenient_logits(c, toks, capture=False):
    """The logits of one forward, decoded with the shape the response itself announces and no
    other check (so that a rule sees only its own property)."""
    r = c.forward(toks, capture=capture, check=False)
    if r.header.get("type") != "logits":
        raise vtp.EngineError("answered %r: %s" % (r.header.get("type"), r.header.get("message")))
    T, V = int(r.header.get("tokens", 0)), int(r.header.get("vocab", 0))
    return np.frombuffer(r.payload, dtype="<f4", count=T * V).reshape(T, V)


def _close(c):
    if c is not None:
        c.close()


# ----------------------------------------------------------------------------- the rules


def rule_hello(eng):
    """hello: the first frame, valid against the schema's hello definition."""
    try:
        c = eng.start()
    except vtp.EngineError as e:
        return "no hello: %s" % e
    try:
        errs = schema_errors(c.hello, "hello")
        return "hello fails the schema: %s" % "; ".join(errs) if errs else None
    finally:
        _close(c)


def rule_knob_numeric(eng):
    """Every numeric knob the engine reports read at the value set changes the logits."""
    c = eng.start()
    try:
        toks = tokens_for(c, 6)
        base = lenient_logits(c, toks)
        knobs = c.hello["knobs"]
    finally:
        _close(c)
    for k in knobs:
        if not k.get("numeric"):
            continue
        if k["type"] == "bool":
            alts = ["0", "1"]
        elif k["type"] == "enum":
            alts = list(k["values"])
        elif k["type"] == "int":
            lo, hi = k["values"][0].split("..")
            alts = [lo, hi]
        else:
            continue
        alts = [a for a in alts if a != k["value"]][:1]
        for a in alts:
            c = eng.start(**{k["name"]: a})
            try:
                rk = next(x for x in c.hello["knobs"] if x["name"] == k["name"])
                if not rk.get("read") or rk.get("value") != a:
                    continue                   # not taken: rule_knob_read's business
                other = lenient_logits(c, toks)
            finally:
                _close(c)
            if other.shape == base.shape and np.array_equal(other, base, equal_nan=True):
                return "numeric knob %s: %s=%s and %s=%s give bit-identical logits" % (
                    k["name"], k["name"], k["value"], k["name"], a)
    return None


def rule_knob_read(eng):
    """A knob set in the environment comes back read, with the value set."""
    c = eng.start()
    try:
        knobs = c.hello["knobs"]
    finally:
        _close(c)
    env = {}
    for k in knobs:
        if k["type"] in ("bool", "enum"):
            alts = [v for v in k["values"] if v != k["default"]]
        elif k["type"] == "int":
            lo, hi = k["values"][0].split("..")
            alts = [v for v in (hi, lo) if v != k["default"]]
        else:
            alts = [k["default"] + "x"]
        if alts:
            env[k["name"]] = alts[0]
    c = eng.start(**env)
    try:
        for k in c.hello["knobs"]:
            if k["name"] in env and (not k.get("read") or k.get("value") != env[k["name"]]):
                return "%s=%s set: hello says read %s, value %r" % (k["name"], env[k["name"]], k.get("read"),
                                                                   k.get("value"))
    finally:
        _close(c)
    return None


def rule_deterministic(eng):
    """deterministic true: the same request gives bit-identical logits (same process and a
    second one)."""
    c = eng.start()
    try:
        if not c.hello.get("deterministic"):
            return None
        toks = tokens_for(c, 8)
        a = lenient_logits(c, toks)
        b = lenient_logits(c, toks)
    finally:
        _close(c)
    c = eng.start()
    try:
        d = lenient_logits(c, toks)
    finally:
        _close(c)
    for name, x in (("a repeated request", b), ("another process", d)):
        if x.shape != a.shape or not np.array_equal(x, a, equal_nan=True):
            diff = float(np.nanmax(np.abs(x - a))) if x.shape == a.shape else float("nan")
            return "deterministic true, but %s differs (max |diff| %.3g)" % (name, diff)
    return None


def rule_prefix(eng):
    """Each request runs from an empty state and causally: the rows of a prefix request equal
    the first rows of the longer request (1e-5 relative to max |logit|)."""
    c = eng.start()
    try:
        toks = tokens_for(c, 12, seed=2)
        full = lenient_logits(c, toks)
        scale = max(1.0, float(np.nanmax(np.abs(full))))
        for n in (1, 5, 11):
            p = lenient_logits(c, toks[:n])
            d = float(np.nanmax(np.abs(p - full[:n])))
            if d > 1e-5 * scale:
                return "prefix of %d tokens differs from the 12-token request by %.3g" % (n, d)
    finally:
        _close(c)
    return None


def rule_probes(eng):
    """The logits header (probes included) is valid against the schema's logits definition."""
    c = eng.start()
    try:
        toks = tokens_for(c, 4)
        for cap in ([False, True] if c.hello.get("capture") else [False]):
            r = c.forward(toks, capture=cap, check=False)
            if r.header.get("type") != "logits":
                return "answered %r" % r.header.get("type")
            errs = schema_errors(r.header, "logits")
            if errs:
                return "logits header (capture %s) fails the schema: %s" % (cap, "; ".join(errs[:3]))
    finally:
        _close(c)
    return None


def bad_requests(vocab):
    """(what, frame bytes, the id the error must carry)"""
    def fw(rid, ids, **over):
        p = np.asarray(ids, dtype="<i4").tobytes()
        h = {"type": "forward", "id": rid, "tokens": len(ids), "capture": False, "payload_bytes": len(p)}
        h.update(over)
        return json.dumps(h).encode() + b"\n" + p
    return [("a header that is not JSON", b"this is not json\n", None),
            ("a token id >= vocab", fw(101, [1, vocab]), 101),
            ("a negative token id", fw(102, [-1, 2]), 102),
            ("a payload shorter than tokens", fw(103, [1, 2, 3], tokens=4, payload_bytes=12), 103),
            ("an unknown message type", json.dumps({"type": "frobnicate", "id": 104}).encode() + b"\n", 104),
            ("tokens 0", json.dumps({"type": "forward", "id": 105, "tokens": 0, "capture": False}).encode() + b"\n",
             105)]


def rule_bad_request(eng):
    """A malformed request is answered with an error (its id, or null) and the engine goes on
    serving."""
    c = eng.start()
    try:
        for what, frame, rid in bad_requests(c.hello["model"]["vocab"]):
            try:
                c.send_raw(frame)
                h, _ = c.read_frame()
            except vtp.EngineError as e:
                return "%s: %s" % (what, e)
            if h.get("type") != "error" or h.get("id") != rid:
                return "%s answered %s" % (what, json.dumps(h)[:200])
            errs = schema_errors(h, "error")
            if errs:
                return "%s: error frame fails the schema: %s" % (what, "; ".join(errs))
        try:
            lenient_logits(c, tokens_for(c, 3))
        except vtp.EngineError as e:
            return "no longer serves after the bad requests: %s" % e
    finally:
        _close(c)
    return None


def rule_finite(eng):
    """No NaN or +-Inf among the logits."""
    c = eng.start()
    try:
        lg = lenient_logits(c, tokens_for(c, 7))
    finally:
        _close(c)
    bad = np.argwhere(~np.isfinite(lg))
    return "non-finite logit %r at %s" % (float(lg[tuple(bad[0])]), bad[0].tolist()) if bad.size else None


def rule_shape(eng):
    """logits [tokens][vocab]: tokens the request's, vocab the hello's, payload 4*T*V (plus
    the residuals when announced)."""
    c = eng.start()
    try:
        m = c.hello["model"]
        for T, cap in ((5, False), (3, bool(c.hello.get("capture")))):
            r = c.forward(tokens_for(c, T), capture=cap, check=False)
            h = r.header
            want = 4 * T * m["vocab"] + (4 * m["n_layers"] * 2 * T * m["hidden"] if h.get("residuals") else 0)
            if (h.get("tokens"), h.get("vocab")) != (T, m["vocab"]):
                return "logits [%s, %s] for [%d, %d]" % (h.get("tokens"), h.get("vocab"), T, m["vocab"])
            if h.get("payload_bytes") != want or len(r.payload) != want:
                return "payload %s bytes, expected %d" % (h.get("payload_bytes"), want)
            if h.get("residuals") != cap:
                return "residuals %s for capture %s" % (h.get("residuals"), cap)
    finally:
        _close(c)
    return None


def rule_order(eng):
    """Every response echoes its request's id (ids need not be consecutive)."""
    c = eng.start()
    try:
        for rid in (0, 1, 41, 7):
            r = c.forward(tokens_for(c, 2), rid=rid, check=False)
            if r.header.get("id") != rid:
                return "request %d answered with id %r" % (rid, r.header.get("id"))
    finally:
        _close(c)
    return None


def rule_timeout(eng, timeout=2.0):
    """A response within the timeout (here %g s)."""
    e = Engine(eng.argv, eng.env, eng.model, timeout=timeout, grace=eng.grace)
    c = e.start()
    try:
        lenient_logits(c, tokens_for(c, 3))
    except vtp.EngineTimeout as err:
        return str(err)
    finally:
        c.kill()
    return None


def rule_stays_up(eng, n=6):
    """The engine serves n forwards in a row and exits 0 when its stdin closes."""
    c = eng.start()
    try:
        for i in range(n):
            try:
                lenient_logits(c, tokens_for(c, 3, seed=i))
            except vtp.EngineDied as e:
                return "died at forward %d: %s" % (i + 1, e)
    finally:
        rc = c.close()
    return None if rc == 0 else "exit status %s after stdin closed" % rc


# ----------------------------------------------------------------------------- batches (max_batch)


class NotApplicable(Exception):
    """A rule that does not apply to this engine (check() counts it as kept and says why)."""


ODD_LENGTHS = (3, 1, 7, 5, 13, 9, 15, 11)     # odd, unordered, 1 among them


def batch_max(c):
    """The engine's max_batch; NotApplicable when it declares none (or 1)."""
    mb = c.hello.get("max_batch", 1)
    if mb <= 1:
        raise NotApplicable("the hello %s" % ("says max_batch 1" if "max_batch" in c.hello else "declares no max_batch"))
    return mb


def batch_sequences(c, n, seed, length=None):
    """n sequences of their own random tokens: ODD_LENGTHS in turn, or each of length."""
    rng = np.random.default_rng(seed)
    V = c.hello["model"]["vocab"]
    return [[int(t) for t in rng.integers(0, V, length or ODD_LENGTHS[i % len(ODD_LENGTHS)])] for i in range(n)]


def first_difference(got, want, exact):
    """(position, vocab index) of the first element where got and want differ (bit for bit, or
    beyond 1e-5 of max |want| when not exact), or None."""
    g, w = np.ascontiguousarray(got, dtype="<f4"), np.ascontiguousarray(want, dtype="<f4")
    if g.shape != w.shape:
        return (-1, -1)
    if exact:
        bad = np.argwhere(g.view("<u4") != w.view("<u4"))
    else:
        bad = np.argwhere(np.abs(g.astype(np.float64) - w) > 1e-5 * max(1.0, float(np.abs(w).max())))
    return tuple(int(x) for x in bad[0][:2]) if bad.size else None


def records_by_key(records):
    return {tuple(r[k] for k in vtp.RECORD_KEY): (r["calls"], r["rows"], r["violations"], r["rows_unwritten"],
                                                     r["detail"]) for r in records}


def compare_batch(c, seqs, r, capture, exact):
    """The response r to seqs in one request against each sequence sent alone: logits (and
    residuals), then the probe records. How they differ, or None."""
    alone = [c.forward(s, capture=capture) for s in seqs]
    at = 0
    for i, (s, a) in enumerate(zip(seqs, alone)):
        d = first_difference(r.logits[at:at + len(s)], a.logits, exact)
        if d is not None:
            return ("sequence %d of a request of %d (%d tokens) differs from the same sequence alone, first at "
                    "position %d, vocab index %d" % (i, len(seqs), len(s), d[0], d[1]))
        if capture and first_difference(r.residuals[i].reshape(-1, 1), a.residuals.reshape(-1, 1), exact):
            return "sequence %d of a request of %d: its residuals differ from the same sequence alone" % (i, len(seqs))
        at += len(s)
    got = records_by_key(r.probes)
    want = records_by_key(vtp.merge_records([], [rec for a in alone for rec in a.probes]))
    if got != want:
        key = next(k for k in sorted(set(got) | set(want), key=str) if got.get(k) != want.get(k))
        return ("probe records of a request of %d differ from its sequences' alone (summed) at %s/%s: %s batched, "
                "%s alone" % (len(seqs), key[0], key[1], got.get(key), want.get(key)))
    return None


def rule_batch(eng):
    """max_batch > 1 (docs/engine-protocol.md, "Several sequences in one request"): a request of
    max_batch sequences (at most 16) of odd lengths and one of 2 equal lengths (a swap keeps the
    shapes) each give every sequence the logits it gets alone, bit for bit (within 1e-5 of max
    |logit| when the engine says it is not deterministic), its residuals when it captures, and the
    probe records of the sequences alone summed; both headers valid against the schema; two
    batched requests in flight are answered in order, with the same numbers."""
    c = eng.start()
    try:
        mb = batch_max(c)
        cap, exact = bool(c.hello.get("capture")), bool(c.hello.get("deterministic"))
        batches = [batch_sequences(c, min(mb, 16), 3)] + ([batch_sequences(c, 2, 4, length=5)] if mb > 2 else [])
        results = []
        for seqs in batches:
            r = c.forward_batch(seqs, capture=cap)        # the shape, the echoed sequences, finite
            errs = schema_errors(r.header, "logits")
            if errs:
                return "logits header of a request of %d fails the schema: %s" % (len(seqs), "; ".join(errs[:3]))
            why = compare_batch(c, seqs, r, cap, exact)
            if why:
                return why
            results.append(r)
        return batches_in_flight(c, batches, results)
    finally:
        _close(c)


def batches_in_flight(c, batches, results):
    """The requests of batches written before any answer is read (as vtlab does): answered in
    order, each with the logits it got alone. How not, or None."""
    ids = []
    for seqs in batches:
        ids.append(c.next_id)
        c.next_id += 1
        flat = np.concatenate([np.asarray(s, dtype="<i4") for s in seqs])
        c.send({"type": "forward", "id": ids[-1], "tokens": int(flat.size), "sequences": [len(s) for s in seqs],
                "capture": False}, flat.tobytes())
    for rid, seqs, prev in zip(ids, batches, results):
        h, p = c.read_frame()
        if h.get("type") != "logits" or h.get("id") != rid:
            return "two batched requests in flight: request %d answered %s" % (rid, json.dumps(h)[:200])
        T, V = sum(len(s) for s in seqs), c.hello["model"]["vocab"]
        lg = np.frombuffer(p, dtype="<f4", count=T * V).reshape(T, V) if len(p) >= 4 * T * V else None
        if lg is None or h.get("sequences") != [len(s) for s in seqs] or first_difference(lg, prev.logits, True):
            return "two batched requests in flight: request %d (%d sequences) answered other numbers" % (rid, len(seqs))
    return None


def rule_batch_limit(eng):
    """max_batch > 1: a request of max_batch + 1 sequences, one whose lengths do not sum to its
    tokens and one with a length 0 each get an error with the request's id; serving goes on."""
    c = eng.start()
    try:
        mb = batch_max(c)
        p = lambda n: np.zeros(n, dtype="<i4").tobytes()                # noqa: E731
        bad = [("%d sequences (max_batch %d)" % (mb + 1, mb), {"tokens": mb + 1, "sequences": [1] * (mb + 1)}, p(mb + 1)),
               ("lengths [1,1] for 3 tokens", {"tokens": 3, "sequences": [1, 1]}, p(3)),
               ("a length 0", {"tokens": 2, "sequences": [2, 0]}, p(2))]
        for i, (what, over, payload) in enumerate(bad):
            h = dict({"type": "forward", "id": 201 + i, "capture": False}, **over)
            c.send(h, payload)
            r, _ = c.read_frame()
            if r.get("type") != "error" or r.get("id") != 201 + i:
                return "%s answered %s" % (what, json.dumps(r)[:200])
        try:
            lenient_logits(c, tokens_for(c, 3))
        except vtp.EngineError as e:
            return "no longer serves after the bad batches: %s" % e
    finally:
        _close(c)
    return None


RULES = [("hello", rule_hello), ("knob-numeric", rule_knob_numeric), ("knob-read", rule_knob_read),
         ("deterministic", rule_deterministic), ("prefix", rule_prefix), ("probes", rule_probes),
         ("bad-request", rule_bad_request), ("finite", rule_finite), ("shape", rule_shape),
         ("order", rule_order), ("timeout", rule_timeout), ("stays-up", rule_stays_up),
         ("batch", rule_batch), ("batch-limit", rule_batch_limit)]


def check(eng, skipped=None):
    """{rule name: None or how it was broken}; an exception inside a rule counts as broken. A rule
    that does not apply (NotApplicable) is kept; skipped, when given, gets {rule name: why}."""
    out = {}
    for name, fn in RULES:
        try:
            out[name] = fn(eng)
        except NotApplicable as e:
            out[name] = None
            if skipped is not None:
                skipped[name] = str(e)
        except Exception as e:  # noqa: BLE001
            out[name] = "%s: %s" % (type(e).__name__, e)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("engine")
    ap.add_argument("env", nargs="*")
    a = ap.parse_args(argv)
    env = dict(kv.split("=", 1) for kv in a.env)
    skipped = {}
    res = check(Engine([a.engine], env, a.model, a.timeout), skipped)
    for name, why in res.items():
        note = " (does not apply: %s)" % skipped[name] if name in skipped else ""
        print(("ok - %s: %s%s" % (a.engine, name, note)) if why is None else
              ("not ok - %s: %s: %s" % (a.engine, name, why)))
    return 1 if any(res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
