/* SPDX-License-Identifier: MIT */
/*
 * Small helpers the stand-alone benchmark programs share (cs-trainer-bench,
 * cs-mpi-bench, cs-trainer-peerlost): each links only what it measures, so
 * these are header-only.
 */
#ifndef CS_TOOLS_BENCH_UTIL_H
#define CS_TOOLS_BENCH_UTIL_H

#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

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

/* Timing modes of cs-trainer-bench and cs-mpi-bench (-m). */
enum cs_bench_mode {
	/* nccl-tests / OSU: a barrier, then the timed iterations back to
	 * back; time(us) = the slowest rank's total / iterations */
	CS_BENCH_B2B,
	/* each iteration refilled, a barrier, timed alone (the mean of the
	 * slowest rank's per-iteration times) */
	CS_BENCH_ITER,
};

/* "b2b" or "iter" -> 0 and *m, else -1. */
static inline int cs_bench_parse_mode(const char *s, enum cs_bench_mode *m)
{
	if (!strcmp(s, "b2b"))
		*m = CS_BENCH_B2B;
	else if (!strcmp(s, "iter"))
		*m = CS_BENCH_ITER;
	else
		return -1;
	return 0;
}

/* CPU seconds (user + system, all threads) this process has used. */
static inline double cs_bench_cpu_self(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* CPU seconds process @pid has run, all its threads (the first field of
 * /proc/PID/task/TID/schedstat, in ns: /proc/PID/stat counts 10 ms
 * ticks, too coarse for a short run), or -1 where it cannot be read. */
static inline double cs_bench_cpu_pid(long pid)
{
	char path[64], tpath[64 + 256 + 16];
	unsigned long long ns, sum = 0;
	struct dirent *e;
	int found = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%ld/task", pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(tpath, sizeof(tpath), "%s/%s/schedstat", path,
			 e->d_name);
		f = fopen(tpath, "r");
		if (!f)
			continue;
		if (fscanf(f, "%llu", &ns) == 1) {
			sum += ns;
			found = 1;
		}
		fclose(f);
	}
	closedir(d);
	return found ? (double)sum / 1e9 : -1;
}

/* Bytes all ranks together send for one operation of @bytes on @n ranks,
 * the "moved" of the CPU-seconds-per-GB column: 2(n-1)S for allreduce
 * (reduce-scatter then all-gather, n ranks each sending (n-1)/n of S
 * twice), (n-1)S for reduce-scatter, all-gather and broadcast. */
static inline double cs_bench_moved(int op_allreduce, int op_broadcast,
				    double bytes, int n)
{
	if (op_broadcast)
		return bytes * (n - 1);
	if (op_allreduce)
		return bytes * 2.0 * (n - 1);
	return bytes * (n - 1);
}

/* The ops of tools/cs_trainer_bench.c and tools/mpi_bench.c, in one order
 * (scripts/bench-vs-mpi.sh runs both by name). */
enum cs_bench_op {
	OP_ALLREDUCE,
	OP_REDUCE_SCATTER,
	OP_ALL_GATHER,
	OP_BROADCAST,
	OP_ALLTOALL,
	OP_ALLTOALLV,
	OP_SENDRECV,
	OP_REDUCE /* sum to rank 0 */
};
#define CS_BENCH_NOPS 8

static const char *const cs_bench_op_names[CS_BENCH_NOPS] = {
	"allreduce", "reduce_scatter", "all_gather", "broadcast",
	"alltoall",  "alltoallv",      "sendrecv",   "reduce"
};

/* All-to-all: element @i of the block from rank @src to rank @dst,
 * distinct for every (source, destination) pair at a given @i, exact in
 * f32; both programs fill and check with it. */
static inline float cs_bench_a2a_val(int src, int dst, size_t i)
{
	return (float)(((size_t)src * 4099 + (size_t)dst * 61 + i) % 1000003);
}

#endif
