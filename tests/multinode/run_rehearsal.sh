#!/usr/bin/env bash
# The GPU path rehearsed on one machine (marker/tier: multinode; not in the README test command).
#
# Starts a 3-node local Ray cluster with `ray start` -- a head that runs no tasks
# (--num-cpus=0), a CPU node offering executor slots (opteval_executor), a node with 3 fake
# GPUs advertising accelerator_type:H200 -- submits configs/sweeps/rehearsal.yaml with
# `ray job submit` (three models needing 4 GPUs at once, stand-in replicas with the real
# placement), and checks: job SUCCEEDED, every planned trajectory committed, no error rows,
# every row simulated, the first model's freed GPUs serving the third model before the
# second finishes, and no Serve app left deployed. Every port is explicit and free; the cluster lives in its
# own --temp-dir and only processes started from it are stopped (never `ray stop`).
#
#   bash tests/multinode/run_rehearsal.sh            # about 3-6 minutes on 2 busy cores
# Exit 0 on success; the job log is kept in $WORK/job.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
WORK=$(mktemp -d /tmp/orh-XXXX)      # short: Ray's socket paths must stay under 107 bytes
TMPD="$WORK/r"
OUT="$WORK/out"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONPATH="$REPO"
unset RAY_ADDRESS

read -r -a P <<<"$(python - <<'EOF'
import socket
socks = []
for _ in range(40):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)"
# Worker port ranges: a block of 200 ports per node above a random base, below the kernel's
# ephemeral range (32768+) where the free ports above come from, so the two never overlap.
WBASE=$(( 11000 + (RANDOM % 80) * 100 ))

node_ports() {  # $1 = index of the first of 7 ports in P, $2 = worker block index
  local i=$1 w=$(( WBASE + $2 * 200 ))
  echo "--node-manager-port=${P[i]} --object-manager-port=${P[i+1]} --metrics-export-port=${P[i+2]}" \
       "--dashboard-agent-listen-port=${P[i+3]} --dashboard-agent-grpc-port=${P[i+4]}" \
       "--runtime-env-agent-port=${P[i+5]} --min-worker-port=$w --max-worker-port=$(( w + 199 ))"
}

cleanup() {
  # Only processes whose command line names our temp dir (raylets, GCS, agents, workers).
  for _ in 1 2 3; do
    pids=$(grep -l -a -- "$TMPD" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 || true)
    [ -z "$pids" ] && break
    kill $pids 2>/dev/null || true
    sleep 2
  done
  pids=$(grep -l -a -- "$TMPD" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 || true)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
}
trap cleanup EXIT

GCS=127.0.0.1:${P[0]}
DASH=${P[1]}
SERVE_PORT=${P[2]}
echo "[rehearsal] head at $GCS, dashboard $DASH, Serve port $SERVE_PORT, temp dir $TMPD"
ray start --head --node-ip-address=127.0.0.1 --port="${P[0]}" --num-cpus=0 --num-gpus=0 \
  --include-dashboard=true --dashboard-host=127.0.0.1 --dashboard-port="$DASH" \
  --ray-client-server-port="${P[3]}" --temp-dir="$TMPD" $(node_ports 10 0) --disable-usage-stats >/dev/null
ray start --address="$GCS" --node-ip-address=127.0.0.1 --num-cpus=2 --num-gpus=0 \
  --resources='{"opteval_executor": 2}' $(node_ports 20 1) >/dev/null
ray start --address="$GCS" --node-ip-address=127.0.0.1 --num-cpus=6 --num-gpus=3 \
  --resources='{"accelerator_type:H200": 3}' $(node_ports 30 2) >/dev/null

python - "$GCS" <<'EOF'
import sys, time, ray
ray.init(address=sys.argv[1], namespace="rehearsal-check")
deadline = time.time() + 120
while len([n for n in ray.nodes() if n["Alive"]]) < 3 and time.time() < deadline:
    time.sleep(1)
nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
print("[rehearsal] nodes:", [{k: v for k, v in r.items() if not k.startswith("node:") and k not in ("memory", "object_store_memory")} for r in nodes])
assert len(nodes) == 3, nodes
EOF

# Every node's agent unpacks the working_dir once before the sweep's job starts (three nodes
# share this machine's session directory; tests/multinode/warm_nodes.py says why).
ray job submit --address="http://127.0.0.1:$DASH" --working-dir "$REPO" \
  --runtime-env-json '{"env_vars": {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}}' \
  -- python tests/multinode/warm_nodes.py >"$WORK/warm.log" 2>&1 \
  || { tail -n 40 "$WORK/warm.log"; echo "[rehearsal] FAILED: the warm-up job (log: $WORK/warm.log)"; exit 1; }
grep -h "working_dir unpacked" "$WORK/warm.log" || true

set +e
ray job submit --address="http://127.0.0.1:$DASH" --working-dir "$REPO" \
  --runtime-env-json '{"env_vars": {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}}' \
  -- python jobs/sweep.py configs/sweeps/rehearsal.yaml "sweep.output_dir=$OUT" \
     "serving.http_port=$SERVE_PORT" >"$WORK/job.log" 2>&1
rc=$?
set -e
tail -n 40 "$WORK/job.log"
[ $rc -eq 0 ] || { echo "[rehearsal] FAILED: ray job submit exited $rc (log: $WORK/job.log)"; exit 1; }

python - "$OUT" "$WORK/job.log" "$GCS" <<'EOF'
import re, sys
import ray
from ray import serve
from opteval.sweepcore.ledger import Ledger
out, log = sys.argv[1], open(sys.argv[2]).read()
led = Ledger.open(out, "rehearsal", {}, "", True, read_only=True)
df = led.read_table().to_pandas()
plan = led.read_plan().to_pandas()
assert len(plan) == 160, f"planned {len(plan)}"
assert sorted(df["key"]) == sorted(plan["key"]), "not every planned trajectory was committed"
assert (df["status"] != "error").all(), df[df["status"] == "error"][["key", "status"]].to_string()
assert df["simulated"].all(), "a stand-in output is not marked simulated"
assert set(df["model"]) == {"Qwen3.5-27B", "Qwen3-4B", "Qwen3-0.6B"}
events = re.findall(r"\[schedule\] (\S+): (deploying|ready|torn down)\b", log)
print("[rehearsal] schedule:", events)
at = {e: i for i, e in enumerate(events)}
first, second, third = "Qwen3.5-27B", "Qwen3-4B", "Qwen3-0.6B"
# 3 GPUs, 4 needed at once: the 27B (2 GPUs) and the 4B (1) deploy first, the 0.6B waits
assert max(at[(first, "deploying")], at[(second, "deploying")]) < at[(third, "deploying")], events
# the first model's GPUs serve the third before the second finishes
assert at[(first, "torn down")] < at[(third, "deploying")] < at[(third, "ready")] < at[(second, "torn down")], events
assert sum(1 for e in events if e[1] == "torn down") == 3, events
ray.init(address=sys.argv[3], namespace="rehearsal-check", logging_level="ERROR")
left = [a for a in serve.status().applications if a.startswith("opteval")]
assert not left, f"Serve apps left deployed: {left}"
print(f"[rehearsal] OK: {len(df)}/{len(plan)} trajectories committed, 0 error rows, all simulated, "
      f"the first model's GPUs served the third before the second finished, nothing left deployed")
EOF
