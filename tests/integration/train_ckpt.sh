#!/usr/bin/env bash
# train_ckpt.sh: checkpoints with real processes. A 2x1x2 job checkpoints every 10 steps; rank
# 3 crashes (debug hook, abort) at step 11, yard-run names it and stops the others; resuming
# gives steps 11-20 equal to the uninterrupted run, also in another layout (tp 2 x pp 2 with 2
# micro-batches: the shards are resharded). A flipped byte in one shard makes the next resume
# fail naming that shard. A checkpoint request there at the start is saved at step 1.
. "$(dirname "$0")/train_lib.sh"
write_job whole
write_job crash '{"parallel": {"dp": 2, "pp": 2}, "checkpoint": {"every_steps": 10, "keep": 2}, "debug": {"crash_rank": 3, "crash_at_step": 11}}'
write_job resume '{"checkpoint": {"every_steps": 10, "keep": 2}}'
layout="--dp 2 --pp 2"
# shellcheck disable=SC2086
"$build/yard-run" "$work/whole.json" $layout >"$work/whole" 2>"$work/whole.err" || fail "uninterrupted run: $(tail -3 "$work/whole.err")"
set +e
# shellcheck disable=SC2086
"$build/yard-run" "$work/crash.json" $layout --ckpt-dir "$work/ck" >"$work/crash" 2>"$work/crash.err"
rc=$?
set -e
[ "$rc" != 0 ] || fail "yard-run exited 0 although rank 3 crashed"
grep -q "rank 3 .*signal" "$work/crash.err" || fail "yard-run did not name rank 3: $(grep yard-run "$work/crash.err")"
[ -f "$work/ck/step-00000010/MANIFEST" ] || fail "no complete checkpoint at step 10: $(ls -R "$work/ck")"
cp -r "$work/ck" "$work/ck-relayout"
# shellcheck disable=SC2086
"$build/yard-run" "$work/resume.json" $layout --ckpt-dir "$work/ck" --resume >"$work/resumed" 2>"$work/resumed.err" ||
	fail "resume: $(tail -3 "$work/resumed.err")"
first=$(python3 -c 'import json,sys; print(min(json.loads(l)["step"] for l in open(sys.argv[1]) if l.startswith("{")))' "$work/resumed")
[ "$first" = 11 ] || fail "resumed run started at step $first, not 11"
compare_losses "$work/resumed" "$work/whole" 11 20 0 || fail "steps 11-20 after resume differ"
echo "ok: resume equals the uninterrupted run"
# the same checkpoint restored by another layout (the job planned again): dp 2 x pp 2 into
# tp 2 x pp 2 with 2 micro-batches, each tensor assembled from the old replica's shards
"$build/yard-run" "$work/resume.json" --tp 2 --pp 2 --micro-batches 2 --ckpt-dir "$work/ck-relayout" --resume >"$work/relayout" 2>"$work/relayout.err" ||
	fail "resume into tp 2 x pp 2: $(tail -3 "$work/relayout.err")"
grep -q "restoring step 10 of layout dp 2 x tp 1 x pp 2 (v 1, m 4) into dp 1 x tp 2 x pp 2 (v 1, m 2)" "$work/relayout.err" ||
	fail "the relayout was not logged: $(grep -i restor "$work/relayout.err")"
compare_losses "$work/relayout" "$work/whole" 11 20 1e-5 || fail "steps 11-20 after the relayout differ"
echo "ok: a checkpoint of dp 2 x pp 2 resumes in tp 2 x pp 2 like the uninterrupted run"
shard="$work/ck/step-00000020/rank-00002.shard"
python3 - "$shard" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(700); b = f.read(1); f.seek(700); f.write(bytes([b[0] ^ 0x40]))
PY
set +e
# shellcheck disable=SC2086
"$build/yard-run" "$work/resume.json" $layout --ckpt-dir "$work/ck" --resume --steps 25 >/dev/null 2>"$work/corrupt.err"
rc=$?
set -e
[ "$rc" != 0 ] || fail "a corrupt shard was accepted"
grep -q "rank-00002.shard: checksum mismatch" "$work/corrupt.err" || fail "corrupt shard not named: $(tail -5 "$work/corrupt.err")"
echo "ok: corrupt shard detected and named"
# a checkpoint request (the agent's YARD_CHECKPOINT_REQUEST file) that is there when the ranks
# start (the agent wrote it while they were restoring) is honoured at the first step, by every
# rank; checkpoint.every_steps 0 saves nothing else
write_job asked '{"checkpoint": {"every_steps": 0}}'
echo 7 >"$work/request"
# shellcheck disable=SC2086
YARD_CHECKPOINT_REQUEST="$work/request" "$build/yard-run" "$work/asked.json" $layout --ckpt-dir "$work/ck-asked" >/dev/null 2>"$work/asked.err" ||
	fail "asked run: $(tail -3 "$work/asked.err")"
[ "$(ls "$work/ck-asked")" = step-00000001 ] && [ -f "$work/ck-asked/step-00000001/MANIFEST" ] ||
	fail "the request did not give exactly a checkpoint at step 1: $(ls "$work/ck-asked")"
[ "$(grep -c "checkpoint request 7: the ranks save" "$work/asked.err")" = 4 ] || fail "not every rank read the request: $(grep -i request "$work/asked.err")"
echo "ok: a checkpoint request is saved at the first step by all 4 ranks"
