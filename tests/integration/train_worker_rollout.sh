#!/usr/bin/env bash
# train_worker_rollout.sh: rollouts of yard-worker builds (real copies of yard-worker made by
# scripts/mark-build) onto two real agents with 4 CPU devices each, under real training jobs.
#  1. policy next, waves 1,100%: a 4-rank trainer job keeps its rank processes and its worker;
#     both nodes then report the new worker version (API and yardctl node show), also after
#     an agent restart (the installed worker and each rank's worker are kept);
#  2. a job started afterwards runs the new worker (its ranks report it, its rank log says so);
#  3. a worker build whose self-test fails on node-b: the rollout rolls back, node-a (which may
#     have installed it) and node-b are back on the previous worker;
#  4. an operator's rollback of the completed rollout of 1 puts both nodes back on the
#     worker they started with;
#  5. policy restart: a 4-rank job training on the nodes, which has not reached its first
#     checkpoint (every_steps 1000), is asked for one before the restart, is restarted from it
#     on the new worker (every rank of the new generation reports it), and its loss at every
#     step equals an uninterrupted yard-run of the same spec within 1e-5.
# Also: bad rollout input names the field, and policy next is refused for an agent build.
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built"
	exit 77
fi
YARDCTL=${YARDCTL:-yardctl}
MARK_BUILD=${MARK_BUILD:-$top_srcdir/scripts/mark-build}
trap 'cleanup_upgraded_agents; cleanup_agents; cleanup' EXIT
ctl() { "$YARDCTL" --endpoints "$(api 1)" --token "$TOKEN" "$@"; }

start_member 1 "$(members_arg 1)" --restart-backoff-ms 200
wait_leader 10 1 || fail "no leader"
make_join_token 1
for n in node-a node-b; do start_agent "$n" 4 "$(api 1)" --worker "$build/yard-worker"; done
for n in node-a node-b; do wait_until 10 node_state_is 1 "$n" up || fail "$n did not register"; done
worker_of() { get 1 "/v1/nodes/$1"; jget "$BODY" 'd.get("worker_version", "")'; }
worker_is() { [ "$(worker_of "$1")" = "$2" ]; }
W0=$("$build/yard-worker" --version)
for n in node-a node-b; do wait_until 10 worker_is "$n" "$W0" || fail "$n does not report worker $W0: $BODY"; done

mkdir -p "$T/builds"
mark() { "$MARK_BUILD" "$build/yard-worker" "$T/builds/$1" --version "$1" "${@:2}" >/dev/null || fail "mark-build $1"; }
mark 7.0.0-w
mark 7.5.0-bad --fault self-test --fault-nodes node-b
mark 8.0.0-w
for v in 7.0.0-w 7.5.0-bad 8.0.0-w; do
	ctl build upload "$T/builds/$v" --version "$v" --component worker >"$T/out" 2>&1 || fail "upload $v: $(cat "$T/out")"
done
"$MARK_BUILD" "$(command -v "$YARD_AGENT")" "$T/builds/agent-9" --version 9.0.0-a >/dev/null || fail "mark-build agent"
ctl build upload "$T/builds/agent-9" --version 9.0.0-a --component agent >"$T/out" 2>&1 || fail "upload agent: $(cat "$T/out")"

# ---- bad input changes nothing ----
call POST 1 /v1/rollouts '{"build":"7.0.0-w","policy":"soon"}'
[ "$CODE" = 400 ] && grep -q '"field":"policy"' <<<"$BODY" || fail "bad policy: $CODE $BODY"
call POST 1 /v1/rollouts '{"build":"9.0.0-a","policy":"next"}'
[ "$CODE" = 400 ] && grep -q '"field":"policy"' <<<"$BODY" || fail "policy next for an agent build: $CODE $BODY"
ctl rollout start --build 7.0.0-w --policy soon >"$T/out" 2>&1 && fail "yardctl took --policy soon"
grep -q -- "--policy" "$T/out" || fail "yardctl's error does not name --policy: $(cat "$T/out")"
get 1 /v1/rollouts
[ "$(jget "$BODY" 'len(d["rollouts"])')" = 0 ] || fail "a refused start left a rollout: $BODY"

rollout_is() { get 1 "/v1/rollouts/$1"; [ "$(jget "$BODY" 'd["state"]')" = "$2" ]; }
start_rollout() { # BUILD WAVES POLICY: id in $RO
	ctl rollout start --build "$1" --waves "$2" --policy "$3" --soak 1s --gate-timeout 30s >"$T/out" 2>&1 ||
		fail "rollout of $1: $(cat "$T/out")"
	RO=$(grep -o 'ro-[0-9]*' "$T/out" | head -n 1)
	[ -n "$RO" ] || fail "no rollout id in: $(cat "$T/out")"
}
rank0_log() { cat "$T"/agent-*/jobs/"$1"/rank-0.gen-"$2".log.1 "$T"/agent-*/jobs/"$1"/rank-0.gen-"$2".log 2>/dev/null; }

# ---- 1. policy next under a running job ----
cat >"$T/long.json" <<JSON
{"name": "long", "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 4, "classes": 4, "seed": 5},
 "train": {"steps": 1000000, "batch_size": 16, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 2, "samples": 512},
 "parallel": {"dp": 2, "tp": 1, "pp": 2, "schedule": "1f1b", "micro_batches": 2},
 "failure": {"max_restarts": 0, "hang_timeout_s": 60}}
JSON
pace_spec "$T/long.json" 1
submit 1 "$(cat "$T/long.json")"
A=$JOB
a_ranks() { get 1 "/v1/jobs/$A"; [ "$(jget "$BODY" 'len([r for r in d.get("ranks", []) if r["state"] == "running" and r.get("worker_version")])')" = 4 ]; }
wait_until 60 a_ranks || fail "job $A does not report 4 running ranks with their worker: $BODY"
A_PIDS=$(jget "$BODY" '" ".join(str(r["pid"]) for r in sorted(d["ranks"], key=lambda r: r["rank"]))')
[ "$(jget "$BODY" '",".join(sorted(set(r["worker_version"] for r in d["ranks"])))')" = "$W0" ] || fail "job $A's ranks do not run $W0: $BODY"
note "job $A: ranks $A_PIDS on worker $W0; rolling worker 7.0.0-w out with policy next"

start_rollout 7.0.0-w 1,100% next
R1=$RO
wait_until 120 rollout_is "$R1" completed || fail "rollout $R1 did not complete: $BODY"
for n in node-a node-b; do worker_is "$n" 7.0.0-w || fail "$n reports worker $(worker_of "$n") after $R1"; done
ctl node show node-a >"$T/out" 2>&1 || fail "node show: $(cat "$T/out")"
grep -q '^worker  *7.0.0-w$' "$T/out" || fail "yardctl node show does not show the worker: $(cat "$T/out")"
ctl rollout status "$R1" >"$T/out" 2>&1 || fail "rollout status: $(cat "$T/out")"
grep -q "worker build 7.0.0-w  state completed" "$T/out" && grep -q "worker 7.0.0-w" "$T/out" ||
	fail "rollout status: $(cat "$T/out")"
get 1 "/v1/jobs/$A"
[ "$(jget "$BODY" 'd["state"]')" = running ] && [ "$(jget "$BODY" 'd["generation"]')" = 1 ] ||
	fail "job $A was stopped or restarted by policy next: $BODY"
[ "$(jget "$BODY" '" ".join(str(r["pid"]) for r in sorted(d["ranks"], key=lambda r: r["rank"]))')" = "$A_PIDS" ] ||
	fail "job $A's rank pids changed: $A_PIDS -> $BODY"
[ "$(jget "$BODY" '",".join(sorted(set(r.get("worker_version", "") for r in d["ranks"])))')" = "$W0" ] ||
	fail "job $A's running ranks do not keep worker $W0: $BODY"
for p in $A_PIDS; do alive "$p" || fail "rank process $p of $A is gone"; done
rank0_log "$A" 1 | grep -q "yard-worker $W0: rank 0" || fail "job $A's rank 0 did not log worker $W0"
note "$R1 completed: nodes report worker 7.0.0-w; job $A keeps ranks $A_PIDS on $W0"
# what a node installed, and what each rank runs, outlive its agent: restart node-a's agent
kill_agent node-a
start_agent node-a 4 "$(api 1)" --worker "$build/yard-worker"
a_readopted() { get 1 "/v1/jobs/$A"; [ "$(jget "$BODY" '" ".join(str(r["pid"]) + "@" + r.get("worker_version", "") for r in sorted(d.get("ranks", []), key=lambda r: r["rank"]))')" = "$(for p in $A_PIDS; do printf '%s@%s ' "$p" "$W0"; done | sed 's/ $//')" ]; }
wait_until 30 a_readopted || fail "after node-a's agent restarted, job $A's ranks are not the same on $W0: $BODY"
grep -q "ranks start with worker $T/agent-node-a/bin/yard-worker-7.0.0-w (version 7.0.0-w)" "$T/log.agent-node-a" ||
	fail "node-a's restarted agent does not start ranks with the installed 7.0.0-w"
worker_is node-a 7.0.0-w || fail "node-a reports worker $(worker_of node-a) after its agent restarted"

# ---- 2. ranks started afterwards run the new worker ----
cat >"$T/short.json" <<JSON
{"name": "short", "model": {"d_in": 8, "d_model": 16, "d_ff": 32, "layers": 2, "classes": 4, "seed": 1},
 "train": {"steps": 20, "batch_size": 16, "lr": 0.01, "optimizer": "sgd",
           "dataset": "synthetic", "data_seed": 1, "samples": 64},
 "parallel": {"dp": 2, "tp": 1, "pp": 1}}
JSON
submit 1 "$(cat "$T/short.json")"
B=$JOB
wait_until 60 job_state_is 1 "$B" succeeded || fail "job $B did not succeed: $(events_of 1 "$B")"
rank0_log "$B" 1 | grep -q "yard-worker 7.0.0-w: rank 0" || fail "job $B's rank 0 did not run worker 7.0.0-w: $(rank0_log "$B" 1 | head -3)"
grep -h "started rank [01] of $B " "$T"/log.agent-node-* >"$T/out"
[ "$(grep -c 'on worker 7.0.0-w$' "$T/out")" = 2 ] || fail "the agents did not start $B's ranks on 7.0.0-w: $(cat "$T/out")"
note "job $B, started after $R1, ran worker 7.0.0-w"

# ---- 3. a worker build that fails its self-test on node-b is rolled back ----
start_rollout 7.5.0-bad 100% next
R2=$RO
wait_until 90 rollout_is "$R2" rolled-back || fail "rollout $R2 was not rolled back: $BODY"
grep -q "node-b" <<<"$(jget "$BODY" 'd["reason"]')" && [ "$(jget "$BODY" 'd["nodes"]["node-b"]["error"]')" != "" ] ||
	fail "$R2's reason does not name node-b's failure: $BODY"
jget "$BODY" 'd["nodes"]["node-b"]["error"]' | grep -q "self-test failed" || fail "node-b's error: $BODY"
for n in node-a node-b; do wait_until 10 worker_is "$n" 7.0.0-w || fail "$n is not back on 7.0.0-w after $R2: $BODY"; done
grep -q "worker build 7.5.0-bad (rollout $R2) not installed: self-test failed" "$T/log.agent-node-b" ||
	fail "node-b's agent did not log the failed self-test"
if grep -q "worker build 7.5.0-bad (rollout $R2) installed" "$T/log.agent-node-a"; then
	grep -q "rollout $R2 rolled back: ranks start with worker 7.0.0-w (" "$T/log.agent-node-a" ||
		fail "node-a installed 7.5.0-bad but did not go back"
	note "$R2: node-b's self-test failed; node-a had installed 7.5.0-bad and went back to 7.0.0-w"
else
	note "$R2: node-b's self-test failed before node-a installed 7.5.0-bad; both stay on 7.0.0-w"
fi
job_state_is 1 "$A" running || fail "job $A stopped during $R2: $(job_field 1 "$A" '')"

# ---- 4. an operator rolls the completed rollout back ----
ctl rollout rollback "$R1" >"$T/out" 2>&1 || fail "rollback $R1: $(cat "$T/out")"
wait_until 60 rollout_is "$R1" rolled-back || fail "rollout $R1 was not rolled back: $BODY"
for n in node-a node-b; do worker_is "$n" "$W0" || fail "$n is on $(worker_of "$n") after rolling $R1 back"; done
grep -q "rollout $R1 rolled back: ranks start with worker $W0 (" "$T/log.agent-node-a" ||
	fail "node-a's agent did not log the rollback"
get 1 "/v1/jobs/$A"
[ "$(jget "$BODY" '" ".join(str(r["pid"]) for r in sorted(d["ranks"], key=lambda r: r["rank"]))')" = "$A_PIDS" ] ||
	fail "job $A's rank pids changed: $A_PIDS -> $BODY"
note "$R1 rolled back by the operator: both nodes start ranks with $W0 again; job $A untouched"
call POST 1 "/v1/jobs/$A/cancel"
[ "$CODE" = 200 ] || fail "cancel $A: $CODE $BODY"
wait_until 30 job_state_is 1 "$A" cancelled || fail "job $A was not cancelled: $BODY"

# ---- 5. policy restart: the job comes back from its checkpoint on the new worker ----
steps=1500
cat >"$T/job.json" <<JSON
{"name": "restart-on-worker",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 4, "classes": 4, "seed": 11},
 "train": {"steps": $steps, "batch_size": 32, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 3, "samples": 1024},
 "parallel": {"dp": 2, "tp": 1, "pp": 2, "schedule": "1f1b", "micro_batches": 4},
 "checkpoint": {"every_steps": 1000, "keep": 2, "store": "dir:$T/ckpt"},
 "failure": {"max_restarts": 0, "hang_timeout_s": 60}}
JSON
"$build/yard-run" "$T/job.json" >"$T/whole" 2>"$T/whole.err" || fail "uninterrupted run: $(tail -3 "$T/whole.err")"
# paced (debug.block_ms, no change to any result): 1500 steps take over 20 s on any machine
pace_spec "$T/job.json" 0.5
submit 1 "$(cat "$T/job.json")"
C=$JOB
c_at_60() { [ "$(job_field 1 "$C" '.get("step", 0)')" -ge 60 ] 2>/dev/null; }
wait_until 90 c_at_60 || fail "job $C did not reach step 60: $(job_field 1 "$C" '')"
dir_ckpt_at_least "$T/ckpt/$C" 0 && fail "job $C checkpointed before step 1000: $(ls "$T/ckpt/$C")"
note "job $C at step $(job_field 1 "$C" '["step"]'), no checkpoint yet; rolling worker 8.0.0-w out with policy restart"
start_rollout 8.0.0-w 100% restart
R3=$RO
wait_until 120 rollout_is "$R3" completed || fail "rollout $R3 did not complete: $BODY"
job_state_is 1 "$C" succeeded && fail "job $C ended before the restart (make it train longer)"
has_event 1 "$C" "rollout $R3 (policy restart): restart on build 8.0.0-w" || fail "no restart event: $(events_of 1 "$C")"
c_on_new() { get 1 "/v1/jobs/$C"; [ "$(jget "$BODY" '",".join(sorted(set(r.get("worker_version", "") for r in d.get("ranks", []) if r["state"] == "running")))')" = 8.0.0-w ] && [ "$(jget "$BODY" 'len(d.get("ranks", []))')" = 4 ]; }
wait_until 60 c_on_new || fail "job $C's ranks do not run 8.0.0-w after $R3: $BODY"
[ "$(jget "$BODY" 'd["generation"]')" = 2 ] || fail "job $C is not in generation 2: $BODY"
wait_job_done 1 "$C" succeeded 60 600 || fail "job $C did not succeed: $(events_of 1 "$C")"
restored=$(events_of 1 "$C" | sed -n 's/.*restoring from checkpoint step \([0-9]*\).*/\1/p' | tail -n 1)
[ -n "$restored" ] && [ "$restored" -ge 60 ] || fail "job $C was not restored from a checkpoint: $(events_of 1 "$C")"
has_event 1 "$C" "restart on build 8.0.0-w; checkpoint step $restored saved first" ||
	fail "the restart did not wait for the checkpoint it restored: $(events_of 1 "$C")"
rank0_log "$C" 1 | grep -q "yard-worker $W0: rank 0" || fail "job $C's generation 1 did not run $W0"
rank0_log "$C" 2 | grep -q "yard-worker 8.0.0-w: rank 0" || fail "job $C's generation 2 did not run 8.0.0-w"
{ rank0_log "$C" 1; rank0_log "$C" 2; } >"$T/rank0"
losses_equal_after "$T/rank0" "$T/whole" 0 "$steps" ||
	fail "losses of job $C across the restart differ from the uninterrupted run"
note "$R3 restarted job $C from step $restored on worker 8.0.0-w; every step's loss equals the uninterrupted run"
