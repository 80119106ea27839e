#!/usr/bin/env bash
# make run — the whole story on the embedded default (a synthetic tiny model):
# run the shipped experiments, audit the recorded claims against the known
# defects, reopen the confounded one, and show the new verdict.
#
# The demo works on a database and a ledger of its own, build/demo/results.db
# and build/demo/specs (a copy of specs/, with experiments/ beside it), so that reopening (which writes a
# new claim and marks the old one superseded) never edits the checkout and
# `make run` can be repeated. What it changed is said at the end, with the
# exact commands that look at it: the same commands without --db/--specs read
# results.db and specs/, where the 4/128 claim is still open.
set -u
VTLAB=${1:-./vtlab}
DEMO=${DEMO:-build/demo}
DB=${DB:-$DEMO/results.db}
SPECS=$DEMO/specs
# the ledger's claims name their experiments relative to the ledger's parent:
# the copy comes with a copy of experiments/
rm -rf "$SPECS" "$DEMO/experiments" && mkdir -p "$DEMO" && cp -r specs "$SPECS" && cp -r experiments "$DEMO/experiments"

if [ -t 1 ]; then say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }; else say() { printf '\n== %s\n' "$*"; }; fi

echo "The demo's database is $DB and its ledger $SPECS (a fresh copy of specs/): the checkout's"
echo "results.db and specs/ are not touched."

say "1. the model: a synthetic Kimi-Linear (8 layers: KDA + MLA, dense + 7 MoE), built once and cached"
"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out build/models/kimi-linear-tiny-seed1 >/dev/null &&
"$VTLAB" validate --model build/models/kimi-linear-tiny-seed1 || exit 1

say "2. the shipped experiments (experiments/*.json) into $DB"
"$VTLAB" sweep experiments --db "$DB" || exit 1

say "3. the audit: every recorded claim and run against the known defects"
"$VTLAB" audit --db "$DB" --specs "$SPECS"
echo "(exit status $?: 1 means a confound is open)"

say "4. reopen the confounded claim: replay the defect, rerun without it, record the new verdict"
"$VTLAB" reopen bf16-stream-refuted-4of128 --db "$DB" --specs "$SPECS" || exit 1

say "5. the audit again"
"$VTLAB" audit --db "$DB" --specs "$SPECS" | grep -E "^(CONFOUND|resolved) |resolved: |confound\(s\) open"

say "what changed"
printf '  %-26s %s\n' \
  "$DB" "every run: provenance, knobs, probes, logits top-k, metrics, verdicts, audit flags" \
  "$SPECS/claims/" "the demo's ledger after reopening (the old claim kept, marked superseded)" \
  "build/models/" "the synthetic model (config.json, model.safetensors), built once" \
  "build/reopen/" "the derived experiment the reopen ran"
echo
echo "next, on the demo's database and ledger (the commands need --db and --specs to see them):"
echo "  ./vtlab audit  --db $DB --specs $SPECS"
echo "  ./vtlab report --db $DB --out $DEMO/report      # HTML and plots in $DEMO/report/"
echo "  ./vtlab runs   --db $DB;  ./vtlab show RUN --db $DB;  ./vtlab compare RUN_A RUN_B --db $DB"
echo
echo "without them they read results.db and specs/, the checkout's ledger, where the 4/128 claim is still"
echo "open: ./vtlab audit says CONFOUND and \`make nightly\` is CONFOUNDED (exit 1) until it is reopened there"
echo "(./vtlab reopen bf16-stream-refuted-4of128, then commit specs/claims/) or acknowledged (vtlab ack KEY;"
echo "docs/nightly.md)."
