#!/usr/bin/env bash
# test_bisect_engine.sh — `vtlab bisect --build CMD` on an external engine's
# repository (issue 17, item 1): the candidates are commits of the engine's
# tree, each "built" by --build in its worktree, the experiment's engine
# command run from that worktree; the arm runs through the candidate's
# engine while the reference stays a fixed engine outside the repository.
# A commit that flips the engine's logits must be named.
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-bisect-engine.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
R=$W/engine-repo
mkdir -p "$R" "$W/fixed"
cp tests/engines/vtp.py tests/engines/fake.py tests/engines/good.py "$R/"
cp tests/engines/vtp.py tests/engines/fake.py tests/engines/good.py "$W/fixed/"
git -C "$R" init -q && git -C "$R" config user.email t@t && git -C "$R" config user.name t
git -C "$R" add -A && git -C "$R" commit -qm "engine: base"
for i in $(seq 1 11); do
  echo "note $i" >> "$R/NOTES"
  if [ "$i" = 7 ]; then   # the planted regression: the engine's logits change sign
    sed -i 's/    return scale \* acc/    return -scale * acc/' "$R/fake.py"
    grep -q "return -scale" "$R/fake.py" || { echo "plant failed"; exit 1; }
  fi
  git -C "$R" add -A && git -C "$R" commit -qm "engine: change $i"
done
GOOD=$(git -C "$R" rev-list --max-parents=0 HEAD); BAD=$(git -C "$R" rev-parse HEAD)
PLANTED=$(git -C "$R" log --format=%h --grep "change 7" | head -1)
cat > "$W/exp.json" <<JSON
{"id": "eng-bisect", "model": {"synth": "$PWD/model/configs/kimi-linear-tiny.json", "seed": 1},
 "dataset": {"generate": {"n_sequences": 24, "length": 8, "seed": 5}},
 "top_k": 4, "reference": "ref", "score": "last",
 "arms": [{"name": "ref", "engine": ["$W/fixed/good.py"]},
          {"name": "cand", "engine": ["./good.py"]}],
 "metrics": ["top1_agreement", "mcnemar"],
 "decision": {"metric": "top1_agreement", "threshold": 0.9, "direction": ">="}}
JSON
"$VTLAB" bisect "$W/exp.json" --arm cand --good "$GOOD" --bad "$BAD" --repo "$R" --build true \
    --db "$W/r.db" --workdir "$W/bisect" >"$OUT_FILE" 2>"$ERR"; rc=$?
if [ "$rc" = 0 ] && grep -q "$PLANTED" "$OUT_FILE" && grep -qi "first bad commit" "$OUT_FILE" && [ "$(sqlite3 "$W/r.db" "select count(distinct code_version) from runs where arm = 'cand'")" -ge 3 ]; then
    ok "--build on an engine's repository names the planted commit $PLANTED"
else not_ok "engine bisect" "rc $rc: $(tail -15 "$OUT_FILE") $(head -c 300 "$ERR")"; fi
grep -E "^(result|builds)" "$OUT_FILE" | sed 's/^/# /'
finish
