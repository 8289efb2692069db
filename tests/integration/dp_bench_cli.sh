#!/usr/bin/env bash
# dp_bench_cli.sh: yard-bench's host emulation: `--hosts H` puts the ranks on H emulated
# hosts in contiguous blocks and the shared-buffer allreduce runs across them with every
# result checked; a host count beyond the ranks or a label list of the wrong length is
# refused by name before any rank starts; --in-place allreduces are checked in place; a
# number, size or transport that is not one is refused by name.
set -euo pipefail
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
out=$("$build/yard-bench" allreduce --ranks 4 --hosts 2 --algo shared --min 1K --max 1M \
	--factor 32 --iters 2 --warmup 1 2>&1) || fail "4 ranks on 2 emulated hosts: $out"
echo "$out"
echo "$out" | grep -q "hosts h0,h0,h1,h1, algo shared" || fail "the ranks were not labelled h0,h0,h1,h1"
[ "$(echo "$out" | grep -c "shared  .* 0$")" = 3 ] || fail "not 3 sizes with 0 wrong elements"
set +e
msg=$("$build/yard-bench" allreduce --ranks 4 --hosts 5 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] && echo "$msg" | grep -q "^yard-bench: --hosts 5: want 1 to 4 hosts" ||
	fail "--hosts 5 for 4 ranks: exit $rc: $msg"
set +e
msg=$("$build/yard-bench" allreduce --ranks 4 --hosts a,a,b 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] && echo "$msg" | grep -q "^yard-bench: --hosts a,a,b: 3 labels for 4 ranks" ||
	fail "3 labels for 4 ranks: exit $rc: $msg"
# --in-place: the result lands in the input buffer, checked there (an out-of-place run would
# leave the input as it was and count every element wrong)
for algo in ring shared; do
	out=$("$build/yard-bench" allreduce --ranks 3 --algo $algo --in-place --min 1K --max 1M \
		--factor 32 --iters 3 --warmup 1 2>&1) || fail "--in-place --algo $algo: $out"
	[ "$(echo "$out" | grep -c "$algo  .* 0$")" = 3 ] || fail "--in-place --algo $algo: $out"
done
set +e
msg=$("$build/yard-bench" allgather --ranks 2 --in-place 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] && echo "$msg" | grep -q "^yard-bench: --in-place applies to allreduce only, not allgather" ||
	fail "--in-place allgather: exit $rc: $msg"
# --algo A,B,...: the algorithms compared in one launch, every one's result checked, a line
# per size and algorithm (auto names what it ran); bad lists refused by name
out=$("$build/yard-bench" allreduce --ranks 3 --algo auto,ring,shared --rounds 3 --min 1K \
	--max 1M --factor 32 --iters 2 --warmup 1 2>&1) || fail "--algo auto,ring,shared: $out"
echo "$out"
for algo in "auto:[a-z]*" ring shared; do
	[ "$(echo "$out" | grep -c " $algo  .* 0$")" = 3 ] || fail "--algo auto,ring,shared: not 3 checked lines of $algo"
done
[ "$(echo "$out" | grep -vc '^#')" = 9 ] || fail "--algo auto,ring,shared: not 9 lines"
for bad in "ring,bogus:unknown algorithm 'bogus'" "ring,ring:'ring' named twice" \
	"ring,:a comparison needs two algorithms"; do
	set +e
	msg=$("$build/yard-bench" allreduce --ranks 2 --algo "${bad%%:*}" 2>&1)
	rc=$?
	set -e
	[ "$rc" = 2 ] && echo "$msg" | grep -q "^yard-bench: --algo ${bad%%:*}: ${bad#*:}" ||
		fail "--algo ${bad%%:*}: exit $rc: $msg"
done
for bad in "allgather --algo ring,naive" "allreduce --algo ring,naive --in-place"; do
	set +e
	# shellcheck disable=SC2086 # the words are the arguments
	msg=$("$build/yard-bench" $bad --ranks 2 2>&1)
	rc=$?
	set -e
	[ "$rc" = 2 ] && echo "$msg" | grep -q "a comparison runs an out-of-place allreduce only" ||
		fail "$bad: exit $rc: $msg"
done
# numbers and sizes that are not what they say are refused by name, before any rank starts
for bad in "--ranks 4x:want a whole number from 1 to 64" "--ranks 65:want a whole number from 1 to 64" \
	"--iters abc:want a whole number from 1 to 1000000" "--warmup -1:want a whole number from 0" \
	"--min 0:want a size from 1 to 16G" "--max 1T:want a size from 1 to 16G" \
	"--factor 4x:want a size" "--transport udp:unknown (auto|shm|tcp|rdma)"; do
	set +e
	# shellcheck disable=SC2086 # the option and its value are two words
	msg=$("$build/yard-bench" allreduce ${bad%%:*} 2>&1)
	rc=$?
	set -e
	[ "$rc" = 2 ] && echo "$msg" | grep -qF "yard-bench: ${bad%%:*}: ${bad#*:}" ||
		fail "${bad%%:*}: exit $rc: $msg"
done
set +e
msg=$("$build/yard-bench" allreduce --min 1M --max 1K 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] && echo "$msg" | grep -q "^yard-bench: --max 1024 is below --min 1048576" ||
	fail "--min 1M --max 1K: exit $rc: $msg"
for r in 0 5x 1001; do
	set +e
	msg=$("$build/yard-bench" allreduce --ranks 2 --algo ring,naive --rounds $r 2>&1)
	rc=$?
	set -e
	[ "$rc" = 2 ] && echo "$msg" | grep -q "^yard-bench: --rounds $r: want 1 to 1000" ||
		fail "--rounds $r: exit $rc: $msg"
done
long=$(printf 'ring,%.0s' $(seq 60))naive
set +e
msg=$("$build/yard-bench" allreduce --ranks 2 --algo "$long" 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] && echo "$msg" | grep -q "^yard-bench: --algo: a list of 305 characters, at most 255" ||
	fail "a 305-character --algo list: exit $rc: $msg"
echo "ok: --hosts H and label lists, --in-place, --algo comparisons, checked"
