/* SPDX-License-Identifier: MIT */
/* Clock offset from request/reply exchanges (clock.h). */
#include <errno.h>

#include "observe/clock.h"

int cs_clock_estimate(const struct cs_clock_sample *s, unsigned n,
		      struct cs_clock_est *out)
{
	unsigned best = 0;

	if (!n)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		if (s[i].t1 < s[i].t0)
			return -EINVAL;
		if (s[i].t1 - s[i].t0 < s[best].t1 - s[best].t0)
			best = i;
	}
	/* the midpoint, rounded down; the bound rounded up covers it */
	out->offset = (int64_t)(s[best].remote -
				(s[best].t0 + (s[best].t1 - s[best].t0) / 2));
	out->bound = (s[best].t1 - s[best].t0 + 1) / 2;
	return 0;
}
