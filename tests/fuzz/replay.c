/* replay.c: the main of a fuzz target built without libFuzzer. Runs LLVMFuzzerTestOneInput
 * once on every file named on the command line or found in a directory named there (not
 * recursively), in name order; with no arguments, on the target's corpus
 * (tests/fuzz/corpus/TARGET under the source tree, compiled in as FUZZ_CORPUS). A crash,
 * a sanitizer report or a failed property aborts the process, so `make check` fails and the
 * log names the input file it was replaying. Exit 0 when every input ran, 1 when an input
 * could not be read or the corpus is empty (an empty corpus tests nothing). */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "replay: cannot open %s\n", path);
		return 1;
	}
	size_t cap = 1 << 16, len = 0;
	uint8_t *buf = malloc(cap);
	for (size_t n; buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0;) {
		len += n;
		if (len == cap) {
			uint8_t *grown = realloc(buf, cap * 2);
			if (grown == NULL) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = grown;
			cap *= 2;
		}
	}
	fclose(f);
	if (buf == NULL) {
		fprintf(stderr, "replay: out of memory reading %s\n", path);
		return 1;
	}
	/* a copy of exactly len bytes, so that ASan sees a read past the input */
	uint8_t *exact = malloc(len ? len : 1);
	memcpy(exact, buf, len);
	free(buf);
	fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file in dir, in name order; *count gets how many. */
static int run_dir(const char *dir, int *count)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, NULL), bad = 0;
	if (n < 0) {
		fprintf(stderr, "replay: cannot read %s\n", dir);
		return 1;
	}
	char **paths = calloc((size_t)n, sizeof *paths);
	int np = 0;
	for (int i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.') {
			size_t len = strlen(dir) + strlen(names[i]->d_name) + 2;
			paths[np] = malloc(len);
			snprintf(paths[np], len, "%s/%s", dir, names[i]->d_name);
			np++;
		}
		free(names[i]);
	}
	free(names);
	qsort(paths, (size_t)np, sizeof *paths, by_name);
	for (int i = 0; i < np; i++) {
		struct stat st;
		if (stat(paths[i], &st) == 0 && S_ISREG(st.st_mode)) {
			bad |= run_file(paths[i]);
			(*count)++;
		}
		free(paths[i]);
	}
	free(paths);
	return bad;
}

int main(int argc, char **argv)
{
	static char *default_args[] = {FUZZ_CORPUS};
	char **args = argc > 1 ? argv + 1 : default_args;
	int nargs = argc > 1 ? argc - 1 : 1, bad = 0, count = 0;
	LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 0; i < nargs; i++) {
		struct stat st;
		if (stat(args[i], &st) == 0 && S_ISDIR(st.st_mode)) {
			bad |= run_dir(args[i], &count);
		} else {
			bad |= run_file(args[i]);
			count++;
		}
	}
	printf("replayed %d input(s)\n", count);
	if (count == 0) {
		fprintf(stderr, "replay: no inputs\n");
		return 1;
	}
	return bad;
}
