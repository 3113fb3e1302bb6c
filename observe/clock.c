/* SPDX-License-Identifier: MIT */
/* Clock offset from request/reply exchanges (clock.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

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

int cs_clock_host_id(char *out, size_t len)
{
	char boot[64] = "", line[128];
	long long sec = 0, nsec = 0;
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	int n;

	if (!f)
		return -errno;
	n = fgets(boot, sizeof(boot), f) ? 0 : -EIO;
	fclose(f);
	boot[strcspn(boot, "\n ")] = 0;
	if (n || !boot[0])
		return -EIO;
	/* a time namespace moves CLOCK_MONOTONIC; none: no file */
	f = fopen("/proc/self/timens_offsets", "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "monotonic %lld %lld", &sec, &nsec) == 2)
			break;
	if (f)
		fclose(f);
	n = snprintf(out, len, "%s/%lld", boot, sec * 1000000000ll + nsec);
	return n < 0 || (size_t)n >= len ? -ENOSPC : 0;
}
