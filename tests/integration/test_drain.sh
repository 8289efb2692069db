#!/usr/bin/env bash
# test_drain.sh: `yardctl node drain` with real agents. One controller, two agents with 4 CPU
# devices each; a 4-rank command job that reports steps and checkpoints every 5 steps runs on
# one node with failure.max_restarts 0 (120 steps of 0.1 s; the drain comes after step 12).
# Draining that node must move the job to the other node, restored from its newest
# checkpoint, without using a restart; the job succeeds; the node goes draining then drained;
# events tell the story; `job logs` shows both generations. The job sets
# checkpoint.before_restart_s, so the drain first asks its ranks for a checkpoint, handed to a
# command job's program as a lone request number.
# Also `node list` / `node show` output, uncordon ending a drain, and bad input.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)" --restart-backoff-ms 200
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 4 "$(api 1)"
start_agent node-b 4 "$(api 1)"
write_rank_script
wait_until 10 node_state_is 1 node-a up || fail "node-a did not register"
wait_until 10 node_state_is 1 node-b up || fail "node-b did not register"
export YARD_ENDPOINTS=$(api 1) YARD_TOKEN=$TOKEN

# node list: one row per node with its state, scheduling, devices and version
heard() { yardctl node list | awk '$1 == "node-a" || $1 == "node-b" { print $6 }' | grep -qv -- '-'; }
wait_until 5 heard || fail "no heartbeat age in node list: $(yardctl node list)"
list=$(yardctl node list) || fail "node list"
echo "$list" | sed 's/^/#   /'
python3 - "$list" <<'PY' || fail "node list output"
import sys
rows = [l.split() for l in sys.argv[1].splitlines()]
assert rows[0][:7] == ["NAME", "STATE", "SCHEDULING", "DEVICES", "VERSION", "HEARTBEAT", "RANKS"], rows[0]
names = [r[0] for r in rows[1:]]
assert names == ["node-a", "node-b"], names
for r in rows[1:]:
    assert r[1:5] == ["up", "ok", "4", "cpu"], r
    assert r[6].endswith("s") and r[7] == "0", r
PY

submit 1 "{\"name\":\"mover\",\"ranks\":4,\"command\":[\"sh\",\"-c\",\"echo generation \$YARD_GENERATION rank \$RANK starts; exec sh $T/rank.sh train 120 0.1\"],\"env\":{\"OUT\":\"$T\"},\"checkpoint\":{\"store\":\"dir:$T/ckpt\",\"before_restart_s\":10},\"failure\":{\"max_restarts\":0,\"hang_timeout_s\":30}}"
J=$JOB
step_at_least() { [ "$(job_field 1 "$J" '.get("step", 0)')" -ge "$1" ] 2>/dev/null; }
wait_until 20 step_at_least 3 || fail "job did not reach step 3: $(job_field 1 "$J" '')"
get 1 "/v1/jobs/$J"
victim=$(jget "$BODY" 'd["layout"][0]["node"]')
[ "$(jget "$BODY" 'len(set(s["node"] for s in d["layout"]))')" = 1 ] || fail "4 ranks should fit one node: $BODY"
other=node-a
[ "$victim" = node-a ] && other=node-b

# node show: devices, version, heartbeat age, the ranks it runs
show=$(yardctl node show "$victim") || fail "node show"
echo "$show" | sed 's/^/#   /'
echo "$show" | grep -q "^scheduling *ok$" || fail "node show: scheduling"
echo "$show" | grep -q "^version *0\." || fail "node show: version"
echo "$show" | grep -q "^heartbeat *[0-9.]*s ago$" || fail "node show: heartbeat age"
[ "$(echo "$show" | grep -c '^  [0-3] *cpu ')" = 4 ] || fail "node show: 4 devices"
[ "$(echo "$show" | grep -c "^$J  *[0-3]  *1  *[0-9][0-9]*  *running ")" = 4 ] || fail "node show: the job's 4 running ranks"

wait_until 20 step_at_least 12 || fail "job did not reach step 12: $(job_field 1 "$J" '')"
note "job $J runs on $victim at step $(job_field 1 "$J" '["step"]'); draining $victim"
out=$(yardctl node drain "$victim") || fail "node drain"
echo "$out" | grep -q "node $victim draining" || fail "node drain said: $out"
wait_until 60 job_state_is 1 "$J" succeeded || fail "job did not succeed after the drain: $(events_of 1 "$J")"
# checkpoint.before_restart_s: the drain asks the ranks for a checkpoint first when they
# reported a step past the newest complete one (they save every 5 steps, so mostly it does);
# a command job's program gets the request number alone in YARD_CHECKPOINT_REQUEST
# (yard-worker's ranks get "REQUEST AFTER")
if grep -q "job $J generation 1: asked for a checkpoint before its restart" "$T/log.1"; then
	grep -qE '^[0-9]+$' "$T/agent-$victim/jobs/$J/checkpoint-request.gen-1" ||
		fail "a command job's request file holds more than a number: $(cat "$T/agent-$victim/jobs/$J/checkpoint-request.gen-1" 2>&1)"
	note "the drain asked for a checkpoint first: the request file holds a lone number"
else
	note "the drain found the newest checkpoint current and asked for none"
fi
get 1 "/v1/jobs/$J"
[ "$(jget "$BODY" 'd["generation"]')" = 2 ] || fail "generation: $BODY"
[ "$(jget "$BODY" 'd["restarts"]')" = 0 ] || fail "a drain used a restart: $BODY"
[ "$(jget "$BODY" 'set(s["node"] for s in d["layout"]) == {"'"$other"'"}')" = True ] || fail "not moved to $other: $BODY"
[ "$(jget "$BODY" 'd["step"]')" = 120 ] || fail "final step: $BODY"

events=$(events_of 1 "$J")
echo "$events" | sed 's/^/#   /'
python3 - "$victim" "$other" "$events" <<'PY' || fail "the events do not tell the story"
import re, sys
victim, other, lines = sys.argv[1], sys.argv[2], sys.argv[3].splitlines()
want = [r"^job\.restarting: .*not counted against max_restarts.*node %s: node draining" % victim,
        r"^job\.stopped: ",
        r"^job\.placed: .*re-placed \(generation 2\): 4 rank\(s\) on %s \(4\); restoring from checkpoint step (\d+)" % other,
        r"^job\.running: .*generation 2",
        r"^job\.succeeded: "]
i = 0
for line in lines:
    if i < len(want) and re.search(want[i], line):
        i += 1
if i < len(want):
    sys.exit("missing, in order: " + want[i])
PY
restored=$(echo "$events" | sed -n 's/.*restoring from checkpoint step \([0-9]*\).*/\1/p')
[ -n "$restored" ] && [ "$restored" -ge 10 ] || fail "restored from step '$restored'"
for r in 0 1 2 3; do
	[ "$(cat "$T/start.$J.$r.2")" = "$restored" ] || fail "rank $r resumed from $(cat "$T/start.$J.$r.2"), not $restored"
done
note "moved to $other, restored from checkpoint step $restored, restarts 0"

# the node: draining, then drained, in events and in node list/show
drained() { node_drain_is "$victim" drained; }
node_drain_is() { get 1 "/v1/nodes/$1"; [ "$(jget "$BODY" 'd["drain"]')" = "$2" ]; }
wait_until 10 node_drain_is "$victim" drained || fail "$victim not drained: $BODY"
get 1 "/v1/events?limit=1000"
node_events=$(jget "$BODY" '"\n".join(e["type"] + ": " + e["message"] for e in d["events"] if e["type"].startswith("node.d"))')
echo "$node_events" | sed 's/^/#   /'
echo "$node_events" | grep -q "^node.draining: node $victim draining by admin: no new ranks; 4 running rank(s) of 1 job(s) move" || fail "no node.draining event"
echo "$node_events" | grep -q "^node.drained: node $victim drained" || fail "no node.drained event"
yardctl node list | grep -q "^$victim  *up  *drained  *4 *cpu" || fail "node list: $(yardctl node list)"
yardctl node list | grep -q "^$other  *up  *ok " || fail "node list: $(yardctl node list)"
yardctl node show "$victim" | grep -q "^scheduling *drained$" || fail "node show: $(yardctl node show "$victim")"
get 1 "/v1/nodes/$victim"
[ "$(jget "$BODY" 'd["cordoned"]')" = True ] || fail "a drained node is cordoned: $BODY"

# logs of both generations, the second under a header naming its node
logs=$(yardctl job logs "$J" --rank 0) || fail "job logs"
[ "$logs" = "generation 1 rank 0 starts
--- generation 2 on node $other ---
generation 2 rank 0 starts" ] || fail "job logs --rank 0: $logs"

# uncordon ends the drain; draining again is idempotent on a drained node
yardctl node uncordon "$victim" | grep -q "uncordoned" || fail "uncordon"
node_drain_is "$victim" None || fail "uncordon did not end the drain: $BODY"
[ "$(jget "$BODY" 'd["cordoned"]')" = False ] || fail "uncordoned node still cordoned: $BODY"

# bad input changes nothing
yardctl node drain nope 2>"$T/err" && fail "drain of an unknown node succeeded"
grep -q "404 .*no node nope" "$T/err" || fail "drain nope: $(cat "$T/err")"
yardctl node drain 'bad/name' 2>/dev/null
[ $? = 2 ] || fail "a bad node name is not a usage error"
call POST 1 /v1/tokens '{"name":"bob","role":"user"}'
USR=$(jget "$BODY" 'd["token"]')
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $USR" "$(api 1)/v1/nodes/$other/drain")
[ "$code" = 403 ] || fail "a user drained a node: $code"
yardctl node list | grep -q "^$other  *up  *ok " || fail "refused drains changed $other: $(yardctl node list)"
note "ok"
