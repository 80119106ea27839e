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
  "score": "all", "top_k": 4, "probe": "audit", "reference": "f32", "repeats": $5,
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

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
