#!/usr/bin/env bash
# test_dup_name.sh: a second agent started under a live node's name is refused, instead of
# the two replacing each other's node token in turn (each registration invalidated the
# other's token, whose next heartbeat got 401 and registered again). Once the first agent
# is gone (SIGKILL) and its node has been silent for the node-suspect time, the second one
# registers and the node heartbeats again. Refused registrations back off (twice as long
# each time, up to 5 s), and a name or host the controllers would refuse stops the agent at
# start.
. "$(dirname "$0")/lib.sh"

# a name outside [A-Za-z0-9._-] (or over 63 characters): exit 2 before any registration
for bad in "node a" "$(printf 'n%.0s' $(seq 70))"; do
	timeout 20 "$YARD_AGENT" --controllers http://127.0.0.1:1 --join-token x \
		--data-dir "$T/agent-bad" --name "$bad" --devices cpu:1 >"$T/log.agent-bad" 2>&1
	rc=$?
	[ "$rc" = 2 ] && grep -q -- "--name: '" "$T/log.agent-bad" ||
		fail "--name '$bad': exit $rc: $(cat "$T/log.agent-bad")"
done
# and so does a --host the controllers would refuse (it registered again and again, refused)
for bad in "bad host!" node_1 ""; do
	timeout 20 "$YARD_AGENT" --controllers http://127.0.0.1:1 --join-token x \
		--data-dir "$T/agent-bad" --name n1 --host "$bad" --devices cpu:1 >"$T/log.agent-bad" 2>&1
	rc=$?
	[ "$rc" = 2 ] && grep -qF -- "--host: '$bad' is not a host name or address" "$T/log.agent-bad" ||
		fail "--host '$bad': exit $rc: $(cat "$T/log.agent-bad")"
done

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
# each refusal waits twice as long as the one before
for wait in 0.2 0.4 0.8 1.6; do
	grep -q "node node-a is live.*(trying again in $wait s)" "$T/log.agent-dup" ||
		fail "no back-off of $wait s after a refusal: $(grep refused "$T/log.agent-dup" | head -5)"
done
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
