#!/usr/bin/env bash
# test_reprobe.sh: the agent measures its node again (--reprobe-s) when its rates are that old
# and no rank runs, and the leader takes the new rates; never while a rank runs (a probe
# still running when a rank starts is discarded). One controller, one agent.
. "$(dirname "$0")/lib.sh"

agent_refuses "--reprobe-s -1" "--reprobe-s 1h" "--reprobe-s 31536001"
# --devices cuda:auto without a usable GPU: refused before start, naming the flag and why
# (where a GPU exists the agent starts instead, and is stopped by the timeout)
out=$(timeout 5 "$YARD_AGENT" --controllers http://127.0.0.1:1 --data-dir "$T/none" --name n \
	--devices cuda:auto 2>&1)
rc=$?
[ "$rc" = 124 ] || { [ "$rc" = 2 ] && grep -Eq "^yard-agent: --devices: cuda:auto: (the CUDA \
runtime \(libcudart\) is not installed|no CUDA device found \(cudaGetDeviceCount: error)" \
	<<<"$out"; } || fail "--devices cuda:auto: exit $rc: $out"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
L=$T/log.agent-node-a
start_agent node-a 1 "$(api 1)" --reprobe-s 2
wait_until 15 node_state_is 1 node-a up || fail "node-a did not register"
flops() { get 1 /v1/nodes/node-a; jget "$BODY" 'repr(d["perf"]["flops_per_s"])'; }
again() { grep -c "node probe again (no rank runs)" "$L"; }
again_at_least() { [ "$(again)" -ge "$1" ]; }
wait_until 30 flops || fail "the leader has no rates for node-a: $BODY"
first=$(flops)
wait_until 30 again_at_least 1 || fail "no second probe: $(grep "probe" "$L")"
changed() { [ "$(flops)" != "$first" ]; }
wait_until 10 changed || fail "the leader kept the first rates ($first): $(grep "probe" "$L")"
note "idle node measured again: flops_per_s $first -> $(flops) at the leader"

# a rank runs for longer than two re-probe intervals: no probe is taken meanwhile
submit 1 "{\"name\":\"busy\",\"ranks\":1,\"command\":[\"sh\",\"-c\",\"i=0; while [ ! -e $T/done ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done\"]}"
J=$JOB
wait_until 20 grep -q "started rank 0 of $J" "$L" || fail "job $J did not start"
started=$(grep -n "started rank 0 of $J" "$L" | cut -d: -f1)
sleep 5 # two re-probe intervals with a rank running: nothing is awaited, time must pass
touch "$T/done"
wait_until 20 job_state_is 1 "$J" succeeded || fail "job $J did not succeed: $(job_field 1 "$J" '')"
ended=$(grep -n "rank 0 of $J (pid [0-9]*) exited" "$L" | cut -d: -f1)
[ -n "$ended" ] || fail "no exit of $J in the agent log"
during=$(sed -n "$((started + 1)),$((ended - 1))p" "$L" | grep -c "node probe again (no rank runs)")
[ "$during" = 0 ] || fail "the node was probed while a rank ran: $(sed -n "${started},${ended}p" "$L")"
n=$(again)
wait_until 15 again_at_least $((n + 1)) || fail "no probe after the rank ended: $(tail -n 5 "$L")"
note "no probe while the rank ran ($(sed -n "${started},${ended}p" "$L" | grep -c "discarded") discarded as a rank started); probed again once it had ended"
