#!/usr/bin/env bash
# test_backend_unavailable.sh — a backend this machine does not have is bad
# input for `run` and `sweep` (issue 10, item 3): VT_BACKEND=cuda without a
# CUDA device is exit 2 with the reason on stderr, before any lease or run
# row is written, and a results.db that did not exist is not created — as
# `vtlab logits` already did. (Before: a FAILED run row and exit 1.)
#
# On a machine with a CUDA device (VT_BACKEND=cuda logits works) every case
# is skipped: the backend is available there.
#
# Usage (from the repository root): bash tests/cli/test_backend_unavailable.sh ./vtlab
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed".
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
TINY=model/configs/kimi-linear-tiny.json
W=$(mktemp -d /tmp/vtlab-backend.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

"$VTLAB" synth --config "$TINY" --seed 1 --out "$W/m" >/dev/null 2>&1
if VT_BACKEND=cuda "$VTLAB" logits --model "$W/m" --tokens 1 --out "$W/x.bin" 2>/dev/null; then
    echo "# this machine has a CUDA device: nothing to refuse, every case skipped"
    finish; exit
fi

# exp FILE ID [ARM_KNOBS] : a two-arm experiment on the tiny synthetic model
exp() {
    cat > "$1" <<JSON
{"id": "$2", "model": {"synth": "$TINY", "seed": 1}, "dataset": {"inline": [[5, 6, 7], [8, 9]]},
 "top_k": 2, "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "other", "knobs": {${3:-}}}], "metrics": ["top1_agreement"]}
JSON
}
# refused NAME DB CMD... : exit 2, "no CUDA device" on stderr, nothing on stdout about runs
refused() {
    local name=$1 db=$2; shift 2
    "$@" >"$OUT_FILE" 2>"$ERR"; local rc=$?
    if [ $rc -eq 2 ] && grep -qF "no CUDA device" "$ERR" && ! grep -q "^run " "$OUT_FILE"; then ok "$name"
    else not_ok "$name" "rc=$rc stdout: $(head -c 300 "$OUT_FILE") stderr: $(head -c 400 "$ERR")"; fi
}
exp "$W/e.json" backend-check
mkdir -p "$W/sweep" && exp "$W/sweep/e.json" backend-sweep

refused "VT_BACKEND=cuda run: exit 2, says no CUDA device" "$W/new.db" \
    env VT_BACKEND=cuda "$VTLAB" run "$W/e.json" --db "$W/new.db"
[ ! -e "$W/new.db" ] && ok "VT_BACKEND=cuda run: results.db not created" || not_ok "run: no database" "$W/new.db exists"
grep -qF "$W/e.json" "$ERR" && ok "VT_BACKEND=cuda run: the message names the experiment file" \
    || not_ok "run: names the file" "$(head -c 300 "$ERR")"

refused "VT_BACKEND=cuda sweep: exit 2" "$W/sweep.db" env VT_BACKEND=cuda "$VTLAB" sweep "$W/sweep" --db "$W/sweep.db"
[ ! -e "$W/sweep.db" ] && ok "VT_BACKEND=cuda sweep: results.db not created" || not_ok "sweep: no database" "exists"

# An existing database keeps exactly its rows.
expect_exit "a cpu run makes the database" 0 "$VTLAB" run "$W/e.json" --db "$W/old.db"
before=$(sqlite3 "$W/old.db" "SELECT count(*) FROM runs")
refused "VT_BACKEND=cuda run on an existing database: exit 2" "$W/old.db" \
    env VT_BACKEND=cuda "$VTLAB" run "$W/e.json" --db "$W/old.db" --force
after=$(sqlite3 "$W/old.db" "SELECT count(*) FROM runs")
[ "$before" = "$after" ] && ok "existing database: no run row added ($after)" || not_ok "no row added" "$before -> $after"

# The backend set by one arm's knobs, not the environment: the arm is named.
exp "$W/arm.json" backend-arm '"VT_BACKEND": "cuda"'
refused "an arm with VT_BACKEND=cuda: exit 2" "$W/arm.db" "$VTLAB" run "$W/arm.json" --db "$W/arm.db"
grep -qF "arm other" "$ERR" && ok "an arm with VT_BACKEND=cuda: the message names the arm" \
    || not_ok "names the arm" "$(head -c 300 "$ERR")"
[ ! -e "$W/arm.db" ] && ok "an arm with VT_BACKEND=cuda: results.db not created" || not_ok "arm: no database" "exists"
finish
