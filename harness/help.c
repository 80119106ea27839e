/*
 * help.c — the table of vtlab's commands and everything made from it
 * (help.h): the usage, each command's help, docs/cli.md, and the errors that
 * name a command, an option or a value the user may have misspelt.
 *
 * The defaults written here are the ones the parsers apply (lab.c,
 * main.c, localize.c and the *_defaults functions they call); a default that
 * changes there changes here. tests/cli/test_help.sh runs every option of the
 * table through its command's parser and every example's options against
 * the table.
 */
#include "help.h"

#include <stdio.h>
#include <string.h>

#include "model/vt.h"

static const char *const SECTIONS[] = {
    "model commands",
    "a project (docs/experiments.md: paths in a file are relative to that file)",
    "lab commands (default database: results.db in the current directory)",
    "cluster sweeps (docs/slurm.md)",
    "the ledger (specs/: recorded claims and known defects)",
    "reports and CI",
};
enum { S_MODEL, S_PROJECT, S_LAB, S_CLUSTER, S_LEDGER, S_CI };

/* Options more than one command takes, said once. */
#define O_DB         {"--db", "PATH", "results.db", NULL, "the results database"}
#define O_DB_READ    {"--db", "PATH", "results.db", NULL, "the results database (read only; never created)"}
#define O_SPECS      {"--specs", "DIR", "specs", NULL, "the ledger: claims/ and defects/"}
#define O_FORCE      {"--force", NULL, "off", NULL, "run again even what already has a finished run"}
#define O_JSON       {"--json", NULL, "off", NULL, "JSON for scripts instead of the table"}
#define O_ALPHA      {"--alpha", "A", "0.05", NULL, "the significance of McNemar's exact test, in (0, 1)"}
#define O_CACHE      {"--cache", "DIR", "$VTLAB_CACHE, else $XDG_CACHE_HOME/vtlab, else ~/.cache/vtlab", NULL, \
                      "where synthetic models are built once and kept (sets VTLAB_CACHE for what it starts)"}
#define X_BAD        "bad input or usage: a message names the argument, file or field and what was expected"
#define X_DB_READ    "the database could not be read"

static const lab_help_cmd CMDS[] = {
    /* ------------------------------------------------------------ model commands */
    {"synth", S_MODEL, "", NULL, "deterministic synthetic checkpoint (Moonshot tensor names)",
     "The same config and seed give byte-identical files.",
     {{"--config", "CONFIG.json", "required", NULL, "the model's config (model/configs/)"},
      {"--seed", "N", "required", NULL, "the weights' seed, a non-negative integer"},
      {"--out", "DIR", "required", NULL, "where config.json and model.safetensors are written"},
      {"--dtype", "DTYPE", "f32", "f32|bf16|f16", "the weights' dtype"}},
     {"written", "a file could not be written", X_BAD " (a bad config: its field)"},
     {"vtlab synth --config model/configs/kimi-linear-tiny.json --seed 1 --out /tmp/tiny",
      "vtlab synth --config model/configs/kimi-linear-tiny.json --seed 1 --out /tmp/tiny-bf16 --dtype bf16"}},
    {"validate", S_MODEL, "", NULL, "check config and checkpoint, print a summary",
     "Every tensor present, with its shape and dtype. Reads the headers only: flat memory at any checkpoint size.",
     {{"--model", "DIR", "required", NULL, "the model directory (config.json, *.safetensors)"}},
     {"the model is valid (its summary printed)", "the checkpoint could not be read",
      X_BAD " (the first problem found, naming the file and the tensor)"},
     {"vtlab validate --model /tmp/tiny", "vtlab validate --model=/tmp/tiny-bf16"}},
    {"logits", S_MODEL, "", NULL, "logits of every position, raw little-endian f32 [T, vocab]",
     "Knobs come from the environment (VT_* variables, `vtlab knobs`); an unknown one is exit 2 with a did-you-mean. "
     "Every output appears whole or not at all.",
     {{"--model", "DIR", "required", NULL, "the model directory"},
      {"--tokens", "IDS", "required", NULL, "the prompt's token ids: 5,17,3 (commas and/or blanks)"},
      {"--out", "FILE", "required", NULL, "the logits, [T, vocab] little-endian f32"},
      {"--probes", "FILE.json", "none", NULL, "the probe records (runtime dtype assertions; VT_PROBE=audit) as JSON"}},
     {"written", "the forward pass or a write failed", X_BAD " (a knob, the model, VT_BACKEND=cuda without a device)"},
     {"vtlab logits --model /tmp/tiny --tokens 5,17,3,900 --out /tmp/l.bin",
      "VT_PROBE=audit VT_KIMI_BF16_STREAM=1 vtlab logits --model /tmp/tiny --tokens 5,17,3 --out /tmp/l16.bin "
      "--probes /tmp/probes.json"}},
    {"generate", S_MODEL, "", NULL, "greedy decoding (prefill, then the decode path)",
     "Prints the generated ids, comma-separated, as they come. "
     "Knobs come from the environment, as for logits.",
     {{"--model", "DIR", "required", NULL, "the model directory"},
      {"--tokens", "IDS", "required", NULL, "the prompt's token ids: 5,17,3"},
      {"-n", "N", "16", NULL, "how many tokens to generate, 0..100000"}},
     {"generated", "the forward pass failed", X_BAD},
     {"vtlab generate --model /tmp/tiny --tokens 5,17,3 -n 8",
      "VT_KIMI_BF16_STREAM=1 vtlab generate --model /tmp/tiny --tokens 5,17,3"}},
    {"engine", S_MODEL, "", NULL, "serve the model over the engine protocol on stdin/stdout (docs/engine-protocol.md)",
     "What an experiment's \"engine\": [\"vtlab\", \"engine\"] runs: the hello, then one "
     "response per request until stdin ends. Knobs come from the environment and the requests.",
     {{"--model", "DIR", "$VTP_MODEL", NULL, "the model directory (required when VTP_MODEL is not set)"}},
     {"stdin ended and every request was answered", "serving failed",
      X_BAD " (no model, a bad model, knob or backend: nothing served)"},
     {"vtlab engine --model /tmp/tiny < /dev/null", "VTP_MODEL=/tmp/tiny VT_KIMI_BF16_STREAM=1 vtlab engine < /dev/null"}},
    {"engine-check", S_MODEL, "", "[--model DIR] [--timeout S] [--prefix-tol X] [--allow-noop KNOB]... "
     "[--env NAME=VALUE]... [--] CMD [ARGS...]",
     "conformance checks of an engine command; exit 1 on a failure",
     "Starts CMD as an engine and checks it against docs/engine-protocol.md: the hello, bad requests, determinism, "
     "batching, prefixes, every declared knob and fault, its audit mode. One line per check and a summary.",
     {{"--model", "DIR", "$VTP_MODEL", NULL, "VTP_MODEL for the engine"},
      {"--timeout", "S", "60", NULL, "seconds to wait for each response"},
      {"--prefix-tol", "X", "0.001", NULL, "the prefix check's tolerance, relative to max |logit|"},
      {"--allow-noop", "KNOB", "none", NULL, "a numeric knob allowed to change nothing on this model (repeatable)"},
      {"--env", "NAME=VALUE", "none", NULL, "set for every start of the engine, under the knobs a check sets "
       "(repeatable)"}},
     {"every check passed", "a check failed (each named, with what was seen)",
      X_BAD " (also an engine that cannot be started)"},
     {"vtlab engine-check --model /tmp/tiny vtlab engine", "vtlab engine-check --timeout 5 tests/engines/good.py"}},
    {"knobs", S_MODEL, "", NULL, "the knob registry (VT_* variables)", NULL,
     {{"--markdown", NULL, "off", NULL, "the reference in markdown (docs/knobs.md, `make knobs-doc`)"}},
     {"listed", NULL, X_BAD},
     {"vtlab knobs", "vtlab knobs --markdown > /tmp/knobs.md"}},
    {"faults", S_MODEL, "", NULL, "the replayable defects (VT_FAULT)", NULL, {{0}},
     {"listed", NULL, X_BAD},
     {"vtlab faults", "vtlab faults | grep -A1 moe_scatter_row_bytes_from_stream"}},
    {"version", S_MODEL, "", NULL, "the build's code version", NULL, {{0}},
     {"printed", NULL, X_BAD},
     {"vtlab version", "vtlab version | cut -d'|' -f1"}},
    {"help", S_MODEL, "[CMD]", NULL, "this list; with CMD, the command's options, defaults, exit codes and examples",
     "`vtlab help CMD` prints what `vtlab CMD --help` (or -h) prints.",
     {{"--markdown", NULL, "off", NULL, "every command's help in markdown (docs/cli.md)"}},
     {"printed", NULL, X_BAD " (an unknown command, with the one it may be a misspelling of)"},
     {"vtlab help run", "vtlab help --markdown > /tmp/cli.md"}},
    /* ------------------------------------------------------------ a project */
    {"init", S_PROJECT, "[DIR]", NULL,
     "scaffold experiments/, specs/, .gitignore and nightly CI (GitHub Actions, GitLab CI) in DIR (default .); "
     "never overwrites",
     "experiments/example.json runs at once (its engine is `vtlab engine`: put yours in its place). When a file it "
     "would write exists, it writes nothing and says which.",
     {{0}},
     {"written (what to run next printed)", "a file could not be written", X_BAD " (also: a file it would write exists)"},
     {"vtlab init", "vtlab init /tmp/my-project"}},
    /* ------------------------------------------------------------ lab commands */
    {"run", S_LAB, "EXPERIMENT.json", NULL,
     "run the arms (reference first); finished runs are skipped; --limit N: the first N sequences, as PARTIAL runs; "
     "--shard I/N: a slice of the sequences into a shard database",
     "Each run records logits, runtime dtype assertions and the comparison with the reference (top-1 agreement, "
     "KL, the decision rule's verdict). Paths inside the experiment are relative to its file. Ctrl-C records the "
     "run KILLED.",
     {O_DB,
      {"--arm", "NAME", "every arm", NULL, "only this arm (and the reference it is compared with)"},
      O_FORCE,
      {"--shard", "I/N", "the whole dataset", NULL, "sequences [I*n/N, (I+1)*n/N) of the arm and its reference, "
       "into a shard database (docs/slurm.md; `vtlab merge` joins them)"},
      {"--limit", "N", "every sequence", NULL, "the first N sequences, as PARTIAL runs that never count as an arm's "
       "finished run (not with --shard)"},
      O_CACHE},
     {"every run finished, and every arm's assertions came out as it expects",
      "a run failed or was killed, or an arm's assertions did not come out as it expects", X_BAD " (nothing run)"},
     {"vtlab run experiments/bf16-stream.json --arm bf16-stream --db /tmp/r.db",
      "vtlab run experiments/bf16-stream.json --limit 8 --db /tmp/smoke.db"}},
    {"sweep", S_LAB, "[DIR]", NULL, "run every DIR/*.json (default experiments/)",
     "Every file is parsed first: a malformed one stops the sweep before anything runs.",
     {O_DB, O_FORCE, O_CACHE},
     {"every run finished as its arm expects", "a run failed or was killed, or assertions came out unexpected",
      X_BAD " (nothing run)"},
     {"vtlab sweep", "vtlab sweep experiments --db /tmp/sweep.db"}},
    {"rerun", S_LAB, "RUN...", "RUN... [--db PATH] [--engine CMD] [--force] [--cache DIR]\n"
     "--experiment ID [--db PATH] [--engine CMD] [--force] [--cache DIR]",
     "run a recorded run again from the spec stored with it and compare: identical, or the deltas, McNemar and "
     "what changed",
     "The model is found by its hash (--force: the spec's model when not). The rerun is linked to its run "
     "(rerun_of).",
     {O_DB,
      {"--experiment", "ID", "none (RUN ids)", NULL, "every arm's latest run of this experiment, instead of RUN ids"},
      {"--engine", "CMD", "as recorded", NULL, "every arm's engine for the rerun: builtin, a JSON argv array or a "
       "command line"},
      {"--force", NULL, "off", NULL, "rerun on the spec's model even when its hash is not the run's"},
      O_CACHE},
     {"every rerun finished (the comparison says whether identical)", "a rerun did not finish",
      X_BAD " (no such run, a RUNNING run or a shard, no stored spec, a model not found; nothing run)"},
     {"vtlab rerun 2 --db /tmp/r.db", "vtlab rerun --experiment bf16-stream --db /tmp/r.db --engine builtin"}},
    {"runs", S_LAB, "", NULL, "list runs: status, assertions, top-1 k/n, verdict, and a tagged run's tags on a line below it; the filters all apply", NULL,
     {O_DB_READ,
      {"--experiment", "ID", "any", NULL, "runs of this experiment"},
      {"--arm", "NAME", "any", NULL, "runs of this arm"},
      {"--status", "S", "any", "RUNNING|FINISHED|FAILED|KILLED|PARTIAL", "runs with this status"},
      {"--engine", "NAME", "any", NULL, "runs by this engine (its name, or builtin)"},
      {"--knob", "NAME=VALUE", "any", NULL, "runs with this knob value (again for more: every one must hold)"},
      {"--tag", "KEY=VALUE", "any", NULL, "runs with this tag (again for more: every one must hold)"},
      {"--since", "DATE", "any time", NULL, "runs started since a date YYYY-MM-DD or a UTC time YYYY-MM-DDTHH:MM:SSZ"},
      {"--json", NULL, "off", NULL, "JSON, with tags"}},
     {"listed", X_DB_READ, X_BAD " (also: no such database)"},
     {"vtlab runs --db /tmp/r.db --tag owner=bo --tag reviewed=yes",
      "vtlab runs --db /tmp/r.db --arm bf16-stream --status FINISHED --json"}},
    {"show", S_LAB, "RUN", NULL, "everything recorded about one run (--json: as export)", NULL,
     {O_DB_READ, {"--json", NULL, "off", NULL, "the run as `export --format json` writes it"}},
     {"shown", X_DB_READ, X_BAD " (also: no such run or database)"},
     {"vtlab show 2 --db /tmp/r.db", "vtlab show 2 --db /tmp/r.db --json"}},
    {"tag", S_LAB, "RUN KEY=VALUE...", NULL, "tag a run (a later value of a key replaces it)",
     "Tags are shown by show, runs --json and the report; runs --tag KEY=VALUE selects by them.",
     {{"--db", "PATH", "results.db", NULL, "the results database (never created)"}},
     {"tagged", "the database could not be written", X_BAD " (also: no such run or database)"},
     {"vtlab tag 2 reviewed=yes --db /tmp/r.db", "vtlab tag 2 ticket=LAB-12 owner=ana --db /tmp/r.db"}},
    {"note", S_LAB, "RUN TEXT", NULL, "add a note to a run", NULL,
     {{"--db", "PATH", "results.db", NULL, "the results database (never created)"}},
     {"noted", "the database could not be written", X_BAD " (also: no such run or database)"},
     {"vtlab note 2 'a smoke test: 8 sequences' --db /tmp/r.db", "vtlab note 1 reference --db /tmp/r.db"}},
    {"compare", S_LAB, "RUN_A RUN_B", NULL, "side by side, B-A and B/A, agreement, McNemar's exact test", NULL,
     {O_DB_READ, O_JSON},
     {"compared", X_DB_READ, X_BAD " (also: no such run or database)"},
     {"vtlab compare 1 2 --db /tmp/r.db", "vtlab compare 1 2 --db /tmp/r.db --json"}},
    {"export", S_LAB, "RUN", NULL,
     "the run's records (json), per-position top-k (csv), or one record per position against the reference "
     "(positions: JSONL)",
     "positions: scored, the reference's top-1 and its p, the run's top-1, agreement, the run's p of the "
     "reference's top-1, delta p, KL (exact from stored full logits, else estimated from the top-k).",
     {{"--format", "FORMAT", "json", "json|csv|positions|positions-csv", "what to write"},
      {"--out", "FILE", "stdout", NULL, "the file to write (whole or not at all)"},
      O_DB_READ},
     {"exported", X_DB_READ " or the file written", X_BAD " (also: no such run or database)"},
     {"vtlab export 2 --db /tmp/r.db --format positions", "vtlab export 2 --db /tmp/r.db --format csv --out /tmp/run2.csv"}},
    {"record-bench", S_LAB, "REPORT.json", NULL, "a benchmark report (make bench, bench_cuda) as runs, one per phase",
     "The report is validated whole first: a bad one records nothing.",
     {O_DB},
     {"recorded (one line per run)", "the database could not be written", X_BAD " (the report's field named)"},
     {"vtlab record-bench build/contention.bench.json", "vtlab record-bench /tmp/gpu/bench.json --db /tmp/r.db"}},
    /* ------------------------------------------------------------ cluster sweeps */
    {"submit", S_CLUSTER, "EXPERIMENT.json...", NULL, "a Slurm job array: reference shards first, the arms afterok",
     "One shard database per task under --results; `vtlab status` follows them, `vtlab merge` joins them.",
     {{"--shards-per-arm", "N", "1", NULL, "shards of each arm's sequences, 1..100000"},
      {"--results", "DIR", "shards", NULL, "the tasks, scripts and shard databases"},
      {"--partition", "P", "the experiment's \"slurm\", else sbatch's", NULL, "sbatch --partition"},
      {"--time", "T", "the experiment's \"slurm\", else sbatch's", NULL, "sbatch --time"},
      {"--gpus-per-task", "G", "the experiment's \"slurm\", else none", NULL, "sbatch --gpus-per-task"},
      {"--account", "A", "the experiment's \"slurm\", else sbatch's", NULL, "sbatch --account"},
      {"--slurm", "OPTS", "none", NULL, "more sbatch options, blank-separated (quote them; their = is kept)"},
      {"--merge-into", "DB", "no merge job", NULL, "a job after the arrays that merges every shard into DB"},
      {"--vtlab", "PATH", "this vtlab", NULL, "the binary the tasks run"},
      {"--dry-run", NULL, "off", NULL, "print the scripts and the sbatch commands; write nothing"},
      {"--resume", NULL, "off", NULL, "submit only the tasks with no finished shard that squeue does not list"}},
     {"submitted (or printed: --dry-run)", "sbatch failed, or a file could not be written", X_BAD},
     {"vtlab submit experiments/bf16-stream.json --shards-per-arm 4 --results /tmp/shards --dry-run",
      "vtlab submit experiments/bf16-stream.json --partition gpu --time 01:00:00 --merge-into results.db"}},
    {"merge", S_CLUSTER, "SHARD.db...", NULL, "shard databases into whole runs (one transaction, idempotent)",
     "The shards of an arm must agree on knob hash, model, dataset, code version and shard count; the merged run is "
     "identical to the unsharded one. A run already in the target is not merged again.",
     {{"--into", "RESULTS.db", "required", NULL, "the database the whole runs go to"},
      {"--partial", NULL, "off", NULL, "leave out arms whose shards do not cover every sequence (else an error)"}},
     {"merged", "a database could not be read or written", X_BAD " (shards that disagree, or are incomplete)"},
     {"vtlab merge /tmp/s0.db /tmp/s1.db --into /tmp/r.db", "vtlab merge shards/*/*.db --into results.db --partial"}},
    {"status", S_CLUSTER, "", NULL, "tasks pending/running/done/failed, what to resubmit", NULL,
     {{"--results", "DIR", "shards", NULL, "the directory `vtlab submit` wrote"},
      {"--slurm", NULL, "off", NULL, "ask squeue which tasks are pending or running (else the shard databases only)"}},
     {"every task is done", "a task is not done (what to resubmit printed)", X_BAD},
     {"vtlab status --results /tmp/shards", "vtlab status --slurm"}},
    /* ------------------------------------------------------------ the ledger */
    {"specs", S_LEDGER, "check", NULL, "validate every claim and defect record", NULL,
     {O_SPECS},
     {"every record is valid (each listed)", "a record could not be read",
      X_BAD " (an invalid record, or one its engine contradicts)"},
     {"vtlab specs check", "vtlab specs check --specs build/demo/specs"}},
    {"audit", S_LEDGER, "", NULL, "flag confounded claims and runs (R1-R6); exit 1 if any is open",
     "A run's own probes at a defect's site decide before its code range; each flag says how to replay it.",
     {O_DB, O_SPECS, O_JSON},
     {"no confound open", "a confound is open (each named, with how to replay it)", X_BAD},
     {"vtlab audit", "vtlab audit --db /tmp/r.db --specs specs --json"}},
    {"reopen", S_LEDGER, "CLAIM_ID", NULL, "replay the defect, rerun without it, record a superseding claim",
     "Prints the files it wrote in SPECS/claims/ and, in a git checkout, the `git add` that commits them. "
     "`make run` works on a copy of the ledger, build/demo/specs (with experiments/ beside it, as the claims name "
     "their experiments relative to the ledger's parent), and build/demo/results.db.",
     {O_DB, O_SPECS,
      {"--defect", "ID", "the defect the audit's R1 finds for the claim", NULL, "the defect to replay"},
      O_CACHE},
     {"re-measured; the superseding claim written", "a run failed or a file could not be written",
      X_BAD " (an unknown claim, no defect that applies, a bad ledger or experiment)"},
     {"vtlab reopen bf16-stream-refuted-4of128 --db build/demo/results.db --specs build/demo/specs",
      "vtlab reopen bf16-stream-refuted-4of128"}},
    {"claim", S_LEDGER, "RUN", NULL,
     "record an arm's finished run with a verdict as a new claim, SPECS/claims/ID.json (never overwritten), to be "
     "committed",
     NULL,
     {{"--id", "ID", "required", NULL, "the new claim's id: SPECS/claims/ID.json"},
      O_DB, O_SPECS,
      {"--hypothesis", "TEXT", "the experiment's \"hypothesis\"", NULL, "what the claim says"}},
     {"written", "a file could not be written",
      X_BAD " (an invalid or existing id, a run not FINISHED, a shard, a reference run, no verdict)"},
     {"vtlab claim 2 --id bf16-stream-smoke --db /tmp/r.db --specs build/demo/specs",
      "vtlab claim 2 --id my-claim --hypothesis 'bf16 keeps the top-1 token'"}},
    /* ------------------------------------------------------------ reports and CI */
    {"report", S_CI, "", NULL, "static HTML page + markdown + gnuplot charts (default report/)",
     "Its summary lists the open confounds, one per cause, and names the ledger the latest audit read.",
     {O_DB_READ,
      {"--out", "DIR", "report", NULL, "where index.html, report.md and the charts go"},
      {"--no-plots", NULL, "off", NULL, "no charts (no gnuplot needed)"}},
     {"written", "a chart could not be drawn (the rest is written)", X_BAD " (also: no such database)"},
     {"vtlab report", "vtlab report --db /tmp/r.db --out /tmp/report --no-plots"}},
    {"nightly", S_CI, "[DIR]", NULL,
     "rerun DIR/*.json (default experiments/), audit, compare with the previous nightly; junit.xml, nightly.md, "
     "regressions.atom; exit 1 on a regression or an open confound",
     "Regressions: check (assertions), accuracy (McNemar against the previous night), numerics, performance "
     "(throughput beyond the noise, confirmed by a re-measurement). `vtlab ack` accepts a known one "
     "(docs/nightly.md).",
     {O_DB,
      {"--out", "DIR", "report", NULL, "junit.xml, nightly.md, regressions.atom and the report"},
      O_SPECS, O_ALPHA,
      {"--perf-min-drop", "F", "0.05", NULL, "the smallest throughput drop, a fraction in (0, 1), that can be a "
       "performance regression"},
      {"--no-audit", NULL, "off", NULL, "no audit of the ledger"},
      {"--no-plots", NULL, "off", NULL, "no charts"},
      {"--bisect", NULL, "off (VTLAB_NIGHTLY_BISECT=1: on)", NULL, "bisect each accuracy/numerics regression "
       "between the previous nightly's commit and tonight's"},
      O_CACHE},
     {"PASSED: no regression, no open confound no one acknowledged",
      "REGRESSED or CONFOUNDED (or a run failed): each finding in nightly.md and junit.xml", X_BAD},
     {"vtlab nightly", "vtlab nightly experiments --db /tmp/n.db --out /tmp/nightly --no-plots"}},
    {"bisect", S_CI, "EXPERIMENT.json", NULL,
     "find the commit that made an arm regress: each candidate built in a worktree and run; good/bad/undecided/skip "
     "by McNemar against the ends (or, --exact, a changed logits hash); resumable (docs/bisect.md)",
     "An undecided candidate grows the dataset (--max-scale); a candidate that does not build is skipped.",
     {{"--arm", "NAME", "required", NULL, "the arm that regressed"},
      {"--good", "REV", "required", NULL, "a revision where the arm was good"},
      {"--bad", "REV", "required", NULL, "a later revision where it is bad"},
      {"--repo", "DIR", ".", NULL, "the git repository"},
      {"--build", "CMD", "make -j2 vtlab", NULL, "how a candidate is built (/bin/sh -c in its worktree)"},
      O_DB,
      {"--exact", NULL, "off", NULL, "bad iff the arm's logits hash differs from the good end's"},
      O_ALPHA,
      {"--max-scale", "N", "4", NULL, "how far an undecided candidate's dataset grows (x2, x4, ...), 1..1024"},
      {"--workdir", "DIR", "build/bisect", NULL, "the worktrees and logs"},
      {"--allow-dirty", NULL, "off", NULL, "accept a repository with uncommitted changes"},
      {"--keep-worktree", NULL, "off", NULL, "leave the worktrees when the bisection ends"}},
     {"a result: FOUND, RANGE, UNDECIDED or NONE", "FAILED, or interrupted (the same command resumes)", X_BAD},
     {"vtlab bisect experiments/bf16-stream.json --arm bf16-stream --good HEAD~8 --bad HEAD",
      "vtlab bisect experiments/bf16-stream.json --arm bf16-stream --good v1 --bad HEAD --exact --max-scale 2"}},
    {"localize", S_CI, "EXPERIMENT.json", NULL,
     "where a REFUTED arm's scoped lever breaks: the fewest layers (or sites) it fails on, or the most it can stay "
     "on (a plan); resumable (docs/localize.md)",
     "Each set is a stored run judged by the decision rule; a table of each layer alone; undecided when inside the "
     "noise (the dataset grows).",
     {{"--arm", "NAME", "required", NULL, "the arm whose lever fails"},
      {"--by", "UNIT", "layer", "layer|site", "what a set is made of"},
      {"--goal", "GOAL", "minimal-failing", "minimal-failing|largest-passing", "what to look for"},
      O_DB,
      {"--max-runs", "N", "no cap", NULL, "the candidate runs it may make, over every invocation, 1..1000000"},
      O_ALPHA,
      {"--max-scale", "N", "4", NULL, "how far the dataset grows when a set is undecided, 1..1024"},
      {"--workdir", "DIR", "build/localize", NULL, "the derived experiments"},
      {"--no-sensitivity", NULL, "off", NULL, "no table of each layer alone"},
      O_CACHE},
     {"a result", "the budget was spent (BUDGET), it FAILED, or was interrupted (the same command resumes)", X_BAD},
     {"vtlab localize experiments/bf16-stream.json --arm bf16-stream-scatter-defect --db /tmp/loc.db",
      "vtlab localize experiments/bf16-stream.json --arm bf16-stream-scatter-defect --goal largest-passing --by site "
      "--no-sensitivity"}},
    {"ack", S_CI, "KEY", "KEY --reason TEXT [--db PATH]\n--list [--db PATH]\n--remove KEY [--db PATH]",
     "acknowledge an open confound or a known regression (KEY as in nightly.md): later nightlies list it, not fail "
     "on it",
     "KEY is a confound's key (CLAIM_ID/RULE[/CAUSE], EXPERIMENT/ARM/RULE[/CAUSE]), a regression's "
     "EXPERIMENT/ARM/KIND (KIND: check, accuracy, numerics or performance), or a nightly_findings id.",
     {{"--reason", "TEXT", "required with KEY", NULL, "why it is known and accepted"},
      O_DB,
      {"--list", NULL, "off", NULL, "list the acknowledgements in force"},
      {"--remove", NULL, "off", NULL, "end the acknowledgement of KEY: the next nightly that has it fails on it"}},
     {"acknowledged, listed or removed", "the database could not be read or written",
      X_BAD " (a KEY no nightly found, a kind not one of the four, no --reason, no such database)"},
     {"vtlab ack bf16-stream-refuted-4of128/R1/moe-scatter-row-bytes-from-stream --reason 'reopen pending'",
      "vtlab ack --list --db /tmp/n.db"}},
};

#define N_CMDS ((int)(sizeof CMDS / sizeof CMDS[0]))

int lab_help_count(void) { return N_CMDS; }
const lab_help_cmd *lab_help_at(int i) { return i >= 0 && i < N_CMDS ? &CMDS[i] : NULL; }

const lab_help_cmd *lab_help_find(const char *name) {
    for (int i = 0; name && i < N_CMDS; i++)
        if (!strcmp(CMDS[i].name, name)) return &CMDS[i];
    return NULL;
}

const lab_help_opt *lab_help_option(const lab_help_cmd *c, const char *opt) {
    for (int i = 0; c && opt && i < LAB_HELP_MAX_OPTS && c->opts[i].name; i++)
        if (!strcmp(c->opts[i].name, opt)) return &c->opts[i];
    return NULL;
}

/* ------------------------------------------------------------ text */

/* The length of the word at p: up to a blank, or in a synopsis (syn) up
 * to a blank outside brackets, so that an option ("[--gpus-per-task G]") is
 * never split. */
static size_t word_len(const char *p, int syn) {
    size_t n = 0;
    for (int depth = 0; p[n] && (p[n] != ' ' || depth > 0); n++) depth += syn * ((p[n] == '[') - (p[n] == ']'));
    return n;
}

/* Writes text from column *col, wrapped at width with continuation lines
 * indented to indent; *col ends where the text did. syn: text is a synopsis. */
static void wrap_text(FILE *out, const char *text, int *col, int indent, int width, int syn) {
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        size_t n = word_len(p, syn);
        if (!n) break;
        int at_start = *col <= indent;
        if (!at_start && *col + 1 + (int)n > width) {
            fprintf(out, "\n%*s", indent, "");
            *col = indent;
            at_start = 1;
        }
        if (*col < indent) { fprintf(out, "%*s", indent - *col, ""); *col = indent; }
        fprintf(out, "%s%.*s", at_start ? "" : " ", (int)n, p);
        *col += (int)n + !at_start;
        p += n;
    }
}

static void wrap(FILE *out, const char *text, int *col, int indent, int width) {
    wrap_text(out, text, col, indent, width, 0);
}

/* One option as the synopsis shows it: "--db PATH", "--format json|csv",
 * bracketed unless required. */
static void opt_synopsis(const lab_help_opt *o, char *buf, size_t n) {
    int req = !strcmp(o->def, "required");
    snprintf(buf, n, "%s%s%s%s%s", req ? "" : "[", o->name, o->arg ? " " : "",
             o->arg ? (o->values ? o->values : o->arg) : "", req ? "" : "]");
}

/* The synopsis's form i (0..): "ARGS [--opt ARG]..." after "vtlab NAME ";
 * 0 when there is no such form. */
static int synopsis_form(const lab_help_cmd *c, int i, char *buf, size_t n) {
    if (c->synopsis) {
        const char *p = c->synopsis;
        for (int k = 0; k < i && p; k++) p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL;
        if (!p) return 0;
        snprintf(buf, n, "%.*s", (int)strcspn(p, "\n"), p);
        return 1;
    }
    if (i > 0) return 0;
    size_t len = (size_t)snprintf(buf, n, "%s", c->args);
    for (int k = 0; k < LAB_HELP_MAX_OPTS && c->opts[k].name && len < n; k++) {
        char o[160];
        opt_synopsis(&c->opts[k], o, sizeof o);
        len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? " " : "", o);
    }
    return 1;
}

/* Every form of c's synopsis, joined as the usage shows them ("FORM1, NAME FORM2"). */
static void synopsis_all(const lab_help_cmd *c, char *buf, size_t n) {
    char form[1024];
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; len < n && synopsis_form(c, i, form, sizeof form); i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s%s%s", i ? ", " : "", i ? c->name : "", i && form[0] ? " " : "",
                                form);
}

/* The usage's entry of c: "  NAME     SYNOPSIS" (a long one continued at
 * column 11), then what it does at column 39. scripts/usage2man.sh reads
 * this layout: the description is on the entry's line only when the
 * synopsis ends before column 38; lines indented 30 or more continue it. */
static void usage_entry(FILE *out, const lab_help_cmd *c) {
    char syn[2048];
    synopsis_all(c, syn, sizeof syn);
    int col = fprintf(out, "  %-8s", c->name);
    int one_line = col + 1 + (int)strlen(syn) <= 37;   /* else the description has lines of its own */
    wrap_text(out, syn, &col, 11, 110, 1);
    if (!one_line) {
        fputc('\n', out);
        col = 0;
    }
    wrap(out, c->summary, &col, 39, 112);
    fputc('\n', out);
}

void lab_help_usage(FILE *out) {
    fprintf(out, "usage: vtlab COMMAND [options]   (vtlab help COMMAND: its options, defaults, exit codes, examples)\n");
    int section = -1;
    for (int i = 0; i < N_CMDS; i++) {
        if (CMDS[i].section != section) fprintf(out, "%s:\n", SECTIONS[section = CMDS[i].section]);
        usage_entry(out, &CMDS[i]);
    }
}

/* ------------------------------------------------------------ one command's help */

static void opt_line(FILE *out, const lab_help_opt *o) {
    char head[160];
    snprintf(head, sizeof head, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? (o->values ? o->values : o->arg) : "");
    int col = fprintf(out, "  %-24s", head);
    if (col > 26) {
        fputc('\n', out);
        col = 0;
    }
    char tail[320];
    if (!strcmp(o->def, "required")) snprintf(tail, sizeof tail, "(required)");
    else snprintf(tail, sizeof tail, "(default: %s)", o->def);
    wrap(out, o->doc, &col, 27, 110);
    wrap(out, tail, &col, 27, 110);
    fputc('\n', out);
}

/* The summary as a sentence: its first letter upper case, a full stop. */
static void sentence(char *buf, size_t n, const char *s) {
    snprintf(buf, n, "%s.", s);
    if (buf[0] >= 'a' && buf[0] <= 'z') buf[0] = (char)(buf[0] - 'a' + 'A');
}

int lab_help_command(FILE *out, const char *name) {
    const lab_help_cmd *c = lab_help_find(name);
    if (!c) return -1;
    char form[1024], text[1024];
    fprintf(out, "usage: vtlab %s\n", c->name);
    for (int i = 0; synopsis_form(c, i, form, sizeof form); i++) {
        int col = fprintf(out, "  vtlab %s", c->name);
        wrap_text(out, form, &col, col + 1, 110, 1);
        fputc('\n', out);
    }
    int col = 0;
    sentence(text, sizeof text, c->summary);
    fputc('\n', out);
    wrap(out, text, &col, 2, 110);
    if (c->about) wrap(out, c->about, &col, 2, 110);
    fputc('\n', out);
    if (c->opts[0].name) fprintf(out, "\noptions (--opt VALUE or --opt=VALUE):\n");
    for (int i = 0; i < LAB_HELP_MAX_OPTS && c->opts[i].name; i++) opt_line(out, &c->opts[i]);
    fprintf(out, "\nexit status:\n");
    for (int i = 0; i < 3; i++) {
        col = fprintf(out, "  %d  ", i);
        wrap(out, c->exits[i] ? c->exits[i] : "(not used)", &col, 5, 110);
        fputc('\n', out);
    }
    fprintf(out, "\nexamples:\n");
    for (int i = 0; i < 2; i++) fprintf(out, "  %s\n", c->examples[i]);
    return 0;
}

/* ------------------------------------------------------------ docs/cli.md */

/* s with each '|' and '*' escaped, for a markdown table cell. */
static void md_cell(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '|' || *s == '*') fputc('\\', out);
        fputc(*s, out);
    }
}

static void md_command(FILE *out, const lab_help_cmd *c) {
    char form[1024], text[1024];
    fprintf(out, "### `vtlab %s`\n\n```\n", c->name);
    for (int i = 0; synopsis_form(c, i, form, sizeof form); i++) fprintf(out, "vtlab %s%s%s\n", c->name, *form ? " " : "", form);
    sentence(text, sizeof text, c->summary);
    fprintf(out, "```\n\n%s%s%s\n\n", text, c->about ? " " : "", c->about ? c->about : "");
    if (c->opts[0].name) fprintf(out, "| option | default | what it does |\n|---|---|---|\n");
    for (int i = 0; i < LAB_HELP_MAX_OPTS && c->opts[i].name; i++) {
        const lab_help_opt *o = &c->opts[i];
        fprintf(out, "| `%s%s", o->name, o->arg ? " " : "");
        md_cell(out, o->arg ? (o->values ? o->values : o->arg) : "");
        fprintf(out, "` | ");
        md_cell(out, o->def);
        fprintf(out, " | ");
        md_cell(out, o->doc);
        fprintf(out, " |\n");
    }
    fprintf(out, "%sExit status: `0` %s; `1` %s; `2` %s.\n\n```sh\n%s\n%s\n```\n\n", c->opts[0].name ? "\n" : "",
            c->exits[0], c->exits[1] ? c->exits[1] : "(not used)", c->exits[2], c->examples[0], c->examples[1]);
}

void lab_help_markdown(FILE *out) {
    fprintf(out, "# Command reference\n\n"
                 "Generated from the command table (`harness/help.c`) by `vtlab help --markdown > docs/cli.md`; do not "
                 "edit by hand.\n`vtlab CMD --help` and `vtlab help CMD` print the same; `vtlab --help` lists every "
                 "command. Every option takes\n`--opt VALUE` or `--opt=VALUE`. Exit status: 0 success, 1 a check "
                 "failed, 2 bad input or usage (a message on\nstderr names the argument, file or field). The examples "
                 "run from the repository root.\n");
    int section = -1;
    for (int i = 0; i < N_CMDS; i++) {
        if (CMDS[i].section != section) fprintf(out, "\n## %s\n\n", SECTIONS[section = CMDS[i].section]);
        md_command(out, &CMDS[i]);
    }
}

/* ------------------------------------------------------------ errors */

int lab_help_unknown_command(const char *cmd) {
    vt_suggester sg;
    vt_suggest_init(&sg, cmd);
    for (int i = 0; i < N_CMDS; i++) vt_suggest_offer(&sg, CMDS[i].name);
    fprintf(stderr, "vtlab: unknown command \"%s\"", cmd);
    if (sg.best) fprintf(stderr, " (did you mean %s?)", sg.best);
    fprintf(stderr, "; `vtlab help` lists the commands\n");
    return 2;
}

int lab_help_bad_argument(const char *cmd, const char *arg) {
    if (arg[0] != '-' || !arg[1]) {
        fprintf(stderr, "vtlab %s: unexpected argument %s (see `vtlab %s --help`)\n", cmd, arg, cmd);
        return 2;
    }
    const lab_help_cmd *c = lab_help_find(cmd);
    const lab_help_opt *known = lab_help_option(c, arg);
    if (known && known->arg) {   /* a parser that takes it got no value for it */
        fprintf(stderr, "vtlab %s: %s needs a value (%s)\n", cmd, arg, known->arg);
        return 2;
    }
    /* options are compared without their dashes: "--" would begin every one */
    vt_suggester sg;
    vt_suggest_init(&sg, arg + strspn(arg, "-"));
    for (int i = 0; c && i < LAB_HELP_MAX_OPTS && c->opts[i].name; i++)
        vt_suggest_offer(&sg, c->opts[i].name + strspn(c->opts[i].name, "-"));
    fprintf(stderr, "vtlab %s: unknown option %s", cmd, arg);
    for (int i = 0; sg.best && i < LAB_HELP_MAX_OPTS && c->opts[i].name; i++)
        if (sg.best == c->opts[i].name + strspn(c->opts[i].name, "-")) fprintf(stderr, " (did you mean %s?)", c->opts[i].name);
    fprintf(stderr, "; `vtlab %s --help` lists its options\n", cmd);
    return 2;
}

int lab_help_value_error(const char *cmd, const char *what, const char *value, const char *values) {
    char meant[128];
    fprintf(stderr, "vtlab %s: %s: expected ", cmd, what);
    size_t n = strlen(values);
    const char *last = strrchr(values, '|');
    if (!last) fprintf(stderr, "%s", values);
    else fprintf(stderr, "one of ");
    for (const char *p = values; last && p < values + n;) {
        size_t k = strcspn(p, "|");
        fprintf(stderr, "%s%.*s", p == values ? "" : p == last + 1 ? " or " : ", ", (int)k, p);
        p += k + (p[k] == '|');
    }
    fprintf(stderr, ", got \"%s\"", value);
    if (vt_suggest_list(value, values, meant, sizeof meant)) fprintf(stderr, " (did you mean %s?)", meant);
    fputc('\n', stderr);
    return 2;
}

int lab_help_check_value(const char *cmd, const char *opt, const char *value) {
    const lab_help_opt *o = lab_help_option(lab_help_find(cmd), opt);
    if (!o || !o->values) return 0;
    size_t n = strlen(value);
    for (const char *p = o->values; *p;) {
        size_t k = strcspn(p, "|");
        if (k == n && !strncmp(p, value, n)) return 0;
        p += k + (p[k] == '|');
    }
    return lab_help_value_error(cmd, opt, value, o->values);
}
