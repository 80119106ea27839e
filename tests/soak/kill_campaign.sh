#!/usr/bin/env bash
# kill_campaign.sh — the kill campaign as a bounded soak test (issue 13).
#
#   bash tests/soak/kill_campaign.sh VTLAB [--kills N] [--seed S] [--work DIR] [--keep]
#
# On a small fixture of its own (a synthetic tiny model, two small experiments
# with a reference arm, one of them with 2 repeats, a decision rule and
# per-layer divergence; a ledger with one claim and the repo's defects), all in
# a work dir (default: a fresh mktemp dir, removed at the end unless --keep):
#
#  1. runs an uninterrupted baseline into base.db (sweep, reopen, report);
#  2. N times: starts one of sweep | two concurrent sweeps | report | nightly |
#     reopen (on a fresh copy of the ledger) on campaign.db and SIGKILLs it
#     (the first of the two sweeps) at a seeded point: after a random delay
#     (a fraction of the operation's measured length), or on an event — the
#     K-th write to the database files (inside claims and finishing
#     transactions), while the K-th gnuplot child runs (report writes), the
#     instant reopen's new claim is visible in the ledger (between its two
#     claim writes, if it makes two), or at the K-th change in the ledger dirs.
#     A report or nightly is sometimes sent SIGTERM instead, while the K-th
#     gnuplot child runs (point "SIGTERM, gnuplot #K running"): an
#     interruption the command sees, which must leave nothing behind at once.
#     After each kill it checks:
#       integrity  PRAGMA integrity_check = ok and no foreign-key violation;
#       complete   every FINISHED run has all its rows (docs/schema.md): knobs,
#                  probes, expectations, metrics (tokens_per_s, and
#                  perplexity, nll_mean when asked for), one logits_topk row per sequence, its logits
#                  hash and assertion result; a non-reference run one comparison
#                  against a FINISHED repeat-0 reference run, its layer_divergence
#                  rows (when the experiment measures divergence) and its verdict
#                  (when it has a decision rule); a reference repeat > 0 a
#                  comparison with repeat 0 and its divergence rows but no
#                  verdict; the reference's repeat 0 none of the three (it IS the
#                  reference). Every count equals the baseline's run of the same
#                  identity. A run that is not FINISHED has no result rows;
#       nightly-outputs  nightly-out/junit.xml and nightly.md are not older than
#                  the newest nightly recorded PASSED/CONFOUNDED/REGRESSED (else CI publishes
#                  an earlier night's results under its status);
#       outputs    no file a consumer would read as real (report/nightly output,
#                  ledger claims, derived experiments) is truncated or invalid;
#                  leftover *.tmp files are counted, not failed;
#       ledger     `vtlab specs check` passes on the ledger in use;
#       orphans    nothing of the killed process's session outlives it (alive
#                  50 ms after it with no fatal signal pending, as
#                  PR_SET_PDEATHSIG would send, or alive at 2 s); after a
#                  SIGTERM, nothing of its session alive when it has exited
#                  (it reaps its gnuplot before it dies);
#       term-tmp   after a SIGTERM, none of its chart images (*.png.PID.tmp,
#                  *.svg.PID.tmp) is left, without waiting for a rerun;
#       stale-tmp  a report or nightly that ran to its end left no *.PID.tmp
#                  of a dead process in its plots/ and plots/src/ (it removes
#                  what killed ones left there);
#     and for two concurrent sweeps, that the surviving one exits 0. A problem
#     that persists (an incomplete run, a bad file) fails the kill that exposed
#     it and is noted ("still there") after later kills, not failed again.
#  3. resumes without kills (sweep, then reopen on a fresh ledger copy, then a
#     nightly) and checks equality with the baseline: the same set of FINISHED
#     run identities, the same logits hashes per identity, the same top-1 k/n
#     and verdict per identity, the same pair tests; nothing left RUNNING;
#     every killed nightly marked FAILED by the next one.
#
# Prints one line per kill ("ok - kill I/N OP: SIGKILL at T ms (point): checks")
# with "#   ..." lines under a failing one, and ends with "N passed, M failed"
# (each check is a case). Exit 1 when any case failed, 2 on bad usage.
# Needs python3 (sqlite3 module, ctypes for inotify) and Linux /proc.
set -u

usage() { echo "usage: bash tests/soak/kill_campaign.sh VTLAB [--kills N] [--seed S] [--work DIR] [--keep]" >&2; exit 2; }
[ $# -ge 1 ] || usage
VTLAB=$1; shift
KILLS=20; SEED=1; WORK=""; KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in --kills|--seed|--work) [ $# -ge 2 ] || usage ;; esac
    case "$1" in
        --kills) KILLS=${2:-}; shift 2 ;;
        --seed) SEED=${2:-}; shift 2 ;;
        --work) WORK=${2:-}; shift 2 ;;
        --keep) KEEP=1; shift ;;
        *) usage ;;
    esac
done
case "$KILLS" in ''|*[!0-9]*) usage ;; esac
case "$SEED" in ''|*[!0-9]*) usage ;; esac
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
[ -x "$VTLAB" ] || { echo "kill_campaign: $VTLAB is not an executable" >&2; exit 2; }
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=/usr/bin/python3
TINY="$REPO/model/configs/kimi-linear-tiny.json"

if [ -n "$WORK" ]; then
    mkdir -p "$WORK" && W=$(cd "$WORK" && pwd) || exit 2
    [ -z "$(ls -A "$W")" ] || { echo "kill_campaign: --work $W is not empty" >&2; exit 2; }
    KEEP=1
else
    W=$(mktemp -d "${TMPDIR:-/tmp}/vtlab-soak.XXXXXX") || exit 2
fi
cleanup() { [ "$KEEP" = 1 ] || rm -rf "$W"; }
trap cleanup EXIT
cd "$W" || exit 2
export VT_THREADS=${VT_THREADS:-1}   # results do not depend on it; kinder to a shared machine
HANG=1800   # hang guard (seconds) for every command: generous, never a limit on real work
T_START=$(date +%s)

# ----------------------------------------------------------------- helper
H="$W/soak.py"
cat > "$H" <<'PYEOF'
import ctypes, glob, json, os, random, select, shlex, signal, sqlite3, struct, subprocess, sys, time
import xml.etree.ElementTree as ET

def out(**kv):
    for k, v in kv.items():
        print("%s=%s" % (k, shlex.quote(str(v))))

# ------------------------------------------------------------------ plan
def plan(n, seed):
    """One line per kill: op mode param frac. Ops cycle through seeded
    shuffles of all five, so every N >= 5 covers each. The first is two
    concurrent sweeps on the fresh database (its creation, and two writers
    racing for the same identities)."""
    r = random.Random(seed)
    ops = ["sweep", "sweep2", "report", "nightly", "reopen"]
    seq = []
    while len(seq) < n:
        o = ops[:]
        r.shuffle(o)
        seq += o
    if n:
        seq.remove("sweep2")
        seq.insert(0, "sweep2")
    for i, op in enumerate(seq[:n]):
        frac = r.random()
        if i == 0:
            print(op, "time", 0, "%.4f" % frac); continue
        mode, param = "time", 0
        if r.random() < 0.4:
            if op in ("sweep", "sweep2"):
                mode, param = "write", r.randint(1, 80)
            elif op == "report":
                mode, param = r.choice(["gnuplot", "term"]), r.randint(1, 6)
            elif op == "nightly":
                mode, param = r.choice([("write", r.randint(1, 80)), ("gnuplot", r.randint(1, 6)),
                                        ("term", r.randint(1, 6))])
            elif op == "reopen":
                mode, param = "claim", r.choice([0, 0, 1, 2, 3, 4])
        print(op, mode, param, "%.4f" % frac)

# ---------------------------------------------------------------- launch
libc = ctypes.CDLL(None, use_errno=True)
IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x2, 0x8, 0x40, 0x80, 0x100, 0x200

def inotify(dirpaths, mask):
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    for d in dirpaths:
        if fd < 0 or libc.inotify_add_watch(fd, d.encode(), mask) < 0:
            raise OSError(ctypes.get_errno(), "inotify " + d)
    return fd

def inotify_names(fd):
    names = []
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return names
    i = 0
    while i + 16 <= len(data):
        wd, mask, cookie, ln = struct.unpack_from("iIII", data, i)
        names.append(data[i + 16:i + 16 + ln].rstrip(b"\0").decode(errors="replace"))
        i += 16 + ln
    return names

def stat_fields(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    return {"state": rest[0], "ppid": int(rest[1]), "sid": int(rest[3]), "comm": s[s.index("(") + 1:s.rindex(")")]}

def children(pid):
    kids = []
    for t in glob.glob("/proc/%d/task/*/children" % pid):
        try:
            with open(t) as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids

def session_members(sid):
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        st = stat_fields(int(d))
        if st and st["sid"] == sid and st["state"] not in ("Z", "X"):
            found.append((int(d), st["comm"]))
    return found

FATAL = (1 << 8) | (1 << 14) | (1 << 0) | (1 << 1)   # SIGKILL, SIGTERM, SIGHUP, SIGINT pending

def dying(pid):
    """A fatal signal is pending: the process was told of its parent's death (PR_SET_PDEATHSIG)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("SigPnd", "ShdPnd") and int(v.strip(), 16) & FATAL:
                    return True
    except (OSError, ValueError):
        return True   # gone
    return False

def survivors(sid):
    """Processes of the killed process's session that outlive it: alive 50 ms
    after it was reaped with no fatal signal on its way, or alive at 2 s.
    Watched up to 5 s (how long they live is reported), then killed."""
    t0 = time.monotonic()
    orphans, life = {}, {}
    while True:
        el = time.monotonic() - t0
        alive = session_members(sid)
        for pid, comm in alive:
            life[(pid, comm)] = el
            if (el >= 0.05 and not dying(pid)) or el >= 2.0:
                orphans[(pid, comm)] = True
        if not alive or el > 5.0:
            break
        time.sleep(0.002)
    for pid, comm in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid, comm in life:   # reparented to us (the subreaper): reap
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return ["%s[%d] lived %s after it" % (comm, pid, ">5 s (killed)" if (pid, comm) in alive else
                                           "%d ms" % (life[(pid, comm)] * 1000)) for pid, comm in orphans]

def launch(argv):
    """launch DELAY_MS MODE PARAM COPIES LOGPREFIX WATCHDIR -- CMD...
    Starts COPIES copies of CMD (each in its own session), SIGKILLs the first
    at the kill point, checks for survivors of its session, waits the others.
    Interrupted itself (Ctrl-C, SIGTERM), it kills what it started."""
    procs = []
    def stop(sig, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        launch_(argv, procs)
    except KeyboardInterrupt:
        for q in procs:
            for pid, _ in session_members(q.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        sys.exit(130)

def launch_(argv, procs):
    delay_ms, mode, param, copies, logp, watch = float(argv[0]), argv[1], int(argv[2]), int(argv[3]), argv[4], argv[5]
    cmd = argv[7:]
    PR_SET_CHILD_SUBREAPER = 36
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)   # orphans come to us, not to init
    fd = None
    if mode == "write":
        fd = inotify([watch], IN_MODIFY)
    elif mode == "claim":
        # the claims dir and the ledger dir above it (a commit may swap the
        # claims dir whole): PARAM 0 kills the instant a new claim is visible,
        # K > 0 at the K-th change in either
        fd = inotify([watch, os.path.dirname(watch)],
                     IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE)
        before = set(os.listdir(watch))
    t0 = time.monotonic()
    for c in range(copies):
        lf = open("%s.%d.log" % (logp, c), "wb")
        procs.append(subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True))
        lf.close()
    p = procs[0]
    hang = float(os.environ.get("SOAK_HANG", "1800"))
    seen, gp, point, kill = 0, set(), "", False
    while True:
        now = time.monotonic()
        if p.poll() is not None:
            break
        if now - t0 > hang:
            kill, point = True, "hang guard"; break
        if mode == "time":
            left = t0 + delay_ms / 1000.0 - now
            if left <= 0:
                kill, point = True, "random point"; break
            try:
                p.wait(timeout=min(left, 0.05))
            except subprocess.TimeoutExpired:
                pass
        elif mode == "write":
            r, _, _ = select.select([fd], [], [], 0.05)
            if r:
                seen += sum(1 for n in inotify_names(fd) if n.startswith("campaign.db"))
                if seen >= param:
                    kill, point = True, "database write #%d" % seen; break
        elif mode == "claim":
            r, _, _ = select.select([fd], [], [], 0.05)
            if r:
                seen += len(inotify_names(fd))
                if param == 0:
                    try:
                        new = [n for n in os.listdir(watch) if n.endswith(".json") and n not in before]
                    except OSError:
                        new = []
                    if new:
                        kill, point = True, "new claim %s visible" % new[0]; break
                elif seen >= param:
                    kill, point = True, "ledger change #%d" % seen; break
        elif mode in ("gnuplot", "term"):
            for c in children(p.pid):
                st = stat_fields(c)
                if st and st["comm"] == "gnuplot" and c not in gp:
                    gp.add(c)
            if len(gp) >= param:
                kill, point = True, "gnuplot #%d running" % len(gp); break
            time.sleep(0.0005)
    ms = int((time.monotonic() - t0) * 1000)
    sig = signal.SIGTERM if mode == "term" else signal.SIGKILL
    if kill:
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
    rc = p.wait()
    leftover = []
    if mode == "term":
        # an interruption it sees: it dies of it (report) or ends (nightly), and
        # by then it has reaped its gnuplot and removed the chart's images
        was_killed = kill and (rc == -signal.SIGTERM or rc >= 0)
        alive = session_members(p.pid) if was_killed else []
        orphans = ["%s[%d] alive when it had exited" % (comm, pid) for pid, comm in alive]
        survivors(p.pid)   # (kill and reap them, so that the next kill starts clean)
        leftover = [os.path.relpath(f) for f in glob.glob(os.path.join(watch, "*.%d.tmp" % p.pid))
                    if f.endswith((".png.%d.tmp" % p.pid, ".svg.%d.tmp" % p.pid))]
    else:
        was_killed = kill and rc == -signal.SIGKILL
        # survivors of the killed process: its session, 3 s grace (a child may be told
        # of its parent's death and exit on its own)
        orphans = survivors(p.pid) if was_killed else []
    prc = []
    for q in procs[1:]:
        try:
            prc.append(q.wait(timeout=hang))
        except subprocess.TimeoutExpired:
            q.kill(); prc.append("hung")
    out(killed=int(was_killed), ms=ms, rc=rc, point=point, orphans=", ".join(orphans), partner_rc=" ".join(map(str, prc)),
        termed=int(mode == "term" and was_killed), leftover=" ".join(leftover))

# ---------------------------------------------------------------- checks
TABLES = ["run_knobs", "probes", "expectations", "metrics", "logits_topk", "comparisons", "layer_divergence", "verdicts"]
RESULT_TABLES = ["probes", "expectations", "metrics", "logits_topk", "logits_full", "comparisons", "layer_divergence",
                 "verdicts"]

def connect(db):
    c = sqlite3.connect(db, timeout=60)
    c.execute("PRAGMA busy_timeout = 60000")
    return c

def specs(expdirs):
    """experiment id -> (has a decision rule, measures divergence, n_sequences, metric names a
    FINISHED run must have), from the experiment files run (docs/experiments.md defaults)."""
    m = {}
    for d in expdirs:
        for f in sorted(glob.glob(os.path.join(d, "*.json"))):
            try:
                j = json.load(open(f))
            except Exception:
                continue
            ds = j.get("dataset", {})
            nseq = ds.get("generate", {}).get("n_sequences") if "generate" in ds else len(ds.get("inline", []))
            mets = j.get("metrics")
            div = (mets is None or "layer_divergence" in mets) and j.get("divergence", {}).get("sequences", 4) > 0
            need = {"tokens_per_s"} | ({"perplexity", "nll_mean"} if mets is None or "perplexity" in mets else set())
            m[j["id"]] = ("decision" in j, div, nseq, need)
    return m

def counts(c, run_id):
    return {t: c.execute("SELECT count(*) FROM %s WHERE run_id = ?" % t, (run_id,)).fetchone()[0] for t in TABLES}

def base_counts(base):
    b = connect(base)
    m = {}
    for rid, e, a, rep, kh in b.execute("SELECT id, experiment, arm, repeat_idx, knob_hash FROM runs"
                                        " WHERE status = 'FINISHED' ORDER BY id"):
        m.setdefault((e, a, rep, kh), counts(b, rid))
    return m

def check(name, ok, detail):
    print("CHECK %s %s %s" % (name, "PASS" if ok else "FAIL", detail.replace("\n", " ")))

KNOWN = None   # --known FILE: problems already reported by an earlier kill (one key a line)

def check_new(name, problems, ok_detail):
    """problems: (key, text). With --known, a problem already reported is
    noted, not failed again: each defect fails the kill that exposed it."""
    known = set()
    if KNOWN and os.path.exists(KNOWN):
        known = set(open(KNOWN).read().split("\n"))
    new = [t for k, t in problems if k not in known]
    old = sorted({k for k, t in problems if k in known})
    if KNOWN and new:
        with open(KNOWN, "a") as f:
            f.write("".join("%s\n" % k for k, t in problems if k not in known))
    still = "still there, reported before: %s" % ", ".join(old[:6]) if old else ""
    if not new:
        check(name, True, "; ".join(x for x in (ok_detail, still) if x))
    else:
        check(name, False, "%d problem(s): %s%s" % (len(new), " | ".join(new[:6]), "; " + still if still else ""))

def check_db(db, base, expdirs, nightly_out=None):
    if not os.path.exists(db):
        check("integrity", True, "no database yet"); check("complete", True, "no database yet"); return
    c = connect(db)
    try:
        ic = [r[0] for r in c.execute("PRAGMA integrity_check")]
        fk = c.execute("PRAGMA foreign_key_check").fetchall()
        check("integrity", ic == ["ok"] and not fk,
              "" if ic == ["ok"] and not fk else "integrity_check: %s; foreign_key_check: %s" % ("; ".join(ic[:3]), fk[:3]))
    except sqlite3.Error as ex:
        check("integrity", False, "sqlite: %s" % ex); check("complete", False, "unreadable"); return
    sp, bc = specs(expdirs), base_counts(base)
    bad = []
    n = 0
    rows = c.execute("SELECT id, experiment, arm, repeat_idx, knob_hash, is_reference, n_sequences, n_tokens,"
                     " logits_sha256, assertions_ok, finished_at FROM runs WHERE status = 'FINISHED'").fetchall()
    for rid, e, a, rep, kh, isref, nseq, ntok, lh, aok, fin in rows:
        n += 1
        why = []
        k = counts(c, rid)
        dec, div, spn, need = sp.get(e, (None, None, None, {"tokens_per_s"}))
        if lh is None or aok is None or fin is None:
            why.append("logits hash/assertions/finished_at NULL")
        names = {r[0] for r in c.execute("SELECT name FROM metrics WHERE run_id = ?", (rid,))}
        if not need <= names:
            why.append("metrics %s" % sorted(names))
        if k["run_knobs"] == 0 or k["probes"] == 0:
            why.append("%d knobs, %d probes" % (k["run_knobs"], k["probes"]))
        tk = c.execute("SELECT count(*), coalesce(sum(n_pos), 0) FROM logits_topk WHERE run_id = ?", (rid,)).fetchone()
        if tk != (nseq, ntok) or (spn is not None and nseq != spn):
            why.append("logits_topk %d rows/%d positions for %s sequences/%s tokens" % (tk[0], tk[1], nseq, ntok))
        if isref and rep == 0:
            want = {"comparisons": 0, "layer_divergence": 0, "verdicts": 0}
        else:
            want = {"comparisons": 1, "verdicts": 0 if isref or dec is False else 1}
            if div is False:
                want["layer_divergence"] = 0
            elif k["layer_divergence"] == 0:
                why.append("no layer_divergence rows")
        for t, v in want.items():
            if k[t] != v:
                why.append("%d %s (want %d)" % (k[t], t, v))
        if k["comparisons"]:
            ref = c.execute("SELECT r.status, r.is_reference, r.repeat_idx, r.experiment FROM comparisons x"
                            " JOIN runs r ON r.id = x.reference_run_id WHERE x.run_id = ?", (rid,)).fetchone()
            if not ref or ref != ("FINISHED", 1, 0, e):
                why.append("compared with %s, not a FINISHED repeat-0 reference of %s" % (ref, e))
        b = bc.get((e, a, rep, kh))
        if b is None:
            why.append("identity not in the baseline")
        else:
            # metrics aside: a nightly's runs may carry more (host measurements) than a sweep's
            diff = ["%s %d (baseline %d)" % (t, k[t], b[t]) for t in TABLES if k[t] != b[t] and t != "metrics"]
            if diff:
                why.append("differs from the baseline: " + ", ".join(diff))
        if why:
            bad.append(("run %d" % rid, "run %d %s/%s #%d%s: %s" % (rid, e, a, rep, " (reference)" if isref else "",
                                                                    "; ".join(why))))
    partial = []
    for t in RESULT_TABLES:
        try:
            r = c.execute("SELECT count(*), group_concat(DISTINCT x.run_id) FROM %s x JOIN runs r ON r.id = x.run_id"
                          " WHERE r.status <> 'FINISHED'" % t).fetchone()
        except sqlite3.OperationalError:
            continue
        if r[0]:
            partial.append(("partial %s %s" % (t, r[1]), "%s rows of unfinished runs %s" % (t, r[1])))
    bad += partial
    check_new("complete", bad, "%d FINISHED" % n)
    # a nightly recorded as done has written its outputs: junit.xml and
    # nightly.md are not older than the newest PASSED, CONFOUNDED or REGRESSED nightly
    # (a newer, interrupted nightly's may have replaced them: noted, not failed)
    if nightly_out:
        import re
        last = c.execute("SELECT max(id) FROM nightlies WHERE status IN ('PASSED', 'CONFOUNDED', 'REGRESSED')").fetchone()[0]
        prob, note = [], ""
        if last:
            try:
                name = ET.parse(os.path.join(nightly_out, "junit.xml")).getroot().get("name") or ""
            except (OSError, ET.ParseError) as ex:
                name = "unreadable (%s)" % ex
            md = ""
            try:
                md = open(os.path.join(nightly_out, "nightly.md")).readline().strip()
            except OSError:
                pass
            mj, mm = re.match(r"vtlab nightly (\d+)$", name), re.match(r"# vtlab nightly (\d+):", md)
            nj, nm = int(mj.group(1)) if mj else -1, int(mm.group(1)) if mm else -1
            if nj < last or nm < last:
                st = c.execute("SELECT status FROM nightlies WHERE id = ?", (last,)).fetchone()[0]
                prob.append(("nightly %d" % last, "nightly %d is recorded %s but %s/junit.xml is \"%s\" and nightly.md "
                             "\"%s\"" % (last, st, nightly_out, name, md)))
            elif nj != last or nm != last:
                note = "outputs of interrupted nightly %s (junit.xml) / %s (nightly.md)" % (nj, nm)
        check_new("nightly-outputs", prob, note)

def valid(path):
    """'' when a file is whole by its kind, else why not."""
    name = os.path.basename(path)
    ext = name.rsplit(".", 1)[-1] if "." in name else ""
    try:
        data = open(path, "rb").read()
    except OSError as ex:
        return "unreadable: %s" % ex
    if not data:
        return "empty"
    if ext == "png":
        if not data.startswith(b"\x89PNG\r\n\x1a\n") or data[-12:-8] != b"\0\0\0\0" or data[-8:-4] != b"IEND":
            return "not a whole PNG (%d bytes)" % len(data)
    elif ext in ("svg", "xml", "atom"):
        try:
            ET.fromstring(data)
        except ET.ParseError as ex:
            return "not well-formed XML: %s" % ex
    elif ext == "html":
        if b"</html>" not in data[-64:]:
            return "no </html> at the end (%d bytes)" % len(data)
    elif ext == "json":
        try:
            json.loads(data)
        except ValueError as ex:
            return "not valid JSON: %s" % ex
    elif ext in ("md", "gp", "dat"):
        if not data.endswith(b"\n"):
            return "does not end with a newline (%d bytes)" % len(data)
    return ""

def check_outputs(dirs):
    bad, tmps = [], []
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in files:
                p = os.path.join(root, f)
                rel = os.path.relpath(p, os.getcwd())
                if f.endswith(".tmp"):
                    tmps.append(rel); continue
                if f.endswith(".log"):
                    continue   # gnuplot's own log, not an output
                why = valid(p)
                if why:
                    bad.append((rel + ": " + why, "%s: %s" % (rel, why)))
    check_new("outputs", bad, "%d leftover .tmp" % len(tmps) if tmps else "no .tmp")

def check_stale(dirs):
    """*.PID.tmp of a process that no longer exists, in each of dirs (not
    recursive): what a report or nightly that ran to its end must have removed."""
    stale = []
    for d in dirs:
        for f in (os.listdir(d) if os.path.isdir(d) else []):
            parts = f.split(".")
            if len(parts) < 3 or parts[-1] != "tmp" or not parts[-2].isdigit():
                continue
            try:
                os.kill(int(parts[-2]), 0)
            except ProcessLookupError:
                stale.append(os.path.relpath(os.path.join(d, f)))
            except PermissionError:
                pass
    check("stale-tmp", not stale, "no temporary file of a dead process in %s" % " ".join(dirs) if not stale else
          "left behind: %s" % " ".join(stale[:6]))

def identities(c):
    m = {}
    for row in c.execute("SELECT r.id, r.experiment, r.arm, r.repeat_idx, r.knob_hash, r.model_sha256,"
                         " r.dataset_sha256, r.code_version, r.logits_sha256, x.top1_k, x.top1_n, v.verdict"
                         " FROM runs r LEFT JOIN comparisons x ON x.run_id = r.id LEFT JOIN verdicts v ON v.run_id = r.id"
                         " WHERE r.status = 'FINISHED' AND r.logits_sha256 IS NOT NULL"):
        d = m.setdefault(tuple(row[1:8]), {"hash": set(), "kn": set(), "verdict": set()})
        d["hash"].add(row[8]); d["kn"].add((row[9], row[10])); d["verdict"].add(row[11])
    return m

def pairs(c):
    return {(ea, a, b, n, bb, cc) for ea, a, b, n, bb, cc in c.execute(
        "SELECT ra.experiment, ra.arm, rb.arm, p.n, p.b, p.c FROM pair_tests p JOIN runs ra ON ra.id = p.run_a"
        " JOIN runs rb ON rb.id = p.run_b")}

def compare(db, base):
    c, b = connect(db), connect(base)
    ci, bi = identities(c), identities(b)
    lab = lambda k: "%s/%s #%d" % k[:3]
    miss, extra = [lab(k) for k in bi if k not in ci], [lab(k) for k in ci if k not in bi]
    check("same-identities", not miss and not extra,
          "%d FINISHED identities, as the baseline" % len(bi) if not miss and not extra else
          "missing %s; extra %s" % (miss[:6], extra[:6]))
    for what, key in (("same-logits", "hash"), ("same-top1-kn", "kn"), ("same-verdicts", "verdict")):
        bad = ["%s: %s vs baseline %s" % (lab(k), sorted(map(str, ci[k][key]))[:3], sorted(map(str, bi[k][key]))[:3])
               for k in bi if k in ci and ci[k][key] != bi[k][key]]
        check(what, not bad, "equal for %d identities" % len([k for k in bi if k in ci]) if not bad else " | ".join(bad[:4]))
    bp, cp = pairs(b), pairs(c)
    check("same-pair-tests", bp <= cp, "%d pair test(s) as the baseline" % len(bp) if bp <= cp else
          "baseline pair tests missing: %s" % sorted(bp - cp)[:4])
    run = c.execute("SELECT count(*), group_concat(id || ' ' || experiment || '/' || arm) FROM runs"
                    " WHERE status = 'RUNNING'").fetchone()
    check("nothing-running", run[0] == 0, "no run left RUNNING" if not run[0] else "RUNNING: %s" % run[1])

def check_nightlies(db):
    c = connect(db)
    rows = c.execute("SELECT id, status FROM nightlies ORDER BY id").fetchall()
    last = rows[-1] if rows else None
    left = [r for r in rows[:-1] if r[1] == "RUNNING"]
    ok = last is not None and last[1] in ("PASSED", "CONFOUNDED", "REGRESSED") and not left
    check("nightlies", ok, "%d nightlies; the last %s; %d FAILED (killed), none left RUNNING" %
          (len(rows), last[1] if last else "-", sum(1 for r in rows if r[1] == "FAILED")) if ok else
          "last %s; left RUNNING: %s" % (last, left))

def pending(db, base, expdirs):
    """identities of the swept experiments not FINISHED in db."""
    arms = {}
    for d in expdirs:
        for f in glob.glob(os.path.join(d, "*.json")):
            j = json.load(open(f))
            arms.setdefault(j["id"], set()).update(a["name"] for a in j["arms"])
    want = {k for k in identities(connect(base)) if k[1] in arms.get(k[0], ())}
    have = set(identities(connect(db))) if os.path.exists(db) else set()
    print(len(want - have), len(want))

if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if a[:1] == ["--known"]:
        KNOWN, a = a[1], a[2:]
    nout = None
    if a[:1] == ["--nightly-out"]:
        nout, a = a[1], a[2:]
    if cmd == "plan": plan(int(a[0]), int(a[1]))
    elif cmd == "launch": launch(a)
    elif cmd == "check-db": check_db(a[0], a[1], a[2:], nout)
    elif cmd == "check-outputs": check_outputs(a)
    elif cmd == "check-stale": check_stale(a)
    elif cmd == "compare": compare(a[0], a[1])
    elif cmd == "nightlies": check_nightlies(a[0])
    elif cmd == "pending": pending(a[0], a[1], a[2:])
PYEOF

# ----------------------------------------------------------------- cases
PASS=0; FAIL=0
# Per kill, each check is tallied into PASS/FAIL; RES collects "name ok|FAIL"
# for the kill's line, DIAG the details of the failed ones ("#   name: ...").
RES=""; DIAG=""
tally() { # name pass(0/1) detail
    if [ "$2" = 1 ]; then PASS=$((PASS + 1)); RES="$RES; $1 ok"
    else FAIL=$((FAIL + 1)); RES="$RES; $1 FAIL"; DIAG="$DIAG#   $1: $3"$'\n'; fi
}
tally_py() { # the "CHECK name PASS|FAIL detail" lines of a python check
    local name res detail
    while read -r tag name res detail; do
        [ "$tag" = CHECK ] || continue
        if [ "$res" = PASS ]; then tally "$name" 1 "$detail"; if [ -n "$detail" ]; then RES="$RES ($detail)"; fi
        else tally "$name" 0 "$detail"; fi
    done <<< "$1"
}
case_line() { # TEXT: the kill's line, "ok - TEXT: ..." or "not ok - TEXT: ..." and its diagnostics
    if [ -z "$DIAG" ]; then echo "ok - $1${RES:+:${RES#;}}"
    else echo "not ok - $1${RES:+:${RES#;}}"; printf '%s' "$DIAG"; fi
    RES=""; DIAG=""
}
single() { # NAME PASS DETAIL: a case of its own
    if [ "$2" = 1 ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); fi
    if [ "$2" = 1 ]; then echo "ok - $1${3:+: $3}"; else echo "not ok - $1: $3"; fi
}
run_guarded() { timeout -k 10 "$HANG" "$@"; }
ms_now() { date +%s%3N; }

# ----------------------------------------------------------------- fixture
mkdir -p exp logs ledgers ledger-pristine/claims ledger-pristine/defects
cat > exp/a.json <<JSON
{
  "id": "soak-a",
  "model": {"synth": "$TINY", "seed": 1},
  "dataset": {"generate": {"n_sequences": 6, "length": 16, "seed": 5}},
  "score": "all",
  "top_k": 4,
  "probe": "audit",
  "reference": "f32",
  "repeats": 2,
  "arms": [
    {"name": "f32", "expect": {"residual.stream": "f32"}},
    {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": 1}, "expect": {"residual.stream": "bf16", "moe.scatter": "f32"}},
    {"name": "replay", "knobs": {"VT_KIMI_BF16_STREAM": 1, "VT_FAULT": "moe_scatter_row_bytes_from_stream"},
     "expect_assertions": "fail"}
  ],
  "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="},
  "divergence": {"sequences": 2, "tolerance": 0.02}
}
JSON
cat > exp/b.json <<JSON
{
  "id": "soak-b",
  "model": {"synth": "$TINY", "seed": 1},
  "dataset": {"generate": {"n_sequences": 4, "length": 12, "seed": 9}},
  "score": "last",
  "top_k": 4,
  "probe": "audit",
  "reference": "f32",
  "metrics": ["top1_agreement", "kl", "perplexity"],
  "arms": [
    {"name": "f32"},
    {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": 1}}
  ]
}
JSON
cp "$REPO"/specs/defects/*.json ledger-pristine/defects/
CLAIM=soak-bf16-refuted
cat > ledger-pristine/claims/$CLAIM.json <<JSON
{
  "id": "$CLAIM",
  "hypothesis": "kill-campaign fixture: storing the residual stream in bf16 keeps top-1 agreement >= 90%.",
  "verdict": "REFUTED",
  "evidence": {"metric": "top1_agreement", "k": 30, "n": 96, "threshold": 0.9, "direction": ">="},
  "arm": {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": "1"}},
  "reference": {"name": "f32", "knobs": {}},
  "code": {"codebase": "inference-tree:kimi_linear_device.cpp", "commit": null, "date": "2026-11-29"},
  "measured_at": "2026-11-29",
  "experiment": "$W/exp/a.json",
  "history": {"supersedes": null, "superseded_by": null}
}
JSON
cp -r ledger-pristine ledger            # the nightly's audit ledger (read only)
cp -r ledger-pristine ledger-base       # the baseline's reopen

echo "# kill campaign: $KILLS kills, seed $SEED, work dir $W, vtlab $VTLAB"

# ----------------------------------------------------------------- baseline
t=$(ms_now); run_guarded "$VTLAB" sweep exp --db base.db >logs/base-sweep.log 2>&1; rc=$?; T_SWEEP=$(( $(ms_now) - t ))
single "baseline: uninterrupted sweep exits 0" "$([ $rc = 0 ] && echo 1 || echo 0)" "exit $rc in $T_SWEEP ms$([ $rc = 0 ] || echo "; $(tail -3 logs/base-sweep.log)")"
t=$(ms_now); run_guarded "$VTLAB" reopen $CLAIM --db base.db --specs ledger-base >logs/base-reopen.log 2>&1; rc=$?; T_REOPEN=$(( $(ms_now) - t ))
single "baseline: reopen exits 0" "$([ $rc = 0 ] && echo 1 || echo 0)" "exit $rc in $T_REOPEN ms$([ $rc = 0 ] || echo "; $(tail -3 logs/base-reopen.log)")"
t=$(ms_now); run_guarded "$VTLAB" report --db base.db --out base-report >logs/base-report.log 2>&1; rc=$?; T_REPORT=$(( $(ms_now) - t ))
single "baseline: report exits 0" "$([ $rc = 0 ] && echo 1 || echo 0)" "exit $rc in $T_REPORT ms"
T_NIGHTLY=$((T_SWEEP + T_REPORT + 500))
CHK=$("$PY" "$H" check-db base.db base.db exp build/reopen)
while read -r tag name res detail; do
    [ "$tag" = CHECK ] && single "baseline: $name" "$([ "$res" = PASS ] && echo 1 || echo 0)" "$detail"
done <<< "$CHK"
echo "# measured: sweep ${T_SWEEP} ms, reopen ${T_REOPEN} ms, report ${T_REPORT} ms (nightly taken as ${T_NIGHTLY} ms)"

# ----------------------------------------------------------------- campaign
DB=campaign.db
n_killed=0; n_done=0; declare -A BY_OP=()
i=0
while read -r op mode param frac; do
    i=$((i + 1))
    ledger_dir=ledger; copies=1; watch="$W"; flag=""; out_dir=""
    case $op in
        sweep|sweep2)
            read -r pend total <<< "$("$PY" "$H" pending $DB base.db exp)"
            # resume what is left when something is; otherwise (or one time in three) a forced rerun
            if [ "$pend" -gt 0 ] && [ $((i % 3)) -ne 0 ]; then flag=""; T=$(( T_SWEEP * pend / total + 200 ))
            else flag="--force"; T=$T_SWEEP; fi
            [ $op = sweep2 ] && copies=2
            cmd=("$VTLAB" sweep exp --db $DB $flag) ;;
        report)  T=$T_REPORT; out_dir=report-out; cmd=("$VTLAB" report --db $DB --out report-out) ;;
        nightly) T=$T_NIGHTLY; out_dir=nightly-out; cmd=("$VTLAB" nightly exp --db $DB --out nightly-out --specs ledger) ;;
        reopen)
            ledger_dir=ledgers/k$i; rm -rf "$ledger_dir"; cp -r ledger-pristine "$ledger_dir"
            [ $mode = claim ] && watch="$W/$ledger_dir/claims"
            T=$T_REOPEN; cmd=("$VTLAB" reopen $CLAIM --db $DB --specs "$ledger_dir") ;;
    esac
    [ "$mode" = term ] && watch="$W/$out_dir/plots"
    delay=$("$PY" -c "print(int($frac * $T))")
    eval "$(SOAK_HANG=$HANG "$PY" "$H" launch "$delay" "$mode" "$param" "$copies" "logs/k$i-$op" "$watch" -- "${cmd[@]}")"
    what="$op${flag:+ $flag}"
    [ $op = sweep2 ] && what="sweep${flag:+ $flag} (1 of 2 concurrent)"
    if [ "$killed" = 1 ]; then
        n_killed=$((n_killed + 1)); BY_OP[$op]=$(( ${BY_OP[$op]:-0} + 1 ))
        head="kill $i/$KILLS $what: $([ "$termed" = 1 ] && echo SIGTERM || echo SIGKILL) at $ms ms ($point)"
    else
        n_done=$((n_done + 1))
        head="kill $i/$KILLS $what: finished before the kill (exit $rc at $ms ms; planned: $([ $mode = time ] && echo "$delay ms" || echo "$mode $param"))"
    fi
    tally_py "$("$PY" "$H" check-db --known known --nightly-out nightly-out $DB base.db exp build/reopen)"
    tally_py "$("$PY" "$H" check-outputs --known known report-out nightly-out build/reopen "$ledger_dir/claims")"
    sc=$("$VTLAB" specs check --specs "$ledger_dir" 2>&1); src=$?
    tally ledger "$([ $src = 0 ] && echo 1 || echo 0)" "vtlab specs check --specs $ledger_dir: exit $src: $(echo "$sc" | tail -2 | tr '\n' ' ')"
    tally orphans "$([ -z "$orphans" ] && echo 1 || echo 0)" "survived the killed vtlab $op: $orphans"
    if [ "$termed" = 1 ]; then
        tally term-tmp "$([ -z "$leftover" ] && echo 1 || echo 0)" "left by the vtlab $op sent SIGTERM: $leftover"
        BY_OP[term]=$(( ${BY_OP[term]:-0} + 1 ))
    fi
    if [ -n "$out_dir" ] && [ "$killed" != 1 ] && [ "$rc" -ge 0 ] && [ "$rc" -le 1 ]; then
        tally_py "$("$PY" "$H" check-stale "$out_dir/plots" "$out_dir/plots/src")"
    fi
    if [ $copies = 2 ]; then
        tally survivor "$([ "$partner_rc" = 0 ] && echo 1 || echo 0)" "the other sweep exited $partner_rc: $(tail -3 logs/k$i-$op.1.log | tr '\n' ' ')"
    fi
    case_line "$head"
    [ $src = 0 ] && [ $op = reopen ] && rm -rf "$ledger_dir"   # keep a broken one to look at
done < <("$PY" "$H" plan "$KILLS" "$SEED")
ops=""; for o in sweep sweep2 report nightly reopen; do ops="$ops ${o}=${BY_OP[$o]:-0}"; done
ops="$ops; ${BY_OP[term]:-0} of them by SIGTERM"
echo "# campaign: $n_killed killed ($ops ), $n_done finished before their kill"

# ----------------------------------------------------------------- resume
run_guarded "$VTLAB" sweep exp --db $DB >logs/resume-sweep.log 2>&1; rc=$?
single "resume: the sweep completes (exit 0)" "$([ $rc = 0 ] && echo 1 || echo 0)" "exit $rc$([ $rc = 0 ] || echo ": $(tail -3 logs/resume-sweep.log | tr '\n' ' ')")"
rm -rf ledger-resume; cp -r ledger-pristine ledger-resume
run_guarded "$VTLAB" reopen $CLAIM --db $DB --specs ledger-resume >logs/resume-reopen.log 2>&1; rc=$?
sc=$("$VTLAB" specs check --specs ledger-resume 2>&1); src=$?
single "resume: reopen on a fresh ledger copy completes and the ledger checks" "$([ $rc = 0 ] && [ $src = 0 ] && echo 1 || echo 0)" \
    "reopen exit $rc, specs check exit $src$([ $rc = 0 ] && [ $src = 0 ] || echo ": $(tail -2 logs/resume-reopen.log | tr '\n' ' ') $(echo "$sc" | tail -1)")"
CHK=$("$PY" "$H" check-db $DB base.db exp build/reopen; "$PY" "$H" compare $DB base.db)
while read -r tag name res detail; do
    [ "$tag" = CHECK ] && single "resume: $name" "$([ "$res" = PASS ] && echo 1 || echo 0)" "$detail"
done <<< "$CHK"
run_guarded "$VTLAB" nightly exp --db $DB --out nightly-out --specs ledger >logs/resume-nightly.log 2>&1; rc=$?
single "resume: an uninterrupted nightly completes (exit 0, or 1 for a finding)" "$([ $rc -le 1 ] && echo 1 || echo 0)" \
    "exit $rc$([ $rc -le 1 ] || echo ": $(tail -3 logs/resume-nightly.log | tr '\n' ' ')")"
run_guarded "$VTLAB" report --db $DB --out report-out >logs/resume-report.log 2>&1; rc=$?
single "resume: a report completes (exit 0)" "$([ $rc = 0 ] && echo 1 || echo 0)" "exit $rc$([ $rc = 0 ] || echo ": $(tail -3 logs/resume-report.log | tr '\n' ' ')")"
CHK=$("$PY" "$H" nightlies $DB; "$PY" "$H" check-db --nightly-out nightly-out $DB base.db exp build/reopen | grep nightly-outputs
     "$PY" "$H" check-outputs nightly-out report-out
     "$PY" "$H" check-stale nightly-out/plots nightly-out/plots/src report-out/plots report-out/plots/src)
while read -r tag name res detail; do
    [ "$tag" = CHECK ] && single "resume: $name" "$([ "$res" = PASS ] && echo 1 || echo 0)" "$detail"
done <<< "$CHK"

echo "# $(( $(date +%s) - T_START )) s in all$([ "$KEEP" = 1 ] && echo "; work dir kept: $W")"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
