/* fuzz.h: what every fuzz target under tests/fuzz/ defines, and how it fails.
 *
 * A target is one LLVMFuzzerTestOneInput over one parser of untrusted input (a request body,
 * a raft entry, a checkpoint file, an answer from the controller). It is built twice: with
 * replay.c as its main, it runs the seeds and the crashes found so far under
 * tests/fuzz/corpus/TARGET (a test of `make check`, run under ASan+UBSan too); with
 * `configure --enable-fuzzing` (clang), libFuzzer's main drives it (scripts/fuzz). Beyond
 * "no crash, no leak, no undefined behaviour", a target checks properties of what the
 * parser accepted (a normalised spec parses to itself, a decoded frame encodes back to the
 * same bytes, two state machines fed the same commands hold the same database) and fails
 * with fuzz_fail, which names the property. */
#ifndef YARD_FUZZ_H
#define YARD_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional: once, before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
/* Defines LLVMFuzzerInitialize for a target whose only set-up is the log level (common/log.h
 * included): FUZZ_LOG_LEVEL(YARD_LOG_ERROR) where every refused input would log a line. */
#define FUZZ_LOG_LEVEL(level)                                                                      \
	int LLVMFuzzerInitialize(int *argc, char ***argv)                                          \
	{                                                                                          \
		(void)argc;                                                                        \
		(void)argv;                                                                        \
		yard_log_set_level(level);                                                         \
		return 0;                                                                          \
	}

/* Prints "fuzz: " and the message to stderr and aborts (libFuzzer saves the input). */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
