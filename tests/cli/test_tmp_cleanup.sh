#!/usr/bin/env bash
# test_tmp_cleanup.sh — no gnuplot child and no temporary chart file outlives an
# interrupted or killed report or nightly (docs/reliability.md, guarantees 1 and 9):
#
#   group    gnuplot runs in a process group of its own (not vtlab's), which
#            vtlab signals when it is interrupted;
#   TERM     a report sent SIGTERM while gnuplot draws dies of it (exit 143)
#            only after its gnuplot is reaped and the chart's *.PID.tmp files
#            are removed: at its exit neither is left, without a rerun;
#   KILL     a report SIGKILLed while gnuplot draws, 3 times in a row: its
#            gnuplot is gone within 2 s (PR_SET_PDEATHSIG), and the next report
#            into the folder removes what the killed ones left;
#   stale    *.PID.tmp files of dead processes in plots/ and plots/src/ are
#            removed by the next report, a live process's are kept;
#   nightly  a nightly sent SIGTERM while gnuplot draws: that gnuplot is
#            stopped, no further chart is started, no *.tmp is left.
#
# gnuplot is held so that the signal lands while it runs: a shim first on PATH
# runs the real gnuplot on a chart script (src/NAME.gp) and then pauses.
# Time: about 8 s on 2 cores.
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-tmpclean.XXXXXX)
HELD=""   # gnuplots this script caused, ended on exit if still there
cleanup() { for p in $HELD; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$W"; }
trap cleanup EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "${3:-}"; fi; }
# alive PID: the process exists and is not a zombie
alive() { [ -r "/proc/$1/stat" ] && ! awk '{exit !($3 == "Z" || $3 == "X")}' "/proc/$1/stat" 2>/dev/null; }
pgid() { awk '{print $5}' "/proc/$1/stat" 2>/dev/null; }

GP=$(command -v gnuplot)
if [ -z "$GP" ]; then
  ok "skipped: no gnuplot on PATH (charts are off, nothing to clean) # SKIP"
  finish; exit
fi
cat > "$W/e.json" <<J
{"id": "tmpclean", "model": {"synth": "$PWD/model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 2, "length": 8, "seed": 2}}, "score": "all", "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": "1"}}]}
J
mkdir -p "$W/nexp" "$W/specs/claims" "$W/specs/defects" "$W/bin"; cp "$W/e.json" "$W/nexp/"
"$VTLAB" run "$W/e.json" --db "$W/r.db" >/dev/null 2>&1 || not_ok "fixture run" "failed"
# the shim: each chart's start is logged; the real gnuplot draws it, then holds for $GP_HOLD s
cat > "$W/bin/gnuplot" <<SH
#!/bin/sh
case "\$1" in src/*) echo "\$\$" >> "$W/starts"; exec "$GP" "\$@" -e "pause \${GP_HOLD:-600}" ;; esac
exec "$GP" "\$@"
SH
chmod +x "$W/bin/gnuplot"

# start_held DIR CMD...: starts CMD under the shim and waits (hang guard 60 s) until a held
# gnuplot child has written its temporary images; sets V (vtlab's pid) and G (gnuplot's)
start_held() {
  local dir=$1; shift
  : > "$W/starts"
  PATH="$W/bin:$PATH" "$@" >"$W/held.out" 2>&1 &
  V=$! G=""
  local i
  for i in $(seq 1 600); do
    G=$(pgrep -P "$V" 2>/dev/null | head -1)
    [ -n "$G" ] && ls "$dir"/*.png.*.tmp >/dev/null 2>&1 && break
    G=""; alive "$V" || break; sleep 0.1
  done
  [ -n "$G" ] && HELD="$HELD $G"
  [ -n "$G" ]
}

# ------------------------------------------------------------ SIGTERM: cleaned before it dies
R=$W/rep-term
if start_held "$R/plots" "$VTLAB" report --db "$W/r.db" --out "$R"; then
  check "gnuplot runs in a process group of its own" '[ "$(pgid "$G")" = "$G" ] && [ "$(pgid "$G")" != "$(pgid "$V")" ]' \
    "gnuplot $G in group $(pgid "$G"), vtlab $V in group $(pgid "$V")"
  kill -TERM "$V"; wait "$V"; rc=$?
  check "report sent SIGTERM while gnuplot draws dies of it (exit 143)" '[ $rc = 143 ]' "exit $rc: $(tail -2 "$W/held.out")"
  check "  ... its gnuplot is gone when it has exited (reaped, not a zombie)" '[ ! -e /proc/$G ]' \
    "gnuplot $G: $(awk '{print "state " $3}' /proc/$G/stat 2>/dev/null)"
  left=$(find "$R" -name '*.tmp')
  check "  ... and no temporary file is left, before any rerun" '[ -z "$left" ]' "$left"
else
  not_ok "report (TERM): a held gnuplot seen under vtlab" "$(tail -3 "$W/held.out")"; kill -KILL "$V" 2>/dev/null
fi

# ------------------------------------------------------------ SIGKILL, 3 times: the next report cleans
R=$W/rep-kill
for k in 1 2 3; do
  if start_held "$R/plots" "$VTLAB" report --db "$W/r.db" --out "$R"; then
    kill -KILL "$V"; wait "$V" 2>/dev/null
    for i in $(seq 1 20); do alive "$G" || break; sleep 0.1; done
    check "report SIGKILLed while gnuplot draws ($k of 3): its gnuplot is gone within 2 s" '! alive "$G"' \
      "gnuplot $G still running"
  else
    not_ok "report (KILL $k): a held gnuplot seen under vtlab" "$(tail -3 "$W/held.out")"; kill -KILL "$V" 2>/dev/null
  fi
done
n_left=$(find "$R" -name '*.tmp' | wc -l)   # each report removed the previous killed one's at its first chart
check "the last killed report left temporary images ($n_left files)" '[ "$n_left" -ge 1 ]'
expect_exit "the next report into the folder" 0 "$VTLAB" report --db "$W/r.db" --out "$R"
left=$(find "$R" -name '*.tmp')
check "  ... removed every temporary file the killed ones left" '[ -z "$left" ]' "$left"

# ------------------------------------------------------------ stale names of dead processes
dead=$(sh -c 'echo $$')   # a pid that has exited
: > "$R/plots/e0-x.png.$dead.tmp"; : > "$R/plots/src/e0-x.gp.$dead.tmp"; : > "$R/plots/src/e0-x.dat.$dead.tmp"
: > "$R/plots/e0-y.png.$$.tmp"     # a live process's (this shell): not stale
expect_exit "report with stale temporary files of a dead process in plots/ and plots/src/" 0 "$VTLAB" report --db "$W/r.db" --out "$R"
left=$(find "$R" -name "*.$dead.tmp")
check "  ... they are removed" '[ -z "$left" ]' "$left"
check "  ... a live process's is kept" '[ -e "$R/plots/e0-y.png.$$.tmp" ]'
rm -f "$R/plots/e0-y.png.$$.tmp"
# the pages' own temporary files (a report or nightly SIGKILLed while writing
# index.html or junit.xml): removed at the next start, charts or not
: > "$R/index.html.$dead.tmp"; : > "$R/summary.md.$dead.tmp"
expect_exit "report --no-plots with a dead process's index.html/summary.md temporaries" 0 "$VTLAB" report --db "$W/r.db" --out "$R" --no-plots
left=$(find "$R" -name "*.$dead.tmp")
check "  ... they are removed at its start" '[ -z "$left" ]' "$left"

# ------------------------------------------------------------ nightly: interrupted, no further chart
N=$W/nout
mkdir -p "$N"; : > "$N/junit.xml.$dead.tmp"; : > "$N/nightly.md.$dead.tmp"
export GP_HOLD=3
if start_held "$N/plots" "$VTLAB" nightly "$W/nexp" --db "$W/n.db" --out "$N" --specs "$W/specs"; then
  n0=$(wc -l < "$W/starts")
  kill -TERM "$V"
  for i in $(seq 1 300); do alive "$V" || break; sleep 0.1; done   # hang guard 30 s
  wait "$V"; rc=$?
  check "nightly sent SIGTERM while gnuplot draws exits (exit $rc)" '[ $rc -le 1 ]' "$(tail -3 "$W/held.out")"
  check "  ... its gnuplot was stopped, not waited for" '[ ! -e /proc/$G ]' "gnuplot $G still there"
  n1=$(wc -l < "$W/starts")
  check "  ... no chart started after the signal" '[ "$n1" = "$n0" ]' "$n0 gnuplot(s) before the signal, $n1 after"
  left=$(find "$N" -name '*.tmp')
  check "  ... no temporary file left (a dead nightly's junit.xml/nightly.md temporaries removed at its start)" '[ -z "$left" ]' "$left"
else
  not_ok "nightly (TERM): a held gnuplot seen under vtlab" "$(tail -3 "$W/held.out")"; kill -KILL "$V" 2>/dev/null
fi
finish
