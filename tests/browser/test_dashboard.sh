#!/usr/bin/env bash
# test_dashboard.sh: end-to-end test of the web dashboard in a real browser: Debian's chromium
# driven by playwright-core (npm, installed at test time into tests/browser/node_modules, not
# committed). Starts three yardd members and one agent, creates admin/user/security tokens, submits jobs
# (one planned by parallel "auto", a dp2 × pp2 one with a slowed rank), uploads two agent
# builds (a good one, one whose self-test fails), then runs dashboard.test.cjs, which signs
# in, walks every page, rolls both builds out onto the agent while the rollouts page watches,
# and takes screenshots into tests/browser/artifacts/ (in the build tree).
#
# Exit 77 (SKIP) when chromium, node/npm or playwright-core cannot be had; 1 on any failure.
# Environment: CHROMIUM (default /usr/bin/chromium), YARD_BROWSER_CACHE (where node_modules
# goes; default tests/browser in the source tree).
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
skip() { echo "SKIP: $*"; exit 77; }

CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || skip "no chromium at $CHROMIUM (apt-get install chromium; scripts/setup installs it)"
command -v node >/dev/null || skip "node not found (apt-get install nodejs npm)"
command -v npm >/dev/null || skip "npm not found (apt-get install npm)"
cache=${YARD_BROWSER_CACHE:-$top_srcdir/tests/browser}
if [ ! -f "$cache/node_modules/playwright-core/package.json" ]; then
	echo "# installing playwright-core into $cache/node_modules"
	mkdir -p "$cache"
	(cd "$cache" && npm install --no-save --no-audit --no-fund --loglevel=error --fetch-timeout=60000 --fetch-retries=1 playwright-core) >"$cache/npm-install.log" 2>&1 ||
		skip "cannot install playwright-core from npm (offline?): see $cache/npm-install.log"
	[ -f "$cache/node_modules/playwright-core/package.json" ] || skip "npm did not install playwright-core"
fi

. "$top_srcdir/tests/integration/lib.sh"
# the live rollout re-execs the agent in place (a guardian may start it again): end both
trap 'cleanup_upgraded_agents; cleanup_agents; cleanup' EXIT

# Three members: the page is tested on the leader, and once on a follower (stale reads, banner).
members=$(members_arg 1 2 3)
# a 1 s election timeout: on a loaded 2-core CI machine the 200 ms default lets leadership
# move mid-test, and the page is served by the member that led when it loaded
for id in 1 2 3; do start_member "$id" "$members" --election-timeout-ms 1000; done
wait_until 20 leader_of 1 2 3 || fail "no leader among members 1-3"
L=$(leader_of 1 2 3)
F=$((L % 3 + 1))
# a member that failed to start (its port taken by another program) is no follower to test
curl -sf "$(api "$F")/healthz" >/dev/null || F=$(((L + 1) % 3 + 1))
note "leader: member $L; the follower check uses member $F"

# tokens for the role checks
make_token() { # make_token NAME ROLE: prints the secret
	call POST "$L" /v1/tokens "{\"name\": \"$1\", \"role\": \"$2\"}"
	[ "$CODE" = 201 ] || fail "token create $1: $CODE $BODY"
	python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' <<<"$BODY"
}
USER_TOKEN=$(make_token alice user) || exit 1
SECURITY_TOKEN=$(make_token sam security) || exit 1
# an embargoed advisory, reported by the security principal (visible to it, not to users)
ADV_TITLE="agent heartbeat parser overflow (embargoed $$)"
CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $SECURITY_TOKEN" \
	-H 'Content-Type: application/json' --data "{\"title\": \"$ADV_TITLE\", \"severity\": \"high\",
	\"cve\": \"RESERVED\", \"text\": \"details under embargo\", \"embargo_days\": 7}" "$(api "$L")/v1/advisories")
[ "$CODE" = 201 ] || fail "advisory create: $CODE $(cat "$T/body")"
ADV_ID=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <"$T/body")

# submit_spec FILE [TOKEN]: prints the job id. Fields the running API's validator does not
# know yet are dropped one by one, loudly, so the test follows whichever validator is built.
submit_spec() {
	local spec auth=$AUTH field
	spec=$(cat "$1")
	[ $# -ge 2 ] && auth="Authorization: Bearer $2"
	for _ in 1 2 3 4 5; do
		CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "$auth" -H 'Content-Type: application/json' \
			--data "$spec" "$(api "$L")/v1/jobs")
		BODY=$(cat "$T/body")
		if [ "$CODE" = 201 ]; then
			python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$BODY"
			return 0
		fi
		field=$(python3 -c 'import json,sys; b=json.load(sys.stdin); print(b.get("field","") if "unknown field" in b.get("error","") else "")' <<<"$BODY")
		[ -n "$field" ] && [ "${field#*.}" = "$field" ] || { echo "submit $1: $CODE $BODY" >&2; return 1; }
		echo "# NOTE: yardd rejected $1: $BODY; submitting it without '$field'" >&2
		spec=$(python3 -c 'import json,sys; s=json.loads(sys.argv[1]); s.pop(sys.argv[2]); print(json.dumps(s))' "$spec" "$field")
	done
	return 1
}
# One agent with 4 CPU devices: the single-rank jobs really train on it (live loss chart from
# the leader's per-step history), while the 8-rank hybrid job waits with a pending reason.
make_join_token "$L"
start_agent node-a 4 "$(api 1),$(api 2),$(api 3)"
wait_until 15 node_state_is "$L" node-a up || fail "node-a did not register"
# a job interrupted once, first of all and alone: rank 1 hangs after step 3 while rank 0 goes
# on, the hang is detected, both resume from rank 0's newest checkpoint and finish (the job
# page's interruptions table: the step reached, the checkpoint restored, the steps redone)
write_rank_script
echo "{\"name\":\"hang-once\",\"ranks\":2,$(cmd train 12 0.1 1),\"checkpoint\":{\"store\":\"dir:$T/ckpt\"},\"failure\":{\"hang_timeout_s\":2,\"max_restarts\":1}}" >"$T/hang.json"
JOB_RESTARTED=$(submit_spec "$T/hang.json") || fail "cannot submit the job that hangs once"
wait_until 60 job_state_is "$L" "$JOB_RESTARTED" succeeded || fail "the job that hangs once did not succeed: $(events_of "$L" "$JOB_RESTARTED")"
# examples/single.json with more steps, paced (debug.block_ms: 6 ms a step however fast this
# machine is): it must still be training while the page looks at it
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["train"]["steps"]=3000; j["debug"]={"block_ms": 0.5}; json.dump(j, open(sys.argv[2], "w"))' \
	"$top_srcdir/examples/single.json" "$T/single-long.json"
JOB_SINGLE=$(submit_spec "$T/single-long.json") || fail "cannot submit examples/single.json (3000 steps)"
JOB_HYBRID=$(submit_spec "$top_srcdir/examples/hybrid.json") || fail "cannot submit examples/hybrid.json"
JOB_USER=$(submit_spec "$top_srcdir/examples/single.json" "$USER_TOKEN") || fail "cannot submit as user"
# parallel "auto" (the planner picks the layout for at most 2 of node-a's devices once the
# agent reported its measured rates), short: it records its plan at placement; and one for
# CUDA devices, which no node has: it waits with no plan
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j.update(name="auto-plan", parallel="auto", ranks=2, priority=1); j["model"]["layers"]=8; j["train"]["steps"]=60; j.pop("checkpoint"); json.dump(j, open(sys.argv[2], "w"))' \
	"$top_srcdir/examples/single.json" "$T/auto.json"
pace_spec "$T/auto.json" 1 # long enough for a few points of per-step history
JOB_AUTO=$(submit_spec "$T/auto.json") || fail "cannot submit a parallel \"auto\" job"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j.update(name="auto-unplanned", resources={"device": "cuda"}, priority=-1); json.dump(j, open(sys.argv[2], "w"))' \
	"$T/auto.json" "$T/auto-cuda.json"
JOB_NOPLAN=$(submit_spec "$T/auto-cuda.json") || fail "cannot submit a parallel \"auto\" CUDA job"
# The auto job is planned only once node-a has reported the rates its probe measured (2-20 s
# after the agent starts, longer when a loaded machine makes the probe run again); a pending job
# that cannot be planned yet is passed over, so the dp2 × pp2 job below, submitted before that,
# could take all four devices first and keep the auto job waiting for minutes (seen once under
# distcheck). Submit it once the auto job has its plan.
auto_planned() { get "$L" "/v1/jobs/$JOB_AUTO" && [ "$(jget "$BODY" '(d.get("plan") or {}).get("layout") is not None')" = True ]; }
wait_until 120 auto_planned || {
	get "$L" "/v1/jobs/$JOB_AUTO"
	why=$(jget "$BODY" 'd.get("reason")')
	get "$L" /v1/nodes/node-a
	fail "$JOB_AUTO (parallel \"auto\") not planned within 120 s: $why; node-a: $(jget "$BODY" '{k: d.get(k) for k in ("state", "perf")}')"
}
# dp2 × pp2 on all four devices of node-a (placed once the jobs above leave it devices: the
# page test cancels the single-rank job when it has checked it; priority 1 puts it ahead of
# the 8-rank job, which after a minute of waiting keeps the free devices for itself, see
# scheduler/queue.h; the auto job above is ahead of it for the same reason), paced so it trains for
# minutes on any machine, with rank 3 slowed 2.5× so the leader's detector flags it:
# the heatmap, straggler and checkpoints panels on live data
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j.update(name="hybrid-live", priority=1); j["parallel"]["tp"]=1; j["train"]["steps"]=3000
j["checkpoint"].update(every_steps=20, keep=2); j["debug"]={"slow_rank": 3, "slow_factor": 2.5}; json.dump(j, open(sys.argv[2], "w"))' \
	"$top_srcdir/examples/hybrid.json" "$T/hybrid-live.json"
pace_spec "$T/hybrid-live.json" 1
JOB_LIVE4=$(submit_spec "$T/hybrid-live.json") || fail "cannot submit the dp2 × pp2 job"
note "jobs: $JOB_RESTARTED (hung once), $JOB_SINGLE (admin), $JOB_HYBRID (admin, dp2 tp2 pp2), $JOB_USER (user alice), $JOB_AUTO (auto), $JOB_NOPLAN (auto, cuda), $JOB_LIVE4 (dp2 pp2, rank 3 slowed)"

# an agent build for the live rollout: a real copy of yard-agent reporting another version
# (scripts/mark-build), uploaded to the build store; the page starts its rollout onto node-a
BUILD_VERSION=0.9.$$-dash
"$top_srcdir/scripts/mark-build" "$(command -v "$YARD_AGENT")" "$T/yard-agent-$BUILD_VERSION" --version "$BUILD_VERSION" >"$T/out" 2>&1 ||
	fail "mark-build: $(cat "$T/out")"
# and one whose self-test fails (the rollout's gate fails and the wave rolls back)
BAD_VERSION=0.9.$$-badtest
"$top_srcdir/scripts/mark-build" "$(command -v "$YARD_AGENT")" "$T/yard-agent-$BAD_VERSION" --version "$BAD_VERSION" --fault self-test >"$T/out" 2>&1 ||
	fail "mark-build: $(cat "$T/out")"
for v in "$BUILD_VERSION" "$BAD_VERSION"; do
	YARD_ENDPOINTS="$(api 1),$(api 2),$(api 3)" YARD_TOKEN=$TOKEN yardctl build upload "$T/yard-agent-$v" --version "$v" --component agent >"$T/out" 2>&1 ||
		fail "build upload $v: $(cat "$T/out")"
done

ARTIFACTS="$top_builddir/tests/browser/artifacts"
mkdir -p "$ARTIFACTS"
rm -f "$ARTIFACTS"/*.png
YARD_URL=$(api "$L") FOLLOWER_URL=$(api "$F") ADMIN_TOKEN=$TOKEN USER_TOKEN=$USER_TOKEN SECURITY_TOKEN=$SECURITY_TOKEN \
	JOB_SINGLE=$JOB_SINGLE JOB_HYBRID=$JOB_HYBRID JOB_USER=$JOB_USER JOB_AUTO=$JOB_AUTO JOB_NOPLAN=$JOB_NOPLAN JOB_LIVE4=$JOB_LIVE4 \
	JOB_RESTARTED=$JOB_RESTARTED BUILD_VERSION=$BUILD_VERSION BAD_VERSION=$BAD_VERSION ARTIFACTS=$ARTIFACTS \
	ADV_TITLE="$ADV_TITLE" ADV_ID="$ADV_ID" \
	CHROMIUM=$CHROMIUM NODE_PATH="$cache/node_modules" \
	node "$top_srcdir/tests/browser/dashboard.test.cjs"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || fail "browser test failed (rc $rc); screenshots in $ARTIFACTS"

# The token must never reach the controller's log (it is only ever in a header).
for t in "$TOKEN" "$USER_TOKEN" "$SECURITY_TOKEN"; do
	grep -qF "$t" "$T"/log.* && fail "a token appears in a yardd log"
done
note "screenshots: $ARTIFACTS"
echo "PASS"
