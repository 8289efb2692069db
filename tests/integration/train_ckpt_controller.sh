#!/usr/bin/env bash
# train_ckpt_controller.sh: the "controller" checkpoint store, with no shared directory. Like
# train_failover.sh (one controller, three agents with 4 CPU devices, an 8-rank dp 2 x tp 2 x
# pp 2 1F1B job of the built-in trainer, checkpointing every 50 steps), but every rank writes
# its shard into its own agent's data dir and the agents upload the shards to the leader.
# Once a checkpoint at step 100 or later is complete, one of the job's nodes dies (SIGKILL, agent and ranks): the job is re-placed
# on the two healthy nodes, their agents download the shards of the newest complete
# checkpoint (some of them uploaded by the dead node) before starting the ranks, and every
# step after the restore has the loss of an uninterrupted yard-run within a relative 1e-5.
# Also: GET /v1/jobs/ID/checkpoints (keep 2, 8 shards each), the checkpoint.complete events,
# and the shard routes' refusals (a node that does not run the rank, a user uploading,
# an incomplete step, bad numbers).
. "$(dirname "$0")/lib.sh"
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built"
	exit 77
fi

steps=1000
cat >"$T/job.json" <<JSON
{"name": "hybrid-controller-store",
 "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 8, "classes": 4, "seed": 11},
 "train": {"steps": $steps, "batch_size": 32, "lr": 0.01, "optimizer": "adamw",
           "dataset": "synthetic", "data_seed": 3, "samples": 1024},
 "parallel": {"dp": 2, "tp": 2, "pp": 2, "schedule": "1f1b", "micro_batches": 4},
 "checkpoint": {"every_steps": 50, "keep": 2, "store": "controller"},
 "failure": {"max_restarts": 2, "hang_timeout_s": 60}}
JSON

# the reference: the same spec, uninterrupted, in one yard-run
"$build/yard-run" "$T/job.json" >"$T/whole" 2>"$T/whole.err" || fail "uninterrupted run: $(tail -3 "$T/whole.err")"
# the cluster's run is paced (timing hooks that change no result): every block sleeps 0.1 ms
# (1000 steps take well over 5 s however fast this machine is) and rank 0 sleeps as long again
# as it computes, so the uploads and this script keep pace with training on a busy machine
pace_spec "$T/job.json" 0.1 '{"slow_rank": 0, "slow_factor": 2.0}'

start_member 1 "$(members_arg 1)" --node-suspect-ms 1500 --node-down-ms 3000 --restart-backoff-ms 200
wait_leader 10 1 || fail "no leader"
make_join_token 1
for n in node-a node-b node-c; do start_agent "$n" 4 "$(api 1)"; done
for n in node-a node-b node-c; do
	wait_until 10 node_state_is 1 "$n" up || fail "$n did not register"
done

submit 1 "$(cat "$T/job.json")"
J=$JOB
# the victim (the node of the last rank) and its rank processes, known before the wait so the
# kill follows the first complete checkpoint at once (python and curl are slow while eight
# ranks train on this machine)
placed() { get 1 "/v1/jobs/$J"; grep -q '"layout":\[{' <<<"$BODY"; }
wait_until 30 placed || fail "job was not placed: $BODY"
read -r victim victim_ranks layout < <(jget "$BODY" '"%s %s %s" % (d["layout"][-1]["node"], ",".join(str(x["rank"]) for x in d["layout"] if x["node"] == d["layout"][-1]["node"]), ",".join(x["node"] for x in d["layout"]))')
victim_ranks=${victim_ranks//,/ }
layout=${layout//,/ }
four_ranks() { [ "$(grep -o '"pid":[1-9]' "$T/agent-$victim/ranks.json" | wc -l)" = 4 ]; }
wait_until 10 four_ranks || fail "$victim does not run 4 ranks: $(cat "$T/agent-$victim/ranks.json")"
ranks=$(grep -o '"pid":[0-9]*' "$T/agent-$victim/ranks.json" | cut -d: -f2 | tr '\n' ' ')
wait_until 60 store_ckpt_at_least 1 "$J" 100 || fail "no complete checkpoint at step 100 or later: $BODY"

# ---- node death ----
kill -9 "${APID[$victim]}"
for p in $ranks; do kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null; done
wait "${APID[$victim]}" 2>/dev/null
unset "APID[$victim]"
note "a checkpoint at step 100 or later is complete; killed $victim (ranks $victim_ranks) and its processes"
# each rank's shards went to its own agent's data dir; nothing is shared
for node in $layout; do
	[ -d "$T/agent-$node/checkpoints/$J" ] || fail "no local checkpoint directory for $J on $node"
done

gen2_running() { get 1 "/v1/jobs/$J"; [ "$(jget "$BODY" 'd["state"] + str(d["generation"])')" = running2 ]; }
wait_until 60 gen2_running || fail "job not running again after the node death: $(events_of 1 "$J")"
# ---- the shard routes refuse what they must ----
# (generation 2 runs on the two live nodes: one of them tries a rank of the other)
get 1 "/v1/jobs/$J"
one=$(jget "$BODY" 'd["layout"][0]["node"]')
other_rank=$(jget "$BODY" "[x['rank'] for x in d['layout'] if x['node'] != '$one'][0]")
token=$(cat "$T/agent-$one/node.token")
code=$(curl -s -o "$T/r" -w '%{http_code}' -H "Authorization: Bearer $token" -X POST \
	--data '{"generation":2,"size":10,"sha256":"'"$(printf '%064d' 0)"'"}' \
	"$(api 1)/v1/jobs/$J/checkpoints/999980/shards/$other_rank")
[ "$code" = 403 ] && grep -q "does not run rank $other_rank of job $J" "$T/r" ||
	fail "node $one uploaded a shard of rank $other_rank: $code $(cat "$T/r")"
call POST 1 "/v1/jobs/$J/checkpoints/999980/shards/0" '{"generation":1,"size":10,"sha256":"x"}'
[ "$CODE" = 403 ] || fail "an admin token uploaded a shard: $CODE $BODY"
get 1 "/v1/jobs/$J/checkpoints/999980/shards/0"
[ "$CODE" = 404 ] && echo "$BODY" | grep -q "no complete checkpoint at step 999980" || fail "incomplete step served: $CODE $BODY"
get 1 "/v1/jobs/$J/checkpoints/x1/shards/0"
[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"step"' || fail "bad step accepted: $CODE $BODY"
wait_job_done 1 "$J" succeeded 60 600 || fail "job did not succeed after the node death: $(events_of 1 "$J")"
# a shard of the newest complete checkpoint, once the job has ended (while it trains, keep 2
# prunes checkpoints as fast as they complete when uploads come in bursts)
shard_fetched() {
	get 1 "/v1/jobs/$J/checkpoints"
	newest=$(jget "$BODY" 'max(c["step"] for c in d["checkpoints"] if c["complete"])')
	code=$(curl -s -o "$T/shard" -D "$T/hdr" -w '%{http_code}' -H "$AUTH" "$(api 1)/v1/jobs/$J/checkpoints/$newest/shards/0")
	want=$(sed -n 's/^x-yard-sha256: *\([0-9a-f]*\).*/\1/Ip' "$T/hdr")
	[ "$code" = 200 ]
}
wait_until 10 shard_fetched || fail "shard 0 of step $newest: $code $(cat "$T/shard")"
[ -n "$want" ] && [ "$(sha256sum <"$T/shard" | cut -d' ' -f1)" = "$want" ] &&
	[ "$(head -c 8 "$T/shard")" = YARDCKPT ] || fail "shard 0 of step $newest: sha256 '$want' does not match its bytes"
get 1 "/v1/jobs/$J"
[ "$(jget "$BODY" 'd["generation"]')" = 2 ] || fail "generation: $BODY"
[ "$(jget "$BODY" "all(s['node'] != '$victim' for s in d['layout'])")" = True ] || fail "re-placed on the dead node: $BODY"
restored=$(events_of 1 "$J" | sed -n 's/.*restoring from checkpoint step \([0-9]*\) (controller store).*/\1/p' | tail -n 1)
[ -n "$restored" ] && [ "$restored" -ge 100 ] || fail "no restore from the controller store: $(events_of 1 "$J")"
[ "$restored" -le $((steps * 3 / 4)) ] || fail "restored from step $restored of $steps: the node died too late to test anything"
note "$(events_of 1 "$J" | grep -v checkpoint.complete)"
has_event 1 "$J" "checkpoint.complete: checkpoint of job $J at step $restored complete: 8 shard(s)" ||
	fail "no checkpoint.complete event for step $restored: $(events_of 1 "$J")"

# the dead node's ranks restored, on other nodes, from shards only the dead node could have
# uploaded (the controller takes a rank's shard only from the node that runs it); its log
# shows them going up (the last one may have been committed just before the kill)
for r in $victim_ranks; do
	grep -q "checkpoint shard of rank $r of $J at step [0-9]* uploaded" "$T/log.agent-$victim" ||
		fail "$victim's log shows no upload of rank $r's shards"
done
for n in node-a node-b node-c; do
	[ "$n" = "$victim" ] && continue
	grep -q "job $J generation 2: .* shard(s) of checkpoint step $restored downloaded and verified" "$T/log.agent-$n" ||
		fail "$n did not download step $restored: $(grep -i checkpoint "$T/log.agent-$n" | tail -5)"
done
grep -q "resumed from .* at step $restored" "$T"/agent-*/jobs/"$J"/rank-0.gen-2.log || fail "rank 0 did not resume from step $restored"

# rank 0's output by generation (agent/ranks.c: rank-R.gen-G.log, on whichever node ran it)
cat "$T"/agent-*/jobs/"$J"/rank-0.gen-1.log "$T"/agent-*/jobs/"$J"/rank-0.gen-2.log >"$T/rank0" 2>/dev/null || true
losses_equal_after "$T/rank0" "$T/whole" "$restored" "$steps" ||
	fail "losses after the failover differ from the uninterrupted run"

# the list: at most keep (2) complete checkpoints, each with all 8 shards, newest last
get 1 "/v1/jobs/$J/checkpoints"
[ "$CODE" = 200 ] || fail "checkpoints: $CODE $BODY"
python3 - "$BODY" "$restored" <<'PY' || fail "checkpoint list is wrong: $BODY"
import json, sys
cks = json.loads(sys.argv[1])["checkpoints"]
done = [c for c in cks if c["complete"]]
assert 1 <= len(done) <= 2, done
for c in done:
    assert c["shards"] == 8 and c["bytes"] > 0 and c["ts_ms"] > 0, c
    assert set(c) >= {"step", "shards", "bytes", "complete", "ts_ms"}, c
assert max(c["step"] for c in done) > int(sys.argv[2]), "no checkpoint completed after the restore"
print(f"# checkpoints kept: {[c['step'] for c in done]} complete, {len(cks) - len(done)} incomplete")
PY
listed=$BODY
get 1 "/v1/jobs/j-999999/checkpoints"
[ "$CODE" = 404 ] || fail "checkpoints of an unknown job: $CODE $BODY"

# deleting the ended job deletes what it stored: every checkpoint listed, bytes included
call DELETE 1 "/v1/jobs/$J"
[ "$CODE" = 200 ] || fail "delete $J: $CODE $BODY"
python3 - "$listed" "$BODY" <<'PY' || fail "delete answered $BODY for the list $listed"
import json, sys
cks, got = json.loads(sys.argv[1])["checkpoints"], json.loads(sys.argv[2])
assert got["deleted"] is True and got["checkpoints"] == len(cks), got
assert got["checkpoint_bytes"] == sum(c["bytes"] for c in cks) > 0, got
print(f"# deleted: {got['checkpoints']} checkpoints, {got['checkpoint_bytes']} bytes")
PY
get 1 "/v1/jobs/$J/checkpoints"
[ "$CODE" = 404 ] || fail "checkpoints of the deleted job $J: $CODE $BODY"
has_event 1 "$J" "job.deleted: job $J (succeeded) deleted by" || fail "no job.deleted event: $(events_of 1 "$J" | tail -3)"
note "node $victim killed; restored from controller-stored step $restored on the other nodes; final loss equals the uninterrupted run; deleting the job deleted its checkpoints"
