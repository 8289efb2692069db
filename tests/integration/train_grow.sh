#!/usr/bin/env bash
# train_grow.sh: a parallel "auto" job grows when the cluster does. One controller and four
# agents with one CPU device each, all measured while idle; all but the one measured slowest
# are cordoned, so the planner lays the job over that node's one device (its plan records a
# cluster of 1; the slowest, because a plan is costed at its slowest node's rates, and on a
# loaded machine the four probes can measure 2-8x apart: a first node measured fastest would
# make the four-node plans look slower than the one it runs). Once the others are
# uncordoned, the leader asks the ranks for a checkpoint (the job saves none on its own:
# every_steps 0), restarts the job (not counted) once they saved it and plans it again over
# the larger cluster
# (job.replanned: "growing: ... (planned for 1 device(s), 4 now)"); the new ranks restore the
# one-rank checkpoint resharded, and the job succeeds: every step after the restore equals,
# within a relative 1e-5, a yard-run of the first layout up to that step that goes on in the
# second from its checkpoint (lib.sh's reference_legs; the same samples and global batch, and
# the same order of sums: bitwise equal so far). (Nodes that join while the job trains are
# measured on cores its rank keeps busy here, 2 cores for everything, and the planner then
# predicts them slower; the unit test test_auto_job_grows_when_nodes_are_measured_later
# covers nodes measured late.)
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built"
	exit 77
fi
steps=600
cat >"$T/job.json" <<JSON
{"name": "grow",
 "model": {"d_in": 64, "d_model": 128, "d_ff": 512, "layers": 8, "classes": 10, "seed": 1},
 "train": {"steps": $steps, "batch_size": 64, "lr": 0.003, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 2, "samples": 4096},
 "parallel": "auto",
 "resources": {"device": "cpu"},
 "checkpoint": {"store": "dir:$T/ckpt"},
 "failure": {"max_restarts": 0, "hang_timeout_s": 60}}
JSON
# paced (debug.block_ms; results do not change) so that the run outlasts the growing
pace_spec "$T/job.json" 1

# --auto-grow-pct 100: the test is about growing, not about the gain the planner predicts (on
# 2 shared cores, loaded further, pp4 was once predicted at 0.96 of the one rank's step, and
# 95 kept the job on its one node to the end)
start_member 1 "$(members_arg 1)" --auto-grow-pct 100
wait_leader 10 1 || fail "no leader"
make_join_token 1
node_has_perf() { get 1 "/v1/nodes/$1"; [ "$(jget "$BODY" 'd["state"] == "up" and "perf" in d')" = True ]; }
all="node-a node-b node-c node-d"
for n in $all; do start_agent "$n" 1 "$(api 1)" --probe-timeout-ms 20000; done
for n in $all; do
	wait_until 120 node_has_perf "$n" || fail "$n did not report measured rates: $BODY"
done
ctl() { yardctl --endpoints "$(api 1)" --token "$TOKEN" "$@"; }
get 1 /v1/nodes
slowest=$(jget "$BODY" 'min(d["nodes"], key=lambda n: n["perf"]["flops_per_s"])["id"]')
others=$(for n in $all; do [ "$n" = "$slowest" ] || echo "$n"; done | tr '\n' ' ')
for n in $others; do ctl node cordon "$n" >"$T/out" 2>&1 || fail "cordon $n: $(cat "$T/out")"; done

submit 1 "$(cat "$T/job.json")"
J=$JOB
placed() { get 1 "/v1/jobs/$J"; grep -q '"layout":\[{' <<<"$BODY"; }
wait_until 30 placed || fail "job was not placed: $BODY $(events_of 1 "$J")"
first=$(jget "$BODY" 'd["plan"]["layout"]')
[ "$(jget "$BODY" 'len(d["layout"]), d["plan"]["cluster"]["devices"]')" = "(1, 1)" ] ||
	fail "the job is not planned for $slowest's one device: $BODY"
was=$(jget "$first" '"dp%d×tp%d×pp%d" % (d["dp"], d["tp"], d["pp"])')
note "planned $was on $slowest alone (measured slowest; $others cordoned)"

# ---- three nodes uncordoned: the job grows from the checkpoint it is asked for ----
for n in $others; do ctl node uncordon "$n" >"$T/out" 2>&1 || fail "uncordon $n: $(cat "$T/out")"; done
grown() { get 1 "/v1/jobs/$J"; [ "$(jget "$BODY" '(d["generation"] >= 2 and d["state"] == "running") or d["state"] in ("succeeded", "failed", "cancelled")')" = True ]; }
wait_until 120 grown || fail "the job did not grow: $BODY $(events_of 1 "$J")"
job=$BODY
[ "$(jget "$job" 'd["state"], d["generation"], d["restarts"]')" = "('running', 2, 0)" ] ||
	fail "generation 2 is not a running, uncounted restart: $job $(events_of 1 "$J") $(grep -h "stays\|asked for a checkpoint" "$T/log.1" | tail -n 3)"
world=$(jget "$job" 'len(d["layout"])')
[ "$world" -gt 1 ] || fail "generation 2 did not grow: $job"
now=$(jget "$job" '"dp%d×tp%d×pp%d" % (d["plan"]["layout"]["dp"], d["plan"]["layout"]["tp"], d["plan"]["layout"]["pp"])')
events=$(events_of 1 "$J")
grep -Eq "^job.restarting: job $J restarting elsewhere \(not counted against max_restarts\): growing: $now \($world ranks\) is predicted at .* ms per step, the running $was at .* ms \(planned for 1 device\(s\), 4 now\); checkpoint step [0-9]+ saved first" <<<"$events" ||
	fail "no restart to grow: $events"
grep -q "^job.replanned: job $J planned again: $now, was $was: growing: " <<<"$events" ||
	fail "no job.replanned for growing: $events"
restored=$(sed -n 's/.*re-placed (generation 2).*restoring from checkpoint step \([0-9]*\).*/\1/p' <<<"$events")
saved=$(sed -n 's/^job.restarting: .*growing: .*; checkpoint step \([0-9]*\) saved first.*/\1/p' <<<"$events")
[ -n "$restored" ] && [ "$restored" = "$saved" ] || fail "generation 2 does not restore the checkpoint saved for it (step $saved): $events"
[ "$restored" -le $((steps - 100)) ] || fail "restored from step $restored of $steps: the job grew too late to compare"
note "grew to $now ($world ranks) from step $restored"

wait_job_done 1 "$J" succeeded 60 600 || fail "job did not succeed after growing: $(events_of 1 "$J")"
gen2_first=$(first_step "$T"/agent-*/jobs/"$J"/rank-0.gen-2.log)
[ "$gen2_first" = $((restored + 1)) ] || fail "generation 2 started at step $gen2_first, not $((restored + 1))"
# the reference: the first layout up to the restored step, then the second
reference_legs "$T/job.json" "$first" "$restored" "$(jget "$job" 'd["plan"]["layout"]')"
cat "$T/agent-$slowest/jobs/$J/rank-0.gen-1.log" "$T"/agent-*/jobs/"$J"/rank-0.gen-2.log >"$T/rank0" 2>/dev/null
losses_equal_after "$T/rank0" "$T/whole" "$restored" "$steps" 1e-5 ||
	fail "losses after growing differ from the reference"
note "planned $was for one node, grew to $now from step $restored once three nodes were uncordoned; succeeded"
