# lib.sh: helpers for the controller integration tests: start/stop yardd members on
# 127.0.0.1 with per-test ports derived from the shell's pid, bounded polling, curl calls.
# Sourced by tests/integration/test_*.sh; each test gets its own temp dir and cleans up.
set -u

YARDD=${YARDD:-yardd}
T=$(mktemp -d "${TMPDIR:-/tmp}/yard-it.XXXXXX")
# 50 ports per test, spread over 10000-31999 by pid so parallel tests rarely collide, and
# below the kernel's ephemeral range (32768-60999) so outgoing connections never hold them.
PORT_BASE=$((10000 + ($$ % 440) * 50))
TOKEN=admin-token-for-tests-$$
echo "$TOKEN" > "$T/admin.token"
AUTH="Authorization: Bearer $TOKEN"
declare -A PID

fail() { echo "FAIL: $*" >&2; for f in "$T"/log.*; do [ -f "$f" ] && { echo "== $f" >&2; tail -n 30 "$f" >&2; }; done; exit 1; }
note() { echo "# $*"; }

cleanup() {
	for id in "${!PID[@]}"; do kill -9 "${PID[$id]}" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT

raft_port() { echo $((PORT_BASE + $1)); }
api_port() { echo $((PORT_BASE + 20 + $1)); }
api() { echo "http://127.0.0.1:$(api_port "$1")"; }
members_arg() { # members_arg 1 2 3
	local out="" id
	for id in "$@"; do out="$out${out:+,}$id=127.0.0.1:$(raft_port "$id")@$(api "$id")"; done
	echo "$out"
}

# start_member ID MEMBERS [extra yardd args...]
start_member() {
	local id=$1 members=$2
	shift 2
	"$YARDD" --id "$id" --data-dir "$T/d$id" --raft-address "127.0.0.1:$(raft_port "$id")" \
		--api-address "127.0.0.1:$(api_port "$id")" --members "$members" \
		--admin-token-file "$T/admin.token" "$@" >>"$T/log.$id" 2>&1 &
	PID[$id]=$!
}

kill_member() { kill -9 "${PID[$1]}" 2>/dev/null; wait "${PID[$1]}" 2>/dev/null; unset "PID[$1]"; }

# wait_until TIMEOUT_S CMD...: polls CMD every 50 ms.
wait_until() {
	local deadline=$(($(date +%s%N) / 1000000 + $1 * 1000))
	shift
	while ! "$@" >/dev/null 2>&1; do
		[ $(($(date +%s%N) / 1000000)) -lt $deadline ] || return 1
		sleep 0.05
	done
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# get ID PATH: status in $CODE, body in $BODY
get() { CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "$AUTH" "$(api "$1")$2"); BODY=$(cat "$T/body"); }
# call METHOD ID PATH [BODY] [extra curl args]: follows redirects; status in $CODE, body in $BODY
call() {
	local m=$1 id=$2 path=$3 body=${4:-}
	shift 3
	[ $# -gt 0 ] && shift
	CODE=$(curl -s -L --max-redirs 3 -o "$T/body" -w '%{http_code}' -X "$m" -H "$AUTH" \
		${body:+-H 'Content-Type: application/json' --data "$body"} "$@" "$(api "$id")$path")
	BODY=$(cat "$T/body")
}

is_leader() { curl -s "$(api "$1")/healthz" | grep -q '"state":"leader"'; }
# leader_of IDS...: prints the id of a member that reports itself leader and is ready
leader_of() {
	local id
	for id in "$@"; do
		if is_leader "$id" && [ "$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" "$(api "$id")/v1/jobs?limit=1")" = 200 ]; then
			echo "$id"
			return 0
		fi
	done
	return 1
}
wait_leader() { # wait_leader TIMEOUT IDS... → sets LEADER
	local deadline=$(($(now_ms) + $1 * 1000))
	shift
	while [ "$(now_ms)" -lt $deadline ]; do
		LEADER=$(leader_of "$@") && return 0
		sleep 0.02
	done
	return 1
}

digest_of() { curl -s -H "$AUTH" "$(api "$1")/v1/debug/digest" | sed -n 's/.*"digest":"\([0-9a-f]*\)".*"applied_index":\([0-9]*\).*/\1 \2/p'; }
# same_digest IDS...: every member has the same database at the same applied index
same_digest() {
	local first="" id d
	for id in "$@"; do
		d=$(digest_of "$id")
		[ -n "$d" ] || return 1
		[ -z "$first" ] && first=$d
		[ "$d" = "$first" ] || return 1
	done
}
metric() { curl -s -H "$AUTH" "$(api "$1")/metrics" | awk -v k="$2" '$1 == k { print $2 }'; }
