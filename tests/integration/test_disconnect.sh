#!/usr/bin/env bash
# test_disconnect.sh: fencing by failure.stop_on_disconnect_s. One controller (which declares
# nodes down only after a minute, so that the job is not re-placed meanwhile), one agent with
# two devices, a command job F that sets stop_on_disconnect_s 2 and one K that does not.
#  1. the controller is frozen (SIGSTOP: the agent's heartbeats go unanswered, as across a
#     partition): F's rank is stopped 2 s after the last accepted heartbeat, not before, and
#     the agent says why; K's rank keeps running. Thawed, the controller sees F's rank end
#     and restarts F (restart 1 of 1); K is untouched;
#  2. frozen again, and the agent restarted meanwhile: the rank it re-adopts is fenced too
#     (the setting is kept in its state file; the clock starts with the agent).
#  3. killed and started again: the agent logs the outage once, not at every heartbeat, and
#     says when a controller answers again.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)" --node-suspect-ms 30000 --node-down-ms 60000
wait_leader 10 1 || fail "no leader"
make_join_token 1
L=$T/log.agent-node-a
start_agent node-a 2 "$(api 1)"
wait_until 60 node_state_is 1 node-a up || fail "node-a did not register: $(cat "$T/log.agent-node-a")"

loop='"command":["sh","-c","i=0; while [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done"]'
submit 1 "{\"name\":\"fenced\",\"ranks\":1,$loop,\"failure\":{\"max_restarts\":1,\"stop_on_disconnect_s\":2}}"
F=$JOB
[ "$(job_field 1 "$F" '["spec"]["failure"]["stop_on_disconnect_s"]')" = 2.0 ] ||
	fail "the stored spec does not keep stop_on_disconnect_s: $BODY"
submit 1 "{\"name\":\"kept\",\"ranks\":1,$loop}"
K=$JOB
# rank_pid JOB GENERATION: the pid the agent started (or re-adopted) rank 0 as
rank_pid() { sed -n "s/.*started rank 0 of $1 (generation $2) as pid \([0-9]*\).*/\1/p" "$L" | tail -n 1; }
has_pid() { [ -n "$(rank_pid "$1" "$2")" ]; }
wait_until 20 has_pid "$F" 1 || fail "job $F did not start: $(job_field 1 "$F" '')"
wait_until 20 has_pid "$K" 1 || fail "job $K did not start: $(job_field 1 "$K" '')"
FPID=$(rank_pid "$F" 1)
KPID=$(rank_pid "$K" 1)
wait_until 10 job_state_is 1 "$F" running || fail "job $F not running"
# fenced_after JOB PID: how long the agent said it had reached no controller when it stopped
# that rank, checked to be at least the 2 s asked for (and not much more)
fenced_after() {
	local s
	s=$(sed -n "s/.*stopping rank 0 of $1 (pid $2): no controller reached for \([0-9.]*\) s (failure.stop_on_disconnect_s 2).*/\1/p" "$L" | tail -n 1)
	python3 -c "import sys; sys.exit(0 if 2.0 <= float(sys.argv[1]) < 10 else 1)" "${s:-x}" 2>/dev/null || return 1
	echo "$s"
}

# ---- 1. frozen controller: F is fenced, K keeps running
t0=$(date +%s%N)
kill -STOP "${PID[1]}"
if ! gone_within 15 "$FPID"; then
	kill -CONT "${PID[1]}"
	fail "rank of $F (pid $FPID) still runs with no controller reachable: $(tail -n 5 "$L")"
fi
took=$((($(date +%s%N) - t0) / 1000000))
alive "$KPID" || { kill -CONT "${PID[1]}"; fail "rank of $K (pid $KPID) was stopped too"; }
kill -CONT "${PID[1]}"
after=$(fenced_after "$F" "$FPID") || fail "the agent did not say why it stopped $F, or stopped it early: $(grep "$F" "$L")"
! grep -q "stopping rank 0 of $K" "$L" || fail "the agent stopped $K: $(grep "$K" "$L")"
note "frozen controller: rank of $F fenced ${after} s after the last accepted heartbeat ($took ms after the freeze); $K kept running"

wait_until 30 has_event 1 "$F" "job.restarting: .*restart 1 of 1" || fail "job $F not restarted: $(events_of 1 "$F")"
wait_until 30 has_pid "$F" 2 || fail "job $F generation 2 did not start: $(events_of 1 "$F")"
wait_until 10 job_state_is 1 "$F" running || fail "job $F not running again: $(job_field 1 "$F" '')"
alive "$KPID" && job_state_is 1 "$K" running && [ "$(job_field 1 "$K" '["generation"]')" = 1 ] ||
	fail "job $K was disturbed: $(job_field 1 "$K" '')"

# ---- 2. frozen again, agent restarted meanwhile: the re-adopted rank is fenced too
FPID=$(rank_pid "$F" 2)
kill -STOP "${PID[1]}"
kill_agent node-a
start_agent node-a 2 "$(api 1)"
if ! wait_until 10 grep -q "re-adopted rank 0 of $F" "$L"; then
	kill -CONT "${PID[1]}"
	fail "rank of $F not re-adopted: $(tail -n 10 "$L")"
fi
if ! gone_within 15 "$FPID"; then
	kill -CONT "${PID[1]}"
	fail "re-adopted rank of $F (pid $FPID) still runs with no controller reachable: $(tail -n 5 "$L")"
fi
alive "$KPID" || { kill -CONT "${PID[1]}"; fail "re-adopted rank of $K (pid $KPID) was stopped"; }
kill -CONT "${PID[1]}"
after=$(fenced_after "$F" "$FPID") ||
	fail "the restarted agent did not say why it stopped $F, or stopped it early: $(grep "$F" "$L" | tail -n 5)"
note "agent restarted while the controller was frozen: re-adopted rank of $F fenced after ${after} s, $K kept"

# ---- 3. the controller dies and comes back: the agent says so once when its calls start to
# reach no controller and once when one answers again, not at every heartbeat (200 ms)
outage_lines() { grep -c "/v1/agents/heartbeat: no controller answered" "$L" || true; }
before=$(outage_lines)
kill_member 1
wait_until 10 sh -c "[ \$(grep -c '/v1/agents/heartbeat: no controller answered' '$L') -gt $before ]" ||
	fail "no outage logged: $(tail -n 5 "$L")"
sleep 2
start_member 1 "$(members_arg 1)" --node-suspect-ms 30000 --node-down-ms 60000
wait_until 20 grep -q "answers again, after [0-9]* call(s) that reached no controller" "$L" ||
	fail "the agent did not say the controller answers again: $(tail -n 5 "$L")"
calls=$(sed -n 's/.*answers again, after \([0-9]*\) call(s).*/\1/p' "$L" | tail -n 1)
[ "$calls" -ge 5 ] && [ "$(outage_lines)" = $((before + 1)) ] ||
	fail "an outage of $calls calls logged $(($(outage_lines) - before)) times: $(grep "no controller" "$L" | tail -n 5)"
[ "$(grep -c "watch: .*no controller answered" "$L")" -le 3 ] ||
	fail "the watch logs every failure: $(grep -c "watch: .*no controller answered" "$L")"
note "controller down for 2 s: $calls heartbeats reached none, logged once, and its return once"
