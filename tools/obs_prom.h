/* SPDX-License-Identifier: MIT */
/* A reader of Prometheus' text format, enough for `collstack top`. */
#ifndef CS_TOOLS_OBS_PROM_H
#define CS_TOOLS_OBS_PROM_H

#include <stddef.h>

struct cs_prom_sample {
	char name[96];
	char labels[224]; /* as written, without the braces */
	double v;
};

struct cs_prom {
	struct cs_prom_sample *s;
	size_t n, cap;
};

/**
 * cs_prom_parse - the samples of @text (comments skipped)
 * Returns: 0, -ENOMEM, or -EINVAL at a line that is not a sample.
 */
int cs_prom_parse(const char *text, struct cs_prom *p);
void cs_prom_free(struct cs_prom *p);

/**
 * cs_prom_sum - the sum of samples named @name whose labels contain
 * @m1 and @m2 (each 'key="value"', or NULL for any)
 * Returns: the sum (0 when none matches).
 */
double cs_prom_sum(const struct cs_prom *p, const char *name, const char *m1,
		   const char *m2);

#endif
