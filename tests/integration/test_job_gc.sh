#!/usr/bin/env bash
# test_job_gc.sh: the agent removes the directories a job leaves on its node (DATA_DIR/jobs/J,
# and DATA_DIR/checkpoints/J of the controller store) once the job has nothing left there
# and nothing was written under them for --job-dir-keep-s; a running rank that writes
# nothing keeps its job's directory however old its files; a symbolic link inside is
# removed, not followed; an entry that is not a job's name stays. One controller, one agent.
. "$(dirname "$0")/lib.sh"

# bad values are refused by name before the agent starts
agent_refuses "--job-dir-keep-s -1" "--job-dir-keep-s 2d" "--job-gc-interval-ms 50" \
	"--job-gc-interval-ms x"

start_member 1 "$(members_arg 1)"
wait_leader 10 1 || fail "no leader"
make_join_token 1
D=$T/agent-node-a
start_agent node-a 1 "$(api 1)" --job-dir-keep-s 2 --job-gc-interval-ms 200
wait_until 15 node_state_is 1 node-a up || fail "node-a did not register"
removed() { grep -q "removed $D/$1: job" "$T/log.agent-node-a"; }
# age_at_least PATH S: nothing under PATH was written in the last S seconds
age_at_least() { [ -z "$(find "$1" -newermt "-$2 seconds" -print -quit 2>/dev/null)" ]; }

# a job that ends at once, with the controller store (both directories)
submit 1 '{"name":"short","ranks":1,"command":["true"],"checkpoint":{"every_steps":10,"store":"controller"}}'
A=$JOB
wait_until 20 job_state_is 1 "$A" succeeded || fail "job $A did not succeed: $(job_field 1 "$A" '')"
[ -d "$D/jobs/$A" ] && [ -d "$D/checkpoints/$A" ] || fail "job $A left no directories to remove"
wait_until 15 removed "jobs/$A" || fail "jobs/$A not removed: $(ls "$D/jobs")"
wait_until 5 removed "checkpoints/$A" || fail "checkpoints/$A not removed: $(ls "$D/checkpoints")"
[ ! -e "$D/jobs/$A" ] && [ ! -e "$D/checkpoints/$A" ] || fail "a directory of $A is still there"

# a silent rank: its files grow old, its slot keeps them
submit 1 "{\"name\":\"silent\",\"ranks\":1,\"command\":[\"sh\",\"-c\",\"i=0; while [ ! -e $T/done ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done\"]}"
B=$JOB
wait_until 20 job_state_is 1 "$B" running || fail "job $B did not start"
wait_until 10 test -d "$D/jobs/$B" || fail "no directory for $B"
wait_until 15 age_at_least "$D/jobs/$B" 4 || fail "$D/jobs/$B kept being written"
# strays made after that: a pass that removes the old job directory ran after B grew old
echo outside >"$T/outside"
mkdir -p "$D/jobs/j-999998" "$D/jobs/not a job"
ln -s "$T/outside" "$D/jobs/j-999998/link"
touch -h -d '-1 hour' "$D/jobs/j-999998/link" "$D/jobs/j-999998" "$D/jobs/not a job"
wait_until 10 removed jobs/j-999998 || fail "the stray job directory was not removed"
[ -d "$D/jobs/$B" ] || fail "the running job's directory was removed"
[ "$(cat "$T/outside")" = outside ] || fail "the file a link pointed to was touched"
[ -d "$D/jobs/not a job" ] || fail "an entry that is not a job's name was removed"

touch "$T/done"
wait_until 20 job_state_is 1 "$B" succeeded || fail "job $B did not end"
wait_until 15 removed "jobs/$B" || fail "jobs/$B not removed after the job ended"
note "ended jobs' directories removed after --job-dir-keep-s; a silent running rank's kept; links not followed"
