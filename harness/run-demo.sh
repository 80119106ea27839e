#!/usr/bin/env bash
# make run — the whole story on the embedded default (a synthetic tiny model):
# run the shipped experiments, audit the recorded claims against the known
# defects, reopen the confounded one, and show the new verdict.
#
# The ledger is copied to build/demo/specs first, so that reopening (which
# writes a new claim and marks the old one superseded) never edits the
# checkout: `make run` can be repeated, and specs/ stays as committed.
set -u
VTLAB=${1:-./vtlab}
DB=${DB:-results.db}
DEMO=build/demo
rm -rf "$DEMO/specs" && mkdir -p "$DEMO" && cp -r specs "$DEMO/specs"

if [ -t 1 ]; then say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }; else say() { printf '\n== %s\n' "$*"; }; fi

say "1. the model: a synthetic Kimi-Linear (8 layers: KDA + MLA, dense + 7 MoE), built once and cached"
"$VTLAB" synth --config model/configs/kimi-linear-tiny.json --seed 1 --out build/models/kimi-linear-tiny-seed1 >/dev/null &&
"$VTLAB" validate --model build/models/kimi-linear-tiny-seed1 || exit 1

say "2. the shipped experiments (experiments/*.json) into $DB"
"$VTLAB" sweep experiments --db "$DB" || exit 1

say "3. the audit: every recorded claim and run against the known defects"
"$VTLAB" audit --db "$DB" --specs "$DEMO/specs"
echo "(exit status $?: 1 means a confound is open)"

say "4. reopen the confounded claim: replay the defect, rerun without it, record the new verdict"
"$VTLAB" reopen bf16-stream-refuted-4of128 --db "$DB" --specs "$DEMO/specs" || exit 1

say "5. the audit again"
"$VTLAB" audit --db "$DB" --specs "$DEMO/specs" | grep -E "^(CONFOUND|resolved) |resolved: |confound\(s\) open"

say "files"
printf '  %-26s %s\n' \
  "$DB" "every run: provenance, knobs, probes, logits top-k, metrics, verdicts, audit flags" \
  "$DEMO/specs/claims/" "the ledger after reopening (the old claim kept, marked superseded)" \
  "build/models/" "the synthetic model (config.json, model.safetensors), built once" \
  "build/reopen/" "the derived experiment the reopen ran"
next="./vtlab runs, ./vtlab show RUN, ./vtlab compare RUN_A RUN_B"
"$VTLAB" help 2>&1 | grep -q "^  report" && next="$next, ./vtlab report (HTML and plots in report/)"
echo "next: $next"
