#!/usr/bin/env bash
# nightly_noise.sh — how often the nightly's throughput check cries wolf, and
# how often it catches a real slowdown (issue 13, item 6). Prints both rates.
#
#   bash tests/soak/nightly_noise.sh VTLAB [N_QUIET] [N_PLANTED]
#
# On a tiny experiment (SEQ sequences x LEN tokens, REPEATS repeats, two
# arms), with BURNERS busy-loop processes loading the CPU the whole time:
#   1. false alarms: N_QUIET (default 8) nightlies with no code change; every
#      performance regression among them is a false alarm;
#   2. detection: N_PLANTED (default 4) independent trials, each a copy of
#      the database after step 1 plus one nightly with a planted slowdown of
#      SLOWDOWN (default 0.2: 20%) through the test-only hook
#      VTLAB_TEST_PLANT_SLOWDOWN; a trial is detected when that nightly
#      flags a performance regression on an arm.
# The last two lines are
#   false alarms: X of N nights (rate R), F findings over A arm-nights
#   detection: D of P planted SLOWDOWN slowdowns (rate R), K of M arms flagged
# Exit 0 (it measures; tests/cli/test_nightly_reliability.sh judges a short run),
# or 1 when a nightly exits 2 (bad input: nothing would have been measured).
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
NQ=${2:-8}; NP=${3:-4}
SEQ=${SEQ:-8}; LEN=${LEN:-16}; REPEATS=${REPEATS:-2}; BURNERS=${BURNERS:-1}; SLOWDOWN=${SLOWDOWN:-0.2}
PY=/usr/bin/python3
T=$(mktemp -d /tmp/vtlab-nightly-noise.XXXXXX)
BURN_PIDS=()
cleanup() { for p in "${BURN_PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
q() { "$PY" -c 'import sqlite3,sys
for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2]): print("|".join("" if v is None else str(v) for v in r))' "$1" "$2"; }

mkdir -p "$T/exp"
cat > "$T/exp/noise.json" <<JSON
{
  "id": "noise",
  "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
  "dataset": {"generate": {"n_sequences": $SEQ, "length": $LEN, "seed": 5}},
  "score": "all", "top_k": 8, "reference": "f32",
  "arms": [{"name": "f32"}, {"name": "cand", "knobs": {"VT_KIMI_BF16_STREAM": 1}}],
  "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="},
  "repeats": $REPEATS
}
JSON
for ((i = 0; i < BURNERS; i++)); do ( while :; do :; done ) & BURN_PIDS+=($!); done
echo "# $BURNERS CPU burner(s) running; experiment: $SEQ x $LEN tokens, $REPEATS repeats, 2 arms"

DB="$T/quiet.db"
for ((i = 1; i <= NQ; i++)); do
  "$VTLAB" nightly "$T/exp" --db "$DB" --out "$T/rep" --no-audit --no-plots >"$T/log" 2>&1; rc=$?
  echo "# quiet nightly $i: exit $rc $(q "$DB" "select status from nightlies where id = (select max(id) from nightlies)")"
  # exit 2 is bad input: nothing was measured, so no rate may be printed
  if [ $rc -gt 1 ]; then echo "nightly_noise.sh: quiet nightly $i exited $rc:" >&2; tail -5 "$T/log" >&2; exit 1; fi
done
read -r nights fa_nights fa_findings armnights unconfirmed <<<"$(q "$DB" "select count(*),
  (select count(distinct nightly_id) from nightly_findings where kind = 'performance' and regression = 1),
  (select count(*) from nightly_findings where kind = 'performance' and regression = 1),
  (select count(*) from (select distinct nr.nightly_id, r.arm from nightly_runs nr join runs r on r.id = nr.run_id)),
  (select count(*) from nightly_findings where kind = 'performance' and message like '%not confirmed%')
  from nightlies" | tr '|' ' ')"
q "$DB" "select nightly_id, arm, message from nightly_findings where kind = 'performance'" | sed 's/^/#   /'

det=0; arms_flagged=0; arms_total=0
for ((i = 1; i <= NP; i++)); do
  cp "$DB" "$T/trial.db"; rm -f "$T/trial.db-wal" "$T/trial.db-shm"
  VTLAB_TEST_PLANT_SLOWDOWN=$SLOWDOWN "$VTLAB" nightly "$T/exp" --db "$T/trial.db" --out "$T/rep" --no-audit \
    --no-plots >"$T/log" 2>&1
  k=$(q "$T/trial.db" "select count(*) from nightly_findings where kind = 'performance' and regression = 1
        and nightly_id = (select max(id) from nightlies)")
  echo "# planted trial $i: exit $?, $k arm(s) flagged"
  q "$T/trial.db" "select arm, message from nightly_findings where kind = 'performance' and nightly_id = (select max(id) from nightlies)" | sed 's/^/#   /'
  [ "$k" -gt 0 ] && det=$((det + 1))
  arms_flagged=$((arms_flagged + k)); arms_total=$((arms_total + 2))
done
rate() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b ? a / b : 0 }'; }
echo "false alarms: $fa_nights of $nights nights (rate $(rate "$fa_nights" "$nights")), $fa_findings findings over $armnights arm-nights; $unconfirmed suspected drop(s) not confirmed by the re-measurement"
echo "detection: $det of $NP planted $SLOWDOWN slowdowns (rate $(rate "$det" "$NP")), $arms_flagged of $arms_total arms flagged"
