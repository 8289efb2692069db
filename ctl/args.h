/* args.h: yardctl's command line: which command, its operands and options, and the global
 * flags (accepted before or after the command). Parsing only checks syntax and formats;
 * nothing here touches the network or the environment. */
#ifndef YARD_CTL_ARGS_H
#define YARD_CTL_ARGS_H

#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

enum ctl_command {
	CTL_HELP,
	CTL_CLUSTER_STATUS,
	CTL_CLUSTER_MEMBERS,
	CTL_CLUSTER_ADD,
	CTL_CLUSTER_REMOVE,
	CTL_CLUSTER_TRANSFER,
	CTL_CLUSTER_BACKUP,
	CTL_JOB_SUBMIT,
	CTL_JOB_LIST,
	CTL_JOB_SHOW,
	CTL_JOB_CANCEL,
	CTL_JOB_CHECKPOINT,
	CTL_JOB_DELETE,
	CTL_JOB_WAIT,
	CTL_JOB_WATCH,
	CTL_JOB_LOGS,
	CTL_JOB_TIMELINE,
	CTL_NODE_LIST,
	CTL_NODE_SHOW,
	CTL_NODE_CORDON,
	CTL_NODE_UNCORDON,
	CTL_NODE_DRAIN,
	CTL_NODE_PROBE,
	CTL_EVENTS,
	CTL_TOKEN_CREATE,
	CTL_TOKEN_LIST,
	CTL_TOKEN_REVOKE,
	CTL_EVENTS_VERIFY,
	CTL_BUILD_UPLOAD,
	CTL_BUILD_LIST,
	CTL_BUILD_SHOW,
	CTL_BUILD_DOWNLOAD,
	CTL_BUILD_DELETE,
	CTL_ADVISORY_CREATE,
	CTL_ADVISORY_LIST,
	CTL_ADVISORY_SHOW,
	CTL_ADVISORY_EMBARGO,
	CTL_ADVISORY_SHARE,
	CTL_ADVISORY_PUBLISH,
	CTL_AUDIT,
	CTL_ROLLOUT_START,
	CTL_ROLLOUT_STATUS,
	CTL_ROLLOUT_LIST,
	CTL_ROLLOUT_PAUSE,
	CTL_ROLLOUT_RESUME,
	CTL_ROLLOUT_ABORT,
	CTL_ROLLOUT_ROLLBACK,
	CTL_PLAN,
};

enum ctl_output { CTL_OUTPUT_TABLE, CTL_OUTPUT_JSON };

#define CTL_OPERANDS_MAX 3

struct ctl_args {
	enum ctl_command command;
	char name[32]; /* "job submit", for messages */
	/* global flags; strings borrowed from argv, NULL when not given */
	const char *endpoints;
	const char *token;
	const char *cacert; /* --cacert, NULL when not given */
	const char *cert, *key; /* --cert, --key */
	enum ctl_output output;
	int retries; /* -1: the client's default */
	int verbose;
	/* operands, in order (ID, FILE, NAME, ...) */
	const char *operand[CTL_OPERANDS_MAX];
	int operand_count;
	/* command options */
	int spare;         /* cluster add --spare */
	const char *state; /* job list --state */
	const char *job;   /* events --job */
	const char *role;  /* token create --role */
	int64_t after;     /* events --after, -1 when not given */
	int limit;         /* job list / events / plan --limit, 0 = server default */
	double timeout_s;  /* job wait --timeout, 0 = wait without limit */
	/* build and advisory options (NULL when not given) */
	const char *version;    /* build upload --version */
	const char *component;  /* build upload --component (default agent) */
	const char *notes;      /* build upload --notes */
	const char *advisory;   /* build upload --advisory */
	const char *out_file;   /* build download -o FILE */
	const char *title;      /* advisory create --title */
	const char *severity;   /* advisory create --severity */
	const char *cve;        /* advisory create --cve (default RESERVED) */
	const char *text;       /* advisory create --text */
	const char *text_file;  /* advisory create --text-file */
	const char *visible_to; /* advisory create/share --visible-to ROLE|NAME[,...] */
	int embargo_days;       /* advisory create/embargo --embargo-days, 0 = not given */
	int reads;              /* audit --reads */
	int rank;               /* job logs --rank, -1 = every rank */
	int tail;               /* job logs --tail, -1 = everything held */
	int follow;             /* job logs -f */
	/* rollout start; durations in seconds, -1 when not given */
	const char *build;       /* --build V */
	const char *waves;       /* --waves 1,10%,100% */
	const char *selector;    /* --selector k=v[,k=v] */
	const char *policy;      /* --policy keep|restart|next */
	double soak_s;           /* --soak 30s */
	double gate_timeout_s;   /* --gate-timeout 60s */
	int failure_budget;      /* --failure-budget N, -1 */
	int step_regression_pct; /* --step-time-regression PCT, -1 */
	int watch;               /* rollout status -w */
	int64_t ttl_s;           /* token create --ttl 90d, 0 = never expires */
};

/* Parses argv[1..argc). Usage errors return YARD_EINVAL with a message saying what is wrong
 * (the caller prints it with the usage and exits 2). */
int ctl_args_parse(int argc, char **argv, struct ctl_args *a, struct yard_err *err);

/* The usage text, ending in a newline. */
const char *ctl_usage(void);

/* The command word of a command line: its first argument that is neither an option nor an
 * option's value (NULL: none). Usage errors show what concerns that command. */
const char *ctl_args_command_word(int argc, char **argv);

/* 1 when word names a command group ("job", "cluster", ...). */
int ctl_group_known(const char *word);

/* Writes the part of the usage text a usage error needs: with a group, the entries of its
 * commands and a pointer to --help; without one, the list of command groups and the global
 * flags (what endpoint and token errors concern). */
void ctl_usage_part(FILE *f, const char *group);

/* A job, token, node or event-filter id: 1..64 characters from [A-Za-z0-9._-]. */
int ctl_id_valid(const char *id);

#endif
