#!/usr/bin/env bash
# test_heartbeat_pace.sh: the leader keeps all nodes' heartbeats within
# --max-heartbeats-per-s by asking each agent for a longer interval, and the agents follow.
# One controller allowing 1 heartbeat a second in all (suspect 1.5 s, down 3 s configured),
# two agents started with --heartbeat-ms 200: each is asked for 2 s between heartbeats.
# Bad values of the flag are refused by name.
#  1. both agents say they follow it (and /v1/cluster, yardctl cluster status and /metrics
#     show the pace), and the controller counts about one heartbeat a second
#     from the two (ten a second each without it) while both stay up: silence is judged by
#     the longer interval (suspect after 6 s, down after 12 s), not the configured 1.5 s;
#  2. a job whose failure.stop_on_disconnect_s (1 s) is below that interval is not fenced
#     between heartbeats, and a rank's exit still brings its heartbeat forward.
. "$(dirname "$0")/lib.sh"

# a bad value is refused by name before anything starts
for bad in -1 x 1.5 10000001; do
	if out=$("$YARDD" --max-heartbeats-per-s "$bad" 2>&1); then fail "--max-heartbeats-per-s $bad accepted"; fi
	grep -q "^yardd: --max-heartbeats-per-s: '$bad' is not 0\.\.10000000" <<<"$out" ||
		fail "--max-heartbeats-per-s $bad: $out"
done

start_member 1 "$(members_arg 1)" --node-suspect-ms 1500 --node-down-ms 3000 \
	--max-heartbeats-per-s 1
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 1 "$(api 1)"
start_agent node-b 1 "$(api 1)"
write_rank_script
wait_until 20 node_state_is 1 node-a up || fail "node-a did not register"
wait_until 20 node_state_is 1 node-b up || fail "node-b did not register"

follows() { grep -q "heartbeats 2000 ms apart from now (the leader asks for at least 2000 ms" "$T/log.agent-$1"; }
wait_until 20 follows node-a || fail "node-a does not follow the leader's interval: $(tail -5 "$T/log.agent-node-a")"
wait_until 20 follows node-b || fail "node-b does not follow the leader's interval: $(tail -5 "$T/log.agent-node-b")"
get 1 /v1/cluster
[ "$(jget "$BODY" 'd["heartbeats"]')" = '{"nodes": 2, "max_heartbeats_per_s": 1, "heartbeat_min_ms": 2000, "node_suspect_ms": 6000, "node_down_ms": 12000, "node_restart_grace_ms": 10000}' ] ||
	fail "/v1/cluster heartbeats: $BODY"
export YARD_ENDPOINTS=$(api 1) YARD_TOKEN=$TOKEN
yardctl cluster status | grep -q "^heartbeats   at least 2.0 s apart asked of each of 2 nodes (at most 1 a second in all; 0: no bound); suspect after 6.0 s, down after 12.0 s (10.0 s more while an agent restarts into a new build)$" ||
	fail "yardctl cluster status: $(yardctl cluster status)"
[ "$(metric 1 yard_heartbeat_min_interval_seconds)" = 2.000 ] ||
	fail "yard_heartbeat_min_interval_seconds: $(metric 1 yard_heartbeat_min_interval_seconds)"
[ "$(metric 1 yard_node_suspect_seconds)" = 6.000 ] && [ "$(metric 1 yard_node_down_seconds)" = 12.000 ] ||
	fail "suspect/down: $(metric 1 yard_node_suspect_seconds) / $(metric 1 yard_node_down_seconds)"

# 1. the rate over a 6 s window (the window is the measurement): ~6 heartbeats at 2 s each,
#    60 at the agents' own 200 ms
beats() {
	curl -s -H "$AUTH" "$(api 1)/metrics" |
		grep -F 'yard_http_requests_total{route="POST /v1/agents/heartbeat",code="200"}' |
		awk '{ print $NF }'
}
n0=$(beats)
sleep 6
n1=$(beats)
count=$((n1 - n0))
note "heartbeats from 2 agents in 6 s: $count (asked for one every 2 s each)"
[ "$count" -ge 3 ] && [ "$count" -le 12 ] || fail "$count heartbeats in 6 s from 2 agents asked for 2 s"
node_state_is 1 node-a up && node_state_is 1 node-b up || fail "a node is not up"
get 1 "/v1/events?limit=1000"
bad=$(jget "$BODY" '" | ".join(e["message"] for e in d["events"] if e["type"] in ("node.suspect", "node.down"))')
[ -z "$bad" ] || fail "nodes were judged by the configured times: $bad"

# 2. fencing waits for a heartbeat that is due; an exit is still reported early
submit 1 "{\"name\":\"fenced\",\"ranks\":1,$(cmd sleep 5),\"failure\":{\"max_restarts\":0,\"stop_on_disconnect_s\":1}}"
wait_until 30 job_state_is 1 "$JOB" succeeded ||
	fail "the 5 s job did not succeed: $(job_field 1 "$JOB" '') $(grep -h "no controller reached" "$T"/log.agent-node-* | head -3)"
! grep -q "no controller reached" "$T"/log.agent-node-* || fail "a rank was fenced between heartbeats"
note "ok"
