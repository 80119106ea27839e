"""vtp.py - the vtlab engine protocol, version 1 (docs/engine-protocol.md), in python.

Engine side:
    knobs = Knobs()                                   # reads knobs from the environment
    scale = knobs.int("FAKE_SCALE", 1, 4, default=1, numeric=True)
    hello = make_hello("myengine", "0.1", "", sha256, vocab, hidden, n_layers, "KM/DE",
                       knobs=knobs.records, probe_sites=["logits"], capture=False,
                       max_batch=8)                   # optional: up to 8 sequences per request
    serve(hello, forward_fn)                          # forward_fn(req) -> logits | dict
    serve(hello, forward_fn, batch_fn=fn)             # optional: fn(req) for a request of several
                                                      # sequences (else forward_fn per sequence)
Client side (tests):
    with Client(["./engine.py"], env={...}, model=DIR) as c:
        c.hello; r = c.forward([5, 17, 3]); r.logits  # np.float32 [T, V]
        r = c.forward_batch([[5, 17], [3]])           # several sequences in one request
        c.close()                                     # exit status

Frames: HEADER (one line of JSON, <= 1 MiB) '\\n' PAYLOAD (payload_bytes raw bytes, little-endian).
"""
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import numpy as np

PROTOCOL = 1
MAX_HEADER = 1 << 20
MAX_BATCH = 1 << 16          # the largest max_batch a hello may declare


class FrameError(Exception):
    """A frame that is not valid: not JSON, no type, a header over 1 MiB, a bad payload_bytes.
    header: the parsed header when there was one."""

    def __init__(self, message, header=None):
        Exception.__init__(self, message)
        self.header = header


# ----------------------------------------------------------------------------- frames


def encode_frame(header, payload=b""):
    header = dict(header)
    if payload or "payload_bytes" in header:
        header["payload_bytes"] = len(payload)
    line = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return line + b"\n" + bytes(payload)


def write_frame(f, header, payload=b""):
    f.write(encode_frame(header, payload))
    f.flush()


def parse_header(line):
    """bytes of one header line (without the newline) -> dict; FrameError when invalid."""
    if len(line) > MAX_HEADER:
        raise FrameError("header over 1 MiB")
    try:
        h = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FrameError("header is not JSON: %s" % e)
    if not isinstance(h, dict):
        raise FrameError("header is not a JSON object")
    if not isinstance(h.get("type"), str):
        raise FrameError("header has no string member type")
    return h


def payload_size(h):
    n = h.get("payload_bytes", 0)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise FrameError("payload_bytes is not a non-negative integer", h)
    return n


def read_frame(f):
    """Blocking read of one frame from a binary file. Returns (header, payload), or None at a
    clean EOF before the frame. Raises FrameError (header readable but invalid: the payload, if
    any, is NOT consumed) or EOFError (the stream ended inside the frame)."""
    line = f.readline(MAX_HEADER + 1)
    if not line:
        return None
    if not line.endswith(b"\n"):
        if len(line) > MAX_HEADER:
            raise FrameError("header over 1 MiB")
        raise EOFError("stream ended inside a header")
    h = parse_header(line[:-1])
    n = payload_size(h)
    parts, got = [], 0
    while got < n:                       # in chunks: a huge payload_bytes allocates nothing up front
        chunk = f.read(min(n - got, 1 << 24))
        if not chunk:
            raise EOFError("payload shorter than announced (%d of %d bytes)" % (got, n))
        parts.append(chunk)
        got += len(chunk)
    return h, b"".join(parts)


# ----------------------------------------------------------------------------- model identity


def model_sha256(model_dir):
    """The vtlab model hash: sha256 over config.json, then every *.safetensors file of the
    directory in byte order of their names."""
    h = hashlib.sha256()
    names = sorted((n for n in os.listdir(model_dir) if n.endswith(".safetensors") and len(n) > 12),
                   key=lambda n: n.encode("utf-8", "surrogateescape"))
    if not names:
        raise FileNotFoundError("%s: no *.safetensors file" % model_dir)
    for n in ["config.json"] + names:
        with open(os.path.join(model_dir, n), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------- engine side


def die(msg, code=2):
    sys.stderr.write("%s: %s\n" % (os.path.basename(sys.argv[0]), msg))
    sys.stderr.flush()
    sys.exit(code)


class Knobs:
    """The engine's knob registry, read from the environment. Each method returns the value in
    use and appends the hello record. A value outside `values` ends the engine before its hello
    (exit 2: a start-up failure, which vtlab reports as bad input)."""

    def __init__(self, env=None):
        self.env = os.environ if env is None else env
        self.records = []

    def _add(self, name, typ, values, default, numeric, read):
        text = self.env.get(name) if read else None
        value = default if text is None else text
        self.records.append({"name": name, "type": typ, "values": values, "default": default,
                             "numeric": bool(numeric), "value": value, "read": bool(read)})
        return value

    def bool(self, name, default=False, numeric=True, read=True):
        v = self._add(name, "bool", ["0", "1"], "1" if default else "0", numeric, read)
        if v not in ("0", "1"):
            die("%s=%s: a bool knob is 0 or 1" % (name, v))
        return v == "1"

    def enum(self, name, values, default, numeric=True, read=True):
        v = self._add(name, "enum", list(values), default, numeric, read)
        if v not in values:
            die("%s=%s: not one of %s" % (name, v, "|".join(values)))
        return v

    def int(self, name, lo, hi, default, numeric=True, read=True):
        v = self._add(name, "int", ["%d..%d" % (lo, hi)], str(default), numeric, read)
        try:
            n = int(v, 10)
        except ValueError:
            die("%s=%s: not an integer" % (name, v))
        if not lo <= n <= hi:
            die("%s=%s: outside %d..%d" % (name, v, lo, hi))
        self.records[-1]["value"] = str(n)
        return n

    def string(self, name, default="", numeric=True, read=True):
        return self._add(name, "string", [], default, numeric, read)


def make_hello(name, version, commit, sha256, vocab, hidden, n_layers, layer_kinds="", knobs=(),
               probe_sites=(), faults=(), deterministic=True, capture=False, max_batch=None):
    """max_batch: the most sequences one forward request may carry (None: the member is left out,
    which means 1)."""
    h = {"type": "hello", "protocol": PROTOCOL,
         "engine": {"name": name, "version": version, "commit": commit},
         "model": {"sha256": sha256, "vocab": int(vocab), "hidden": int(hidden), "n_layers": int(n_layers),
                   "layer_kinds": layer_kinds},
         "knobs": list(knobs), "probe_sites": list(probe_sites), "faults": list(faults),
         "deterministic": bool(deterministic), "capture": bool(capture)}
    if max_batch is not None:
        h["max_batch"] = int(max_batch)
    return h


def buffer_record(site, layer, dtype, rows, row_bytes, calls=1):
    """A buffer probe record (vtp_record): src_dtype "", no copy, never a violation."""
    return {"site": site, "layer": int(layer), "dtype": dtype, "src_dtype": "", "calls": int(calls),
            "rows": int(rows), "bytes_per_row": int(row_bytes), "src_row_bytes": int(row_bytes),
            "dst_row_bytes": int(row_bytes), "converting": 0, "violations": 0, "rows_unwritten": -1,
            "detail": ""}


RECORD_KEY = ("site", "layer", "dtype", "src_dtype", "bytes_per_row", "src_row_bytes", "dst_row_bytes", "converting")


def merge_records(into, records):
    """Adds probe records into the list `into` as vtp_probes_merge does (vtprobe.h): one record per
    key (RECORD_KEY), in the order keys first appear; calls, rows and violations summed,
    rows_unwritten summed over the audited ones (-1 while none is), the first detail kept.
    Returns into."""
    index = {tuple(r[k] for k in RECORD_KEY): r for r in into}
    for rec in records:
        key = tuple(rec[k] for k in RECORD_KEY)
        r = index.get(key)
        if r is None:
            r = dict(rec, calls=0, rows=0, violations=0, rows_unwritten=-1, detail="")
            index[key] = r
            into.append(r)
        for k in ("calls", "rows", "violations"):
            r[k] += rec[k]
        if rec["rows_unwritten"] >= 0:
            r["rows_unwritten"] = max(r["rows_unwritten"], 0) + rec["rows_unwritten"]
        if not r["detail"] and rec["detail"]:
            r["detail"] = rec["detail"]
    return into


class Request:
    """A forward request. sequences: the lengths of its sequences ([T] for a request of one);
    batched: the header carried `sequences` (the response must echo it)."""

    def __init__(self, rid, tokens, capture, header, sequences=None):
        self.id = rid
        self.tokens = tokens          # np.int32 [T], the sequences one after another
        self.capture = capture
        self.header = header
        self.batched = sequences is not None
        self.sequences = list(sequences) if sequences is not None else [int(tokens.size)]

    def split(self):
        """One Request per sequence (same id and capture), in order."""
        out, at = [], 0
        for n in self.sequences:
            out.append(Request(self.id, self.tokens[at:at + n], self.capture, self.header))
            at += n
        return out


class BadRequest(Exception):
    def __init__(self, rid, message):
        Exception.__init__(self, message)
        self.id = rid


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def check_sequences(h, rid, T, max_batch):
    """The `sequences` member of a request (None when absent); BadRequest when it is not a list of
    at most max_batch positive lengths that sum to tokens."""
    seqs = h.get("sequences")
    if seqs is None:
        return None
    if not isinstance(seqs, list) or not seqs or not all(_is_int(n) and n >= 1 for n in seqs):
        raise BadRequest(rid, "sequences: expected an array of positive lengths")
    if len(seqs) > max_batch:
        raise BadRequest(rid, "sequences: %d sequences, more than max_batch %d" % (len(seqs), max_batch))
    if sum(seqs) != T:
        raise BadRequest(rid, "sequences: lengths sum to %d, expected tokens %d" % (sum(seqs), T))
    return seqs


def check_request(h, payload, vocab, can_capture, max_batch=1):
    """A forward request -> Request; BadRequest(id or None, message) when it cannot be served."""
    rid = h.get("id") if _is_int(h.get("id")) and h.get("id") >= 0 else None
    if h.get("type") != "forward":
        raise BadRequest(rid, "type %r: this engine serves forward requests only" % (h.get("type"),))
    if rid is None:
        raise BadRequest(None, "id: not a non-negative integer")
    T = h.get("tokens")
    if not _is_int(T) or T < 1:
        raise BadRequest(rid, "tokens: not a positive integer")
    capture = h.get("capture", False)
    if not isinstance(capture, bool):
        raise BadRequest(rid, "capture: not a boolean")
    if capture and not can_capture:
        raise BadRequest(rid, "capture: this engine's hello says capture false")
    if len(payload) != 4 * T:
        raise BadRequest(rid, "payload: %d bytes for %d tokens (expected %d)" % (len(payload), T, 4 * T))
    seqs = check_sequences(h, rid, T, max_batch)
    ids = np.frombuffer(payload, dtype="<i4").astype(np.int32)
    bad = np.nonzero((ids < 0) | (ids >= vocab))[0]
    if bad.size:
        raise BadRequest(rid, "tokens: id %d >= vocab %d" % (int(ids[bad[0]]), vocab)
                         if ids[bad[0]] >= 0 else "tokens: negative id %d" % int(ids[bad[0]]))
    return Request(rid, ids, capture, h, seqs)


# A header override (forward_fn's "header") that leaves the member out (a test engine misbehaving).
OMIT = object()


def logits_frame(req, logits, residuals=None, probes=(), header=None):
    """The logits response to req: header dict and payload bytes. header: members to override
    (OMIT: leave the member out).
    residuals: one array [n_layers][2][T][hidden], or, for a request of several sequences, a list
    of them, one per sequence (the payload carries them one after another). A batched request's
    response echoes its `sequences`."""
    lg = np.ascontiguousarray(logits, dtype="<f4")
    payload = lg.tobytes()
    if residuals is not None:
        parts = residuals if isinstance(residuals, (list, tuple)) else [residuals]
        payload += b"".join(np.ascontiguousarray(r, dtype="<f4").tobytes() for r in parts)
    h = {"type": "logits", "id": req.id, "tokens": int(lg.shape[0]), "vocab": int(lg.shape[1]),
         "residuals": residuals is not None, "payload_bytes": len(payload), "probes": list(probes)}
    if req.batched:
        h["sequences"] = list(req.sequences)
    if header:
        h.update(header)
        for k in [k for k, v in h.items() if v is OMIT]:
            del h[k]
    return h, payload


def forward_each(req, forward_fn):
    """A request of several sequences through a one-sequence forward_fn: the logits one after
    another, residuals one array per sequence, probe records merged in sequence order (the same
    records as one request per sequence would give, summed)."""
    logits, resid, probes = [], [], []
    for sub in req.split():
        out = forward_fn(sub)
        if not isinstance(out, dict):
            out = {"logits": out}
        logits.append(np.asarray(out["logits"]))
        if out.get("residuals") is not None:
            resid.append(out["residuals"])
        merge_records(probes, out.get("probes", ()))
    return {"logits": np.concatenate(logits, axis=0), "residuals": resid if req.capture and resid else None,
            "probes": probes}


def serve(hello, forward_fn, stdin=None, stdout=None, on_bad=None, batch_fn=None):
    """Writes hello, then answers forward requests until stdin closes; returns 0.

    forward_fn(req) returns the logits (array [T, V]) or a dict with "logits" and optionally
    "residuals" ([n_layers][2][T][hidden]), "probes" (records), "header" (header members to
    override). A malformed request, or an exception (not SystemExit) from forward_fn, is
    answered with an error frame and the loop goes on. on_bad(id, message), when given, is
    called first (a test engine may use it to misbehave).

    A hello with max_batch > 1 accepts requests of several sequences (req.sequences): batch_fn(req)
    answers them as forward_fn does (logits [T, V] of all sequences one after another, residuals
    a list with one array per sequence, the probe records of all of them); without batch_fn,
    forward_fn runs once per sequence (forward_each)."""
    fin = stdin if stdin is not None else sys.stdin.buffer
    fout = stdout if stdout is not None else sys.stdout.buffer
    if stdout is None:
        sys.stdout = sys.stderr          # stray prints must not corrupt the protocol stream
    vocab = hello["model"]["vocab"]
    can_capture = bool(hello.get("capture"))
    # a max_batch that is no positive integer is still sent as given (vtlab must refuse that hello,
    # which tests declare on purpose); the engine then takes one sequence per request
    mb = hello.get("max_batch", 1)
    max_batch = mb if _is_int(mb) and mb >= 1 else 1
    write_frame(fout, hello)

    def error(rid, message):
        if on_bad is not None:
            on_bad(rid, message)
        write_frame(fout, {"type": "error", "id": rid, "message": str(message)[:4000]})

    while True:
        try:
            fr = read_frame(fin)
        except FrameError as e:          # the header line is consumed; nothing else can be
            rid = e.header.get("id") if e.header is not None else None
            error(rid if _is_int(rid) and rid >= 0 else None, "malformed header: %s" % e)
            continue
        except EOFError as e:
            sys.stderr.write("vtp: %s; exiting\n" % e)
            return 0
        if fr is None:
            return 0
        h, payload = fr
        try:
            req = check_request(h, payload, vocab, can_capture, max_batch)
        except BadRequest as e:
            error(e.id, str(e))
            continue
        try:
            if req.batched and batch_fn is not None:
                out = batch_fn(req)
            elif req.batched:
                out = forward_each(req, forward_fn)
            else:
                out = forward_fn(req)
            if not isinstance(out, dict):
                out = {"logits": out}
            rh, rp = logits_frame(req, out["logits"], out.get("residuals"), out.get("probes", ()),
                                  out.get("header"))
            frame = encode_frame(rh, rp)
        except Exception as e:  # noqa: BLE001 - any failure of one request is that request's error
            error(req.id, "%s: %s" % (type(e).__name__, e))
            continue
        fout.write(frame)
        fout.flush()


# ----------------------------------------------------------------------------- client side


class EngineError(Exception):
    """The engine broke the protocol (bad frame, wrong id/type/shape, NaN, death, timeout)."""


class EngineDied(EngineError):
    pass


class EngineTimeout(EngineError):
    pass


class ErrorResponse(EngineError):
    def __init__(self, header):
        EngineError.__init__(self, "engine answered error: %s" % header.get("message"))
        self.header = header


class Result:
    def __init__(self, header, logits, residuals, payload):
        self.header = header
        self.logits = logits              # np.float32 [T, V]
        self.residuals = residuals        # np.float32 [L, 2, T, H] (a batch: a list of them) or None
        self.probes = header.get("probes")
        self.sequences = header.get("sequences")
        self.payload = payload


class Client:
    """Runs an engine as vtlab does: argv in cwd with the environment plus env, VTP_PROTOCOL=1,
    VTP_MODEL (when model is given) and VTP_PROBE; reads the hello (self.hello)."""

    def __init__(self, argv, env=None, cwd=None, model=None, probe="on", timeout=600.0, grace=5.0):
        e = dict(os.environ)
        e.update(env or {})
        e["VTP_PROTOCOL"] = "1"
        if model is not None:
            e["VTP_MODEL"] = os.path.abspath(model)
        if probe is not None:
            e["VTP_PROBE"] = probe
        self.timeout = timeout
        self.grace = grace
        self.next_id = 0
        self.buf = b""
        self.stderr_tail = b""
        self.proc = subprocess.Popen(list(argv), cwd=cwd, env=e, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._err_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._err_thread.start()
        self.hello = None
        try:
            h, _ = self.read_frame()
            if h.get("type") != "hello":
                raise EngineError("first frame is %r, not hello" % h.get("type"))
        except BaseException:
            self.kill()
            raise
        self.hello = h

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _drain_stderr(self):
        for chunk in iter(lambda: self.proc.stderr.read1(4096), b""):
            self.stderr_tail = (self.stderr_tail + chunk)[-4096:]

    def stderr(self):
        """The last 4 KiB of the engine's stderr (complete once the engine has exited)."""
        if self.proc.poll() is not None:
            self._err_thread.join(2.0)
        return self.stderr_tail.decode("utf-8", "replace")

    def _fill(self, deadline):
        fd = self.proc.stdout.fileno()
        left = deadline - time.monotonic()
        if left <= 0:
            raise EngineTimeout("no complete response within %g s" % self.timeout)
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            raise EngineTimeout("no complete response within %g s" % self.timeout)
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            rc = self.proc.wait(timeout=self.grace)
            raise EngineDied("engine closed stdout (exit status %s); stderr: %s" % (rc, self.stderr()[-500:]))
        self.buf += chunk

    def read_frame(self, timeout=None):
        """One frame (header, payload) within timeout; EngineError otherwise."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while b"\n" not in self.buf[:MAX_HEADER + 1]:
            if len(self.buf) > MAX_HEADER:
                raise EngineError("header over 1 MiB")
            self._fill(deadline)
        i = self.buf.index(b"\n")
        try:
            h = parse_header(self.buf[:i])
            n = payload_size(h)
        except FrameError as e:
            raise EngineError("invalid frame: %s" % e)
        while len(self.buf) < i + 1 + n:
            self._fill(deadline)
        payload = self.buf[i + 1:i + 1 + n]
        self.buf = self.buf[i + 1 + n:]
        return h, payload

    def send(self, header, payload=b""):
        """One frame; payload_bytes is set from the payload unless the header already has one
        (a test may announce a wrong size on purpose)."""
        if "payload_bytes" not in header and payload:
            header = dict(header, payload_bytes=len(payload))
        self.send_raw(json.dumps(header, separators=(",", ":")).encode("utf-8") + b"\n" + bytes(payload))

    def send_raw(self, data):
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise EngineDied("engine closed stdin; stderr: %s" % self.stderr()[-500:])

    def forward(self, tokens, capture=False, rid=None, check=True):
        """Sends one forward request and reads its response. check: raise EngineError for
        anything vtlab would fail the run for (error response, other id/type, wrong shape,
        payload size, NaN/Inf). Returns a Result."""
        return self._forward(np.asarray(tokens, dtype="<i4"), None, capture, rid, check)

    def forward_batch(self, sequences, capture=False, rid=None, check=True):
        """One forward request carrying several sequences (docs/engine-protocol.md, "Several
        sequences in one request"); the same checks as forward, and the response must echo the
        request's sequences. Result.logits: [sum of lengths, V]; Result.residuals: a list with
        one [L, 2, T_i, H] array per sequence, or None; Result.sequences: the lengths."""
        seqs = [np.asarray(s, dtype="<i4") for s in sequences]
        return self._forward(np.concatenate(seqs), [int(s.size) for s in seqs], capture, rid, check)

    def _forward(self, ids, seqs, capture, rid, check):
        if rid is None:
            rid = self.next_id
        self.next_id = rid + 1
        payload = ids.tobytes()
        head = {"type": "forward", "id": rid, "tokens": int(ids.size), "capture": bool(capture),
                "payload_bytes": len(payload)}
        if seqs is not None:
            head["sequences"] = seqs
        self.send(head, payload)
        h, p = self.read_frame()
        if not check:
            return Result(h, None, None, p)
        if h.get("type") == "error":
            raise ErrorResponse(h)
        if h.get("type") != "logits":
            raise EngineError("response of type %r" % h.get("type"))
        if h.get("id") != rid:
            raise EngineError("response id %r to request %d" % (h.get("id"), rid))
        T, V = int(ids.size), self.hello["model"]["vocab"]
        if h.get("tokens") != T or h.get("vocab") != V:
            raise EngineError("logits shape [%r, %r], expected [%d, %d]" % (h.get("tokens"), h.get("vocab"), T, V))
        if seqs is not None and h.get("sequences") != seqs:
            raise EngineError("sequences %r, expected %r" % (h.get("sequences"), seqs))
        n = 4 * T * V
        res = None
        want = n
        if h.get("residuals"):
            L, H = self.hello["model"]["n_layers"], self.hello["model"]["hidden"]
            want = n + 4 * L * 2 * T * H
        if len(p) != want:
            raise EngineError("payload %d bytes, expected %d" % (len(p), want))
        logits = np.frombuffer(p, dtype="<f4", count=T * V).reshape(T, V)
        if h.get("residuals"):
            if seqs is None:
                res = np.frombuffer(p, dtype="<f4", offset=n).reshape(L, 2, T, H)
            else:
                res, at = [], n
                for t in seqs:
                    res.append(np.frombuffer(p, dtype="<f4", offset=at, count=L * 2 * t * H).reshape(L, 2, t, H))
                    at += 4 * L * 2 * t * H
        if not np.all(np.isfinite(logits)):
            raise EngineError("NaN or Inf among the logits")
        if not isinstance(h.get("probes"), list):
            raise EngineError("probes: not a list")
        return Result(h, logits, res, p)

    def close(self):
        """Closes stdin, waits grace seconds, then SIGTERM, then SIGKILL 1 s later (this pid
        only). Returns the exit status (negative: killed by that signal)."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=self.grace)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self._err_thread.join(2.0)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except (BrokenPipeError, OSError):
                pass
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        return self.close()
