#!/usr/bin/env bash
# train_preempt.sh: a job of higher priority preempts one of lower priority, which saves a
# checkpoint first. One controller with --preempt-after-s 2, one agent with 4 CPU devices. The
# built-in trainer runs a 4-rank dp 2 x tp 2 job of priority 0 with checkpoint.every_steps 0
# (it never checkpoints on its own); a 4-rank job of priority 5 then waits for devices. Two
# seconds later the leader preempts the first job: its ranks are asked for a checkpoint, it
# restarts once the checkpoint is complete (not counted against max_restarts) and waits,
# the job of priority 5 takes the devices and succeeds, and the preempted job is then placed
# again from the step it saved and succeeds, training like an uninterrupted yard-run of the
# same spec (losses within 1e-5 for 100 steps after the restore).
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built"
	exit 77
fi
cat >"$T/low.json" <<JSON
{"name": "low",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 8, "classes": 4, "seed": 11},
 "train": {"steps": 600, "batch_size": 32, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 3, "samples": 1024},
 "parallel": {"dp": 2, "tp": 2, "pp": 1, "schedule": "1f1b", "micro_batches": 2},
 "checkpoint": {"every_steps": 0, "store": "dir:$T/ckpt"},
 "failure": {"max_restarts": 0, "hang_timeout_s": 60}}
JSON
"$build/yard-run" "$T/low.json" >"$T/whole" 2>"$T/whole.err" || fail "uninterrupted run: $(tail -3 "$T/whole.err")"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j.update(name="high", priority=5); j["train"]["steps"]=100; j["checkpoint"]={}; json.dump(j, open(sys.argv[2], "w"))' \
	"$T/low.json" "$T/high.json"
# paced (debug.block_ms: results do not change) so that the run outlasts the preemption
pace_spec "$T/low.json" 0.5

start_member 1 "$(members_arg 1)" --restart-backoff-ms 200 --preempt-after-s 2
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 4 "$(api 1)"
wait_until 10 node_state_is 1 node-a up || fail "node-a did not register"

submit 1 "$(cat "$T/low.json")"
LOW=$JOB
step_at_least() { [ "$(job_field 1 "$LOW" '.get("step", 0)')" -ge "$1" ] 2>/dev/null; }
wait_until 60 step_at_least 50 || fail "the low-priority job did not reach step 50: $(job_field 1 "$LOW" '')"
submit 1 "$(cat "$T/high.json")"
HIGH=$JOB
note "job $LOW (priority 0) at step $(job_field 1 "$LOW" '["step"]'); job $HIGH (priority 5) submitted"

wait_job_done 1 "$HIGH" succeeded 60 300 || fail "the high-priority job did not succeed: $(events_of 1 "$HIGH") $(events_of 1 "$LOW")"
wait_job_done 1 "$LOW" succeeded 60 600 || fail "the preempted job did not succeed: $(events_of 1 "$LOW")"
get 1 "/v1/jobs/$LOW"
[ "$(jget "$BODY" 'd["generation"], d["restarts"]')" = "(2, 0)" ] || fail "generation / restarts: $BODY"

events=$(events_of 1 "$LOW")
echo "$events" | sed 's/^/#   /'
grep -q "^job.waiting: .*its restart waits for a checkpoint" <<<"$events" || fail "no event saying the restart waits for a checkpoint"
saved=$(sed -n "s/^job.restarting: job $LOW restarting elsewhere (not counted against max_restarts): preempted by job $HIGH (priority 5, this job's 0), which waited [0-9]* s for devices; checkpoint step \([0-9]*\) saved first.*/\1/p" <<<"$events")
[ -n "$saved" ] && [ "$saved" -ge 50 ] || fail "the preemption's restart does not name a checkpoint saved for it"
restored=$(sed -n 's/^job.placed: .*re-placed (generation 2).*restoring from checkpoint step \([0-9]*\).*/\1/p' <<<"$events")
[ "$restored" = "$saved" ] || fail "generation 2 restored step '$restored', not the saved $saved"
grep -q "^job.waiting: .*preempting job(s) of lower priority for their devices: $LOW$" <<<"$(events_of 1 "$HIGH")" ||
	fail "the high-priority job does not say it preempted $LOW: $(events_of 1 "$HIGH")"
# the preempted job went on only once the other had ended
get 1 "/v1/events?limit=1000"
python3 - "$LOW" "$HIGH" "$T/body" <<'PY' || fail "the preempted job was placed again before the high-priority job ended"
import json, sys
low, high = sys.argv[1], sys.argv[2]
ev = json.load(open(sys.argv[3]))["events"]
ended = [e["seq"] for e in ev if e["job"] == high and e["type"] == "job.succeeded"]
again = [e["seq"] for e in ev if e["job"] == low and e["type"] == "job.placed" and "generation 2" in e["message"]]
sys.exit(0 if ended and again and again[0] > ended[0] else 1)
PY
[ "$(metric 1 yard_preemptions_total)" = 1 ] || fail "yard_preemptions_total is $(metric 1 yard_preemptions_total), not 1"
for g in 1 2; do cat "$T/agent-node-a/jobs/$LOW/rank-0.gen-$g.log" 2>/dev/null; done >"$T/rank0"
losses_equal_after "$T/rank0" "$T/whole" "$saved" "$((saved + 100))" 1e-5 ||
	fail "losses after the restore differ from the uninterrupted run"
note "job $LOW preempted for $HIGH at checkpoint step $saved, placed again from it once $HIGH ended, restarts 0"
