#!/usr/bin/env bash
# test_probe_retry.sh: a node probe that fails does not leave the node unplanned for good.
# The agent's worker is a wrapper whose first two probes hang (killed after 5 s, then after
# 10 s: each attempt gets twice the time of the one before) and whose third exits 1 at once;
# the fourth, --probe-retry-ms later, runs the real probe. The node's rates must then reach
# the leader: POST /v1/plan answers 200 instead of naming the node as unmeasured.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
probe_worker "$T/worker" '	[ $n -le 2 ] && exec sleep 60
	[ $n -eq 3 ] && exit 1'
start_agent node-a 2 "$(api 1)" --worker "$T/worker" --probe-retry-ms 1000
wait_until 15 node_state_is 1 node-a up || fail "node-a did not register"
spec='{"name":"auto","model":{"d_in":8,"d_model":16,"d_ff":32,"layers":2,"classes":4},"train":{"steps":5,"batch_size":8},"parallel":"auto"}'
call POST 1 /v1/plan "$spec"
[ "$CODE" != 200 ] || fail "planned before any probe answered: $BODY"
measured() { grep -q "node probe: .* GFLOP/s" "$T/log.agent-node-a"; }
wait_until 120 measured || fail "the node probe never succeeded: $(grep 'probe' "$T/log.agent-node-a" | tail -n 5)"
for what in "still running after 5000 ms" "still running after 10000 ms" "attempt 3) failed" \
	"trying again in 1000 ms (until then heartbeats carry no perf"; do
	grep -q "$what" "$T/log.agent-node-a" || fail "the agent's log does not say '$what'"
done
[ "$(cat "$T/probes")" -ge 4 ] || fail "$(cat "$T/probes") probes, want 4 (more where the real probe failed on a busy machine)"
planned() { call POST 1 /v1/plan "$spec"; [ "$CODE" = 200 ]; }
wait_until 10 planned || fail "the leader still cannot plan: $CODE $BODY"
note "probes: hung (killed at 5 s), hung (killed at 10 s), failed, ran: the node's rates reached the leader"
