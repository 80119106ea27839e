#!/usr/bin/env bash
# same_outputs.sh — two vtlab binaries, one scenario, the same bytes out.
#
#   bash tests/house/same_outputs.sh OLD_VTLAB NEW_VTLAB
#
# For a change that must not change behaviour (issue 36: files split,
# functions shortened). Each binary runs the same story in a directory of
# its own: the shipped experiments (at 16 sequences) swept into a database,
# runs/show/compare/export in text and JSON, audit, a claim, two nightlies
# (the second after an arm lost its expectation), ack, a third nightly,
# reopen, report, and every table of the database dumped. Timestamps,
# durations, throughput, the binaries' code versions and the temporary
# directory are replaced by placeholders; everything else must match byte
# for byte. Prints "ok"/"not ok" per step, the diff of the first few that
# differ, and "N passed, M failed"; exit 1 when any differs.
set -u
OLD=$(readlink -f "$1"); NEW=$(readlink -f "$2")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /tmp/vtlab-same.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$W"' EXIT
export VTLAB_CACHE=${VTLAB_CACHE:-$ROOT/build}
unset $(env | sed -n 's/^\(VT_[A-Z0-9_]*\)=.*/\1/p') 2>/dev/null
export VTLAB_TREE_REVISION=same-outputs OMP_NUM_THREADS=1

story() {   # $1 binary, $2 directory; each step's stdout+stderr+status in $2/out/NN-name
  local V=$1 D=$2 n=0
  mkdir -p "$D/out" && cd "$D" || return
  cp -r "$ROOT/specs" specs && mkdir experiments
  for e in "$ROOT"/experiments/*.json; do
    python3 - "$e" experiments/$(basename "$e") "$ROOT" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
e["dataset"]["generate"]["n_sequences"] = 16
e["model"]["synth"] = sys.argv[3] + "/" + e["model"]["synth"]
json.dump(e, open(sys.argv[2], "w"), indent=1)
PY
  done
  step() { n=$((n + 1)); local name=$1; shift; { "$@"; echo "exit $?"; } >"out/$(printf %02d $n)-$name" 2>&1; }
  step sweep      "$V" sweep experiments --db r.db
  step runs       "$V" runs --db r.db
  step runs-json  "$V" runs --db r.db --json
  step show       "$V" show 2 --db r.db
  step show-json  "$V" show 2 --db r.db --json
  step compare    "$V" compare 1 2 --db r.db
  step compare-j  "$V" compare 1 3 --db r.db --json
  step export-csv "$V" export 2 --db r.db --format csv
  step export-pos "$V" export 3 --db r.db --format positions
  step audit      "$V" audit --db r.db --specs specs
  step audit-json "$V" audit --db r.db --specs specs --json
  step claim      "$V" claim 2 --id same-outputs-claim --db r.db --specs specs
  step nightly1   "$V" nightly experiments --db r.db --out n1 --specs specs --no-plots
  python3 - experiments/bf16-stream.json <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
for a in e["arms"]:
    a.pop("expect_assertions", None)
json.dump(e, open(sys.argv[1], "w"), indent=1)
PY
  step nightly2   "$V" nightly experiments --db r.db --out n2 --specs specs --no-plots
  step ack-list   "$V" ack --list --db r.db
  step ack        "$V" ack bf16-stream/bf16-stream-scatter-defect/check --reason planted --db r.db
  step nightly3   "$V" nightly experiments --db r.db --out n3 --specs specs --no-plots
  step ack-list2  "$V" ack --list --db r.db
  step reopen     "$V" reopen bf16-stream-refuted-4of128 --db r.db --specs specs
  step audit2     "$V" audit --db r.db --specs specs
  step report     "$V" report --db r.db --out rep --no-plots
  step merge-none "$V" merge --into m.db
  cp r.db out/results.db
  for f in n1/* n2/* n3/* rep/* specs/claims/*; do [ -f "$f" ] && cp "$f" "out/file-${f//\//-}"; done
}

normalise() {   # $1 file, $2 the story's directory: placeholders for time, speed, binary, directory
  python3 "$ROOT/tests/house/normalise.py" "$1" "$2" "$OLD_VERSION" "$NEW_VERSION"
}

OLD_VERSION=$("$OLD" version | head -1 | cut -d"|" -f1)
NEW_VERSION=$("$NEW" version | head -1 | cut -d"|" -f1)
(story "$OLD" "$W/old") ; (story "$NEW" "$W/new")
pass=0; fail=0; shown=0
for f in $(cd "$W/old/out" && ls); do
  if [ ! -f "$W/new/out/$f" ]; then echo "not ok - $f (missing from the new binary's run)"; fail=$((fail + 1)); continue; fi
  if diff <(normalise "$W/old/out/$f" "$W/old") <(normalise "$W/new/out/$f" "$W/new") >"$W/d" 2>&1; then
    echo "ok - $f"; pass=$((pass + 1))
  else
    echo "not ok - $f"; fail=$((fail + 1))
    [ $shown -lt 5 ] && sed 's/^/#   /' "$W/d" | head -20; shown=$((shown + 1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
