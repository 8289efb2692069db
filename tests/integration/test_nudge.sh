#!/usr/bin/env bash
# test_nudge.sh: what rides on a heartbeat answer reaches an agent that heartbeats rarely (as
# the leader of a large cluster asks: 5 s apart at 10,000 nodes) through its watch, not at
# its next heartbeat. One controller, two agents heartbeating every 60 s with their watches
# (the default); node failure detection set far beyond that:
#  1. a drain of node-1: its agent hears of it within 5 s;
#  2. a rollout to both nodes: each agent gets the upgrade offer within 5 s of the rollout's
#     start, and the rollout completes well before a heartbeat interval;
# yard_node_nudges_total counts the nudges. Without them both wait for a heartbeat (0-60 s).
. "$(dirname "$0")/lib.sh"

YARDCTL=${YARDCTL:-yardctl}
MARK_BUILD=${MARK_BUILD:-$top_srcdir/scripts/mark-build}
AGENT_BIN=$(command -v "$YARD_AGENT")
trap 'cleanup_upgraded_agents; cleanup_agents; cleanup' EXIT

start_member 1 "$(members_arg 1)" --node-suspect-ms 100000 --node-down-ms 200000
wait_leader 10 1 || fail "no leader"
make_join_token 1
for i in 1 2; do start_agent "node-$i" 1 "$(api 1)" --heartbeat-ms 60000; done
for i in 1 2; do wait_until 10 node_state_is 1 "node-$i" up || fail "node-$i did not register"; done
watching() { [ "$(metric 1 yard_agent_watches)" = 2 ]; }
wait_until 10 watching || fail "the agents do not watch: $(curl -s -H "$AUTH" "$(api 1)/metrics" | grep yard_agent_watch)"
ctl() { "$YARDCTL" --endpoints "$(api 1)" --token "$TOKEN" "$@"; }
logged() { grep -q "$2" "$T/log.agent-$1"; }

# ---- 1. a drain ----
t0=$(now_ms)
ctl node drain node-1 >"$T/out" 2>&1 || fail "node drain: $(cat "$T/out")"
wait_until 20 logged node-1 "this node is being drained" ||
	fail "node-1's agent did not hear of its drain within 20 s (heartbeat every 60 s): $(tail -n 5 "$T/log.agent-node-1")"
note "node-1's agent heard of its drain $(($(now_ms) - t0)) ms after it was asked"
logged node-1 "the watch's answer asks for a heartbeat now" || fail "node-1's drain did not come through its watch"
[ "$(metric 1 yard_node_nudges_total)" -ge 1 ] || fail "no nudge counted"

# ---- 2. a rollout's offer ----
mkdir -p "$T/builds"
"$MARK_BUILD" "$AGENT_BIN" "$T/builds/2.0.0-next" --version 2.0.0-next >/dev/null || fail "mark-build"
ctl build upload "$T/builds/2.0.0-next" --version 2.0.0-next --component agent >"$T/out" 2>&1 || fail "upload: $(cat "$T/out")"
nudges=$(metric 1 yard_node_nudges_total)
t0=$(now_ms)
call POST 1 /v1/rollouts '{"build":"2.0.0-next","waves":"100%","soak_s":1,"gate_timeout_s":60}'
[ "$CODE" = 201 ] || fail "rollout: $CODE $BODY"
RO=$(jget "$BODY" 'd["id"]')
for i in 1 2; do
	wait_until 20 logged "node-$i" "upgrade to 2.0.0-next offered by rollout $RO" ||
		fail "node-$i's agent did not get the offer within 20 s of the rollout's start: $(tail -n 5 "$T/log.agent-node-$i")"
done
note "both agents got the upgrade offer within $(($(now_ms) - t0)) ms of the rollout's start"
ro_done() { get 1 "/v1/rollouts/$RO"; [ "$(jget "$BODY" 'd["state"]')" = completed ]; }
wait_until 30 ro_done || fail "rollout $RO did not complete within 30 s: $BODY"
note "rollout $RO completed $(($(now_ms) - t0)) ms after it began"
[ "$(metric 1 yard_node_nudges_total)" -gt "$nudges" ] || fail "the offer was not a nudge"
echo "PASS"
