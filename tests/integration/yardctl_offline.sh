#!/bin/sh
# yardctl_offline.sh: yardctl's behaviour when no controller is needed or none answers:
# usage errors exit 2 with the part of the usage that concerns them, unreachable endpoints
# exit 1 naming every endpoint tried (after bounded retries), and a bad job file exits 1
# naming the file and the field before any network traffic. Runs the real binary from the
# build tree.
set -u

top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY YARD_ENDPOINTS YARD_TOKEN
tmp=$(mktemp -d "${TMPDIR:-/tmp}/yardctl_offline.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
	echo "FAIL: $*" >&2
	failures=$((failures + 1))
}

# run EXPECTED_STATUS ARGS...: runs yardctl, keeps stdout/stderr in $tmp/out, $tmp/err.
run() {
	want=$1
	shift
	timeout 60 yardctl "$@" >"$tmp/out" 2>"$tmp/err"
	got=$?
	if [ "$got" != "$want" ]; then
		fail "yardctl $*: exit $got, expected $want; stderr: $(cat "$tmp/err")"
		return 1
	fi
	return 0
}

# expect_in FILE TEXT: FILE ($tmp/out or $tmp/err) contains TEXT.
expect_in() {
	grep -qF -- "$2" "$1" || fail "expected \"$2\" in $(basename "$1"): $(cat "$1")"
}

# expect_not_in FILE TEXT: FILE does not contain TEXT.
expect_not_in() {
	if grep -qF -- "$2" "$1"; then fail "did not expect \"$2\" in $(basename "$1"): $(cat "$1")"; fi
}

# --- usage errors: exit 2, the message, then the part of the usage that concerns it on
# stderr: the whole text when nothing was given, the command's group otherwise, the list of
# commands and the global flags for an unknown command or a missing endpoint or token
run 2 && expect_in "$tmp/err" "no command given" && expect_in "$tmp/err" "usage: yardctl" &&
	expect_in "$tmp/err" "rollout list"
run 2 frobnicate && expect_in "$tmp/err" 'unknown command "frobnicate"' &&
	expect_in "$tmp/err" "commands: cluster, job, node," &&
	expect_in "$tmp/err" "--endpoints URL" && expect_not_in "$tmp/err" "job submit FILE"
run 2 job && expect_in "$tmp/err" "job: needs a subcommand"
run 2 job show && expect_in "$tmp/err" "job show: missing arguments" &&
	expect_in "$tmp/err" "  job show ID" && expect_in "$tmp/err" "  job wait ID" &&
	expect_in "$tmp/err" "yardctl --help lists every command" &&
	expect_not_in "$tmp/err" "cluster status" && expect_not_in "$tmp/err" "rollout"
run 2 -o json --retries 1 rollout && expect_in "$tmp/err" "rollout: needs a subcommand" &&
	expect_in "$tmp/err" "  rollout start --build V" && expect_not_in "$tmp/err" "  job "
run 2 job list --state sleeping && expect_in "$tmp/err" '--state: "sleeping"'
run 2 token create bob && expect_in "$tmp/err" "needs --role"
run 2 cluster status --bogus && expect_in "$tmp/err" "unknown option --bogus"
run 2 job list && expect_in "$tmp/err" "no endpoints: set YARD_ENDPOINTS" &&
	expect_in "$tmp/err" "--endpoints URL" && expect_not_in "$tmp/err" "job submit FILE"
run 2 --endpoints http://127.0.0.1:1 job list && expect_in "$tmp/err" "no token"
run 2 --endpoints ftp://127.0.0.1:1 --token t job list &&
	expect_in "$tmp/err" "is not an http:// or https:// URL"

# --- help: exit 0, usage on stdout
run 0 --help && expect_in "$tmp/out" "job wait ID [--timeout S]"

# --- a bad job file: exit 1 naming the file and the field, checked before the cluster
cat >"$tmp/bad.json" <<'EOF'
{"name": "bad", "model": {"d_ff": 256}, "parallel": {"dp": 1, "tp": 3}}
EOF
run 1 job submit "$tmp/bad.json" && expect_in "$tmp/err" "$tmp/bad.json" &&
	expect_in "$tmp/err" "parallel.tp: 3 does not divide model.d_ff (256)"
cat >"$tmp/unknown.json" <<'EOF'
{"name": "bad", "failure": {"straggler": {"polcy": "off"}}}
EOF
run 1 job submit "$tmp/unknown.json" && expect_in "$tmp/err" "failure.straggler.polcy: unknown field"
printf '{"name": "bad",' >"$tmp/trunc.json"
run 1 job submit "$tmp/trunc.json" && expect_in "$tmp/err" "malformed JSON"
run 1 job submit "$tmp/missing.json" && expect_in "$tmp/err" "$tmp/missing.json: cannot open"

# --- unreachable endpoints: exit 1 naming every endpoint tried
export YARD_TOKEN=offline-test-token
export YARD_ENDPOINTS="http://127.0.0.1:1, http://127.0.0.1:2/"
run 1 --retries 0 job list && expect_in "$tmp/err" "job list: no controller answered" &&
	expect_in "$tmp/err" "http://127.0.0.1:1 (" && expect_in "$tmp/err" "http://127.0.0.1:2 ("
# a write: the spec is valid, so the failure is the network one
run 1 --retries 0 job submit "$top_srcdir/examples/single.json" &&
	expect_in "$tmp/err" "job submit: no controller answered POST /v1/jobs"
# the default retries (with back-off) still end, and --endpoints overrides the environment
if run 1 --endpoints http://127.0.0.1:3 cluster status; then
	expect_in "$tmp/err" "http://127.0.0.1:3 ("
	if grep -qF "127.0.0.1:1 " "$tmp/err"; then
		fail "--endpoints did not replace YARD_ENDPOINTS: $(cat "$tmp/err")"
	fi
fi
# job wait keeps asking until its timeout, then says so and what the last attempt got
run 1 --retries 0 job wait j-000001 --timeout 1 && expect_in "$tmp/err" "timed out after 1 s" &&
	expect_in "$tmp/err" "no controller answered"

if [ "$failures" -ne 0 ]; then
	echo "$failures check(s) failed" >&2
	exit 1
fi
echo "yardctl offline checks passed"
