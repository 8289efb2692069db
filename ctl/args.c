/* args.c: yardctl's command-line grammar (args.h). One table lists every command with its
 * operands and the options it takes, so the usage text, the parser and the checks agree. */
#include "ctl/args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/addr.h"
#include "common/common.h"

enum opt_flag {
	OPT_SPARE = 1 << 0,
	OPT_STATE = 1 << 1,
	OPT_TIMEOUT = 1 << 2,
	OPT_JOB = 1 << 3,
	OPT_AFTER = 1 << 4,
	OPT_LIMIT = 1 << 5,
	OPT_ROLE = 1 << 6,
	OPT_VERSION = 1 << 7,
	OPT_COMPONENT = 1 << 8,
	OPT_NOTES = 1 << 9,
	OPT_ADVISORY = 1 << 10,
	OPT_TITLE = 1 << 11,
	OPT_SEVERITY = 1 << 12,
	OPT_CVE = 1 << 13,
	OPT_TEXT = 1 << 14,
	OPT_TEXT_FILE = 1 << 15,
	OPT_EMBARGO_DAYS = 1 << 16,
	OPT_VISIBLE_TO = 1 << 17,
	OPT_READS = 1 << 18,
	OPT_RANK = 1 << 19,
	OPT_TAIL = 1 << 20,
	OPT_FOLLOW = 1 << 21,
	OPT_BUILD = 1 << 22,
	OPT_WAVES = 1 << 23,
	OPT_SOAK = 1 << 24,
	OPT_SELECTOR = 1 << 25,
	OPT_GATE_TIMEOUT = 1 << 26,
	OPT_FAILURE_BUDGET = 1 << 27,
	OPT_POLICY = 1 << 28,
	OPT_REGRESSION = 1 << 29,
	OPT_WATCH = 1 << 30,
};
/* the last bit is past an int enumerator's: an unsigned constant */
#define OPT_TTL (1u << 31)
#define OPT_LAST OPT_TTL

#define TOKEN_TTL_MAX_S 315360000.0 /* 3650 days: the controllers' bound (FSM_TOKEN_TTL_MAX_S) */

struct command_def {
	enum ctl_command command;
	const char *group, *verb; /* verb NULL: the group is the whole command ("events") */
	int min_operands, max_operands;
	unsigned options;  /* OPT_* it accepts */
	unsigned required; /* OPT_* it needs */
};

static const struct command_def commands[] = {
    {CTL_CLUSTER_STATUS, "cluster", "status", 0, 0, 0, 0},
    {CTL_CLUSTER_MEMBERS, "cluster", "members", 0, 0, 0, 0},
    {CTL_CLUSTER_ADD, "cluster", "add", 3, 3, OPT_SPARE, 0},
    {CTL_CLUSTER_REMOVE, "cluster", "remove", 1, 1, 0, 0},
    {CTL_CLUSTER_TRANSFER, "cluster", "transfer", 0, 1, 0, 0},
    {CTL_CLUSTER_BACKUP, "cluster", "backup", 1, 1, 0, 0},
    {CTL_JOB_SUBMIT, "job", "submit", 1, 1, 0, 0},
    {CTL_JOB_LIST, "job", "list", 0, 0, OPT_STATE | OPT_LIMIT, 0},
    {CTL_JOB_SHOW, "job", "show", 1, 1, 0, 0},
    {CTL_JOB_CANCEL, "job", "cancel", 1, 1, 0, 0},
    {CTL_JOB_CHECKPOINT, "job", "checkpoint", 1, 1, OPT_TIMEOUT, 0},
    {CTL_JOB_DELETE, "job", "delete", 1, 1, 0, 0},
    {CTL_JOB_WAIT, "job", "wait", 1, 1, OPT_TIMEOUT, 0},
    {CTL_JOB_WATCH, "job", "watch", 1, 1, OPT_TIMEOUT, 0},
    {CTL_EVENTS_VERIFY, "events", "verify", 0, 0, 0, 0}, /* before "events" alone */
    {CTL_JOB_LOGS, "job", "logs", 1, 1, OPT_RANK | OPT_TAIL | OPT_FOLLOW, 0},
    {CTL_JOB_TIMELINE, "job", "timeline", 1, 1, 0, 0},
    {CTL_NODE_LIST, "node", "list", 0, 0, 0, 0},
    {CTL_NODE_SHOW, "node", "show", 1, 1, 0, 0},
    {CTL_NODE_CORDON, "node", "cordon", 1, 1, 0, 0},
    {CTL_NODE_UNCORDON, "node", "uncordon", 1, 1, 0, 0},
    {CTL_NODE_DRAIN, "node", "drain", 1, 1, 0, 0},
    {CTL_NODE_PROBE, "node", "probe", 1, 1, 0, 0},
    {CTL_EVENTS, "events", NULL, 0, 0, OPT_JOB | OPT_AFTER | OPT_LIMIT | OPT_TAIL | OPT_FOLLOW, 0},
    {CTL_TOKEN_CREATE, "token", "create", 1, 1, OPT_ROLE | OPT_TTL, OPT_ROLE},
    {CTL_TOKEN_LIST, "token", "list", 0, 0, 0, 0},
    {CTL_TOKEN_REVOKE, "token", "revoke", 1, 1, 0, 0},
    {CTL_BUILD_UPLOAD, "build", "upload", 1, 1,
     OPT_VERSION | OPT_COMPONENT | OPT_NOTES | OPT_ADVISORY, OPT_VERSION},
    {CTL_BUILD_LIST, "build", "list", 0, 0, 0, 0},
    {CTL_BUILD_SHOW, "build", "show", 1, 1, 0, 0},
    {CTL_BUILD_DOWNLOAD, "build", "download", 1, 1, 0, 0},
    {CTL_BUILD_DELETE, "build", "delete", 1, 1, 0, 0},
    {CTL_ADVISORY_CREATE, "advisory", "create", 0, 0,
     OPT_TITLE | OPT_SEVERITY | OPT_CVE | OPT_TEXT | OPT_TEXT_FILE | OPT_EMBARGO_DAYS |
         OPT_VISIBLE_TO,
     OPT_TITLE | OPT_SEVERITY},
    {CTL_ADVISORY_LIST, "advisory", "list", 0, 0, 0, 0},
    {CTL_ADVISORY_SHOW, "advisory", "show", 1, 1, 0, 0},
    {CTL_ADVISORY_EMBARGO, "advisory", "embargo", 1, 1, OPT_EMBARGO_DAYS, OPT_EMBARGO_DAYS},
    {CTL_ADVISORY_SHARE, "advisory", "share", 1, 1, OPT_VISIBLE_TO, OPT_VISIBLE_TO},
    {CTL_ADVISORY_PUBLISH, "advisory", "publish", 1, 1, 0, 0},
    {CTL_AUDIT, "audit", NULL, 0, 0, OPT_AFTER | OPT_LIMIT | OPT_READS, 0},
    {CTL_ROLLOUT_START, "rollout", "start", 0, 0,
     OPT_BUILD | OPT_WAVES | OPT_SOAK | OPT_SELECTOR | OPT_GATE_TIMEOUT | OPT_FAILURE_BUDGET |
         OPT_POLICY | OPT_REGRESSION,
     OPT_BUILD},
    {CTL_ROLLOUT_STATUS, "rollout", "status", 1, 1, OPT_WATCH | OPT_TIMEOUT, 0},
    {CTL_ROLLOUT_LIST, "rollout", "list", 0, 0, 0, 0},
    {CTL_ROLLOUT_PAUSE, "rollout", "pause", 1, 1, 0, 0},
    {CTL_ROLLOUT_RESUME, "rollout", "resume", 1, 1, 0, 0},
    {CTL_ROLLOUT_ABORT, "rollout", "abort", 1, 1, 0, 0},
    {CTL_ROLLOUT_ROLLBACK, "rollout", "rollback", 1, 1, 0, 0},
    {CTL_PLAN, "plan", NULL, 1, 1, OPT_LIMIT, 0},
};

struct option_def {
	const char *long_name;
	char short_name;
	unsigned flag; /* 0: global */
	int takes_value;
};

static const struct option_def options[] = {
    {"endpoints", 0, 0, 1},
    {"token", 0, 0, 1},
    {"cacert", 0, 0, 1},
    {"cert", 0, 0, 1},
    {"key", 0, 0, 1},
    {"output", 'o', 0, 1},
    {"retries", 0, 0, 1},
    {"verbose", 'v', 0, 0},
    {"help", 'h', 0, 0},
    {"spare", 0, OPT_SPARE, 0},
    {"state", 0, OPT_STATE, 1},
    {"timeout", 0, OPT_TIMEOUT, 1},
    {"job", 0, OPT_JOB, 1},
    {"after", 0, OPT_AFTER, 1},
    {"limit", 0, OPT_LIMIT, 1},
    {"role", 0, OPT_ROLE, 1},
    {"ttl", 0, OPT_TTL, 1},
    {"version", 0, OPT_VERSION, 1},
    {"component", 0, OPT_COMPONENT, 1},
    {"notes", 0, OPT_NOTES, 1},
    {"advisory", 0, OPT_ADVISORY, 1},
    {"title", 0, OPT_TITLE, 1},
    {"severity", 0, OPT_SEVERITY, 1},
    {"cve", 0, OPT_CVE, 1},
    {"text", 0, OPT_TEXT, 1},
    {"text-file", 0, OPT_TEXT_FILE, 1},
    {"embargo-days", 0, OPT_EMBARGO_DAYS, 1},
    {"visible-to", 0, OPT_VISIBLE_TO, 1},
    {"reads", 0, OPT_READS, 0},
    {"rank", 0, OPT_RANK, 1},
    {"tail", 0, OPT_TAIL, 1},
    {"follow", 'f', OPT_FOLLOW, 0},
    {"build", 0, OPT_BUILD, 1},
    {"waves", 0, OPT_WAVES, 1},
    {"soak", 0, OPT_SOAK, 1},
    {"selector", 0, OPT_SELECTOR, 1},
    {"gate-timeout", 0, OPT_GATE_TIMEOUT, 1},
    {"failure-budget", 0, OPT_FAILURE_BUDGET, 1},
    {"policy", 0, OPT_POLICY, 1},
    {"step-time-regression", 0, OPT_REGRESSION, 1},
    {"watch", 'w', OPT_WATCH, 0},
};

static const char *const job_states[] = {"pending", "running",   "restarting", "succeeded",
                                         "failed",  "cancelled", NULL};
static const char *const roles[] = {"admin", "operator", "user", "security", "agent", NULL};
static const char *const components[] = {"agent", "worker", NULL};
static const char *const severities[] = {"low", "medium", "high", "critical", NULL};

const char *ctl_usage(void)
{
	return "usage: yardctl [global flags] COMMAND [ARGS]\n"
	       "\n"
	       "commands:\n"
	       "  cluster status                         this member's view: leader, term, "
	       "members\n"
	       "  cluster members                        the member list\n"
	       "  cluster add ID RAFT_ADDR API_URL [--spare]\n"
	       "                                         add a controller (a voter unless "
	       "--spare)\n"
	       "  cluster remove ID                      remove a controller\n"
	       "  cluster transfer [ID]                  move leadership (to ID, or the leader "
	       "picks)\n"
	       "  cluster backup FILE                    the replicated state, as committed now, "
	       "into\n"
	       "                                         FILE (admin; yardd --restore FILE)\n"
	       "  job submit FILE                        check a job spec locally and submit it\n"
	       "  job list [--state S] [--limit N]       jobs (all pages), optionally of one "
	       "state\n"
	       "  job show ID                            one job with its normalized spec\n"
	       "  job cancel ID                          cancel a job\n"
	       "  job checkpoint ID [--timeout S]        the job's ranks save a checkpoint now;\n"
	       "                                         waits until it is complete (120 s)\n"
	       "  job delete ID                          delete an ended job with its "
	       "checkpoints\n"
	       "  job wait ID [--timeout S]              wait until the job ends: exit 0 if it\n"
	       "                                         succeeded, 1 if it failed, was cancelled\n"
	       "                                         or S seconds passed\n"
	       "  job watch ID [--timeout S]             like wait, with a live progress bar\n"
	       "                                         (step, loss, ETA)\n"
	       "  job logs ID [--rank R] [--tail N] [-f] what the job's ranks print (every rank,\n"
	       "                                         lines prefixed [rank R], or one rank);\n"
	       "                                         --tail: the last N lines of each rank;\n"
	       "                                         -f: follow until the job ends\n"
	       "  job timeline ID                        the job's life: queue wait, start-up,\n"
	       "                                         each interruption phase by phase, the\n"
	       "                                         share of time it made progress\n"
	       "  node list                              nodes: state, drain, devices, heartbeat\n"
	       "  node show NAME                         one node with its devices and ranks\n"
	       "  node cordon NAME                       no new ranks on the node\n"
	       "  node uncordon NAME                     allow ranks again (ends a drain)\n"
	       "  node drain NAME                        cordon, and move its running jobs to\n"
	       "                                         other nodes (their ranks save a\n"
	       "                                         checkpoint first); draining, drained\n"
	       "  node probe NAME                        measure the node's rates again (once\n"
	       "                                         no rank runs there) for the planner\n"
	       "  plan FILE [--limit N]                  rank the layouts of a job spec for this\n"
	       "                                         cluster's measured devices (best 10)\n"
	       "  events [--job ID] [--after SEQ] [--limit N | --tail N] [-f]\n"
	       "                                         the event log, oldest first (--tail:\n"
	       "                                         the newest N; -f: then follow it)\n"
	       "  events verify                          check the event log's hash chain; names\n"
	       "                                         the first broken link\n"
	       "  token create NAME --role ROLE [--ttl D] create a token (ROLE: admin, operator,\n"
	       "                                         user, security, agent); the secret is\n"
	       "                                         printed once; --ttl: it stops working\n"
	       "                                         after D (90d, 12h, 3600; at most 3650d)\n"
	       "  token list                             tokens (never their secrets)\n"
	       "  token revoke ID                        revoke a token\n"
	       "  build upload FILE --version V [--component agent|worker] [--notes TEXT]\n"
	       "                    [--advisory ID]      store a build (chunked, sha256-checked)\n"
	       "  build list | build show V              builds (redacted under embargo)\n"
	       "  build download V -o FILE               the build's bytes, sha256-checked\n"
	       "  build delete V                         drop an unfinished upload (and its "
	       "quota)\n"
	       "  advisory create --title T --severity low|medium|high|critical [--cve ID]\n"
	       "                  [--text T | --text-file F] [--embargo-days N]\n"
	       "                  [--visible-to ROLE|NAME,...]\n"
	       "                                         report an advisory (embargo <= 14 days)\n"
	       "  advisory list | advisory show ID       advisories (redacted outside the circle)\n"
	       "  advisory embargo ID --embargo-days N   start the embargo of a reported advisory\n"
	       "  advisory share ID --visible-to ROLE|NAME,...\n"
	       "                                         widen the circle that may see it\n"
	       "  advisory publish ID                    end the embargo (security role)\n"
	       "  audit [--reads] [--after SEQ] [--limit N]\n"
	       "                                         changes by principals and embargoed "
	       "reads\n"
	       "                                         (--reads: only the reads)\n"
	       "  rollout start --build V [--waves 1,10%,100%] [--soak 30s] [--selector k=v,...]\n"
	       "                [--gate-timeout 60s] [--failure-budget N] [--policy "
	       "keep|restart|next]\n"
	       "                [--step-time-regression PCT]\n"
	       "                                         move an agent or worker build onto the\n"
	       "                                         nodes in waves (cumulative\n"
	       "                                         node counts or percentages; a final 100%\n"
	       "                                         is implied)\n"
	       "  rollout status ID [-w] [--timeout S]   progress per wave and node; -w follows "
	       "it\n"
	       "                                         until it ends (exit 0 only if completed)\n"
	       "  rollout list                           rollouts, oldest first\n"
	       "  rollout pause|resume|abort|rollback ID control a rollout (rollback: every node\n"
	       "                                         it upgraded returns to its previous "
	       "build)\n"
	       "\n"
	       "global flags (before or after the command):\n"
	       "  --endpoints URL[,URL...]   controllers to ask (default: $YARD_ENDPOINTS)\n"
	       "  --token TOKEN              bearer token (default: $YARD_TOKEN)\n"
	       "  --cacert FILE              CA certificates (PEM) for https:// endpoints\n"
	       "                             (default: $YARD_CACERT, else the system's)\n"
	       "  --cert FILE --key FILE     client certificate and key (PEM) for controllers\n"
	       "                             that require one (default: $YARD_CERT, $YARD_KEY)\n"
	       "  -o, --output table|json    human tables (default) or the server's JSON\n"
	       "                             (build download: -o FILE is the file to write)\n"
	       "  --retries N                extra passes over the endpoints when none answers\n"
	       "                             (default 4, with back-off)\n"
	       "  -v, --verbose              log each request to stderr\n"
	       "  -h, --help                 this text\n"
	       "\n"
	       "exit status: 0 success, 1 error (the message names the endpoint that answered),\n"
	       "2 usage error.\n";
}

int ctl_id_valid(const char *id)
{
	size_t n = strlen(id);
	if (n < 1 || n > 64)
		return 0;
	for (const char *c = id; *c; c++)
		if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
		      (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-'))
			return 0;
	return 1;
}

/* "30s", "2m", "1h", "500ms" or plain seconds ("1.5") into seconds; -1 if not a duration. */
static double parse_duration_s(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || !(v >= 0) || v > 1e7)
		return -1;
	if (*end == '\0' || strcmp(end, "s") == 0)
		return v;
	if (strcmp(end, "ms") == 0)
		return v / 1000;
	if (strcmp(end, "m") == 0)
		return v * 60;
	if (strcmp(end, "h") == 0)
		return v * 3600;
	if (strcmp(end, "d") == 0)
		return v * 86400;
	return -1;
}

static int parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

static int in_list(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(s, *list) == 0)
			return 1;
	return 0;
}

static const struct option_def *find_option(const char *arg, const char **inline_value)
{
	*inline_value = NULL;
	if (arg[1] != '-') { /* -o json, -v, -h */
		if (arg[2] != '\0')
			return NULL;
		for (size_t i = 0; i < YARD_ARRAY_LEN(options); i++)
			if (options[i].short_name == arg[1])
				return &options[i];
		return NULL;
	}
	const char *name = arg + 2, *eq = strchr(name, '=');
	size_t len = eq ? (size_t)(eq - name) : strlen(name);
	for (size_t i = 0; i < YARD_ARRAY_LEN(options); i++)
		if (strlen(options[i].long_name) == len &&
		    strncmp(options[i].long_name, name, len) == 0) {
			if (eq)
				*inline_value = eq + 1;
			return &options[i];
		}
	return NULL;
}

/* ", did you mean X?" when word is a near miss of one of names (NULL-terminated), else "";
 * prefix goes before the name ("--" for options). */
static const char *did_you_mean(char *buf, size_t len, const char *word, const char *prefix,
                                const char *const *names)
{
	const char *near = yard_near_miss(word, names);
	if (near == NULL)
		return "";
	snprintf(buf, len, " (did you mean %s%s?)", prefix, near);
	return buf;
}

/* The names the options, commands or a group's verbs go by, for did_you_mean. */
static void option_names(const char **out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < YARD_ARRAY_LEN(options) && n + 1 < cap; i++)
		out[n++] = options[i].long_name;
	out[n] = NULL;
}

static void command_names(const char **out, size_t cap, const char *group)
{
	size_t n = 0;
	for (size_t i = 0; i < YARD_ARRAY_LEN(commands) && n + 1 < cap; i++) {
		const char *name = group == NULL ? commands[i].group : commands[i].verb;
		if ((group != NULL && strcmp(commands[i].group, group) != 0) || name == NULL)
			continue;
		size_t k = 0;
		while (k < n && strcmp(out[k], name) != 0)
			k++;
		if (k == n)
			out[n++] = name;
	}
	out[n] = NULL;
}

const char *ctl_args_command_word(int argc, char **argv)
{
	const char *value;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (strcmp(arg, "--") == 0)
			return i + 1 < argc ? argv[i + 1] : NULL;
		if (arg[0] != '-' || arg[1] == '\0')
			return arg;
		const struct option_def *o = find_option(arg, &value);
		if (o != NULL && o->takes_value && value == NULL)
			i++; /* its value, not a word */
	}
	return NULL;
}

int ctl_group_known(const char *word)
{
	for (size_t i = 0; word != NULL && i < YARD_ARRAY_LEN(commands); i++)
		if (strcmp(commands[i].group, word) == 0)
			return 1;
	return 0;
}

/* The line after line in a text of lines that end in '\n'. */
static const char *next_line(const char *line)
{
	const char *end = line + strcspn(line, "\n");
	return *end == '\n' ? end + 1 : end;
}

/* Which section of the usage text line opens or continues: 1 the commands (from
 * "commands:" to the blank line after them), 2 the global flags, 0 anything else. */
static int usage_section(const char *line, int section)
{
	if (strncmp(line, "commands:", 9) == 0)
		return 1;
	if (strncmp(line, "global flags", 12) == 0)
		return 2;
	return section == 1 && line[0] == '\n' ? 0 : section;
}

/* The group of a usage entry line ("  job show ID ..."): its first word, as *word with its
 * length; 0 for a line that is not an entry's first (the header, a continuation). */
static int entry_group(const char *line, const char **word, size_t *wlen)
{
	if (line[0] != ' ' || line[1] != ' ' || line[2] == ' ' || line[2] == '\n' ||
	    line[2] == '\0')
		return 0;
	*word = line + 2;
	*wlen = strcspn(*word, " \n");
	return 1;
}

/* "commands: cluster, job, ...": each group once, in the order of the usage text. */
static void usage_groups(FILE *f, const char *text)
{
	const char *listed[32], *word;
	size_t listed_len[32], wlen;
	int count = 0, section = 0;
	fputs("commands:", f);
	for (const char *line = text; *line != '\0'; line = next_line(line)) {
		section = usage_section(line, section);
		if (section != 1 || !entry_group(line, &word, &wlen))
			continue;
		int k = 0;
		while (k < count && (listed_len[k] != wlen || strncmp(listed[k], word, wlen) != 0))
			k++;
		if (k < count || count == (int)YARD_ARRAY_LEN(listed))
			continue;
		listed[count] = word;
		listed_len[count] = wlen;
		fprintf(f, "%s %.*s", count++ ? "," : "", (int)wlen, word);
	}
	fputs("\n\n", f);
}

void ctl_usage_part(FILE *f, const char *group)
{
	const char *text = ctl_usage(), *word;
	size_t wlen;
	int section = 0, taking = 0;
	if (group == NULL)
		usage_groups(f, text);
	else
		fputs("usage:\n", f);
	for (const char *line = text, *next; *line != '\0'; line = next) {
		next = next_line(line);
		section = usage_section(line, section);
		/* an entry starts with two spaces and its group; deeper lines continue it */
		if (section == 1 && entry_group(line, &word, &wlen))
			taking = group != NULL && wlen == strlen(group) &&
			         strncmp(word, group, wlen) == 0;
		if ((group == NULL && section == 2) || (group != NULL && section == 1 && taking))
			fwrite(line, 1, (size_t)(next - line), f);
	}
	if (group != NULL)
		fputs("\nyardctl --help lists every command and the global flags.\n", f);
}

/* Applies one option with its value; flag checks against the command happen later. */
static int apply_option(const struct option_def *o, const char *value, struct ctl_args *a,
                        struct yard_err *err)
{
	int64_t n;
	if (strcmp(o->long_name, "endpoints") == 0)
		a->endpoints = value;
	else if (strcmp(o->long_name, "token") == 0)
		a->token = value;
	else if (strcmp(o->long_name, "cacert") == 0)
		a->cacert = value;
	else if (strcmp(o->long_name, "cert") == 0)
		a->cert = value;
	else if (strcmp(o->long_name, "key") == 0)
		a->key = value;
	else if (strcmp(o->long_name, "output") == 0) {
		a->out_file = value; /* table|json or, for build download, a file: see below */
	} else if (strcmp(o->long_name, "retries") == 0) {
		if (parse_i64(value, 0, 100, &n) != 0)
			return yard_err_set(err, YARD_EINVAL, "--retries: \"%s\" is not in 0..100",
			                    value);
		a->retries = (int)n;
	} else if (strcmp(o->long_name, "verbose") == 0)
		a->verbose = 1;
	else if (strcmp(o->long_name, "spare") == 0)
		a->spare = 1;
	else if (strcmp(o->long_name, "state") == 0) {
		if (!in_list(value, job_states))
			return yard_err_set(err, YARD_EINVAL,
			                    "--state: \"%s\" is not a job state (pending, running, "
			                    "restarting, succeeded, failed, cancelled)",
			                    value);
		a->state = value;
	} else if (strcmp(o->long_name, "timeout") == 0) {
		char *end;
		double t = strtod(value, &end);
		if (end == value || *end != '\0' || !(t > 0 && t <= 1e7))
			return yard_err_set(
			    err, YARD_EINVAL,
			    "--timeout: \"%s\" is not a number of seconds in (0, 1e7]", value);
		a->timeout_s = t;
	} else if (strcmp(o->long_name, "job") == 0) {
		if (!ctl_id_valid(value))
			return yard_err_set(err, YARD_EINVAL, "--job: \"%s\" is not a job id",
			                    value);
		a->job = value;
	} else if (strcmp(o->long_name, "after") == 0) {
		if (parse_i64(value, 0, INT64_MAX, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "--after: \"%s\" is not an event sequence number",
			                    value);
		a->after = n;
	} else if (strcmp(o->long_name, "limit") == 0) {
		if (parse_i64(value, 1, 1000, &n) != 0)
			return yard_err_set(err, YARD_EINVAL, "--limit: \"%s\" is not in 1..1000",
			                    value);
		a->limit = (int)n;
	} else if (strcmp(o->long_name, "version") == 0) {
		if (!ctl_id_valid(value) || strlen(value) > 63)
			return yard_err_set(err, YARD_EINVAL,
			                    "--version: \"%s\" must be 1..63 characters from "
			                    "[A-Za-z0-9._-]",
			                    value);
		a->version = value;
	} else if (strcmp(o->long_name, "component") == 0) {
		if (!in_list(value, components))
			return yard_err_set(err, YARD_EINVAL,
			                    "--component: \"%s\" is not agent or worker", value);
		a->component = value;
	} else if (strcmp(o->long_name, "notes") == 0) {
		a->notes = value;
	} else if (strcmp(o->long_name, "advisory") == 0) {
		if (!ctl_id_valid(value))
			return yard_err_set(err, YARD_EINVAL, "--advisory: \"%s\" is not an id",
			                    value);
		a->advisory = value;
	} else if (strcmp(o->long_name, "title") == 0) {
		a->title = value;
	} else if (strcmp(o->long_name, "severity") == 0) {
		if (!in_list(value, severities))
			return yard_err_set(
			    err, YARD_EINVAL,
			    "--severity: \"%s\" is not low, medium, high or critical", value);
		a->severity = value;
	} else if (strcmp(o->long_name, "cve") == 0) {
		a->cve = value;
	} else if (strcmp(o->long_name, "text") == 0) {
		a->text = value;
	} else if (strcmp(o->long_name, "text-file") == 0) {
		a->text_file = value;
	} else if (strcmp(o->long_name, "embargo-days") == 0) {
		/* the server says why a longer embargo is refused (at most 14 days) */
		if (parse_i64(value, 1, 1000, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "--embargo-days: \"%s\" is not a number of days",
			                    value);
		a->embargo_days = (int)n;
	} else if (strcmp(o->long_name, "visible-to") == 0) {
		a->visible_to = value;
	} else if (strcmp(o->long_name, "reads") == 0) {
		a->reads = 1;
	} else if (strcmp(o->long_name, "build") == 0) {
		a->build = value;
	} else if (strcmp(o->long_name, "waves") == 0) {
		a->waves = value;
	} else if (strcmp(o->long_name, "selector") == 0) {
		if (strchr(value, '=') == NULL)
			return yard_err_set(err, YARD_EINVAL,
			                    "--selector: \"%s\" is not label=value[,label=value]",
			                    value);
		a->selector = value;
	} else if (strcmp(o->long_name, "policy") == 0) {
		if (strcmp(value, "keep") != 0 && strcmp(value, "restart") != 0 &&
		    strcmp(value, "next") != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "--policy: \"%s\" is not keep, restart or next", value);
		a->policy = value;
	} else if (strcmp(o->long_name, "soak") == 0 || strcmp(o->long_name, "gate-timeout") == 0) {
		double d = parse_duration_s(value);
		if (d < 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "--%s: \"%s\" is not a duration (30s, 2m, 500ms, 1h)",
			                    o->long_name, value);
		if (strcmp(o->long_name, "soak") == 0)
			a->soak_s = d;
		else
			a->gate_timeout_s = d;
	} else if (strcmp(o->long_name, "failure-budget") == 0) {
		if (parse_i64(value, 0, 4096, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "--failure-budget: \"%s\" is not in 0..4096", value);
		a->failure_budget = (int)n;
	} else if (strcmp(o->long_name, "step-time-regression") == 0) {
		if (parse_i64(value, 1, 1000, &n) != 0)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "--step-time-regression: \"%s\" is not a percentage in 1..1000", value);
		a->step_regression_pct = (int)n;
	} else if (strcmp(o->long_name, "watch") == 0) {
		a->watch = 1;
	} else if (strcmp(o->long_name, "ttl") == 0) {
		double d = parse_duration_s(value);
		if (d < 1 || d > TOKEN_TTL_MAX_S)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "--ttl: \"%s\" is not a duration from 1s to 3650d (90d, 12h, "
			    "30m, 3600)",
			    value);
		a->ttl_s = (int64_t)d;
	} else if (strcmp(o->long_name, "role") == 0) {
		if (!in_list(value, roles))
			return yard_err_set(err, YARD_EINVAL,
			                    "--role: \"%s\" is not a role (admin, operator, user, "
			                    "security, agent)",
			                    value);
		a->role = value;
	} else if (strcmp(o->long_name, "rank") == 0) {
		if (parse_i64(value, 0, 65535, &n) != 0)
			return yard_err_set(err, YARD_EINVAL, "--rank: \"%s\" is not in 0..65535",
			                    value);
		a->rank = (int)n;
	} else if (strcmp(o->long_name, "tail") == 0) {
		if (parse_i64(value, 0, 1000000, &n) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "--tail: \"%s\" is not a line count in 0..1000000",
			                    value);
		a->tail = (int)n;
	} else if (strcmp(o->long_name, "follow") == 0)
		a->follow = 1;
	return 0;
}

/* Operand formats, checked here so a typo is a usage error, not a server round trip. */
static int check_operands(struct ctl_args *a, struct yard_err *err)
{
	int64_t id;
	const char *const *op = a->operand;
	switch (a->command) {
	case CTL_CLUSTER_ADD:
		if (yard_addr_parse(op[1], NULL, 0, NULL) != 0)
			return yard_err_set(
			    err, YARD_EINVAL,
			    "cluster add: RAFT_ADDR \"%s\" is not a.b.c.d:port (an IPv4 "
			    "address, a port 1-65535)",
			    op[1]);
		if (strncmp(op[2], "http://", 7) != 0 && strncmp(op[2], "https://", 8) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "cluster add: API_URL \"%s\" is not an http(s):// URL",
			                    op[2]);
		/* op[0] is a member id, checked below */
		__attribute__((fallthrough));
	case CTL_CLUSTER_REMOVE:
	case CTL_CLUSTER_TRANSFER:
		if (a->operand_count > 0 && parse_i64(op[0], 1, INT64_MAX, &id) != 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "%s: member ID \"%s\" is not a positive integer",
			                    a->name, op[0]);
		return 0;
	case CTL_NODE_SHOW:
	case CTL_NODE_CORDON:
	case CTL_NODE_UNCORDON:
	case CTL_NODE_DRAIN:
	case CTL_NODE_PROBE:
		if (!ctl_id_valid(op[0]))
			return yard_err_set(err, YARD_EINVAL, "%s: \"%s\" is not a node name",
			                    a->name, op[0]);
		return 0;
	case CTL_JOB_SHOW:
	case CTL_JOB_CANCEL:
	case CTL_JOB_CHECKPOINT:
	case CTL_JOB_DELETE:
	case CTL_JOB_WAIT:
	case CTL_JOB_WATCH:
	case CTL_JOB_LOGS:
	case CTL_JOB_TIMELINE:
		if (!ctl_id_valid(op[0]))
			return yard_err_set(err, YARD_EINVAL, "%s: \"%s\" is not a job id", a->name,
			                    op[0]);
		return 0;
	case CTL_BUILD_SHOW:
	case CTL_BUILD_DOWNLOAD:
	case CTL_BUILD_DELETE:
	case CTL_ADVISORY_SHOW:
	case CTL_ADVISORY_EMBARGO:
	case CTL_ADVISORY_SHARE:
	case CTL_ADVISORY_PUBLISH:
	case CTL_ROLLOUT_STATUS:
	case CTL_ROLLOUT_PAUSE:
	case CTL_ROLLOUT_RESUME:
	case CTL_ROLLOUT_ABORT:
	case CTL_ROLLOUT_ROLLBACK:
		if (!ctl_id_valid(op[0]))
			return yard_err_set(err, YARD_EINVAL, "%s: \"%s\" is not a valid id",
			                    a->name, op[0]);
		return 0;
	case CTL_EVENTS:
		if (a->tail == 0 || a->tail > 1000)
			return yard_err_set(err, YARD_EINVAL,
			                    "events: --tail %d is not an event count in 1..1000",
			                    a->tail);
		if (a->tail > 0 && a->limit > 0)
			return yard_err_set(err, YARD_EINVAL,
			                    "events: --tail and --limit: give one (--tail N: the "
			                    "newest N events)");
		return 0;
	case CTL_ADVISORY_CREATE:
		if (a->text != NULL && a->text_file != NULL)
			return yard_err_set(err, YARD_EINVAL,
			                    "%s: give --text or --text-file, not both", a->name);
		if (a->text == NULL && a->text_file == NULL)
			return yard_err_set(err, YARD_EINVAL, "%s: needs --text or --text-file",
			                    a->name);
		return 0;
	case CTL_TOKEN_REVOKE:
		if (!ctl_id_valid(op[0]))
			return yard_err_set(err, YARD_EINVAL, "%s: \"%s\" is not a token id",
			                    a->name, op[0]);
		return 0;
	case CTL_TOKEN_CREATE:
		if (!ctl_id_valid(op[0]))
			return yard_err_set(err, YARD_EINVAL,
			                    "%s: NAME \"%s\" must be 1..64 characters from "
			                    "[A-Za-z0-9._-]",
			                    a->name, op[0]);
		return 0;
	default:
		return 0;
	}
}

static const char *option_name(unsigned flag)
{
	for (size_t i = 0; i < YARD_ARRAY_LEN(options); i++)
		if (options[i].flag == flag)
			return options[i].long_name;
	return "?";
}

int ctl_args_parse(int argc, char **argv, struct ctl_args *a, struct yard_err *err)
{
	const char *words[CTL_OPERANDS_MAX + 3];
	int nwords = 0, only_operands = 0, help = 0;
	unsigned seen = 0;

	memset(a, 0, sizeof *a);
	a->retries = -1;
	a->soak_s = -1;
	a->gate_timeout_s = -1;
	a->failure_budget = -1;
	a->step_regression_pct = -1;
	a->after = -1;
	a->rank = -1;
	a->tail = -1;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *value;
		if (!only_operands && strcmp(arg, "--") == 0) {
			only_operands = 1;
			continue;
		}
		if (!only_operands && arg[0] == '-' && arg[1] != '\0') {
			const struct option_def *o = find_option(arg, &value);
			int rc;
			if (o == NULL) {
				const char *names[64];
				char hint[96], name[64];
				option_names(names, YARD_ARRAY_LEN(names));
				/* --stat=running: the name without its value */
				snprintf(name, sizeof name, "%.*s", (int)strcspn(arg + 2, "="),
				         arg + 2);
				return yard_err_set(err, YARD_EINVAL, "unknown option %s%s", arg,
				                    arg[1] == '-' ? did_you_mean(hint, sizeof hint,
				                                                 name, "--", names)
				                                  : "");
			}
			if (o->takes_value && value == NULL) {
				if (i + 1 >= argc)
					return yard_err_set(err, YARD_EINVAL, "--%s needs a value",
					                    o->long_name);
				value = argv[++i];
			} else if (!o->takes_value && value != NULL) {
				return yard_err_set(err, YARD_EINVAL, "--%s takes no value",
				                    o->long_name);
			}
			if (strcmp(o->long_name, "help") == 0)
				help = 1;
			else if ((rc = apply_option(o, value, a, err)) != 0)
				return rc;
			seen |= o->flag;
			continue;
		}
		if (nwords == (int)YARD_ARRAY_LEN(words))
			return yard_err_set(err, YARD_EINVAL, "too many arguments (\"%s\")", arg);
		words[nwords++] = arg;
	}
	if (help || (nwords > 0 && strcmp(words[0], "help") == 0)) {
		a->command = CTL_HELP;
		snprintf(a->name, sizeof a->name, "help");
		return 0;
	}
	if (nwords == 0)
		return yard_err_set(err, YARD_EINVAL, "no command given");

	const struct command_def *def = NULL;
	int group_known = 0;
	for (size_t i = 0; i < YARD_ARRAY_LEN(commands); i++) {
		const struct command_def *d = &commands[i];
		if (strcmp(d->group, words[0]) != 0)
			continue;
		group_known = 1;
		if (d->verb == NULL || (nwords > 1 && strcmp(d->verb, words[1]) == 0)) {
			def = d;
			break;
		}
	}
	const char *names[64];
	char hint[96];
	if (def == NULL && !group_known) {
		command_names(names, YARD_ARRAY_LEN(names), NULL);
		return yard_err_set(err, YARD_EINVAL, "unknown command \"%s\"%s", words[0],
		                    did_you_mean(hint, sizeof hint, words[0], "", names));
	}
	if (def == NULL && nwords == 1)
		return yard_err_set(err, YARD_EINVAL, "%s: needs a subcommand", words[0]);
	if (def == NULL) {
		command_names(names, YARD_ARRAY_LEN(names), words[0]);
		return yard_err_set(err, YARD_EINVAL, "%s: unknown subcommand \"%s\"%s", words[0],
		                    words[1], did_you_mean(hint, sizeof hint, words[1], "", names));
	}
	const char *name = a->name;
	snprintf(a->name, sizeof a->name, "%s%s%s", def->group, def->verb ? " " : "",
	         def->verb ? def->verb : "");
	a->command = def->command;

	int first = def->verb ? 2 : 1;
	a->operand_count = nwords - first;
	if (a->operand_count < def->min_operands)
		return yard_err_set(err, YARD_EINVAL, "%s: missing arguments", name);
	if (a->operand_count > def->max_operands)
		return yard_err_set(err, YARD_EINVAL, "%s: unexpected argument \"%s\"", name,
		                    words[first + def->max_operands]);
	for (int i = 0; i < a->operand_count; i++)
		a->operand[i] = words[first + i];
	/* -o is the output format, except for build download where it names the file */
	if (a->command == CTL_BUILD_DOWNLOAD) {
		if (a->out_file == NULL)
			return yard_err_set(err, YARD_EINVAL, "%s: needs -o FILE", name);
	} else if (a->out_file != NULL) {
		if (strcmp(a->out_file, "json") == 0)
			a->output = CTL_OUTPUT_JSON;
		else if (strcmp(a->out_file, "table") == 0)
			a->output = CTL_OUTPUT_TABLE;
		else
			return yard_err_set(err, YARD_EINVAL,
			                    "--output: \"%s\" is not \"table\" or \"json\"",
			                    a->out_file);
		a->out_file = NULL;
	}
	for (unsigned f = 1; f != 0 && f <= OPT_LAST; f <<= 1) {
		if ((seen & f) && !(def->options & f))
			return yard_err_set(err, YARD_EINVAL, "%s: does not take --%s", name,
			                    option_name(f));
		if ((def->required & f) && !(seen & f))
			return yard_err_set(err, YARD_EINVAL, "%s: needs --%s", name,
			                    option_name(f));
	}
	return check_operands(a, err);
}
