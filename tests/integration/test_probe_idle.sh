#!/usr/bin/env bash
# test_probe_idle.sh: a node probe that failed is not retried next to training ranks (on a
# machine busy enough to fail a probe, retries slowed the ranks and failed again for as long
# as they ran) but once no rank runs. The agent's worker is a wrapper whose probes fail until
# a rank has started (each waits for it, at most 4 s, then exits 1); a job is waiting for the
# node when the agent starts, so its rank runs when the first retry is due.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
probe_worker "$T/worker" "	if [ ! -e '$T/ranked' ]; then
		i=0; while [ ! -e '$T/ranked' ] && [ \$i -lt 40 ]; do sleep 0.1; i=\$((i + 1)); done
		exit 1
	fi"
submit 1 "{\"name\":\"waits\",\"ranks\":1,\"command\":[\"sh\",\"-c\",\"touch $T/ranked; i=0; while [ ! -e $T/done ] && [ \$i -lt 1200 ]; do sleep 0.1; i=\$((i + 1)); done\"]}"
J=$JOB
start_agent node-a 2 "$(api 1)" --worker "$T/worker" --probe-retry-ms 1000
wait_until 30 job_state_is 1 "$J" running || fail "job $J did not run: $(job_field 1 "$J" '')"
waits() { grep -q "node probe (again) waits: 1 rank(s) run" "$T/log.agent-node-a"; }
wait_until 30 waits || fail "the agent does not say the retry waits: $(grep probe "$T/log.agent-node-a" | tail -n 5)"
before=$(cat "$T/probes")
# longer than the pause before a retry (2 s) and than --probe-retry-ms
sleep 3
[ "$(cat "$T/probes")" = "$before" ] ||
	fail "probed while the rank ran ($before, then $(cat "$T/probes")): $(grep probe "$T/log.agent-node-a" | tail -n 5)"
spec='{"name":"auto","model":{"d_in":8,"d_model":16,"d_ff":32,"layers":2,"classes":4},"train":{"steps":5,"batch_size":8},"parallel":"auto"}'
call POST 1 /v1/plan "$spec"
[ "$CODE" != 200 ] || fail "planned for a node without rates: $BODY"
touch "$T/done"
wait_until 20 job_state_is 1 "$J" succeeded || fail "job $J did not end: $(job_field 1 "$J" '')"
measured() { grep -q "no rank runs any more: probing the node" "$T/log.agent-node-a" &&
	grep -q "node probe: .* GFLOP/s" "$T/log.agent-node-a"; }
wait_until 30 measured || fail "not probed once the rank ended: $(grep probe "$T/log.agent-node-a" | tail -n 5)"
[ "$(cat "$T/probes")" = $((before + 1)) ] || fail "$(cat "$T/probes") probes, want $((before + 1))"
planned() { call POST 1 /v1/plan "$spec"; [ "$CODE" = 200 ]; }
wait_until 10 planned || fail "the leader still cannot plan: $CODE $BODY"
note "$before failed probe(s) before the rank started; no retry while it ran, one once it ended"
