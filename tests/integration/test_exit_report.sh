#!/usr/bin/env bash
# test_exit_report.sh: a rank's exit reaches the controller with an early heartbeat, not with
# the next regular one. One controller, one agent heartbeating every 6 s (the controller
# judges nodes on a longer scale, so the agent stays up); a 1-rank job that runs 1 s must be
# seen succeeded well before the agent's next regular heartbeat (6 s after the one that
# started it), and a second job that follows on the freed device starts the same way.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)" --node-suspect-ms 30000 --node-down-ms 60000
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 1 "$(api 1)" --heartbeat-ms 6000
write_rank_script
wait_until 15 node_state_is 1 node-a up || fail "node-a did not register"

started() { grep -q "started rank 0 of $1 " "$T/log.agent-node-a"; }
for name in first second; do
	submit 1 "{\"name\":\"$name\",\"ranks\":1,$(cmd sleep 1),\"failure\":{\"max_restarts\":0}}"
	# the agent learns of the job from a regular heartbeat's answer (up to 6 s)
	wait_until 15 started "$JOB" || fail "$name: rank never started: $(job_field 1 "$JOB" '')"
	t0=$(now_ms)
	wait_until 20 job_state_is 1 "$JOB" succeeded || fail "$name: $(job_field 1 "$JOB" '')"
	took=$(($(now_ms) - t0))
	note "$name: rank started -> job succeeded in $took ms (rank runs 1000 ms; regular heartbeat every 6000 ms)"
	# without the early heartbeat the exit waits for the regular one, 6 s after the start
	[ "$took" -lt 4500 ] || fail "$name: the exit was reported with the regular heartbeat ($took ms)"
done
grep -q "exited: code 0" "$T/log.agent-node-a" || fail "no exit in the agent's log"
note "ok"
