/* SPDX-License-Identifier: MIT */
/* A tiny assertion helper for the gpu tests: they also run on GPU machines
 * that have no Criterion. A failed check is counted and reported; the test
 * goes on, and main() exits 1 if any failed (77: skipped). */
#ifndef CS_TESTS_GPU_CHECK_H
#define CS_TESTS_GPU_CHECK_H

#include <stdio.h>

static int check_failed;
static int check_count;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		check_count++;                                                 \
		if (!(cond)) {                                                 \
			check_failed++;                                        \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__,          \
				__LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
		}                                                              \
	} while (0)

static inline int check_report(const char *name)
{
	printf("%s: %d checks, %d failed\n", name, check_count, check_failed);
	fflush(stdout); /* children leave with _exit() */
	return check_failed ? 1 : 0;
}

#endif
