#!/usr/bin/env bash
# train_blas_threads.sh: a rank of the built-in trainer runs without OpenBLAS's thread pool.
# The pool starts when the library loads, before main, and its idle threads spun in
# sched_yield for about 0.35 s even after openblas_set_num_threads(1), slowing every rank's
# first steps and the node probe's first figures. yard-worker started without
# OPENBLAS_NUM_THREADS runs itself again with it set to 1 (same pid, same name); a value the
# user set stands. Skipped where yard-worker is not built or not linked with OpenBLAS.
set -euo pipefail
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
src=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
worker="$build/yard-worker"
[ -x "$worker" ] || {
	echo "SKIP: yard-worker not built"
	exit 77
}
# (not `ldd | grep -q`: under pipefail, grep's early exit fails the pipeline with SIGPIPE)
case "$(ldd "$worker")" in
*openblas*) ;;
*)
	echo "SKIP: yard-worker is not linked with OpenBLAS"
	exit 77
	;;
esac
work=$(mktemp -d /tmp/train_blas.XXXXXX)
trap 'kill "${W_PID:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
python3 - "$src/examples/hybrid.json" "$work/job.json" <<'EOF'
import json, sys
job = json.load(open(sys.argv[1]))
job["parallel"] = {"dp": 1, "tp": 1, "pp": 1, "schedule": "1f1b", "micro_batches": 1}
job["checkpoint"] = {"every_steps": 0, "keep": 1, "store": "dir:/nonexistent"}
json.dump(job, open(sys.argv[2], "w"))
EOF

# one rank (world 1) with the given OPENBLAS_NUM_THREADS ("" for unset); once it has reported
# its first step, checks its name, its environment and, for want=1, that it has one thread
check() {
	local setting=$1 want=$2 line
	rm -f "$work/rdv"
	if [ -z "$setting" ]; then
		coproc W { exec env -u OPENBLAS_NUM_THREADS YARD_STEPS=100000 YARD_RANK=0 \
			YARD_WORLD_SIZE=1 YARD_RENDEZVOUS_FILE="$work/rdv" YARD_JOB_SPEC="$work/job.json" \
			"$worker" 2>"$work/err"; }
	else
		coproc W { exec env OPENBLAS_NUM_THREADS="$setting" YARD_STEPS=100000 YARD_RANK=0 \
			YARD_WORLD_SIZE=1 YARD_RENDEZVOUS_FILE="$work/rdv" YARD_JOB_SPEC="$work/job.json" \
			"$worker" 2>"$work/err"; }
	fi
	read -r -t 20 -u "${W[0]}" line || fail "no step from the rank within 20 s: $(cat "$work/err")"
	case $line in '{"step":1,'*) ;; *) fail "first line is not step 1: $line" ;; esac
	[ "$(cat "/proc/$W_PID/comm")" = yard-worker ] ||
		fail "the rank's process is called $(cat "/proc/$W_PID/comm"), not yard-worker"
	tr '\0' '\n' <"/proc/$W_PID/environ" | grep -qx "OPENBLAS_NUM_THREADS=$want" ||
		fail "OPENBLAS_NUM_THREADS=${setting:-(unset)}: the rank runs without OPENBLAS_NUM_THREADS=$want"
	local threads
	threads=$(ls "/proc/$W_PID/task" | wc -l)
	if [ "$want" = 1 ] && [ "$threads" != 1 ]; then
		fail "OPENBLAS_NUM_THREADS=${setting:-(unset)}: the rank has $threads threads, want 1"
	fi
	kill "$W_PID"
	wait "$W_PID" 2>/dev/null || true
	echo "ok: OPENBLAS_NUM_THREADS=${setting:-(unset)}: the rank runs as yard-worker with $want, $threads thread(s)"
}

check "" 1
check 1 1
check 2 2 # the user's choice stands
"$worker" --version | grep -q . || fail "yard-worker --version printed nothing"
