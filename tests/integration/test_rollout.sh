#!/usr/bin/env bash
# test_rollout.sh: rollouts of agent builds onto 3 real agents while a job's ranks run on all
# three (one controller; builds are real copies of yard-agent made by scripts/mark-build).
#  1. a healthy build in 3 waves: every node ends on it, the agents kept their pids (exec in
#     place) and the job's ranks were never restarted (same pids, generation 1);
#  2. a build whose self-test fails on node-2, in wave 2: the rollout rolls back, node-2
#     never ran it, wave 3 never starts;
#  3. a build that crashes right after exec on node-2, in wave 2: node-2's guardian brings
#     the previous build back by itself, the rollout rolls back, wave 3 never starts;
#  4. a build under an embargoed advisory: a node token gets 403 for it until a rollout
#     assigns it to the node, the rollout completes, and every node's download is audited;
# and through all of it the job keeps training with the same ranks. Also: bad rollout input
# is refused with a message naming the field, and yardctl rollout list/status work.
. "$(dirname "$0")/lib.sh"

YARDCTL=${YARDCTL:-yardctl}
MARK_BUILD=${MARK_BUILD:-$top_srcdir/scripts/mark-build}
AGENT_BIN=$(command -v "$YARD_AGENT")

trap 'cleanup_upgraded_agents; cleanup_agents; cleanup' EXIT

start_member 1 "$(members_arg 1)" --node-suspect-ms 2000 --node-down-ms 6000
wait_leader 10 1 || fail "no leader"
make_join_token 1
write_rank_script
for i in 1 2 3; do
	start_agent "node-$i" 1 "$(api 1)" --port-base $((PORT_BASE + 100 + 10 * i))
done
for i in 1 2 3; do wait_until 10 node_state_is 1 "node-$i" up || fail "node-$i did not register"; done
V1=$(jget "$(get 1 /v1/nodes/node-1; echo "$BODY")" 'd["version"]')

ctl() { "$YARDCTL" --endpoints "$(api 1)" --token "$TOKEN" "$@"; }
mkdir -p "$T/builds"
mark() { "$MARK_BUILD" "$AGENT_BIN" "$T/builds/$1" --version "$1" "${@:2}" >/dev/null || fail "mark-build $1"; }
mark 2.0.0-good
mark 3.0.0-badtest --fault self-test --fault-nodes node-2
mark 4.0.0-crash --fault crash --fault-nodes node-2
for v in 2.0.0-good 3.0.0-badtest 4.0.0-crash; do
	ctl build upload "$T/builds/$v" --version "$v" --component agent >"$T/out" 2>&1 || fail "upload $v: $(cat "$T/out")"
done

# the job: one rank per node, reporting a step every 0.1 s
submit 1 "{\"name\":\"train-through\",\"ranks\":3,$(cmd train 100000 0.1),\"failure\":{\"max_restarts\":3,\"hang_timeout_s\":30}}"
J=$JOB
wait_until 20 job_state_is 1 "$J" running || fail "job did not start"
step() { job_field 1 "$J" '.get("step", 0)'; }
step_above() { [ "$(step)" -gt "$1" ] 2>/dev/null; }
wait_until 20 step_above 3 || fail "job does not report steps"
for r in 0 1 2; do [ -f "$T/pids/$J.$r.1" ] || fail "rank $r has no pid file"; done
rank_pids() { for r in 0 1 2; do cat "$T/pids/$J.$r.1"; done | tr '\n' ' '; }
PIDS=$(rank_pids)
agent_pid() { cat "$T/agent-$1/agent.pid"; }
declare -A AGENT_PID0
for i in 1 2 3; do AGENT_PID0[node-$i]=$(agent_pid "node-$i"); done
note "job $J runs ranks (process groups) $PIDS on node-1..3, agents on $V1"

ranks_unchanged() {
	local pid
	[ "$(rank_pids)" = "$PIDS" ] || fail "rank process groups changed: $PIDS -> $(rank_pids)"
	for pid in $PIDS; do alive "$pid" || fail "rank process $pid is gone"; done
	get 1 "/v1/jobs/$J"
	[ "$(jget "$BODY" 'd["state"]')" = running ] || fail "job is not running: $BODY"
	[ "$(jget "$BODY" 'd["generation"]')" = 1 ] || fail "job was restarted: $BODY"
	[ "$(jget "$BODY" 'd["restarts"]')" = 0 ] || fail "job was restarted: $BODY"
}
node_version() { get 1 "/v1/nodes/$1"; jget "$BODY" 'd["version"]'; }
node_on() { [ "$(node_version "$1")" = "$2" ]; }
# (not through $(...): $BODY must be the last answer when a wait fails)
rollout_is() { get 1 "/v1/rollouts/$1"; [ "$(jget "$BODY" 'd["state"]')" = "$2" ]; }
start_rollout() { # BUILD WAVES: id in $RO
	call POST 1 /v1/rollouts "{\"build\":\"$1\",\"waves\":\"$2\",\"soak_s\":1,\"gate_timeout_s\":30}"
	[ "$CODE" = 201 ] || fail "rollout of $1: $CODE $BODY"
	RO=$(jget "$BODY" 'd["id"]')
}

# ---- bad input changes nothing ----
call POST 1 /v1/rollouts '{"build":"9.9.9-missing"}'
[ "$CODE" = 404 ] && grep -q '"field":"build"' <<<"$BODY" || fail "unknown build: $CODE $BODY"
call POST 1 /v1/rollouts '{"build":"2.0.0-good","waves":"1,0"}'
[ "$CODE" = 400 ] && grep -q 'waves\[1\]' <<<"$BODY" || fail "bad waves: $CODE $BODY"
call POST 1 /v1/rollouts '{"build":"2.0.0-good","policy":"yolo"}'
[ "$CODE" = 400 ] && grep -q '"field":"policy"' <<<"$BODY" || fail "bad policy: $CODE $BODY"
call POST 1 /v1/rollouts '{"build":"2.0.0-good","selector":"zone=nowhere"}'
[ "$CODE" = 409 ] && grep -q 'no registered node matches' <<<"$BODY" || fail "empty selector: $CODE $BODY"
ctl rollout start --build 2.0.0-good --waves 1,0 >"$T/out" 2>&1 && fail "yardctl accepted waves 1,0"
grep -q "waves\[1\]" "$T/out" || fail "yardctl's refusal does not name the wave: $(cat "$T/out")"
# waves are cumulative: one below an earlier one (meant as increments) is refused, naming both
ctl rollout start --build 2.0.0-good --waves 50%,10% >"$T/out" 2>&1 && fail "yardctl accepted waves 50%,10%"
grep -qF "waves[1]: '10%' is not above waves[0] '50%': waves are cumulative" "$T/out" ||
	fail "decreasing waves: $(cat "$T/out")"
call POST 1 /v1/rollouts '{"build":"2.0.0-good","waves":["1","50%","2","2"]}'
[ "$CODE" = 400 ] && grep -qF "waves[3]: '2' is not above waves[2] '2'" <<<"$BODY" ||
	fail "repeated wave: $CODE $BODY"
get 1 /v1/rollouts
[ "$(jget "$BODY" 'len(d["rollouts"])')" = 0 ] || fail "a refused rollout was recorded: $BODY"
# a malformed upgrade report in a heartbeat is refused naming the field
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $(cat "$T/agent-node-3/node.token")" \
	--data '{"node":"node-3","version":"x","upgrade":{"version":"x","rollout":"r","state":"exploded"}}' "$(api 1)/v1/agents/heartbeat")
[ "$CODE" = 400 ] && grep -q '"field":"upgrade.state"' "$T/body" || fail "bad upgrade report: $CODE $(cat "$T/body")"

# ---- 1. a healthy build in three waves ----
t0=$(now_ms)
out=$(ctl rollout start --build 2.0.0-good --waves 1,2,100% --soak 1s --gate-timeout 30s) || fail "yardctl rollout start: $out"
RO1=$(sed -n 's/^rollout \(ro-[0-9]*\) .*/\1/p' <<<"$out")
[ -n "$RO1" ] || fail "no rollout id in: $out"
call POST 1 /v1/rollouts '{"build":"3.0.0-badtest"}'
[ "$CODE" = 409 ] && grep -q "$RO1 is still active" <<<"$BODY" || fail "second active rollout: $CODE $BODY"
ctl rollout status "$RO1" -w --timeout 120 >"$T/status1" 2>&1 || fail "rollout $RO1 did not complete: $(tail -n 20 "$T/status1"; tail -n 20 "$T"/log.agent-node-*)"
t_roll=$(($(now_ms) - t0))
grep -q "wave" "$T/status1" || fail "rollout status -w printed no progress: $(cat "$T/status1")"
for i in 1 2 3; do
	wait_until 5 node_on "node-$i" 2.0.0-good || fail "node-$i runs $(node_version "node-$i"), not 2.0.0-good"
	[ "$(agent_pid "node-$i")" = "${AGENT_PID0[node-$i]}" ] || fail "node-$i's agent changed pid: the upgrade was not an exec in place"
	grep -q "re-adopted rank" "$T/log.agent-node-$i" || fail "node-$i's new agent did not re-adopt its rank"
done
ranks_unchanged
get 1 "/v1/events?limit=1000"
jget "$BODY" '"\n".join(e["type"] + ": " + e["message"] for e in d["events"] if e["type"].startswith("rollout."))' >"$T/events1"
for want in "rollout.created: rollout $RO1" "rollout.wave: rollout $RO1: wave 1/3" "rollout.upgrade: rollout $RO1: wave 1/3: upgrading node-1" \
	"rollout.node: rollout $RO1: node node-1 upgraded $V1 -> 2.0.0-good, self-test passed" "rollout.soak: rollout $RO1: wave 3/3" "rollout.uncordon: rollout $RO1: wave 3/3 done" \
	"rollout.completed: rollout $RO1"; do
	grep -qF "$want" "$T/events1" || fail "no event '$want' in: $(cat "$T/events1")"
done
get 1 /v1/nodes
[ "$(jget "$BODY" 'sum(n["cordoned"] for n in d["nodes"])')" = 0 ] || fail "nodes left cordoned: $BODY"
note "rollout $RO1: 3 agents on 2.0.0-good in $t_roll ms, same agent pids, ranks $PIDS untouched"

# ---- 2. self-test fails on node-2 (wave 2) ----
start_rollout 3.0.0-badtest 1,2,100%
RO2=$RO
wait_until 90 rollout_is "$RO2" rolled-back || fail "rollout $RO2 did not roll back: $BODY"
get 1 "/v1/rollouts/$RO2"
[ "$(jget "$BODY" 'd["nodes"]["node-2"]["state"]')" = rolled-back ] || fail "node-2: $BODY"
grep -q "self-test" <<<"$(jget "$BODY" 'd["nodes"]["node-2"]["error"]')" || fail "node-2's failure does not mention the self-test: $BODY"
[ "$(jget "$BODY" 'd["waves"][2]["state"]')" = pending ] || fail "wave 3 started: $BODY"
[ "$(jget "$BODY" 'd["nodes"]["node-3"]["state"]')" = pending ] || fail "node-3 was touched: $BODY"
node_on node-2 2.0.0-good || fail "node-2 runs $(node_version node-2)"
node_on node-3 2.0.0-good || fail "node-3 runs $(node_version node-3)"
[ "$(agent_pid node-2)" = "${AGENT_PID0[node-2]}" ] || fail "node-2's agent was replaced although its build failed the self-test"
grep -q "self-test failed" "$T/log.agent-node-2" || fail "node-2's agent did not log the failed self-test"
ranks_unchanged
note "rollout $RO2: node-2's self-test failed, wave 2 rolled back, wave 3 never started"

# ---- 3. the build crashes right after exec on node-2 (wave 2) ----
start_rollout 4.0.0-crash 1,2,100%
RO3=$RO
wait_until 90 rollout_is "$RO3" rolled-back || fail "rollout $RO3 did not roll back: $BODY"
get 1 "/v1/rollouts/$RO3"
[ "$(jget "$BODY" 'd["waves"][2]["state"]')" = pending ] || fail "wave 3 started: $BODY"
[ "$(jget "$BODY" 'd["nodes"]["node-2"]["state"]')" = rolled-back ] || fail "node-2: $BODY"
grep -q "ended before its first healthy heartbeat" <<<"$(jget "$BODY" 'd["nodes"]["node-2"]["error"]')" ||
	fail "node-2's failure does not say the new agent died: $BODY"
node_on node-2 2.0.0-good || fail "node-2 runs $(node_version node-2)"
node_on node-3 2.0.0-good || fail "node-3 runs $(node_version node-3)"
grep -q "crashing on purpose" "$T/log.agent-node-2" || fail "the crash build never ran on node-2"
grep -q "rolling back to 2.0.0-good" "$T/log.agent-node-2" || fail "node-2's guardian did not roll back"
get 1 "/v1/events?limit=1000"
jget "$BODY" '"\n".join("%d %s: %s" % (e["ts_ms"], e["type"], e["message"]) for e in d["events"] if e["type"].startswith("rollout.") and "'"$RO3"'" in e["message"])' >"$T/events3"
t_fail=$(sed -n 's/^\([0-9]*\) rollout.node: .*node node-2 failed the gate.*/\1/p' "$T/events3")
t_back=$(sed -n 's/^\([0-9]*\) rollout.node: .*node node-2 is back on.*/\1/p' "$T/events3")
[ -n "$t_fail" ] && [ -n "$t_back" ] || fail "no failure or return event for node-2: $(cat "$T/events3")"
[ $((t_back - t_fail)) -le 60000 ] || fail "node-2 took $((t_back - t_fail)) ms to be back"
ranks_unchanged
note "rollout $RO3: node-2 crashed after exec and was back on 2.0.0-good by itself; wave 3 never started"

# ---- 4. an embargoed build: only the nodes a rollout assigns it to may download it ----
call POST 1 /v1/tokens '{"name":"secteam","role":"security"}'
[ "$CODE" = 201 ] || fail "security token: $CODE $BODY"
SEC=$(jget "$BODY" 'd["token"]')
"$YARDCTL" --endpoints "$(api 1)" --token "$SEC" advisory create --title "agent fix" --severity high \
	--text "the fix" --embargo-days 7 -o json >"$T/adv.json" 2>&1 || fail "advisory: $(cat "$T/adv.json")"
ADV=$(jget "$(cat "$T/adv.json")" 'd["id"]')
mark 2.5.0-sec
"$YARDCTL" --endpoints "$(api 1)" --token "$SEC" build upload "$T/builds/2.5.0-sec" --version 2.5.0-sec \
	--component agent --advisory "$ADV" >"$T/out" 2>&1 || fail "upload 2.5.0-sec: $(cat "$T/out")"
NT3=$(cat "$T/agent-node-3/node.token")
CODE=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $NT3" "$(api 1)/v1/builds/2.5.0-sec/binary")
[ "$CODE" = 403 ] || fail "node-3 downloaded an embargoed build no rollout assigned to it: $CODE"
start_rollout 2.5.0-sec 100%
wait_until 90 rollout_is "$RO" completed || fail "rollout $RO of the embargoed build: $BODY"
for i in 1 2 3; do node_on "node-$i" 2.5.0-sec || fail "node-$i runs $(node_version "node-$i")"; done
CODE=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $NT3" "$(api 1)/v1/builds/2.5.0-sec/binary")
[ "$CODE" = 403 ] || fail "node-3 may still download the embargoed build after the rollout: $CODE"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $SEC" "$(api 1)/v1/audit?reads=1&limit=1000")
[ "$CODE" = 200 ] || fail "audit: $CODE"
for i in 1 2 3; do
	grep -q "node-$i (role node) read embargoed build 2.5.0-sec (binary)" "$T/body" || fail "no audited read by node-$i: $(cat "$T/body")"
done
ranks_unchanged
note "$RO: embargoed 2.5.0-sec reached only the nodes it was assigned to (403 before and after), every download audited"

# the job kept training through all the rollouts
s1=$(step)
wait_until 10 step_above "$s1" || fail "the job stopped stepping at $s1"
ctl rollout list >"$T/list" || fail "rollout list"
for ro in "$RO1 " "$RO2 " "$RO3 "; do grep -q "^$ro" "$T/list" || fail "rollout list lacks $ro: $(cat "$T/list")"; done
ranks_unchanged
note "job $J still at generation 1 with ranks $PIDS, step $(step)"
