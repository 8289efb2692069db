#!/usr/bin/env bash
# train_replan.sh: a parallel "auto" job planned again when the cluster shrinks below its
# layout, and growing back when it returns. One controller, four agents with one CPU device
# each, all measured; the planner lays the job over W of the 4 devices (W >= 2 is asserted;
# one-device nodes make it spread: each node computes on its own). Once a checkpoint exists
# (the "controller" store), SIGKILL 5 - W nodes, those running ranks first: W - 1 devices are
# left, the committed layout does not fit, and the leader plans the job again for them
# (job.replanned names both layouts and why). The surviving agents download the shards of the
# old layout's data-parallel replica 0, each rank assembles its tensors from them (the trainer
# logs the relayout). Then the nodes return: once the smaller generation has completed a
# checkpoint, the leader restarts the job (not counted) and plans it again over them (growing
# back), and the job succeeds. Every step after each restore is asserted equal, within a
# relative 1e-5, to a yard-run that changes layouts at the same steps (lib.sh's reference_legs):
# an uninterrupted run of the first layout sums in another order than the smaller layout, and
# the two drift apart chaotically (1e-4 by step 400, 1e-2 by 550), so it only stays comparable
# when the smaller generation runs briefly; on a loaded machine the grow-back came at step 461.
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built"
	exit 77
fi
steps=600
cat >"$T/job.json" <<JSON
{"name": "replan",
 "model": {"d_in": 64, "d_model": 128, "d_ff": 512, "layers": 8, "classes": 10, "seed": 1},
 "train": {"steps": $steps, "batch_size": 64, "lr": 0.003, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 2, "samples": 4096},
 "parallel": "auto",
 "resources": {"device": "cpu"},
 "checkpoint": {"every_steps": 40, "keep": 2, "store": "controller"},
 "failure": {"max_restarts": 2, "hang_timeout_s": 60}}
JSON
# paced (debug.block_ms; results do not change) so that the run outlasts the kills anywhere
pace_spec "$T/job.json" 1

# --auto-grow-pct 95: the test is about growing back, not about the gain the planner predicts
# for pp 4 over pp 3 (0.68-0.74 of the step here, 0.82 once on a loaded machine, where the
# default 80 then kept the job at pp 3 until it ended)
start_member 1 "$(members_arg 1)" --node-suspect-ms 1500 --node-down-ms 3000 --restart-backoff-ms 200 \
	--auto-grow-pct 95
wait_leader 10 1 || fail "no leader"
make_join_token 1
all="node-a node-b node-c node-d"
for n in $all; do start_agent "$n" 1 "$(api 1)" --probe-timeout-ms 20000; done
node_has_perf() { get 1 "/v1/nodes/$1"; [ "$(jget "$BODY" 'd["state"] == "up" and "perf" in d')" = True ]; }
for n in $all; do
	wait_until 120 node_has_perf "$n" || fail "$n did not report measured rates: $BODY"
done

submit 1 "$(cat "$T/job.json")"
J=$JOB
placed() { get 1 "/v1/jobs/$J"; grep -q '"layout":\[{' <<<"$BODY"; }
wait_until 30 placed || fail "job was not placed: $BODY $(events_of 1 "$J")"
first=$(jget "$BODY" 'd["plan"]["layout"]')
world=$(jget "$BODY" 'len(d["layout"])')
[ "$world" -ge 2 ] || fail "the planner laid the job over one device ($first): this test needs two or more"
was=$(jget "$first" '"dp%d×tp%d×pp%d" % (d["dp"], d["tp"], d["pp"])')
# the nodes to kill: those running ranks first, then idle ones, 5 - W in all (W - 1 are left)
victims=$(jget "$BODY" "' '.join((sorted(set(s['node'] for s in d['layout'])) + sorted(set('$all'.split()) - set(s['node'] for s in d['layout'])))[:5 - $world])")
survivors=$(for n in $all; do grep -qw "$n" <<<"$victims" || echo "$n"; done | tr '\n' ' ')
note "planned $was ($first) on $world node(s); will kill $victims"

wait_until 120 store_ckpt_at_least 1 "$J" 40 || fail "no complete checkpoint at step 40 or later"
get 1 "/v1/jobs/$J"
note "job $J (at step $(jget "$BODY" 'd.get("step")')) has a complete checkpoint at step 40 or later; killing $victims"
ranks=""
for n in $victims; do ranks="$ranks $(grep -o '"pid":[0-9]*' "$T/agent-$n/ranks.json" 2>/dev/null | cut -d: -f2 | tr '\n' ' ')"; done
for n in $victims; do kill -9 "${APID[$n]}"; done
for p in $ranks; do kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null; done
for n in $victims; do
	wait "${APID[$n]}" 2>/dev/null
	unset "APID[$n]"
done

replanned() { get 1 "/v1/jobs/$J"; [ "$(jget "$BODY" 'd["state"], d["generation"]')" = "('running', 2)" ]; }
wait_until 60 replanned || fail "job was not re-placed: $BODY $(events_of 1 "$J")"
job=$BODY
now=$(jget "$job" '"dp%d×tp%d×pp%d" % (d["plan"]["layout"]["dp"], d["plan"]["layout"]["tp"], d["plan"]["layout"]["pp"])')
second=$(jget "$job" 'd["plan"]["layout"]')
world2=$(jget "$job" 'len(d["layout"])')
[ "$world2" -lt "$world" ] || fail "the new layout ($now) is not smaller than $was: $job"
[ "$(jget "$job" "all(s['node'] in '$survivors'.split() for s in d['layout'])")" = True ] || fail "not on the survivors ($survivors): $job"
events=$(events_of 1 "$J")
grep -q "^job.replanned: job $J planned again: $now, was $was: its layout $was has $world ranks, the cluster has [0-9]* schedulable device(s) of its kind" <<<"$events" ||
	fail "no job.replanned event saying why: $events"
restored=$(sed -n 's/.*re-placed (generation 2).*restoring from checkpoint step \([0-9]*\).*/\1/p' <<<"$events")
[ -n "$restored" ] && [ "$restored" -ge 40 ] || fail "generation 2 restores no checkpoint: $events"
[ "$restored" -le $((steps - 200)) ] || fail "restored from step $restored of $steps: the nodes died too late"
note "planned again: $now, restoring step $restored"
# yardctl job show says so
yardctl --endpoints "$(api 1)" --token "$TOKEN" job show "$J" >"$T/show" 2>&1 || fail "yardctl job show: $(cat "$T/show")"
grep -q "^ *planned again at a restart, replacing $was " "$T/show" || fail "yardctl job show does not say the job was planned again: $(cat "$T/show")"
# the node of rank 0 fetched the old replica's shards (tp x pp of the first layout, at least)
# and its rank 0 assembled the tensors from them
rank0=$(jget "$job" '[s["node"] for s in d["layout"] if s["rank"] == 0][0]')
replica=$(jget "$first" 'd["tp"] * d["pp"]')
relayout_seen() {
	grep -q "restoring step $restored of layout dp .* into dp .*: every tensor assembled from the $replica shards of its replica 0" \
		"$T/agent-$rank0/jobs/$J/rank-0.gen-2.log" 2>/dev/null
}
wait_until 30 relayout_seen || fail "rank 0 did not log the relayout: $(grep -i restor "$T/agent-$rank0/jobs/$J/rank-0.gen-2.log" | head -3)"
shards=$(sed -n "s/.*job $J generation 2: \([0-9]*\) shard(s) of checkpoint step $restored downloaded and verified.*/\1/p" "$T/log.agent-$rank0")
[ -n "$shards" ] && [ "$shards" -ge "$replica" ] ||
	fail "$rank0 did not download the $replica shards of the old replica: $(grep -i checkpoint "$T/log.agent-$rank0" | tail -5)"

# ---- the nodes return: the job grows back once its generation 2 has a checkpoint ----
# They are measured while generation 2's ranks are stopped (SIGSTOP, for at most 20 s, inside
# the data plane's 30 s deadline and hang_timeout_s): on the 2 cores shared here their probes
# would measure the job's load, and a node measured several times slower rightly makes the
# planner predict the grown layout slower (pp4 at 125 ms against 27 once, and the job stayed
# at pp3); on its own host a returning node is measured idle.
gen2_pids=$(for n in $survivors; do
	python3 -c 'import json, sys
print(" ".join(str(r["pid"]) for r in json.load(open(sys.argv[1]))
               if r["generation"] == 2 and not r["exited"] and r["pid"] > 0))' "$T/agent-$n/ranks.json"
done | tr '\n' ' ')
[ -n "$gen2_pids" ] || fail "no running rank of generation 2 in the survivors' ranks.json"
for p in $gen2_pids; do kill -STOP -- "-$p" 2>/dev/null || kill -STOP "$p"; done
# (the leader keeps a dead node's rates: a new measurement is told by its other FLOP rate,
# and the link probe the leader then asks for by inter_source "measured:PEER")
declare -A old_flops
for n in $victims; do
	get 1 "/v1/nodes/$n"
	old_flops[$n]=$(jget "$BODY" 'd.get("perf", {}).get("flops_per_s")')
done
for n in $victims; do start_agent "$n" 1 "$(api 1)" --probe-timeout-ms 20000; done
remeasured() {
	node_has_perf "$1" && [ "$(jget "$BODY" 'd["perf"]["flops_per_s"]')" != "${old_flops[$1]}" ] &&
		[ "$(jget "$BODY" 'd["perf"]["inter_source"].startswith("measured:")')" = True ]
}
all_back() { for n in $victims; do remeasured "$n" || return 1; done; }
stopped_at=$SECONDS
if wait_until 20 all_back; then
	note "$victims measured in $((SECONDS - stopped_at)) s with generation 2's ranks ($gen2_pids) stopped"
else
	note "$victims not all measured (rates and a link) within 20 s; generation 2's ranks go on"
fi
for p in $gen2_pids; do kill -CONT -- "-$p" 2>/dev/null || kill -CONT "$p"; done
for n in $victims; do
	wait_until 120 node_has_perf "$n" || fail "$n did not come back measured: $BODY"
done
grown() { get 1 "/v1/jobs/$J"; [ "$(jget "$BODY" '(d["generation"] >= 3 and d["state"] == "running") or d["state"] in ("succeeded", "failed", "cancelled")')" = True ]; }
wait_until 120 grown || fail "the job did not grow back: $BODY $(events_of 1 "$J")"
job=$BODY
# (the leader logs each reason it does not grow, and each plan it stays with; the planner's
# choice follows the nodes' measured rates)
rates() { for n in $all; do get 1 "/v1/nodes/$n"; echo "$n: $(jget "$BODY" 'd.get("perf", {}).get("flops_per_s")')"; done; }
[ "$(jget "$job" 'd["state"], d["generation"], d["restarts"]')" = "('running', 3, 1)" ] ||
	fail "generation 3 is not a running, uncounted restart: $job $(events_of 1 "$J") $(grep -h "scheduler: job $J" "$T/log.1" | grep -E 'grow|stays|checkpoint before' | tail -n 12) $(rates)"
[ "$(jget "$job" "len(d['layout']) > $world2")" = True ] || fail "generation 3 did not grow: $job"
events=$(events_of 1 "$J")
# the restart first asks the ranks for a checkpoint (when they stepped past the newest)
grep -Eq "^job.restarting: job $J restarting elsewhere \(not counted against max_restarts\): growing back: .* is predicted at .* ms per step, the running $now at .* ms; (from checkpoint step|checkpoint step [0-9]+ saved first)" <<<"$events" ||
	fail "no restart to grow back: $events"
grep -q "^job.replanned: job $J planned again: dp[0-9]*×tp[0-9]*×pp[0-9]*, was $now: growing back: " <<<"$events" ||
	fail "no job.replanned for growing back: $events"
regrown=$(sed -n 's/.*re-placed (generation 3).*restoring from checkpoint step \([0-9]*\).*/\1/p' <<<"$events")
[ -n "$regrown" ] && [ "$regrown" -gt "$restored" ] || fail "generation 3 restores no checkpoint of generation 2: $events"
saved=$(sed -n 's/^job.restarting: .*growing back: .*; checkpoint step \([0-9]*\) saved first.*/\1/p' <<<"$events")
# (a newer one, the ranks' answer to the request, may complete before the placement)
[ -z "$saved" ] || [ "$regrown" -ge "$saved" ] || fail "checkpoint step $saved was saved to grow back, generation 3 restores $regrown"
third=$(jget "$job" 'd["plan"]["layout"]')
note "grew back to $(jget "$job" '"dp%d×tp%d×pp%d" % (d["plan"]["layout"]["dp"], d["plan"]["layout"]["tp"], d["plan"]["layout"]["pp"])') from step $regrown"

wait_job_done 1 "$J" succeeded 60 600 || fail "job did not succeed after the relayouts: $(events_of 1 "$J")"
# each generation went on from its checkpoint, not from step 0 (which a fresh start would also
# match the reference in)
gen2_first=$(first_step "$T/agent-$rank0/jobs/$J/rank-0.gen-2.log")
[ "$gen2_first" = $((restored + 1)) ] || fail "generation 2 started at step $gen2_first, not $((restored + 1))"
gen3_first=$(first_step "$T"/agent-*/jobs/"$J"/rank-0.gen-3.log)
[ "$gen3_first" = $((regrown + 1)) ] || fail "generation 3 started at step $gen3_first, not $((regrown + 1))"
# the reference: the three layouts in turn, changing at the same steps
reference_legs "$T/job.json" "$first" "$restored" "$second" "$regrown" "$third"
cat "$T"/agent-*/jobs/"$J"/rank-0.gen-1.log "$T/agent-$rank0/jobs/$J/rank-0.gen-2.log" \
	"$T"/agent-*/jobs/"$J"/rank-0.gen-3.log >"$T/rank0" 2>/dev/null
losses_equal_after "$T/rank0" "$T/whole" "$restored" "$steps" 1e-5 ||
	fail "losses after the relayouts (steps $restored and $regrown) differ from the reference"
note "killed $victims; planned again $was -> $now from step $restored, grew back from step $regrown; succeeded"
