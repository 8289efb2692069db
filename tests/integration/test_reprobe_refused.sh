#!/usr/bin/env bash
# test_reprobe_refused.sh: figures the leader refuses while a re-probe of the node runs. The
# agent drops them (the node has no rates), and the re-probe that runs then counts as a first
# probe: when it fails, the node is probed again, as after any failed first probe, instead of
# keeping "the rates of the last probe", which are gone (which left the node without rates
# and without a retry, never planned for).
# The worker is a wrapper: its first probe that answers stops the controller (SIGSTOP) and
# reports a parallel efficiency of 0, which the leader refuses; the agent (--reprobe-s 1)
# starts a re-probe a second later while its heartbeat carrying the figures waits on the
# stopped controller. That re-probe waits until the test has continued the controller and
# seen the refusal, then fails. The probe after it reaches the leader (POST /v1/plan: 200).
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
echo "${PID[1]}" >"$T/leader.pid"
probe_worker "$T/worker" '	d=$(dirname "$0")
	if [ ! -e "$d/lied" ]; then
		out=$("$real" "$@") || exit 1
		kill -STOP "$(cat "$d/leader.pid")"
		touch "$d/lied"
		printf "%s\n" "$out" | sed "s/\"parallel_efficiency\":[-+.0-9eE]*/\"parallel_efficiency\":0/"
		exit 0
	fi
	if [ ! -e "$d/failed" ]; then
		touch "$d/reprobe-started"
		i=0
		while [ ! -e "$d/go" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
		touch "$d/failed"
		exit 1
	fi'
L=$T/log.agent-node-a
start_agent node-a 2 "$(api 1)" --worker "$T/worker" --reprobe-s 1 --probe-retry-ms 1000
wait_until 120 test -e "$T/reprobe-started" ||
	fail "no re-probe after the lying probe: $(grep -i 'probe' "$L" | tail -n 5)"
grep -q "the leader refused this node's probe figures" "$L" &&
	fail "the figures were refused before the re-probe started: $(grep -i 'probe' "$L" | tail -n 5)"
kill -CONT "${PID[1]}"
refused() { grep -q "the leader refused this node's probe figures (perf.parallel_efficiency: 0 is out of range" "$L"; }
wait_until 20 refused || fail "the agent did not drop the refused figures: $(grep -i 'probe\|HTTP 400' "$L" | tail -n 5)"
grep -q "the probe that runs now takes their place" "$L" ||
	fail "the agent did not say the running probe takes the refused figures' place: $(grep 'refused' "$L")"
touch "$T/go"
ended() { grep -q "failed (exit 1): no output\|node probe again: failed" "$L"; }
wait_until 20 ended ||
	fail "the re-probe did not end: $(grep -i 'probe' "$L" | tail -n 5)"
! grep -q "the rates of the last probe stand" "$L" ||
	fail "the failed re-probe kept rates the leader refused: $(grep -i 'probe' "$L" | tail -n 5)"
[ ! -e "$T/agent-node-a/perf.json" ] || fail "the refused figures are still saved: $(cat "$T/agent-node-a/perf.json")"
spec='{"name":"auto","model":{"d_in":8,"d_model":16,"d_ff":32,"layers":2,"classes":4},"train":{"steps":5,"batch_size":8},"parallel":"auto"}'
planned() { call POST 1 /v1/plan "$spec"; [ "$CODE" = 200 ]; }
wait_until 90 planned || fail "no probe after the failed re-probe reached the leader: $CODE $BODY; $(grep 'probe' "$L" | tail -n 5)"
[ "$(cat "$T/probes")" -ge 3 ] || fail "$(cat "$T/probes") probes, want 3 or more"
jget "$(cat "$T/agent-node-a/perf.json")" 'd["perf"]["parallel_efficiency"] > 0' | grep -qx True ||
	fail "the last probe's figures are not saved: $(cat "$T/agent-node-a/perf.json")"
note "figures refused during a re-probe: the failed re-probe was followed by a probe the leader took ($(cat "$T/probes") probes)"
