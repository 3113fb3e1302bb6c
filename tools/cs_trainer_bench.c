/* SPDX-License-Identifier: MIT */
/*
 * cs-trainer-bench: one trainer of `collstack bench` (tools/cmd_bench.c).
 * Connects to its node's sidecar with libcollstack, joins a group from the
 * launcher variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE),
 * runs the collective on shared buffers over a range of sizes, checks
 * every element of every iteration and, on rank 0, prints the columns of
 * tools/mpi_bench.c (nccl-tests style, p50/p99 and place added).
 *
 *   COLLSTACK_SOCKET=... RANK=0 WORLD_SIZE=4 LOCAL_RANK=0 \
 *   LOCAL_WORLD_SIZE=1 cs-trainer-bench -o allreduce -b 4K -e 64M -f 4
 *
 * Timing: every iteration starts with a barrier; the time of an iteration
 * is the slowest rank's, from its post to its completion (an allreduce of
 * the per-iteration times with MAX at the end of each size); time(us) is
 * the mean over the timed iterations, p50/p99 their percentiles. A timed
 * iteration's check waits for a second barrier, so that no rank checks
 * while another's operation still runs.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <collstack/collstack.h>

#include "bench_util.h"

enum op { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_BROADCAST };

/* the names and the order of tools/mpi_bench.c */
static const char *const op_names[] = { "allreduce", "reduce_scatter",
					"all_gather", "broadcast" };
#define NOPS (sizeof(op_names) / sizeof(op_names[0]))

struct bench {
	struct cs_client *c;
	struct cs_group *g;
	int rank, n;
	double *meta; /* inside a cs_buf: iters + 1 doubles */
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Small integers: float sums stay exact, so the check can be exact. */
static float val(int rank, size_t i)
{
	return (float)((rank * 7 + (int)(i % 97)) % 13);
}

static int finish(struct bench *b, int ret, cs_req_t r, const char *what)
{
	if (!ret)
		ret = cs_wait(b->c, r, -1);
	if (ret)
		fprintf(stderr, "cs-trainer-bench rank %d: %s: %s (%s)\n",
			b->rank, what, cs_strerror(ret), cs_errmsg(b->c));
	return ret;
}

static int barrier(struct bench *b)
{
	cs_req_t r = 0;
	int ret = cs_barrier(b->g, &r);

	return finish(b, ret, r, "barrier");
}

/* Fill the input of one iteration. */
static void fill(enum op op, const struct bench *b, float *send, float *recv,
		 size_t count, int inplace)
{
	size_t per = count / (size_t)b->n;
	float *in = inplace ? recv : send;

	switch (op) {
	case OP_ALLREDUCE:
	case OP_REDUCE_SCATTER:
		for (size_t i = 0; i < count; i++)
			in[i] = val(b->rank, i);
		break;
	case OP_ALL_GATHER:
		in = inplace ? recv + per * (size_t)b->rank : send;
		for (size_t i = 0; i < per; i++)
			in[i] = val(b->rank, per * (size_t)b->rank + i);
		break;
	case OP_BROADCAST:
		for (size_t i = 0; i < count; i++)
			recv[i] = b->rank ? -1.0f : val(0, i);
		break;
	}
	if (!inplace && op != OP_BROADCAST)
		memset(recv, 0xff, count * sizeof(float)); /* NaNs */
}

static long check(enum op op, const struct bench *b, const float *recv,
		  size_t count, const float *expect97)
{
	size_t per = count / (size_t)b->n;
	long wrong = 0;

	if (op == OP_REDUCE_SCATTER) { /* block rank() of the sum */
		size_t lo = per * (size_t)b->rank;

		for (size_t i = 0; i < per; i++)
			if (memcmp(&recv[i], &expect97[(lo + i) % 97],
				   sizeof(float)))
				wrong++;
		return wrong;
	}
	for (size_t i = 0; i < count; i++) {
		float want;

		switch (op) {
		case OP_ALLREDUCE:
			want = expect97[i % 97];
			break;
		case OP_ALL_GATHER:
			want = val((int)(i / per), i);
			break;
		default:
			want = val(0, i);
			break;
		}
		if (memcmp(&recv[i], &want, sizeof(want)))
			wrong++;
	}
	return wrong;
}

/* Where this rank's result is: in place, reduce-scatter's is the rank's
 * block of the input. */
static float *result(enum op op, const struct bench *b, float *recv,
		     size_t count, int inplace)
{
	if (op == OP_REDUCE_SCATTER && inplace)
		return recv + count / (size_t)b->n * (size_t)b->rank;
	return recv;
}

static int post(enum op op, struct bench *b, float *send, float *recv,
		size_t count, int inplace, cs_req_t *r)
{
	size_t per = count / (size_t)b->n;

	switch (op) {
	case OP_ALLREDUCE:
		return cs_allreduce(b->g, inplace ? recv : send, recv, count,
				    CS_F32, CS_SUM, r);
	case OP_REDUCE_SCATTER: /* in place: the result in its own block */
		return cs_reduce_scatter(b->g, inplace ? recv : send,
					 inplace ? recv + per * (size_t)b->rank
						 : recv,
					 per, CS_F32, CS_SUM, r);
	case OP_ALL_GATHER:
		return cs_all_gather(
			b->g, inplace ? recv + per * (size_t)b->rank : send,
			recv, per, CS_F32, r);
	default:
		return cs_broadcast(b->g, recv, count, CS_F32, 0, r);
	}
}

int main(int argc, char **argv)
{
	size_t minb = 4096, maxb = 64 << 20, factor = 4;
	int iters = 20, warmup = 5, ret = 1, bad = 0;
	const char *group = "bench";
	struct cs_buf *bs = NULL, *br = NULL, *bm = NULL;
	struct bench b = { 0 };
	enum op op = OP_ALLREDUCE;
	float expect97[97];
	double *lat = NULL;
	float *send, *recv;
	FILE *trace = NULL;
	const char *trace_dir = getenv("COLLSTACK_BENCH_TRACE_DIR");

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-b"))
			minb = cs_bench_parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "-e"))
			maxb = cs_bench_parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "-f"))
			factor = cs_bench_parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "-n"))
			iters = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-w"))
			warmup = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-g"))
			group = argv[i + 1];
		else if (!strcmp(argv[i], "-o")) {
			unsigned k;

			for (k = 0; k < NOPS; k++)
				if (!strcmp(argv[i + 1], op_names[k]))
					break;
			if (k == NOPS) {
				fprintf(stderr,
					"cs-trainer-bench: -o %s: allreduce, "
					"reduce_scatter, all_gather or "
					"broadcast\n",
					argv[i + 1]);
				return 2;
			}
			op = (enum op)k;
		} else {
			fprintf(stderr,
				"cs-trainer-bench: unknown option "
				"%s\n",
				argv[i]);
			return 2;
		}
	}
	if (factor < 2 || minb < sizeof(float) || maxb < minb || iters < 1 ||
	    warmup < 0) {
		fprintf(stderr, "cs-trainer-bench: bad arguments\n");
		return 2;
	}
	ret = cs_connect(NULL, &b.c);
	if (ret) {
		fprintf(stderr,
			"cs-trainer-bench: connect ($COLLSTACK_SOCKET="
			"%s): %s\n",
			getenv("COLLSTACK_SOCKET") ? getenv("COLLSTACK_SOCKET")
						   : "",
			cs_strerror(ret));
		return 1;
	}
	ret = cs_group_join_env(b.c, group, &b.g);
	if (ret) {
		fprintf(stderr, "cs-trainer-bench: join: %s (%s)\n",
			cs_strerror(ret), cs_errmsg(b.c));
		goto out_client;
	}
	b.rank = cs_group_rank(b.g);
	b.n = cs_group_size(b.g);
	ret = cs_buf_alloc(b.c, maxb, &bs);
	if (!ret)
		ret = cs_buf_alloc(b.c, maxb, &br);
	if (!ret)
		ret = cs_buf_alloc(b.c, sizeof(double) * (size_t)(iters + 1),
				   &bm);
	lat = malloc(sizeof(double) * (size_t)iters);
	if (ret || !lat) {
		fprintf(stderr, "cs-trainer-bench: buffers: %s\n",
			cs_strerror(ret ? ret : -ENOMEM));
		ret = 1;
		goto out_bufs;
	}
	send = cs_buf_ptr(bs);
	recv = cs_buf_ptr(br);
	b.meta = cs_buf_ptr(bm);
	for (size_t i = 0; i < 97; i++) {
		expect97[i] = 0;
		for (int r = 0; r < b.n; r++)
			expect97[i] += val(r, i);
	}
	if (!b.rank)
		printf("# op %s ranks %d (libcollstack through collstackd)\n"
		       "#%11s %12s %6s %6s %5s %10s %8s %8s %6s %10s %10s "
		       "%6s\n",
		       op_names[op], b.n, "size", "count", "type", "redop",
		       "root", "time(us)", "algbw", "busbw", "#wrong",
		       "p50(us)", "p99(us)", "place");
	/* $COLLSTACK_BENCH_TRACE_DIR: every operation's post and completion
	 * (CLOCK_MONOTONIC ns) in <dir>/trainer-<rank>.txt, to set against
	 * the sidecars' ipc.trace_dir (scripts/op-breakdown.py) */
	if (trace_dir && *trace_dir) {
		char path[4096];

		snprintf(path, sizeof(path), "%s/trainer-%d.txt", trace_dir,
			 b.rank);
		trace = fopen(path, "w");
		if (!trace)
			fprintf(stderr, "cs-trainer-bench: %s: %s\n", path,
				strerror(errno));
		else
			fprintf(trace,
				"# rank %d of %d, op %s: bytes place "
				"iteration (negative: warm-up) posted "
				"completed (CLOCK_MONOTONIC ns)\n",
				b.rank, b.n, op_names[op]);
	}
	for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
		size_t count = bytes / sizeof(float);

		count -= count % (size_t)b.n;
		for (int inplace = 0; inplace < 2; inplace++) {
			long wrong = 0;
			double sum = 0;
			cs_req_t r = 0;

			if (op == OP_BROADCAST && inplace)
				continue;
			for (int it = 0; it < warmup + iters; it++) {
				double t0, dt;

				fill(op, &b, send, recv, count, inplace);
				if (barrier(&b))
					goto out_fail;
				t0 = now_us();
				ret = post(op, &b, send, recv, count, inplace,
					   &r);
				if (finish(&b, ret, r, op_names[op]))
					goto out_fail;
				dt = now_us() - t0;
				if (trace)
					fprintf(trace, "%zu %s %d %.0f %.0f\n",
						count * sizeof(float),
						inplace ? "in" : "out",
						it - warmup, t0 * 1e3,
						(t0 + dt) * 1e3);
				if (it < warmup)
					continue;
				lat[it - warmup] = dt;
				/* No rank checks (or fills) while another's
				 * operation still runs: on shared cores that
				 * work would land in the slowest rank's time
				 * (tools/mpi_bench.c checks in a loop of its
				 * own, untimed) */
				if (barrier(&b))
					goto out_fail;
				wrong += check(
					op, &b,
					result(op, &b, recv, count, inplace),
					count, expect97);
			}
			/* slowest rank per iteration, wrong over ranks */
			memcpy(b.meta, lat, sizeof(double) * (size_t)iters);
			ret = cs_allreduce(b.g, b.meta, b.meta, (size_t)iters,
					   CS_F64, CS_MAX, &r);
			if (finish(&b, ret, r, "timing max"))
				goto out_fail;
			memcpy(lat, b.meta, sizeof(double) * (size_t)iters);
			b.meta[0] = (double)wrong;
			ret = cs_allreduce(b.g, b.meta, b.meta, 1, CS_F64,
					   CS_SUM, &r);
			if (finish(&b, ret, r, "#wrong sum"))
				goto out_fail;
			wrong = (long)b.meta[0];
			if (!b.rank) {
				double t, sz = (double)count * sizeof(float);
				double alg, bus;

				for (int it = 0; it < iters; it++)
					sum += lat[it];
				t = sum / iters;
				alg = sz / (t * 1e3);
				bus = alg;
				if (op == OP_ALLREDUCE)
					bus = alg * 2.0 * (b.n - 1) / b.n;
				else if (op != OP_BROADCAST)
					bus = alg * (double)(b.n - 1) / b.n;
				qsort(lat, (size_t)iters, sizeof(double),
				      cs_bench_cmp_double);
				printf("%12zu %12zu %6s %6s %5d %10.1f %8.3f "
				       "%8.3f %6ld %10.1f %10.1f %6s\n",
				       count * sizeof(float), count, "float",
				       op == OP_ALLREDUCE ||
						       op == OP_REDUCE_SCATTER
					       ? "sum"
					       : "none",
				       op == OP_BROADCAST ? 0 : -1, t, alg, bus,
				       wrong, lat[(size_t)(iters - 1) / 2],
				       lat[(size_t)ceil(0.99 * iters) - 1],
				       inplace ? "in" : "out");
				fflush(stdout);
			}
			if (wrong)
				bad = 1; /* keep going, fail at the end */
		}
	}
	goto out_bufs;
out_fail:
	ret = 1;
out_bufs:
	if (trace && fclose(trace))
		fprintf(stderr, "cs-trainer-bench: trace: %s\n",
			strerror(errno));
	free(lat);
	cs_buf_free(bm);
	cs_buf_free(br);
	cs_buf_free(bs);
	cs_group_leave(b.g);
out_client:
	cs_disconnect(b.c);
	return ret || bad ? 1 : 0;
}
