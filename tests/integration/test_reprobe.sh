#!/usr/bin/env bash
# test_reprobe.sh: the agent measures its node again (--reprobe-s) when its rates are that old
# and no rank runs, and the leader takes the new rates; never while a rank runs (a probe
# still running when a rank starts is discarded). A node's first probe during which a rank
# started is kept (the node is planned for) but measured again as soon as no rank runs,
# whatever --reprobe-s says. One controller, two agents.
. "$(dirname "$0")/lib.sh"

agent_refuses "--reprobe-s -1" "--reprobe-s 1h" "--reprobe-s 31536001" "--probe-timeout-ms 999" \
	"--probe-timeout-ms 5s"
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

# ---- a first probe during which a rank starts: kept, then measured again once idle
# node-b's worker is a wrapper whose probes wait (at most 4 s) until a rank of the job below has
# started. The job of 2 ranks waits for node-b (node-a has one device), so its rank on node-b
# starts while node-b's first probe runs. That probe must then finish within its attempt's
# limit: 20 s here (--probe-timeout-ms), not the default 5 s, which a loaded machine overran.
rm -f "$T/done"
probe_worker "$T/worker" "	i=0
	while [ ! -e '$T/rank-started' ] && [ \$i -lt 40 ]; do sleep 0.1; i=\$((i + 1)); done"
submit 1 "{\"name\":\"overlap\",\"ranks\":2,\"command\":[\"sh\",\"-c\",\"touch $T/rank-started; i=0; while [ ! -e $T/done ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done\"]}"
J=$JOB
LB=$T/log.agent-node-b
start_agent node-b 1 "$(api 1)" --worker "$T/worker" --probe-retry-ms 1000 --probe-timeout-ms 20000
wait_until 20 job_state_is 1 "$J" running || fail "job $J did not run: $(job_field 1 "$J" '')"
kept() { grep -q "node probe: .*a rank started meanwhile, so the node is measured again as soon as no rank runs" "$LB"; }
wait_until 20 kept || fail "node-b's first probe did not overlap a rank: $(grep "probe\|started rank" "$LB")"
has_rates() { get 1 /v1/nodes/node-b; [ "$(jget "$BODY" '"perf" in d')" = True ]; }
wait_until 10 has_rates || fail "the leader has no rates for node-b: $BODY"
job_state_is 1 "$J" running || fail "job $J ended early: $(job_field 1 "$J" '')"
! grep -q "node probe again" "$LB" || fail "node-b was probed again while its rank ran: $(grep "probe" "$LB")"
touch "$T/done"
wait_until 20 job_state_is 1 "$J" succeeded || fail "job $J did not succeed: $(job_field 1 "$J" '')"
again_b() { grep -c "node probe again (no rank runs)" "$LB"; }
idle_probed() { [ "$(again_b)" -ge 1 ]; }
wait_until 15 idle_probed || fail "node-b was not measured again once idle: $(grep "probe" "$LB")"
sleep 3 # a second re-probe would follow within a second (--probe-retry-ms): time must pass
[ "$(again_b)" = 1 ] || fail "node-b was measured again more than once (--reprobe-s 3600): $(grep "probe" "$LB")"
note "node-b: first rates kept while a rank started during them, measured again once the rank had ended, once"

# ---- yardctl node probe: node-b (--reprobe-s 3600) measured again when an operator asks; while
# a rank runs there, once none does
ctl() { yardctl --endpoints "$(api 1)" --token "$TOKEN" "$@"; }
flops_b() { get 1 /v1/nodes/node-b; jget "$BODY" 'repr(d["perf"]["flops_per_s"])'; }
before=$(flops_b)
n=$(again_b)
ctl node probe node-b >"$T/probe.out" 2>&1 || fail "yardctl node probe: $(cat "$T/probe.out")"
grep -q "^node node-b asked to measure its rates again (request [0-9]*): its agent probes as soon as no rank runs there" "$T/probe.out" ||
	fail "yardctl node probe said: $(cat "$T/probe.out")"
asked_now() { grep -q "the leader asked for this node's rates to be measured again (request [0-9]*, yardctl node probe): probing now" "$LB"; }
wait_until 15 asked_now || fail "node-b's agent did not take the request: $(grep -i "probe" "$LB" | tail -n 3)"
probed_again() { [ "$(again_b)" -ge "$1" ]; }
wait_until 15 probed_again $((n + 1)) || fail "node-b was not measured again when asked: $(grep -i "probe" "$LB" | tail -n 3)"
changed_b() { [ "$(flops_b)" != "$before" ]; }
wait_until 10 changed_b || fail "the leader kept node-b's rates ($before)"
# yardctl node show prints the rates the planner uses
ctl node show node-b >"$T/show" 2>&1 || fail "yardctl node show: $(cat "$T/show")"
grep -Eq "^rates +[0-9.]+ GFLOP/s per device \([0-9]+% each when all compute\), intra-node [0-9.]+ GB/s, inter-node [0-9.]+ GB/s \(" "$T/show" ||
	fail "yardctl node show prints no rates: $(cat "$T/show")"
note "yardctl node probe: node-b measured again (flops_per_s $before -> $(flops_b))"
# a node that does not exist, or a bad name: refused, naming it
! ctl node probe node-z >"$T/probe.out" 2>&1 && grep -q "404 from .*: no node 'node-z'" "$T/probe.out" ||
	fail "probe of an unknown node: $(cat "$T/probe.out")"
# a rank runs on node-b: the probe waits for it to end
rm -f "$T/done" "$T/rank-started"
submit 1 "{\"name\":\"held\",\"ranks\":2,\"command\":[\"sh\",\"-c\",\"i=0; while [ ! -e $T/done ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done\"]}"
J=$JOB
wait_until 20 grep -q "started rank [01] of $J" "$LB" || fail "job $J did not start on node-b"
n=$(again_b)
ctl node probe node-b >"$T/probe.out" 2>&1 || fail "yardctl node probe: $(cat "$T/probe.out")"
waits() { grep -q "measured again (request [0-9]*, yardctl node probe): the probe waits until no rank runs here" "$LB"; }
wait_until 15 waits || fail "node-b's agent did not say its probe waits: $(grep -i "probe" "$LB" | tail -n 3)"
sleep 3 # the probe must not start while the rank runs: time must pass
[ "$(again_b)" = "$n" ] || fail "node-b was probed while its rank ran: $(grep -i "probe" "$LB" | tail -n 3)"
touch "$T/done"
wait_until 20 job_state_is 1 "$J" succeeded || fail "job $J did not succeed: $(job_field 1 "$J" '')"
wait_until 15 probed_again $((n + 1)) || fail "node-b was not measured once its rank had ended: $(grep -i "probe" "$LB" | tail -n 3)"
note "yardctl node probe while a rank ran: node-b measured once it had ended"
