# train_lib.sh: helpers for the trainer's integration tests (sourced). They run yard-run on
# this machine (real processes, the real data plane) and read its JSON metric lines.
set -euo pipefail
build=${top_builddir:-$(cd "$(dirname "$0")/../.." && pwd)}
src=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ ! -x "$build/yard-run" ] || [ ! -x "$build/yard-worker" ]; then
	echo "SKIP: yard-run / yard-worker are not built (they need libyd)"
	exit 77
fi
work=$(mktemp -d /tmp/train_it.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
# write_job NAME: a small fast job (20 steps) for layout checks
write_job() {
	python3 - "$work/$1.json" "${2:-}" <<'PY'
import json, sys
job = {"name": "it-train",
       "model": {"d_in": 16, "d_model": 32, "d_ff": 64, "layers": 8, "classes": 4, "seed": 11},
       "train": {"steps": 20, "batch_size": 32, "lr": 0.05, "optimizer": "sgd", "momentum": 0.9,
                 "clip_norm": 2.5, "bucket_mb": 0.01, "dataset": "synthetic", "data_seed": 3,
                 "samples": 512},
       "parallel": {"dp": 1, "tp": 1, "pp": 1, "schedule": "1f1b", "micro_batches": 4}}
extra = sys.argv[2]
if extra:
    for k, v in json.loads(extra).items():
        job.setdefault(k, {}).update(v)
json.dump(job, open(sys.argv[1], "w"))
PY
}
# losses FILE: the loss column of a metrics file, one per line
losses() { python3 -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for l in open(sys.argv[1]) if l.startswith("{")]' "$1"; }
# compare_losses A B FIRST LAST TOL: steps FIRST..LAST of A and B agree within relative TOL
compare_losses() {
	python3 - "$@" <<'PY'
import json, sys
def load(p):
    return {r["step"]: r["loss"] for r in map(json.loads, (l for l in open(p) if l.startswith("{")))}
a, b = load(sys.argv[1]), load(sys.argv[2])
first, last, tol = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
for s in range(first, last + 1):
    if s not in a or s not in b:
        sys.exit(f"step {s} missing ({sys.argv[1]}: {s in a}, {sys.argv[2]}: {s in b})")
    rel = abs(a[s] - b[s]) / abs(b[s])
    if rel > tol:
        sys.exit(f"step {s}: loss {a[s]!r} vs {b[s]!r} (relative {rel:.2g} > {tol})")
PY
}
