#!/usr/bin/env bash
# train_yardrun.sh: yard-run's process supervision, with a stand-in worker script
# ($YARD_WORKER) so it needs no data plane: overrides are validated by the spec parser and
# reach the ranks; every rank gets its environment; rank 0's stdout is streamed; a failing or
# crashing rank is named, the others are stopped, and yard-run exits non-zero.
set -euo pipefail
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
src=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d /tmp/train_yardrun.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
job="$src/examples/train_synthetic.json"

# 1. a bad override is refused naming the field
set +e
"$build/yard-run" "$job" --tp 3 >/dev/null 2>"$work/err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "--tp 3: exit $rc, want 2"
grep -q "parallel.tp" "$work/err" || fail "--tp 3: message does not name parallel.tp: $(cat "$work/err")"
"$build/yard-run" "$job" --schedule bogus >/dev/null 2>&1 && fail "--schedule bogus accepted"

# stand-in worker: MODE decides what each rank does; every rank records its pid and env
cat >"$work/worker" <<'SH'
#!/usr/bin/env bash
echo $$ >"$WORK/pid.$YARD_RANK"
env | grep '^YARD_' | sort >"$WORK/env.$YARD_RANK"
cp "$YARD_JOB_SPEC" "$WORK/job.$YARD_RANK"
case "$MODE:$YARD_RANK" in
ok:0) echo '{"step":1,"rank":0,"loss":1.5}'; exit 0 ;;
ok:*) exit 0 ;;
exit:1) sleep 0.2; exit 3 ;;
abort:2) sleep 0.2; kill -ABRT $$ ;;
*) exec sleep 30 ;;
esac
SH
chmod +x "$work/worker"
export YARD_WORKER="$work/worker" WORK="$work"

# 2. success: rank 0's line on stdout, environment per rank, the overrides in the job file
MODE=ok "$build/yard-run" "$job" --dp 1 --tp 2 --pp 2 --micro-batches 8 --steps 7 >"$work/out" 2>"$work/err" ||
	fail "all ranks succeeded but yard-run failed: $(cat "$work/err")"
grep -q '"loss":1.5' "$work/out" || fail "rank 0's metrics line not streamed: $(cat "$work/out")"
for r in 0 1 2 3; do
	[ -f "$work/env.$r" ] || fail "rank $r never started"
	grep -q "^YARD_RANK=$r$" "$work/env.$r" || fail "rank $r: wrong YARD_RANK"
	grep -q "^YARD_WORLD_SIZE=4$" "$work/env.$r" || fail "rank $r: wrong world size"
	grep -q "^YARD_RENDEZVOUS_FILE=" "$work/env.$r" || fail "rank $r: no rendezvous file"
done
[ ! -f "$work/env.4" ] || fail "a fifth rank was started for a 4-rank layout"
python3 - "$work/job.3" <<'PY' || fail "the overrides did not reach the ranks' job file"
import json, sys
job = json.load(open(sys.argv[1]))
p = job["parallel"]
assert (p["dp"], p["tp"], p["pp"], p["micro_batches"]) == (1, 2, 2, 8), p
assert job["train"]["steps"] == 7, job["train"]
PY

# 3. a rank that exits non-zero is named and the others are stopped
rm -f "$work"/pid.* "$work"/env.*
start=$(date +%s)
set +e
MODE=exit "$build/yard-run" "$job" --dp 4 --tp 1 --pp 1 >/dev/null 2>"$work/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "rank 1 failed but yard-run exited $rc"
grep -q "rank 1 (pid [0-9]*) failed with exit status 3" "$work/err" || fail "rank 1 not named: $(cat "$work/err")"
[ $(($(date +%s) - start)) -lt 20 ] || fail "the other ranks were not stopped promptly"
for f in "$work"/pid.*; do
	if kill -0 "$(cat "$f")" 2>/dev/null; then fail "rank ${f##*.} still running"; fi
done

# 4. a rank killed by a signal is named with the signal
set +e
MODE=abort "$build/yard-run" "$job" --dp 4 --tp 1 --pp 1 >/dev/null 2>"$work/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "rank 2 aborted but yard-run exited $rc"
grep -q "rank 2 (pid [0-9]*) was killed by signal 6" "$work/err" || fail "rank 2 not named: $(cat "$work/err")"
echo "ok"
