#!/usr/bin/env bash
# train_failover.sh: a node dies under a real hybrid-parallel training job, and the job's
# result does not change. One controller, three agents with 4 CPU devices each; the built-in
# trainer (yard-worker) runs an 8-rank dp 2 x tp 2 x pp 2 1F1B job, checkpointing every 20
# steps to a shared directory. Early (once step 100 is checkpointed), SIGKILL one of the job's
# nodes (its agent and its ranks): the job restarts from its newest checkpoint on the two
# healthy nodes and succeeds, and every step from the restore on has the loss of an
# uninterrupted run of the same spec (yard-run, same layout) within a relative 1e-5 —
# deterministic data and an exact resume.
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built"
	exit 77
fi

steps=2000
cat >"$T/job.json" <<JSON
{"name": "hybrid-failover",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 8, "classes": 4, "seed": 11},
 "train": {"steps": $steps, "batch_size": 32, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 3, "samples": 1024},
 "parallel": {"dp": 2, "tp": 2, "pp": 2, "schedule": "1f1b", "micro_batches": 4},
 "checkpoint": {"every_steps": 20, "keep": 2, "store": "dir:$T/ckpt"},
 "failure": {"max_restarts": 2, "hang_timeout_s": 60}}
JSON

# the reference: the same spec, uninterrupted, in one yard-run
"$build/yard-run" "$T/job.json" >"$T/whole" 2>"$T/whole.err" || fail "uninterrupted run: $(tail -3 "$T/whole.err")"

start_member 1 "$(members_arg 1)" --node-suspect-ms 1500 --node-down-ms 3000 --restart-backoff-ms 200
wait_leader 10 1 || fail "no leader"
make_join_token 1
for n in node-a node-b node-c; do start_agent "$n" 4 "$(api 1)"; done
for n in node-a node-b node-c; do
	wait_until 10 node_state_is 1 "$n" up || fail "$n did not register"
done

# the cluster's run is paced (debug.block_ms: 48 sleeps of 0.1 ms a step per stage, no change
# to any result) so that 2000 steps take well over 10 s however fast this machine is
pace_spec "$T/job.json" 0.1
submit 1 "$(cat "$T/job.json")"
J=$JOB
# the victim (the node of the last rank) and its rank processes, known before the wait so that
# the kill follows the checkpoint at once
placed() { get 1 "/v1/jobs/$J"; grep -q '"layout":\[{' <<<"$BODY"; }
wait_until 30 placed || fail "job was not placed: $BODY"
victim=$(jget "$BODY" 'd["layout"][-1]["node"]')
four_ranks() { [ "$(grep -o '"pid":[1-9]' "$T/agent-$victim/ranks.json" | wc -l)" = 4 ]; }
wait_until 10 four_ranks || fail "$victim does not run 4 ranks: $(cat "$T/agent-$victim/ranks.json")"
ranks=$(grep -o '"pid":[0-9]*' "$T/agent-$victim/ranks.json" | cut -d: -f2 | tr '\n' ' ')
# the trigger is the shared checkpoint directory, not the step the controller last heard of
# (heartbeats lag training by up to a second: hundreds of steps on a fast machine)
wait_until 60 dir_ckpt_at_least "$T/ckpt/$J" 100 || fail "no checkpoint at step 100 or later: $(ls "$T/ckpt/$J" 2>&1) $(job_field 1 "$J" '')"
note "job $J has a checkpoint at step $(ls "$T/ckpt/$J" | tail -n 1); killing $victim (ranks $ranks) and its processes"

# node death: the agent and every rank it runs, all at once
kill -9 "${APID[$victim]}"
for p in $ranks; do kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null; done
wait "${APID[$victim]}" 2>/dev/null
unset "APID[$victim]"
for p in $ranks; do
	gone_within 10 "$p" || fail "rank process $p of $victim survived SIGKILL (10 s)"
done

wait_job_done 1 "$J" succeeded 60 600 || fail "job did not succeed after the node death: $(events_of 1 "$J")"
get 1 "/v1/jobs/$J"
[ "$(jget "$BODY" 'd["generation"]')" = 2 ] || fail "the job was not restarted (did it end before the node died?): $(events_of 1 "$J")"
[ "$(jget "$BODY" "all(s['node'] != '$victim' for s in d['layout'])")" = True ] || fail "re-placed on the dead node: $BODY"
restored=$(events_of 1 "$J" | sed -n 's/.*restoring from checkpoint step \([0-9]*\).*/\1/p' | tail -n 1)
[ -n "$restored" ] && [ "$restored" -ge 20 ] || fail "no restore from a checkpoint: $(events_of 1 "$J")"
# the kill must have hit the job mid-way, so that most of the run happens after the restore
[ "$restored" -le $((steps * 3 / 4)) ] || fail "restored from step $restored of $steps: the node died too late to test anything"

# rank 0's metric lines (stdout, in its rank log on whichever node ran it), by generation:
# the lines written after the restore are those of generation 2 — steps restored+1..steps
# rank 0's output by generation (agent/ranks.c: rank-R.gen-G.log, on whichever node ran it)
cat "$T"/agent-*/jobs/"$J"/rank-0.gen-1.log "$T"/agent-*/jobs/"$J"/rank-0.gen-2.log >"$T/rank0" 2>/dev/null || true
losses_equal_after "$T/rank0" "$T/whole" "$restored" "$steps" ||
	fail "losses after the failover differ from the uninterrupted run"
note "node $victim killed; restored from step $restored; final loss equals the uninterrupted run"

# the leader's per-step history (GET /v1/jobs/ID/metrics, the dashboard's charts): steps read
# forward across the restore, losses are the training's, every rank's compute time appears
get 1 "/v1/jobs/$J/metrics?limit=100000"
[ "$CODE" = 200 ] || fail "metrics: $CODE $BODY"
# through a file: the history of 2,000 steps is larger than one argument may be (128 KiB)
printf '%s' "$BODY" >"$T/metrics.json"
python3 - "$T/metrics.json" "$T/whole" "$restored" <<'PY' || fail "the job's metrics history is wrong"
import json, sys
doc = json.load(open(sys.argv[1]))
want = {}
for line in open(sys.argv[2]):
    if line.startswith("{"):
        r = json.loads(line)
        want[r["step"]] = r["loss"]
steps = doc["steps"]
assert doc["generation"] == 2, doc["generation"]
assert len(steps) >= 5, f"only {len(steps)} steps recorded"
nums = [s["step"] for s in steps]
assert nums == sorted(set(nums)), f"steps do not read forward: {nums}"
after = [s for s in steps if s["step"] > int(sys.argv[3])]
assert after, "nothing recorded after the restore"
seen = set()
for s in steps:
    if s["loss"] is not None:
        rel = abs(s["loss"] - want[s["step"]]) / abs(want[s["step"]])
        assert rel <= 1e-5, f"step {s['step']}: loss {s['loss']} vs {want[s['step']]}"
    assert len(s["compute_ms"]) == 8, s
    assert s["samples_per_s"] is None or s["samples_per_s"] > 0, s
    seen.update(i for i, v in enumerate(s["compute_ms"]) if v is not None)
assert seen == set(range(8)), f"compute times of ranks {sorted(set(range(8)) - seen)} never recorded"
print(f"# metrics history: {len(steps)} steps, {len(after)} after the restore, every rank's compute time seen")
PY
get 1 "/v1/jobs/$J/metrics?limit=0"
[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"limit"' || fail "limit=0 accepted: $CODE $BODY"
get 1 "/v1/jobs/j-999999/metrics"
[ "$CODE" = 404 ] || fail "metrics of an unknown job: $CODE $BODY"
