#!/usr/bin/env bash
# test_bad_reports.sh: a rank's step reports are its program's word. Lines the controller
# would refuse in a heartbeat (a negative step, a step past 2^53 or not an integer, a loss
# past 1e300, a negative or absurd timing, not an object, not JSON) are dropped by the agent,
# which names the rank and what is wrong; the node's heartbeats go on being accepted (no
# 400: a node whose heartbeats are refused goes down with every job on it), the job keeps
# running, and a good report after them arrives. yard-report waits for the agent's answer:
# it exits 0 for a line applied, 4 naming the problem for a line dropped, and 4 when it is not
# in a rank's session at all. One controller, one agent.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)" --node-suspect-ms 2000 --node-down-ms 4000
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 1 "$(api 1)"
wait_until 15 node_state_is 1 node-a up || fail "node-a did not register"

# each line is sent once the test has seen the agent's heartbeats accepted after the one
# before (the file next.K), so every bad line has heartbeats of its own
cat >"$T/lines" <<'LINES'
{"step":3,"loss":0.5,"step_ms":10,"compute_ms":8,"comm_wait_ms":1}
{"step":-5,"loss":0.5}
{"step":9007199254740993}
{"step":4,"loss":1e308}
{"step":4,"step_ms":-1}
{"step":4,"compute_ms":2e9}
{"step":4,"comm_wait_ms":"slow"}
[4]
step 4
{"step":4.5}
{"step":9,"loss":0.25,"step_ms":10,"compute_ms":8,"comm_wait_ms":1}
LINES
cat >"$T/rank.sh" <<'SCRIPT'
echo "${YARD_AGENT_ANSWERS-unset}" >"$OUT/answers"
k=0
while IFS= read -r line; do
	k=$((k + 1))
	i=0
	while [ ! -e "$OUT/next.$k" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	# exit 3: the agent did not read it within 15 s (a loaded machine); it cannot tell
	# whose a datagram read after its sender exited, so the line goes again
	t=0
	while yard-report --json "$line" 2>>"$OUT/report.err"; rc=$?; [ $rc = 3 ] && [ $t -lt 10 ]; do
		t=$((t + 1))
	done
	echo "$rc" >>"$OUT/codes"
done <"$OUT/lines"
i=0
while [ ! -e "$OUT/done" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
SCRIPT
submit 1 "{\"name\":\"reporter\",\"ranks\":1,\"command\":[\"sh\",\"$T/rank.sh\"],\"env\":{\"OUT\":\"$T\"},\"failure\":{\"max_restarts\":0}}"
J=$JOB
wait_until 20 job_state_is 1 "$J" running || fail "job did not start: $(job_field 1 "$J" '')"

count() { curl -s -H "$AUTH" "$(api 1)/metrics" | awk -v p="$1" 'index($0, p) == 1 { n += $NF } END { print n + 0 }'; }
accepted() { count 'yard_http_requests_total{route="POST /v1/agents/heartbeat",code="200"}'; }
refused() { count 'yard_http_requests_total{route="POST /v1/agents/heartbeat",code="4'; }
accepted_at_least() { [ "$(accepted)" -ge "$1" ]; }
n=$(wc -l <"$T/lines")
for k in $(seq 1 "$n"); do
	touch "$T/next.$k"
	h=$(accepted)
	wait_until 10 accepted_at_least $((h + 3)) ||
		fail "after line $k ($(sed -n "${k}p" "$T/lines")) the agent's heartbeats are no longer accepted: $(refused) refused"
done
[ "$(refused)" = 0 ] || fail "$(refused) heartbeat(s) refused"
step_is() { [ "$(job_field 1 "$J" '.get("step", 0)')" = "$1" ]; }
wait_until 10 step_is 9 || fail "the good report after the bad ones did not arrive: $(job_field 1 "$J" '')"
for what in "step: must be an integer from 0 to 2^53" "loss: must be a number within" \
	"step_ms: must be a number from 0 to 1e9" "compute_ms: must be" "comm_wait_ms: must be" \
	"not one JSON object" "not JSON"; do
	grep -q "rank 0 of $J (generation 1): report dropped: $what" "$T/log.agent-node-a" ||
		fail "the agent did not name '$what'"
done
# the ninth is dropped without a message
[ "$(grep -c "report dropped" "$T/log.agent-node-a")" = 8 ] || fail "not one message per bad line up to 8"
grep -q "its later bad reports are dropped without a message" "$T/log.agent-node-a" || fail "no last message"
[ "$(cat "$T/answers")" = 1 ] || fail "the rank's YARD_AGENT_ANSWERS: $(cat "$T/answers") (want 1)"
[ "$(tr '\n' ' ' <"$T/codes")" = "0 4 4 4 4 4 4 4 4 4 0 " ] ||
	fail "yard-report's exit codes: $(tr '\n' ' ' <"$T/codes") (want 0, nine 4s, 0)"
grep -q "yard-report: the agent refused: loss: must be a number within +-1e300" "$T/report.err" ||
	fail "yard-report did not say why the agent refused a line: $(cat "$T/report.err")"
# a process outside every rank's session is told so
rc=0
YARD_AGENT_SOCK="$T/agent-node-a/agent.sock" YARD_AGENT_ANSWERS=1 yard-report 5 2>"$T/outsider.err" || rc=$?
[ "$rc" = 4 ] && grep -q "is not a rank of this agent nor in a rank's session" "$T/outsider.err" ||
	fail "a report from outside the ranks: exit $rc, $(cat "$T/outsider.err")"
node_state_is 1 node-a up || fail "node-a is not up"
[ "$(job_field 1 "$J" '["generation"]')" = 1 ] || fail "the job was restarted"
touch "$T/done"
wait_until 20 job_state_is 1 "$J" succeeded || fail "job did not end: $(job_field 1 "$J" '')"
note "9 bad report lines dropped and named; every heartbeat accepted; the good report after them arrived"
