#!/usr/bin/env bash
# test_topology.sh: nodes labelled with their switch (yard-agent --label switch=NAME, yardd
# --topology-label, "switch" by default) keep a gang within one switch whenever one has
# room: the switch with the least room that holds it (best fit, which keeps the other whole
# for a larger gang), even where "most free devices first" alone would cross switches. An
# agent restarted with other labels registers again and the controllers take them; bad
# labels stop the agent at start. /metrics counts the placements within one switch and across.
. "$(dirname "$0")/lib.sh"

agent_refuses "--label switch" "--label =s1" "--label a/b=c" \
	"--label switch=$(printf 'v%.0s' $(seq 64))"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
# node ids interleave the switches: a and c on s1, b and d on s2; 2 devices each
start_agent node-a 2 "$(api 1)" --label switch=s1 --label rack=r1
start_agent node-b 2 "$(api 1)" --label switch=s2
start_agent node-c 2 "$(api 1)" --label switch=s1
start_agent node-d 2 "$(api 1)" --label switch=s2
for n in node-a node-b node-c node-d; do
	wait_until 15 node_state_is 1 $n up || fail "$n did not register"
done
get 1 /v1/nodes/node-a
[ "$(jget "$BODY" 'd["labels"]')" = '{"rack": "r1", "switch": "s1"}' ] ||
	fail "node-a's labels: $BODY"

# switches_of JOB: once it runs, the nodes its ranks run on in $NODES and their switches,
# sorted, in $SW
switches_of() {
	wait_until 20 job_state_is 1 "$1" running || fail "job $1 not running: $(job_field 1 "$1" '')"
	get 1 "/v1/jobs/$1"
	NODES=$(jget "$BODY" '" ".join(sorted(set(s["node"] for s in d["layout"])))')
	local n out=
	for n in $NODES; do
		get 1 "/v1/nodes/$n"
		out="$out $(jget "$BODY" 'd["labels"]["switch"]')"
	done
	SW=$(tr ' ' '\n' <<<"$out" | sed '/^$/d' | sort -u | tr '\n' ' ')
}
spec() { echo "{\"name\":\"$1\",\"ranks\":$2,\"command\":[\"sleep\",\"300\"]}"; }

# 3 ranks: both switches have room for 4, so one switch takes all three
submit 1 "$(spec three 3)"
J3=$JOB
switches_of "$J3"
[ "$(wc -w <<<"$SW")" = 1 ] || fail "3 ranks spread over switches $SW: nodes $NODES"
first=$SW
note "3 ranks on switch $first (nodes $NODES)"
# 1 rank: best fit is the device left in the same switch, not an empty node of the other
# (which "most free devices first" would pick)
submit 1 "$(spec one 1)"
switches_of "$JOB"
[ "$SW" = "$first" ] || fail "1 rank not on switch $first: nodes $NODES"
# 4 ranks: the other switch, whole
submit 1 "$(spec four 4)"
switches_of "$JOB"
[ "$(wc -w <<<"$SW")" = 1 ] && [ "$SW" != "$first" ] ||
	fail "4 ranks not on the other switch: $SW (nodes $NODES)"
note "1 rank beside them, 4 ranks on switch $SW"

# a gang larger than any switch spans them: cancel everything, then 6 ranks
for j in $(curl -s -H "$AUTH" "$(api 1)/v1/jobs?state=running" |
	python3 -c 'import json,sys; print(" ".join(j["id"] for j in json.load(sys.stdin)["jobs"]))'); do
	call POST 1 "/v1/jobs/$j/cancel" '{}'
done
submit 1 "$(spec six 6)"
switches_of "$JOB"
[ "$SW" = "s1 s2 " ] || fail "6 ranks on 4-device switches: $NODES"
# the placement-quality counters on /metrics: three placements within one switch, one across
one=$(metric 1 'yard_sched_placements_domains_total{spans="one"}')
several=$(metric 1 'yard_sched_placements_domains_total{spans="several"}')
[ "$one" = 3 ] && [ "$several" = 1 ] || fail "placements within one switch $one, across $several"

# node-d's agent comes back on switch s1: it registers again and the controllers take it
kill_agent node-d
start_agent node-d 2 "$(api 1)" --label switch=s1
wait_until 20 grep -q "registering again" "$T/log.agent-node-d" ||
	fail "no new registration: $(tail -3 "$T/log.agent-node-d")"
node_has_switch() {
	get 1 /v1/nodes/node-d
	[ "$(jget "$BODY" 'd["labels"]["switch"]')" = "$1" ]
}
wait_until 20 node_has_switch s1 || fail "node-d's labels: $BODY"
# without the join token a changed label stops the agent at start, naming both sets
kill_agent node-d
timeout 20 "$YARD_AGENT" --controllers "$(api 1)" --data-dir "$T/agent-node-d" --name node-d \
	--devices cpu:2 --port-base "${APORT[node-d]}" --label switch=s3 >"$T/log.relabel" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q 'labels {"switch":"s3"} differ from {"switch":"s1"}.*needs --join-token' \
	"$T/log.relabel" || fail "relabel without a join token: exit $rc: $(cat "$T/log.relabel")"
note "ok"
