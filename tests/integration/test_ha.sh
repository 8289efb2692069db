#!/usr/bin/env bash
# test_ha.sh: the controller leader dies mid-job. Three controllers, two agents that know all
# three; an 6-rank command job spanning both nodes reports steps. SIGKILL the leader: a new
# leader takes over, the ranks keep running (the same processes), the job's recorded state
# stays right (running, generation 1, same layout), the new leader gives every node a grace
# period and declares none suspect or down, and the job then succeeds without a restart.
. "$(dirname "$0")/lib.sh"

M=$(members_arg 1 2 3)
for id in 1 2 3; do start_member "$id" "$M"; done
wait_leader 15 1 2 3 || fail "no leader"
make_join_token "$LEADER"
urls="$(api 1),$(api 2),$(api 3)"
start_agent node-a 4 "$urls"
start_agent node-b 4 "$urls"
write_rank_script
wait_until 10 node_state_is "$LEADER" node-a up || fail "node-a did not register"
wait_until 10 node_state_is "$LEADER" node-b up || fail "node-b did not register"

submit "$LEADER" "{\"name\":\"steady\",\"ranks\":6,$(cmd train 100 0.1 -1 30),\"failure\":{\"max_restarts\":3,\"hang_timeout_s\":20}}"
J=$JOB
step_at_least() { [ "$(job_field "$LEADER" "$J" '.get("step", 0)')" -ge "$1" ] 2>/dev/null; }
wait_until 20 step_at_least 5 || fail "job did not reach step 5: $(job_field "$LEADER" "$J" '')"
get "$LEADER" "/v1/jobs/$J"
layout_before=$(jget "$BODY" 'd["layout"]')
pids_before=$(cat "$T/pids/$J".* | sort | tr '\n' ' ')
get "$LEADER" "/v1/events?limit=1000"
seq_before=$(jget "$BODY" 'd["events"][-1]["seq"]')

OLD=$LEADER
t0=$(now_ms)
kill_member "$OLD"
rest=""
for id in 1 2 3; do [ "$id" = "$OLD" ] || rest="$rest $id"; done
wait_leader 10 $rest || fail "no new leader after killing $OLD"
note "leader $OLD killed; $LEADER leads after $(($(now_ms) - t0)) ms"

# the ranks did not notice; the recorded job is unchanged
for p in $pids_before; do alive "$p" || fail "rank process group $p died with the controller"; done
get "$LEADER" "/v1/jobs/$J"
[ "$(jget "$BODY" 'd["state"]')" = running ] || fail "job state after failover: $BODY"
[ "$(jget "$BODY" 'd["generation"]')" = 1 ] || fail "generation after failover: $BODY"
[ "$(jget "$BODY" 'd["layout"]')" = "$layout_before" ] || fail "layout changed: $BODY"

# longer than a grace period (1.5 s suspect, 3 s down): nothing is declared unhealthy
sleep 4
get "$LEADER" /v1/nodes
[ "$(jget "$BODY" '[n["state"] for n in d["nodes"]]')" = '["up", "up"]' ] || fail "nodes after failover: $BODY"
for p in $pids_before; do alive "$p" || fail "rank process group $p died after the failover"; done
step_after=$(job_field "$LEADER" "$J" '.get("step", -1)')
[ "$step_after" -ge 5 ] || fail "the new leader has no step for the job: $step_after"
note "4 s after the failover: ranks alive, nodes up, job at step $step_after on the new leader"
touch "$T/release" # the ranks go on past step 30

wait_until 30 job_state_is "$LEADER" "$J" succeeded || fail "job did not finish: $(events_of "$LEADER" "$J")"
pids_after=$(cat "$T/pids/$J".* | sort | tr '\n' ' ')
[ "$pids_before" = "$pids_after" ] || fail "ranks were started again: $pids_before -> $pids_after"
get "$LEADER" "/v1/jobs/$J"
[ "$(jget "$BODY" 'd["restarts"]')" = 0 ] && [ "$(jget "$BODY" 'd["generation"]')" = 1 ] || fail "job restarted: $BODY"
get "$LEADER" "/v1/events?after=$seq_before&limit=1000"
bad=$(jget "$BODY" '" | ".join(e["message"] for e in d["events"] if e["type"] in ("node.suspect", "node.down", "job.restarting", "job.placed"))')
[ -z "$bad" ] || fail "after the failover: $bad"
dups=$(jget "$BODY" 'len([e for e in d["events"] if e["type"] == "job.running"])')
[ "$dups" = 0 ] || fail "the new leader repeated the job's running event"
note "ok: no restart, no node declared down, same rank processes"

# ---- every member down, then one started alone: it has no quorum, so it has not applied its
# log (raft applies entries once a leader tells the commit index) and knows no token. It must
# not refuse valid tokens (an agent told 401 registers again): it answers 503. The agents log
# the outage once, not at every heartbeat, and say when the controllers answer again.
L=$T/log.agent-node-a
outage() { grep -cE "heartbeat: no controller answered|heartbeat to .*: HTTP 503" "$L" || true; }
before=$(outage)
agains() { grep -c "answers again, after [0-9]* call(s) that reached no controller or no leader" "$L" || true; }
agains_before=$(agains)
watch_outage() { grep -cE "watch: .*(no controller answered|HTTP 503)" "$L" || true; }
watch_before=$(watch_outage)
set -- $rest
kill_member "$1"
kill_member "$2"
start_member "$1" "$M"
ready() { curl -s -o /dev/null "$(api "$1")/healthz"; }
wait_until 10 ready "$1" || fail "member $1 did not start"
code=$(curl -s -o "$T/alone" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$(api "$1")/v1/jobs?stale=1")
[ "$code" = 503 ] || fail "a member alone, its log not applied, answered $code: $(cat "$T/alone")"
sleep 2
start_member "$2" "$M"
wait_leader 15 "$1" "$2" || fail "no leader after $1 and $2 came back"
more_agains() { [ "$(agains)" -gt "$agains_before" ]; }
wait_until 20 more_agains ||
	fail "node-a did not say the controllers answer again: $(tail -n 5 "$L")"
calls=$(sed -n 's/.*answers again, after \([0-9]*\) call(s).*/\1/p' "$L" | tail -n 1)
[ "$calls" -ge 5 ] && [ "$(outage)" = $((before + 1)) ] ||
	fail "an outage of $calls calls logged $(($(outage) - before)) times: $(grep -E "no controller|HTTP 503" "$L" | tail -n 5)"
[ "$(watch_outage)" -le $((watch_before + 2)) ] ||
	fail "the watch logs the outage at every try: $(grep -E "watch: " "$L" | tail -n 5)"
! grep -q "registering again" "$T/log.agent-node-a" "$T/log.agent-node-b" ||
	fail "an agent registered again: $(grep -h "registering again" "$T"/log.agent-node-*)"
note "no quorum (a member alone answered 503, not 401): $calls heartbeats got no leader, logged once, and its end once"
