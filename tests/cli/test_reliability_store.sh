#!/usr/bin/env bash
# test_reliability_store.sh — reliability of results.db and of what is read
# from it (issue 13):
#   item 3  concurrent sweeps of one experiment with repeats: every FINISHED
#           run is complete (its comparison and per-layer divergence rows),
#           and a FINISHED run found incomplete is redone by the next sweep;
#   item 1  `vtlab export --out` is atomic: a failed export leaves the
#           previous file byte-identical and no temp file behind;
#   item 9  readers open the database read-only: a read-only directory or
#           file works, a missing database is not created, a corrupt one is
#           refused, and a full disk is named as such.
#
# Usage (from the repository root): bash tests/cli/test_reliability_store.sh ./vtlab
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed" last;
# exits 1 when any case failed. Databases are inspected with python3's sqlite3
# module. No case has a wall-clock limit on real work (the polls below are
# hang guards only).
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
PY=/usr/bin/python3
T=$(mktemp -d /tmp/vtlab-relstore-test.XXXXXX)
chmod 755 "$T"
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
PASS=0
FAIL=0
ok() { echo "ok - $1"; PASS=$((PASS + 1)); }
notok() { echo "not ok - $1"; FAIL=$((FAIL + 1)); [ -n "${2:-}" ] && echo "$2" | sed 's/^/#   /' | head -20; }
check() { if eval "$2"; then ok "$1"; else notok "$1" "${3:-}"; fi; }

# q DB SQL -> every row, columns '|'-joined
q() { "$PY" - "$1" "$2" <<'PYEOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for row in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in row))
PYEOF
}

TINY=model/configs/kimi-linear-tiny.json
# An experiment with repeats: the reference's repeats 1.. are compared with its
# repeat 0 (repeatability), every repeat of the other arm with repeat 0 too.
mk_rep() { # file id n_seq len repeats
    cat > "$1" <<JSON
{
  "id": "$2",
  "model": {"synth": "$TINY", "seed": 1},
  "dataset": {"generate": {"n_sequences": $3, "length": $4, "seed": 5}},
  "score": "all", "top_k": 16, "probe": "audit", "reference": "f32", "repeats": $5,
  "arms": [
    {"name": "f32"},
    {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": 1}}
  ],
  "divergence": {"sequences": 2, "tolerance": 0.02}
}
JSON
}

# The FINISHED runs that lack what a FINISHED run must have: a comparison
# (every run but the reference's repeat 0) and, with it, one divergence row
# per (layer, site) of the tiny model (8 layers x 2 sites).
INCOMPLETE_SQL="select r.id, r.arm, r.repeat_idx,
  (select count(*) from comparisons c where c.run_id = r.id),
  (select count(*) from layer_divergence d where d.run_id = r.id)
  from runs r where r.status = 'FINISHED' and not (r.is_reference = 1 and r.repeat_idx = 0)
  and ((select count(*) from comparisons c where c.run_id = r.id) <> 1
       or (select count(*) from layer_divergence d where d.run_id = r.id) <> 16)"

# ------------------------------------------------------------ item 3: concurrent sweeps with repeats
mkdir -p "$T/sweep"
mk_rep "$T/sweep/rep.json" rep 12 16 4
CDB="$T/c.db"
# The failure needs a second sweep to start while the first holds the
# reference's repeat 0: start one, wait (hang guard: 120 s) until it has
# claimed that run, then start two more.
"$VTLAB" sweep "$T/sweep" --db "$CDB" >"$T/c1" 2>&1 &
p1=$!
for i in $(seq 1 1200); do
    [ "$(q "$CDB" "select count(*) from runs where status='RUNNING' and is_reference=1 and repeat_idx=0" 2>/dev/null)" = 1 ] && break
    kill -0 $p1 2>/dev/null || break
    sleep 0.1
done
"$VTLAB" sweep "$T/sweep" --db "$CDB" >"$T/c2" 2>&1 &
p2=$!
"$VTLAB" sweep "$T/sweep" --db "$CDB" >"$T/c3" 2>&1 &
p3=$!
wait $p1; r1=$?
wait $p2; r2=$?
wait $p3; r3=$?
check "concurrent sweeps with repeats: all three exit 0" "[ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ]" "$(cat $T/c1 $T/c2 $T/c3)"
check "concurrent sweeps with repeats: every identity FINISHED exactly once (2 arms x 4 repeats)" \
    "[ \"$(q $CDB "select count(*), count(distinct arm||'#'||repeat_idx) from runs where status='FINISHED'")\" = '8|8' ]" \
    "$(q $CDB 'select id, arm, repeat_idx, status, error from runs')"
check "concurrent sweeps with repeats: every FINISHED run has its comparison and 16 layer_divergence rows" \
    "[ -z \"$(q $CDB "$INCOMPLETE_SQL")\" ]" \
    "incomplete (id|arm|repeat|comparisons|divergence rows): $(q $CDB "$INCOMPLETE_SQL")"
check "concurrent sweeps with repeats: every comparison is against the reference's FINISHED repeat 0" \
    "[ \"$(q $CDB "select count(*) from comparisons c join runs r on r.id = c.reference_run_id where r.status='FINISHED' and r.is_reference=1 and r.repeat_idx=0")\" = 7 ]" \
    "$(q $CDB 'select * from comparisons')"

# A FINISHED run found incomplete (as the defect left them in existing
# databases) is not "already finished": the next sweep marks it FAILED,
# saying why, and redoes it.
RDB="$T/repair.db"
cp "$CDB" "$RDB"
victim=$(q "$RDB" "select id from runs where arm='f32' and repeat_idx=2 and status='FINISHED'")
"$PY" - "$RDB" "$victim" <<'PYEOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("delete from layer_divergence where run_id = ?", (int(sys.argv[2]),))
c.execute("delete from comparisons where run_id = ?", (int(sys.argv[2]),))
c.commit()
PYEOF
"$VTLAB" sweep "$T/sweep" --db "$RDB" >"$T/out" 2>"$T/err"; rc=$?
check "repair: a sweep over a database with an incomplete FINISHED run exits 0" "[ $rc -eq 0 ]" "$(cat $T/out $T/err)"
check "repair: the incomplete run is no longer FINISHED, and its error says why" \
    "[ \"$(q $RDB "select status from runs where id=$victim")\" = FAILED ] && q $RDB \"select error from runs where id=$victim\" | grep -q 'incomplete'" \
    "$(q $RDB "select id, status, error from runs where id=$victim")"
check "repair: it was redone; every FINISHED run is complete again" \
    "[ \"$(q $RDB "select count(*) from runs where status='FINISHED'")\" = 8 ] && [ -z \"$(q $RDB "$INCOMPLETE_SQL")\" ]" \
    "$(q $RDB 'select id, arm, repeat_idx, status from runs')"

# ------------------------------------------------------------ item 1: export --out is atomic
RA=$(q "$CDB" "select min(id) from runs where arm='bf16' and status='FINISHED'")
RB=$(q "$CDB" "select max(id) from runs where arm='f32' and status='FINISHED'")
mkdir -p "$T/xo"
"$VTLAB" export "$RA" --db "$CDB" --out "$T/xo/x.json" >"$T/out" 2>"$T/err"; rc=$?
check "export --out: exit 0, valid JSON of the run, nothing else left in the directory" \
    "[ $rc -eq 0 ] && $PY -c 'import json,sys; assert json.load(open(sys.argv[1]))[\"run\"][\"id\"]==$RA' $T/xo/x.json && [ \"\$(ls -A $T/xo)\" = x.json ]" \
    "rc=$rc $(cat $T/err); $(ls -A $T/xo)"
cp "$T/xo/x.json" "$T/x.before"
# A write that fails half-way: the file size limit (ulimit -f, in KiB) with
# SIGXFSZ ignored, so write() answers EFBIG and vtlab sees the failure. 64 KiB:
# room for the database's 32 KiB -shm, not for the export (~98 KB).
[ "$(wc -c < $T/xo/x.json)" -gt 70000 ] || notok "export --out: the export is too small for the size-limit cases" "$(wc -c < $T/xo/x.json)"
( trap '' XFSZ; ulimit -f 64; exec "$VTLAB" export "$RB" --db "$CDB" --out "$T/xo/x.json" ) >"$T/out" 2>"$T/err"; rc=$?
check "export --out: a failing write (EFBIG) is an error naming the file" \
    "[ $rc -ne 0 ] && grep -qF -- '$T/xo/x.json' $T/err && grep -qi 'too large' $T/err" "rc=$rc $(cat $T/err)"
check "export --out: after the failed write the previous file is byte-identical, no temp file left" \
    "cmp -s $T/x.before $T/xo/x.json && [ \"\$(ls -A $T/xo)\" = x.json ]" "$(ls -la $T/xo)"
# The process killed in the middle of its write (SIGXFSZ's default action;
# the shell's "File size limit exceeded" notice is silenced).
{ ( ulimit -f 64; exec "$VTLAB" export "$RB" --db "$CDB" --out "$T/xo/x.json" ) >"$T/out" 2>"$T/err"; rc=$?; } 2>/dev/null
check "export --out: killed mid-write (SIGXFSZ), the previous file is byte-identical, no temp file left" \
    "[ $rc -ne 0 ] && cmp -s $T/x.before $T/xo/x.json && [ \"\$(ls -A $T/xo)\" = x.json ]" "rc=$rc $(ls -la $T/xo)"
"$VTLAB" export 99999 --db "$CDB" --out "$T/xo/none.json" >"$T/out" 2>"$T/err"; rc=$?
check "export --out of an unknown run: exit 2, no file created" \
    "[ $rc -eq 2 ] && [ ! -e $T/xo/none.json ] && [ \"\$(ls -A $T/xo)\" = x.json ]" "rc=$rc $(cat $T/err)"
"$VTLAB" export "$RA" --db "$CDB" --out "$T/nodir/x.json" >"$T/out" 2>"$T/err"; rc=$?
check "export --out into a missing directory: exit 2 naming the path" \
    "[ $rc -eq 2 ] && grep -qF -- '$T/nodir/x.json' $T/err" "rc=$rc $(cat $T/err)"
"$VTLAB" export "$RB" --db "$CDB" --out "$T/xo/x.json" --format csv >"$T/out" 2>"$T/err"; rc=$?
check "export --out over an existing file replaces it whole" \
    "[ $rc -eq 0 ] && head -1 $T/xo/x.json | grep -q '^run_id,seq,pos,rank' && [ \"\$(ls -A $T/xo)\" = x.json ]" "rc=$rc $(cat $T/err)"
ln -s x.json "$T/xo/link.json"
"$VTLAB" export "$RA" --db "$CDB" --out "$T/xo/link.json" >"$T/out" 2>"$T/err"; rc=$?
check "export --out through a symlink: the link stays, the file it names is replaced" \
    "[ $rc -eq 0 ] && [ -L $T/xo/link.json ] && cmp -s $T/x.before $T/xo/x.json && [ \"\$(ls -A $T/xo | sort | tr '\n' ' ')\" = 'link.json x.json ' ]" \
    "rc=$rc $(cat $T/err) $(ls -la $T/xo)"
rm -f "$T/xo/link.json"
"$VTLAB" export "$RA" --db "$CDB" --out /dev/stdout >"$T/out" 2>"$T/err"; rc=$?
check "export --out /dev/stdout (not a regular file) is written directly" \
    "[ $rc -eq 0 ] && cmp -s $T/out $T/x.before" "rc=$rc $(cat $T/err)"

# A full disk: a tiny tmpfs (needs root and mount; skipped otherwise).
FULL="$T/full"
mkdir -p "$FULL"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=256k tmpfs "$FULL" 2>/dev/null; then
    trap 'umount "$FULL" 2>/dev/null; chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
    printf 'previous export\n' > "$FULL/x.json"
    dd if=/dev/zero of="$FULL/filler" bs=4k 2>/dev/null   # until the disk is full
    "$VTLAB" export "$RA" --db "$CDB" --out "$FULL/x.json" >"$T/out" 2>"$T/err"; rc=$?
    check "export --out on a full disk: exit 1, 'the disk is full', naming the file" \
        "[ $rc -eq 1 ] && grep -q 'the disk is full' $T/err && grep -qF -- '$FULL/x.json' $T/err" "rc=$rc $(cat $T/err)"
    check "export --out on a full disk: the previous file is unchanged, no temp file left" \
        "[ \"\$(cat $FULL/x.json)\" = 'previous export' ] && [ \"\$(ls -A $FULL | sort | tr '\n' ' ')\" = 'filler x.json ' ]" "$(ls -la $FULL)"
    # A writer on a full disk says so, naming the database.
    rm -f "$FULL/filler" "$FULL/x.json"
    mkdir -p "$T/fullexp"
    mk_rep "$T/fullexp/rep.json" full 12 16 1
    "$VTLAB" run "$T/fullexp/rep.json" --db "$FULL/r.db" >"$T/out" 2>"$T/err"; rc=$?
    check "a writer on a full disk: exit non-zero, 'the disk is full', naming the database" \
        "[ $rc -ne 0 ] && grep -q 'the disk is full' $T/err && grep -qF -- '$FULL/r.db' $T/err" "rc=$rc $(cat $T/err)"
    # A run that ends on a full disk: the screen and the database agree (issue
    # 34 item 4). Whatever the tmpfs lets through, each run line's status is
    # the database's, and a line that says "(not recorded)" is a RUNNING row.
    umount "$FULL"; mount -t tmpfs -o size=1024k tmpfs "$FULL"
    mk_rep "$T/fullexp/big.json" fullbig 64 32 1
    "$VTLAB" run "$T/fullexp/big.json" --db "$FULL/r.db" >"$T/out" 2>"$T/err"; rc=$?
    agree=$(/usr/bin/python3 - "$T/out" "$FULL/r.db" <<'PY'
import re, sqlite3, sys
db = dict(sqlite3.connect(sys.argv[2]).execute("SELECT id, status FROM runs"))
bad = []
for line in open(sys.argv[1]):
    m = re.match(r"run (\d+) +\S+ +(FINISHED|FAILED|KILLED)( \(not recorded\))?", line)
    if m:
        want = "RUNNING" if m.group(3) else m.group(2)
        if db.get(int(m.group(1))) != want: bad.append("%s: screen %s, db %s" % (m.group(1), want, db.get(int(m.group(1)))))
print("; ".join(bad) or "ok")
PY
)
    check "a run on a full disk (exit $rc): each run line's status is what results.db holds" "[ \"$agree\" = ok ]" "$agree $(cat $T/out)"
    umount "$FULL"
else
    ok "full-disk cases skipped: not root, or tmpfs cannot be mounted here # SKIP"
fi

# The final status that cannot be written (the store refuses it, as a full
# disk does; a tmpfs lets the small FAILED update through more often than not):
# the line says "(not recorded)", stderr says why and what happens next, exit 1,
# the run stays RUNNING, and the next run marks it KILLED and redoes it.
E=$PWD/tests/engines
cat > "$T/unrec.json" <<JSON
{"id": "unrec", "model": {"synth": "$TINY", "seed": 1}, "engine": ["$E/good.py"],
 "dataset": {"inline": [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14], [15, 16]]},
 "top_k": 4, "reference": "ref", "arms": [{"name": "ref"}, {"name": "crash", "engine": ["$E/crash_mid.py"]}],
 "metrics": ["top1_agreement"]}
JSON
VTLAB_TEST_UNRECORDED=1 "$VTLAB" run "$T/unrec.json" --db "$T/unrec.db" >"$T/out" 2>"$T/err"; rc=$?
check "an unrecordable FAILED: exit 1, the run line says it was not recorded" \
    "[ $rc -eq 1 ] && grep -Eq '^run 2 +unrec/crash +FAILED \\(not recorded\\)' $T/out" "rc=$rc $(cat $T/out)"
check "  ... stderr: could not record FAILED, why, and that the next command marks it KILLED" \
    "grep -q 'run 2 (unrec/crash): could not record FAILED: .*the disk is full.*; the run stays RUNNING in $T/unrec.db and the next command will mark it KILLED' $T/err" "$(cat $T/err)"
check "  ... and results.db holds it RUNNING, as said" "[ \"$(q $T/unrec.db "select status from runs where id = 2")\" = RUNNING ]"
"$VTLAB" run "$T/unrec.json" --db "$T/unrec.db" >"$T/out" 2>"$T/err"
check "  ... the next run marks it KILLED and redoes the arm" \
    "[ \"$(q $T/unrec.db "select group_concat(status) from (select status from runs where arm = 'crash' order by id)")\" = KILLED,FAILED ]" "$(q $T/unrec.db 'select id, arm, status from runs')"

# ------------------------------------------------------------ item 9: readers open read-only
"$VTLAB" runs --db "$T/none.db" >"$T/out" 2>"$T/err"; rc=$?
check "reader on a missing database: exit 2 naming it, nothing created" \
    "[ $rc -eq 2 ] && grep -qF -- '$T/none.db' $T/err && [ ! -e $T/none.db ] && [ ! -e $T/none.db-wal ] && [ ! -e $T/none.db-shm ]" \
    "rc=$rc $(cat $T/err)"
mkdir -p "$T/adir.db"
"$VTLAB" show 1 --db "$T/adir.db" >"$T/out" 2>"$T/err"; rc=$?
check "reader on a directory: exit 2, 'is a directory', naming it" \
    "[ $rc -eq 2 ] && grep -qF -- '$T/adir.db: is a directory' $T/err" "rc=$rc $(cat $T/err)"
: > "$T/empty.db"
"$VTLAB" runs --db "$T/empty.db" >"$T/out" 2>"$T/err"; rc=$?
check "reader on an empty file: exit 2, not a results database, the file left empty" \
    "[ $rc -eq 2 ] && grep -qF -- '$T/empty.db' $T/err && [ ! -s $T/empty.db ]" "rc=$rc $(cat $T/err)"

# A copy without -wal/-shm (checkpointed), then read as an unprivileged user.
"$PY" -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('pragma wal_checkpoint(truncate)'); c.close()" "$CDB"
"$VTLAB" runs --db "$CDB" >"$T/runs.root" 2>&1
"$VTLAB" show "$RA" --db "$CDB" >"$T/show.root" 2>&1
mkdir -p "$T/ro" "$T/rw" "$T/pub"
cp "$CDB" "$T/ro/r.db"
cp "$CDB" "$T/rw/r.db"
chmod 444 "$T/ro/r.db" "$T/rw/r.db"
chmod 555 "$T/ro"
chmod 777 "$T/rw" "$T/pub"
sum_ro=$(sha256sum < "$T/ro/r.db")
AS_USER=""
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
    AS_USER="setpriv --reuid=nobody --regid=nogroup --clear-groups"
fi
if [ -n "$AS_USER" ] || [ "$(id -u)" != 0 ]; then
    who="$( [ -n "$AS_USER" ] && echo nobody || id -un )"
    $AS_USER "$VTLAB" runs --db "$T/ro/r.db" >"$T/out" 2>"$T/err"; rc=$?
    check "read-only directory and file ($who): runs exits 0 with the same listing" \
        "[ $rc -eq 0 ] && cmp -s $T/out $T/runs.root" "rc=$rc $(cat $T/err)"
    $AS_USER "$VTLAB" show "$RA" --db "$T/ro/r.db" >"$T/out" 2>"$T/err"; rc=$?
    check "read-only directory and file ($who): show exits 0 with the same text" \
        "[ $rc -eq 0 ] && cmp -s $T/out $T/show.root" "rc=$rc $(cat $T/err)"
    $AS_USER "$VTLAB" compare "$RA" "$RB" --db "$T/ro/r.db" >"$T/out" 2>"$T/err"; rc=$?
    check "read-only directory and file ($who): compare exits 0" "[ $rc -eq 0 ] && grep -q 'top-1 A vs B' $T/out" "rc=$rc $(cat $T/err)"
    $AS_USER "$VTLAB" export "$RA" --db "$T/ro/r.db" --out "$T/pub/x.json" >"$T/out" 2>"$T/err"; rc=$?
    check "read-only directory and file ($who): export exits 0" "[ $rc -eq 0 ] && [ -s $T/pub/x.json ]" "rc=$rc $(cat $T/err)"
    check "read-only directory: nothing was created or changed there" \
        "[ \"\$(ls -A $T/ro)\" = r.db ] && [ \"\$(sha256sum < $T/ro/r.db)\" = \"$sum_ro\" ]" "$(ls -la $T/ro)"
    $AS_USER "$VTLAB" runs --db "$T/rw/r.db" >"$T/out" 2>"$T/err"; rc=$?
    check "read-only file in a writable directory ($who): runs exits 0, the file unchanged" \
        "[ $rc -eq 0 ] && cmp -s $T/out $T/runs.root && [ \"\$(sha256sum < $T/rw/r.db)\" = \"$sum_ro\" ]" "rc=$rc $(cat $T/err)"
    # A writer holds the database open (its -wal and -shm exist) while the
    # directory is read-only to the reader: SQLite reads through a read-only
    # -shm (immutable would ignore the -wal, so it must not be used then).
    chmod 755 "$T/ro"; chmod 644 "$T/ro/r.db"
    rm -f "$T/held"
    "$PY" - "$T/ro/r.db" "$T/held" <<'PYEOF' &
import sqlite3, sys, time, os
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("pragma journal_mode=wal")
c.execute("create table if not exists extra_rows(x)")   # committed in the -wal, not checkpointed
c.execute("insert into extra_rows values (1)")
c.execute("select count(*) from runs").fetchall()
os.chmod(os.path.dirname(sys.argv[1]), 0o555)
open(sys.argv[2], "w").close()
for _ in range(600):                                     # hang guard: 60 s
    if not os.path.exists(sys.argv[2]): break
    time.sleep(0.1)
os.chmod(os.path.dirname(sys.argv[1]), 0o755)
c.close()
PYEOF
    holder=$!
    for i in $(seq 1 600); do [ -e "$T/held" ] && break; sleep 0.1; done
    $AS_USER "$VTLAB" runs --db "$T/ro/r.db" >"$T/out" 2>"$T/err"; rc=$?
    check "read-only directory while a writer holds the database open ($who): runs exits 0" \
        "[ $rc -eq 0 ] && cmp -s $T/out $T/runs.root" "rc=$rc $(cat $T/err) $(ls -la $T/ro)"
    rm -f "$T/held"; wait $holder
else
    ok "read-only cases skipped: running as root without setpriv # SKIP"
fi

# A database whose pages are corrupt is refused (exit non-zero, naming it),
# even by a command that would not read the corrupt pages.
cp "$CDB" "$T/corrupt.db"
"$PY" - "$T/corrupt.db" <<'PYEOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
ps = c.execute("pragma page_size").fetchone()[0]
root = c.execute("select rootpage from sqlite_master where name='logits_topk'").fetchone()[0]
c.close()
with open(sys.argv[1], "r+b") as f:   # scribble over the logits_topk b-tree's root page
    f.seek((root - 1) * ps + 8)
    f.write(b"\xab" * (ps - 16))
PYEOF
"$VTLAB" runs --db "$T/corrupt.db" >"$T/out" 2>"$T/err"; rc=$?
check "reader on a corrupt database: exit 2, 'corrupt', naming the file" \
    "[ $rc -eq 2 ] && grep -q 'corrupt' $T/err && grep -qF -- '$T/corrupt.db' $T/err" "rc=$rc $(cat $T/err)"
"$VTLAB" export "$RA" --db "$T/corrupt.db" --out "$T/xo/c.json" >"$T/out" 2>"$T/err"; rc=$?
check "export from a corrupt database: refused, no file written" \
    "[ $rc -ne 0 ] && [ ! -e $T/xo/c.json ] && grep -q 'corrupt' $T/err" "rc=$rc $(cat $T/err)"

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
