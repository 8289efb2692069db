#!/usr/bin/env bash
# train_layouts.sh: yard-run with real processes trains the same model in every layout: the
# 20-step losses of 2x1x1, 1x2x1, 1x1x2, 1x1x4 (gpipe, 1f1b, interleaved v=2) and 2x2x2 (1f1b)
# equal the single-process losses within relative 1e-5.
. "$(dirname "$0")/train_lib.sh"
write_job job
"$build/yard-run" "$work/job.json" >"$work/ref" 2>"$work/ref.err" || fail "1x1x1: $(tail -3 "$work/ref.err")"
[ "$(losses "$work/ref" | wc -l)" = 20 ] || fail "1x1x1 printed $(losses "$work/ref" | wc -l) steps"
while read -r name args; do
	# shellcheck disable=SC2086
	"$build/yard-run" "$work/job.json" $args >"$work/$name" 2>"$work/$name.err" ||
		fail "$name: yard-run failed: $(tail -3 "$work/$name.err")"
	compare_losses "$work/$name" "$work/ref" 1 20 1e-5 || fail "$name differs from one process"
	echo "ok: $name"
done <<'LAYOUTS'
dp2 --dp 2
tp2 --tp 2
pp2 --pp 2
pp4-gpipe --pp 4 --schedule gpipe
pp4-1f1b --pp 4 --schedule 1f1b
pp4-interleaved --pp 4 --schedule interleaved --virtual-stages 2
dp2tp2pp2 --dp 2 --tp 2 --pp 2
LAYOUTS
