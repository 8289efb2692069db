#!/usr/bin/env bash
# test_dup_name.sh: a second agent started under a live node's name is refused, instead of
# the two replacing each other's node token in turn (each registration invalidated the
# other's token, whose next heartbeat got 401 and registered again). Once the first agent
# is gone (SIGKILL) and its node has been silent for the node-suspect time, the second one
# registers and the node heartbeats again.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 1 "$(api 1)"
wait_until 15 node_state_is 1 node-a up || fail "node-a did not register"

# the impostor: same name, its own data dir (so no saved node token) and rank ports
"$YARD_AGENT" --controllers "$(api 1)" --join-token "$JOIN" --data-dir "$T/agent-dup" \
	--name node-a --devices cpu:1 --port-base "$((PORT_BASE + 90))" \
	--heartbeat-ms 200 --stop-grace-ms 1000 >>"$T/log.agent-dup" 2>&1 &
APID[dup]=$!
refusals() { grep -c "registration refused.*HTTP 409.*node node-a is live" "$T/log.agent-dup" || true; }
wait_until 15 sh -c "[ \$(grep -c 'registration refused.*HTTP 409.*node node-a is live' '$T/log.agent-dup') -ge 5 ]" ||
	fail "the second agent was not refused: $(tail -3 "$T/log.agent-dup")"
note "second agent refused $(refusals) times"
# the first agent kept its token all along
if grep -q "registering again" "$T/log.agent-node-a"; then
	fail "the first agent lost its token: $(grep 'registering again' "$T/log.agent-node-a" | head -1)"
fi
node_state_is 1 node-a up || fail "node-a not up while its agent runs: $BODY"

# the first agent dies: the second gets the name once the node has gone quiet
kill_agent node-a
wait_until 20 grep -q "registered as node-a" "$T/log.agent-dup" ||
	fail "the second agent never registered: $(tail -3 "$T/log.agent-dup")"
wait_until 15 node_state_is 1 node-a up || fail "node-a not up under its new agent: $BODY"
note "ok"
