#!/usr/bin/env bash
# test_pinned_results.sh — the numbers of every shipped experiment, pinned.
#
# Runs each experiments/*.json with `vtlab run` into a fresh results.db and
# compares, for every run, one line keyed by (experiment, arm, repeat) with
# tests/cli/golden/pinned_results.txt:
#
#   EXPERIMENT ARM REPEAT status assertions_ok logits_sha256 top1_k/top1_n
#   verdict kl_mean kl_p99 kl_max max_abs_dlogit first_div layer_div_sha
#   nll_mean~ rms_dp~
#
# Exact values: the status, the logits hash, top-1 k/n, the verdict, and the
# floats computed in a fixed order (KL mean/p99/max, max |dlogit|, the first
# divergent layer and a sha256 of every per-layer relative L2, printed with
# repr). Values marked ~ (nll_mean, rms_dp) are sums that the runner has
# reduced across OpenMP threads, whose order is not fixed: they are compared
# to 10 significant digits, enough to catch any change of what is summed.
# tokens_per_s and every time are left out.
#
# The golden file was generated from the code before the runner was split
# (issue 10). Regenerate it only when a change of the numbers is intended:
#     bash tests/cli/test_pinned_results.sh ./vtlab --regen
# and explain in the commit message why every changed line changed.
#
# Usage (from the repository root): bash tests/cli/test_pinned_results.sh ./vtlab [--regen]
# Prints "ok - ..." / "not ok - ..." per case and "N passed, M failed".
# Time: the three shipped experiments are ~90 s of CPU (8 runs); 3 min wall on
# the shared 2-core machine where this was written (load 7-9), less when idle.
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
REGEN=0; [ "${2:-}" = "--regen" ] && REGEN=1
. tests/cli/lib.sh
PY=/usr/bin/python3
GOLDEN=tests/cli/golden/pinned_results.txt
W=$(mktemp -d /tmp/vtlab-pinned.XXXXXX)
trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err

# The runs see no VT_* setting of the caller's environment.
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
for f in experiments/*.json; do
    expect_exit "run $f" 0 "$VTLAB" run "$f" --db "$W/results.db"
done

# One line per run, sorted: see the header for the fields.
$PY - "$W/results.db" > "$W/pinned.txt" <<'PY'
import hashlib, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
def r(v): return "NULL" if v is None else repr(v)
def approx(v): return "NULL" if v is None else "%.10g" % v
lines = []
for (rid, ex, arm, rep, status, ok, sha) in db.execute(
        "SELECT id, experiment, arm, repeat_idx, status, assertions_ok, logits_sha256 FROM runs"):
    c = db.execute("SELECT top1_k, top1_n, kl_mean, kl_p99, kl_max, max_abs_dlogit, rms_dp,"
                   " first_div_layer, first_div_site FROM comparisons WHERE run_id = ?", (rid,)).fetchone()
    v = db.execute("SELECT verdict FROM verdicts WHERE run_id = ?", (rid,)).fetchone()
    div = db.execute("SELECT layer, site, rel_l2 FROM layer_divergence WHERE run_id = ?"
                     " ORDER BY layer, site", (rid,)).fetchall()
    nll = db.execute("SELECT value FROM metrics WHERE run_id = ? AND name = 'nll_mean'", (rid,)).fetchone()
    f = [ex, arm, str(rep), status, str(ok), sha or "NULL"]
    if c:
        f += ["%d/%d" % (c[0], c[1])]
        f += [v[0] if v else "no-verdict"]
        f += [r(x) for x in c[2:6]] + ["%s/%s" % (c[7], c[8])]
    else:
        f += ["-/-", v[0] if v else "no-verdict"] + ["-"] * 5
    dtext = "".join("%d %d %r\n" % d for d in div)
    f += ["div:" + (hashlib.sha256(dtext.encode()).hexdigest()[:16] if div else "-")]
    f += ["nll~" + approx(nll[0] if nll else None), "rms_dp~" + (approx(c[6]) if c else "-")]
    lines.append(" ".join(f))
for line in sorted(lines):
    print(line)
PY
[ -s "$W/pinned.txt" ] && ok "results extracted ($(wc -l < "$W/pinned.txt") runs)" || not_ok "results extracted" "empty"

if [ "$REGEN" = 1 ]; then
    mkdir -p "$(dirname "$GOLDEN")"
    cp "$W/pinned.txt" "$GOLDEN"
    echo "# regenerated $GOLDEN: explain every changed line in the commit message"
fi
if diff -u "$GOLDEN" "$W/pinned.txt" > "$W/diff"; then
    ok "every run's numbers equal the golden file"
else
    not_ok "every run's numbers equal the golden file" "$(head -c 2000 "$W/diff")"
fi

finish
