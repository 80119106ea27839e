#!/usr/bin/env bash
# test_shown_names.sh — text read from a results database cannot drive the
# reader's terminal: `runs`, `show` and `compare` print every control
# character of a name, tag, note or reason (other than newline and tab) as '?'.
#
# A results.db is a file anyone may write with sqlite3; here an arm's name, a
# tag and a note are planted with ESC (a colour change) and BEL in them.
# Usage (from the repository root): bash tests/cli/test_shown_names.sh ./vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
W=$(mktemp -d /tmp/vtlab-shown.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE="$W/out"; ERR="$W/err"
. tests/cli/lib.sh
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "${3:-}"; fi; }

cat > "$W/e.json" <<JSON
{"id": "shown", "model": {"synth": "$PWD/model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 2, "length": 4, "seed": 5}}, "score": "all", "top_k": 2, "reference": "f32",
 "arms": [{"name": "f32"}, {"name": "b", "knobs": {"VT_KIMI_BF16_STREAM": 1}}]}
JSON
expect_exit "a tiny experiment runs" 0 "$VTLAB" run "$W/e.json" --db "$W/r.db"
expect_exit "a tag" 0 "$VTLAB" tag 2 owner=me --db "$W/r.db"
expect_exit "a note" 0 "$VTLAB" note 2 "plain note" --db "$W/r.db"
/usr/bin/python3 - "$W/r.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE runs SET arm = 'b' || char(27) || '[31mRED' WHERE id = 2")
c.execute("UPDATE run_tags SET value = 'me' || char(27) || ']0;title' || char(7) WHERE run_id = 2")
c.execute("UPDATE run_notes SET text = 'note' || char(27) || '[2J' WHERE run_id = 2")
c.commit()
PY
has_ctl() { /usr/bin/python3 -c 'import sys; d = open(sys.argv[1], "rb").read(); sys.exit(0 if any(b < 32 and b not in (9, 10) or b == 127 for b in d) else 1)' "$1"; }
for cmd in "runs" "show 2" "compare 1 2"; do
  expect_exit "$cmd: exit 0" 0 "$VTLAB" $cmd --db "$W/r.db"
  check "$cmd: no control character reaches the terminal" "! has_ctl $OUT_FILE" "$(od -c "$OUT_FILE" | grep -m3 '033\|007')"
done
"$VTLAB" runs --db "$W/r.db" >"$OUT_FILE" 2>"$ERR"
check "runs: the planted arm shown with '?'" "grep -q 'b?\[31mRED' $OUT_FILE" "$(cat $OUT_FILE)"
"$VTLAB" show 2 --db "$W/r.db" >"$OUT_FILE" 2>"$ERR"
check "show: the tag and the note shown with '?'" "grep -q 'me?\]0;title?' $OUT_FILE && grep -q 'note?\[2J' $OUT_FILE" "$(cat $OUT_FILE)"
check "show: newlines and the layout kept (the sections are there)" "grep -q '^tags$' $OUT_FILE && grep -q '^notes$' $OUT_FILE && grep -q '^knobs' $OUT_FILE"
"$VTLAB" show 2 --db "$W/r.db" --json >"$OUT_FILE" 2>"$ERR"
check "show --json: the name kept exactly, as JSON escapes it" "grep -q 'b\\\\u001b\[31mRED' $OUT_FILE" "$(grep -m2 RED $OUT_FILE)"
finish
