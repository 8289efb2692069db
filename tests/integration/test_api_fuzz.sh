#!/usr/bin/env bash
# test_api_fuzz.sh: hostile requests against one live yardd (tests/integration/api_fuzz.py):
# 1,500 requests mutated reproducibly from a valid one per route (bodies, path segments,
# query values, tokens of other roles); no answer may be a 5xx, every 4xx must be a JSON
# error and commit nothing, and afterwards the server answers and its event chain verifies. YARD_API_FUZZ_REQUESTS and YARD_API_FUZZ_SEED change the run.
. "$(dirname "$0")/lib.sh"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
token_of() { # ROLE NAME: a new token's secret in $SECRET, its id in $TID
	call POST 1 /v1/tokens "{\"name\":\"$2\",\"role\":\"$1\"}"
	[ "$CODE" = 201 ] || fail "token $2: $CODE $BODY"
	SECRET=$(jget "$BODY" 'd["token"]')
	TID=$(jget "$BODY" 'd["id"]')
}
token_of user user-1
USER_TOKEN=$SECRET
token_of security sec-1
SEC_TOKEN=$SECRET
token_of operator spare-1
SPARE_ID=$TID
# a node, and its token
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $JOIN" \
	--data '{"name":"node-a","host":"127.0.0.1","port_base":29500,"devices":[{"index":0,"kind":"cpu"},{"index":1,"kind":"cpu"}]}' \
	"$(api 1)/v1/agents/register")
[ "$CODE" = 200 ] || fail "register: $CODE $(cat "$T/body")"
NODE_TOKEN=$(jget "$(cat "$T/body")" 'd["node_token"]')
submit 1 '{"name":"seed","ranks":1,"command":["sleep","1"]}'
# a build (ready) and an advisory
printf '0123456789' >"$T/build"
sha=$(sha256sum "$T/build" | cut -d' ' -f1)
SAUTH="Authorization: Bearer $SEC_TOKEN"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -X POST -H "$SAUTH" --data "{\"version\":\"2.0.0\",\"component\":\"agent\",\"sha256\":\"$sha\",\"size\":10}" "$(api 1)/v1/builds")
[ "$CODE" = 201 ] || fail "build: $CODE $(cat "$T/body")"
CODE=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "$SAUTH" --data-binary @"$T/build" "$(api 1)/v1/builds/2.0.0/chunks/0")
[ "$CODE" = 200 ] || fail "build chunk: $CODE"
CODE=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "$SAUTH" "$(api 1)/v1/builds/2.0.0/commit")
[ "$CODE" = 200 ] || fail "build commit: $CODE"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -X POST -H "$SAUTH" --data '{"title":"t","severity":"high","text":"x","embargo_days":3}' "$(api 1)/v1/advisories")
[ "$CODE" = 201 ] || fail "advisory: $CODE $(cat "$T/body")"
ADV=$(jget "$(cat "$T/body")" 'd["id"]')

cat >"$T/ids.json" <<JSON
{"admin": "$TOKEN", "user": "$USER_TOKEN", "security": "$SEC_TOKEN", "agent": "$JOIN",
 "node": "$NODE_TOKEN", "job": "$JOB", "token_id": "$SPARE_ID", "build": "2.0.0",
 "advisory": "$ADV"}
JSON
out=$(python3 "$top_srcdir/tests/integration/api_fuzz.py" --url "$(api 1)" --tokens "$T/ids.json" \
	--requests "${YARD_API_FUZZ_REQUESTS:-1500}" --seed "${YARD_API_FUZZ_SEED:-1}" 2>&1) ||
	fail "$out"
note "$out"
kill -0 "${PID[1]}" || fail "yardd is gone"
