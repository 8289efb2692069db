#!/usr/bin/env bash
# test_watch.sh: agents long-poll the leader for work (POST /v1/agents/watch). Three
# controllers, one agent heartbeating only every 6 s (the controllers judge nodes on a
# longer scale): a submitted job's rank starts well before the next regular heartbeat,
# because the watch answers when the placement commits and the agent heartbeats at once.
# The same after the leader is SIGKILLed (the agent's watch fails over with it). The route
# checks its body and role; a stopping agent does not wait for its watch to end. A node's
# download of a build sent to a follower follows the 307 with the node's token.
. "$(dirname "$0")/lib.sh"

args=(--node-suspect-ms 30000 --node-down-ms 60000 --election-timeout-ms 1000)
for i in 1 2 3; do start_member "$i" "$(members_arg 1 2 3)" "${args[@]}"; done
wait_leader 20 1 2 3 || fail "no leader"
make_join_token "$LEADER"
start_agent node-a 1 "$(api 1),$(api 2),$(api 3)" --heartbeat-ms 6000
write_rank_script
wait_until 20 node_state_is "$LEADER" node-a up || fail "node-a did not register"

started() { grep -q "started rank 0 of $1 " "$T/log.agent-node-a"; }
from_watch() { grep -c "from the watch's answer" "$T/log.agent-node-a"; }
run_one() { # run_one NAME: submit a 1-rank job, see it start early and succeed
	local t0 took sets
	sets=$(from_watch)
	t0=$(now_ms)
	submit "$LEADER" "{\"name\":\"$1\",\"ranks\":1,$(cmd sleep 0.3),\"failure\":{\"max_restarts\":0}}"
	wait_until 15 started "$JOB" || fail "$1: rank never started: $(job_field "$LEADER" "$JOB" '')"
	took=$(($(now_ms) - t0))
	note "$1: submitted -> rank started in $took ms (regular heartbeat every 6000 ms)"
	# a start that waited for the regular heartbeat would come up to 6 s after the submission;
	# the watch brings it within a round trip or two of the placement
	[ "$took" -lt 5000 ] || fail "$1: the rank started with a regular heartbeat ($took ms)"
	# the watch's answer carried the desired set (no heartbeat to fetch it)
	[ "$(from_watch)" -gt "$sets" ] || fail "$1: the desired set did not come with the watch's answer"
	wait_until 20 job_state_is "$LEADER" "$JOB" succeeded || fail "$1: $(job_field "$LEADER" "$JOB" '')"
}
run_one first
run_one second
[ "$(metric "$LEADER" yard_agent_watches)" = 1 ] || fail "the agent has no watch waiting: $(metric "$LEADER" yard_agent_watches)"

# the leader dies: the agent's watch goes to the new one
old=$LEADER
kill_member "$old"
others=()
for i in 1 2 3; do [ "$i" != "$old" ] && others+=("$i"); done
wait_leader 20 "${others[@]}" || fail "no new leader"
note "leader $old killed, $LEADER leads"
wait_until 30 sh -c "[ \"\$(curl -s -H '$AUTH' '$(api "$LEADER")/metrics' | awk '\$1 == \"yard_agent_watches\" { print \$2 }')\" = 1 ]" ||
	fail "the agent does not watch the new leader: $(grep -i watch "$T/log.agent-node-a" | tail -3)"
run_one after-failover

# a stop does not wait for the watch (25 s) to end
t0=$(now_ms)
kill -TERM "${APID[node-a]}"
wait "${APID[node-a]}" 2>/dev/null
unset "APID[node-a]"
took=$(($(now_ms) - t0))
note "agent stopped in $took ms with a watch waiting"
[ "$took" -lt 8000 ] || fail "the agent's stop waited for its watch ($took ms)"
# the route, with the agent gone (its own watch would supersede these): a node token only,
# a checked body
NT=$(cat "$T/agent-node-a/node.token")
wcall() { CODE=$(curl -s -o "$T/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $1" --data "$2" "$(api "$LEADER")/v1/agents/watch"); BODY=$(cat "$T/body"); }
wcall "$NT" '{"version":-1,"wait_ms":0}'
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["version"] > 0')" = True ] || fail "watch with an unknown version: $CODE $BODY"
v=$(jget "$BODY" 'd["version"]')
t0=$(now_ms)
wcall "$NT" "{\"version\":$v,\"wait_ms\":300}"
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["version"]')" = "$v" ] || fail "watch that times out: $CODE $BODY"
[ $(($(now_ms) - t0)) -ge 250 ] || fail "a watch with nothing new did not wait"
# a watch that asks for the desired set gets it with a new version (the node has none now:
# the jobs ended), named by its tag; with that tag, "desired_unchanged" instead
wcall "$NT" '{"version":-1,"wait_ms":0,"desired":true,"desired_shared":true}'
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["desired"] == [] and d["version"] > 0 and len(d["desired_tag"]) == 16 and d["leader_id"] != ""')" = True ] ||
	fail "a watch asking for the desired set: $CODE $BODY"
tag=$(jget "$BODY" 'd["desired_tag"]')
wcall "$NT" "{\"version\":-1,\"wait_ms\":0,\"desired\":true,\"desired_tag\":\"$tag\"}"
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["desired_unchanged"] is True and "desired" not in d')" = True ] ||
	fail "a watch with the tag of the set: $CODE $BODY"
# without news (the same version) it waits, and answers the version alone
v=$(jget "$BODY" 'd["version"]')
wcall "$NT" "{\"version\":$v,\"wait_ms\":100,\"desired\":true}"
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd == {"version": '"$v"'}')" = True ] || fail "a desired watch that times out: $CODE $BODY"
# refused: 400 naming the field (grep pattern), nothing waits
refused() { wcall "$NT" "$1"; [ "$CODE" = 400 ] && echo "$BODY" | grep -q "$2" || fail "$3: $CODE $BODY"; }
refused '{"version":1,"wait_ms":60001}' '"field":"wait_ms"' "wait_ms out of range"
refused '{"version":1,"wait_ms":10,"extra":1}' 'extra' "unknown field"
refused 'not json' 'error' "malformed body"
refused '{"version":"7","wait_ms":10}' '"field":"version"' "version as text"
refused '{"version":-2,"wait_ms":10}' '"field":"version"' "version below -1"
refused '{"wait_ms":10}' '"field":"version"' "no version"
refused '{"version":1,"wait_ms":10,"desired":"yes"}' '"field":"desired"' "desired as text"
refused '{"version":1,"wait_ms":10,"desired":true,"desired_shared":1}' '"field":"desired_shared"' "desired_shared as a number"
refused '{"version":1,"wait_ms":10,"desired":true,"desired_tag":"0123456789abcdef0"}' '"field":"desired_tag"' "a tag too long"
wcall "$TOKEN" '{"version":1,"wait_ms":10}'
[ "$CODE" = 403 ] || fail "an admin token on the node route: $CODE $BODY"

# a node's download of a build sent to a member that is not the leader (leadership moved
# after the offer): the 307 is followed with the node's token, and the bytes are the build's
YARDCTL=${YARDCTL:-yardctl}
MARK_BUILD=${MARK_BUILD:-$top_srcdir/scripts/mark-build}
YARD_FETCH=${YARD_FETCH:-$top_builddir/tests/tools/yard-fetch}
"$MARK_BUILD" "$(command -v "$YARD_AGENT")" "$T/build" --version 9.9.9-fetch >/dev/null || fail "mark-build"
"$YARDCTL" --endpoints "$(api "$LEADER")" --token "$TOKEN" build upload "$T/build" --version 9.9.9-fetch \
	--component agent >"$T/out" 2>&1 || fail "upload: $(cat "$T/out")"
for i in "${others[@]}"; do [ "$i" != "$LEADER" ] && follower=$i; done
out=$("$YARD_FETCH" "$(api "$follower")/v1/builds/9.9.9-fetch/binary" "$NT" "$T/fetched" 100000000 2>&1) ||
	fail "a download sent to follower $follower: $out"
[ "$out" = "$(stat -c %s "$T/build") $(sha256sum "$T/build" | cut -d' ' -f1)" ] ||
	fail "the download from follower $follower is not the build: $out"
cmp -s "$T/build" "$T/fetched" || fail "the downloaded file differs from the build"
note "a download sent to follower $follower followed its 307: $out"

# the agent's --watch-ms: 0..60000, anything else refused by name before it starts
for bad in '' 5x -1 60001; do
	out=$("$YARD_AGENT" --watch-ms "$bad" 2>&1) && fail "yard-agent accepted --watch-ms '$bad'"
	echo "$out" | grep -q -- "--watch-ms: '$bad'" || fail "yard-agent --watch-ms '$bad': $out"
done

note "ok"
