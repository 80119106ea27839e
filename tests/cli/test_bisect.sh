#!/bin/bash
# test_bisect.sh — `vtlab bisect` on a temporary git repository of this
# project: 17 commits on top of a base, one planting a numeric regression
# (the bf16 rounding keeps 3 mantissa bits: the bf16-stream arm's top-1
# agreement drops clearly), one planting a build failure (fixed by the next
# commit). Checks: the planted commit is named in <= ceil(log2 N) + 2 builds,
# the broken one is skipped; a regression inside the noise ends UNDECIDED,
# not in a culprit; kill -9 during a bisection, then the same command,
# finishes with the same answer without redoing finished commits; bad input
# is exit 2 with nothing written. Usage: tests/cli/test_bisect.sh [VTLAB]
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)
VTLAB=$(realpath "${1:-./vtlab}")
. tests/cli/lib.sh
T=$(mktemp -d /tmp/vtlab-bisect.XXXXXX)
[ -n "$KEEP" ] && echo "# kept $T" || trap 'rm -rf "$T"' EXIT
OUT_FILE=$T/out; ERR=$T/err
T0=$(date +%s)

# ---- the repository: this project's files (tracked and new) as a base commit
R=$T/repo
mkdir -p "$R"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$R" 2>/dev/null
# the build objects of this checkout, with the times of the files they were
# built from, so the first build of the bisection compiles only what differs
mkdir -p "$R/build"
for d in model harness gen; do [ -d build/$d ] && cp -a build/$d "$R/build/"; done
(cd "$R" && git init -q && git config user.email t@t && git config user.name t && git add -A \
   && git commit -qm base) || { echo "not ok - setting up the repository"; exit 1; }
git ls-files -co --exclude-standard -z | (cd "$R" && xargs -0 -I{} touch -r "$ROOT/{}" "{}")
cat > "$T/exp.json" <<'EOF'
{"id": "bisect-tiny",
 "model": {"synth": "model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 16, "length": 16, "seed": 3}},
 "score": "all", "top_k": 4, "reference": "f32",
 "arms": [{"name": "f32", "knobs": {}}, {"name": "bf16", "knobs": {"VT_KIMI_BF16_STREAM": "1"}}],
 "metrics": ["top1_agreement"],
 "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="}}
EOF
commit() { (cd "$R" && git add -A && git commit -qm "$1"); }
harmless() { echo "$1" >> "$R/docs/bisect-history.txt"; commit "docs: note $1"; }
GOOD=$(git -C "$R" rev-parse HEAD)
for i in 1 2 3 4 5 6 7; do harmless "$i"; done
echo '#error planted build failure' > "$R/harness/zz_broken.c"; commit "harness: a file that does not compile"
BROKEN=$(git -C "$R" rev-parse HEAD)
rm "$R/harness/zz_broken.c"; commit "harness: the broken file removed"
harmless 10
sed -i 's/u += 0x7FFFu + lsb;  /u \&= 0xFFF00000u;  /' "$R/model/dtype.c"
grep -q 'u &= 0xFFF00000u;' "$R/model/dtype.c" || { echo "not ok - planting the regression"; exit 1; }
commit "dtype: bf16 conversion keeps 3 mantissa bits (the planted regression)"
PLANTED=$(git -C "$R" rev-parse HEAD)
for i in 12 13 14 15 16 17; do harmless "$i"; done
BAD=$(git -C "$R" rev-parse HEAD)
N=$(git -C "$R" rev-list --count "$GOOD..$BAD")
BOUND=$(python3 -c "import math; print(math.ceil(math.log2($N)) + 2)")
echo "# history: $N commits, planted ${PLANTED:0:12}, broken ${BROKEN:0:12}, bound $BOUND builds"

cd "$R" || exit 2
# ---- bad input: exit 2, nothing written
expect_exit "an unknown revision is exit 2" 2 "$VTLAB" bisect "$T/exp.json" --arm bf16 --good nosuchrev --bad "$BAD" --db "$T/bad.db"
stderr_has "the unknown revision is named" 'unknown revision "nosuchrev"'
expect_exit "a path that is not a repository is exit 2" 2 "$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$GOOD" --bad "$BAD" --repo "$T" --db "$T/bad.db"
stderr_has "the path is named" "not a git repository"
expect_exit "an unknown arm is exit 2" 2 "$VTLAB" bisect "$T/exp.json" --arm nosuch --good "$GOOD" --bad "$BAD" --db "$T/bad.db"
expect_exit "the reference arm is exit 2" 2 "$VTLAB" bisect "$T/exp.json" --arm f32 --good "$GOOD" --bad "$BAD" --db "$T/bad.db"
echo '{"id": "x"' > "$T/broken.json"
expect_exit "a malformed experiment is exit 2" 2 "$VTLAB" bisect "$T/broken.json" --arm bf16 --good "$GOOD" --bad "$BAD" --db "$T/bad.db"
expect_exit "good after bad is exit 2" 2 "$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$BAD" --bad "$GOOD" --db "$T/bad.db"
echo dirt > "$R/dirt.txt"
expect_exit "a dirty repository is exit 2" 2 "$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$GOOD" --bad "$BAD" --db "$T/bad.db"
stderr_has "the dirty repository is said" "uncommitted changes"
rm "$R/dirt.txt"
if [ -e "$T/bad.db" ]; then not_ok "bad input writes nothing" "$T/bad.db exists"; else ok "bad input writes nothing"; fi

# ---- the planted regression
B1=$(date +%s)
"$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$GOOD" --bad "$BAD" --db "$T/r.db" --workdir "$T/work" > "$T/b1.out" 2> "$T/b1.err"
rc=$?
B2=$(date +%s)
sed 's/^/# /' "$T/b1.out"
if [ $rc -eq 0 ]; then ok "bisect exits 0"; else not_ok "bisect exits 0" "exit $rc: $(tail -3 "$T/b1.err")"; fi
if grep -q "^result: culprit ${PLANTED:0:12}" "$T/b1.out"; then ok "the planted commit is named"; else
  not_ok "the planted commit is named" "$(grep '^result' "$T/b1.out")"; fi
grep -q "lost.*gained.*McNemar p" "$T/b1.out" && ok "the culprit comes with its evidence" || not_ok "the culprit comes with its evidence" "$(grep '^result' "$T/b1.out")"
BUILDS=$(sqlite3 "$T/r.db" "SELECT builds FROM bisections")
if [ -n "$BUILDS" ] && [ "$BUILDS" -le "$BOUND" ]; then ok "$BUILDS builds <= ceil(log2 $N) + 2 = $BOUND"; else
  not_ok "builds within the bound" "$BUILDS builds, bound $BOUND"; fi
echo "# builds: $BUILDS for $N commits (bound $BOUND); bisection took $((B2 - B1)) s"
if [ "$(sqlite3 "$T/r.db" "SELECT class FROM bisect_steps WHERE commit_sha = '$BROKEN'")" = skip ]; then
  ok "the broken commit is skipped"; else not_ok "the broken commit is skipped" "$(grep "${BROKEN:0:12}" "$T/b1.out")"; fi
grep "${BROKEN:0:12}" "$T/b1.out" | grep -q "build failed" && ok "the skip says the build failed" || not_ok "the skip says the build failed" ""
NR=$(sqlite3 "$T/r.db" "SELECT count(*) FROM bisect_steps s JOIN runs a ON a.id = s.arm_run_id JOIN runs r ON r.id = s.ref_run_id
  WHERE a.git_commit = substr(s.commit_sha, 1, 12) AND r.git_commit = a.git_commit AND a.arm = 'bf16' AND r.arm = 'f32'")
NS=$(sqlite3 "$T/r.db" "SELECT count(*) FROM bisect_steps WHERE class != 'skip'")
[ "$NR" = "$NS" ] && [ "$NS" -gt 0 ] && ok "each step's runs are the candidate's own code ($NS steps)" || not_ok "each step's runs are the candidate's code" "$NR of $NS"
git -C "$R" worktree list | grep -q "$T/work" && not_ok "the worktree is removed when done" "$(git -C "$R" worktree list)" || ok "the worktree is removed when done"
[ -z "$(git -C "$R" status --porcelain)" ] && ok "the user's tree is untouched" || not_ok "the user's tree is untouched" "$(git -C "$R" status --porcelain | head -3)"

# the same command again: the finished bisection, nothing rerun
"$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$GOOD" --bad "$BAD" --db "$T/r.db" --workdir "$T/work" > "$T/b1b.out" 2>&1
if [ "$(grep '^result' "$T/b1.out")" = "$(grep '^result' "$T/b1b.out")" ] && ! grep -q building "$T/b1b.out" \
   && [ "$(sqlite3 "$T/r.db" "SELECT count(*) FROM bisections")" = 1 ]; then ok "the same command shows the same bisection, nothing rebuilt"; else
  not_ok "the same command shows the same bisection" "$(tail -3 "$T/b1b.out")"; fi

# --exact: the logits of the bf16 arm change first at the planted commit too
"$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$GOOD" --bad "$BAD" --db "$T/r.db" --workdir "$T/work" --exact > "$T/b3.out" 2>&1
grep -q "^result: culprit ${PLANTED:0:12}" "$T/b3.out" && ok "--exact names the planted commit" || not_ok "--exact names the planted commit" "$(tail -3 "$T/b3.out")"
grep -q building "$T/b3.out" && not_ok "--exact reuses the runs already in results.db" "$(grep -c building "$T/b3.out") builds" || ok "--exact reuses the runs already in results.db (no build)"
# each step says where its evidence came from (issue 33 item 6): here the
# runs already in results.db, or the broken commit's build failure from the
# cache; nothing built or run
STEP=' -> (good|bad|skip|undecided) '
if grep -Eq "$STEP" "$T/b3.out" && grep -Eq "$STEP\(runs reused\)" "$T/b3.out" \
   && ! grep -E "$STEP" "$T/b3.out" | grep -v '(runs reused)' | grep -vq 'skip (cached build): build failed'; then
  ok "--exact: each step labelled (runs reused), the broken commit (cached build)"; else
  not_ok "--exact: each step labelled (runs reused), the broken commit (cached build)" "$(grep -E "$STEP" "$T/b3.out" | head -3)"; fi

# ---- vtlab report: each bisection as a table and a chart
"$VTLAB" report --db "$T/r.db" --out "$T/rep" > "$T/rep.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "the report is written" || not_ok "the report is written" "exit $rc: $(tail -3 "$T/rep.out")"
grep -q 'id="bisect"' "$T/rep/index.html" && grep -q "culprit ${PLANTED:0:12}" "$T/rep/index.html" && ok "the page has the bisections and the culprit" || not_ok "the page has the bisections" ""
grep -q "culprit ${PLANTED:0:12}" "$T/rep/summary.md" && ok "summary.md names the culprit" || not_ok "summary.md names the culprit" ""
if command -v gnuplot >/dev/null; then
  [ -s "$T/rep/plots/bisect-1.svg" ] && ok "the bisection's chart is drawn" || not_ok "the bisection's chart is drawn" "$(ls "$T/rep/plots" | head)"
fi

# ---- kill -9 during a bisection, then the same command
"$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$GOOD" --bad "$BAD" --db "$T/k.db" --workdir "$T/work" > "$T/k1.out" 2>&1 &
KP=$!
for _ in $(seq 1 600); do
  n=$(grep -c -- ' -> ' "$T/k1.out" 2>/dev/null)
  [ "${n:-0}" -ge 3 ] && break
  kill -0 $KP 2>/dev/null || break
  sleep 0.1
done
kill -9 $KP 2>/dev/null; wait $KP 2>/dev/null
DONE_BEFORE=$(sqlite3 "$T/k.db" "SELECT count(*) FROM bisect_steps")
"$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$GOOD" --bad "$BAD" --db "$T/k.db" --workdir "$T/work" > "$T/k2.out" 2>&1
rc=$?
[ "${DONE_BEFORE:-0}" -ge 1 ] && ok "killed after $DONE_BEFORE finished step(s)" || not_ok "killed mid-bisection" "no step finished before the kill"
[ $rc -eq 0 ] && grep -q "resumed" "$T/k2.out" && ok "the same command resumes it" || not_ok "the same command resumes it" "exit $rc: $(tail -3 "$T/k2.out")"
if [ "$(grep '^result' "$T/k2.out" | cut -d: -f1-2)" = "$(grep '^result' "$T/b1.out" | cut -d: -f1-2)" ]; then ok "the resumed bisection has the same answer"; else
  not_ok "the resumed bisection has the same answer" "$(grep '^result' "$T/k2.out")"; fi
# k.db is new and the build cache is full: every step of the killed run made
# new runs with a cached binary, and says so, never "(runs reused)" (issue 33
# item 6: it did, though the stored built column was right)
if grep -Eq "$STEP" "$T/k1.out" && ! grep -q '(runs reused)' "$T/k1.out" && grep -q '(cached build)' "$T/k1.out"; then
  ok "a step that ran new runs with a cached binary is labelled (cached build)"; else
  not_ok "a step with new runs from a cached binary is labelled (cached build)" "$(grep -E "$STEP" "$T/k1.out" | head -3)"; fi
STORED=$(grep -c '(stored)' "$T/k2.out")
[ "$STORED" -eq "$DONE_BEFORE" ] && ok "finished commits are not redone ($STORED shown from the store)" || not_ok "finished commits not redone" "$STORED stored, $DONE_BEFORE before"
DUP=$(sqlite3 "$T/k.db" "SELECT count(*) FROM (SELECT commit_sha, scale FROM bisect_steps GROUP BY 1, 2 HAVING count(*) > 1)")
[ "$DUP" = 0 ] && ok "no commit evaluated twice" || not_ok "no commit evaluated twice" "$DUP"
LEFT=$(sqlite3 "$T/k.db" "SELECT count(*) FROM runs WHERE status = 'RUNNING'")
[ "$LEFT" = 0 ] && ok "no run left RUNNING" || not_ok "no run left RUNNING" "$LEFT"

# ---- a regression inside the noise: the rounding offset nudged (0x7FFF -> 0x7000)
cd "$R" && git checkout -q -b noise "$GOOD"
for i in 1 2 3; do harmless "n$i"; done
sed -i 's/u += 0x7FFFu + lsb;  /u += 0x7000u + lsb;  /' "$R/model/dtype.c"; commit "dtype: bf16 rounding offset nudged (inside the noise)"
for i in 5 6 7 8; do harmless "n$i"; done
NBAD=$(git -C "$R" rev-parse HEAD)
"$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$GOOD" --bad "$NBAD" --db "$T/r.db" --workdir "$T/work" --max-scale 2 > "$T/n.out" 2>&1
rc=$?
sed 's/^/# /' "$T/n.out"
[ $rc -eq 0 ] && grep -q "^result: UNDECIDED" "$T/n.out" && ok "a regression inside the noise ends UNDECIDED" || not_ok "inside the noise: UNDECIDED" "exit $rc: $(grep '^result' "$T/n.out")"
grep -q "^result: culprit" "$T/n.out" && not_ok "no culprit is named inside the noise" "$(grep culprit "$T/n.out")" || ok "no culprit is named inside the noise"
grep -q "dataset grows to x2" "$T/n.out" && ok "the dataset grew before giving up" || not_ok "the dataset grew before giving up" ""

# ---- a history with no regression (three harmless commits): no culprit
"$VTLAB" bisect "$T/exp.json" --arm bf16 --good "$GOOD" --bad "$(git -C "$R" rev-parse noise~5)" --db "$T/r.db" --workdir "$T/work" > "$T/z.out" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "^result: NONE" "$T/z.out" && ok "no regression in the history: NONE, no culprit" || not_ok "no regression: NONE" "exit $rc: $(grep '^result' "$T/z.out")"

# ---- vtlab nightly --bisect: last night at GOOD, tonight at BAD
mkdir -p "$T/exps" && cp "$T/exp.json" "$T/exps/"
cd "$R" && git checkout -q "$GOOD" && make -s -j2 vtlab >/dev/null 2>&1 && ./vtlab nightly "$T/exps" --db "$T/n.db" --out "$T/out1" --no-audit --no-plots > "$T/n1.out" 2>&1
rc1=$?
git checkout -q "$BAD" && make -s -j2 vtlab >/dev/null 2>&1 && ./vtlab nightly "$T/exps" --db "$T/n.db" --out "$T/out2" --no-audit --no-plots --bisect > "$T/n2.out" 2>&1
rc2=$?
grep -E "^== bisect|^result" "$T/n2.out" | sed 's/^/# /'
[ $rc1 -eq 0 ] && [ $rc2 -eq 1 ] && ok "the nightlies: passed, then regressed" || not_ok "the nightlies: passed, then regressed" "exit $rc1, $rc2: $(tail -3 "$T/n2.out")"
for f in nightly.md junit.xml regressions.atom; do
  grep -q "culprit ${PLANTED:0:12}" "$T/out2/$f" && ok "$f names the culprit" || not_ok "$f names the culprit" "$(grep -o 'bisect[^|<]*' "$T/out2/$f" | head -2)"
done
NB=$(sqlite3 "$T/n.db" "SELECT builds FROM bisections WHERE nightly_id = 2")
echo "# nightly bisection: $NB builds (the ends' runs are the nightlies' own)"
git checkout -q master 2>/dev/null || git checkout -q main 2>/dev/null

T1=$(date +%s)
echo "# test_bisect: $((T1 - T0)) s"
finish
