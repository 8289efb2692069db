#!/usr/bin/env bash
# train_drain.sh: a drain saves a checkpoint first. One controller, two agents with 4 CPU
# devices each; the built-in trainer runs a 4-rank dp 2 x tp 2 job on one node with
# checkpoint.every_steps 0 (it never checkpoints on its own). Draining that node asks the
# job's ranks for a checkpoint before moving them (the node's heartbeat answers carry the
# request, the agent hands it to the ranks, and they agree on the step in a loss allreduce):
# the job is restarted on the other node (not counted) from that checkpoint, not from step 0,
# says so in its events, and trains like an uninterrupted yard-run of the same spec (the same
# layout: losses within 1e-5 for 100 steps after the restore). Without the request the
# restart would start over at step 0 (no checkpoint exists). Then `yardctl job checkpoint`
# has generation 2 save one without a restart, and refuses unknown and finished jobs.
# DRAIN_STORE=controller (train_drain_controller.sh): the same with the "controller" store,
# whose checkpoint is complete once the draining node's agent has uploaded its 4 shards.
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built"
	exit 77
fi
steps=800
store=${DRAIN_STORE:-dir}
case $store in
dir) store_spec="dir:$T/ckpt" ;;
controller) store_spec=controller ;;
*) fail "DRAIN_STORE=$store: want dir or controller" ;;
esac
cat >"$T/job.json" <<JSON
{"name": "drain-saves",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 8, "classes": 4, "seed": 11},
 "train": {"steps": $steps, "batch_size": 32, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 3, "samples": 1024},
 "parallel": {"dp": 2, "tp": 2, "pp": 1, "schedule": "1f1b", "micro_batches": 2},
 "checkpoint": {"every_steps": 0, "keep": 2, "store": "$store_spec"},
 "failure": {"max_restarts": 0, "hang_timeout_s": 60}}
JSON
# the reference: the same spec, uninterrupted, in one yard-run
"$build/yard-run" "$T/job.json" >"$T/whole" 2>"$T/whole.err" || fail "uninterrupted run: $(tail -3 "$T/whole.err")"

start_member 1 "$(members_arg 1)" --restart-backoff-ms 200
wait_leader 10 1 || fail "no leader"
make_join_token 1
for n in node-a node-b; do start_agent "$n" 4 "$(api 1)"; done
for n in node-a node-b; do
	wait_until 10 node_state_is 1 "$n" up || fail "$n did not register"
done
export YARD_ENDPOINTS=$(api 1) YARD_TOKEN=$TOKEN

# paced (debug.block_ms: results do not change) so that the run outlasts the drain anywhere
pace_spec "$T/job.json" 0.5
submit 1 "$(cat "$T/job.json")"
J=$JOB
placed() { get 1 "/v1/jobs/$J"; grep -q '"layout":\[{' <<<"$BODY"; }
wait_until 30 placed || fail "job was not placed: $BODY"
victim=$(jget "$BODY" 'd["layout"][0]["node"]')
[ "$(jget "$BODY" 'len(set(s["node"] for s in d["layout"]))')" = 1 ] || fail "4 ranks should fit one node: $BODY"
other=node-a
[ "$victim" = node-a ] && other=node-b
step_at_least() { [ "$(job_field 1 "$J" '.get("step", 0)')" -ge "$1" ] 2>/dev/null; }
wait_until 60 step_at_least 50 || fail "job did not reach step 50: $(job_field 1 "$J" '')"
note "job $J runs on $victim at step $(job_field 1 "$J" '["step"]'), no checkpoint yet; draining $victim"
yardctl node drain "$victim" >/dev/null || fail "node drain"

# `yardctl job checkpoint`: generation 2's ranks save one now (no restart), and it says which
gen2_running() { get 1 "/v1/jobs/$J"; [ "$(jget "$BODY" 'd["state"], d["generation"], d.get("step", -1) >= 0')" = "('running', 2, True)" ]; }
wait_until 60 gen2_running || fail "generation 2 does not run: $BODY $(events_of 1 "$J")"
out=$(yardctl job checkpoint "$J" --timeout 60 2>"$T/ckpt.err") || fail "job checkpoint: $(cat "$T/ckpt.err")"
now_step=$(sed -n "s/^checkpoint step \([0-9]*\) of job $J complete$/\1/p" <<<"$out")
[ -n "$now_step" ] || fail "job checkpoint said: $out"
# (at step -1 when generation 2 has not reported a step to the leader yet)
grep -Eq "^job $J \(generation 2, at step -?[0-9]+\): its ranks are asked for a checkpoint \(request [0-9]+\); newest complete before: step -?[0-9]+$" "$T/ckpt.err" ||
	fail "job checkpoint said on stderr: $(cat "$T/ckpt.err")"
if [ "$store" = dir ]; then
	[ -e "$T/ckpt/$J/step-$(printf %08d "$now_step")/MANIFEST" ] || fail "no checkpoint step $now_step in $T/ckpt/$J: $(ls "$T/ckpt/$J")"
else
	store_ckpt_at_least 1 "$J" "$now_step" || fail "the controller has no complete checkpoint step $now_step: $BODY"
fi
[ "$(job_field 1 "$J" '["generation"]')" = 2 ] || fail "job checkpoint restarted the job"
note "yardctl job checkpoint: generation 2 saved step $now_step"
yardctl job checkpoint j-999999 2>"$T/err" && fail "checkpoint of an unknown job succeeded"
grep -q "404.*j-999999" "$T/err" || fail "unknown job: $(cat "$T/err")"

wait_job_done 1 "$J" succeeded 60 600 || fail "job did not succeed after the drain: $(events_of 1 "$J")"
yardctl job checkpoint "$J" 2>"$T/err" && fail "checkpoint of a finished job succeeded"
grep -q "409.*job $J is succeeded: only the ranks of a running job can save a checkpoint" "$T/err" || fail "finished job: $(cat "$T/err")"
get 1 "/v1/jobs/$J"
[ "$(jget "$BODY" 'd["generation"], d["restarts"]')" = "(2, 0)" ] || fail "generation / restarts: $BODY"
[ "$(jget "$BODY" 'set(s["node"] for s in d["layout"]) == {"'"$other"'"}')" = True ] || fail "not moved to $other: $BODY"

events=$(events_of 1 "$J")
echo "$events" | sed 's/^/#   /'
grep -q "^job.waiting: .*its restart waits for a checkpoint" <<<"$events" || fail "no event saying the restart waits for a checkpoint"
saved=$(sed -n "s/^job.restarting: .*node $victim: node draining; checkpoint step \([0-9]*\) saved first.*/\1/p" <<<"$events")
[ -n "$saved" ] && [ "$saved" -ge 50 ] || fail "the drain's restart does not name a checkpoint saved for it"
restored=$(sed -n 's/^job.placed: .*re-placed (generation 2).*restoring from checkpoint step \([0-9]*\).*/\1/p' <<<"$events")
[ "$restored" = "$saved" ] || fail "generation 2 restored step '$restored', not the saved $saved"
[ "$now_step" -gt "$saved" ] || fail "job checkpoint's step $now_step is not past the restored $saved"
# the request went through the agent to every rank, and the ranks saved that step
for r in 0 1 2 3; do
	grep -q "checkpoint request [0-9]*: the ranks save the first step" "$T/agent-$victim/jobs/$J/rank-$r.gen-1.log" ||
		fail "rank $r did not get the request: $(tail -3 "$T/agent-$victim/jobs/$J/rank-$r.gen-1.log")"
done
grep -q "saving checkpoint step $saved: asked for" "$T/agent-$victim/jobs/$J/rank-0.gen-1.log" || fail "rank 0 did not say it saved step $saved"
grep -q "job $J generation 1: checkpoint request [0-9]* handed to its 4 rank(s) here" "$T/log.agent-$victim" ||
	fail "the agent did not hand the request over: $(grep -i request "$T/log.agent-$victim" | tail -3)"
# the file holds "REQUEST AFTER": AFTER, the newest complete step when the leader asked (a
# checkpoint newer than it answers the request, so ranks that see it late do not save again)
after=$(sed -n "s/.*job $J generation 1: asked for a checkpoint before its restart .*; newest complete: step \(-\{0,1\}[0-9]*\), reported.*/\1/p" "$T/log.1" | head -n 1)
[ -n "$after" ] && grep -qE "^[0-9]+ $after\$" "$T/agent-$victim/jobs/$J/checkpoint-request.gen-1" ||
	fail "the request file does not hold 'REQUEST ${after:-?}': $(cat "$T/agent-$victim/jobs/$J/checkpoint-request.gen-1")"
if [ "$store" = controller ]; then
	grep -q "job $J generation 2: 4 shard(s) of checkpoint step $saved downloaded and verified" "$T/log.agent-$other" ||
		fail "$other did not download the saved checkpoint: $(grep -i checkpoint "$T/log.agent-$other" | tail -5)"
fi
# how long the request took to reach the ranks, and the checkpoint to be complete (a note)
python3 - "$T/log.1" "$T/log.agent-$victim" "$T/agent-$victim/jobs/$J/rank-0.gen-1.log" <<'PY' || true
import re, sys
from datetime import datetime
def first(path, pattern):
    for line in open(path, errors="replace"):
        if re.search(pattern, line):
            return datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
asked = first(sys.argv[1], r"asked for a checkpoint before its restart")
handed = first(sys.argv[2], r"checkpoint request \d+ handed")
heard = first(sys.argv[3], r"checkpoint request \d+: the ranks save")
done = first(sys.argv[1], r"checkpoint step \d+ saved first")
ms = lambda a, b: f"{(b - a).total_seconds() * 1000:.0f} ms"
print(f"# request: leader -> agent {ms(asked, handed)}, -> rank 0 {ms(asked, heard)}; complete {ms(asked, done)} after asking")
PY
for g in 1 2; do cat "$T/agent-$victim/jobs/$J/rank-0.gen-$g.log" "$T/agent-$other/jobs/$J/rank-0.gen-$g.log" 2>/dev/null; done >"$T/rank0"
losses_equal_after "$T/rank0" "$T/whole" "$saved" "$((saved + 100))" 1e-5 ||
	fail "losses after the restore differ from the uninterrupted run"
note "drained $victim at step >= 50: checkpoint step $saved saved first, restored on $other, restarts 0"
