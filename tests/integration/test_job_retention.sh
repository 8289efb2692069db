#!/usr/bin/env bash
# test_job_retention.sh: ended jobs are collected job_retention_s after they ended (yardd
# --job-retention-s), by the leader through raft: a succeeded and a cancelled job go (404,
# out of the list, one jobs.collected event, their own events kept), a running job and a job
# that ended within the retention stay; bad values of the flag are refused by name.
. "$(dirname "$0")/lib.sh"

for bad in -1 x 999999999999; do
	out=$("$YARDD" --job-retention-s "$bad" 2>&1) && fail "--job-retention-s $bad accepted"
	grep -q "^yardd: --job-retention-s: '$bad' is not 0\.\." <<<"$out" || fail "--job-retention-s $bad: $out"
done

start_member 1 "$(members_arg 1)" --job-retention-s 5
wait_leader 10 1 || fail "no leader"
make_join_token 1
start_agent node-a 2 "$(api 1)"
write_rank_script
wait_until 10 node_state_is 1 node-a up || fail "node-a did not register"

submit 1 "{\"name\":\"quick\",\"ranks\":1,$(cmd sleep 0)}"
QUICK=$JOB
submit 1 "{\"name\":\"long\",\"ranks\":1,$(cmd sleep 60)}"
LONG=$JOB
# needs 3 devices of the node's 2: pending until cancelled
submit 1 "{\"name\":\"never\",\"ranks\":3,$(cmd sleep 0)}"
NEVER=$JOB
wait_until 20 job_state_is 1 "$QUICK" succeeded || fail "quick job: $(job_field 1 "$QUICK" '')"
call POST 1 "/v1/jobs/$NEVER/cancel" ''
[ "$CODE" = 200 ] || fail "cancel: $CODE $BODY"
ended=$(date +%s%N)
# within the retention they are all still there
job_state_is 1 "$QUICK" succeeded || fail "quick job gone before its retention"
job_state_is 1 "$NEVER" cancelled || fail "cancelled job gone before its retention"

gone() { get 1 "/v1/jobs/$1"; [ "$CODE" = 404 ]; }
wait_until 20 gone "$QUICK" || fail "succeeded job not collected: $CODE $BODY"
wait_until 10 gone "$NEVER" || fail "cancelled job not collected: $CODE $BODY"
took_ms=$((($(date +%s%N) - ended) / 1000000))
[ "$took_ms" -ge 3000 ] || fail "collected after $took_ms ms, before the 5 s retention"
job_state_is 1 "$LONG" running || fail "the running job: $(job_field 1 "$LONG" '')"
get 1 "/v1/jobs?limit=100"
ids=$(jget "$BODY" '" ".join(j["id"] for j in d["jobs"])')
[ "$ids" = "$LONG" ] || fail "job list after the collection: '$ids', want only $LONG"
# one event says what went; each job's own events stay
get 1 "/v1/events?limit=1000"
collected=$(jget "$BODY" '"\n".join(e["message"] for e in d["events"] if e["type"] == "jobs.collected")')
grep -q "^2 ended job(s) collected ($QUICK .. $NEVER)" <<<"$collected" ||
	grep -q "^1 ended job(s) collected" <<<"$collected" ||
	fail "jobs.collected events: '$collected'"
has_event 1 "$QUICK" "job.submitted" || fail "the collected job's events went with it"
note "collected $took_ms ms after they ended: $(tr '\n' ';' <<<"$collected")"
note "ok"
