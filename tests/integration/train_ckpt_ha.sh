#!/usr/bin/env bash
# train_ckpt_ha.sh: the controller checkpoint store across a leader failover. Three
# controllers, two agents (2 CPU devices each) that know all three; a 4-rank dp 2 x pp 2
# trainer job with the controller store checkpoints every 100 steps. Once a checkpoint is
# complete, SIGKILL the leader: the agents' uploads go on through the new leader (retried,
# redirected), later checkpoints complete there with every shard, the surviving members hold
# the same replicated bytes, a shard downloaded from the new leader is intact, and the job
# succeeds without a restart.
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-worker is not built"
	exit 77
fi

M=$(members_arg 1 2 3)
# a 1 s election timeout: on a loaded 2-core CI machine two surviving members at 200 ms
# trade leadership every few seconds, which this test (about uploads, not elections) need not
for id in 1 2 3; do start_member "$id" "$M" --election-timeout-ms 1000; done
wait_leader 15 1 2 3 || fail "no leader"
make_join_token "$LEADER"
urls="$(api 1),$(api 2),$(api 3)"
start_agent node-a 2 "$urls"
start_agent node-b 2 "$urls"
wait_until 10 node_state_is "$LEADER" node-a up || fail "node-a did not register"
wait_until 10 node_state_is "$LEADER" node-b up || fail "node-b did not register"

submit "$LEADER" '{"name": "ckpt-ha",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 4, "classes": 4, "seed": 5},
 "train": {"steps": 1000, "batch_size": 32, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 3, "samples": 1024},
 "parallel": {"dp": 2, "pp": 2, "schedule": "1f1b", "micro_batches": 2},
 "checkpoint": {"every_steps": 100, "keep": 2, "store": "controller"},
 "debug": {"block_ms": 1.0},
 "failure": {"max_restarts": 0, "hang_timeout_s": 60}}'
J=$JOB
# the newest complete step on member $1 into NEWEST (no python: polls must be quick)
newest_on() {
	get "$1" "/v1/jobs/$J/checkpoints"
	NEWEST=$(grep -o '"step":[0-9]*,[^}]*"complete":true' <<<"$BODY" | sed 's/"step":\([0-9]*\).*/\1/' | sort -n | tail -n 1)
	[ -n "$NEWEST" ]
}
wait_until 60 newest_on "$LEADER" || fail "no complete checkpoint: $BODY"
before=$NEWEST

OLD=$LEADER
kill_member "$OLD"
rest=""
for id in 1 2 3; do [ "$id" = "$OLD" ] || rest="$rest $id"; done
wait_leader 10 $rest || fail "no new leader after killing $OLD"
note "leader $OLD killed with checkpoint step $before complete; $LEADER leads"

# (on a busy machine leadership may move again: each poll asks whoever leads now)
lead() { local id; for id in $rest; do is_leader "$id" && LEADER=$id && return 0; done; return 1; }
newer_than() { lead && newest_on "$LEADER" && [ "$NEWEST" -gt "$1" ]; }
wait_until 60 newer_than "$((before + 100))" || fail "no checkpoint completed through the new leader (newest $NEWEST, before $before): $BODY"
complete_event() { lead && has_event "$LEADER" "$J" "checkpoint.complete: checkpoint of job $J at step $NEWEST complete: 4 shard(s)"; }
wait_until 20 complete_event || fail "no checkpoint.complete event for step $NEWEST: $(events_of "$LEADER" "$J")"
note "checkpoint step $NEWEST complete through leader $LEADER"

# a shard from the new leader, intact (it may be pruned by a newer one meanwhile: try again)
shard_ok() {
	lead && newest_on "$LEADER" || return 1
	code=$(curl -s -o "$T/shard" -D "$T/hdr" -w '%{http_code}' -H "$AUTH" "$(api "$LEADER")/v1/jobs/$J/checkpoints/$NEWEST/shards/3")
	want=$(sed -n 's/^x-yard-sha256: *\([0-9a-f]*\).*/\1/Ip' "$T/hdr")
	[ "$code" = 200 ] && [ "$(sha256sum <"$T/shard" | cut -d' ' -f1)" = "$want" ]
}
wait_until 10 shard_ok || fail "shard 3 of step $NEWEST from the new leader: $code"

succeeded() { lead && job_state_is "$LEADER" "$J" succeeded; }
wait_until 120 succeeded || fail "job did not succeed: $(events_of "$LEADER" "$J")"
[ "$(job_field "$LEADER" "$J" '["restarts"]')" = 0 ] || fail "the job restarted: $(events_of "$LEADER" "$J")"
wait_until 20 same_digest $rest || fail "members differ: $(for id in $rest; do digest_of "$id"; done)"
note "job succeeded without a restart; members$rest hold the same checkpoints"
