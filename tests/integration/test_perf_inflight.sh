#!/usr/bin/env bash
# test_perf_inflight.sh: rates measured while a heartbeat is on its way reach the leader. The
# answer to a heartbeat sent before a probe ended says "want_perf": false (the leader has the
# old rates); that answer must not stop the new rates from going with the next heartbeat
# (it did: the leader kept the old rates until the node's next probe, an hour later by
# default; test_reprobe.sh failed on it once under load).
# The worker is a wrapper: the probe the test asks for (POST /v1/nodes/node-a/probe, after the
# test created $T/asked; the first probe may take several attempts on a loaded machine, each
# one killed at the agent's probe timeout) measures the node, then stops the controller
# (SIGSTOP) and waits until the agent's next heartbeat, without the new rates, is on its way
# to it, then answers rates of its own (flops_per_s 1234567890.5). The test continues the
# controller once the agent has logged them.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
echo "${PID[1]}" >"$T/leader.pid"
probe_worker "$T/worker" '	d=$(dirname "$0")
	if [ -e "$d/asked" ] && [ ! -d "$d/stopping" ]; then
		out=$("$real" "$@") || exit 1 # (an attempt killed at the timeout leaves no mark)
		mkdir "$d/stopping"
		kill -STOP "$(cat "$d/leader.pid")"
		sleep 0.6 # heartbeats go every 200 ms: one is sent and waits on the stopped controller
		printf "%s\n" "$out" | sed "s/\"flops_per_s\":[-+.0-9eE]*/\"flops_per_s\":1234567890.5/"
		exit 0
	fi'
L=$T/log.agent-node-a
start_agent node-a 1 "$(api 1)" --worker "$T/worker"
flops() { get 1 /v1/nodes/node-a; jget "$BODY" 'repr(d["perf"]["flops_per_s"])'; }
wait_until 60 flops || fail "the leader has no rates for node-a: $BODY; $(grep -i probe "$L")"
first=$(flops)
before=$(cat "$T/probes")
: >"$T/asked"
call POST 1 /v1/nodes/node-a/probe ''
[ "$CODE" = 202 ] || fail "POST /v1/nodes/node-a/probe: $CODE $BODY"
measured() { grep -q "node probe again (no rank runs): 1.2 GFLOP/s" "$L"; }
wait_until 60 measured || { kill -CONT "${PID[1]}"; fail "the asked probe did not end: $(grep -i probe "$L")"; }
kill -CONT "${PID[1]}"
new() { [ "$(flops)" = 1234567890.5 ]; }
wait_until 10 new || fail "the leader kept the rates from before the probe ($(flops), first $first): $(grep -i probe "$L")"
[ "$(cat "$T/probes")" = $((before + 1)) ] || fail "$(cat "$T/probes") probes, want $((before + 1)) ($before before the one asked)"
note "rates measured while a heartbeat waited on the controller reached the leader: flops_per_s $first -> $(flops)"
