/* SPDX-License-Identifier: MIT */
/*
 * cs-trace-bench: what one timeline event costs the thread that records
 * it (scripts/bench-trace.sh prints it beside the cluster figures): ns per
 * cs_trace_ev_put() with recording on, with it off, and per clock read
 * (received frames read the clock). Not a test: figures go to
 * BENCHMARKS.md.
 */
#include <stdio.h>
#include <time.h>

#include "observe/trace.h"

#define N 2000000u
#define REPEAT 10 /* the least of them: a shared machine preempts */

static double secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double run(void)
{
	double best = 1e9;

	for (int r = 0; r < REPEAT; r++) {
		double t = secs();

		for (uint32_t i = 0; i < N; i++)
			cs_trace_ev_put(CS_TR_TX, i, 1, i, 2, 1400, i, 0);
		t = (secs() - t) / N * 1e9;
		best = t < best ? t : best;
	}
	return best;
}

int main(void)
{
	double on, off, clk, t;
	volatile cs_ns_t sink = 0;

	if (cs_trace_init(1, 262144, true))
		return 1;
	on = run();
	cs_trace_set(false);
	off = run();
	clk = 1e9;
	for (int r = 0; r < REPEAT; r++) {
		t = secs();
		for (uint32_t i = 0; i < N; i++)
			sink += cs_trace_clock();
		t = (secs() - t) / N * 1e9;
		clk = t < clk ? t : clk;
	}
	printf("trace event: %.2f ns recording, %.2f ns off; clock read "
	       "%.2f ns (least of %d runs of %u)\n",
	       on, off, clk, REPEAT, N);
	return sink == 1;
}
