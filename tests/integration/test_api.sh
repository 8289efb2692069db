#!/usr/bin/env bash
# test_api.sh: one yardd member: every route refuses a missing or wrong token (401) and
# wrong roles (403); bad input gets a JSON 4xx naming the field and changes nothing;
# bodies over 1 MiB get 413; HTTP/2 prior knowledge is refused (HTTP/1.1 only); a second
# yardd on the same data dir refuses to start; writes are refused below --min-free-mb;
# SIGTERM stops cleanly; request-id dedup through HTTP.
. "$(dirname "$0")/lib.sh"

M=$(members_arg 1)
start_member 1 "$M"
wait_leader 10 1 || fail "no leader"

# tokens for each role
declare -A TOK
for role in operator user security agent; do
	call POST 1 /v1/tokens "{\"name\":\"$role-1\",\"role\":\"$role\"}"
body=$BODY
	[ "$CODE" = 201 ] || fail "token create $role: $CODE $body"
	TOK[$role]=$(echo "$body" | sed -n 's/.*"token":"\([0-9a-f]*\)".*/\1/p')
	[ -n "${TOK[$role]}" ] || fail "no secret in $body"
done
TOK[admin]=$TOKEN
call POST 1 /v1/jobs '{"name":"seed"}'
[ "$CODE" = 201 ] || fail "seed job: $CODE"
[ "$(jget "$BODY" '"warnings" in d')" = False ] || fail "a plain job got warnings: $BODY"
# fencing no shorter than the node-down time (3 s by default) is stored with a warning
call POST 1 /v1/jobs '{"name":"fence-late","failure":{"stop_on_disconnect_s":3}}'
[ "$CODE" = 201 ] && grep -q '"warnings":\["failure.stop_on_disconnect_s 3 is not below the 3.0 s after which the leader declares a silent node down' <<<"$BODY" ||
	fail "late fencing: $CODE $BODY"
call POST 1 /v1/jobs '{"name":"fence-ok","failure":{"stop_on_disconnect_s":2.5}}'
[ "$CODE" = 201 ] && [ "$(jget "$BODY" '"warnings" in d')" = False ] || fail "fencing in time got a warning: $CODE $BODY"

# where the member's memory goes (/metrics): resident pages, what the allocator handed out
# (it names itself: configure's tcmalloc, the C library's, or ASan's in a sanitizer build),
# the SQLite state within it; the scheduler's jobs
want_alloc='libc|sanitizer'
grep -q '^#define HAVE_TCMALLOC 1' "$top_builddir/config.h" && want_alloc=tcmalloc
rss=$(metric 1 yard_process_resident_bytes)
line=$(curl -s -H "$AUTH" "$(api 1)/metrics" | grep '^yard_malloc_allocated_bytes{')
[[ $line =~ ^yard_malloc_allocated_bytes\{allocator=\"($want_alloc)\"\}\ ([0-9]+)$ ]] ||
	fail "allocated memory: '$line', want allocator $want_alloc"
alloc=${BASH_REMATCH[2]} want_alloc=${BASH_REMATCH[1]}
db=$(metric 1 yard_fsm_db_bytes)
[ "${rss:-0}" -gt 1000000 ] || fail "resident bytes: '$rss'"
[ "${db:-0}" -gt 0 ] && [ "${alloc:-0}" -gt "$db" ] ||
	fail "allocated ($want_alloc) '$alloc' should hold the SQLite state '$db'"
wait_until 10 test "$(metric 1 yard_sched_jobs_active)" = 3 ||
	fail "the scheduler's active jobs: '$(metric 1 yard_sched_jobs_active)', 3 pending"
[ "$(metric 1 yard_sched_jobs_held)" = 3 ] || fail "jobs held: '$(metric 1 yard_sched_jobs_held)'"
note "memory: resident $rss, allocated ($want_alloc) $alloc, SQLite $db bytes; 3 jobs held"

# route table: method path body allowed-roles
ROUTES=(
	"GET /metrics - admin,operator,user,security"
	"GET /v1/cluster - admin,operator,user,security"
	"POST /v1/cluster/members {} admin"
	"DELETE /v1/cluster/members/9 - admin"
	"POST /v1/cluster/transfer {} admin"
	"POST /v1/jobs {} admin,operator,user"
	"GET /v1/jobs - admin,operator,user"
	"GET /v1/jobs/j-000001 - admin,operator,user"
	"GET /v1/jobs/j-000001/timeline - admin,operator,user"
	"POST /v1/jobs/j-000099/cancel - admin,operator,user"
	"POST /v1/jobs/j-000099/checkpoint - admin,operator,user"
	"DELETE /v1/jobs/j-000099 - admin,operator,user"
	"POST /v1/plan {} admin,operator,user"
	"GET /v1/events - admin,operator,security"
	"POST /v1/tokens {} admin"
	"GET /v1/tokens - admin"
	"DELETE /v1/tokens/t-999999 - admin"
	"GET /v1/debug/digest - admin"
	"GET /v1/debug/database - admin"
	"POST /v1/builds {} admin,security"
	"PUT /v1/builds/nope/chunks/0 x admin,security"
	"POST /v1/builds/nope/commit - admin,security"
	"DELETE /v1/builds/nope - admin,security"
	"GET /v1/builds - admin,operator,user,security"
	"GET /v1/builds/nope - admin,operator,user,security"
	"GET /v1/builds/nope/binary - admin,operator,user,security"
	"POST /v1/advisories {} admin,security"
	"GET /v1/advisories - admin,operator,user,security"
	"GET /v1/advisories/a-999999 - admin,operator,user,security"
	"POST /v1/advisories/a-999999/embargo {} security"
	"POST /v1/advisories/a-999999/share {} security"
	"POST /v1/advisories/a-999999/publish - security"
	"GET /v1/audit - admin,security"
	"GET /v1/events/verify - admin,security"
	"POST /v1/rollouts {} admin,operator,security"
	"GET /v1/rollouts - admin,operator,security"
	"GET /v1/rollouts/ro-999999 - admin,operator,security"
	"POST /v1/rollouts/ro-999999/pause - admin,operator,security"
	"POST /v1/rollouts/ro-999999/resume - admin,operator,security"
	"POST /v1/rollouts/ro-999999/abort - admin,operator,security"
	"POST /v1/rollouts/ro-999999/rollback - admin,operator,security"
)
checked=0
for r in "${ROUTES[@]}"; do
	read -r method path body allowed <<<"$r"
	[ "$body" = - ] && body=""
	code=$(curl -s -o /dev/null -w '%{http_code}' -X "$method" ${body:+--data "$body"} "$(api 1)$path")
	[ "$code" = 401 ] || fail "$method $path without a token: $code, want 401"
	code=$(curl -s -o /dev/null -w '%{http_code}' -X "$method" -H "Authorization: Bearer wrong-token" ${body:+--data "$body"} "$(api 1)$path")
	[ "$code" = 401 ] || fail "$method $path with a wrong token: $code, want 401"
	for role in admin operator user security agent; do
		code=$(curl -s -o "$T/out" -w '%{http_code}' -X "$method" -H "Authorization: Bearer ${TOK[$role]}" ${body:+--data "$body"} "$(api 1)$path")
		case ",$allowed," in
		*",$role,"*) [ "$code" != 401 ] && [ "$code" != 403 ] || fail "$method $path as $role: $code, want allowed ($(cat "$T/out"))" ;;
		*) [ "$code" = 403 ] || fail "$method $path as $role: $code, want 403" ;;
		esac
		checked=$((checked + 1))
	done
done
echo; note "auth matrix: ${#ROUTES[@]} routes x (none, wrong, 5 roles) checked ($checked role checks)"
code=$(curl -s -o /dev/null -w '%{http_code}' "$(api 1)/healthz")
[ "$code" = 200 ] || fail "healthz without a token: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" "$(api 1)/v1/nope")
[ "$code" = 404 ] || fail "unknown route: $code"
# a wrong method: 405 with the Allow header (RFC 9110) and the methods named in the error;
# status lines carry the standard reason phrases
curl -s -i -X PUT -H "$AUTH" "$(api 1)/v1/jobs" | tr -d '\r' >"$T/405"
head -1 "$T/405" | grep -qx "HTTP/1.1 405 Method Not Allowed" || fail "wrong method: $(cat "$T/405")"
grep -qix "allow: POST, GET" "$T/405" || fail "405 without Allow: POST, GET: $(cat "$T/405")"
grep -qF "method PUT not allowed on /v1/jobs (allowed: POST, GET)" "$T/405" ||
	fail "405's error does not name the methods: $(cat "$T/405")"
curl -s -i -X DELETE -H "$AUTH" "$(api 1)/" | tr -d '\r' | grep -qix "allow: GET" ||
	fail "DELETE /: no Allow: GET"
curl -s -i -H "$AUTH" "$(api 1)/v1/nope" | head -1 | tr -d '\r' | grep -qx "HTTP/1.1 404 Not Found" ||
	fail "404's status line"

# bad input: 4xx with a field, nothing changes
before=$(digest_of 1 | cut -d" " -f1)
expect_400() { # BODY FIELD
	local out
	call POST 1 /v1/jobs "$1"
out=$BODY
	[ "$CODE" = 400 ] || fail "POST /v1/jobs $1: $CODE $out, want 400"
	echo "$out" | grep -q '"error"' || fail "no error in $out"
	[ -z "$2" ] || echo "$out" | grep -q "\"field\":\"$2\"" || fail "POST /v1/jobs $1: $out does not name $2"
}
expect_400 '{"name": "x",' ""
expect_400 '[1,2]' ""
expect_400 '{"name":"x","bogus":1}' bogus
expect_400 '{"name":7}' name
expect_400 '{"name":"x","priority":"high"}' priority
expect_400 '{"name":"x","priority":5000}' priority
expect_400 '{"name":"bad name!"}' name
expect_400 '{"priority":1}' name
# nested fields are checked by the job-spec parser and named by their dotted path
expect_400 '{"name":"x","parallel":{"tp":0}}' parallel.tp
expect_400 '{"name":"x","parallel":{"tp":3}}' parallel.tp
expect_400 '{"name":"x","command":["sh"]}' ranks
expect_400 '{"name":"x","command":["sh"],"ranks":2,"env":{"RANK":"1"}}' env.RANK
expect_400 '{"name":"x","failure":{"max_restarts":-1}}' failure.max_restarts
deep=$(printf '{"name":"x","model":%s1%s}' "$(printf '[%.0s' $(seq 40))" "$(printf ']%.0s' $(seq 40))")
expect_400 "$deep" ""
head -c 1100000 /dev/zero | tr '\0' ' ' >"$T/big"
code=$(curl -s -o "$T/big.out" -w '%{http_code}' -X POST -H "$AUTH" --data-binary @"$T/big" \
	"$(api 1)/v1/jobs")
[ "$code" = 413 ] || fail "1.1 MB body: $code, want 413"
# h2o refuses it before any handler; the answer is still the API's JSON error
grep -q '^{"error":"request body over the limit of 1048576 bytes","field":"body"}$' "$T/big.out" ||
	fail "1.1 MB body: answer $(head -c 200 "$T/big.out")"
# the same with chunked transfer encoding (no length up front)
code=$(curl -s -o "$T/big.out" -w '%{http_code}' -X POST -H "$AUTH" -H 'Transfer-Encoding: chunked' \
	--data-binary @"$T/big" "$(api 1)/v1/jobs")
[ "$code" = 413 ] && grep -q '"field":"body"' "$T/big.out" ||
	fail "1.1 MB chunked body: $code $(head -c 200 "$T/big.out")"
call POST 1 /v1/tokens '{"name":"x","role":"king"}'
out=$BODY
[ "$CODE" = 400 ] && echo "$out" | grep -q '"field":"role"' || fail "bad role: $CODE $out"
for bad in 0 -1 '"60"' 1.5 315360001 '{}'; do
	call POST 1 /v1/tokens "{\"name\":\"x\",\"role\":\"user\",\"ttl_s\":$bad}"
	[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"ttl_s"' || fail "ttl_s $bad: $CODE $BODY"
done
get 1 "/v1/jobs?limit=0"
out=$BODY
[ "$CODE" = 400 ] && echo "$out" | grep -q '"field":"limit"' || fail "limit=0: $CODE $out"
get 1 "/v1/jobs?state=bogus"
out=$BODY
[ "$CODE" = 400 ] || fail "state=bogus: $CODE"
# a query parameter the route does not take, or one given twice, is refused by name: a
# mistyped ?stat=running answered with every job
get 1 "/v1/jobs?stat=running"
[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"stat"' &&
	echo "$BODY" | grep -qF "unknown query parameter 'stat' (GET /v1/jobs takes state after limit stale)" ||
	fail "GET /v1/jobs?stat=running: $CODE $BODY"
get 1 "/v1/events?aftr=3"
[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"aftr"' || fail "GET /v1/events?aftr=3: $CODE $BODY"
get 1 "/v1/jobs?limit=5&limit=7"
[ "$CODE" = 400 ] && echo "$BODY" | grep -qF "query parameter 'limit' is given twice" ||
	fail "GET /v1/jobs?limit=5&limit=7: $CODE $BODY"
call POST 1 "/v1/jobs?stale=1" '{"name":"x"}'
[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"stale"' &&
	echo "$BODY" | grep -qF "POST /v1/jobs takes none" || fail "POST /v1/jobs?stale=1: $CODE $BODY"
# stale is 1/true (or bare), 0/false: ?stale=2 or ?stale=yes is a mistake, not a yes
for bad in 2 yes no 00000000000000000001 %31x; do
	get 1 "/v1/cluster?stale=$bad"
	[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"stale"' &&
		echo "$BODY" | grep -qF "must be 1 or true, 0 or false" || fail "GET /v1/cluster?stale=$bad: $CODE $BODY"
done
for ok in "/v1/jobs?state=running&limit=5&after=j-000001&stale=1" "/v1/nodes?stale=0" \
	"/v1/cluster?stale=1" "/v1/cluster?stale=true" "/v1/cluster?stale" "/v1/jobs?stale=false" \
	"/?v=3" "/v1/events?&limit=1"; do
	get 1 "$ok"
	[ "$CODE" = 200 ] || fail "GET $ok: $CODE $BODY"
done
call POST 1 /v1/jobs '{"name":"x"}' -H 'X-Request-Id: has spaces'
out=$BODY
[ "$CODE" = 400 ] || fail "bad X-Request-Id: $CODE"
# a path segment that is not UTF-8 (or holds a control character) is refused by name; it
# made answers that quote it unencodable (500) and the shard routes never answer
for seg in %ff%fe %01 abc%c3; do
	get 1 "/v1/jobs/$seg"
	[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"path"' || fail "GET /v1/jobs/$seg: $CODE $BODY"
done
# a member's raft address is taken whole: a port with text after it ("7001x" was read as
# 7001 and the text kept in the raft configuration), out of range, or a host name is refused
for bad in 127.0.0.1:7001x 127.0.0.1:65536 127.0.0.1:0 localhost:7001 1.2.3:80; do
	call POST 1 /v1/cluster/members "{\"id\":7,\"raft_address\":\"$bad\",\"api_url\":\"http://127.0.0.1:1\"}"
	[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"raft_address"' &&
		echo "$BODY" | grep -qF "raft_address: '$bad' must be a.b.c.d:port" ||
		fail "POST /v1/cluster/members raft_address $bad: $CODE $BODY"
done
# an action that takes no arguments refuses a body other than none, whitespace or {}: a
# {"force":true} sent to cancel was ignored and the job cancelled as if asked plainly
for req in "POST /v1/jobs/j-000001/cancel" "DELETE /v1/jobs/j-000001" "DELETE /v1/tokens/t-1" \
	"POST /v1/nodes/n-1/cordon" "POST /v1/builds/1.0/commit" "DELETE /v1/cluster/members/1"; do
	set -- $req
	call "$1" 1 "$2" '{"force":true,"x":1}'
	[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"force"' &&
		echo "$BODY" | grep -qF "force: unknown field ($1 " && echo "$BODY" | grep -qF " takes no body, or {})" ||
		fail "$req with a body: $CODE $BODY"
	for bad in '[]' '"x"' '{"a":' 'null'; do
		call "$1" 1 "$2" "$bad"
		[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"error"' || fail "$req with body $bad: $CODE $BODY"
	done
done
get 1 /v1/jobs/j-000001
[ "$(jget "$BODY" 'd["state"]')" != cancelled ] || fail "a refused cancel cancelled j-000001: $BODY"
after=$(digest_of 1 | cut -d" " -f1)
[ "$before" = "$after" ] || fail "bad input changed the database: $before -> $after"
get 1 /v1/cluster
[ "$(jget "$BODY" 'len(d["members"])')" = 1 ] || fail "a refused member was added: $BODY"
note "bad input: 400/413 with the field named, database unchanged"

# a token with ttl_s works until it expires, then gets a 401 naming it and when it expired
t0=$(now_ms)
call POST 1 /v1/tokens '{"name":"short","role":"user","ttl_s":4}'
[ "$CODE" = 201 ] || fail "token with ttl_s: $CODE $BODY"
created=$BODY
short=$(sed -n 's/.*"token":"\([0-9a-f]*\)".*/\1/p' <<<"$created")
short_id=$(sed -n 's/.*"id":"\(t-[0-9]*\)".*/\1/p' <<<"$created")
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $short" "$(api 1)/v1/jobs")
# (a machine slow enough, an instrumented build on a loaded one, may take the 4 s itself)
[ "$code" = 200 ] || [ $(($(now_ms) - t0)) -ge 4000 ] || fail "a token before its expiry: $code"
[ "$(jget "$created" 'd["expires_ms"] - d["created_ms"]')" = 4000 ] || fail "expires_ms: $created"
short_refused() {
	[ "$(curl -s -o "$T/short" -w '%{http_code}' -H "Authorization: Bearer $short" "$(api 1)/v1/jobs")" = 401 ]
}
wait_until 15 short_refused || fail "a token after its ttl_s of 4 s still works"
grep -q "token $short_id (short) expired at 20" "$T/short" || fail "expired token's 401: $(cat "$T/short")"
get 1 /v1/tokens
[ "$(jget "$BODY" '[t.get("expires_ms", 0) > 0 for t in d["tokens"] if t["name"] == "short"]')" = "[true]" ] ||
	fail "token list without expires_ms: $BODY"
note "a token with ttl_s 4 worked, then was refused: $(cat "$T/short")"

# idempotency over HTTP: the same X-Request-Id returns the same job
call POST 1 /v1/jobs '{"name":"once"}' -H 'X-Request-Id: req-once-1'
a=$BODY
call POST 1 /v1/jobs '{"name":"once"}' -H 'X-Request-Id: req-once-1'
b=$BODY
[ "$a" = "$b" ] && [ "$CODE" = 201 ] || fail "retry with the same request id: '$a' vs '$b'"
# a user may cancel only their own jobs
uj=$(curl -s -X POST -H "Authorization: Bearer ${TOK[user]}" --data '{"name":"mine"}' "$(api 1)/v1/jobs" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer ${TOK[user]}" "$(api 1)/v1/jobs/j-000001/cancel")
[ "$code" = 403 ] || fail "user cancelling admin's job: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer ${TOK[user]}" "$(api 1)/v1/jobs/$uj/cancel")
[ "$code" = 200 ] || fail "user cancelling own job $uj: $code"
call POST 1 "/v1/jobs/$uj/cancel"
[ "$CODE" = 409 ] && echo "$BODY" | grep -qF "job $uj has already ended (cancelled): nothing to cancel" ||
	fail "cancelling $uj twice: $CODE $BODY"
# and ask only their own jobs for a checkpoint (another's: 403; a pending one: 409 naming why)
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer ${TOK[user]}" "$(api 1)/v1/jobs/j-000001/checkpoint")
[ "$code" = 403 ] || fail "user asking admin's job for a checkpoint: $code"
call POST 1 /v1/jobs/j-000001/checkpoint
[ "$CODE" = 409 ] && echo "$BODY" | grep -q "job j-000001 is pending: only the ranks of a running job can save a checkpoint" ||
	fail "checkpoint of a pending job: $CODE $BODY"
# and delete only their own ended jobs
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer ${TOK[user]}" "$(api 1)/v1/jobs/j-000001")
[ "$code" = 403 ] || fail "user deleting admin's job: $code"
call DELETE 1 /v1/jobs/j-000001
[ "$CODE" = 409 ] && echo "$BODY" | grep -q "job j-000001 is pending" || fail "deleting a pending job: $CODE $BODY"
del=$(curl -s -w ' %{http_code}' -X DELETE -H "Authorization: Bearer ${TOK[user]}" "$(api 1)/v1/jobs/$uj")
case "$del" in *'"deleted":true'*' 200') ;; *) fail "user deleting own ended job $uj: $del" ;; esac
call GET 1 "/v1/jobs/$uj"
[ "$CODE" = 404 ] || fail "deleted job $uj still shown: $CODE"
call DELETE 1 "/v1/jobs/$uj"
[ "$CODE" = 404 ] || fail "deleting $uj twice: $CODE"
# revoked tokens stop working; the audit log names the actor
call GET 1 /v1/tokens
tid=$(echo "$BODY" | grep -o '"id":"t-[0-9]*","name":"security-1"' | sed 's/"id":"\([^"]*\)".*/\1/')
call DELETE 1 "/v1/tokens/$tid"
[ "$CODE" = 200 ] || fail "revoke $tid: $CODE"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer ${TOK[security]}" "$(api 1)/v1/events")
[ "$code" = 401 ] || fail "revoked token still works: $code"
call GET 1 "/v1/events?limit=1000"
echo "$BODY" | grep -q "token $tid revoked by admin" || fail "revocation not in the audit log"
echo "$BODY" | grep -q "cancelled by user-1" || fail "cancel not in the audit log"
echo "$BODY" | grep -q "$uj (cancelled) deleted by user-1" || fail "delete not in the audit log"
call GET 1 "/v1/events?last=1"
[ "$CODE" = 200 ] && echo "$BODY" | grep -q '"next":null' &&
	[ "$(echo "$BODY" | grep -o '"seq":' | wc -l)" = 1 ] &&
	echo "$BODY" | grep -q "token $tid revoked by admin" || fail "last=1: $CODE $BODY"
call GET 1 "/v1/events?last=1&limit=5"
[ "$CODE" = 400 ] && echo "$BODY" | grep -q '"field":"last"' || fail "last with limit: $CODE $BODY"

# HTTP/2 (cleartext, prior knowledge) does not succeed; HTTP/1.1 does
code=$(curl -s -o /dev/null -w '%{http_code}' --http2-prior-knowledge "$(api 1)/healthz")
[ "$code" != 200 ] || fail "HTTP/2 prior knowledge answered 200"
ver=$(curl -s -o /dev/null -w '%{http_version}' --http2 "$(api 1)/healthz")
[ "$ver" = 1.1 ] || fail "h2c upgrade negotiated HTTP/$ver"
note "HTTP/2 prior knowledge refused (curl code $code), h2c upgrade stays on HTTP/1.1"

# one process per data dir
if "$YARDD" --id 1 --data-dir "$T/d1" --raft-address "127.0.0.1:$(raft_port 9)" --api-address "127.0.0.1:$(api_port 9)" --members "$M" >"$T/second.log" 2>&1; then
	fail "a second yardd on the same data dir started"
fi
grep -q "is in use by another yardd" "$T/second.log" || fail "second yardd gave no clear error: $(cat "$T/second.log")"
note "second yardd on $T/d1: $(grep -o 'data dir.*' "$T/second.log")"

# SIGTERM stops cleanly; a restart replays the log
kill -TERM "${PID[1]}"
wait "${PID[1]}"
rc=$?
[ $rc = 0 ] || fail "yardd exited $rc after SIGTERM"
unset "PID[1]"

# a bound on active jobs: a submission past it gets 429 naming the limit and changes
# nothing; once a job ends (cancelled) there is room again
start_member 1 "$M" --max-active-jobs 2
wait_leader 10 1 || fail "no leader after restart with --max-active-jobs"
get 1 "/v1/jobs?state=pending&limit=1000"
pending=$(jget "$BODY" 'len(d["jobs"])')
for id in $(jget "$BODY" '" ".join(j["id"] for j in d["jobs"])'); do
	call POST 1 "/v1/jobs/$id/cancel" '{}'
	[ "$CODE" = 200 ] || fail "cancel $id: $CODE $BODY"
done
submit_named() { call POST 1 /v1/jobs "{\"name\":\"$1\"}"; [ "$CODE" = 201 ]; }
for n in 1 2; do # a refused try changes nothing: tried again until the cancels are counted
	wait_until 10 submit_named "bounded-$n" || fail "submission $n under the bound: $CODE $BODY"
done
call POST 1 /v1/jobs '{"name":"over-the-bound"}'
[ "$CODE" = 429 ] && echo "$BODY" | grep -q 'max-active-jobs 2' ||
	fail "submission over --max-active-jobs 2: $CODE $BODY"
note "over the bound ($pending pending cancelled first): $BODY"
get 1 "/v1/jobs?limit=1000"
echo "$BODY" | grep -q '"over-the-bound"' && fail "the refused job was stored"
id=$(jget "$BODY" '[j["id"] for j in d["jobs"] if j["name"] == "bounded-1"][0]')
call POST 1 "/v1/jobs/$id/cancel" '{}'
[ "$CODE" = 200 ] || fail "cancel $id: $CODE $BODY"
wait_until 10 submit_named after-cancel || fail "no room after a cancel: $CODE $BODY"
kill -TERM "${PID[1]}"
wait "${PID[1]}" || fail "yardd exited non-zero after SIGTERM"
unset "PID[1]"

# a bound on the replicated state: once it holds --max-state-mb, a submission gets 507 naming
# the bound and changes nothing, while other writes (a cancel) still go through
start_member 1 "$M" --max-state-mb 1
wait_leader 10 1 || fail "no leader after restart with --max-state-mb"
pad=$(python3 -c 'print(",".join("\"P%d\":\"%s\"" % (i, "x" * 4000) for i in range(16)))')
n=0
while :; do # 64 kB of spec each: the state passes 1 MiB within a few dozen
	call POST 1 /v1/jobs "{\"name\":\"fill-$n\",\"env\":{$pad}}"
	[ "$CODE" = 201 ] || break
	n=$((n + 1))
	[ $n -lt 100 ] || fail "100 submissions of 64 kB and the 1 MiB bound never refused one"
done
[ "$CODE" = 507 ] && echo "$BODY" | grep -q 'max-state-mb 1' &&
	echo "$BODY" | grep -q 'replicated state holds [0-9]* MiB' ||
	fail "submission over --max-state-mb 1 (after $n): $CODE $BODY"
note "over the state bound after $n submissions: $BODY"
get 1 "/v1/jobs?limit=1000"
echo "$BODY" | grep -q "\"fill-$n\"" && fail "the refused job fill-$n was stored"
get 1 "/v1/jobs?state=pending&limit=1" # one 64 kB job: small enough for jget's argument
id=$(jget "$BODY" 'd["jobs"][0]["id"]')
call POST 1 "/v1/jobs/$id/cancel" '{}'
[ "$CODE" = 200 ] || fail "a cancel over the state bound: $CODE $BODY"
# deleting ended jobs makes room: the bound judges the pages in use, not the database file
# (which keeps the freed pages for reuse and never shrinks)
get 1 "/v1/jobs?limit=1000"
for id in $(python3 -c 'import json,sys; print(" ".join(j["id"] for j in json.load(open(sys.argv[1]))["jobs"] if j["name"].startswith("fill-")))' "$T/body"); do
	call POST 1 "/v1/jobs/$id/cancel" '{}'
	call DELETE 1 "/v1/jobs/$id"
	[ "$CODE" = 200 ] || fail "delete $id over the state bound: $CODE $BODY"
done
call POST 1 /v1/jobs '{"name":"after-room"}'
[ "$CODE" = 201 ] || fail "a submission after the filled jobs were deleted: $CODE $BODY ($(curl -s -H "$AUTH" "$(api 1)/metrics" | grep '^yard_fsm_db'))"
kill -TERM "${PID[1]}"
wait "${PID[1]}" || fail "yardd exited non-zero after SIGTERM"
unset "PID[1]"
rc=0
"$YARDD" --max-state-mb 9000 2>"$T/max-state.err" || rc=$?
[ $rc = 2 ] && grep -q "max-state-mb: '9000' is not 0..8192" "$T/max-state.err" ||
	fail "yardd --max-state-mb 9000 (over the state machine's 8192 MiB): rc $rc, $(cat "$T/max-state.err")"

# below the free-space floor writes are refused, reads still work
start_member 1 "$M" --min-free-mb 100000000
wait_leader 10 1 || fail "no leader after restart"
get 1 /v1/jobs/j-000001
out=$BODY
[ "$CODE" = 200 ] || fail "job lost across restart: $CODE $out"
call POST 1 /v1/jobs '{"name":"nospace"}'
out=$BODY
[ "$CODE" = 503 ] && echo "$out" | grep -q 'MiB threshold: writes refused' || fail "write below the free-space floor: $CODE $out"
note "below --min-free-mb: $out"
echo "PASS test_api"
