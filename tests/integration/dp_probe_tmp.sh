#!/usr/bin/env bash
# dp_probe_tmp.sh: the node probe (`yard-worker --probe`, which every agent runs at start and
# again later) leaves nothing in TMPDIR, neither when it completes nor when it is SIGKILLed
# while its forked ranks communicate (the agent kills a probe that overruns its budget; a
# stopped node's processes go with SIGKILL). Each of its communicators meets over a
# rendezvous file; one left per killed probe piled up in /tmp.
set -euo pipefail
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
T=$(mktemp -d)
pid="" kids=""
# a failed check may leave the probe frozen: kill it and its ranks
trap 'kill -KILL $pid $kids 2>/dev/null; rm -rf "$T"' EXIT
mkdir "$T/tmp"
leftovers() { ls -A "$T/tmp"; }

TMPDIR=$T/tmp "$build/yard-worker" --probe --devices 2 --budget-ms 1500 >"$T/out" ||
	fail "the probe failed: $(cat "$T/out")"
grep -q '"flops_per_s"' "$T/out" || fail "the probe printed no rates: $(cat "$T/out")"
[ -z "$(leftovers)" ] || fail "a completed probe left $(leftovers) in TMPDIR"

# The probe's children, read without forking (the rank phases last milliseconds).
children() {
	local kids=""
	if [ -r "/proc/$1/task/$1/children" ]; then
		read -r kids <"/proc/$1/task/$1/children" || true
	else
		kids=$(pgrep -P "$1" | tr '\n' ' ')
	fi
	echo "$kids"
}
# Each round freezes the probe and its children whenever it has some, until one of them
# holds a socket (a communicator is up: its ranks met over a rendezvous file), then kills
# the probe there. While children exist, no rendezvous file may be in TMPDIR either.
for round in 1 2 3; do
	TMPDIR=$T/tmp "$build/yard-worker" --probe --devices 2 --budget-ms 1500 >/dev/null 2>&1 &
	pid=$!
	caught=""
	for _ in $(seq 100000); do
		[ -d "/proc/$pid" ] || break
		kids=$(children "$pid")
		[ -n "$kids" ] || continue
		kill -STOP "$pid" $kids 2>/dev/null || true
		[ -z "$(leftovers)" ] || fail "round $round: $(leftovers) in TMPDIR while the" \
			"probe's ranks run"
		for c in $kids; do
			ls -l "/proc/$c/fd" 2>/dev/null | grep -q 'socket:' && caught=$kids
		done
		[ -z "$caught" ] || break
		kill -CONT "$pid" $kids 2>/dev/null || true
	done
	[ -n "$caught" ] || fail "round $round: the probe ended before a rank was seen talking"
	kill -KILL "$pid" $caught 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	[ -z "$(leftovers)" ] || fail "round $round: a probe killed while its ranks ran left" \
		"$(leftovers) in TMPDIR"
done
echo "probe: completed once, killed 3 times while its ranks talked: nothing left in TMPDIR"
