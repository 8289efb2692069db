#!/usr/bin/env bash
# train_worker_env.sh: yard-worker's environment is read whole: YARD_RANK, YARD_WORLD_SIZE and
# YARD_STEPS that are not whole numbers in range stop the rank at start (exit 2) naming the
# variable, where atoi read "abc" as 0 (YARD_STEPS=abc: a rank that trained nothing and
# exited 0; YARD_RANK=1x: rank 1). A good YARD_STEPS still overrides train.steps.
set -euo pipefail
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -x "$build/yard-worker" ] || { echo "SKIP: yard-worker is not built"; exit 77; }
work=$(mktemp -d /tmp/train_worker_env.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
cat >"$work/job.json" <<'JSON'
{"name": "env",
 "model": {"d_in": 8, "d_model": 16, "d_ff": 32, "layers": 2, "classes": 4, "seed": 1},
 "train": {"steps": 100, "batch_size": 16, "lr": 0.01, "dataset": "synthetic", "samples": 256},
 "checkpoint": {"every_steps": 0}}
JSON
# run_worker VAR=VALUE...: one rank of world 1, its output in $work/out and $work/err
run_worker() {
	rm -f "$work/rdv"
	env YARD_RANK=0 YARD_WORLD_SIZE=1 YARD_RENDEZVOUS_FILE="$work/rdv" \
		YARD_JOB_SPEC="$work/job.json" "$@" timeout 60 "$build/yard-worker" >"$work/out" 2>"$work/err"
}
for bad in "YARD_RANK=abc:0 to 2147483647" "YARD_RANK=1x:0 to 2147483647" \
	"YARD_WORLD_SIZE=0:1 to 2147483647" "YARD_STEPS=abc:1 to 1000000000" \
	"YARD_STEPS=0:1 to 1000000000" "YARD_STEPS=5s:1 to 1000000000"; do
	set +e
	run_worker "${bad%%:*}"
	rc=$?
	set -e
	[ "$rc" = 2 ] && grep -qF "yard-worker: ${bad%%:*}: want a whole number from ${bad#*:}" "$work/err" ||
		fail "${bad%%:*}: exit $rc: $(tail -3 "$work/err")"
done
run_worker YARD_STEPS=3 || fail "YARD_STEPS=3: $(tail -3 "$work/err")"
[ "$(grep -c '^{"step":' "$work/out")" = 3 ] || fail "YARD_STEPS=3 ran $(grep -c '^{"step":' "$work/out") steps"
echo "ok: bad YARD_RANK, YARD_WORLD_SIZE and YARD_STEPS refused by name; YARD_STEPS=3 ran 3 steps"
