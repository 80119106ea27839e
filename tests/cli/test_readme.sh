#!/usr/bin/env bash
# The README's worked example must be what the code does now: its top-1
# numbers for the shipped bf16-stream experiment are compared with a fresh run
# (the same experiment file, the same embedded default model). They went stale
# once (48/128 in the README while the code gave 49/128).
set -u
VTLAB=${1:-./vtlab}
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err

expect_exit "run experiments/bf16-stream.json" 0 "$VTLAB" run experiments/bf16-stream.json --db "$W/r.db"
/usr/bin/python3 - README.md "$W/r.db" >"$W/py" 2>&1 <<'PYEOF'
import re, sqlite3, sys
readme = open(sys.argv[1]).read()
db = sqlite3.connect(sys.argv[2])
# "run N  bf16-stream/ARM ... top1 K/N [LO, HI]"
claims = re.findall(r"bf16-stream/([a-z0-9-]+)\s.*?top1 (\d+)/(\d+) \[([0-9.]+), ([0-9.]+)\]", readme)
assert len(claims) >= 3, f"README worked example: found {len(claims)} bf16-stream lines, expected 3"
for arm, k, n, lo, hi in claims:
    row = db.execute("SELECT c.top1_k, c.top1_n, c.top1_lo, c.top1_hi FROM runs r JOIN comparisons c ON c.run_id = r.id"
                     " WHERE r.experiment = 'bf16-stream' AND r.arm = ?", (arm,)).fetchone()
    assert row, f"README names arm {arm}, which the run does not have"
    got = (row[0], row[1], round(row[2], 3), round(row[3], 3))
    want = (int(k), int(n), float(lo), float(hi))
    assert got == want, f"README says {arm} top1 {k}/{n} [{lo}, {hi}], the run gives {got[0]}/{got[1]} [{got[2]}, {got[3]}]"
    print("ok", arm, k, n)
# the replay sentence: "the arm scores K/128"
m = re.search(r"the arm scores (\d+)/(\d+)", readme)
d = db.execute("SELECT c.top1_k FROM runs r JOIN comparisons c ON c.run_id = r.id WHERE r.arm = 'bf16-stream-scatter-defect'").fetchone()
assert m and int(m.group(1)) == d[0], f"README's replay says {m and m.group(1)}, the defect arm gives {d[0]}"
PYEOF
if [ $? -eq 0 ]; then ok "README's worked-example numbers match a fresh run"; else not_ok "README numbers" "$(tail -2 "$W/py")"; fi
finish
