/* log.c: the stderr logger. Each line is written with one write() so lines from
 * concurrent processes sharing a log file do not interleave mid-line. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char log_component[64] = "yard";
static enum yard_log_level log_level = YARD_LOG_INFO;

void yard_log_init(const char *component)
{
	const char *env = getenv("YARD_LOG");
	snprintf(log_component, sizeof log_component, "%s", component);
	if (env == NULL)
		return;
	if (strcmp(env, "error") == 0)
		log_level = YARD_LOG_ERROR;
	else if (strcmp(env, "warn") == 0)
		log_level = YARD_LOG_WARN;
	else if (strcmp(env, "debug") == 0)
		log_level = YARD_LOG_DEBUG;
	else
		log_level = YARD_LOG_INFO;
}

void yard_log_set_level(enum yard_log_level level) { log_level = level; }

int yard_log_enabled(enum yard_log_level level) { return level <= log_level; }

void yard_log(enum yard_log_level level, const char *fmt, ...)
{
	static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
	char line[2048];
	struct timeval tv;
	struct tm tm;
	size_t n;
	va_list ap;

	if (!yard_log_enabled(level))
		return;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
	n += (size_t)snprintf(line + n, sizeof line - n, ".%03dZ %s %s ", (int)(tv.tv_usec / 1000),
	                      log_component, names[level]);
	va_start(ap, fmt);
	if (n < sizeof line)
		n += (size_t)vsnprintf(line + n, sizeof line - n, fmt, ap);
	va_end(ap);
	if (n >= sizeof line - 1)
		n = sizeof line - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}
