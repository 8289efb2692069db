#!/usr/bin/env bash
# test_probe_resume.sh: an agent that restarts while its node trains does not probe the node
# (seconds of matmuls on the devices the ranks use) but takes the rates it saved in its data
# dir, sends them to a leader that has lost them, and measures again once no rank runs.
# Saved rates that do not fit are set aside with a warning, and the node is probed once no
# rank runs while the leader has rates for it, at once when it has none.
. "$(dirname "$0")/lib.sh"
start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
probe_worker "$T/worker" ''
A=(node-a 2 "$(api 1)" --worker "$T/worker" --reprobe-s 3 --probe-retry-ms 1000)
start_agent "${A[@]}"
saved() { [ -s "$T/agent-node-a/perf.json" ]; }
wait_until 90 saved || fail "no rates saved: $(grep probe "$T/log.agent-node-a" | tail -n 3)"
# one probe, or more where a busy machine made the agent kill the first (5 s)
[ "$(cat "$T/probes")" -ge 1 ] || fail "no probe at start"
jget "$(cat "$T/agent-node-a/perf.json")" 'd["perf"]["flops_per_s"] > 0 and d["devices"] == 2' |
	grep -qx True || fail "saved: $(cat "$T/agent-node-a/perf.json")"

# a job whose rank trains (here: waits) until told to stop, bounded
run_job() {
	rm -f "$T/done"
	submit 1 "{\"name\":\"$1\",\"ranks\":1,\"command\":[\"sh\",\"-c\",\"i=0; while [ ! -e $T/done ] && [ \$i -lt 1200 ]; do sleep 0.1; i=\$((i + 1)); done\"]}"
	J=$JOB
	wait_until 20 job_state_is 1 "$J" running || fail "job $J did not run: $(job_field 1 "$J" '')"
}
run_job first
at_kill=$(cat "$T/probes")
# the agent and the controller die (the new leader knows no rates); the rank runs on
kill_agent node-a
kill_member 1
start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader after the restart"
start_agent "${A[@]}"
perf_known() { get 1 /v1/nodes/node-a; jget "$BODY" 'd.get("perf", {}).get("flops_per_s", 0) > 0' | grep -qx True; }
wait_until 20 perf_known || fail "the leader has no rates for node-a: $BODY"
grep -q "re-adopted rank 0 of $J" "$T/log.agent-node-a" || fail "the rank was not re-adopted"
grep -q "node probe: 1 rank(s) re-adopted: using the rates measured [0-9]* s ago" "$T/log.agent-node-a" ||
	fail "the agent does not say it used its saved rates: $(grep probe "$T/log.agent-node-a" | tail -n 3)"
# older than --reprobe-s while the rank runs: still no probe
sleep 4
[ "$(cat "$T/probes")" = "$at_kill" ] || fail "the node was probed while its rank ran: $(grep probe "$T/log.agent-node-a" | tail -n 3)"
touch "$T/done"
wait_until 20 job_state_is 1 "$J" succeeded || fail "job $J did not end: $(job_field 1 "$J" '')"
reprobed() { [ "$(cat "$T/probes")" -gt "$at_kill" ] && grep -q "node probe again (no rank runs)" "$T/log.agent-node-a"; }
wait_until 90 reprobed || fail "not measured again once no rank ran: $(grep probe "$T/log.agent-node-a" | tail -n 3)"
note "restarted while its rank ran: saved rates sent to a new leader, no probe until the rank ended"

# saved rates that do not fit: set aside with a warning naming why, and, since the leader has
# rates for the node, which it plans with meanwhile, the node is probed once its rank ended,
# not while it runs
warnings() { grep -c "no saved rates to use (.*perf.json: " "$T/log.agent-node-a" || true; }
for bad in 'not json' '{"measured_unix_ms":1,"devices":4,"kind":"cpu","perf":{"flops_per_s":1e9}}'; do
	run_job "bad"
	kill_agent node-a
	before=$(cat "$T/probes") warned_before=$(warnings)
	printf '%s' "$bad" >"$T/agent-node-a/perf.json"
	start_agent "${A[@]}"
	warned() { [ "$(warnings)" -gt "$warned_before" ]; }
	wait_until 20 warned || fail "no warning for perf.json '$bad': $(grep probe "$T/log.agent-node-a" | tail -n 3)"
	waits() { [ "$(grep -c "node probe (no saved rates) waits: 1 rank(s) run" "$T/log.agent-node-a")" -gt "$warned_before" ]; }
	wait_until 10 waits || fail "the agent does not say the probe waits: $(grep probe "$T/log.agent-node-a" | tail -n 3)"
	sleep 2
	[ "$(cat "$T/probes")" = "$before" ] ||
		fail "with perf.json '$bad' the node was probed while its rank ran: $(grep probe "$T/log.agent-node-a" | tail -n 3)"
	perf_known || fail "the leader lost node-a's rates: $BODY"
	touch "$T/done"
	wait_until 20 job_state_is 1 "$J" succeeded || fail "job $J did not end: $(job_field 1 "$J" '')"
	probed() { [ "$(cat "$T/probes")" -gt "$before" ] && grep -q "no rank runs any more: probing" "$T/log.agent-node-a"; }
	wait_until 30 probed || fail "with perf.json '$bad' the node was not probed once its rank ended"
	resaved() { jget "$(cat "$T/agent-node-a/perf.json")" 'd["devices"] == 2' | grep -qx True; }
	wait_until 90 resaved || fail "the new rates were not saved: $(cat "$T/agent-node-a/perf.json")"
done
grep -q "rates of 4 cpu device(s), this node has 2 cpu" "$T/log.agent-node-a" ||
	fail "the device count was not named: $(grep probe "$T/log.agent-node-a" | tail -n 5)"
note "unreadable saved rates and rates of another device count: a warning each, probed once the rank ended"

# no saved rates and a leader without rates either (it restarted): the node is probed while
# its rank runs, since the leader does not plan for a node without rates
run_job "no-rates"
kill_agent node-a
before=$(cat "$T/probes")
rm -f "$T/agent-node-a/perf.json"
kill_member 1
start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader after the second restart"
start_agent "${A[@]}"
probed_running() { [ "$(cat "$T/probes")" -gt "$before" ] &&
	grep -q "node probe (deferred) while 1 rank(s) run: the leader has no rates" "$T/log.agent-node-a"; }
wait_until 30 probed_running || fail "not probed for a leader without rates: $(grep probe "$T/log.agent-node-a" | tail -n 3)"
job_state_is 1 "$J" running || fail "job $J is not running: $(job_field 1 "$J" '')"
wait_until 90 perf_known || fail "the leader got no rates for node-a: $BODY"
touch "$T/done"
wait_until 20 job_state_is 1 "$J" succeeded || fail "job $J did not end: $(job_field 1 "$J" '')"
note "no saved rates, a leader without rates: probed while the rank ran, and the leader got them"
