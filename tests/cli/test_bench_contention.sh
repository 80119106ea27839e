#!/usr/bin/env bash
# test_bench_contention.sh — the bench's contention table (issue 32 item 1;
# tests/bench/contention.h, docs/bench.md): `bench MODEL T --contention
# PATTERNS` starts each pattern's load, runs its rounds, prints a row per
# pattern (one thread, the default count, their ratio, for prefill and
# decode) and the lowest ratio, writes the phases cont-PATTERN-*-tN into
# --json for record-bench, and leaves no load process behind. The tiny model,
# one round, four light patterns (a few seconds; the ratios themselves are
# measured by `make bench-contention`, not asserted here: this host is shared).
#
# Usage (from the repository root): bash tests/cli/test_bench_contention.sh ./build/vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
BENCH=${BENCH:-$(dirname "$VTLAB")/bench}
case "$BENCH" in /*) ;; *) BENCH="$PWD/$BENCH" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-contention.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

if [ ! -x "$BENCH" ]; then not_ok "bench binary" "$BENCH is not built (make $BENCH)"; finish; exit; fi
"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out "$W/tiny" >/dev/null
expect_exit "bench --contention quiet,steady1,bursty,membw --json: exit 0" 0 env BENCH_CONTENTION_ROUNDS=1 \
    "$BENCH" "$W/tiny" 16 --json "$W/c.json" --contention quiet,steady1,bursty,membw
rows=$(grep -cE "^  (quiet|steady1|bursty|membw) " "$OUT_FILE")
if [ "$rows" = 4 ] && grep -q "^contention: lowest ratio [0-9.]* (goal >= 0.90)" "$OUT_FILE" &&
   ! grep -qE "^  (steady2|teams|ci) " "$OUT_FILE"; then
    ok "a row for each pattern asked for, and the lowest ratio"
else not_ok "table" "$(cat "$OUT_FILE" | tail -6)"; fi
if grep -qE "^  steady1 +one busy loop \(one core\) +[0-9.]+ +[0-9.]+ +[0-9.]+ \| +[0-9.]+ +[0-9.]+ +[0-9.]+ " "$OUT_FILE"; then
    ok "... each row: one thread, default and ratio for prefill, then for decode"
else not_ok "row" "$(grep steady1 "$OUT_FILE")"; fi
sleep 0.2
left=$(pgrep -f -- "$BENCH --load" | wc -l)
if [ "$left" = 0 ]; then ok "no load process is left behind"; else not_ok "loads" "$left still running"; fi
names=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(p["name"] for p in json.load(open(sys.argv[1]))["phases"]))' "$W/c.json" 2>&1)
# the default count: all CPUs, or fewer under a cgroup CPU quota; at 1 only the -t1 phases
ND=$(sed -n 's/.*default = \([0-9]*\) thread(s).*/\1/p' "$OUT_FILE" | head -1)
NP=$([ "${ND:-0}" -gt 1 ] && echo 16 || echo 8)
want="cont-quiet-prefill-t1 cont-quiet-prefill-t$ND cont-quiet-decode-t1 cont-quiet-decode-t$ND"
[ "${ND:-0}" -gt 1 ] || want="cont-quiet-prefill-t1 cont-quiet-decode-t1"
if [ -n "$ND" ] && echo "$names" | grep -qF "$want" && [ "$(echo "$names" | wc -w)" = "$NP" ] &&
   [ "$(echo "$names" | tr ' ' '\n' | sort | uniq -d)" = "" ]; then
    ok "the report holds the $NP phases (cont-PATTERN-{prefill,decode}-t{1,$ND}), each name once"
else not_ok "phases" "default $ND: $names"; fi
expect_exit "record-bench records them" 0 "$VTLAB" record-bench "$W/c.json" --db "$W/c.db"
if [ "$(sqlite3 "$W/c.db" "select count(*) from runs where arm like 'cont-%' and status = 'FINISHED'")" = "$NP" ]; then
    ok "... as $NP runs"
else not_ok "runs" "$(sqlite3 "$W/c.db" "select arm, status from runs")"; fi
expect_exit "an unknown load: exit 2" 2 "$BENCH" --load nothing
finish
