#!/usr/bin/env bash
# test_upgrade_grace.sh: an agent's restart into a new build is not a dead node, and the
# grace it gets has an end. One controller judging silence tightly (suspect 1 s, down 2 s,
# restart grace 12 s), one agent running a 1-rank job:
#  1. a build that takes 5.5 s to start (scripts/mark-build --fault slow-start; a loaded
#     machine took 2.9 s in train_rollout.sh): the agent tells the leader it restarts before
#     its exec, the node is never suspect nor down, the rollout completes, the rank runs on
#     (its yard-report, sent every 0.1 s, waits for the restarted agent to read it);
#  2. a build that never heartbeats (gate 20 s): the node is declared down once down + grace
#     (14 s) of silence passed, naming the restart, before the guardian brings the previous
#     build back at the gate; the rollout rolls back and the node comes back up on it.
. "$(dirname "$0")/lib.sh"

YARDCTL=${YARDCTL:-yardctl}
MARK_BUILD=${MARK_BUILD:-$top_srcdir/scripts/mark-build}
AGENT_BIN=$(command -v "$YARD_AGENT")
trap 'cleanup_upgraded_agents; cleanup_agents; cleanup' EXIT

# bad values of the flag are refused, naming it
for bad in -1 3600001 5s; do
	out=$("$YARDD" --id 1 --data-dir "$T/bad" --raft-address 127.0.0.1:1 --api-address 127.0.0.1:2 \
		--members 1=127.0.0.1:1@http://127.0.0.1:2 --node-restart-grace-ms "$bad" 2>&1)
	rc=$?
	[ "$rc" = 2 ] && grep -q -- "--node-restart-grace-ms: '$bad'" <<<"$out" ||
		fail "--node-restart-grace-ms $bad: exit $rc: $out"
done

start_member 1 "$(members_arg 1)" --node-suspect-ms 1000 --node-down-ms 2000 --node-restart-grace-ms 12000
wait_leader 10 1 || fail "no leader"
make_join_token 1
write_rank_script
start_agent node-1 1 "$(api 1)"
wait_until 10 node_state_is 1 node-1 up || fail "node-1 did not register"
get 1 /v1/cluster
[ "$(jget "$BODY" 'd["heartbeats"]["node_restart_grace_ms"]')" = 12000 ] || fail "no restart grace in /v1/cluster: $BODY"
"$YARDCTL" --endpoints "$(api 1)" --token "$TOKEN" cluster status >"$T/out" 2>&1 || fail "cluster status: $(cat "$T/out")"
grep -q "12.0 s more while an agent restarts into a new build" "$T/out" || fail "cluster status: $(cat "$T/out")"

ctl() { "$YARDCTL" --endpoints "$(api 1)" --token "$TOKEN" "$@"; }
mkdir -p "$T/builds"
mark() { "$MARK_BUILD" "$AGENT_BIN" "$T/builds/$1" --version "$1" "${@:2}" >/dev/null || fail "mark-build $1"; }
mark 2.0.0-slow --fault slow-start
mark 3.0.0-mute --fault no-heartbeat
for v in 2.0.0-slow 3.0.0-mute; do
	ctl build upload "$T/builds/$v" --version "$v" --component agent >"$T/out" 2>&1 || fail "upload $v: $(cat "$T/out")"
done

submit 1 "{\"name\":\"through\",\"ranks\":1,$(cmd train 100000 0.1),\"failure\":{\"max_restarts\":3,\"hang_timeout_s\":60}}"
J=$JOB
wait_until 20 job_state_is 1 "$J" running || fail "job did not start"
wait_until 10 test -f "$T/pids/$J.0.1" || fail "rank 0 did not start"
RANK_PID=$(cat "$T/pids/$J.0.1")
node_events() { get 1 "/v1/events?limit=1000"; jget "$BODY" '"\n".join(e["type"] + ": " + e["message"] for e in d["events"] if e["type"] in ("node.suspect", "node.down", "node.up"))'; }
node_version() { get 1 /v1/nodes/node-1; jget "$BODY" 'd["version"]'; }
ro_is() { get 1 "/v1/rollouts/$1"; [ "$(jget "$BODY" 'd["state"]')" = "$2" ]; }
start_rollout() { # BUILD GATE_S: id in $RO
	call POST 1 /v1/rollouts "{\"build\":\"$1\",\"waves\":\"100%\",\"soak_s\":1,\"gate_timeout_s\":$2}"
	[ "$CODE" = 201 ] || fail "rollout of $1: $CODE $BODY"
	RO=$(jget "$BODY" 'd["id"]')
}

# ---- 1. a slow start is not a dead node ----
start_rollout 2.0.0-slow 30
wait_until 60 ro_is "$RO" completed || fail "rollout $RO of the slow build did not complete: $BODY; $(node_events); $(tail -n 20 "$T/log.agent-node-1")"
[ "$(node_version)" = 2.0.0-slow ] || fail "node-1 runs $(node_version)"
grep -q "starting [0-9]* ms late on purpose" "$T/log.agent-node-1" || fail "the slow build did not start slowly: $(tail -n 20 "$T/log.agent-node-1")"
grep -q "telling the leader the agent restarts" "$T/log.agent-node-1" || fail "the agent did not announce its restart"
grep -q "restarting anyway" "$T/log.agent-node-1" && fail "the announcement was not answered: $(grep -n "restarting anyway" "$T/log.agent-node-1")"
ev=$(node_events)
[ -z "$ev" ] || fail "node-1 changed state during a 5.5 s restart with 12 s of grace: $ev"
alive "$RANK_PID" || fail "the rank died during the upgrade"
note "rollout $RO: node-1 restarted into a build 5.5 s slow to start and stayed up, its rank reporting through it"

# ---- 2. the grace ends: a build that never heartbeats ----
start_rollout 3.0.0-mute 20
wait_until 30 node_state_is 1 node-1 down || fail "node-1 was not declared down: $BODY; $(node_events)"
t_down=$(now_ms)
ev=$(node_events)
grep -q "node.down: node node-1 .* -> down: no heartbeat for .* since its agent said it was restarting into a new build (12.0 s of grace included)" <<<"$ev" ||
	fail "the down event does not name the restart: $ev"
grep -q "node.suspect: node node-1 up -> suspect: no heartbeat for [1-9][0-9]*\.[0-9] s since its agent said" <<<"$ev" ||
	fail "no suspect event after the grace: $ev"
secs=$(sed -n 's/.*node.suspect: node node-1 up -> suspect: no heartbeat for \([0-9]*\)\..*/\1/p' <<<"$ev" | tail -n 1)
[ "${secs:-0}" -ge 13 ] || fail "node-1 was suspect after ${secs:-?} s of silence, before suspect + grace (13 s): $ev"
wait_until 40 ro_is "$RO" rolled-back || fail "rollout $RO did not roll back: $BODY"
wait_until 20 node_state_is 1 node-1 up || fail "node-1 did not come back: $BODY; $(node_events)"
[ "$(node_version)" = 2.0.0-slow ] || fail "node-1 runs $(node_version) after the rollback"
note "rollout $RO: node-1 down after its restart's grace ended, back up $((($(now_ms) - t_down) / 1000)) s later on the previous build"
echo "PASS"
