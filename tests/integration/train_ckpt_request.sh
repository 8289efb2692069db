#!/usr/bin/env bash
# train_ckpt_request.sh: one checkpoint request, one checkpoint. The controller sends a request
# to every node of a job; each node's agent writes it into its ranks' YARD_CHECKPOINT_REQUEST
# file when its heartbeat brings it, so ranks see it at different steps, and the first to see
# it makes them all save one step. A rank that sees it later must find that checkpoint newer
# than the request's AFTER step and not ask for another (it did: a preempted job saved steps
# 130 and 131 for one request, and train_preempt.sh restored the second). Two ranks run under
# yard-run, each with its own request file (two nodes' agents): the request reaches rank 0,
# then, after the checkpoint, rank 1: still one checkpoint. A newer request (AFTER that step)
# gets one more; a request without AFTER (an older agent) still gets one. A periodic
# checkpoint (every_steps) newer than AFTER does not answer a request: the ranks save the step
# they are at, so that a restart loses no steps.
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built"
	exit 77
fi
cat >"$T/job.json" <<JSON
{"name": "request",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 4, "classes": 4, "seed": 5},
 "train": {"steps": 20000, "batch_size": 32, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 3, "samples": 1024},
 "parallel": {"dp": 2, "tp": 1, "pp": 1},
 "checkpoint": {"every_steps": 0, "keep": 50, "store": "dir:$T/ckpt"}}
JSON
# paced (debug.block_ms: results do not change): steps of a few ms whatever the machine
pace_spec "$T/job.json" 0.5
cat >"$T/worker" <<SH
#!/bin/sh
YARD_CHECKPOINT_REQUEST="$T/req.\$YARD_RANK" exec "$build/yard-worker" "\$@"
SH
chmod +x "$T/worker"
YARD_WORKER="$T/worker" "$build/yard-run" "$T/job.json" >"$T/out" 2>"$T/err" &
run=$!
trap 'kill -TERM $run 2>/dev/null; wait $run 2>/dev/null; cleanup' EXIT

# write_req RANK TEXT: as the agent does, a whole new file by rename
write_req() {
	echo "$2" >"$T/req.$1.tmp"
	mv "$T/req.$1.tmp" "$T/req.$1"
}
step_now() { sed -n 's/^{"step":\([0-9]*\),.*/\1/p' "$T/out" | tail -n 1; }
step_at_least() { [ "$(step_now)" -ge "$1" ] 2>/dev/null; }
checkpoints() { (cd "$T/ckpt" 2>/dev/null && ls -d step-*/MANIFEST 2>/dev/null | sed 's|/MANIFEST||') || true; }
newest() { checkpoints | tail -n 1 | sed 's/^step-0*//'; }
count() { checkpoints | grep -c . || true; }
# steps go on: 40 more steps give a rank that asked one more checkpoint time to save it
forty_more() {
	local at
	at=$(step_now)
	wait_until 120 step_at_least $((at + 40)) || fail "training stopped at step $(step_now): $(tail -5 "$T/err")"
}

wait_until 120 step_at_least 20 || fail "the ranks did not reach step 20: $(tail -5 "$T/err")"
write_req 0 "1000 -1"
wait_until 60 dir_ckpt_at_least "$T/ckpt" 1 || fail "no checkpoint for request 1000: $(tail -5 "$T/err")"
s1=$(newest)
write_req 1 "1000 -1" # the same request, reaching the other node's ranks later
forty_more
[ "$(count)" = 1 ] || fail "request 1000, seen by rank 1 after step $s1 was saved, made more checkpoints: $(checkpoints | tr '\n' ' ')"
grep -q "rank 1: checkpoint request 1000: answered by the checkpoint of step $s1, newer than step -1" "$T/err" ||
	fail "rank 1 does not say the request was answered: $(grep 'request 1000' "$T/err")"
note "request 1000: one checkpoint (step $s1), rank 1 saw it afterwards and did not ask again"

write_req 0 "2000 $s1"
write_req 1 "2000 $s1"
wait_until 60 dir_ckpt_at_least "$T/ckpt" $((s1 + 1)) || fail "no checkpoint for request 2000 (after step $s1)"
s2=$(newest)
forty_more
[ "$(count)" = 2 ] || fail "request 2000 made more than one checkpoint: $(checkpoints | tr '\n' ' ')"
note "request 2000 (after step $s1): one checkpoint (step $s2)"

write_req 0 3000 # an older agent: no AFTER, so nothing answers it but a new checkpoint
wait_until 60 dir_ckpt_at_least "$T/ckpt" $((s2 + 1)) || fail "no checkpoint for request 3000 (no AFTER)"
note "request 3000 (no AFTER): one checkpoint (step $(newest))"
kill -0 $run 2>/dev/null || fail "yard-run ended: $(tail -5 "$T/err")"
kill -TERM $run
wait $run 2>/dev/null || true

# every_steps 10: a request after step -1 finds periodic checkpoints newer than that, and the
# ranks still save the step they are at
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["checkpoint"].update(every_steps=10, store="dir:'"$T"'/ckpt2"); json.dump(j, open(sys.argv[1], "w"))' "$T/job.json"
rm -f "$T/req.0" "$T/req.1"
YARD_WORKER="$T/worker" "$build/yard-run" "$T/job.json" >"$T/out" 2>"$T/err" &
run=$!
wait_until 60 dir_ckpt_at_least "$T/ckpt2" 30 || fail "no periodic checkpoint at step 30: $(tail -5 "$T/err")"
at=$(step_now)
write_req 0 "4000 -1"
write_req 1 "4000 -1"
asked() { sed -n 's/.*saving checkpoint step \([0-9]*\): asked for.*/\1/p' "$T/err" | tail -n 1; }
asked_step() { [ -n "$(asked)" ]; }
wait_until 60 asked_step || fail "request 4000 was not saved: $(grep 'request 4000' "$T/err")"
[ "$(asked)" -ge "$at" ] || fail "request 4000 saved step $(asked), before step $at when it was made"
note "request 4000 (after step -1, periodic checkpoints every 10 steps): saved step $(asked) (step $at when asked)"
echo "ok: one checkpoint per request, whichever rank sees it first; periodic ones answer none"
