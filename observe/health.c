/* SPDX-License-Identifier: MIT */
/* Peer health flags against the cluster's medians (health.h). */
#include <stdlib.h>

#include "observe/health.h"

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median of the non-negative values of @v (as they lie in @p). */
static double median(const struct cs_health_path *p, unsigned n, bool rtt)
{
	double *v = malloc((n ? n : 1) * sizeof(*v)), m = -1;
	unsigned k = 0;

	if (!v)
		return -1;
	for (unsigned i = 0; i < n; i++) {
		double x = rtt ? p[i].p99_s : p[i].loss;

		if (x >= 0 && p[i].frames >= CS_HEALTH_MIN_FRAMES)
			v[k++] = x;
	}
	if (k) {
		qsort(v, k, sizeof(*v), cmp_d);
		m = k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
	}
	free(v);
	return m;
}

unsigned cs_health_judge(struct cs_health_path *p, unsigned n)
{
	double mr = median(p, n, true), ml = median(p, n, false);
	unsigned bad = 0;

	for (unsigned i = 0; i < n; i++) {
		p[i].flags = 0;
		if (p[i].frames < CS_HEALTH_MIN_FRAMES)
			continue;
		if (p[i].p99_s >= 0 && mr >= 0 &&
		    p[i].p99_s > CS_HEALTH_RTT_FACTOR * mr &&
		    p[i].p99_s > CS_HEALTH_RTT_FLOOR_S)
			p[i].flags |= CS_HEALTH_RTT;
		if (p[i].loss >= 0 && ml >= 0 &&
		    p[i].loss > CS_HEALTH_LOSS_FACTOR * ml &&
		    p[i].loss > CS_HEALTH_LOSS_FLOOR)
			p[i].flags |= CS_HEALTH_LOSS;
		bad += p[i].flags != 0;
	}
	return bad;
}

double cs_health_quantile(const double *le, const double *cum, unsigned nb,
			  double q)
{
	double total = cum[nb], rank, lo = 0, below = 0;

	if (!(total > 0))
		return -1;
	rank = q * total;
	for (unsigned i = 0; i < nb; i++) {
		if (cum[i] >= rank) {
			double in = cum[i] - below;

			return in > 0 ? lo + (le[i] - lo) * (rank - below) / in
				      : le[i];
		}
		lo = le[i];
		below = cum[i];
	}
	return le[nb - 1]; /* in +Inf: the largest finite bound */
}
