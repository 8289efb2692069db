/* log.h: leveled logging to stderr, one line per message with a wall-clock timestamp and
 * the component name. Level from YARD_LOG (error|warn|info|debug), default info. */
#ifndef YARD_LOG_H
#define YARD_LOG_H

enum yard_log_level { YARD_LOG_ERROR, YARD_LOG_WARN, YARD_LOG_INFO, YARD_LOG_DEBUG };

/* Sets the component printed on every line (e.g. "yardd[2]") and reads YARD_LOG. */
void yard_log_init(const char *component);
void yard_log_set_level(enum yard_log_level level);
int yard_log_enabled(enum yard_log_level level);
void yard_log(enum yard_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) yard_log(YARD_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) yard_log(YARD_LOG_WARN, __VA_ARGS__)
#define log_info(...) yard_log(YARD_LOG_INFO, __VA_ARGS__)
#define log_debug(...) \
	do { \
		if (yard_log_enabled(YARD_LOG_DEBUG)) \
			yard_log(YARD_LOG_DEBUG, __VA_ARGS__); \
	} while (0)

#endif
