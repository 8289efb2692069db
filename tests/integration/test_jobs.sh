#!/usr/bin/env bash
# test_jobs.sh: command jobs on one controller and two agents (4 CPU devices each), real
# processes on 127.0.0.1: the torchrun environment of every rank, gang scheduling with a
# visible pending reason, restart after a crash and after a hang, max_restarts, cancel
# (every rank's process gone), a time limit, "after", an agent restart re-adopting its ranks, and the agent
# protocol's authorisation and bad input.
. "$(dirname "$0")/lib.sh"

# nodes are declared down after 10 s of silence (not the default 3): section 7 restarts an
# agent, which under ASan on a loaded machine took longer than 3 s, and a node declared down
# moves its job, which is not what that section tests (test_failover does)
start_member 1 "$(members_arg 1)" --restart-backoff-ms 200 --node-suspect-ms 3000 --node-down-ms 10000
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 4 "$(api 1)"
start_agent node-b 4 "$(api 1)"
write_rank_script
wait_until 10 node_state_is 1 node-a up || fail "node-a did not register"
wait_until 10 node_state_is 1 node-b up || fail "node-b did not register"

# ---- 1. environment: 6 ranks over two nodes, each sees a consistent torchrun env ----
submit 1 "{\"name\":\"env\",\"ranks\":6,$(cmd sleep 1),\"failure\":{\"max_restarts\":0}}"
ENVJOB=$JOB
wait_until 20 job_state_is 1 "$ENVJOB" succeeded || fail "env job: $(job_field 1 "$ENVJOB" '')"
# a rank inherits stdin, stdout and stderr from its agent, none of its sockets (its
# connections to the controller, libuv's and libcurl's internal pairs)
! grep -l "socket:" "$T"/fds/* || fail "a rank inherited sockets of its agent: $(grep -h "socket:" "$T"/fds/* | head -3)"
[ "$(ls "$T"/fds | wc -l)" -ge 6 ] || fail "the ranks did not list their descriptors"
# while a node's set stays the same, a heartbeat's answer says so (desired_tag) instead of
# carrying it again, and the agent keeps running what it holds
n_unchanged=$(metric 1 yard_heartbeat_desired_unchanged_total)
[ "${n_unchanged:-0}" -gt 0 ] || fail "no heartbeat answer said the desired set was unchanged"
! grep -h "without a desired array" "$T"/log.agent-* || fail "an agent got an answer it could not use"
note "$n_unchanged heartbeat answer(s) said the node's desired set was unchanged"
# the agents ask for each job's shared part once per answer, once the leader offered it
n_shared=$(metric 1 yard_heartbeat_desired_shared_total)
[ "${n_shared:-0}" -gt 0 ] || fail "no heartbeat answer sent the desired set with shared parts"
note "$n_shared heartbeat answer(s) sent each job's shared part once"
# the agents keep their connections: twenty heartbeats do not open twenty connections (each
# of this test's reads of /metrics opens one: they are counted out)
count() { curl -s -H "$AUTH" "$(api 1)/metrics" | awk -v p="$1" 'index($0, p) == 1 { n += $NF } END { print n + 0 }'; }
heartbeats() { count 'yard_http_requests_total{route="POST /v1/agents/heartbeat"'; }
reads() { count 'yard_http_requests_total{route="GET /metrics"'; }
hb_at_least() { [ "$(heartbeats)" -ge "$1" ]; }
hb0=$(heartbeats) conn0=$(metric 1 yard_http_connections_total) reads0=$(reads)
wait_until 20 hb_at_least $((hb0 + 20)) || fail "the agents stopped heartbeating"
hb1=$(heartbeats) conn1=$(metric 1 yard_http_connections_total) reads1=$(reads)
agent_conns=$((conn1 - conn0 - (reads1 - reads0)))
note "$((hb1 - hb0)) heartbeats over $agent_conns new agent connection(s)"
[ "$agent_conns" -le $(((hb1 - hb0) / 4)) ] ||
	fail "agents open a connection per request: $agent_conns for $((hb1 - hb0)) heartbeats"
get 1 "/v1/jobs/$ENVJOB"
layout=$(jget "$BODY" '" ".join("%d:%s:%d" % (s["rank"], s["node"], s["device"]) for s in d["layout"])')
note "layout: $layout"
[ "$(jget "$BODY" 'd["spec"]["failure"]["hang_timeout_s"]')" = 60 ] || fail "spec not normalized: $BODY"
python3 - "$T/env" "$ENVJOB" "$layout" "node-a=${APORT[node-a]},node-b=${APORT[node-b]}" "$T" <<'PY' || fail "rank environments are inconsistent"
import os, sys
envdir, job, layout, top = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
port_base = {k: int(v) for k, v in (kv.split("=") for kv in sys.argv[4].split(","))}
slots = [tuple(x.split(":")) for x in layout.split()]
assert len(slots) == 6, slots
nodes = []
for _, node, _ in slots:
    if node not in nodes:
        nodes.append(node)
peers = ",".join("127.0.0.1:%d" % (port_base[node] + int(dev)) for _, node, dev in slots)
hosts = ",".join(node for _, node, _ in slots)
for r, node, dev in slots:
    line = open(os.path.join(envdir, "%s.%s.1" % (job, r))).read().split()
    env = dict(kv.split("=", 1) for kv in line)
    same = [s for s in slots if s[1] == node]
    want = {"RANK": r, "WORLD_SIZE": "6", "LOCAL_RANK": str([s[0] for s in same].index(r)),
            "LOCAL_WORLD_SIZE": str(len(same)), "NODE_RANK": str(nodes.index(node)),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port_base[slots[0][1]] + int(slots[0][2])),
            "YARD_RANK": r, "YARD_WORLD_SIZE": "6", "YARD_PEERS": peers, "YARD_HOSTS": hosts,
            # the controller store: a directory in the node's own agent data dir
            "YARD_CKPT_DIR": os.path.join(os.path.realpath(top), "agent-" + node, "checkpoints", job),
            "YARD_RESUME": "0"}
    for k, v in want.items():
        if env.get(k) != v:
            sys.exit("rank %s: %s=%s, want %s" % (r, k, env.get(k), v))
assert len(set(s[1] for s in slots)) == 2, "6 ranks on 4+4 devices must span both nodes"
PY
note "6 ranks: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR/PORT, YARD_PEERS/HOSTS consistent"

# ---- 2. gang: two jobs of 6 ranks on 8 devices: one runs, the other waits visibly ----
submit 1 "{\"name\":\"gang-a\",\"ranks\":6,$(cmd wait gang-a.done)}"
GA=$JOB
submit 1 "{\"name\":\"gang-b\",\"ranks\":6,$(cmd sleep 1)}"
GB=$JOB
wait_until 10 job_state_is 1 "$GA" running || fail "gang-a did not start"
get 1 "/v1/jobs/$GB"
[ "$(jget "$BODY" 'd["state"]')" = pending ] || fail "gang-b should wait: $BODY"
reason=$(jget "$BODY" 'd["reason"]')
[ "$reason" = "needs 6 devices, 2 free" ] || fail "gang-b reason: '$reason'"
[ "$(jget "$BODY" 'd["position"]')" = 1 ] || fail "gang-b position: $BODY"
note "gang-b waits: $reason (position 1)"
# its start estimate: gang-a has neither a time limit nor steps, so none, naming gang-a
est=$(jget "$BODY" 'd["estimate"]')
case "$est" in
"no estimate: it needs devices held by jobs with no expected end"*"$GA"*) ;;
*) fail "gang-b estimate: '$est'" ;;
esac
yardctl --endpoints "$(api 1)" --token "$TOKEN" job show "$GB" >"$T/gang-b.show" || fail "job show $GB"
grep -q "^position  *1$" "$T/gang-b.show" || fail "job show $GB: no position: $(cat "$T/gang-b.show")"
grep -q "^start estimate no estimate: .*$GA" "$T/gang-b.show" ||
	fail "job show $GB: no estimate: $(cat "$T/gang-b.show")"
get 1 "/v1/jobs/$GB?stale=1"
[ "$(jget "$BODY" '"estimate" in d')" = False ] || fail "gang-b ?stale=1 has an estimate: $BODY"
note "gang-b: $est"
# with gang-b waiting, a job that fits is not placed at submission (it would overtake the
# queue there); a pass may still start it beside gang-b (backfill)
submit 1 "{\"name\":\"small\",\"ranks\":1,$(cmd sleep 0)}"
SMALL=$JOB
[ "$(jget "$BODY" 'd["state"]')" = pending ] || fail "small job placed at submission past gang-b: $BODY"
wait_until 20 job_state_is 1 "$SMALL" succeeded || fail "small job: $(events_of 1 "$SMALL")"
has_event 1 "$SMALL" "placed at submission" && fail "small job placed at submission: $(events_of 1 "$SMALL")"
touch "$T/gang-a.done"
# gang-b runs for about a second: its end state and the event order below prove it ran
# (polling for the short "running" state would race with it)
wait_until 30 job_state_is 1 "$GB" succeeded || fail "gang-b did not succeed: $(events_of 1 "$GB")"
has_event 1 "$GB" "job.running: " || fail "gang-b never ran: $(events_of 1 "$GB")"
job_state_is 1 "$GA" succeeded || fail "gang-a: $(job_field 1 "$GA" '["state"]')"
has_event 1 "$GB" "job.waiting: job $GB: needs 6 devices, 2 free" || fail "no waiting event for $GB"
# no partial gang: gang-b was placed only after gang-a had finished and freed its devices
get 1 "/v1/events?limit=1000"
order=$(jget "$BODY" '[e["type"] + " " + e["job"] for e in d["events"] if e["job"] in ("'"$GA"'", "'"$GB"'") and e["type"] in ("job.placed", "job.succeeded")]')
[ "$order" = "[\"job.placed $GA\", \"job.succeeded $GA\", \"job.placed $GB\", \"job.succeeded $GB\"]" ] ||
	fail "gang order: $order"

# env and gang-a found the queue empty and the devices free: each was placed in its
# submission's own raft entry (one event timestamp for both, the placement says so);
# gang-b did not fit and went through the queue
hist() { curl -s -H "$AUTH" "$(api 1)/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
[ "$(hist yard_sched_placed_at_submission_total)" = 2 ] ||
	fail "placed at submission: '$(hist yard_sched_placed_at_submission_total)', want env and gang-a"
[ "$(hist yard_sched_placed_at_submission_refused_total)" = 0 ] || fail "a placement at submission was refused"
for j in "$ENVJOB" "$GA"; do
	get 1 "/v1/events?job=$j&limit=1000"
	one=$(jget "$BODY" 'len(set(e["ts_ms"] for e in d["events"] if e["type"] in ("job.submitted", "job.placed")))')
	[ "$one" = 1 ] || fail "$j: its submission and placement are not one entry: $BODY"
	has_event 1 "$j" "job.placed: .*; placed at submission" || fail "$j: $(events_of 1 "$j")"
done
has_event 1 "$GB" "job.placed: .*; placed at submission" && fail "gang-b was placed at submission"
# where the time to placement went (/metrics histograms): gang-b's queue wait (it waited
# for gang-a's devices, over several of this test's requests) is over 50 ms; the leader's
# own commands were timed
waits=$(hist yard_sched_queue_wait_ms_count)
[ "${waits:-0}" -ge 1 ] || fail "queue waits counted: '$waits' for gang-b"
[ "$(hist 'yard_sched_queue_wait_ms_bucket{le="50"}')" -lt "$waits" ] ||
	fail "no queue wait over 50 ms counted (gang-b waited for gang-a)"
[ "$(hist 'yard_sched_queue_wait_ms_bucket{le="+Inf"}')" = "$waits" ] || fail "queue wait buckets do not add up"
commits=$(hist yard_raft_commit_duration_ms_count)
[ "${commits:-0}" -ge 6 ] || fail "commits timed: '$commits'"
[ "$(hist yard_sched_pickup_delay_ms_count)" -ge 1 ] || fail "no pickup delay counted"
[ "$(hist 'yard_sched_pass_duration_ms_count{pass="tick"}')" -ge 1 ] || fail "no tick pass timed"
# submit -> placed (committed): one per job placed so far (env, gang-a at submission,
# small and gang-b through the queue), gang-b's over 50 ms (it waited for gang-a's devices)
placed=$(hist yard_sched_submit_to_placed_ms_count)
[ "${placed:-0}" = 4 ] || fail "submit -> placed counted: '$placed' for 4 jobs placed"
[ "$(hist 'yard_sched_submit_to_placed_ms_bucket{le="50"}')" -lt 4 ] ||
	fail "no submit -> placed over 50 ms counted (gang-b waited for gang-a)"
note "$waits queue waits, $commits commits timed, $placed submit -> placed"

# ---- 3. a crashing rank: restart, then success ----
submit 1 "{\"name\":\"crash\",\"ranks\":3,$(cmd crash 1),\"failure\":{\"max_restarts\":2}}"
CJ=$JOB
wait_until 20 job_state_is 1 "$CJ" succeeded || fail "crash job: $(events_of 1 "$CJ")"
[ "$(job_field 1 "$CJ" '["restarts"]')" = 1 ] || fail "crash job restarts: $(job_field 1 "$CJ" '["restarts"]')"
[ "$(job_field 1 "$CJ" '["generation"]')" = 2 ] || fail "crash job generation"
has_event 1 "$CJ" "job.restarting: .*rank 1 on node node-.* exited with code 1" || fail "no restart event: $(events_of 1 "$CJ")"
grep -q YARD_RESUME=1 "$T/env/$CJ.0.2" || fail "generation 2 did not get YARD_RESUME=1"
# its placement after the restart is no submission's: one more submit -> placed, not two
[ "$(hist yard_sched_submit_to_placed_ms_count)" = $((placed + 1)) ] ||
	fail "submit -> placed after a restart: $(hist yard_sched_submit_to_placed_ms_count), want $((placed + 1))"

# ---- 4. max_restarts exceeded: failed ----
submit 1 "{\"name\":\"always-fails\",\"ranks\":2,$(cmd fail 0),\"failure\":{\"max_restarts\":1}}"
FJ=$JOB
wait_until 20 job_state_is 1 "$FJ" failed || fail "always-fails: $(events_of 1 "$FJ")"
[ "$(job_field 1 "$FJ" '["restarts"]')" = 1 ] || fail "always-fails restarts"
has_event 1 "$FJ" "job.failed: .*1 restart(s) used of 1" || fail "no failed event: $(events_of 1 "$FJ")"
wait_until 10 sh -c "! ls '$T/pids' | grep -q '^$FJ\.1\.2$' || ! kill -0 \$(cat '$T/pids/$FJ.1.2')" ||
	fail "the surviving rank of the failed job was not stopped"

# ---- 5. a hung rank (reports steps, then stops): detected and restarted ----
submit 1 "{\"name\":\"hang\",\"ranks\":2,$(cmd train 12 0.1 1),\"checkpoint\":{\"store\":\"dir:$T/ckpt\"},\"failure\":{\"hang_timeout_s\":2,\"max_restarts\":2}}"
HJ=$JOB
wait_until 40 job_state_is 1 "$HJ" succeeded || fail "hang job: $(events_of 1 "$HJ")"
has_event 1 "$HJ" "job.restarting: .*rank 1 on node node-.* made no step progress for" || fail "hang not detected: $(events_of 1 "$HJ")"
[ "$(job_field 1 "$HJ" '["step"]')" = 12 ] || fail "hang job final step: $(job_field 1 "$HJ" '["step"]')"
restored=$(events_of 1 "$HJ" | sed -n 's/.*restoring from checkpoint step \([0-9]*\).*/\1/p')
[ -n "$restored" ] && [ "$(cat "$T/start.$HJ.0.2")" = "$restored" ] && [ "$(cat "$T/start.$HJ.1.2")" = "$restored" ] ||
	fail "hang job: controller said step '$restored', ranks resumed from $(cat "$T/start.$HJ.0.2"), $(cat "$T/start.$HJ.1.2")"
note "hang detected and restarted; resumed from checkpoint step $restored"
# its restart names the step reached: the last one reported before the hang was seen
reached=$(events_of 1 "$HJ" | sed -n 's/^job.restarting: .*made no step progress for .*; reached step \([0-9]*\)$/\1/p')
[ -n "$reached" ] && [ "$reached" -ge 1 ] && [ "$reached" -le 12 ] || fail "hang job: no step reached in its restart: $(events_of 1 "$HJ")"
redone=$((reached > restored ? reached - restored : 0))
# its timeline: one interruption, a failure naming the hang, the step reached, restored from
# that checkpoint, the steps done again
yardctl --endpoints "$(api 1)" --token "$TOKEN" job timeline "$HJ" >"$T/hang.timeline" || fail "job timeline $HJ"
grep -q "^job $HJ: succeeded, 1 interruption(s)$" "$T/hang.timeline" &&
	grep -Eq "^1 +1 +failure +[0-9.]+s .* $reached +$restored +$redone +[0-9.]+s +rank 1 on node node-.* made no step progress for [0-9.]+ s \(hang_timeout_s 2\)$" "$T/hang.timeline" &&
	grep -q "^redone  *$redone step(s) done again after restoring checkpoints$" "$T/hang.timeline" &&
	grep -q "^progress  *[0-9.]*% of the" "$T/hang.timeline" || fail "job timeline $HJ: $(cat "$T/hang.timeline")"
get 1 "/v1/jobs/$HJ/timeline"
[ "$(jget "$BODY" '[d["complete"], d["end"], len(d["interruptions"]), d["interruptions"][0]["recovered"], d["interruptions"][0]["restored_step"] == '"$restored"', d["interruptions"][0]["reached_step"] == '"$reached"', d["interruptions"][0]["lost_steps"] == d["lost_steps"] == '"$redone"', 0 < d["interruptions"][0]["undetected_ms"] == d["undetected_ms"] <= 1000 * float(d["interruptions"][0]["cause"].split(" for ")[1].split(" s")[0]) + 1, 0 < d["progress_fraction"] < 1]')" = '[true, "succeeded", 1, true, true, true, true, true, true]' ] ||
	fail "timeline of $HJ: $BODY"
note "timeline: $(grep '^progress' "$T/hang.timeline"); $(grep '^redone' "$T/hang.timeline")"
# a rank that never reports a step: hung after failure.first_step_timeout_s, not never
submit 1 "{\"name\":\"mute\",\"ranks\":1,$(cmd sleep 60),\"failure\":{\"first_step_timeout_s\":2,\"max_restarts\":0}}"
MJ=$JOB
wait_until 20 job_state_is 1 "$MJ" failed || fail "mute job: $(events_of 1 "$MJ")"
has_event 1 "$MJ" "job.failed: .*rank 0 on node node-.* reported no step in the [0-9.]* s after it started (first_step_timeout_s 2)" ||
	fail "first-step timeout not named: $(events_of 1 "$MJ")"
note "a rank without a first step failed after first_step_timeout_s"
# a job past its time_limit_s (from its first placement) fails saying so, its ranks stopped;
# yardctl job show says when it ends
submit 1 "{\"name\":\"limited\",\"ranks\":2,$(cmd sleep 60),\"time_limit_s\":3,\"failure\":{\"max_restarts\":0}}"
LJ=$JOB
wait_until 10 sh -c "[ \$(ls '$T/pids' | grep -c '^$LJ\.') = 2 ]" || fail "limited did not start 2 ranks"
yardctl --endpoints "$(api 1)" --token "$TOKEN" job show "$LJ" >"$T/limited.show" || fail "job show $LJ"
grep -q "^time limit     3 s from its first placement (ends by 20" "$T/limited.show" ||
	fail "job show without its time limit: $(cat "$T/limited.show")"
lpids=$(cat "$T/pids/$LJ".*)
wait_until 20 job_state_is 1 "$LJ" failed || fail "limited: $(events_of 1 "$LJ")"
has_event 1 "$LJ" "job.failed: .*time limit reached: time_limit_s 3 from its first placement at" ||
	fail "time limit not named: $(events_of 1 "$LJ")"
lgone() { for p in $lpids; do ! alive "$p" || return 1; done; }
wait_until 10 lgone || fail "ranks still running after the time limit: $lpids"
note "a job failed at its time_limit_s of 3 s, ranks stopped"
# "after": a job placed only once the job it names has succeeded, waiting with a reason
submit 1 "{\"name\":\"first\",\"ranks\":1,$(cmd wait first.done)}"
AJ=$JOB
submit 1 "{\"name\":\"second\",\"ranks\":1,$(cmd sleep 0),\"after\":[\"$AJ\"]}"
BJ=$JOB
second_waits() { job_field 1 "$BJ" '["reason"]' | grep -q "waits for job $AJ (.*) to succeed (after)"; }
wait_until 5 second_waits && [ "$(job_field 1 "$AJ" '["state"]')" = running ] ||
	fail "second while first runs: $(job_field 1 "$BJ" '') / first $(job_field 1 "$AJ" '["state"]')"
touch "$T/first.done"
wait_until 20 job_state_is 1 "$BJ" succeeded || fail "second: $(events_of 1 "$BJ")"
[ "$(job_field 1 "$AJ" '["state"]')" = succeeded ] || fail "second ran before first ended"
[ "$(job_field 1 "$BJ" '["started_ms"]')" -ge "$(job_field 1 "$AJ" '["updated_ms"]')" ] ||
	fail "second started before first succeeded: $(job_field 1 "$BJ" '["started_ms"]') < $(job_field 1 "$AJ" '["updated_ms"]')"
note "a job with after: [$AJ] started once $AJ succeeded"
# a job waited for is not deleted while the job that waits for it is pending
submit 1 "{\"name\":\"quick\",\"ranks\":1,$(cmd sleep 0)}"
QJ=$JOB
submit 1 "{\"name\":\"slow\",\"ranks\":1,$(cmd wait slow.done)}"
SJ=$JOB
submit 1 "{\"name\":\"both\",\"ranks\":1,$(cmd sleep 0),\"after\":[\"$QJ\",\"$SJ\"]}"
WJ=$JOB
wait_until 10 job_state_is 1 "$QJ" succeeded || fail "quick: $(events_of 1 "$QJ")"
call DELETE 1 "/v1/jobs/$QJ"
[ "$CODE" = 409 ] && echo "$BODY" | grep -qF "job $QJ is waited for by job $WJ" || fail "deleting $QJ that $WJ waits for: $CODE $BODY"
touch "$T/slow.done"
wait_until 20 job_state_is 1 "$WJ" succeeded || fail "both: $(events_of 1 "$WJ")"
call DELETE 1 "/v1/jobs/$QJ"
[ "$CODE" = 200 ] || fail "deleting $QJ once $WJ ran: $CODE $BODY"

# ---- 6. cancel while running: every rank's process is gone ----
submit 1 "{\"name\":\"cancel-me\",\"ranks\":5,$(cmd sleep 60)}"
KJ=$JOB
wait_until 10 sh -c "[ \$(ls '$T/pids' | grep -c '^$KJ\.') = 5 ]" || fail "cancel-me did not start 5 ranks"
pids=$(cat "$T/pids/$KJ".*)
call POST 1 "/v1/jobs/$KJ/cancel"
[ "$CODE" = 200 ] || fail "cancel: $CODE $BODY"
gone() { for p in $pids; do ! alive "$p" || return 1; done; }
wait_until 10 gone || fail "ranks still running after cancel: $pids"
note "cancel stopped pids $(echo $pids)"

# ---- 7. agent restart with running ranks: re-adopted, no duplicates ----
submit 1 "{\"name\":\"adopt\",\"ranks\":8,$(cmd wait adopt.done)}"
AJ=$JOB
wait_until 10 sh -c "[ \$(ls '$T/pids' | grep -c '^$AJ\.') = 8 ]" || fail "adopt did not start 8 ranks"
before=$(cat "$T/pids/$AJ".* | sort | tr '\n' ' ')
kill_agent node-a
start_agent node-a 4 "$(api 1)"
wait_until 20 grep -q "re-adopted rank" "$T/log.agent-node-a" || fail "agent log does not show re-adoption"
touch "$T/adopt.done"
wait_until 20 job_state_is 1 "$AJ" succeeded || fail "adopt: $(events_of 1 "$AJ")"
after=$(cat "$T/pids/$AJ".* | sort | tr '\n' ' ')
[ "$before" = "$after" ] || fail "ranks were started again: $before -> $after"
[ "$(ls "$T/pids" | grep -c "^$AJ\.")" = 8 ] || fail "duplicate ranks: $(ls "$T/pids" | grep "^$AJ\.")"
[ "$(job_field 1 "$AJ" '["restarts"]')" = 0 ] || fail "adopt job restarted"

# ---- 7b. a burst of submissions: placed at submission or through the queue, never twice ----
# 30 jobs of 1-3 ranks at once on 8 devices: while some are placed in their submissions'
# entries, others wait in the queue and passes place them; the leader never offers a device
# twice (no placement at submission refused by the state machine) and every job succeeds
at_submit=$(metric 1 yard_sched_placed_at_submission_total)
burst_pids=()
for i in $(seq 1 30); do
	curl -s -m 30 -o "$T/burst.$i" -X POST -H "$AUTH" -H 'Content-Type: application/json' \
		--data "{\"name\":\"burst-$i\",\"ranks\":$((i % 3 + 1)),$(cmd sleep 0)}" "$(api 1)/v1/jobs" &
	burst_pids+=($!)
done
wait "${burst_pids[@]}" # (not a bare wait: the controller and agents are children too)
burst=$(cat "$T"/burst.* | python3 -c 'import json,sys; print(" ".join(json.loads(l)["id"] for l in sys.stdin.read().replace("}{", "}\n{").splitlines()))')
[ "$(wc -w <<<"$burst")" = 30 ] || fail "burst submissions: $(cat "$T"/burst.*)"
burst_done() { for j in $burst; do job_state_is 1 "$j" succeeded || return 1; done; }
wait_until 60 burst_done || fail "burst jobs: $(for j in $burst; do echo "$j $(job_field 1 "$j" '["state"]')"; done | tr '\n' ' ')"
[ "$(metric 1 yard_sched_placed_at_submission_refused_total)" = 0 ] ||
	fail "placements at submission refused: $(metric 1 yard_sched_placed_at_submission_refused_total) ($(grep 'not placed at submission' "$T/log.1" | head -3))"
! grep "job.assign .* refused" "$T/log.1" || fail "a pass offered a device held at submission"
note "burst of 30: $(($(metric 1 yard_sched_placed_at_submission_total) - at_submit)) placed at submission, the rest through the queue, none refused"

# ---- 8. agent protocol: who may call what, and bad input ----
NT=$(cat "$T/agent-node-a/node.token")
hb() { CODE=$(curl -s -o "$T/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $1" --data "$2" "$(api 1)/v1/agents/heartbeat"); BODY=$(cat "$T/body"); }
hb "$NT" '{"node":"node-b","ranks":[]}'
[ "$CODE" = 403 ] || fail "node-a's token heartbeating as node-b: $CODE $BODY"
hb "$NT" '{"node":"node-a","ranks":[{"job":"j-1","rank":"x"}]}'
[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"ranks\[0\]' || fail "bad rank report: $CODE $BODY"
hb "$NT" '{"node":"node-a","bogus":1}'
[ "$CODE" = 400 ] || fail "unknown heartbeat field: $CODE"
hb "$TOKEN" '{"node":"node-a"}'
[ "$CODE" = 403 ] || fail "admin token on the heartbeat route: $CODE"
hb "$JOIN" '{"node":"node-a"}'
[ "$CODE" = 403 ] || fail "join token on the heartbeat route: $CODE"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $NT" "$(api 1)/v1/jobs")
[ "$code" = 403 ] || fail "node token reading jobs: $code"
reg() { CODE=$(curl -s -o "$T/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $JOIN" --data "$1" "$(api 1)/v1/agents/register"); BODY=$(cat "$T/body"); }
reg '{"name":"x","host":"127.0.0.1","port_base":100,"devices":[]}'
[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"devices"' || fail "register without devices: $CODE $BODY"
reg '{"name":"bad name","host":"127.0.0.1","port_base":100,"devices":[{"index":0,"kind":"cpu"}]}'
[ "$CODE" = 400 ] || fail "register with a bad name: $CODE $BODY"
reg '{"name":"x","host":"127.0.0.1","port_base":100,"devices":[{"index":0,"kind":"tpu"}]}'
[ "$CODE" = 400 ] || fail "register with a bad device kind: $CODE $BODY"
# a live node's name is refused (409 naming the field): its agent keeps its token
reg '{"name":"node-a","host":"127.0.0.1","port_base":100,"devices":[{"index":0,"kind":"cpu"}]}'
[ "$CODE" = 409 ] && echo "$BODY" | grep -q '"field":"name"' && echo "$BODY" | grep -q 'is live' ||
	fail "register over a live node: $CODE $BODY"
# only registrations are checked against live nodes: a token may share a node's name
call POST 1 /v1/tokens '{"name":"node-a","role":"user"}'
[ "$CODE" = 201 ] || fail "a token named like a live node: $CODE $BODY"
get 1 /v1/nodes
[ "$(jget "$BODY" 'len(d["nodes"])')" = 2 ] || fail "bad registrations changed the node list: $BODY"
call POST 1 /v1/nodes/node-b/cordon
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["cordoned"]')" = True ] || fail "cordon: $CODE $BODY"
submit 1 "{\"name\":\"cordoned\",\"ranks\":5,$(cmd sleep 1)}"
wait_until 5 sh -c "curl -s -H '$AUTH' '$(api 1)/v1/jobs/$JOB' | grep -q 'needs 5 devices, 4 free'" || fail "cordoned node still offered: $(job_field 1 "$JOB" '')"
call POST 1 /v1/nodes/node-b/uncordon
wait_until 20 job_state_is 1 "$JOB" succeeded || fail "job after uncordon"
note "ok"
