#!/usr/bin/env bash
# test_help.sh — per-command help from one table (issue 33, item 3):
#   - every command the dispatchers take has `vtlab CMD --help`: the first
#     line "usage: vtlab CMD", a synopsis, each option with its default (or
#     "required"), what exit status 0, 1 and 2 mean, two examples; `vtlab help
#     CMD` and `-h` print the same;
#   - the table and the parsers agree: every option the table lists is
#     accepted by its command, the commands that parse their own options
#     (main.c's, localize) refuse every option the table does not list for
#     them, and every option an example uses is in the table;
#   - the examples work: those that need no cluster, git history or network
#     are run (their /tmp/ paths moved into a temporary directory), and none
#     exits 2 (bad input or usage);
#   - "did you mean" from the one helper: a mistyped command (exit 2, one
#     short line, not the usage), an `ack` kind, enumerated option values, an
#     option name, a knob;
#   - docs/cli.md is what `vtlab help --markdown` prints.
# Usage (from the repository root): bash tests/cli/test_help.sh ./vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
W=$(mktemp -d /tmp/vtlab-help.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE="$W/out"; ERR="$W/err"
. tests/cli/lib.sh
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "${3:-}"; fi; }
export VTLAB_CACHE=${VTLAB_CACHE:-$PWD/build}

# Every command main.c and lab.c dispatch (and localize.c's).
ALL="synth validate logits generate engine engine-check knobs faults version help init run sweep rerun submit merge
     status runs show tag note compare export record-bench specs audit reopen claim report nightly bisect localize ack"
listed=$("$VTLAB" --help | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p; s/^  \([a-z][a-z-]*\)$/\1/p' | sort -u)
missing=""
for c in $ALL; do echo "$listed" | grep -qx "$c" || missing="$missing $c"; done
check "vtlab --help lists every command the dispatchers take ($(echo $ALL | wc -w))" '[ -z "$missing" ]' "missing:$missing"

# ------------------------------------------------------------ each command's help
# The options section of CMD's help: "  --opt ARG   doc (default: X)" lines.
opts_of() { sed -n '/^options/,/^exit status:/p' "$1" | grep -oE '^  -{1,2}[a-z][a-z-]*' | sed 's/^  //'; }
bad_help=""; bad_same=""; bad_defaults=""
for c in $ALL; do
  "$VTLAB" "$c" --help >"$W/h.$c" 2>"$W/e"; rc=$?
  h="$W/h.$c"
  { [ $rc -eq 0 ] && [ ! -s "$W/e" ] && [ "$(head -1 "$h")" = "usage: vtlab $c" ] &&
    sed -n 2p "$h" | grep -q "^  vtlab $c" &&
    grep -q '^exit status:$' "$h" && grep -qE '^  0  [A-Za-z(]' "$h" && grep -qE '^  1  [A-Za-z(]' "$h" &&
    grep -qE '^  2  [A-Za-z(]' "$h" &&
    [ "$(sed -n '/^examples:$/,$p' "$h" | grep -cE '^  (.*=[^ ]* )*vtlab ')" -eq 2 ]; } || bad_help="$bad_help $c"
  "$VTLAB" help "$c" >"$W/hh" 2>&1; "$VTLAB" "$c" -h >"$W/hd" 2>&1
  { cmp -s "$h" "$W/hh" && cmp -s "$h" "$W/hd"; } || bad_same="$bad_same $c"
  # every option line says its default or that it is required
  n_opts=$(opts_of "$h" | wc -l)
  n_def=$(sed -n '/^options/,/^exit status:/p' "$h" | tr '\n' ' ' | grep -oE '\((default: [^)]*|required)\)' | wc -l)
  [ "$n_opts" -eq "$n_def" ] || bad_defaults="$bad_defaults $c($n_opts options, $n_def defaults)"
done
check "every command: --help exits 0 with usage line, synopsis, exit status 0/1/2, two examples" '[ -z "$bad_help" ]' "$bad_help"
check "vtlab help CMD and CMD -h print exactly what CMD --help does" '[ -z "$bad_same" ]' "$bad_same"
check "every option of every command names its default (or required)" '[ -z "$bad_defaults" ]' "$bad_defaults"
# An option's whole entry in CMD's help (its line and the lines continuing it), on one line.
entry() { awk -v o="$2" '/^  -/ { on = ($1 == o) } on && /^ / { printf "%s ", $0 } /^$/ { on = 0 }' "$W/h.$1" | tr -s ' '; }
d_ok=""
for want in "nightly --perf-min-drop (default: 0.05)" "nightly --alpha (default: 0.05)" "bisect --alpha (default: 0.05)" \
            "bisect --max-scale (default: 4)" "bisect --build (default: make -j2 vtlab)" "engine-check --timeout (default: 60)" \
            "engine-check --prefix-tol (default: 0.001)" "synth --dtype (default: f32)" "generate -n (default: 16)" \
            "localize --by (default: layer)" "localize --goal (default: minimal-failing)" "localize --workdir (default: build/localize)" \
            "submit --results (default: shards)" "submit --shards-per-arm (default: 1)" "report --out (default: report)" \
            "export --format (default: json)" "merge --into (required)" "claim --id (required)" "run --db (default: results.db)"; do
  set -- $want; c=$1; o=$2; shift 2
  entry "$c" "$o" | grep -qF -- "$*" || d_ok="$d_ok [$c $o: $(entry "$c" "$o")]"
done
check "the defaults are the parsers' (nightly --perf-min-drop 0.05, engine-check --timeout 60, localize --by layer, ...)" \
  '[ -z "$d_ok" ]' "$d_ok"
expect_exit "vtlab help: exit 0" 0 "$VTLAB" help
cmp -s "$OUT_FILE" <("$VTLAB" --help) && ok "... the usage, as vtlab --help" || not_ok "help = --help" "$(diff "$OUT_FILE" <("$VTLAB" --help) | head -3)"
"$VTLAB" help --markdown > "$W/cli.md"
cmp -s "$W/cli.md" docs/cli.md && ok "docs/cli.md is up to date with the table (vtlab help --markdown)" \
  || not_ok "docs/cli.md" "stale: vtlab help --markdown > docs/cli.md; $(diff docs/cli.md "$W/cli.md" | head -4)"

# ------------------------------------------------------------ the table and the parsers agree
# A value each option's parser accepts, by its placeholder (an enumerated
# option: its first value).
value_for() {   # OPT-LINE-HEAD ("--format json|csv")
  local arg=${1#* }
  [ "$arg" = "$1" ] && { echo ""; return; }
  case "$arg" in
    *"|"*) echo "${arg%%|*}" ;;
    N|S|G) echo 1 ;;
    A|F|X) echo 0.05 ;;
    I/N) echo 0/2 ;;
    *=*) echo A=B ;;
    DATE) echo 2026-01-01 ;;
    IDS) echo 1,2 ;;
    *) echo "$W/nothing-here" ;;
  esac
}
mkdir -p "$W/empty"
unaccepted=""; n_tried=0
for c in $ALL; do
  while IFS= read -r head; do
    [ -n "$head" ] || continue
    opt=${head%% *}; v=$(value_for "$head")
    if [ -n "$v" ]; then set -- "$opt" "$v"; else set -- "$opt"; fi
    (cd "$W/empty" && VTLAB_NIGHTLY_BISECT=0 timeout 60 "$VTLAB" "$c" "$@" </dev/null >"$W/o" 2>"$W/e")
    n_tried=$((n_tried + 1))
    if grep -qE "unknown option|needs a value|expected one of" "$W/e"; then unaccepted="$unaccepted $c:$*($(head -c 120 "$W/e"))"; fi
  done < <(sed -n '/^options/,/^exit status:/p' "$W/h.$c" | grep -oE '^  -{1,2}[a-z][a-z-]*( [^ ]+)?' | sed 's/^  //')
done
check "every option the table lists is accepted by its command's parser ($n_tried tried)" '[ -z "$unaccepted" ] && [ $n_tried -gt 100 ]' "$unaccepted"

# The commands that parse their own options: an option the table does not
# list for them is refused (lab.c's parser takes its options from the table).
all_opts=$(for c in $ALL; do opts_of "$W/h.$c"; done | sort -u)
extra=""
for c in synth validate logits generate engine engine-check knobs faults version help localize; do
  mine=$(opts_of "$W/h.$c")
  for o in $all_opts; do
    echo "$mine" | grep -qx -- "$o" && continue
    (cd "$W/empty" && timeout 20 "$VTLAB" "$c" "$o" 1 </dev/null >/dev/null 2>"$W/e")
    grep -q "unknown option $o" "$W/e" || extra="$extra $c:$o"
  done
done
check "main.c's commands and localize refuse every option their table entry does not list" '[ -z "$extra" ]' "$extra"

# Every option an example uses is one its command's table lists.
bad_ex=""
for c in $ALL; do
  while IFS= read -r ex; do
    out=$(/usr/bin/python3 - "$c" "$ex" "$W/h.$c" <<'PY'
import re, shlex, sys
cmd, ex, helpfile = sys.argv[1:4]
text = open(helpfile).read()
sec = text.split("\nexit status:")[0].split("\noptions")[1] if "\noptions" in text else ""
opts = {}
for m in re.finditer(r"^  (-{1,2}[a-z][a-z-]*)( \S+)?", sec, re.M):
    opts[m.group(1)] = bool(m.group(2))
w = shlex.split(ex)
while w and re.match(r"^[A-Z_][A-Z0-9_]*=", w[0]): w.pop(0)
if w[:2] != ["vtlab", cmd]: print(f"does not start with vtlab {cmd}"); sys.exit()
i = 2
while i < len(w) and w[i] not in ("|", "<", ">"):
    t = w[i]
    if t.startswith("-") and len(t) > 1:
        name = t.split("=")[0]
        if name not in opts: print(f"{name} is not an option of {cmd}"); sys.exit()
        i += 2 if opts[name] and "=" not in t else 1
        continue
    if cmd == "engine-check": break   # the engine's own command from here
    i += 1
PY
)
    [ -z "$out" ] || bad_ex="$bad_ex [$c: $ex: $out]"
  done < <(sed -n '/^examples:$/,$p' "$W/h.$c" | sed -n 's/^  //p')
done
check "every example's options are its command's (the table's)" '[ -z "$bad_ex" ]' "$bad_ex"

# ------------------------------------------------------------ the examples work
# Run in order from the repository root, /tmp/ paths moved into $W (a
# private ledger copy for reopen and claim); what needs Slurm, git history,
# a benchmark report or the default results.db in the checkout is left out.
# build/demo/ (make run's ledger copy, experiments/ beside it) moved there too
mkdir -p "$W/bin" "$W/demo" && ln -s "$VTLAB" "$W/bin/vtlab" && cp -r specs "$W/demo/specs" && cp -r experiments "$W/demo/"
RUN_EX="synth validate logits generate engine engine-check knobs faults version help init run runs show tag note
        compare export specs audit reopen claim report nightly ack"
failed_ex=""; n_ex=0
for c in $RUN_EX; do
  while IFS= read -r ex; do
    # what writes only under /tmp/, and what only reads the checkout
    [[ "$ex" == */tmp/* || "$ex" == *build/demo/* || "$c" =~ ^(knobs|faults|version|help|specs)$ ]] || continue
    cmdline=${ex//\/tmp\//$W\/}
    cmdline=${cmdline//build\/demo\//$W\/demo\/}
    PATH="$W/bin:$PATH" timeout 300 bash -c "$cmdline" >"$W/o" 2>"$W/e" </dev/null; rc=$?
    n_ex=$((n_ex + 1))
    # 0, or 1 where the example finds what it looks for (audit: the shipped open confound)
    [ $rc -eq 0 ] || [ $rc -eq 1 ] || failed_ex="$failed_ex [$cmdline: exit $rc: $(head -c 200 "$W/e")]"
  done < <(sed -n '/^examples:$/,$p' "$W/h.$c" | sed -n 's/^  //p')
done
check "the examples run: $n_ex of them, none a usage error or bad input" '[ -z "$failed_ex" ] && [ $n_ex -ge 40 ]' "$failed_ex"

# ------------------------------------------------------------ did you mean
# (from an empty directory: a command that took a mistyped option for a
# good one must not write into the checkout)
R=$PWD
cd "$W/empty" || exit 1
expect_exit "a mistyped command (vtlab rnu): exit 2" 2 "$VTLAB" rnu
stderr_has "... naming what it may be" 'unknown command "rnu" (did you mean run?); `vtlab help` lists the commands'
check "... in one line, not the whole usage" '[ "$(wc -l < "$ERR")" -eq 1 ] && [ ! -s "$OUT_FILE" ]' "$(wc -l < "$ERR") lines"
expect_exit "vtlab comapre 3 4: exit 2" 2 "$VTLAB" comapre 3 4
stderr_has "... did you mean compare" "(did you mean compare?)"
expect_exit "vtlab help rnu: exit 2" 2 "$VTLAB" help rnu
stderr_has "... did you mean run" "(did you mean run?)"
expect_exit "a command far from any: exit 2, no guess" 2 "$VTLAB" frobnicate
check "... no suggestion" '! grep -q "did you mean" "$ERR" && [ "$(wc -l < "$ERR")" -eq 1 ]' "$(cat "$ERR")"

"$VTLAB" run "$R/experiments/bf16-stream.json" --arm bf16-stream --limit 4 --db "$W/k.db" >/dev/null 2>&1
expect_exit "ack with a misspelt kind (bf16-stream/bf16-stream/perf): exit 2" 2 \
  "$VTLAB" ack bf16-stream/bf16-stream/perf --reason x --db "$W/k.db"
stderr_has "... naming the allowed kinds and the one meant" \
  'expected one of check, accuracy, numerics or performance, got "perf" (did you mean performance?)'
expect_exit "... also before there is a database" 2 "$VTLAB" ack tiny/arm/acuracy --reason x --db "$W/none.db"
stderr_has "... did you mean accuracy" "(did you mean accuracy?)"
"$VTLAB" ack bf16-stream-refuted-4of128/R1/moe-scatter-row-bytes-from-stream --reason x --db "$W/k.db" >"$OUT_FILE" 2>"$ERR"
check "a confound key (CLAIM/RULE/CAUSE) is not taken for a kind" '! grep -q "regression.s KIND" "$ERR"' "$(cat "$ERR")"
"$VTLAB" ack bf16-stream/bf16-stream/R1 --reason x --db "$W/k.db" >"$OUT_FILE" 2>"$ERR"
check "... nor an experiment's (EXPERIMENT/ARM/RULE)" '! grep -q "regression.s KIND" "$ERR"' "$(cat "$ERR")"

expect_exit "export --format jsno: exit 2" 2 "$VTLAB" export 1 --format jsno --db "$W/k.db"
stderr_has "... the values, and the one meant" 'expected one of json, csv, positions or positions-csv, got "jsno" (did you mean json?)'
expect_exit "runs --status finished: exit 2" 2 "$VTLAB" runs --status finished --db "$W/k.db"
stderr_has "... did you mean FINISHED" "(did you mean FINISHED?)"
expect_exit "synth --dtype bf61: exit 2" 2 "$VTLAB" synth --config "$R/model/configs/kimi-linear-tiny.json" --seed 1 --out "$W/x" --dtype bf61
stderr_has "... did you mean bf16" 'expected one of f32, bf16 or f16, got "bf61" (did you mean bf16?)'
check "... nothing written" '[ ! -e "$W/x" ]'
expect_exit "localize --goal minimal: exit 2" 2 "$VTLAB" localize "$R/experiments/bf16-stream.json" --arm a --goal minimal --db "$W/l.db"
stderr_has "... did you mean minimal-failing" "(did you mean minimal-failing?)"
expect_exit "localize --by layers: exit 2" 2 "$VTLAB" localize "$R/experiments/bf16-stream.json" --arm a --by layers --db "$W/l.db"
stderr_has "... did you mean layer" "(did you mean layer?)"
expect_exit "specs chekc: exit 2" 2 "$VTLAB" specs chekc
stderr_has "... did you mean check" "(did you mean check?)"
expect_exit "an option misspelt (synth --sed): exit 2" 2 "$VTLAB" synth --sed 1
stderr_has "... did you mean --seed" "unknown option --sed (did you mean --seed?)"
expect_exit "an option misspelt (nightly --perf-min-dorp): exit 2" 2 "$VTLAB" nightly --perf-min-dorp 0.1
stderr_has "... did you mean --perf-min-drop" "(did you mean --perf-min-drop?)"
expect_exit "an option of another command (submit --arm): exit 2" 2 "$VTLAB" submit "$R/experiments/bf16-stream.json" --arm x \
  --dry-run --results "$W/shards"
stderr_has "... unknown to submit" "unknown option --arm"
expect_exit "a misspelt knob: exit 2" 2 env VT_KIMI_BF16_STRAEM=1 "$VTLAB" generate --model "$W/tiny" --tokens 1,2 -n 1
stderr_has "... did you mean (the same helper)" "unknown knob VT_KIMI_BF16_STRAEM (did you mean VT_KIMI_BF16_STREAM?)"
expect_exit "an enum knob's value misspelt: exit 2" 2 env VT_PROBE=adit "$VTLAB" generate --model "$W/tiny" --tokens 1,2 -n 1
stderr_has "... did you mean audit" 'expected one of off|on|audit (did you mean audit?)'
finish
