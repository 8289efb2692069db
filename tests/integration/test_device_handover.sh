#!/usr/bin/env bash
# test_device_handover.sh: a rank placed on a device whose previous rank is still stopping
# (within its SIGTERM grace) starts only once that rank has exited: the two would share the
# device and its rank port (port_base + device). One controller, one agent with one device.
#  1. job A, told to stop, lingers until the test has seen B wait (at most 6 s); it is
#     cancelled and job B, submitted at once, gets the same device: B starts after A's exit,
#     and the agent says why B waits;
#  2. the same with the agent SIGKILLed and restarted while A runs: the device of the rank it
#     re-adopts comes from its state file, and B waits for that rank too.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
D=$T/agent-node-a
start_agent node-a 1 "$(api 1)" --stop-grace-ms 8000
wait_until 60 node_state_is 1 node-a up || fail "node-a did not register: $(cat "$T/log.agent-node-a")"

# lingering N: a command rank that, told to stop, exits once $T/release-N exists (at most 6 s,
# within the agent's 8 s grace) and marks $T/gone-N last
lingering() {
	echo "{\"name\":\"linger-$1\",\"ranks\":1,\"command\":[\"sh\",\"-c\",\"trap 'j=0; while [ ! -e $T/release-$1 ] && [ \$j -lt 60 ]; do sleep 0.1; j=\$((j + 1)); done; touch $T/gone-$1; exit 0' TERM; touch $T/up-$1; i=0; while [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done\"]}"
}
# follower N: a command rank that records whether linger-N had exited when it started
follower() {
	echo "{\"name\":\"follow-$1\",\"ranks\":1,\"command\":[\"sh\",\"-c\",\"if [ -e $T/gone-$1 ]; then echo after; else echo before; fi > $T/order-$1\"]}"
}

# handover N: A runs, is cancelled, B is submitted at once and must start after A's exit
handover() {
	local n=$1 a=$2 b pid
	call POST 1 "/v1/jobs/$a/cancel" '{}'
	[ "$CODE" = 200 ] || fail "cancel $a: $CODE $BODY"
	submit 1 "$(follower "$n")"
	b=$JOB
	# A lingers until B has been seen waiting for it (or starting, the bug this catches)
	b_waits() { grep -q "rank 0 of $b waits for device 0" "$T/log.agent-node-a" || [ -e "$T/order-$n" ]; }
	wait_until 20 b_waits || fail "round $n: job $b neither waits nor started: $(job_field 1 "$b" '')"
	touch "$T/release-$n"
	wait_until 30 job_state_is 1 "$b" succeeded || fail "job $b did not succeed: $(job_field 1 "$b" '')"
	[ "$(cat "$T/order-$n")" = after ] ||
		fail "round $n: job $b started while the rank of $a still held the device: $(grep "$a\|$b" "$T/log.agent-node-a")"
	pid=$(sed -n "s/.*started rank 0 of $a (generation 1) as pid \([0-9]*\).*/\1/p" "$T/log.agent-node-a" | tail -n 1)
	grep -q "rank 0 of $b waits for device 0: rank 0 of $a (pid ${pid:-?}) is stopping" "$T/log.agent-node-a" ||
		fail "round $n: the agent did not say why $b waits: $(grep "$a\|$b" "$T/log.agent-node-a")"
	# once, not on every heartbeat of the wait
	[ "$(grep -c "rank 0 of $b waits for device 0" "$T/log.agent-node-a")" = 1 ] ||
		fail "round $n: the wait was logged more than once: $(grep "waits for device" "$T/log.agent-node-a")"
	B_JOB=$b
}

# ---- 1. a stopping rank of another job holds the device
submit 1 "$(lingering 1)"
A=$JOB
wait_until 20 test -e "$T/up-1" || fail "job $A did not start: $(job_field 1 "$A" '')"
grep -q "\"job\":\"$A\".*\"device\":0" "$D/ranks.json" || fail "ranks.json does not keep the device: $(cat "$D/ranks.json")"
handover 1 "$A"
note "round 1: $B_JOB started after $A's rank exited ($(grep -c "waits for device" "$T/log.agent-node-a") wait logged)"

# ---- 2. the same after an agent restart: the re-adopted rank's device is known
submit 1 "$(lingering 2)"
A=$JOB
wait_until 20 test -e "$T/up-2" || fail "job $A did not start: $(job_field 1 "$A" '')"
kill_agent node-a
start_agent node-a 1 "$(api 1)" --stop-grace-ms 8000
wait_until 15 grep -q "re-adopted rank 0 of $A" "$T/log.agent-node-a" || fail "rank of $A not re-adopted: $(tail -n 20 "$T/log.agent-node-a")"
handover 2 "$A"
note "round 2 (agent restarted): $B_JOB started after the re-adopted rank of $A exited"
