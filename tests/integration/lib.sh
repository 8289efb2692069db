# lib.sh: helpers for the controller integration tests: start/stop yardd members on
# 127.0.0.1 with per-test ports derived from the shell's pid, bounded polling, curl calls.
# Sourced by tests/integration/test_*.sh; each test gets its own temp dir and cleans up.
set -u

YARDD=${YARDD:-yardd}
# a leader applies its own commands from the objects it printed them from; here it also
# parses each and aborts if the two differ (jobs/fsm.h, fsm_command_encode_own)
export YARD_FSM_VERIFY_OWN=1
T=$(mktemp -d "${TMPDIR:-/tmp}/yard-it.XXXXXX")
# python3 found through a version manager's shim (pyenv's is a bash script: ~0.4 s a call on
# a loaded 2-core machine) made the tests' JSON reads slow enough to lose races with the jobs
# they watch: the interpreter itself goes first on PATH
if py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -x "$py" ]; then
	mkdir -p "$T/bin" && ln -sf "$py" "$T/bin/python3" && PATH="$T/bin:$PATH"
fi
# 100 ports per test: one of 127 slots over 20000-32699, below the kernel's ephemeral range
# (32768-60999), where outgoing connections take ports, and above 10000-19999, which
# tests/integration/yardctl_cluster.sh uses. +1..+9: raft, +21..+29: API, +39..+99: the
# agents' probe and rank ports (12 per agent, see start_agent). A slot is claimed with an
# atomic mkdir and released by cleanup, so tests running at the same time never share one
# (two pids equal modulo 127 did); a slot whose test died is taken over.
PORT_SLOTS=${TMPDIR:-/tmp}/yard-port-slots
claim_port_slot() {
	local i n owner
	mkdir -p "$PORT_SLOTS"
	for i in $(seq 0 126); do
		n=$((($$ + i) % 127))
		if ! mkdir "$PORT_SLOTS/$n" 2>/dev/null; then
			owner=$(cat "$PORT_SLOTS/$n/pid" 2>/dev/null || true)
			[ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null || continue
			rm -rf "$PORT_SLOTS/$n"
			mkdir "$PORT_SLOTS/$n" 2>/dev/null || continue
		fi
		echo $$ >"$PORT_SLOTS/$n/pid"
		PORT_SLOT=$n
		return 0
	done
	PORT_SLOT=$(($$ % 127)) # every slot busy: share one, as before
}
release_port_slot() {
	[ "$(cat "$PORT_SLOTS/$PORT_SLOT/pid" 2>/dev/null)" = $$ ] && rm -rf "$PORT_SLOTS/$PORT_SLOT"
	return 0
}
claim_port_slot
PORT_BASE=$((20000 + PORT_SLOT * 100))
TOKEN=admin-token-for-tests-$$
echo "$TOKEN" > "$T/admin.token"
AUTH="Authorization: Bearer $TOKEN"
declare -A PID

fail() {
	echo "FAIL: $*" >&2
	for f in "$T"/log.*; do [ -f "$f" ] && { echo "== $f" >&2; tail -n 30 "$f" >&2; }; done
	# the errors of ranks that agents ran (their logs are in the agents' data dirs)
	for f in "$T"/agent-*/jobs/*/rank-*.log "$T"/dev/agent/jobs/*/rank-*.log; do
		[ -f "$f" ] && grep -q "ERROR\|FATAL" "$f" && { echo "== $f" >&2; grep "ERROR\|FATAL" "$f" | tail -n 5 >&2; }
	done
	exit 1
}
note() { echo "# $*"; }

cleanup() {
	for id in "${!PID[@]}"; do kill -9 "${PID[$id]}" 2>/dev/null; done
	wait 2>/dev/null
	# YARD_IT_KEEP=1 keeps the test's directory (logs, data dirs) for a look afterwards
	if [ -n "${YARD_IT_KEEP:-}" ]; then echo "# kept $T" >&2; else rm -rf "$T"; fi
	release_port_slot
}
trap cleanup EXIT

raft_port() { echo $((PORT_BASE + $1)); }
api_port() { echo $((PORT_BASE + 20 + $1)); }
api() { echo "http://127.0.0.1:$(api_port "$1")"; }
members_arg() { # members_arg 1 2 3
	local out="" id
	for id in "$@"; do out="$out${out:+,}$id=127.0.0.1:$(raft_port "$id")@$(api "$id")"; done
	echo "$out"
}

# start_member ID MEMBERS [extra yardd args...]
start_member() {
	local id=$1 members=$2
	shift 2
	"$YARDD" --id "$id" --data-dir "$T/d$id" --raft-address "127.0.0.1:$(raft_port "$id")" \
		--api-address "127.0.0.1:$(api_port "$id")" --members "$members" \
		--admin-token-file "$T/admin.token" "$@" >>"$T/log.$id" 2>&1 &
	PID[$id]=$!
}

kill_member() { kill -9 "${PID[$1]}" 2>/dev/null; wait "${PID[$1]}" 2>/dev/null; unset "PID[$1]"; }

# wait_until TIMEOUT_S CMD...: polls CMD every 50 ms.
wait_until() {
	local deadline=$(($(date +%s%N) / 1000000 + $1 * 1000))
	shift
	while ! "$@" >/dev/null 2>&1; do
		[ $(($(date +%s%N) / 1000000)) -lt $deadline ] || return 1
		sleep 0.05
	done
}

# wait_job_done ID JOB STATE STALL MAX: wait until job JOB is in STATE (asked of member ID);
# fail (return 1) once the step the job reported has not moved for STALL s, or after MAX s in
# all. For paced training, whose speed is the machine's: a CI machine busy with other tests
# (and agents' probes) may train several times slower than usual, which a fixed deadline
# mistakes for a stuck job; a job that stopped moving still fails after STALL s.
wait_job_done() {
	local id=$1 job=$2 state=$3 stall_ms=$(($4 * 1000)) start now moved step last=
	start=$(now_ms)
	moved=$start
	while :; do
		get "$id" "/v1/jobs/$job"
		[ "$(jget "$BODY" 'd["state"]' 2>/dev/null)" = "$state" ] && return 0
		now=$(now_ms)
		step=$(jget "$BODY" 'd["step"]' 2>/dev/null)
		[ "$step" != "$last" ] && { last=$step; moved=$now; }
		if [ $((now - moved)) -ge "$stall_ms" ] || [ $((now - start)) -ge $(($5 * 1000)) ]; then
			echo "# job $job: not $state after $(((now - start) / 1000)) s, at step $step (moved $(((now - moved) / 1000)) s ago)" >&2
			return 1
		fi
		sleep 0.5
	done
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# get ID PATH: status in $CODE, body in $BODY
get() { CODE=$(curl -s -o "$T/body" -w '%{http_code}' -H "$AUTH" "$(api "$1")$2"); BODY=$(cat "$T/body"); }
# call METHOD ID PATH [BODY] [extra curl args]: follows redirects (to another member: the
# token goes along, which curl otherwise drops when the port changes); status in $CODE,
# body in $BODY
call() {
	local m=$1 id=$2 path=$3 body=${4:-}
	shift 3
	[ $# -gt 0 ] && shift
	CODE=$(curl -s -L --location-trusted --max-redirs 3 -o "$T/body" -w '%{http_code}' -X "$m" -H "$AUTH" \
		${body:+-H 'Content-Type: application/json' --data "$body"} "$@" "$(api "$id")$path")
	BODY=$(cat "$T/body")
}

is_leader() { curl -s "$(api "$1")/healthz" | grep -q '"state":"leader"'; }
# leader_of IDS...: prints the id of a member that reports itself leader and is ready
leader_of() {
	local id
	for id in "$@"; do
		if is_leader "$id" && [ "$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" "$(api "$id")/v1/jobs?limit=1")" = 200 ]; then
			echo "$id"
			return 0
		fi
	done
	return 1
}
wait_leader() { # wait_leader TIMEOUT IDS... → sets LEADER
	local deadline=$(($(now_ms) + $1 * 1000))
	shift
	while [ "$(now_ms)" -lt $deadline ]; do
		LEADER=$(leader_of "$@") && return 0
		sleep 0.02
	done
	return 1
}

digest_of() { curl -s -H "$AUTH" "$(api "$1")/v1/debug/digest" | sed -n 's/.*"digest":"\([0-9a-f]*\)".*"applied_index":\([0-9]*\).*/\1 \2/p'; }
# same_digest IDS...: every member has the same database at the same applied index
same_digest() {
	local first="" id d
	for id in "$@"; do
		d=$(digest_of "$id")
		[ -n "$d" ] || return 1
		[ -z "$first" ] && first=$d
		[ "$d" = "$first" ] || return 1
	done
}
metric() { curl -s -H "$AUTH" "$(api "$1")/metrics" | awk -v k="$2" '$1 == k { print $2 }'; }

# ---- agents and jobs (tests of scheduling and failover) ----

YARD_AGENT=${YARD_AGENT:-yard-agent}
declare -A APID APORT
AGENT_COUNT=0

# jq-less JSON access: jget JSON PYTHON_EXPR (the document is `d`), e.g. jget "$BODY" 'd["state"]'
jget() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); v=eval(sys.argv[2]); print(json.dumps(v) if isinstance(v,(dict,list)) else v)' "$1" "$2"; }

# pace_spec FILE BLOCK_MS [DEBUG_JSON]: sets the job spec's debug.block_ms (each block's
# forward sleeps BLOCK_MS, its backward twice that; results do not change), merged with any
# other debug fields, so that a test's timing does not depend on how fast this machine trains
pace_spec() {
	python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
dbg = d.setdefault("debug", {})
dbg["block_ms"] = float(sys.argv[2])
if len(sys.argv) > 3:
    dbg.update(json.loads(sys.argv[3]))
json.dump(d, open(sys.argv[1], "w"))
PY
}

# dir_ckpt_at_least DIR STEP: a job's "dir:" checkpoint directory holds a complete checkpoint
# (its MANIFEST written) at STEP or later. Tests trigger kills on this, not on the step the
# controller heard of last (heartbeats lag training).
dir_ckpt_at_least() {
	local m s
	for m in "$1"/step-*/MANIFEST; do
		[ -e "$m" ] || continue
		s=${m%/MANIFEST}; s=${s##*/step-}
		[ "$((10#$s))" -ge "$2" ] && return 0
	done
	return 1
}
# store_ckpt_at_least ID JOB STEP: the same for the controller store, asked of member ID
# (no python: each poll must be quick while ranks train)
store_ckpt_at_least() {
	local s
	get "$1" "/v1/jobs/$2/checkpoints"
	for s in $(grep -o '"step":[0-9]*,[^}]*"complete":true' <<<"$BODY" | sed 's/"step":\([0-9]*\).*/\1/'); do
		[ "$s" -ge "$3" ] && return 0
	done
	return 1
}

# make_join_token ID: an agent-role token in $JOIN
make_join_token() {
	call POST "$1" /v1/tokens '{"name":"nodes","role":"agent"}'
	[ "$CODE" = 201 ] || fail "join token: $CODE $BODY"
	JOIN=$(jget "$BODY" 'd["token"]')
}

# start_agent NAME DEVICES CONTROLLER_URLS [extra yard-agent args...]
start_agent() {
	local name=$1 devices=$2 urls=$3
	shift 3
	# every agent of a test gets its own range of rank ports (one machine plays many nodes);
	# a restarted agent keeps its range
	if [ -z "${APORT[$name]:-}" ]; then
		APORT[$name]=$((PORT_BASE + 40 + 12 * AGENT_COUNT))
		AGENT_COUNT=$((AGENT_COUNT + 1))
	fi
	"$YARD_AGENT" --controllers "$urls" --join-token "$JOIN" --data-dir "$T/agent-$name" \
		--name "$name" --devices "cpu:$devices" --port-base "${APORT[$name]}" \
		--heartbeat-ms 200 --stop-grace-ms 1000 "$@" >>"$T/log.agent-$name" 2>&1 &
	APID[$name]=$!
}
# probe_worker FILE 'SH': writes FILE, a yard-worker for --worker that, on each --probe call,
# counts it (its number in $n, kept in $T/probes), runs the shell code SH (which may exit,
# exec or print), then the real worker ($real): tests make the node probe slow, fail or lie
probe_worker() {
	local real
	real=$(command -v yard-worker)
	{
		printf '#!/bin/sh\nreal=%s\n' "'$real'"
		printf 'if [ "$1" = --probe ]; then\n'
		printf '\tn=$(($(cat "%s" 2>/dev/null || echo 0) + 1))\n\techo $n >"%s"\n' \
			"$T/probes" "$T/probes"
		printf '%s\nfi\nexec "$real" "$@"\n' "$2"
	} >"$1"
	chmod +x "$1"
}
# agent_refuses "FLAG VALUE"...: yard-agent refuses each bad value by the flag's name (exit 2)
# before it starts
agent_refuses() {
	local bad out rc
	for bad in "$@"; do
		out=$("$YARD_AGENT" --controllers http://127.0.0.1:1 --data-dir "$T/none" --name n \
			--devices cpu:1 $bad 2>&1)
		rc=$?
		[ "$rc" = 2 ] && grep -q "^yard-agent: ${bad%% *}: '${bad#* }' is not" <<<"$out" ||
			fail "$bad: exit $rc: $out"
	done
}
# kill_agent NAME: SIGKILL the agent alone (its ranks keep running)
kill_agent() { kill -9 "${APID[$1]}" 2>/dev/null; wait "${APID[$1]}" 2>/dev/null; unset "APID[$1]"; }

# submit ID SPEC_JSON: job id in $JOB
submit() {
	call POST "$1" /v1/jobs "$2"
	[ "$CODE" = 201 ] || fail "submit $2: $CODE $BODY"
	JOB=$(jget "$BODY" 'd["id"]')
}
job_field() { get "$1" "/v1/jobs/$2"; jget "$BODY" "d$3"; } # job_field ID JOB '["state"]'
job_state_is() { [ "$(job_field "$1" "$2" '["state"]')" = "$3" ]; }
node_state_is() { get "$1" "/v1/nodes/$2"; [ "$(jget "$BODY" 'd["state"]')" = "$3" ]; }
# events_of ID JOB: "type: message" lines; has_event ID JOB REGEX: one of them matches
events_of() { get "$1" "/v1/events?job=$2&limit=1000"; jget "$BODY" '"\n".join(e["type"] + ": " + e["message"] for e in d["events"])'; }
has_event() { local ev; ev=$(events_of "$1" "$2"); grep -q -- "$3" <<<"$ev"; }
# alive PID: the process exists and is not a zombie
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
# gone_within S PID: 0 once PID is gone, 1 if it still lives after S seconds (polled: it need
# not be our child). A SIGKILLed process tearing down its mappings needs CPU time to finish
# dying: on a loaded 2-core machine that took more than 2 s.
gone_within() {
	local i
	for ((i = 0; i < $1 * 50; i++)); do
		alive "$2" || return 0
		sleep 0.02
	done
	! alive "$2"
}

cleanup_agents() {
	local name f
	for name in "${!APID[@]}"; do kill -9 "${APID[$name]}" 2>/dev/null; done
	# ranks run in their own sessions: end every rank this test started (pid files)
	for f in "$T"/pids/*; do [ -f "$f" ] && kill -9 -- "-$(cat "$f")" 2>/dev/null; done
	return 0
}
trap 'cleanup_agents; cleanup' EXIT

# cleanup_upgraded_agents: for tests that upgrade agents (rollouts): a guardian (agent/
# guardian.c) could start an agent again, and a rollback gives a node's agent a new pid, so
# end the guardians first, then whatever pid each data dir names.
cleanup_upgraded_agents() {
	local f pid
	for f in "$T"/agent-*/upgrade.json; do
		[ -f "$f" ] || continue
		pid=$(jget "$(cat "$f")" 'd.get("guardian_pid", 0)')
		[ "$pid" -gt 0 ] 2>/dev/null && kill -9 "$pid" 2>/dev/null
	done
	for f in "$T"/agent-*/agent.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
	return 0
}

# write_rank_script: $T/rank.sh, the command of the test jobs (run as ["sh", "$T/rank.sh",
# MODE, ARGS...] with OUT=$T in the job's env). Every rank records its process group (the pid
# of its shim: kill -- -PGID ends the rank) and environment
# under $OUT, per job, rank and generation, then acts out MODE:
#   sleep S            sleep S seconds, exit 0
#   wait F             exit 0 once $OUT/F exists (at most 60 s): a job that lasts until the
#                      test has seen what it needs, however slowly the machine runs the test
#   crash R            rank R exits 1 in generation 1; the others (and later generations) sleep 1 s
#   fail R             rank R always exits 1
#   train N DT [H [P]] N steps of DT seconds, each reported with yard-report; rank 0 writes a
#                      checkpoint (step-NNNNNNNN/MANIFEST) every 5 steps; with YARD_RESUME=1 every
#                      rank resumes from the newest one; rank H (-1: none) hangs after step 3 in
#                      generation 1; in generation 1 every rank pauses after step P until
#                      $OUT/release exists (at most 60 s), so the job cannot end before the
#                      test has acted on it
write_rank_script() {
	mkdir -p "$T/pids" "$T/env" "$T/fds"
	cat >"$T/rank.sh" <<'SCRIPT'
out=$OUT
tag="$YARD_JOB_ID.$RANK.$YARD_GENERATION"
ls -l /proc/$$/fd/ >"$out/fds/$tag" 2>&1 # what the rank inherited
ps -o pgid= -p $$ | tr -d " " >"$out/pids/.$tag.tmp" && mv "$out/pids/.$tag.tmp" "$out/pids/$tag" # whole or absent
echo "RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT YARD_RANK=$YARD_RANK YARD_WORLD_SIZE=$YARD_WORLD_SIZE YARD_HOSTS=$YARD_HOSTS YARD_PEERS=$YARD_PEERS YARD_CKPT_DIR=$YARD_CKPT_DIR YARD_RESUME=${YARD_RESUME:-0}" >"$out/env/$tag"
case $1 in
sleep) sleep "$2" ;;
wait) i=0; while [ ! -e "$out/$2" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done ;;
crash) if [ "$YARD_GENERATION" = 1 ] && [ "$RANK" = "$2" ]; then sleep 0.3; exit 1; fi; sleep 1 ;;
fail) if [ "$RANK" = "$2" ]; then exit 1; fi; sleep 5 ;;
train)
	steps=$2 dt=$3 hang=${4:--1} hold=${5:--1} s=0
	if [ "${YARD_RESUME:-0}" = 1 ]; then
		# the newest complete checkpoint: a rank stopped between the directory and its
		# manifest leaves an incomplete newer one
		for d in $(ls -d "$YARD_CKPT_DIR"/step-* 2>/dev/null | sort -r); do
			[ -f "$d/MANIFEST" ] && { s=$(cat "$d/MANIFEST"); break; }
		done
	fi
	echo "$s" >"$out/start.$tag"
	while [ "$s" -lt "$steps" ]; do
		if [ "$YARD_GENERATION" = 1 ] && [ "$RANK" = "$hang" ] && [ "$s" -ge 3 ]; then sleep 1000; fi
		if [ "$YARD_GENERATION" = 1 ] && [ "$s" = "$hold" ]; then
			i=0
			while [ ! -e "$out/release" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
		fi
		sleep "$dt"
		s=$((s + 1))
		yard-report "$s" 0.5 || exit 3
		if [ "$RANK" = 0 ] && [ $((s % 5)) = 0 ]; then
			d=$(printf '%s/step-%08d' "$YARD_CKPT_DIR" "$s")
			mkdir -p "$d" && echo "$s" >"$d/.MANIFEST.tmp" && mv "$d/.MANIFEST.tmp" "$d/MANIFEST"
		fi
	done ;;
*) exit 2 ;;
esac
SCRIPT
}
# cmd MODE ARGS...: the "command" and "env" fields of a test job running rank.sh
cmd() {
	local args="\"sh\",\"$T/rank.sh\"" a
	for a in "$@"; do args="$args,\"$a\""; done
	echo "\"command\":[$args],\"env\":{\"OUT\":\"$T\"}"
}

# first_step FILES...: the first step the rank logs FILES report (-1: none), e.g. to check
# that a generation went on from its checkpoint rather than from step 0.
first_step() { cat "$@" 2>/dev/null | python3 -c 'import json,sys; print(min((json.loads(l)["step"] for l in sys.stdin if l.startswith("{")), default=-1))'; }

# reference_legs SPEC LAYOUT_JSON STEP [LAYOUT_JSON STEP]... LAYOUT_JSON: the reference for a
# job that changed its layout at restarts: SPEC trained by yard-run in legs, the first with the
# first layout up to its STEP, each next one resuming the previous leg's checkpoint of that step
# with its layout (relaid out as a restarted job's ranks do) up to its STEP, the last to the
# end. Without pacing. Rank 0's lines of all the legs go to $T/whole. A job that ran hundreds of
# steps in another layout (another order of sums) drifts from an uninterrupted run of the first
# layout, chaotically (1e-4 relative after 400 steps here, 1e-2 after 500), so only this
# reference stays comparable however late the restarts come. Fails the test if a leg fails.
reference_legs() {
	local spec=$1 leg=0 from=0 layout until resume
	shift
	rm -rf "$T/legs"
	mkdir -p "$T/legs"
	: >"$T/whole"
	while [ $# -gt 0 ]; do
		layout=$1
		until=${2:-0}
		shift $(($# > 1 ? 2 : 1))
		leg=$((leg + 1))
		# a checkpoint at the leg's last step (every_steps: that step), none before it
		python3 - "$spec" "$layout" "$until" "$T/legs/$leg.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["parallel"] = json.loads(sys.argv[2])
d.pop("debug", None)
until = int(sys.argv[3])
d["checkpoint"] = {"every_steps": until, "keep": 1} if until else {}
if until:
    d["train"]["steps"] = until
json.dump(d, open(sys.argv[4], "w"))
PY
		resume=""
		[ "$from" -gt 0 ] && resume=--resume
		"${build:?reference_legs: set build to the build directory}/yard-run" "$T/legs/$leg.json" \
			--ckpt-dir "$T/legs/ckpt" $resume >>"$T/whole" 2>"$T/legs/$leg.err" ||
			fail "reference leg $leg (steps $from..$until): $(tail -3 "$T/legs/$leg.err")"
		from=$until
	done
}

# losses_equal_after RANK0_LINES REFERENCE_LINES RESTORED STEPS [TOLERANCE]: every step after
# RESTORED up to STEPS has, in its last occurrence in RANK0_LINES (the restarted generation's),
# the loss of REFERENCE_LINES (a yard-run, such as reference_legs') within a relative
# TOLERANCE (default 1e-5); prints the worst.
losses_equal_after() {
	python3 - "$@" <<'PY'
import json, sys
def load(p):
    out = {}
    for line in open(p, errors="replace"):
        if line.startswith("{"):
            r = json.loads(line)
            out.setdefault(r["step"], []).append(r["loss"])
    return out
got, want = load(sys.argv[1]), load(sys.argv[2])
restored, steps = int(sys.argv[3]), int(sys.argv[4])
tol = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-5
worst = 0.0
for s in range(restored + 1, steps + 1):
    if s not in got:
        sys.exit(f"step {s} missing from rank 0's log")
    ref = want[s][0]
    rel = abs(got[s][-1] - ref) / abs(ref)  # the last run of step s: generation 2's
    worst = max(worst, rel)
    if rel > tol:
        sys.exit(f"step {s}: loss {got[s][-1]!r} vs {ref!r} in the reference (relative {rel:.3g} > {tol:g})")
print(f"# steps {restored + 1}..{steps} equal the reference run; final loss {got[steps][-1]!r} vs {want[steps][0]!r}, worst relative difference {worst:.3g}")
PY
}
