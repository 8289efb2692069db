#!/usr/bin/env bash
# dp_shm_space.sh: a /dev/shm too small for the shared-memory transport (a container's
# default is 64 MiB) is an error at communicator creation on every rank, naming /dev/shm,
# the size and the way out, never a SIGBUS in the middle of a collective; the same ranks
# with room enough run. The agent's self-test there fails over shm, passes over TCP, and
# ends its output (the line a rollout reports) with the shm failure. Needs a private mount namespace for the small /dev/shm (unshare -m,
# as root): skipped, saying so, where there is none.
set -euo pipefail
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
if ! unshare -m true 2>/dev/null; then
	echo "SKIP: no private mount namespace here (unshare -m needs root)"
	exit 77
fi
# ranks of yard-bench under a tmpfs of the given size mounted on /dev/shm
ranks_in() {
	unshare -m sh -c 'mount -t tmpfs -o "size=$1" tmpfs /dev/shm &&
		exec timeout 60 "$2/yard-bench" allreduce --ranks 2 --transport shm --algo shared \
			--min 1M --max 1M --iters 2 --warmup 1' sh "$1" "$build" 2>&1
}

set +e
out=$(ranks_in 4m)
rc=$?
set -e
echo "$out"
[ "$rc" != 0 ] || fail "2 ranks ran in a 4 MiB /dev/shm: each needs more"
for r in 0 1; do
	echo "$out" | grep -q "rank $r: shared memory for rank $r: [0-9]* KiB in /dev/shm: No space left on device.*YARD_TRANSPORT=tcp" ||
		fail "rank $r did not report the full /dev/shm by name"
done
! echo "$out" | grep -qi "bus error\|signal" || fail "a rank died of a signal"

out=$(ranks_in 64m) || fail "2 ranks in a 64 MiB /dev/shm: $out"
echo "$out" | grep -q "^ *1048576 .* 0$" || fail "no correct 1 MiB result: $out"

set +e
out=$(unshare -m sh -c 'mount -t tmpfs -o size=4m tmpfs /dev/shm &&
	exec timeout 60 "$1/yard-agent" --self-test' sh "$build" 2>&1)
rc=$?
set -e
echo "$out"
[ "$rc" = 1 ] || fail "self-test in a 4 MiB /dev/shm: exit $rc"
echo "$out" | grep -q "tcp allreduce of .* ok" || fail "the self-test's TCP check did not pass"
echo "$out" | tail -n 1 | grep -q "shm allreduce failed: .*/dev/shm" ||
	fail "the self-test's last line is not the shm failure"
echo "ok: a full /dev/shm is an error naming it; with room the ranks run; the self-test names it last"
