/* SPDX-License-Identifier: MIT */
/* Leveled logging to stderr with a module tag and a timestamp. */
#include <stdio.h>
#include <time.h>

#include "internal/log.h"

int cs_log_level = CS_LOG_INFO;

static const char *const level_names[] = { "ERR", "WARN", "INFO", "DEBUG" };

void cs_log(int level, const char *module, const char *fmt, ...)
{
	struct timespec ts;
	char line[1024];
	va_list ap;

	if (level > cs_log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One fprintf per line so lines from threads do not interleave. */
	fprintf(stderr, "%lld.%06ld %s %s: %s\n", (long long)ts.tv_sec,
		ts.tv_nsec / 1000, level_names[level & 3], module, line);
}
