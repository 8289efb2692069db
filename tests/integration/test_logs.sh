#!/usr/bin/env bash
# test_logs.sh: `yardctl job logs` with real agents and three controllers. Agents send rank
# output in small pieces (--log-ship-bytes 1024) and rotate early (--log-max-bytes 4096), so
# every rank's output takes many heartbeats and crosses rotations. A 6-rank command job prints
# numbered lines on stdout and stderr: `job logs -f` (started before the job runs, ending by
# itself when the job ends), `job logs`, `--rank` and `--tail` show each rank's lines exactly
# once and in order. `job logs -f` also waits for what a node with slow heartbeats still
# sends after the job ended. Then the leader is SIGKILLed while a second job prints and a `job logs -f`
# follows it: the agents resend their logs' tails to the new leader, which shows every line
# exactly once, with no gap, and so does the -f that ran across the failover. Last,
# who may read logs, and bad input.
. "$(dirname "$0")/lib.sh"

M=$(members_arg 1 2 3)
# node-c (section 1b) heartbeats every 2.5 s: it stays up
for id in 1 2 3; do start_member "$id" "$M" --node-suspect-ms 4000 --node-down-ms 8000; done
wait_leader 15 1 2 3 || fail "no leader"
make_join_token "$LEADER"
urls="$(api 1),$(api 2),$(api 3)"
start_agent node-a 4 "$urls" --log-ship-bytes 1024 --log-max-bytes 4096
start_agent node-b 4 "$urls" --log-ship-bytes 1024 --log-max-bytes 4096
wait_until 10 node_state_is "$LEADER" node-a up || fail "node-a did not register"
wait_until 10 node_state_is "$LEADER" node-b up || fail "node-b did not register"
export YARD_ENDPOINTS=$urls YARD_TOKEN=$TOKEN

# print.sh N [PAUSE]: N numbered lines, odd ones on stderr, 5 lines every PAUSE s (0.1)
cat >"$T/print.sh" <<'SCRIPT'
i=1
while [ "$i" -le "$1" ]; do
	if [ $((i % 2)) = 1 ]; then echo "rank $RANK line $i of $1 ...................." >&2
	else echo "rank $RANK line $i of $1 ...................."; fi
	[ $((i % 5)) = 0 ] && sleep "${2:-0.1}"
	i=$((i + 1))
done
SCRIPT
# check_lines FILE N RANKS PREFIX: FILE holds lines 1..N of each rank in RANKS exactly once,
# in order per rank ("[rank R] " before each line when PREFIX is 1), and nothing else
check_lines() {
	python3 - "$@" <<'PY'
import re, sys
path, n, ranks, prefix = sys.argv[1], int(sys.argv[2]), [int(r) for r in sys.argv[3].split(",")], sys.argv[4] == "1"
seen = {r: [] for r in ranks}
for line in open(path).read().splitlines():
    if prefix:
        m = re.fullmatch(r"\[rank (\d+)\] (.*)", line)
        if not m:
            sys.exit("line without a rank prefix: %r" % line)
        r, text = int(m.group(1)), m.group(2)
    else:
        r, text = ranks[0], line
    m = re.fullmatch(r"rank (\d+) line (\d+) of (\d+) \.+", text)
    if not m or int(m.group(1)) != r or int(m.group(3)) != n or r not in seen:
        sys.exit("unexpected line: %r" % line)
    seen[r].append(int(m.group(2)))
for r in ranks:
    if seen[r] != list(range(1, n + 1)):
        missing = sorted(set(range(1, n + 1)) - set(seen[r]))
        dups = sorted(i for i in set(seen[r]) if seen[r].count(i) > 1)
        sys.exit("rank %d: %d lines, missing %s, duplicated %s" % (r, len(seen[r]), missing[:10], dups[:10]))
PY
}

# ---- 1. -f from before the job runs until it ends; then the whole log, one rank, a tail ----
submit "$LEADER" "{\"name\":\"printer\",\"ranks\":6,\"command\":[\"sh\",\"$T/print.sh\",\"120\"],\"failure\":{\"max_restarts\":0}}"
A=$JOB
yardctl job logs "$A" -f >"$T/follow.out" 2>"$T/follow.err" &
FOLLOW=$!
wait_until 60 job_state_is "$LEADER" "$A" succeeded || fail "printer: $(events_of "$LEADER" "$A")"
wait_until 20 sh -c "! kill -0 $FOLLOW" || fail "job logs -f did not end with the job"
wait "$FOLLOW" || fail "job logs -f exited $?: $(cat "$T/follow.err")"
check_lines "$T/follow.out" 120 0,1,2,3,4,5 1 || fail "job logs -f: $(head -c 2000 "$T/follow.out")"
note "job logs -f: 6 ranks x 120 lines, each once, in order; ended with the job"
yardctl job logs "$A" >"$T/all.out" || fail "job logs"
check_lines "$T/all.out" 120 0,1,2,3,4,5 1 || fail "job logs: $(head -c 2000 "$T/all.out")"
yardctl job logs "$A" --rank 3 >"$T/rank3.out" || fail "job logs --rank 3"
check_lines "$T/rank3.out" 120 3 0 || fail "job logs --rank 3: $(head -c 2000 "$T/rank3.out")"
# a rank the job does not have is an error naming its ranks, not an empty answer
yardctl job logs "$A" --rank 6 >"$T/rank6.out" 2>"$T/rank6.err" && fail "job logs --rank 6 of 6 ranks succeeded"
grep -qF "job $A has no rank 6: its ranks are 0-5" "$T/rank6.err" && [ ! -s "$T/rank6.out" ] ||
	fail "job logs --rank 6: $(cat "$T/rank6.err")"
tail3=$(yardctl job logs "$A" --rank 2 --tail 3) || fail "job logs --tail"
[ "$tail3" = "$(for i in 118 119 120; do echo "rank 2 line $i of 120 ...................."; done)" ] ||
	fail "job logs --rank 2 --tail 3: $tail3"
[ "$(yardctl job logs "$A" --tail 1 | sort)" = "$(for r in 0 1 2 3 4 5; do echo "[rank $r] rank $r line 120 of 120 ...................."; done)" ] ||
	fail "job logs --tail 1: $(yardctl job logs "$A" --tail 1)"
ls "$T"/agent-node-*/jobs/"$A"/rank-*.gen-1.log.1 >/dev/null 2>&1 || fail "no rank log was rotated at 4096 bytes"
get "$LEADER" "/v1/jobs/$A/logs?rank=0&offset=10&max_bytes=5"
[ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["offset"], d["next_offset"], d["skipped"], len(d["data"])')" = "(10, 15, 0, 5)" ] ||
	fail "read at an offset: $CODE $BODY"
note "--rank, --tail, offsets; the agents rotated the logs at 4096 bytes and lost nothing"

# ---- 1b. -f waits for a node whose heartbeats are slow: node-c (a heartbeat every 2.5 s,
# 1 KiB of a rank's log in each) runs a rank that prints ~2.7 KB at once and exits, so most
# of its output reaches the leader in the heartbeats after the one that reports the job's
# end (two quiet polls a second apart, the rule before, ended -f without it) ----
start_agent node-c 1 "$urls" --log-ship-bytes 1024 --heartbeat-ms 2500
wait_until 10 node_state_is "$LEADER" node-c up || fail "node-c did not register"
for n in node-a node-b; do call POST "$LEADER" "/v1/nodes/$n/cordon" '{}'; [ "$CODE" = 200 ] || fail "cordon $n: $CODE $BODY"; done
submit "$LEADER" "{\"name\":\"burst\",\"ranks\":1,\"command\":[\"sh\",\"$T/print.sh\",\"60\",\"0\"],\"failure\":{\"max_restarts\":0}}"
C=$JOB
yardctl job logs "$C" -f >"$T/c-follow.out" 2>"$T/c-follow.err" &
FOLLOW=$!
wait_until 30 job_state_is "$LEADER" "$C" succeeded || fail "burst: $(events_of "$LEADER" "$C")"
wait_until 40 sh -c "! kill -0 $FOLLOW" || fail "job logs -f did not end with burst"
wait "$FOLLOW" || fail "job logs -f of burst exited $?: $(cat "$T/c-follow.err")"
check_lines "$T/c-follow.out" 60 0 1 || fail "job logs -f, a node with slow heartbeats: $(wc -l <"$T/c-follow.out") lines"
call POST "$LEADER" /v1/nodes/node-c/cordon '{}'
for n in node-a node-b; do call POST "$LEADER" "/v1/nodes/$n/uncordon" '{}'; [ "$CODE" = 200 ] || fail "uncordon $n: $CODE $BODY"; done
note "job logs -f waited for the output that node-c's slow heartbeats brought after the job ended"

# ---- 2. leader failover while a job prints: the new leader has every line, once. 140 lines
# (about 6.3 KB a rank) are rotated once at most, so the agents still hold all of it (bytes
# rotated out twice would be gone and show as skipped); printed over 8 s, so the leader dies
# while the ranks run (the output of a job that ended before a leader change is not resent) ----
submit "$LEADER" "{\"name\":\"printer-2\",\"ranks\":6,\"command\":[\"sh\",\"$T/print.sh\",\"140\",\"0.3\"],\"failure\":{\"max_restarts\":0}}"
B=$JOB
some_output() { get "$LEADER" "/v1/jobs/$B/logs?rank=5"; [ "$CODE" = 200 ] && [ "$(jget "$BODY" 'd["end_offset"]')" -gt 1500 ]; }
wait_until 30 some_output || fail "printer-2 printed nothing: $BODY"
job_state_is "$LEADER" "$B" running || fail "printer-2 ended before the failover: $(events_of "$LEADER" "$B")"
yardctl job logs "$B" -f >"$T/b-follow.out" 2>"$T/b-follow.err" &
FOLLOW=$!
OLD=$LEADER
kill_member "$OLD"
rest=""
for id in 1 2 3; do [ "$id" = "$OLD" ] || rest="$rest $id"; done
wait_leader 10 $rest || fail "no new leader after killing $OLD"
note "leader $OLD killed while printer-2 printed; $LEADER leads"
wait_until 60 job_state_is "$LEADER" "$B" succeeded || fail "printer-2: $(events_of "$LEADER" "$B")"
yardctl job logs "$B" >"$T/b.out" || fail "job logs after failover"
! grep -q "bytes skipped" "$T/b.out" || fail "a gap after failover: $(grep -m3 'bytes skipped' "$T/b.out")"
check_lines "$T/b.out" 140 0,1,2,3,4,5 1 || fail "job logs after failover: $(head -c 2000 "$T/b.out")"
wait_until 20 sh -c "! kill -0 $FOLLOW" || fail "job logs -f did not end with printer-2"
wait "$FOLLOW" || fail "job logs -f across the failover exited $?: $(cat "$T/b-follow.err")"
check_lines "$T/b-follow.out" 140 0,1,2,3,4,5 1 || fail "job logs -f across the failover: $(head -c 2000 "$T/b-follow.out")"
grep -q "leader changed" "$T/log.agent-node-a" || fail "node-a did not notice the new leader"
note "after failover: 6 ranks x 140 lines from the new leader, each once, also to a job logs -f that ran across it"

# ---- 3. who may read logs; bad input changes nothing (job B: the new leader never heard
# job A's output, which ended before the failover) ----
call POST "$LEADER" /v1/tokens '{"name":"sec","role":"security"}'
SEC=$(jget "$BODY" 'd["token"]')
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $SEC" "$(api "$LEADER")/v1/jobs/$B/logs?rank=0")
[ "$code" = 403 ] || fail "a security token read job logs: $code"
call POST "$LEADER" /v1/tokens '{"name":"bob","role":"user"}'
USR=$(jget "$BODY" 'd["token"]')
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $USR" "$(api "$LEADER")/v1/jobs/$B/logs?rank=0")
[ "$code" = 200 ] || fail "a user token could not read job logs: $code"
for q in "rank=x" "rank=0&max_bytes=0" "rank=0&generation=0" "offset=3"; do
	get "$LEADER" "/v1/jobs/$B/logs?$q"
	[ "$CODE" = 400 ] && [ -n "$(jget "$BODY" 'd["field"]')" ] || fail "logs?$q: $CODE $BODY"
done
get "$LEADER" "/v1/jobs/j-999999/logs"
[ "$CODE" = 404 ] || fail "logs of an unknown job: $CODE $BODY"
get "$LEADER" "/v1/jobs/$B/logs?rank=17"
[ "$CODE" = 404 ] || fail "logs of a rank without output: $CODE $BODY"
yardctl job logs "$B" --rank nine 2>/dev/null && fail "--rank nine accepted"
NT=$(cat "$T/agent-node-a/node.token")
before=$(curl -s -H "$AUTH" "$(api "$LEADER")/v1/jobs/$B/logs?rank=0")
grep -q "rank 0 line 1 of 140" <<<"$before" || fail "logs of rank 0: $before"
for bad in '"data":"!!!!"' '"data":"QUJD"' ; do
	piece="{\"job\":\"$B\",\"rank\":0,\"generation\":1,\"offset\":0,$bad}"
	[ "$bad" = '"data":"QUJD"' ] && piece="{\"job\":\"$B\",\"rank\":0,\"generation\":1,\"offset\":-4,$bad}"
	CODE=$(curl -s -o "$T/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $NT" \
		--data "{\"node\":\"node-a\",\"ranks\":[],\"logs\":[$piece]}" "$(api "$LEADER")/v1/agents/heartbeat")
	[ "$CODE" = 400 ] && grep -q '"field":"logs\[0\]' "$T/body" || fail "heartbeat with bad logs ($bad): $CODE $(cat "$T/body")"
done
[ "$(curl -s -H "$AUTH" "$(api "$LEADER")/v1/jobs/$B/logs?rank=0")" = "$before" ] || fail "a refused heartbeat changed the logs"
note "ok"
