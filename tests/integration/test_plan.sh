#!/usr/bin/env bash
# test_plan.sh: the parallelism planner end to end on `yardd --dev --devices 4`: the dev agent
# measures its rates (heartbeat "perf"), `yardctl plan` ranks layouts for them, bad specs are
# refused naming the field, and a `parallel: "auto"` job is planned at placement, records its
# plan, runs its ranks in the planned layout and succeeds.
. "$(dirname "$0")/lib.sh"

"$YARDD" --dev --devices 4 --dev-port-base $((PORT_BASE + 40)) --data-dir "$T/dev" \
	--raft-address "127.0.0.1:$(raft_port 1)" \
	--api-address "127.0.0.1:$(api_port 1)" >"$T/dev.out" 2>>"$T/log.1" &
PID[1]=$!
wait_until 10 grep -q "token:" "$T/dev.out" || fail "no banner: $(cat "$T/dev.out")"
# lib.sh's cleanup SIGKILLs yardd, which then cannot stop its agent: the agent is killed too
wait_until 10 pgrep -P "${PID[1]}" -f yard-agent || fail "yardd --dev started no agent"
PID[agent]=$(pgrep -P "${PID[1]}" -f yard-agent)
AUTH="Authorization: Bearer $(cat "$T/dev/admin.token")"
export YARD_ENDPOINTS=$(api 1) YARD_TOKEN=$(cat "$T/dev/admin.token")

node_has_perf() { get 1 /v1/nodes/dev; [ "$(jget "$BODY" '"perf" in d')" = True ]; }
# the agent's probe gets 5 s, then 10 s, then 20 s, 2 s apart: under a loaded test run the
# first two may be stopped (a probe of ~2.2 s alone took over 10 s there)
wait_until 45 node_has_perf || fail "the dev agent reported no measured rates: $BODY $(tail -5 "$T/dev/agent.log")"
flops=$(jget "$BODY" 'd["perf"]["flops_per_s"]')
python3 -c "import sys; sys.exit(0 if float('$flops') > 1e6 else 1)" || fail "implausible FLOP rate: $flops"

cat >"$T/auto.json" <<'JSON'
{"name": "auto-job",
 "model": {"d_in": 32, "d_model": 64, "d_ff": 128, "layers": 8, "classes": 10, "seed": 1},
 "train": {"steps": 20, "batch_size": 64, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 2, "samples": 1024},
 "parallel": "auto",
 "resources": {"device": "cpu"}}
JSON

# yardctl plan: a ranked table, a summary and the reason the winner won
timeout 30 yardctl plan "$T/auto.json" >"$T/plan.out" 2>"$T/plan.err" || fail "yardctl plan: $(cat "$T/plan.err")"
grep -q "STEP_MS" "$T/plan.out" || fail "plan output has no table: $(cat "$T/plan.out")"
rows=$(grep -cE '^[0-9]+ +dp[0-9]+×tp[0-9]+×pp[0-9]+' "$T/plan.out")
[ "$rows" -ge 2 ] || fail "plan lists $rows candidates: $(cat "$T/plan.out")"
grep -q "^why: dp" "$T/plan.out" || fail "plan does not say why the winner won: $(cat "$T/plan.out")"
grep -q "^cluster: 4 device(s)" "$T/plan.out" || fail "plan is not for the 4 dev devices: $(cat "$T/plan.out")"
timeout 30 yardctl plan "$T/auto.json" --limit 3 >"$T/plan3.out" || fail "yardctl plan --limit 3"
[ "$(grep -cE '^[0-9]+ +dp' "$T/plan3.out")" = 3 ] || fail "--limit 3: $(cat "$T/plan3.out")"
# JSON: candidates best first
call POST 1 "/v1/plan?limit=0" "$(cat "$T/auto.json")"
[ "$CODE" = 200 ] || fail "POST /v1/plan: $CODE $BODY"
sorted=$(jget "$BODY" 'all(a["step_ms"] <= b["step_ms"] for a, b in zip(d["candidates"], d["candidates"][1:]))')
[ "$sorted" = True ] || fail "candidates not ranked by predicted step time"
[ "$(jget "$BODY" 'len(d["candidates"]) == d["count"]')" = True ] || fail "limit=0 did not return all"
# this agent's probe measures the allreduce figures: they are the plan's, a 0 among them too
[ "$(jget "$BODY" 'd["cluster"]["intra_allreduce_measured"]')" = True ] ||
	fail "the plan does not use the measured allreduce figures: $(jget "$BODY" 'd["cluster"]')"
best=$(jget "$BODY" 'd["candidates"][0]["layout"]')

# bad input is refused naming what was wrong
call POST 1 /v1/plan '{"name":"x","model":{"d_ff":0},"parallel":"auto"}'
[ "$CODE" = 400 ] && grep -q "model.d_ff" <<<"$BODY" || fail "bad model: $CODE $BODY"
call POST 1 /v1/plan '{"name":"x","command":["true"],"ranks":2}'
[ "$CODE" = 400 ] && grep -q "command" <<<"$BODY" || fail "command job: $CODE $BODY"
timeout 10 yardctl plan /nonexistent.json 2>"$T/err" && fail "yardctl plan of a missing file succeeded"
grep -q "nonexistent.json" "$T/err" || fail "missing file not named: $(cat "$T/err")"

# an "auto" job: planned, placed, run in the planned layout, succeeded
submit 1 "$(cat "$T/auto.json")"
wait_until 60 job_state_is 1 "$JOB" succeeded || fail "auto job: $(events_of 1 "$JOB") $BODY"
get 1 "/v1/jobs/$JOB"
plan=$(jget "$BODY" 'd["plan"]["layout"]')
[ -n "$plan" ] && [ "$plan" != None ] || fail "the job recorded no plan: $BODY"
world=$(jget "$BODY" 'd["plan"]["layout"]["dp"] * d["plan"]["layout"]["tp"] * d["plan"]["layout"]["pp"]')
[ "$(jget "$BODY" 'len(d["layout"])')" = "$world" ] || fail "placed $(jget "$BODY" 'len(d["layout"])') ranks for a plan of $world: $BODY"
[ "$(jget "$BODY" 'd["spec"]["parallel"]')" = auto ] || fail "the spec no longer says auto: $BODY"
# the best few candidates are recorded in rank order, the winner first (the dashboard's table)
ranked=$(jget "$BODY" 'len(d["plan"]["ranked"])')
[ "$ranked" -ge 2 ] && [ "$ranked" -le 5 ] || fail "the plan recorded $ranked ranked candidates (want 2..5): $BODY"
[ "$(jget "$BODY" 'd["plan"]["ranked"][0]["layout"] == d["plan"]["layout"] and d["plan"]["ranked"][1] == d["plan"]["runner_up"]')" = True ] ||
	fail "the ranked candidates do not start with the winner and the runner-up: $BODY"
[ "$(jget "$BODY" 'all(a["step_ms"] <= b["step_ms"] for a, b in zip(d["plan"]["ranked"], d["plan"]["ranked"][1:]))')" = True ] ||
	fail "the recorded candidates are not ranked by predicted step time: $BODY"
# the committed step is the latest a heartbeat carried before the ranks exited
[ "$(jget "$BODY" 'd["step"] > 0')" = True ] || fail "the job reported no step: $BODY"
timeout 10 yardctl job show "$JOB" >"$T/show.out" || fail "yardctl job show"
grep -q "^plan: *dp" "$T/show.out" || fail "job show has no plan: $(cat "$T/show.out")"
kill -TERM "${PID[1]}"
wait_until 10 sh -c "! kill -0 ${PID[1]} 2>/dev/null" || fail "yardd --dev did not stop on SIGTERM"
wait_until 10 sh -c "! kill -0 ${PID[agent]} 2>/dev/null" || fail "its agent kept running"
unset "PID[1]" "PID[agent]"
note "ok: rates measured (${flops} flop/s), plan ranked $rows+ layouts (best $best), auto job ran $plan and succeeded"
