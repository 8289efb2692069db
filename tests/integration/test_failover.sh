#!/usr/bin/env bash
# test_failover.sh: a node dies mid-job. One controller, two agents with 4 CPU devices each;
# a 4-rank command job that reports steps and checkpoints every 5 steps runs on one node.
# SIGKILL that node's agent and every one of its ranks (a node death): the node must go
# suspect then down within a few seconds, the job must be re-placed on the other node,
# restore from the newest complete checkpoint, and succeed; its events must tell the story
# in order: restarting (node down) -> stopped -> re-placed, restoring from step N -> running
# -> first step after restart -> succeeded.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)" --node-suspect-ms 1500 --node-down-ms 3000 --restart-backoff-ms 200
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 4 "$(api 1)"
start_agent node-b 4 "$(api 1)"
write_rank_script
wait_until 10 node_state_is 1 node-a up || fail "node-a did not register"
wait_until 10 node_state_is 1 node-b up || fail "node-b did not register"

submit 1 "{\"name\":\"survivor\",\"ranks\":4,$(cmd train 60 0.1 -1 50),\"checkpoint\":{\"store\":\"dir:$T/ckpt\"},\"failure\":{\"max_restarts\":2,\"hang_timeout_s\":30}}"
J=$JOB
step_at_least() { [ "$(job_field 1 "$J" '.get("step", 0)')" -ge "$1" ] 2>/dev/null; }
wait_until 20 step_at_least 12 || fail "job did not reach step 12: $(job_field 1 "$J" '')"
# the step heard is the furthest rank's; rank 0 writes the checkpoints and may lag
wait_until 20 dir_ckpt_at_least "$T/ckpt/$J" 10 || fail "no checkpoint at step 10: $(ls "$T/ckpt/$J" 2>&1)"
get 1 "/v1/jobs/$J"
victim=$(jget "$BODY" 'd["layout"][0]["node"]')
[ "$(jget "$BODY" 'len(set(s["node"] for s in d["layout"]))')" = 1 ] || fail "4 ranks should fit one node: $BODY"
other=node-a
[ "$victim" = node-a ] && other=node-b
note "job $J runs on $victim at step $(jget "$BODY" 'd["step"]'); killing the node"

# node death: the agent and every rank of the job, all at once
t0=$(now_ms)
kill -9 "${APID[$victim]}"
for f in "$T/pids/$J".*.1; do kill -9 -- "-$(cat "$f")" 2>/dev/null; done
wait "${APID[$victim]}" 2>/dev/null
unset "APID[$victim]"

wait_until 10 node_state_is 1 "$victim" down || fail "$victim not declared down"
t_down=$(($(now_ms) - t0))
wait_until 40 job_state_is 1 "$J" succeeded || fail "job did not succeed after failover: $(events_of 1 "$J")"
get 1 "/v1/jobs/$J"
[ "$(jget "$BODY" 'd["generation"]')" = 2 ] || fail "generation: $BODY"
[ "$(jget "$BODY" 'd["restarts"]')" = 1 ] || fail "restarts: $BODY"
[ "$(jget "$BODY" 'set(s["node"] for s in d["layout"]) == {"'"$other"'"}')" = True ] || fail "not re-placed on $other: $BODY"
[ "$(jget "$BODY" 'd["step"]')" = 60 ] || fail "final step: $BODY"

# the story, in order
events=$(events_of 1 "$J")
echo "$events" | sed 's/^/#   /'
python3 - "$victim" "$other" <<PY || fail "the events do not tell the story"
import re, sys
victim, other = sys.argv[1], sys.argv[2]
lines = """$events""".splitlines()
want = [r"^job\.restarting: .*node %s: node down" % victim,
        r"^job\.stopped: ",
        r"^job\.placed: .*re-placed \(generation 2\): 4 rank\(s\) on %s \(4\); restoring from checkpoint step (\d+)" % other,
        r"^job\.running: .*generation 2",
        r"^job\.progress: .*after restart",
        r"^job\.succeeded: "]
i = 0
for line in lines:
    if i < len(want) and re.search(want[i], line):
        i += 1
if i != len(want):
    sys.exit("missing or out of order: %s" % want[i])
PY
restored=$(echo "$events" | sed -n 's/.*restoring from checkpoint step \([0-9]*\).*/\1/p')
for r in 0 1 2 3; do
	[ "$(cat "$T/start.$J.$r.2")" = "$restored" ] || fail "rank $r resumed from $(cat "$T/start.$J.$r.2"), the controller said $restored"
done
[ "$restored" -ge 10 ] || fail "restored from step $restored, but step 12 had been reached (checkpoint every 5)"
get 1 "/v1/events?limit=1000"
jget "$BODY" '"\n".join(e["type"] + ": " + e["message"] for e in d["events"] if e["type"].startswith("node."))' >"$T/node-events"
grep -q "node.suspect: node $victim up -> suspect: no heartbeat" "$T/node-events" || fail "no suspect event: $(cat "$T/node-events")"
grep -q "node.down: node $victim suspect -> down: no heartbeat" "$T/node-events" || fail "no down event: $(cat "$T/node-events")"
! grep -q "node $other .*-> \(suspect\|down\)" "$T/node-events" || fail "$other was declared unhealthy: $(cat "$T/node-events")"
note "node declared down $t_down ms after SIGKILL; restored from checkpoint step $restored; succeeded"
