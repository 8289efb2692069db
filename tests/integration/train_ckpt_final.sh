#!/usr/bin/env bash
# train_ckpt_final.sh: a job of the "controller" checkpoint store keeps its last checkpoint.
# Its ranks write the checkpoint of their last step and exit at once, while the agent still
# uploads their shards (here every upload starts 700 ms late: YARD_TEST_UPLOAD_DELAY_MS, a
# test hook). The agent reports such an exit only once the rank's shards are stored, so the
# job succeeds after its final checkpoint is complete, not before (a finished job takes no
# more shards: they would be dropped). The wait is bounded: with --upload-wait-s 1 and
# uploads 2.5 s late, the exit is reported after 1 s, the job succeeds without its last
# checkpoint, and the agent says so.
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -x "$build/yard-worker" ] || { echo "SKIP: yard-worker is not built"; exit 77; }

cat >"$T/job.json" <<'JSON'
{"name": "final-ckpt",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 2, "classes": 4, "seed": 5},
 "train": {"steps": 40, "batch_size": 32, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 2, "samples": 512},
 "parallel": {"dp": 2, "tp": 1, "pp": 1},
 "checkpoint": {"every_steps": 20, "keep": 2, "store": "controller"}}
JSON

agent_refuses "--upload-wait-s x" "--upload-wait-s 3601" "--upload-wait-s -1"
start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1

# seq_of JOB REGEX: the sequence number of the job's first event matching REGEX ("" if none)
seq_of() {
	get 1 "/v1/events?job=$1&limit=1000"
	jget "$BODY" "next((e['seq'] for e in d['events'] if __import__('re').search(r'''$2''', e['type'] + ': ' + e['message'])), '')"
}

# ---- uploads 0.7 s late: the exits wait for them ----
export YARD_TEST_UPLOAD_DELAY_MS=700
start_agent node-a 2 "$(api 1)"
unset YARD_TEST_UPLOAD_DELAY_MS
wait_until 15 node_state_is 1 node-a up || fail "node-a did not register"
submit 1 "$(cat "$T/job.json")"
J=$JOB
wait_job_done 1 "$J" succeeded 30 120 || fail "job $J: $(job_field 1 "$J" '')"
done_seq=$(seq_of "$J" '^job.succeeded')
final_seq=$(seq_of "$J" "^checkpoint.complete: checkpoint of job $J at step 40 complete: 2 shard")
[ -n "$final_seq" ] || fail "the final checkpoint (step 40) was not stored: $(events_of 1 "$J")"
[ "$final_seq" -lt "$done_seq" ] || fail "the job ended (event $done_seq) before its final checkpoint (event $final_seq)"
grep -q "rank [01] of $J exited with code 0; its exit is reported once its [0-9]* checkpoint shard(s) are uploaded" \
	"$T/log.agent-node-a" || fail "no held exit in node-a's log"
grep -q "dropped" "$T/log.agent-node-a" && fail "node-a dropped shards: $(grep dropped "$T/log.agent-node-a")"
get 1 "/v1/jobs/$J/checkpoints"
[ "$(jget "$BODY" 'max(c["step"] for c in d["checkpoints"] if c["complete"])')" = 40 ] ||
	fail "newest complete checkpoint is not step 40: $BODY"
note "job $J: final checkpoint stored (event $final_seq) before it succeeded (event $done_seq)"
kill_agent node-a

# ---- uploads 2.5 s late, --upload-wait-s 1: the exits are reported after 1 s ----
export YARD_TEST_UPLOAD_DELAY_MS=2500
start_agent node-b 2 "$(api 1)" --upload-wait-s 1
unset YARD_TEST_UPLOAD_DELAY_MS
wait_until 15 node_state_is 1 node-b up || fail "node-b did not register"
submit 1 "$(cat "$T/job.json")"
J2=$JOB
wait_job_done 1 "$J2" succeeded 30 120 || fail "job $J2: $(job_field 1 "$J2" '')"
grep -q "rank [01] of $J2: [0-9]* checkpoint shard(s) not uploaded 1000 ms after it exited; reporting its exit" \
	"$T/log.agent-node-b" || fail "no bounded wait in node-b's log: $(grep "$J2" "$T/log.agent-node-b" | tail -5)"
[ -z "$(seq_of "$J2" "^checkpoint.complete: checkpoint of job $J2 at step 40")" ] ||
	fail "with uploads 2.5 s late and a 1 s wait, the final checkpoint was still stored before the end"
note "job $J2: the wait for uploads ended after 1 s"
