#!/usr/bin/env bash
# test_batch.sh — the builtin engine packs an experiment's sequences into one
# forward up to VTLAB_BATCH_ROWS rows (issue 32; docs/architecture.md,
# "Sequences packed into one forward"): a run records the same numbers as
# with one forward per sequence (VTLAB_BATCH_ROWS=0). The bf16-stream design
# (4 arms, the replayed scatter defect among them, audit probes, layer
# divergence) on a dataset of mixed lengths 1..70, scored at every position:
# every run's logits hash and per-sequence hashes, top-1 k/n, assertion
# outcomes, probe records (calls and rows included) and per-layer divergence
# are identical with packs of up to 256 (the default) and 100 rows, on 1 and 2
# threads. A budget that is not a token count is bad input.
#
# Usage (from the repository root): bash tests/cli/test_batch.sh ./build/vtlab
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed".
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
W=$(mktemp -d /tmp/vtlab-batch.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset VTLAB_BATCH_ROWS
q() { sqlite3 "$1" "$2"; }

python3 - "$W" <<'PY'
import json, random, sys
w = sys.argv[1]
e = json.load(open("experiments/bf16-stream.json"))
r = random.Random(32)
lens = [1, 2, 7, 31, 32, 33, 67] + [r.randint(1, 70) for _ in range(23)]
e["dataset"] = {"inline": [[r.randint(3, 1023) for _ in range(n)] for n in lens]}
e["score"] = "all"
e["divergence"]["sequences"] = 6
json.dump(e, open(w + "/exp.json", "w"))
PY

# run NAME [ENV...]: the experiment into $W/NAME.db
run() { local n=$1; shift; env "$@" "$VTLAB" run "$W/exp.json" --db "$W/$n.db" >"$W/$n.out" 2>&1; }
run off VTLAB_BATCH_ROWS=0 VT_THREADS=1
run packed VT_THREADS=1
run packed100 VTLAB_BATCH_ROWS=100 VT_THREADS=1
run packed2 VT_THREADS=2

runs() { q "$1" "select r.arm, r.logits_sha256, c.top1_k, c.top1_n, r.assertions_ok from runs r left join comparisons c on c.run_id = r.id order by r.arm"; }
seqs() { q "$1" "select r.arm, s.seq, s.logits_sha256, s.n_pos from run_sequences s join runs r on r.id = s.run_id order by r.arm, s.seq"; }
probes() { q "$1" "select r.arm, p.idx, p.site, p.layer, p.dtype, p.src_dtype, p.calls, p.rows, p.bytes_per_row, p.src_row_bytes, p.dst_row_bytes, p.converting, p.violations, p.rows_unwritten, p.detail from probes p join runs r on r.id = p.run_id order by r.arm, p.idx"; }
div() { q "$1" "select r.arm, d.layer, d.site, d.rel_l2 from layer_divergence d join runs r on r.id = d.run_id order by r.arm, d.layer, d.site"; }

if [ "$(q "$W/off.db" "select count(*) from runs where status = 'FINISHED'")" = 4 ] && [ -n "$(runs "$W/off.db")" ]; then
    ok "one forward per sequence (VTLAB_BATCH_ROWS=0): 4 runs"
else
    not_ok "baseline" "$(tail -3 "$W/off.out")"
fi
for n in packed packed100 packed2; do
    if [ "$(runs "$W/off.db")" = "$(runs "$W/$n.db")" ] && [ "$(seqs "$W/off.db")" = "$(seqs "$W/$n.db")" ]; then
        ok "$n: the same logits hashes (run and per sequence), top-1 k/n and assertion outcomes on all 4 arms"
    else
        not_ok "$n: logits" "$(diff <(runs "$W/off.db") <(runs "$W/$n.db") | head -4)"
    fi
    if [ -n "$(probes "$W/off.db")" ] && [ "$(probes "$W/off.db")" = "$(probes "$W/$n.db")" ]; then
        ok "$n: identical probe records, calls and rows included ($(probes "$W/$n.db" | wc -l) records)"
    else
        not_ok "$n: probe records" "$(diff <(probes "$W/off.db") <(probes "$W/$n.db") | head -4)"
    fi
    if [ -n "$(div "$W/off.db")" ] && [ "$(div "$W/off.db")" = "$(div "$W/$n.db")" ]; then
        ok "$n: identical per-layer divergence (the captured residuals of 6 sequences)"
    else
        not_ok "$n: layer divergence" "$(diff <(div "$W/off.db") <(div "$W/$n.db") | head -4)"
    fi
done
if [ "$(q "$W/packed.db" "select count(*) from probes p join runs r on r.id = p.run_id where r.arm = 'bf16-stream-scatter-defect' and p.site = 'moe.scatter' and p.violations > 0")" -gt 0 ]; then
    ok "packed: the replayed defect still fails its moe.scatter invariant"
else
    not_ok "replay" "no violation recorded at moe.scatter"
fi

expect_exit "VTLAB_BATCH_ROWS=12k is bad input (exit 2)" 2 env VTLAB_BATCH_ROWS=12k "$VTLAB" run "$W/exp.json" --db "$W/bad.db"
stderr_has "... naming the variable" "VTLAB_BATCH_ROWS=12k"
if [ ! -e "$W/bad.db" ]; then ok "... and nothing written"; else not_ok "bad budget" "a database was written"; fi
finish
