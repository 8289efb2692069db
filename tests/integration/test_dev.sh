#!/usr/bin/env bash
# test_dev.sh: `yardd --dev --devices 4`: one process prints the API URL and the admin token,
# starts its own agent with 4 CPU devices, and runs a 4-rank command job to success; SIGTERM
# stops yardd and its agent.
. "$(dirname "$0")/lib.sh"

"$YARDD" --dev --devices 4 --dev-port-base $((PORT_BASE + 40)) --data-dir "$T/dev" \
	--raft-address "127.0.0.1:$(raft_port 1)" \
	--api-address "127.0.0.1:$(api_port 1)" >"$T/dev.out" 2>>"$T/log.1" &
PID[1]=$!
wait_until 10 grep -q "token:" "$T/dev.out" || fail "no banner: $(cat "$T/dev.out")"
grep -q "API:    $(api 1)" "$T/dev.out" || fail "banner without the API URL: $(cat "$T/dev.out")"
DEV_TOKEN=$(sed -n 's/^  token:  \([0-9a-f]*\) .*/\1/p' "$T/dev.out")
[ "$DEV_TOKEN" = "$(cat "$T/dev/admin.token")" ] || fail "banner token is not the admin token"
AUTH="Authorization: Bearer $DEV_TOKEN"
wait_until 10 node_state_is 1 dev up || fail "the dev agent did not register: $(cat "$T/dev/agent.log")"
get 1 /v1/nodes/dev
[ "$(jget "$BODY" 'len(d["devices"])')" = 4 ] || fail "dev node: $BODY"
write_rank_script
submit 1 "{\"name\":\"dev-job\",\"ranks\":4,$(cmd sleep 0.5)}"
wait_until 20 job_state_is 1 "$JOB" succeeded || fail "dev job: $(events_of 1 "$JOB")"
[ "$(ls "$T/pids" | grep -c "^$JOB\.")" = 4 ] || fail "dev job did not run 4 ranks"
agent_pid=$(pgrep -P "${PID[1]}" -f yard-agent)
[ -n "$agent_pid" ] || fail "no yard-agent child of yardd"
kill -TERM "${PID[1]}"
wait_until 10 sh -c "! kill -0 ${PID[1]} 2>/dev/null" || fail "yardd --dev did not stop on SIGTERM"
wait_until 5 sh -c "! kill -0 $agent_pid 2>/dev/null" || fail "its agent kept running"
unset "PID[1]"
note "ok: banner, agent with 4 devices, job succeeded, clean stop"
