/* SPDX-License-Identifier: MIT */
/*
 * Small helpers the stand-alone benchmark programs share (cs-trainer-bench,
 * cs-mpi-bench, cs-trainer-peerlost): each links only what it measures, so
 * these are header-only.
 */
#ifndef CS_TOOLS_BENCH_UTIL_H
#define CS_TOOLS_BENCH_UTIL_H

#include <stddef.h>
#include <stdlib.h>

/* "64", "4K", "16M", "1G" (binary units) to bytes or elements. */
static inline size_t cs_bench_parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	if (*end == 'K' || *end == 'k')
		v *= 1024;
	else if (*end == 'M' || *end == 'm')
		v *= 1024 * 1024;
	else if (*end == 'G' || *end == 'g')
		v *= 1024.0 * 1024 * 1024;
	return (size_t)v;
}

/* qsort() order of doubles (percentiles). */
static inline int cs_bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

#endif
