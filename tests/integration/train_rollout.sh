#!/usr/bin/env bash
# train_rollout.sh: every agent is upgraded in place under a real hybrid-parallel training
# job, and the job's result does not change. One controller, three agents with 4 CPU devices
# each; the built-in trainer (yard-worker) runs an 8-rank dp 2 x tp 2 x pp 2 1F1B job. Once
# it trains, a rollout moves all three agents to a new build (a real copy of yard-agent made
# by scripts/mark-build) in waves 1,2,100%. The rollout must complete while the job runs,
# the job must succeed without a restart (generation 1, same rank pids), and the loss of every
# step must equal an uninterrupted run of the same spec (yard-run) within a relative 1e-5.
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built"
	exit 77
fi
YARDCTL=${YARDCTL:-yardctl}
MARK_BUILD=${MARK_BUILD:-$top_srcdir/scripts/mark-build}
trap 'cleanup_upgraded_agents; cleanup_agents; cleanup' EXIT

steps=3000
cat >"$T/job.json" <<JSON
{"name": "hybrid-rollout",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 8, "classes": 4, "seed": 11},
 "train": {"steps": $steps, "batch_size": 32, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 3, "samples": 1024},
 "parallel": {"dp": 2, "tp": 2, "pp": 2, "schedule": "1f1b", "micro_batches": 4},
 "failure": {"max_restarts": 0, "hang_timeout_s": 60}}
JSON
"$build/yard-run" "$T/job.json" >"$T/whole" 2>"$T/whole.err" || fail "uninterrupted run: $(tail -3 "$T/whole.err")"
# the cluster's run is paced (debug.block_ms, no change to any result): 3000 steps take well
# over 15 s however fast this machine is, longer than the rollout of three agents
pace_spec "$T/job.json" 0.1

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
for n in node-a node-b node-c; do start_agent "$n" 4 "$(api 1)"; done
for n in node-a node-b node-c; do wait_until 10 node_state_is 1 "$n" up || fail "$n did not register"; done
"$MARK_BUILD" "$(command -v "$YARD_AGENT")" "$T/agent-next" --version 9.0.0-next >/dev/null || fail "mark-build"
"$YARDCTL" --endpoints "$(api 1)" --token "$TOKEN" build upload "$T/agent-next" --version 9.0.0-next \
	--component agent >"$T/out" 2>&1 || fail "upload: $(cat "$T/out")"

submit 1 "$(cat "$T/job.json")"
J=$JOB
step_at_least() { [ "$(job_field 1 "$J" '.get("step", 0)')" -ge "$1" ] 2>/dev/null; }
wait_until 60 step_at_least 50 || fail "job did not reach step 50: $(job_field 1 "$J" '')"
get 1 "/v1/jobs/$J"
pids=$(jget "$BODY" '" ".join(str(r["pid"]) for r in sorted(d["ranks"], key=lambda r: r["rank"]))')
note "job $J at step $(jget "$BODY" 'd["step"]') on $(jget "$BODY" '",".join(sorted(set(s["node"] for s in d["layout"])))'), rank pids $pids; rolling 9.0.0-next out"

call POST 1 /v1/rollouts '{"build":"9.0.0-next","waves":"1,2,100%","gate_timeout_s":60}'
[ "$CODE" = 201 ] || fail "rollout: $CODE $BODY"
RO=$(jget "$BODY" 'd["id"]')
ro_done() { get 1 "/v1/rollouts/$RO"; [ "$(jget "$BODY" 'd["state"]')" = completed ]; }
wait_until 120 ro_done || fail "rollout $RO did not complete: $BODY"
job_state_is 1 "$J" running || fail "the job ended before the rollout did (make it train longer): $(job_field 1 "$J" '')"
note "rollout $RO completed at step $(job_field 1 "$J" '["step"]') of $steps"
for n in node-a node-b node-c; do
	get 1 "/v1/nodes/$n"
	[ "$(jget "$BODY" 'd["version"]')" = 9.0.0-next ] || fail "$n runs $(jget "$BODY" 'd["version"]')"
done

wait_job_done 1 "$J" succeeded 60 600 || fail "job did not succeed: $(events_of 1 "$J")"
get 1 "/v1/jobs/$J"
[ "$(jget "$BODY" 'd["generation"]')" = 1 ] && [ "$(jget "$BODY" 'd["restarts"]')" = 0 ] ||
	fail "the job was restarted: $BODY"
cat "$T"/agent-*/jobs/"$J"/rank-0.gen-1.log.1 "$T"/agent-*/jobs/"$J"/rank-0.gen-1.log >"$T/rank0" 2>/dev/null || true
grep -q "re-adopted rank" "$T/log.agent-node-a" "$T/log.agent-node-b" "$T/log.agent-node-c" ||
	fail "no agent re-adopted a rank: the upgrades did not happen under the job"
python3 - "$T/rank0" "$T/whole" "$steps" <<'PY' || fail "losses under the rollout differ from the uninterrupted run"
import json, sys
def load(p):
    out = {}
    for line in open(p, errors="replace"):
        if line.startswith("{"):
            r = json.loads(line)
            out.setdefault(r["step"], []).append(r["loss"])
    return out
got, want = load(sys.argv[1]), load(sys.argv[2])
steps = int(sys.argv[3])
worst = 0.0
for s in range(1, steps + 1):
    if s not in got:
        sys.exit(f"step {s} missing from rank 0's log")
    if len(got[s]) != 1:
        sys.exit(f"step {s} ran {len(got[s])} times: a rank restarted")
    rel = abs(got[s][0] - want[s][0]) / abs(want[s][0])
    worst = max(worst, rel)
    if rel > 1e-5:
        sys.exit(f"step {s}: loss {got[s][0]!r} vs {want[s][0]!r} uninterrupted (relative {rel:.3g} > 1e-5)")
print(f"# all {steps} steps equal the uninterrupted run; final loss {got[steps][0]!r}, worst relative difference {worst:.3g}")
PY
note "job $J trained through the rollout of 3 agents: no restart, the loss curve of an uninterrupted run"
