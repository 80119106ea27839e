#!/usr/bin/env bash
# test_user_project.sh — a user (issue 31 item 6): vtlab installed into a
# temporary prefix (scripts/install.sh, what `make install` runs), then, in
# an unrelated temporary git repository with no vtlab source anywhere on the
# path (PATH is the prefix's bin and the system's, HOME and TMPDIR are the
# test's): init, run the example against `vtlab engine`, claim, audit, rerun
# (identical), tag, nightly twice, report. Every step must be green, and
# nothing may be written outside that repository and the cache
# (HOME/.cache/vtlab): the test's directory is listed, and the rest of the
# file system is searched for files newer than the start (the places other
# processes of this machine write are left out: /proc, /sys, /dev, /run,
# /tmp, /var, the checkout's /work, /root/.cache). Then make uninstall's
# script removes exactly what was installed.
#
# Usage (from the repository root): bash tests/cli/test_user_project.sh ./vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
SRC=$PWD
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-user.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
PY=/usr/bin/python3
q() { $PY -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print('\n'.join('|'.join(str(x) for x in r) for r in c.execute(sys.argv[2])))" "$@"; }

# ---- install into a prefix (the binary must be named vtlab: copy it so)
mkdir -p "$W/bin-src" && cp "$VTLAB" "$W/bin-src/vtlab"
expect_exit "install into a temporary prefix" 0 bash scripts/install.sh install "$W/prefix" "$W/bin-src/vtlab"
P=$W/prefix
if [ -x "$P/bin/vtlab" ] && [ -f "$P/include/vtprobe.h" ] && [ -f "$P/share/vtlab/configs/kimi-linear-tiny.json" ] &&
   [ -f "$P/share/vtlab/experiments/bf16-stream.json" ] && [ -f "$P/share/vtlab/specs/claims/bf16-stream-refuted-4of128.json" ] &&
   [ -f "$P/share/doc/vtlab/experiments.md" ] && [ -f "$P/share/man/man1/vtlab.1" ]; then
  ok "... binary, vtprobe.h, configs, example experiments and ledger, docs, man page"
else not_ok "installed files" "$(cd "$P" && find . -type f | head -40)"; fi
# the man page is the usage text: every command of --help is in it
missing=$("$P/bin/vtlab" --help | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p' | sort -u | while read -r c; do
  grep -qxF ".B vtlab ${c//-/\\-}" "$P/share/man/man1/vtlab.1" || echo "$c"; done)
if [ -z "$missing" ] && man -l "$P/share/man/man1/vtlab.1" 2>/dev/null | grep -q "vtlab init"; then
  ok "man page: every command of --help, readable by man"
else not_ok "man page" "missing: $missing"; fi
rm -rf "$W/bin-src"

# ---- the user's repository, and an environment that knows nothing of the source tree
R=$W/repo
mkdir -p "$R" "$W/home" "$W/tmp"
(cd "$R" && git init -q) || { not_ok "git init" ""; finish; exit 1; }
touch "$W/stamp"; sleep 1
u() { (cd "$R" && env -i PATH="$P/bin:/usr/bin:/bin" HOME="$W/home" TMPDIR="$W/tmp" LANG=C.UTF-8 "$@"); }
expect_exit "init" 0 u vtlab init
for f in experiments/example.json specs/README.md specs/claims/.gitkeep specs/defects/.gitkeep .gitignore \
         .github/workflows/vtlab-nightly.yml .gitlab/vtlab-nightly.yml .gitlab-ci.yml; do
  [ -f "$R/$f" ] || { not_ok "init wrote $f" "$(cd "$R" && find . -path ./.git -prune -o -type f -print)"; }
done
if grep -q "vtlab nightly" "$R/.github/workflows/vtlab-nightly.yml" && grep -q "junit: report/junit.xml" "$R/.gitlab/vtlab-nightly.yml" &&
   grep -q "path: results.db" "$R/.github/workflows/vtlab-nightly.yml" && grep -qx "results.db" "$R/.gitignore"; then
  ok "... the CI files run vtlab nightly, publish junit.xml and keep results.db; results.db is ignored"
else not_ok "init contents" "$(cat "$R/.github/workflows/vtlab-nightly.yml" | head -20)"; fi
sum_before=$(cd "$R" && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
expect_exit "init again refuses (exit 2)" 2 u vtlab init
sum_after=$(cd "$R" && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
stderr_has "... naming the file that exists" "experiments/example.json exists"
[ "$sum_before" = "$sum_after" ] && ok "... and nothing was written" || not_ok "init refusal wrote" "files changed"

expect_exit "run the example through vtlab engine" 0 u vtlab run experiments/example.json
ARM=$(q "$R/results.db" "select id from runs where arm = 'bf16-stream' and status = 'FINISHED'")
REF=$(q "$R/results.db" "select id from runs where arm = 'f32' and status = 'FINISHED'")
[ -n "$ARM" ] && [ "$(q "$R/results.db" "select backend from runs where id = $ARM")" = engine ] \
  && ok "... two FINISHED runs, through the engine" || not_ok "runs" "$(u vtlab runs 2>&1)"
expect_exit "claim the arm's run" 0 u vtlab claim "$ARM" --id example-bf16-stream
[ "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["experiment"])' "$R/specs/claims/example-bf16-stream.json")" = \
  experiments/example.json ] && ok "... the claim names its experiment relative to the ledger's parent" \
  || not_ok "claim experiment" "$(cat "$R/specs/claims/example-bf16-stream.json")"
expect_exit "specs check" 0 u vtlab specs check
expect_exit "audit: green" 0 u vtlab audit
expect_exit "rerun the arm's run" 0 u vtlab rerun "$ARM"
grep -q "^  identical (logits sha256 $(q "$R/results.db" "select logits_sha256 from runs where id = $ARM"))" "$OUT_FILE" \
  && ok "... identical, with the logits hash" || not_ok "rerun identical" "$(cat "$OUT_FILE")"
expect_exit "tag it" 0 u vtlab tag "$ARM" reviewed=yes
expect_exit "runs --tag finds it" 0 u vtlab runs --tag reviewed=yes
[ "$(grep -c " bf16-stream " "$OUT_FILE")" = 1 ] && ok "... and only it" || not_ok "runs --tag" "$(cat "$OUT_FILE")"
expect_exit "nightly" 0 u vtlab nightly
expect_exit "nightly again" 0 u vtlab nightly
grep -q 'tests="' "$R/report/junit.xml" 2>/dev/null && [ "$(q "$R/results.db" "select count(*) from nightlies where status = 'PASSED'")" = 2 ] \
  && ok "... two nightlies PASSED, junit.xml written" || not_ok "nightlies" "$(q "$R/results.db" "select id, status from nightlies")"
expect_exit "report" 0 u vtlab report
[ -f "$R/report/index.html" ] && ok "... report/index.html" || not_ok "report" "$(ls "$R/report")"

# ---- nothing outside the repository and the cache
untracked=$(cd "$R" && git status --porcelain --ignored | sort | tr '\n' ' ')
want='!! report/ !! results.db ?? .github/ ?? .gitignore ?? .gitlab-ci.yml ?? .gitlab/ ?? experiments/ ?? specs/ '
[ "$untracked" = "$want" ] && ok "the repository holds what init wrote, results.db and report/ (no build/, no cache)" \
  || not_ok "repository contents" "$untracked"
[ -d "$W/home/.cache/vtlab/models" ] && [ -z "$(ls -A "$W/tmp")" ] && [ "$(ls -A "$W/home")" = .cache ] \
  && [ "$(ls -A "$W/home/.cache")" = vtlab ] && ok "the cache is HOME/.cache/vtlab; nothing else in HOME or TMPDIR" \
  || not_ok "home and tmp" "$(cd "$W" && find home tmp | head -20)"
stray=$(find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp -o -path /var \
          -o -path /work -o -path /root/.cache -o -path "$W" \) -prune -o -newer "$W/stamp" -type f -print 2>/dev/null | head -5)
[ -z "$stray" ] && ok "no file written anywhere else" || not_ok "files written outside" "$stray"

# ---- uninstall removes exactly what was installed
expect_exit "uninstall" 0 bash scripts/install.sh uninstall "$P"
[ -z "$(ls -A "$P")" ] && ok "... the prefix is empty again" || not_ok "after uninstall" "$(cd "$P" && find . | head)"
cd "$SRC" && finish
