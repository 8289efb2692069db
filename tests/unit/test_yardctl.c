/* test_yardctl.c: the parts of yardctl that need no server: the command-line grammar,
 * endpoint lists, leader-redirect URLs, request ids, error descriptions and tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/common.h"
#include "ctl/args.h"
#include "ctl/http.h"
#include "ctl/output.h"

/* Parses a command line given as one string of space-separated words. */
static int parse_line(const char *line, struct ctl_args *a, struct yard_err *err)
{
	static char buf[1024];
	static char *argv[64];
	int argc = 0;
	snprintf(buf, sizeof buf, "%s", line);
	argv[argc++] = "yardctl";
	for (char *tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " "))
		argv[argc++] = tok;
	argv[argc] = NULL;
	return ctl_args_parse(argc, argv, a, err);
}

static void expect_ok(const char *line, struct ctl_args *a)
{
	struct yard_err err = {0};
	if (parse_line(line, a, &err) != 0)
		fail_msg("\"%s\" refused: %s", line, err.msg);
}

static void expect_usage_error(const char *line, const char *needle)
{
	struct ctl_args a;
	struct yard_err err = {0};
	if (parse_line(line, &a, &err) != YARD_EINVAL)
		fail_msg("\"%s\" accepted", line);
	if (strstr(err.msg, needle) == NULL)
		fail_msg("\"%s\": message \"%s\" lacks \"%s\"", line, err.msg, needle);
}

static void test_commands_and_operands(void **state)
{
	struct ctl_args a;
	expect_ok("cluster status", &a);
	assert_int_equal(a.command, CTL_CLUSTER_STATUS);
	assert_string_equal(a.name, "cluster status");
	assert_int_equal(a.output, CTL_OUTPUT_TABLE);
	assert_int_equal(a.retries, -1);
	assert_null(a.endpoints);

	expect_ok("cluster add 4 127.0.0.1:7004 http://127.0.0.1:7104 --spare", &a);
	assert_int_equal(a.command, CTL_CLUSTER_ADD);
	assert_int_equal(a.operand_count, 3);
	assert_string_equal(a.operand[0], "4");
	assert_string_equal(a.operand[1], "127.0.0.1:7004");
	assert_string_equal(a.operand[2], "http://127.0.0.1:7104");
	assert_int_equal(a.spare, 1);

	expect_ok("cluster transfer", &a);
	assert_int_equal(a.command, CTL_CLUSTER_TRANSFER);
	assert_int_equal(a.operand_count, 0);
	expect_ok("cluster transfer 2", &a);
	assert_int_equal(a.operand_count, 1);
	expect_ok("cluster backup /tmp/state.db", &a);
	assert_int_equal(a.command, CTL_CLUSTER_BACKUP);
	assert_string_equal(a.operand[0], "/tmp/state.db");

	expect_ok("job submit examples/hybrid.json", &a);
	assert_int_equal(a.command, CTL_JOB_SUBMIT);
	assert_string_equal(a.operand[0], "examples/hybrid.json");

	expect_ok("plan examples/hybrid.json --limit 3", &a);
	assert_int_equal(a.command, CTL_PLAN);
	assert_string_equal(a.operand[0], "examples/hybrid.json");
	assert_int_equal(a.limit, 3);

	expect_ok("job list --state running --limit 5", &a);
	assert_int_equal(a.command, CTL_JOB_LIST);
	assert_string_equal(a.state, "running");
	assert_int_equal(a.limit, 5);

	expect_ok("job wait j-000001 --timeout 2.5", &a);
	assert_int_equal(a.command, CTL_JOB_WAIT);
	assert_true(a.timeout_s == 2.5);
	expect_ok("job watch j-000001", &a);
	assert_int_equal(a.command, CTL_JOB_WATCH);
	assert_true(a.timeout_s == 0);
	expect_ok("job checkpoint j-000001 --timeout 30", &a);
	assert_int_equal(a.command, CTL_JOB_CHECKPOINT);
	assert_true(a.timeout_s == 30);

	expect_ok("events --job j-000002 --after 17 --limit 10", &a);
	assert_int_equal(a.command, CTL_EVENTS);
	assert_string_equal(a.job, "j-000002");
	assert_int_equal(a.after, 17);
	assert_int_equal(a.limit, 10);
	expect_ok("events", &a);
	assert_int_equal(a.after, -1);
	assert_null(a.job);
	assert_int_equal(a.tail, -1);
	assert_int_equal(a.follow, 0);
	expect_ok("events --tail 20 -f --job j-000002", &a);
	assert_int_equal(a.tail, 20);
	assert_int_equal(a.follow, 1);

	expect_ok("token create alice --role user", &a);
	assert_int_equal(a.ttl_s, 0);
	expect_ok("token create alice --role user --ttl 90d", &a);
	assert_int_equal(a.ttl_s, 90 * 86400);
	expect_ok("token create alice --role user --ttl 3600", &a);
	assert_int_equal(a.ttl_s, 3600);
	assert_int_equal(a.command, CTL_TOKEN_CREATE);
	assert_string_equal(a.operand[0], "alice");
	assert_string_equal(a.role, "user");
	expect_ok("token revoke t-1", &a);
	assert_int_equal(a.command, CTL_TOKEN_REVOKE);
}

static void test_global_flags_anywhere(void **state)
{
	struct ctl_args a;
	expect_ok("--endpoints http://a:1 --token s3cret -o json job show j-1", &a);
	assert_string_equal(a.endpoints, "http://a:1");
	assert_string_equal(a.token, "s3cret");
	assert_int_equal(a.output, CTL_OUTPUT_JSON);
	assert_int_equal(a.command, CTL_JOB_SHOW);

	expect_ok("job show j-1 --endpoints=http://b:2 --output=table --retries 0 -v", &a);
	assert_string_equal(a.endpoints, "http://b:2");
	assert_int_equal(a.output, CTL_OUTPUT_TABLE);
	assert_int_equal(a.retries, 0);
	assert_int_equal(a.verbose, 1);

	expect_ok("cluster --token t members", &a);
	assert_int_equal(a.command, CTL_CLUSTER_MEMBERS);
	assert_string_equal(a.token, "t");

	expect_ok("job show -- -odd-id", &a);
	assert_string_equal(a.operand[0], "-odd-id");

	expect_ok("--help", &a);
	assert_int_equal(a.command, CTL_HELP);
	expect_ok("job submit -h", &a);
	assert_int_equal(a.command, CTL_HELP);
	expect_ok("help", &a);
	assert_int_equal(a.command, CTL_HELP);
}

static void test_usage_errors(void **state)
{
	expect_usage_error("", "no command");
	expect_usage_error("frobnicate", "unknown command \"frobnicate\"");
	/* a near miss names what was meant */
	expect_usage_error("jobs list", "unknown command \"jobs\" (did you mean job?)");
	expect_usage_error("job lst", "job: unknown subcommand \"lst\" (did you mean list?)");
	expect_usage_error("rollout statsu r-1", "(did you mean status?)");
	expect_usage_error("job list --stat running",
	                   "unknown option --stat (did you mean --state?)");
	expect_usage_error("job list --stat=running", "(did you mean --state?)");
	expect_usage_error("--endpoint http://h:1 job list", "(did you mean --endpoints?)");
	expect_usage_error("job", "job: needs a subcommand");
	expect_usage_error("job explode", "unknown subcommand \"explode\"");
	expect_usage_error("job submit", "job submit: missing arguments");
	expect_usage_error("plan", "plan: missing arguments");
	expect_usage_error("plan a.json --state running", "plan: does not take --state");
	expect_usage_error("job show a b", "unexpected argument \"b\"");
	expect_usage_error("cluster status extra", "unexpected argument \"extra\"");
	expect_usage_error("job list --state sleeping", "--state: \"sleeping\"");
	expect_usage_error("job list --limit 0", "--limit");
	expect_usage_error("job list --limit 1001", "--limit");
	expect_usage_error("job show j-1 --state running", "job show: does not take --state");
	expect_usage_error("cluster status --spare", "does not take --spare");
	expect_usage_error("job wait j-1 --timeout -3", "--timeout");
	expect_usage_error("job wait j-1 --timeout soon", "--timeout");
	expect_usage_error("job wait j-1 --timeout", "--timeout needs a value");
	expect_usage_error("job show j/../1", "is not a job id");
	expect_usage_error("job checkpoint j/../1", "is not a job id");
	expect_usage_error("job checkpoint", "missing arguments");
	expect_usage_error("job checkpoint j-1 --state running", "does not take --state");
	expect_usage_error("events --after -1", "--after");
	expect_usage_error("events --job a?b", "--job");
	expect_usage_error("events --tail 0", "--tail 0 is not an event count in 1..1000");
	expect_usage_error("events --tail 1001", "--tail 1001 is not an event count");
	expect_usage_error("events --tail 5 --limit 5", "--tail and --limit: give one");
	expect_usage_error("token create alice", "token create: needs --role");
	expect_usage_error("token create alice --role root", "--role: \"root\"");
	expect_usage_error("token create alice --role user --ttl 0",
	                   "--ttl: \"0\" is not a duration");
	expect_usage_error("token create alice --role user --ttl 3651d", "--ttl: \"3651d\"");
	expect_usage_error("token create alice --role user --ttl soon", "--ttl: \"soon\"");
	expect_usage_error("job list --ttl 5", "job list: does not take --ttl");
	expect_usage_error("token create al/ice --role user", "NAME");
	expect_usage_error("cluster add x 127.0.0.1:7004 http://h:1", "member ID \"x\"");
	expect_usage_error("cluster add 0 127.0.0.1:7004 http://h:1", "member ID \"0\"");
	expect_usage_error("cluster add 4 127.0.0.1 http://h:1", "RAFT_ADDR");
	expect_usage_error("cluster add 4 127.0.0.1:7004x http://h:1",
	                   "RAFT_ADDR \"127.0.0.1:7004x\" is not a.b.c.d:port");
	expect_usage_error("cluster add 4 ctl-2:7004 http://h:1", "RAFT_ADDR \"ctl-2:7004\"");
	expect_usage_error("cluster add 4 127.0.0.1:7004 h:1", "API_URL");
	expect_usage_error("cluster remove one", "member ID \"one\"");
	expect_usage_error("cluster transfer -- -2", "member ID \"-2\"");
	expect_usage_error("cluster backup", "cluster backup: missing arguments");
	expect_usage_error("cluster backup a b", "unexpected argument \"b\"");
	expect_usage_error("cluster status -o yaml", "--output: \"yaml\"");
	expect_usage_error("cluster status --bogus", "unknown option --bogus");
	expect_usage_error("cluster status -vv", "unknown option -vv");
	expect_usage_error("cluster status --spare=yes", "--spare takes no value");
	expect_usage_error("cluster status --retries 101", "--retries");
	assert_non_null(strstr(ctl_usage(), "job wait ID [--timeout S]"));
	/* builds, advisories, audit, nodes */
	expect_usage_error("build upload f.bin", "build upload: needs --version");
	expect_usage_error("build upload f.bin --version a/b", "--version");
	expect_usage_error("build upload f.bin --version 1 --component kernel", "--component");
	expect_usage_error("build download 1.0", "build download: needs -o FILE");
	expect_usage_error("build list -o xml", "--output: \"xml\"");
	expect_usage_error("advisory create --title t --severity high", "--text");
	expect_usage_error("advisory create --title t --severity grave --text x", "--severity");
	expect_usage_error("advisory create --title t --severity low --text x --text-file f",
	                   "not both");
	expect_usage_error("advisory create --severity low --text x", "needs --title");
	expect_usage_error("advisory embargo a-1", "needs --embargo-days");
	expect_usage_error("advisory embargo a-1 --embargo-days soon", "--embargo-days");
	expect_usage_error("advisory share a-1", "needs --visible-to");
	expect_usage_error("audit --job j-1", "does not take --job");
	expect_usage_error("events verify --after 3", "does not take --after");
	expect_usage_error("node cordon a/b", "is not a node name");
}

static void test_store_commands(void **state)
{
	struct ctl_args a;
	expect_ok("build download 2.0.1 -o /tmp/agent.bin", &a);
	assert_int_equal(a.command, CTL_BUILD_DOWNLOAD);
	assert_string_equal(a.out_file, "/tmp/agent.bin");
	assert_int_equal(a.output, CTL_OUTPUT_TABLE);
	expect_ok("-o json build list", &a);
	assert_int_equal(a.command, CTL_BUILD_LIST);
	assert_int_equal(a.output, CTL_OUTPUT_JSON);
	assert_null(a.out_file);
	expect_ok("build upload f.bin --version 2.0.1 --advisory a-000001 --notes n", &a);
	assert_int_equal(a.command, CTL_BUILD_UPLOAD);
	assert_string_equal(a.version, "2.0.1");
	assert_string_equal(a.advisory, "a-000001");
	assert_null(a.component);
	expect_ok("advisory create --title t --severity critical --text x --embargo-days 15 "
	          "--visible-to security,distro",
	          &a);
	assert_int_equal(a.command, CTL_ADVISORY_CREATE);
	assert_int_equal(a.embargo_days, 15); /* the server refuses it, naming the rule */
	assert_string_equal(a.visible_to, "security,distro");
	expect_ok("events verify", &a);
	assert_int_equal(a.command, CTL_EVENTS_VERIFY);
	expect_ok("events --limit 5", &a);
	assert_int_equal(a.command, CTL_EVENTS);
	expect_ok("audit --reads", &a);
	assert_int_equal(a.command, CTL_AUDIT);
	assert_int_equal(a.reads, 1);
	expect_ok("node uncordon node-a", &a);
	assert_int_equal(a.command, CTL_NODE_UNCORDON);
	assert_string_equal(a.operand[0], "node-a");
}

/* What ctl_usage_part writes for group (NULL: the command list and global flags). */
static char *usage_part(const char *group)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	ctl_usage_part(f, group);
	fclose(f);
	return text;
}

/* A usage error shows what concerns its command, not the whole 80-line text: the command
 * word is found past global flags and their values, and a group's part holds every entry of
 * that group (with their continuation lines) and nothing of another. */
static void test_usage_parts(void **state)
{
	(void)state;
	static char *const a1[] = {"yardctl", "--endpoints", "http://h:1", "-o",
	                           "json",    "job",         "show",       NULL};
	assert_string_equal(ctl_args_command_word(7, (char **)a1), "job");
	static char *const a2[] = {"yardctl", "--timeout=3", "-v", "rollout", NULL};
	assert_string_equal(ctl_args_command_word(4, (char **)a2), "rollout");
	static char *const a3[] = {"yardctl", "--token", "job", NULL}; /* job: the token */
	assert_null(ctl_args_command_word(3, (char **)a3));
	static char *const a4[] = {"yardctl", "--", "-odd", NULL};
	assert_string_equal(ctl_args_command_word(3, (char **)a4), "-odd");
	assert_true(ctl_group_known("job"));
	assert_true(ctl_group_known("audit"));
	assert_false(ctl_group_known("jobs"));
	assert_false(ctl_group_known(NULL));

	char *job = usage_part("job");
	assert_non_null(strstr(job, "usage:\n  job submit FILE"));
	assert_non_null(strstr(job, "  job logs ID"));
	assert_non_null(strstr(job, "-f: follow until the job ends\n")); /* a continuation */
	assert_non_null(strstr(job, "yardctl --help lists every command"));
	assert_null(strstr(job, "cluster status"));
	assert_null(strstr(job, "node list"));
	assert_null(strstr(job, "--endpoints"));
	free(job);
	char *events = usage_part("events"); /* two entries */
	assert_non_null(strstr(events, "  events [--job ID]"));
	assert_non_null(strstr(events, "  events verify"));
	assert_null(strstr(events, "token"));
	free(events);
	char *rollout = usage_part("rollout"); /* the last entry: no blank line taken */
	assert_non_null(strstr(rollout, "returns to its previous build)\n\nyardctl --help"));
	free(rollout);
	char *global = usage_part(NULL);
	assert_non_null(strstr(global, "commands: cluster, job, node, plan, events, token, build, "
	                               "advisory, audit, rollout\n"));
	assert_non_null(strstr(global, "--endpoints URL"));
	assert_non_null(strstr(global, "exit status:"));
	assert_null(strstr(global, "job submit"));
	free(global);
}

static void test_logs_and_node_commands(void **state)
{
	struct ctl_args a;
	expect_ok("job logs j-1", &a);
	assert_int_equal(a.command, CTL_JOB_LOGS);
	assert_int_equal(a.rank, -1);
	assert_int_equal(a.tail, -1);
	assert_int_equal(a.follow, 0);
	expect_ok("job logs j-1 --rank 3 --tail 20 -f", &a);
	assert_int_equal(a.rank, 3);
	assert_int_equal(a.tail, 20);
	assert_int_equal(a.follow, 1);
	expect_ok("job logs --follow j-1 --rank=0", &a);
	assert_int_equal(a.follow, 1);
	assert_int_equal(a.rank, 0);
	expect_ok("node list", &a);
	assert_int_equal(a.command, CTL_NODE_LIST);
	expect_ok("node drain node-a", &a);
	assert_int_equal(a.command, CTL_NODE_DRAIN);
	assert_string_equal(a.operand[0], "node-a");
	expect_ok("node show n.1", &a);
	assert_int_equal(a.command, CTL_NODE_SHOW);
	expect_ok("node cordon n1", &a);
	assert_int_equal(a.command, CTL_NODE_CORDON);
	expect_ok("node uncordon n1", &a);
	assert_int_equal(a.command, CTL_NODE_UNCORDON);
	expect_ok("node probe n1", &a);
	assert_int_equal(a.command, CTL_NODE_PROBE);
	assert_string_equal(a.operand[0], "n1");
	expect_usage_error("node probe", "node probe: missing arguments");
	expect_usage_error("node probe a/b", "is not a node name");
	expect_usage_error("job logs j-1 --rank -1", "--rank: \"-1\"");
	expect_usage_error("job logs j-1 --rank 65536", "--rank");
	expect_usage_error("job logs j-1 --tail x", "--tail: \"x\"");
	expect_usage_error("job logs j-1 --follow=1", "--follow takes no value");
	expect_usage_error("job logs j/1", "is not a job id");
	expect_usage_error("job show j-1 -f", "job show: does not take --follow");
	expect_usage_error("node drain", "node drain: missing arguments");
	expect_usage_error("node drain a/b", "is not a node name");
	expect_usage_error("node list x", "unexpected argument \"x\"");
	expect_usage_error("node reboot n1", "unknown subcommand \"reboot\"");
	assert_non_null(strstr(ctl_usage(), "job logs ID [--rank R] [--tail N] [-f]"));
	assert_non_null(strstr(ctl_usage(), "node drain NAME"));
	assert_non_null(strstr(ctl_usage(), "node probe NAME"));
	assert_non_null(strstr(ctl_usage(), "job timeline ID"));
	expect_usage_error("job timeline", "job timeline: missing arguments");
	expect_usage_error("job timeline j-1 --rank 0", "job timeline: does not take --rank");
	expect_usage_error("job timeline ../x", "is not a job id");
}

static void test_endpoint_lists(void **state)
{
	char eps[CTL_ENDPOINTS_MAX][CTL_URL_MAX];
	int n = -1;
	struct yard_err err = {0};
	assert_int_equal(ctl_endpoints_parse(" http://127.0.0.1:7101/, https://h:7102 ,,"
	                                     "http://h3:7103/prefix//",
	                                     eps, CTL_ENDPOINTS_MAX, &n, &err),
	                 0);
	assert_int_equal(n, 3);
	assert_string_equal(eps[0], "http://127.0.0.1:7101");
	assert_string_equal(eps[1], "https://h:7102");
	assert_string_equal(eps[2], "http://h3:7103/prefix");

	assert_int_equal(ctl_endpoints_parse("http://a:1", eps, CTL_ENDPOINTS_MAX, &n, &err), 0);
	assert_int_equal(n, 1);

	static const struct {
		const char *list, *needle;
	} bad[] = {
	    {"", "no endpoints"},
	    {" , ,", "no endpoints"},
	    {"127.0.0.1:7101", "not an http:// or https:// URL"},
	    {"ftp://h:1", "\"ftp://h:1\" is not an http"},
	    {"http://", "has no host"},
	    {"http://:80", "has no host"},
	    {"http://a:1,http://b c:2", "\"http://b c:2\" must be a plain base URL"},
	    {"http://a:1/?x=1", "plain base URL"},
	};
	for (size_t i = 0; i < YARD_ARRAY_LEN(bad); i++) {
		if (ctl_endpoints_parse(bad[i].list, eps, CTL_ENDPOINTS_MAX, &n, &err) !=
		    YARD_EINVAL)
			fail_msg("endpoint list \"%s\" accepted", bad[i].list);
		if (strstr(err.msg, bad[i].needle) == NULL)
			fail_msg("\"%s\": \"%s\" lacks \"%s\"", bad[i].list, err.msg,
			         bad[i].needle);
	}
	assert_int_equal(ctl_endpoints_parse("http://a:1,http://b:2,http://c:3", eps, 2, &n, &err),
	                 YARD_EINVAL);
	assert_non_null(strstr(err.msg, "more than 2 endpoints"));
}

static void test_redirect_base(void **state)
{
	char base[CTL_URL_MAX];
	struct yard_err err = {0};
	/* the documented form: leader URL + same path and query */
	assert_int_equal(ctl_redirect_base("http://127.0.0.1:7102/v1/jobs?state=pending&limit=5",
	                                   "/v1/jobs?state=pending&limit=5", base, sizeof base,
	                                   &err),
	                 0);
	assert_string_equal(base, "http://127.0.0.1:7102");
	/* a leader served under a path prefix keeps its prefix */
	assert_int_equal(ctl_redirect_base("https://lead.example:8443/yard/v1/cluster/transfer",
	                                   "/v1/cluster/transfer", base, sizeof base, &err),
	                 0);
	assert_string_equal(base, "https://lead.example:8443/yard");
	/* a Location not ending with our path: keep only scheme://host:port */
	assert_int_equal(ctl_redirect_base("http://10.0.0.3:7103/elsewhere", "/v1/jobs", base,
	                                   sizeof base, &err),
	                 0);
	assert_string_equal(base, "http://10.0.0.3:7103");
	assert_int_equal(
	    ctl_redirect_base("http://10.0.0.3:7103", "/v1/jobs", base, sizeof base, &err), 0);
	assert_string_equal(base, "http://10.0.0.3:7103");
	assert_int_equal(
	    ctl_redirect_base("http://10.0.0.3:7103/", "/v1/jobs", base, sizeof base, &err), 0);
	assert_string_equal(base, "http://10.0.0.3:7103");

	assert_int_equal(ctl_redirect_base(NULL, "/v1/jobs", base, sizeof base, &err), YARD_EINVAL);
	assert_int_equal(ctl_redirect_base("", "/v1/jobs", base, sizeof base, &err), YARD_EINVAL);
	assert_int_equal(
	    ctl_redirect_base("file:///etc/passwd", "/v1/jobs", base, sizeof base, &err),
	    YARD_EINVAL);
	assert_non_null(strstr(err.msg, "not an http(s) URL"));
	assert_int_equal(ctl_redirect_base("/v1/jobs", "/v1/jobs", base, sizeof base, &err),
	                 YARD_EINVAL);
	/* the path alone after the scheme leaves no host */
	assert_int_equal(ctl_redirect_base("http:///v1/jobs", "/v1/jobs", base, sizeof base, &err),
	                 YARD_EINVAL);
	char small[8];
	assert_int_equal(
	    ctl_redirect_base("http://long-host:1/v1/jobs", "/v1/jobs", small, sizeof small, &err),
	    YARD_EINVAL);
}

static void test_request_ids(void **state)
{
	char a[CTL_REQUEST_ID_LEN + 1], b[CTL_REQUEST_ID_LEN + 1];
	ctl_request_id(a);
	ctl_request_id(b);
	assert_int_equal(strlen(a), CTL_REQUEST_ID_LEN);
	assert_int_equal(strspn(a, "0123456789abcdef"), CTL_REQUEST_ID_LEN);
	assert_string_not_equal(a, b);
}

static void test_client_init_checks_token_and_endpoints(void **state)
{
	struct ctl_client c;
	struct yard_err err = {0};
	assert_int_equal(ctl_client_init(&c, "http://127.0.0.1:1", "tok\r\nX-Evil: 1", &err),
	                 YARD_EINVAL);
	assert_non_null(strstr(err.msg, "token"));
	ctl_client_close(&c);
	assert_int_equal(ctl_client_init(&c, "http://127.0.0.1:1", "", &err), YARD_EINVAL);
	ctl_client_close(&c);
	assert_int_equal(ctl_client_init(&c, "nope", "t", &err), YARD_EINVAL);
	ctl_client_close(&c);
	assert_int_equal(ctl_client_init(&c, "http://127.0.0.1:1/", "t0k", &err), 0);
	assert_string_equal(c.endpoints[0], "http://127.0.0.1:1");
	assert_string_equal(c.auth_header, "Authorization: Bearer t0k");
	assert_string_equal(c.leader, "");
	ctl_client_close(&c);
}

static void test_response_description(void **state)
{
	struct ctl_response r = {.status = 400};
	char out[512];
	snprintf(r.endpoint, sizeof r.endpoint, "http://127.0.0.1:7101");
	r.json = json_pack("{s:s,s:s}", "error", "parallel.tp: 0 is out of range [1, 64]", "field",
	                   "parallel.tp");
	ctl_response_describe(&r, out, sizeof out);
	assert_string_equal(out, "400 from http://127.0.0.1:7101: parallel.tp: 0 is out of range "
	                         "[1, 64] (field parallel.tp)");
	json_decref(r.json);
	r.json = json_pack("{s:s}", "error", "no leader");
	r.status = 503;
	ctl_response_describe(&r, out, sizeof out);
	assert_string_equal(out, "503 from http://127.0.0.1:7101: no leader");
	json_decref(r.json);
	r.json = NULL;
	r.status = 502;
	r.body = "<html>bad gateway</html>";
	ctl_response_describe(&r, out, sizeof out);
	assert_string_equal(out, "502 from http://127.0.0.1:7101: <html>bad gateway</html>");
}

static char *print_table(const struct ctl_table *t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ctl_table_print(t, f);
	fclose(f);
	return buf;
}

static void test_table_alignment(void **state)
{
	static const char *const headers[] = {"ID", "STATE", "REASON"};
	struct ctl_table t;
	ctl_table_init(&t, 3, headers);
	const char *r1[] = {"j-000001", "running", "step 40"};
	const char *r2[] = {"j-2", NULL, "needs 8 devices, 6 free"};
	const char *r3[] = {"j-3", "f\x1b[2Jx", "line\nbreak"};
	assert_int_equal(ctl_table_add(&t, r1), 0);
	assert_int_equal(ctl_table_add(&t, r2), 0);
	assert_int_equal(ctl_table_add(&t, r3), 0);
	char *out = print_table(&t);
	assert_string_equal(out, "ID        STATE    REASON\n"
	                         "j-000001  running  step 40\n"
	                         "j-2       -        needs 8 devices, 6 free\n"
	                         "j-3       f?[2Jx   line?break\n");
	free(out);
	ctl_table_free(&t);

	/* multi-byte UTF-8 counts as one column per code point */
	static const char *const h2[] = {"A", "B"};
	ctl_table_init(&t, 2, h2);
	const char *u[] = {"\xc3\xa9t\xc3\xa9", "x"};
	const char *v[] = {"abcd", "y"};
	ctl_table_add(&t, u);
	ctl_table_add(&t, v);
	out = print_table(&t);
	assert_string_equal(out, "A     B\n"
	                         "\xc3\xa9t\xc3\xa9   x\n"
	                         "abcd  y\n");
	free(out);
	ctl_table_free(&t);

	/* no rows: the header alone */
	ctl_table_init(&t, 2, h2);
	out = print_table(&t);
	assert_string_equal(out, "A  B\n");
	free(out);
	ctl_table_free(&t);
}

static void test_cell_formats(void **state)
{
	char b[64];
	ctl_format_age(0, b, sizeof b);
	assert_string_equal(b, "0s");
	ctl_format_age(-5000, b, sizeof b);
	assert_string_equal(b, "0s");
	ctl_format_age(59999, b, sizeof b);
	assert_string_equal(b, "59s");
	ctl_format_age(192000, b, sizeof b);
	assert_string_equal(b, "3m12s");
	ctl_format_age(2 * 3600000 + 5 * 60000, b, sizeof b);
	assert_string_equal(b, "2h05m");
	ctl_format_age(4 * 86400000LL + 3 * 3600000, b, sizeof b);
	assert_string_equal(b, "4d03h");

	ctl_format_time(1763740000000, b, sizeof b);
	assert_string_equal(b, "2025-11-21T15:46:40Z");
	ctl_format_time(0, b, sizeof b);
	assert_string_equal(b, "1970-01-01T00:00:00Z");

	json_t *v = json_pack("{s:s,s:i,s:f,s:n,s:b,s:[i]}", "s", "x", "i", 42, "f", 0.0123456, "n",
	                      "b", 1, "a", 7);
	ctl_format_json(json_object_get(v, "s"), b, sizeof b);
	assert_string_equal(b, "x");
	ctl_format_json(json_object_get(v, "i"), b, sizeof b);
	assert_string_equal(b, "42");
	ctl_format_json(json_object_get(v, "f"), b, sizeof b);
	assert_string_equal(b, "0.01235");
	ctl_format_json(json_object_get(v, "n"), b, sizeof b);
	assert_string_equal(b, "-");
	ctl_format_json(json_object_get(v, "missing"), b, sizeof b);
	assert_string_equal(b, "-");
	ctl_format_json(json_object_get(v, "b"), b, sizeof b);
	assert_string_equal(b, "true");
	ctl_format_json(json_object_get(v, "a"), b, sizeof b);
	assert_string_equal(b, "[7]");
	json_decref(v);
}

static void test_rollout_commands(void **state)
{
	struct ctl_args a;
	(void)state;
	expect_ok("rollout start --build 2.0.1 --waves 1,10%,100% --soak 30s --selector rack=r1 "
	          "--gate-timeout 2m --failure-budget 1 --policy restart --step-time-regression 20",
	          &a);
	assert_int_equal(a.command, CTL_ROLLOUT_START);
	assert_string_equal(a.build, "2.0.1");
	assert_string_equal(a.waves, "1,10%,100%");
	assert_string_equal(a.selector, "rack=r1");
	assert_string_equal(a.policy, "restart");
	assert_true(a.soak_s == 30);
	assert_true(a.gate_timeout_s == 120);
	assert_int_equal(a.failure_budget, 1);
	assert_int_equal(a.step_regression_pct, 20);
	expect_ok("rollout start --build 2.0.1 --soak 500ms", &a);
	assert_true(a.soak_s == 0.5);
	assert_true(a.gate_timeout_s < 0); /* not given: the server's default */
	assert_int_equal(a.failure_budget, -1);
	expect_ok("rollout status ro-000001 -w --timeout 60", &a);
	assert_int_equal(a.command, CTL_ROLLOUT_STATUS);
	assert_int_equal(a.watch, 1);
	expect_ok("rollout list", &a);
	assert_int_equal(a.command, CTL_ROLLOUT_LIST);
	expect_ok("rollout rollback ro-000001", &a);
	assert_int_equal(a.command, CTL_ROLLOUT_ROLLBACK);
	expect_usage_error("rollout start", "rollout start: needs --build");
	expect_usage_error("rollout start --build 2 --soak 3x", "--soak: \"3x\" is not a duration");
	expect_usage_error("rollout start --build 2 --policy yolo", "--policy");
	expect_ok("rollout start --build w-2 --policy next", &a);
	assert_string_equal(a.policy, "next");
	expect_usage_error("rollout start --build 2 --selector rack", "--selector");
	expect_usage_error("rollout start --build 2 --failure-budget -1", "--failure-budget");
	expect_usage_error("rollout start --build 2 --step-time-regression 0",
	                   "--step-time-regression");
	expect_usage_error("rollout status", "missing arguments");
	expect_usage_error("rollout pause ro/1", "is not a valid id");
	expect_usage_error("rollout list -w", "does not take --watch");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_commands_and_operands),
	    cmocka_unit_test(test_global_flags_anywhere),
	    cmocka_unit_test(test_store_commands),
	    cmocka_unit_test(test_usage_errors),
	    cmocka_unit_test(test_usage_parts),
	    cmocka_unit_test(test_logs_and_node_commands),
	    cmocka_unit_test(test_rollout_commands),
	    cmocka_unit_test(test_endpoint_lists),
	    cmocka_unit_test(test_redirect_base),
	    cmocka_unit_test(test_request_ids),
	    cmocka_unit_test(test_client_init_checks_token_and_endpoints),
	    cmocka_unit_test(test_response_description),
	    cmocka_unit_test(test_table_alignment),
	    cmocka_unit_test(test_cell_formats),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
