#!/usr/bin/env bash
# CLI conventions (issue 15, item 3): every command answers --help and -h
# (exit 0, its usage on stdout, options listed), options take both
# "--opt value" and "--opt=value", and an unknown command is exit 2.
set -u
VTLAB=${1:-./vtlab}
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err

# every command the usage lists (lines "  NAME ...")
cmds=$("$VTLAB" --help | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p; s/^  \([a-z][a-z-]*\)$/\1/p' | sort -u)
[ "$(echo "$cmds" | wc -w)" -ge 18 ] && ok "the usage lists $(echo "$cmds" | wc -w) commands" || not_ok "usage" "$cmds"
bad=""
for c in $cmds; do
  "$VTLAB" $c --help >"$W/h" 2>"$W/e"; rc=$?
  head -1 "$W/h" | grep -q "^usage: vtlab $c$" && [ $rc -eq 0 ] && [ ! -s "$W/e" ] || bad="$bad $c(--help:$rc)"
  "$VTLAB" $c -h >"$W/h2" 2>/dev/null; rc=$?
  [ $rc -eq 0 ] && cmp -s "$W/h" "$W/h2" || bad="$bad $c(-h:$rc)"
done
[ -z "$bad" ] && ok "every command: --help and -h exit 0 with its usage on stdout" || not_ok "--help" "$bad"
"$VTLAB" nightly --help | grep -q -- "--perf-min-drop" && ok "nightly --help lists its options" || not_ok "nightly options" "$("$VTLAB" nightly --help)"
expect_exit "an unknown command with --help: exit 2" 2 "$VTLAB" no-such-command --help
stderr_has "... says so" 'unknown command "no-such-command"'

# --opt=value is --opt value
"$VTLAB" synth --config=model/configs/kimi-linear-tiny.json --seed=1 --out="$W/m" >/dev/null 2>&1
[ -f "$W/m/model.safetensors" ] && ok "synth --config=... --seed=... --out=... works" || not_ok "equals" "no model"
cat > "$W/e.json" <<J
{"id": "eq", "model": "$W/m", "dataset": {"generate": {"n_sequences": 2, "length": 4, "seed": 1}},
 "reference": "f32", "arms": [{"name": "f32"}]}
J
expect_exit "run --db=PATH: exit 0" 0 "$VTLAB" run "$W/e.json" --db="$W/r.db"
! grep -q $'\033' "$ERR" && ok "progress on a log (stderr not a terminal): no terminal escapes" || not_ok "progress escapes" "$(od -c "$ERR" | head -3)"
VTLAB_PROGRESS_INTERVAL=0 "$VTLAB" run "$W/e.json" --db "$W/r2.db" >/dev/null 2>"$W/prog"
grep -qE "^  .*sequence [0-9]+/2 .*tok/s" "$W/prog" && ! grep -q $'\033' "$W/prog" \
  && ok "progress on a log: plain lines (VTLAB_PROGRESS_INTERVAL=0: every sequence)" || not_ok "progress lines" "$(head -5 "$W/prog")"
"$VTLAB" runs --db="$W/r.db" >"$W/a" 2>&1; "$VTLAB" runs --db "$W/r.db" >"$W/b" 2>&1
[ -s "$W/a" ] && cmp -s "$W/a" "$W/b" && ok "runs --db=PATH prints what runs --db PATH does" || not_ok "runs equals" "$(diff "$W/a" "$W/b" | head -5)"
expect_exit "an empty --db= is a usage error (exit 2)" 2 "$VTLAB" runs --db=
# table cells: a long arm name is shown whole and the columns stay aligned
N40=arm-with-a-long-name-of-forty-characters
sed -e 's/"id": "eq"/"id": "eq-long"/' -e "s/\"arms\": \[{\"name\": \"f32\"}\]/\"arms\": [{\"name\": \"f32\"}, {\"name\": \"$N40\"}]/" "$W/e.json" > "$W/long.json"
"$VTLAB" run "$W/long.json" --db "$W/l.db" >/dev/null 2>&1
line=$("$VTLAB" runs --db "$W/l.db" | grep "arm-with-a-long")
hdr=$("$VTLAB" runs --db "$W/l.db" | head -1)
[ -n "$line" ] && echo "$line" | grep -q "$N40 *FINISHED" \
  && [ "$(echo "$line" | awk '{print index($0, "FINISHED")}')" = "$(echo "$hdr" | awk '{print index($0, "status")}')" ] \
  && ok "runs: a long arm name is whole, the columns widen to it and stay aligned" || not_ok "cells" "$line"
# the audit's table says what the rule codes mean
"$VTLAB" audit --db "$W/l.db" --specs specs >"$W/aud" 2>&1
grep -q "^rules: R1 measured through a known defect" "$W/aud" && ok "audit: R1-R6 explained under the table" || not_ok "rules legend" "$(tail -4 "$W/aud")"
# make install with PREFIX and DESTDIR (staged: nothing outside $W is touched)
make -s install DESTDIR="$W/stage" PREFIX=/opt/vtlab >"$W/inst" 2>&1; rc=$?
[ $rc -eq 0 ] && [ -x "$W/stage/opt/vtlab/bin/vtlab" ] && [ -f "$W/stage/opt/vtlab/share/doc/vtlab/README.md" ] \
  && [ -f "$W/stage/opt/vtlab/share/vtlab/configs/kimi-linear-tiny.json" ] \
  && [ "$("$W/stage/opt/vtlab/bin/vtlab" version)" = "$("$VTLAB" version)" ] \
  && ok "make install DESTDIR=... PREFIX=...: binary, configs, experiments and docs staged" || not_ok "make install" "exit $rc: $(tail -3 "$W/inst")"
finish
