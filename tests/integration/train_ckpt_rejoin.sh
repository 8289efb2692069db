#!/usr/bin/env bash
# train_ckpt_rejoin.sh: a node that dies and comes back keeps the checkpoint it downloads.
# One controller, two agents with 2 CPU devices each, a dp 2 × pp 2 job of the built-in
# trainer with the "controller" checkpoint store. node-a's agent and ranks are SIGKILLed;
# once node-a is down and the job waits for devices, its agent starts again: it re-reads its
# dead ranks from ranks.json (generation 1, kept until their logs are sent again), and the
# job is re-placed on both nodes at its registration, node-a downloading the shards of the
# newest checkpoint into the same directory for generation 2 while those entries remain.
# Generation 1's dead ranks must not upload those files (the controller refuses an older
# generation's shard, and the file would be dropped under generation 2's rank, which then
# cannot restore: "cannot open checkpoint shard"). Asserted: the job succeeds after one
# restart, generation 2 restored and ran, and no rank failed to open a shard.
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -x "$build/yard-worker" ] || { echo "SKIP: yard-worker is not built"; exit 77; }

cat >"$T/job.json" <<'JSON'
{"name": "rejoin",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 4, "classes": 4, "seed": 3},
 "train": {"steps": 400, "batch_size": 64, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 1, "samples": 1024},
 "parallel": {"dp": 2, "tp": 1, "pp": 2, "schedule": "1f1b", "micro_batches": 2},
 "checkpoint": {"every_steps": 20, "keep": 2, "store": "controller"},
 "failure": {"max_restarts": 5, "hang_timeout_s": 60}}
JSON
# paced (results do not change) so that the kill lands mid-run on any machine
pace_spec "$T/job.json" 1

start_member 1 "$(members_arg 1)" --node-suspect-ms 1500 --node-down-ms 3000 --restart-backoff-ms 200
wait_leader 10 1 || fail "no leader"
make_join_token 1
for n in node-a node-b; do start_agent "$n" 2 "$(api 1)"; done
for n in node-a node-b; do wait_until 15 node_state_is 1 "$n" up || fail "$n did not register"; done
submit 1 "$(cat "$T/job.json")"
J=$JOB
two_ranks() { [ "$(grep -o '"pid":[1-9]' "$T/agent-node-a/ranks.json" 2>/dev/null | wc -l)" = 2 ]; }
wait_until 20 two_ranks || fail "node-a does not run 2 ranks: $(cat "$T/agent-node-a/ranks.json")"
wait_until 60 store_ckpt_at_least 1 "$J" 40 || fail "no complete checkpoint at step 40 or later"

# node-a dies (agent and ranks); once it is down and the job waits, its agent is back on the
# same data dir
ranks=$(grep -o '"pid":[0-9]*' "$T/agent-node-a/ranks.json" | cut -d: -f2 | tr '\n' ' ')
kill_agent node-a
for p in $ranks; do kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null; done
wait_until 20 node_state_is 1 node-a down || fail "node-a not down after the kill"
waiting() { has_event 1 "$J" "^job.waiting: job $J: needs 4 devices"; }
wait_until 20 waiting || fail "the job does not wait for devices: $(events_of 1 "$J" | grep -v checkpoint.complete)"
# --log-ship-bytes 1024: the dead ranks' logs go out slowly, so their entries stay (at most
# 20 heartbeats) while generation 2 restores and writes its first checkpoints
start_agent node-a 2 "$(api 1)" --log-ship-bytes 1024
note "killed node-a's agent and ranks ($ranks); started its agent again once the job waited"

wait_job_done 1 "$J" succeeded 60 300 || fail "job $J: $(events_of 1 "$J" | grep -v checkpoint.complete)"
events=$(events_of 1 "$J")
restored=$(sed -n 's/.*re-placed (generation 2).*restoring from checkpoint step \([0-9]*\).*/\1/p' <<<"$events")
[ -n "$restored" ] || fail "generation 2 restored no checkpoint: $(grep -v checkpoint.complete <<<"$events")"
grep -q "job $J generation 2: [0-9]* shard(s) of checkpoint step $restored downloaded and verified" \
	"$T/log.agent-node-a" || fail "node-a did not download step $restored: $(grep -i checkpoint "$T/log.agent-node-a" | tail -5)"
if grep -l "cannot open checkpoint shard" "$T"/agent-*/jobs/"$J"/rank-*.log >/dev/null 2>&1; then
	fail "a rank could not open its restored shard: $(grep -h "cannot open checkpoint shard" "$T"/agent-*/jobs/"$J"/rank-*.log | head -2); node-a: $(grep -i "dropped" "$T/log.agent-node-a" | head -3)"
fi
if grep -q "dropped: declare: HTTP 409" "$T/log.agent-node-a"; then
	fail "node-a dropped generation 2's shards as generation 1's: $(grep "dropped" "$T/log.agent-node-a" | head -3)"
fi
[ "$(job_field 1 "$J" '["restarts"]')" = 1 ] ||
	fail "$(job_field 1 "$J" '["restarts"]') restarts, not 1: $(grep -v checkpoint.complete <<<"$events")"
note "job $J: node-a rejoined; generation 2 restored step $restored there and the job succeeded after one restart"
