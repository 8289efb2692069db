#!/usr/bin/env bash
# test_probe_refused.sh: a probe figure the leader refuses does not cost the node its
# heartbeats. The agent's worker is a wrapper whose first probe reports a parallel efficiency
# of 0 (what a probe starved of every core once measured; the leader takes 1e-06..1): the
# leader answers each heartbeat carrying it with 400 naming the field, so the agent must drop
# the figures, heartbeat without them (the node stays up), delete them from its data dir (a
# restart must not send them again) and probe again; that probe fails, the one after it
# reaches the leader (POST /v1/plan answers 200).
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)" --node-suspect-ms 1500 --node-down-ms 3000
wait_leader 10 1 || fail "no leader"
make_join_token 1
# the lie goes into the first probe that answers (one the agent kills on a busy machine does
# not count), the next one fails
probe_worker "$T/worker" '	d=$(dirname "$0")
	if [ ! -e "$d/lied" ]; then
		out=$("$real" "$@") || exit 1
		touch "$d/lied"
		printf "%s\n" "$out" | sed "s/\"parallel_efficiency\":[-+.0-9eE]*/\"parallel_efficiency\":0/"
		exit 0
	fi
	if [ ! -e "$d/failed" ]; then touch "$d/failed"; exit 1; fi'
start_agent node-a 2 "$(api 1)" --worker "$T/worker" --probe-retry-ms 1000
wait_until 15 node_state_is 1 node-a up || fail "node-a did not register"
refused() { grep -q "the leader refused this node's probe figures (perf.parallel_efficiency: 0 is out of range" "$T/log.agent-node-a"; }
wait_until 60 refused || fail "the agent did not drop the refused figures: $(grep -i 'probe\|HTTP 400' "$T/log.agent-node-a" | tail -n 5)"
# until the probe after the failed one answers (1-2 s later), no saved rates at all
failed() { [ -e "$T/failed" ] && grep -q "failed (exit 1): no output" "$T/log.agent-node-a"; }
wait_until 30 failed || fail "the probe after the refusal did not run: $(grep -i 'probe' "$T/log.agent-node-a" | tail -n 5)"
[ ! -e "$T/agent-node-a/perf.json" ] || fail "the refused figures are still saved: $(cat "$T/agent-node-a/perf.json")"
spec='{"name":"auto","model":{"d_in":8,"d_model":16,"d_ff":32,"layers":2,"classes":4},"train":{"steps":5,"batch_size":8},"parallel":"auto"}'
planned() { call POST 1 /v1/plan "$spec"; [ "$CODE" = 200 ]; }
wait_until 60 planned || fail "the last probe's figures never reached the leader: $CODE $BODY; $(grep 'probe' "$T/log.agent-node-a" | tail -n 5)"
[ "$(cat "$T/probes")" -ge 3 ] || fail "$(cat "$T/probes") probes, want 3 or more"
jget "$(cat "$T/agent-node-a/perf.json")" 'd["perf"]["parallel_efficiency"] > 0' | grep -qx True ||
	fail "the third probe's figures are not saved: $(cat "$T/agent-node-a/perf.json")"
node_state_is 1 node-a up || fail "node-a is not up: $BODY"
get 1 "/v1/events?limit=1000"
ev=$(jget "$BODY" '"\n".join(e["message"] for e in d["events"] if e["type"] in ("node.suspect", "node.down"))')
[ -z "$ev" ] || fail "node-a lost its heartbeats over the refused figures: $ev"
n400=$(grep -c "HTTP 400: perf" "$T/log.agent-node-a" || true)
[ "$n400" -le 2 ] || fail "$n400 heartbeats refused over the figures, want 1 (2 with one in flight)"
note "the leader refused the first probe's figures $n400 time(s); the agent dropped them, stayed up and a later probe was taken"
