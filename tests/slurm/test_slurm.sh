#!/usr/bin/env bash
# test_slurm.sh — the sweep as a real Slurm job array (docs/slurm.md).
#
# Starts a single-node Slurm (Debian's slurm-wlm 22.05 and munge) with its
# own configuration, state, sockets and logs in a temporary directory:
# munged, then `slurmctld -D` and `slurmd -D` in the background (no systemd,
# no cgroups: proctrack/linuxproc, task/none, no accounting). Then `vtlab
# submit` of a 12-sequence cut of experiments/bf16-stream.json (4 arms x 2
# sequence shards = 8 array tasks: the 2 reference shards, then 6 arm shards
# afterok, then the merge job afterok on both), polls squeue every 0.2 s,
# and checks: the merged results.db equals a local `vtlab run` field by
# field (k/n, intervals, verdicts, KL, divergence, logits hashes, top-k,
# pair tests: tests/slurm/same_results.py); every merged shard names its
# Slurm job and array task; `vtlab status --slurm` says complete; a deleted
# shard database is found missing and `vtlab submit --resume` reruns only it.
# It stops the daemons it started, by pid.
#
# When Slurm or munge is not installed or the daemons do not come up, it
# prints "skip - slurm: REASON" and "slurm: 0 passed, 0 failed, 1 skipped":
# skipped, never passed. Usage (repository root): bash tests/slurm/test_slurm.sh ./vtlab
set -u
VTLAB=${1:-./vtlab}
case "$VTLAB" in /*) ;; *) VTLAB="$PWD/$VTLAB" ;; esac
. tests/cli/lib.sh
PY=/usr/bin/python3
T=$(mktemp -d /tmp/vtlab-slurm.XXXXXX)
OUT_FILE=$T/out; ERR=$T/err
PIDS=()
T0=$(date +%s.%N)
stop_daemons() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  PIDS=()
}
cleanup() { stop_daemons; [ -n "${KEEP:-}" ] || rm -rf "$T"; }
trap cleanup EXIT
skip() {
  echo "skip - slurm: $1"
  [ -f "$T/slurmctld.log" ] && tail -5 "$T/slurmctld.log" | sed 's/^/# ctld: /'
  [ -f "$T/slurmd.log" ] && tail -5 "$T/slurmd.log" | sed 's/^/# slurmd: /'
  echo "slurm: 0 passed, 0 failed, 1 skipped"
  exit 0
}
# the daemons live in /usr/sbin, which a minimal PATH (env -i, some CI
# runners) leaves out: without this the test skipped on a machine that has them
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/sbin:/sbin"; export PATH ;; esac
for c in munged slurmctld slurmd sbatch squeue sinfo; do
  command -v $c >/dev/null 2>&1 || skip "$c not installed (make deps-slurm installs slurm-wlm and munge)"
done
[ "$(id -u)" = 0 ] || skip "needs root (slurmd runs jobs as any user, munged as root)"
for v in $(env | sed -n 's/^\(VT_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

# ---- munge
dd if=/dev/urandom of="$T/munge.key" bs=1024 count=1 2>/dev/null; chmod 400 "$T/munge.key"
mkdir -p "$T/munge"; chmod 700 "$T/munge"
munged --force --key-file="$T/munge.key" --socket="$T/munge/munge.sock" --pid-file="$T/munge/munged.pid" \
  --log-file="$T/munge/munged.log" --seed-file="$T/munge/munged.seed" >/dev/null 2>&1 || skip "munged did not start"
for _ in $(seq 1 50); do [ -s "$T/munge/munged.pid" ] && break; sleep 0.1; done
[ -s "$T/munge/munged.pid" ] || skip "munged wrote no pid file"
PIDS+=("$(cat "$T/munge/munged.pid")")

# ---- slurm.conf: everything under $T, ports chosen at random
H=$(hostname -s)
P1=$((20000 + RANDOM % 20000)); P2=$((P1 + 1))
mkdir -p "$T/state" "$T/spool"
cat > "$T/slurm.conf" <<CONF
ClusterName=vtlabtest
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$P1
SlurmdPort=$P2
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=sched_min_interval=100000,batch_sched_delay=0
ReturnToService=2
MpiDefault=none
NodeName=$H NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$T/slurm.conf
slurmctld -D -f "$T/slurm.conf" >"$T/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$T/slurm.conf" -N "$H" >"$T/slurmd.out" 2>&1 &
PIDS+=($!)
up=0
for _ in $(seq 1 150); do
  st=$(sinfo -h -o %T 2>/dev/null | head -1)
  case "$st" in idle*|mixed*|allocated*) up=1; break ;; esac
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || skip "a daemon exited during start-up ($(tail -1 "$T/slurmctld.out" "$T/slurmd.out" 2>/dev/null | tr '\n' ' '))"; done
  sleep 0.2
done
[ $up = 1 ] || skip "the node did not become idle in 30 s (sinfo: ${st:-nothing})"
T_UP=$(date +%s.%N)
ok "single-node Slurm up ($(sinfo -V), node $H idle after $(printf %.1f "$(echo "$T_UP - $T0" | bc)") s)"

# ---- the sweep: a 12-sequence cut of bf16-stream, 4 arms x 2 shards
$PY - "$T/mini.json" <<'PY'
import json, sys
e = json.load(open("experiments/bf16-stream.json"))
e["id"] = "bf16-slurm"; e["dataset"]["generate"]["n_sequences"] = 12; e["divergence"]["sequences"] = 5
json.dump(e, open(sys.argv[1], "w"), indent=1)
PY
expect_exit "local whole run (the comparison; builds the model first)" 0 "$VTLAB" run "$T/mini.json" --db "$T/local.db"
export OMP_NUM_THREADS=1   # each task holds one CPU (--cpus-per-task=1)
T_SUB=$(date +%s.%N)
expect_exit "vtlab submit (2 job arrays and the merge job)" 0 "$VTLAB" submit "$T/mini.json" --shards-per-arm 2 \
  --results "$T/res" --merge-into "$T/merged.db" --slurm "--cpus-per-task=1" --time 00:10:00
cat "$OUT_FILE" | sed 's/^/# /'
grep -q "submitted job .* arm shards (array 2-7), after job" "$OUT_FILE" && ok "arm shards depend on the reference array" \
  || not_ok "arm shards depend on the reference array" "$(cat "$OUT_FILE")"
wait_queue() {
  for _ in $(seq 1 $(( $1 * 5 ))); do
    [ -z "$(squeue -h -o %i 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  return 1
}
if wait_queue 240; then ok "every job left the queue"; else not_ok "every job left the queue" "$(squeue 2>&1 | head -20)"; fi
T_DONE=$(date +%s.%N)
ntask=$(ls "$T"/res/logs/vtlab-bf16-slurm-*.out 2>/dev/null | wc -l)
[ "$ntask" = 8 ] && ok "8 array tasks ran (2 reference shards, 6 arm shards)" || not_ok "8 array tasks ran" "$ntask logs: $(ls "$T/res/logs")"
if [ -f "$T/merged.db" ] && $PY tests/slurm/same_results.py "$T/local.db" "$T/merged.db" > "$T/same" 2>&1; then
  ok "merged results equal the local run: same k/n, intervals, verdicts, logits hashes ($(cat "$T/same"))"
else
  not_ok "merged results equal the local run" "$(head -c 1500 "$T/same" 2>/dev/null) $(tail -5 "$T"/res/logs/vtlab-merge-*.out 2>/dev/null)"
fi
prov=$($PY -c "
import sqlite3,sys; d=sqlite3.connect(sys.argv[1])
print(d.execute('SELECT count(*), count(slurm_array_job_id), count(slurm_array_task_id), count(DISTINCT slurm_job_id) FROM merged_shards').fetchone())" "$T/merged.db" 2>&1)
[ "$prov" = "(8, 8, 8, 8)" ] && ok "provenance: every merged shard names its Slurm job and array task" || not_ok "provenance" "$prov"
expect_exit "vtlab status --slurm: complete (exit 0)" 0 "$VTLAB" status --results "$T/res" --slurm
grep -q "8 done" "$OUT_FILE" && ok "status: 8 done" || not_ok "status: 8 done" "$(cat "$OUT_FILE")"

# ---- resume: one task's database lost
rm -f "$T/res/bf16-slurm/bf16-stream.1of2.db"
expect_exit "status: incomplete (exit 1)" 1 "$VTLAB" status --results "$T/res" --slurm
grep -q "missing  bf16-slurm/bf16-stream shard 1/2" "$OUT_FILE" && ok "status names the missing task" || not_ok "status names the missing task" "$(cat "$OUT_FILE")"
expect_exit "submit --resume" 0 "$VTLAB" submit "$T/mini.json" --shards-per-arm 2 --results "$T/res" --resume --slurm "--cpus-per-task=1"
grep -q "1 of 8 task(s) submitted" "$OUT_FILE" && ok "--resume submitted only the missing task" || not_ok "--resume" "$(cat "$OUT_FILE")"
wait_queue 120 && ok "the resubmitted task ran" || not_ok "the resubmitted task ran" "$(squeue 2>&1 | head)"
expect_exit "status after resume: complete" 0 "$VTLAB" status --results "$T/res" --slurm
expect_exit "merge again: idempotent" 0 "$VTLAB" merge "$T"/res/*/*.db --into "$T/merged.db"
grep -q "0 run(s) merged" "$OUT_FILE" && ok "nothing merged twice" || not_ok "nothing merged twice" "$(cat "$OUT_FILE")"
T_END=$(date +%s.%N)
echo "# times: Slurm up $(printf %.1f "$(echo "$T_UP - $T0" | bc)") s; submit to merged $(printf %.1f "$(echo "$T_DONE - $T_SUB" | bc)") s; whole test $(printf %.1f "$(echo "$T_END - $T0" | bc)") s"
stop_daemons
left=0; for p in $(cat "$T/munge/munged.pid" "$T/slurmctld.pid" "$T/slurmd.pid" 2>/dev/null); do kill -0 "$p" 2>/dev/null && left=1; done
[ $left = 0 ] && ok "the daemons it started are stopped" || not_ok "daemons stopped" "still running"
echo "slurm: $PASS passed, $FAIL failed, 0 skipped"
[ "$FAIL" -eq 0 ]
