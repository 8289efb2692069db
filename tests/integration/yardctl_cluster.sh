#!/usr/bin/env bash
# yardctl_cluster.sh: yardctl and scripts/cluster against a real 3-member yardd cluster on
# 127.0.0.1: leader redirects, tables and JSON, error answers, tokens, events, job wait's
# timeout, and a SIGKILLed leader with its endpoint still listed first; then restart and
# down. Skipped (77) when yardd has not been built.
set -u

top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
[ -x "$top_builddir/yardd" ] || {
	echo "SKIP: no yardd in $top_builddir"
	exit 77
}
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export PATH="$top_builddir:$PATH"
CLUSTER="$top_srcdir/scripts/cluster"
T=$(mktemp -d "${TMPDIR:-/tmp}/yardctl-cluster.XXXXXX") || exit 99
# Ports P+1..P+4 (raft) and P+101..P+104 (API), spread by pid so parallel runs rarely meet,
# in 10000..19999: below the kernel's ephemeral range (outgoing connections take ports there)
# and apart from the ports tests/integration/lib.sh uses.
BASE=$((10000 + ($$ % 90) * 110))
pid4=""
cleanup() {
	[ -z "$pid4" ] || kill -9 "$pid4" 2>/dev/null
	"$CLUSTER" down --dir "$T/c" >/dev/null 2>&1
	[ ! -d "$T/s" ] || "$CLUSTER" down --dir "$T/s" >/dev/null 2>&1
	rm -rf "$T"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	for f in "$T"/c/c*.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -n 15 "$f" >&2; }; done
	exit 1
}
# yc EXPECTED_STATUS ARGS...: runs yardctl; output in $T/out and $T/err.
yc() {
	local want=$1 got
	shift
	timeout 60 yardctl "$@" >"$T/out" 2>"$T/err"
	got=$?
	[ "$got" = "$want" ] || fail "yardctl $*: exit $got, expected $want; stdout: $(cat "$T/out"); stderr: $(cat "$T/err")"
}
expect_in() { grep -qF -- "$2" "$1" || fail "expected \"$2\" in $(basename "$1"): $(cat "$1")"; }

# --- up refuses more switches than agents before it starts anything
"$CLUSTER" up --dir "$T/bad" --agents 1 --switches 2 >/dev/null 2>"$T/up.err" &&
	fail "up with 2 switches for 1 agent started"
grep -qF -- "--switches must be 0..--agents (got 2 for 1 agents)" "$T/up.err" ||
	fail "up with 2 switches for 1 agent: $(cat "$T/up.err")"

# --- up: prints the environment line
"$CLUSTER" up --dir "$T/c" --controllers 3 --base-port "$BASE" --bin "$top_builddir" \
	>"$T/env" 2>"$T/up.err" || fail "cluster up: $(cat "$T/up.err")"
grep -qE "^export YARD_ENDPOINTS=http://127.0.0.1:$((BASE + 101)),http://127.0.0.1:$((BASE + 102)),http://127.0.0.1:$((BASE + 103)) YARD_TOKEN=[0-9a-f]{32}$" "$T/env" ||
	fail "unexpected env line: $(cat "$T/env")"
[ "$(stat -c %a "$T/c/admin.token")" = 600 ] || fail "admin.token is not mode 0600"
# shellcheck source=/dev/null
. "$T/env"
"$CLUSTER" env --dir "$T/c" | cmp -s - "$T/env" || fail "cluster env differs from what up printed"
"$CLUSTER" status --dir "$T/c" >"$T/status" || fail "cluster status failed"
[ "$(grep -c '\*$' "$T/status")" = 1 ] || fail "status does not show one leader: $(cat "$T/status")"

# --- reads and the member table
yc 0 cluster members
[ "$(grep -c voter "$T/out")" = 3 ] || fail "members table: $(cat "$T/out")"
yc 0 -o json cluster status
expect_in "$T/out" '"members"'

# --- writes from a follower-first endpoint list follow the redirect to the leader
leader=$(grep '\*$' "$T/status" | sed 's/^controller:\([0-9]\).*/\1/')
follower=$((leader % 3 + 1))
FOLLOWER_FIRST="http://127.0.0.1:$((BASE + 100 + follower)),$YARD_ENDPOINTS"
printf '{"name": "it-job", "parallel": {"dp": 2}}' >"$T/job.json"
yc 0 --endpoints "$FOLLOWER_FIRST" -v job submit "$T/job.json"
expect_in "$T/out" "submitted (pending)"
expect_in "$T/err" "leader is http://127.0.0.1:$((BASE + 100 + leader))"
job=$(sed -n 's/^job \([^ ]*\) submitted.*/\1/p' "$T/out")
[ -n "$job" ] || fail "no job id in: $(cat "$T/out")"
! grep -q "^warning:" "$T/err" || fail "warnings for a plain job: $(cat "$T/err")"
# a spec the controller stores with a warning: yardctl prints it on stderr, and succeeds
printf '{"name": "fence-late", "failure": {"stop_on_disconnect_s": 10}}' >"$T/fence.json"
yc 0 job submit "$T/fence.json"
expect_in "$T/out" "submitted (pending)"
expect_in "$T/err" "warning: failure.stop_on_disconnect_s 10 is not below the 3.0 s after which the leader declares a silent node down"
yc 0 job list --state pending
expect_in "$T/out" "$job"
expect_in "$T/out" "it-job"
yc 0 -o json job show "$job"
expect_in "$T/out" "\"id\": \"$job\""
# the table view prints a spec's reals as written (the default straggler threshold 0.2),
# not with the 17 digits that keep them exact in the JSON
yc 0 job show "$job"
expect_in "$T/out" '"threshold": 0.2,'
expect_in "$T/out" '"slow_factor": 1.0,'

# --- error answers: status, endpoint and the server's message
yc 1 job show j-999999
expect_in "$T/err" "404 from http://127.0.0.1:"
yc 1 --token wrong-token job list
expect_in "$T/err" "401 from"
expect_in "$T/err" "check --token"

# --- job wait gives up at its timeout and says so
yc 1 job wait "$job" --timeout 1
expect_in "$T/err" "timed out after 1 s; job $job is still pending"
yc 0 job cancel "$job"
expect_in "$T/out" "cancelled"
yc 1 job wait "$job"
expect_in "$T/err" "job $job cancelled"
yc 0 job delete "$job"
expect_in "$T/out" "deleted job $job (0 checkpoints, 0 bytes)"
yc 1 job show "$job"
expect_in "$T/err" "404 from"
yc 1 job delete "$job"
expect_in "$T/err" "no job $job"

# --- tokens and events
yc 0 token create it-user --role user
expect_in "$T/out" "secret (shown once): "
tid=$(sed -n 's/^token \([^ ]*\) created.*/\1/p' "$T/out")
yc 0 token list
expect_in "$T/out" "it-user"
yc 0 token revoke "$tid"
yc 0 events --job "$job"
expect_in "$T/out" "job.submitted"
yc 0 events --tail 1
[ "$(wc -l <"$T/out")" = 2 ] || fail "events --tail 1: $(cat "$T/out")"
expect_in "$T/out" "token $tid revoked by admin"
# -f: the newest event, then each new one as it is committed
timeout 60 yardctl events -f --tail 1 >"$T/follow" 2>"$T/follow.err" &
follower=$!
for _ in $(seq 100); do [ -s "$T/follow" ] && break; sleep 0.1; done
yc 0 token create it-follow --role user
for _ in $(seq 100); do grep -q "it-follow" "$T/follow" && break; sleep 0.1; done
kill "$follower"
wait "$follower" 2>/dev/null || true
[ "$(grep -c '^SEQ ' "$T/follow")" = 1 ] ||
	fail "events -f: one header expected: $(cat "$T/follow")"
grep -q "revoked" "$T/follow" &&
	grep -q "token t-[0-9]* (it-follow, role user) created" "$T/follow" ||
	fail "events -f: $(cat "$T/follow") $(cat "$T/follow.err")"

# --- membership: a fourth yardd joins as a spare, then leaves
mkdir -p "$T/c4"
setsid "$top_builddir/yardd" --id 4 --data-dir "$T/c4" --raft-address "127.0.0.1:$((BASE + 4))" \
	--api-address "127.0.0.1:$((BASE + 104))" --join --admin-token-file "$T/c/admin.token" \
	</dev/null >"$T/c4.log" 2>&1 &
pid4=$!
yc 0 cluster add 4 "127.0.0.1:$((BASE + 4))" "http://127.0.0.1:$((BASE + 104))" --spare
expect_in "$T/out" "added member 4 as spare"
grep -qE "^4 +127.0.0.1:$((BASE + 4)) .* spare" "$T/out" || fail "member 4 not listed as spare: $(cat "$T/out")"
yc 1 cluster add 4 "127.0.0.1:$((BASE + 4))" "http://127.0.0.1:$((BASE + 104))"
expect_in "$T/err" "409 from"
expect_in "$T/err" "(field id)"
yc 0 cluster remove 4
yc 0 cluster members
grep -q "^4 " "$T/out" && fail "member 4 still listed after remove: $(cat "$T/out")"
kill "$pid4" 2>/dev/null
wait "$pid4" 2>/dev/null

# --- the leader dies; its URL stays first in the list and yardctl moves on
"$CLUSTER" kill --dir "$T/c" leader 2>"$T/kill.err" || fail "cluster kill leader: $(cat "$T/kill.err")"
expect_in "$T/kill.err" "killed controller $leader"
LEADER_FIRST="http://127.0.0.1:$((BASE + 100 + leader)),$YARD_ENDPOINTS"
yc 0 --endpoints "$LEADER_FIRST" job submit "$T/job.json"
expect_in "$T/out" "submitted"
"$CLUSTER" restart --dir "$T/c" "controller:$leader" 2>"$T/restart.err" ||
	fail "cluster restart: $(cat "$T/restart.err")"
"$CLUSTER" status --dir "$T/c" >"$T/status"
[ "$(grep -c ' - ' "$T/status")" = 0 ] || fail "a member is down after restart: $(cat "$T/status")"

# --- quorum lost: the survivor answers 503, and yardctl says who was tried and what each said
survivor=$((leader % 3 + 1))
for i in 1 2 3; do
	[ "$i" = "$survivor" ] || "$CLUSTER" kill --dir "$T/c" "controller:$i" 2>/dev/null || fail "kill controller:$i"
done
yc 1 job list
expect_in "$T/err" "job list: no controller could serve GET /v1/jobs"
expect_in "$T/err" "http://127.0.0.1:$((BASE + 100 + survivor)) (503: "
expect_in "$T/err" "http://127.0.0.1:$((BASE + 100 + (survivor % 3) + 1)) (Failed to connect to 127.0.0.1 port $((BASE + 100 + (survivor % 3) + 1)) after"
expect_in "$T/err" ": Couldn't connect to server)"

# --- down stops every member
"$CLUSTER" down --dir "$T/c" 2>/dev/null || fail "cluster down failed"
"$CLUSTER" status --dir "$T/c" >"$T/status"
[ "$(grep -c ' down ' "$T/status")" = 3 ] || fail "members still up after down: $(cat "$T/status")"
# --- up --tls: a private CA, members on https://, env names the CA for yardctl
if command -v openssl >/dev/null; then
	"$CLUSTER" up --dir "$T/s" --controllers 1 --tls --base-port "$BASE" --bin "$top_builddir" \
		>"$T/env" 2>"$T/up.err" || fail "cluster up --tls: $(cat "$T/up.err")"
	expect_in "$T/env" "YARD_ENDPOINTS=https://127.0.0.1:$((BASE + 101))"
	expect_in "$T/env" "YARD_CACERT=$T/s/tls/ca.crt"
	(
		eval "$(cat "$T/env")"
		yc 0 cluster status
		expect_in "$T/out" "leader       1 https://127.0.0.1:$((BASE + 101))"
		unset YARD_CACERT
		yc 1 --retries 0 cluster status
		expect_in "$T/err" "SSL certificate problem"
	) || exit 1
	"$CLUSTER" up --dir "$T/s" --controllers 1 --base-port "$BASE" >/dev/null 2>"$T/up.err" &&
		fail "up without --tls on a --tls cluster's dir started"
	expect_in "$T/up.err" "holds a cluster with --tls"
	"$CLUSTER" status --dir "$T/s" >"$T/status"
	grep -q "leader" "$T/status" || fail "status of the --tls cluster: $(cat "$T/status")"
	"$CLUSTER" down --dir "$T/s" 2>/dev/null || fail "cluster down --tls failed"
fi
echo "yardctl and scripts/cluster against a real cluster: passed"
