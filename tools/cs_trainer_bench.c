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
 * Timing (-m, as tools/mpi_bench.c):
 *   b2b (default, nccl-tests / OSU style): the warm-up iterations are
 *     filled, fenced by barriers and checked; then one fill, a barrier,
 *     and the timed iterations back to back; time(us) is the slowest
 *     rank's total over the iteration count; p50/p99 are percentiles of
 *     the per-iteration gaps (completion to completion, the slowest rank
 *     per iteration). The result of the last timed iteration is checked
 *     too, where it is still checkable (not in-place reductions, whose
 *     input is the previous result).
 *   iter: every iteration starts with a fill and a barrier; the time of
 *     an iteration is the slowest rank's, from its post to its
 *     completion; time(us) is the mean over the timed iterations. A
 *     timed iteration's check waits for a second barrier, so that no
 *     rank checks while another's operation still runs.
 * -k K (buckets, default 1): an iteration is K operations of the size
 *   on K buffers of their own (data of their own: bucket j is shifted by
 *   7 j elements), all posted before any is waited for, as DDP posts its
 *   gradient buckets; every bucket is checked, and time(us), p50 and p99
 *   are per bucket (an iteration's time over K), algbw and busbw of the
 *   K buckets together.
 * cpu(s/GB), b2b only: CPU seconds used during the timed iterations by
 * every trainer and its node's sidecar (read from /proc/PID/stat; the PID
 * from the pid file beside $COLLSTACK_SOCKET, counted by LOCAL_RANK 0),
 * over the bytes all ranks sent (cs_bench_moved); NA in iter mode.
 * -o alltoallv (cs_alltoallv): the size is what each rank sends in all
 * (its blocks add up to it exactly); the count of every pair comes from a
 * matrix every rank computes alike (a2av_matrix()): the split of
 * tools/zipf_split.h, which tools/mpi_bench.c -o alltoallv uses too, so
 * the same size, --skew and --seed give both sides the same matrix:
 * --skew S Zipf weights 1/(k+1)^S, k a destination's place in one
 * permutation of the ranks drawn from --seed N (splitmix64, Fisher-Yates;
 * the same for every sender: one rank is everybody's hottest, as a
 * popular MoE expert), count = floor(size x w_k / sum w), the remainder
 * to the hottest (0, the default: equal blocks; mpi_bench's --zipf-skew,
 * --zipf-seed). On top of it: --zero P about P % of the blocks empty
 * (their weight 0), --silent R rank R sends nothing, --sink R every rank
 * sends everything to rank R. Rank 0 prints each size's matrix before its
 * row ("# counts SIZE: row 0 / row 1 / ...", in elements, as mpi_bench).
 * algbw = size / time, busbw = algbw x (n-1)/n as for alltoall (with the
 * split alone: every row adds up to size and every rank receives its
 * column from n-1 others). Blocks sit in the send buffer in
 * reverse rank order with a gap of one element, and in the receive
 * buffer in rank order with a gap of three; every element of the receive
 * buffer is checked, the gaps too (untouched). --bad counts|displ: first
 * one all-to-all-v that must be refused on every rank (rank 1 expects
 * one element more from rank 0 / rank 1's block for rank 0 lies past its
 * buffer): each rank prints the error to stderr and fails unless it got
 * CS_ERR_BAD_DESC; the sizes then run as usual.
 * -o sendrecv (cs_recv + cs_send, point to point; osu_bibw /
 * MPI_Sendrecv style): the group size must be even; rank i is paired with
 * rank (i + n/2) mod n (one trainer per node: every pair crosses nodes).
 * An iteration: each rank posts its receive from its partner and its send
 * of size bytes to it (tag: the bucket), then waits for both. Element i
 * from s to d is cs_bench_a2a_val(s, d, i) (shifted per bucket as the others),
 * and every element received is checked (set to NaNs first). algbw = busbw =
 * size / time: the bytes each rank sends per iteration (it receives as
 * many), as tools/mpi_bench.c -o sendrecv; cpu(s/GB) over n x size.
 * -o reduce (cs_reduce, sum to rank 0; tools/mpi_bench.c: MPI_Reduce):
 * the others pass a NULL recv; only rank 0's result is checked; the size
 * is not trimmed to a multiple of the ranks; busbw = algbw and cpu(s/GB)
 * over (n - 1) x size, as for broadcast (nccl-tests' reduce).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <collstack/collstack.h>
#include <collstack/moe.h>

#include "bench_util.h"
#include "zipf_split.h"

#define BENCH_MAX_BUCKETS 64

struct bench {
	struct cs_client *c;
	struct cs_group *g;
	int rank, n;
	int buckets; /* -k: posted before waiting */
	size_t stride; /* elements from one bucket's buffer to the next */
	double *meta; /* inside a cs_buf: iters + 2 doubles */
	long sidecar; /* this node's collstackd, counted here; 0: none */
	/* -o alltoallv: the shape options, the matrix of the current size
	 * (mat[i * n + j]: elements from i to j) and this rank's arrays */
	double skew;
	unsigned long long seed;
	int zero_pct, silent, sink;
	int node_sum; /* -o moe: --node-sum 1 */
	int node_rows; /* -o moe: --node-rows 1 */
	int L; /* trainers per node (LOCAL_WORLD_SIZE, as the group's) */
	size_t *mat, *sc, *sd, *rc, *rd;
	size_t rext; /* elements the receive layout spans */
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* The PID of this node's sidecar (the pid file beside the socket), if
 * this trainer is the node's first (LOCAL_RANK 0), which counts its CPU. */
static long sidecar_pid(void)
{
	const char *sock = getenv("COLLSTACK_SOCKET");
	const char *lr = getenv("LOCAL_RANK");
	char path[4096], *slash;
	long pid = 0;
	FILE *f;

	if (!sock || (lr && atoi(lr) != 0) ||
	    (size_t)snprintf(path, sizeof(path), "%s", sock) >= sizeof(path))
		return 0;
	slash = strrchr(path, '/');
	if (!slash || (size_t)(slash - path) + 5 >= sizeof(path))
		return 0;
	strcpy(slash + 1, "pid");
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%ld", &pid) != 1 || pid <= 0)
		pid = 0;
	fclose(f);
	return pid;
}

/* CPU seconds of this trainer and the sidecar it counts. */
static double cpu_now(const struct bench *b)
{
	double c = cs_bench_cpu_self(), s;

	if (b->sidecar && (s = cs_bench_cpu_pid(b->sidecar)) >= 0)
		c += s;
	return c;
}

/* Small integers: float sums stay exact, so the check can be exact. */
static float val(int rank, size_t i)
{
	return (float)((rank * 7 + (int)(i % 97)) % 13);
}

/* sendrecv: this rank's partner */
static int sr_peer(const struct bench *b)
{
	return (b->rank + b->n / 2) % b->n;
}

/* splitmix64: the same sequence on every rank */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * The all-to-all-v matrix for @count elements sent per rank (the header's
 * options; the split of tools/zipf_split.h, as tools/mpi_bench.c), and
 * this rank's arrays: sends in reverse rank order with a gap of 1
 * element, receives in rank order with a gap of 3.
 */
static void a2av_matrix(struct bench *b, size_t count)
{
	size_t n = (size_t)b->n, off;
	unsigned char keep[n];
	int perm[n];

	for (size_t i = 0; i < n; i++) {
		size_t *row = b->mat + i * n;

		/* --zero: sender i's blocks that stay empty */
		for (size_t j = 0; j < n; j++)
			keep[j] = !(b->zero_pct &&
				    mix(b->seed ^ 0x5a5a ^ (i * n + j)) % 100 <
					    (uint64_t)b->zero_pct);
		cs_zipf_split(count, b->n, b->skew, b->seed,
			      b->zero_pct ? keep : NULL, perm, row);
		for (size_t j = 0; j < n; j++) {
			if (b->sink >= 0)
				row[j] = j == (size_t)b->sink ? count : 0;
			if ((int)i == b->silent)
				row[j] = 0;
		}
	}
	off = 0;
	for (size_t j = n; j-- > 0;) {
		b->sc[j] = b->mat[(size_t)b->rank * n + j];
		b->sd[j] = off;
		off += b->sc[j] + 1;
	}
	off = 0;
	for (size_t i = 0; i < n; i++) {
		b->rc[i] = b->mat[i * n + (size_t)b->rank];
		b->rd[i] = off;
		off += b->rc[i] + 3;
	}
	b->rext = off;
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

/* Fill the input of one bucket, its values shifted by @sh elements. */
static void fill(enum cs_bench_op op, const struct bench *b, float *send,
		 float *recv, size_t count, int inplace, size_t sh)
{
	size_t per = count / (size_t)b->n;
	float *in = inplace ? recv : send;

	switch (op) {
	case OP_ALLREDUCE:
	case OP_REDUCE_SCATTER:
	case OP_REDUCE:
		for (size_t i = 0; i < count; i++)
			in[i] = val(b->rank, i + sh);
		break;
	case OP_ALL_GATHER:
		in = inplace ? recv + per * (size_t)b->rank : send;
		for (size_t i = 0; i < per; i++)
			in[i] = val(b->rank, per * (size_t)b->rank + i + sh);
		break;
	case OP_BROADCAST:
		for (size_t i = 0; i < count; i++)
			recv[i] = b->rank ? -1.0f : val(0, i + sh);
		break;
	case OP_ALLTOALL: /* block j (per elements) goes to rank j */
		for (size_t i = 0; i < count; i++)
			send[i] = cs_bench_a2a_val(b->rank, (int)(i / per),
						   i % per + sh);
		break;
	case OP_ALLTOALLV:
		for (int j = 0; j < b->n; j++)
			for (size_t x = 0; x < b->sc[j]; x++)
				send[b->sd[j] + x] =
					cs_bench_a2a_val(b->rank, j, x + sh);
		memset(recv, 0xff, b->rext * sizeof(float));
		return;
	case OP_SENDRECV: /* to the partner */
		for (size_t i = 0; i < count; i++)
			send[i] = cs_bench_a2a_val(b->rank, sr_peer(b), i + sh);
		break;
	}
	if (!inplace && op != OP_BROADCAST)
		memset(recv, 0xff, count * sizeof(float)); /* NaNs */
}

/* Wrong elements of one bucket's result (fill()'s @sh). */
static long check(enum cs_bench_op op, const struct bench *b, const float *recv,
		  size_t count, const float *expect97, size_t sh)
{
	size_t per = count / (size_t)b->n;
	long wrong = 0;

	if (op == OP_ALLTOALLV) { /* every element, the gaps too */
		static const uint32_t nan1 = 0xffffffffu; /* fill()'s */
		size_t at = 0;

		for (int i = 0; i < b->n; i++) {
			for (; at < b->rd[i]; at++)
				wrong += !!memcmp(&recv[at], &nan1,
						  sizeof(float));
			for (size_t x = 0; x < b->rc[i]; x++, at++) {
				float want =
					cs_bench_a2a_val(i, b->rank, x + sh);

				wrong += !!memcmp(&recv[at], &want,
						  sizeof(float));
			}
		}
		for (; at < b->rext; at++)
			wrong += !!memcmp(&recv[at], &nan1, sizeof(float));
		return wrong;
	}
	if (op == OP_REDUCE && b->rank) /* only rank 0 gets the sum */
		return 0;
	if (op == OP_REDUCE_SCATTER) { /* block rank() of the sum */
		size_t lo = per * (size_t)b->rank + sh;

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
		case OP_REDUCE:
			want = expect97[(i + sh) % 97];
			break;
		case OP_ALL_GATHER:
			want = val((int)(i / per), i + sh);
			break;
		case OP_ALLTOALL: /* block i / per came from that rank */
			want = cs_bench_a2a_val((int)(i / per), b->rank,
						i % per + sh);
			break;
		case OP_SENDRECV: /* from the partner */
			want = cs_bench_a2a_val(sr_peer(b), b->rank, i + sh);
			break;
		default:
			want = val(0, i + sh);
			break;
		}
		if (memcmp(&recv[i], &want, sizeof(want)))
			wrong++;
	}
	return wrong;
}

/* Where this rank's result is: in place, reduce-scatter's is the rank's
 * block of the input. */
static float *result(enum cs_bench_op op, const struct bench *b, float *recv,
		     size_t count, int inplace)
{
	if (op == OP_REDUCE_SCATTER && inplace)
		return recv + count / (size_t)b->n * (size_t)b->rank;
	return recv;
}

static int post(enum cs_bench_op op, struct bench *b, float *send, float *recv,
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
	case OP_ALLTOALL: /* never in place (skipped in main) */
		return cs_alltoall(b->g, send, recv, per, CS_F32, r);
	case OP_ALLTOALLV:
		return cs_alltoallv(b->g, send, b->sc, b->sd, recv, b->rc,
				    b->rd, CS_F32, r);
	case OP_REDUCE: /* the others' recv: NULL */
		return cs_reduce(b->g, inplace ? recv : send,
				 b->rank ? NULL : recv, count, CS_F32, CS_SUM,
				 0, r);
	default:
		return cs_broadcast(b->g, recv, count, CS_F32, 0, r);
	}
}

/* Fill every bucket of an iteration (-k). */
static void fill_all(enum cs_bench_op op, const struct bench *b, float *send,
		     float *recv, size_t count, int inplace)
{
	for (int j = 0; j < b->buckets; j++)
		fill(op, b, send + (size_t)j * b->stride,
		     recv + (size_t)j * b->stride, count, inplace,
		     7 * (size_t)j);
}

/* Wrong elements of every bucket of an iteration. */
static long check_all(enum cs_bench_op op, const struct bench *b, float *recv,
		      size_t count, int inplace, const float *expect97)
{
	long wrong = 0;

	for (int j = 0; j < b->buckets; j++)
		wrong += check(op, b,
			       result(op, b, recv + (size_t)j * b->stride,
				      count, inplace),
			       count, expect97, 7 * (size_t)j);
	return wrong;
}

/* Post every bucket of an iteration, then wait for each (the ones posted
 * are waited for even when a later post fails). sendrecv: a bucket is a
 * receive from the partner and a send to it, tag = the bucket. Returns 0
 * or an error. */
static int post_wait(enum cs_bench_op op, struct bench *b, float *send,
		     float *recv, size_t count, int inplace)
{
	cs_req_t r[2 * BENCH_MAX_BUCKETS];
	int n = 0, ret = 0, err;

	for (int k = 0; k < b->buckets && !ret; k++) {
		float *s = send + (size_t)k * b->stride;
		float *v = recv + (size_t)k * b->stride;

		if (op == OP_SENDRECV) {
			ret = cs_recv(b->g, v, count, CS_F32, sr_peer(b),
				      (unsigned)k, &r[n]);
			if (!ret)
				ret = cs_send(b->g, s, count, CS_F32,
					      sr_peer(b), (unsigned)k, &r[++n]);
		} else {
			ret = post(op, b, s, v, count, inplace, &r[n]);
		}
		n += !ret;
	}
	err = ret ? finish(b, ret, 0, cs_bench_op_names[op]) : 0;
	for (int j = 0; j < n; j++) {
		ret = finish(b, 0, r[j], cs_bench_op_names[op]);
		if (ret && !err)
			err = ret;
	}
	return err;
}

/* One size and place, timed: this rank's figures. */
struct timed {
	double *lat; /* per timed iteration, us */
	double total; /* b2b: all timed iterations, us; iter: their sum */
	double cpu; /* b2b: CPU seconds over them (cpu_now); iter: 0 */
	long wrong;
};

/* The iterations before the timed ones: each filled, fenced by barriers
 * and checked, untimed. */
static int warm_up(enum cs_bench_op op, struct bench *b, float *send,
		   float *recv, size_t count, int inplace, int warmup,
		   const float *expect97, struct timed *t)
{
	for (int it = 0; it < warmup; it++) {
		fill_all(op, b, send, recv, count, inplace);
		if (barrier(b))
			return -1;
		if (post_wait(op, b, send, recv, count, inplace) || barrier(b))
			return -1;
		t->wrong += check_all(op, b, recv, count, inplace, expect97);
	}
	return 0;
}

static int run_b2b(enum cs_bench_op op, struct bench *b, float *send,
		   float *recv, size_t count, int inplace, int warmup,
		   int iters, const float *expect97, struct timed *t)
{
	double t0, prev, cpu0;

	/* at least one checked iteration, timed or not */
	if (warm_up(op, b, send, recv, count, inplace, warmup > 0 ? warmup : 1,
		    expect97, t))
		return -1;
	fill_all(op, b, send, recv, count, inplace);
	if (barrier(b))
		return -1;
	cpu0 = cpu_now(b);
	t0 = prev = now_us();
	for (int it = 0; it < iters; it++) {
		double now;

		if (post_wait(op, b, send, recv, count, inplace))
			return -1;
		now = now_us();
		t->lat[it] = now - prev;
		prev = now;
	}
	t->total = prev - t0;
	t->cpu = cpu_now(b) - cpu0;
	/* An in-place reduction's input was the previous result. */
	if (inplace &&
	    (op == OP_ALLREDUCE || op == OP_REDUCE_SCATTER || op == OP_REDUCE))
		return 0;
	if (barrier(b))
		return -1;
	t->wrong += check_all(op, b, recv, count, inplace, expect97);
	return 0;
}

static int run_iter(enum cs_bench_op op, struct bench *b, float *send,
		    float *recv, size_t count, int inplace, int warmup,
		    int iters, const float *expect97, FILE *trace,
		    struct timed *t)
{
	t->total = 0;
	t->cpu = 0;
	for (int it = 0; it < warmup + iters; it++) {
		double t0, dt;

		fill_all(op, b, send, recv, count, inplace);
		if (barrier(b))
			return -1;
		t0 = now_us();
		if (post_wait(op, b, send, recv, count, inplace))
			return -1;
		dt = now_us() - t0;
		if (trace)
			fprintf(trace, "%zu %s %d %.0f %.0f\n",
				count * sizeof(float), inplace ? "in" : "out",
				it - warmup, t0 * 1e3, (t0 + dt) * 1e3);
		if (it < warmup)
			continue;
		t->lat[it - warmup] = dt;
		/* No rank checks (or fills) while another's operation still
		 * runs: on shared cores that work would land in the slowest
		 * rank's time */
		if (barrier(b))
			return -1;
		t->wrong += check_all(op, b, recv, count, inplace, expect97);
	}
	return 0;
}

/*
 * --bad: one all-to-all-v that every rank must see refused (counts that
 * do not add up, or a block outside the buffer on rank 1). Returns 0 if
 * it was, on this rank.
 */
static int a2av_bad(struct bench *b, const char *how, float *send, float *recv,
		    size_t count)
{
	cs_req_t r = 0;
	int ret;

	a2av_matrix(b, count);
	if (b->rank == 1 && !strcmp(how, "counts")) {
		b->rc[0]++;
	} else if (b->rank == 1) { /* past the buffer and its last page */
		b->sc[0] = b->sc[0] ? b->sc[0] : 1;
		b->sd[0] = b->stride * (size_t)b->buckets + 4096;
	}
	ret = cs_alltoallv(b->g, send, b->sc, b->sd, recv, b->rc, b->rd, CS_F32,
			   &r);
	if (!ret)
		ret = cs_wait(b->c, r, -1);
	a2av_matrix(b, count); /* the proper one again */
	fprintf(stderr,
		"cs-trainer-bench rank %d: alltoallv --bad %s: %s (%s)\n",
		b->rank, how, cs_strerror(ret), ret ? cs_errmsg(b->c) : "");
	return ret == CS_ERR_BAD_DESC ? 0 : -1;
}

/* The matrix of a size, in elements, as tools/mpi_bench.c prints it:
 * "# counts SIZE: row 0 / row 1 / ..." (row i: what rank i sends to each
 * rank), for scripts/bench-vs-mpi.sh to compare the two sides. */
static void print_counts(const struct bench *b, size_t count)
{
	size_t n = (size_t)b->n;

	printf("# counts %zu:", count * sizeof(float));
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++)
			printf("%s%zu",
			       j   ? " "
			       : i ? " / "
				   : " ",
			       b->mat[i * n + j]);
	printf("\n");
}

/* Rank 0's row: the columns of tools/mpi_bench.c. */
static void print_row(enum cs_bench_op op, const struct bench *b, size_t count,
		      int inplace, int iters, double *lat,
		      const struct timed *t, long wrong,
		      enum cs_bench_mode mode)
{
	double sz = (double)count * sizeof(float), sum = 0, tm, alg, bus;
	char cpu[32] = "NA";

	/* -k: per bucket (an iteration is b->buckets of them) */
	for (int it = 0; it < iters; it++)
		lat[it] /= b->buckets;
	if (mode == CS_BENCH_B2B) {
		tm = t->total / iters / b->buckets;
		double moved = op == OP_SENDRECV
				       ? sz * b->n
				       : cs_bench_moved(op == OP_ALLREDUCE,
							op == OP_BROADCAST ||
								op == OP_REDUCE,
							sz, b->n);

		snprintf(cpu, sizeof(cpu), "%.2f",
			 t->cpu / (moved * iters * b->buckets / 1e9));
	} else {
		for (int it = 0; it < iters; it++)
			sum += lat[it];
		tm = sum / iters;
	}
	/* all-to-all: size is each rank's send buffer (n blocks), busbw
	 * alg x (n-1)/n as nccl-tests (the own block does not cross);
	 * sendrecv: size / time, what each rank sends */
	alg = sz / (tm * 1e3);
	bus = alg;
	if (op == OP_ALLREDUCE)
		bus = alg * 2.0 * (b->n - 1) / b->n;
	else if (op != OP_BROADCAST && op != OP_SENDRECV && op != OP_REDUCE)
		bus = alg * (double)(b->n - 1) / b->n;
	qsort(lat, (size_t)iters, sizeof(double), cs_bench_cmp_double);
	printf("%12zu %12zu %6s %6s %5d %10.1f %8.3f %8.3f %6ld %10.1f %10.1f "
	       "%6s %9s\n",
	       count * sizeof(float), count, "float",
	       op == OP_ALLREDUCE || op == OP_REDUCE_SCATTER || op == OP_REDUCE
		       ? "sum"
		       : "none",
	       op == OP_BROADCAST || op == OP_REDUCE ? 0 : -1, tm, alg, bus,
	       wrong, lat[(size_t)(iters - 1) / 2],
	       lat[(size_t)ceil(0.99 * iters) - 1], inplace ? "in" : "out",
	       cpu);
	fflush(stdout);
}

/*
 * -o moe (collstack/moe.h): SIZE is each rank's tokens in bytes (tokens of
 * MOE_H f32 values, at least one), top-2 of 2 experts per rank, token t of
 * rank r to experts (3r + 5t) mod E and the next one; an iteration is
 * dispatch, the experts (y = (e + 1) x), combine. Each rank checks every
 * value of its combined output against its own reference (the same sum in
 * slot order: the same bits). time: the slowest rank's mean per iteration.
 */
#define MOE_H 512
#define MOE_MAX_BYTES (8 << 20)

static float moe_x(int r, size_t t, size_t h)
{
	return (float)((r * 31 + (int)(t % 1000) * 7 + (int)h) % 61) / 8.0f;
}

/* The combined value of a token whose input is @v: the sum in slot order;
 * with --node-sum each node's slots summed in slot order (expert e is on
 * rank e / 2, node e / 2 / L), those sums in node order. */
static float moe_ref(const struct bench *b, int L, const float *w,
		     const int32_t *idx, uint32_t K, float v)
{
	float acc = 0.0f;

	if (!b->node_sum) {
		for (uint32_t j = 0; j < K; j++)
			acc += w[j] * ((float)(idx[j] + 1) * v);
		return acc;
	}
	for (int nd = 0; nd < b->n / L; nd++) {
		float part = 0.0f;
		int any = 0;

		for (uint32_t j = 0; j < K; j++)
			if (idx[j] / 2 / L == nd) {
				part += w[j] * ((float)(idx[j] + 1) * v);
				any = 1;
			}
		if (any)
			acc += part;
	}
	return acc;
}

static int run_moe(struct bench *b, size_t minb, size_t maxb, size_t factor,
		   int warmup, int iters)
{
	uint32_t E = 2 * (uint32_t)b->n, K = 2;
	size_t tmax = maxb / (MOE_H * sizeof(float));
	struct cs_moe_layer_cfg cfg = {
		.hidden = MOE_H,
		.topk = K,
		.experts = E,
		.experts_per_rank = 2,
		.flags = (b->node_sum ? CS_MOE_LAYER_NODE_SUM : 0) |
			 (b->node_rows ? CS_MOE_LAYER_NODE_ROWS : 0)
	};
	/* --node-sum: the expert's rank -> node (the trainers of a node are
	 * ranks k L .. k L + L - 1, L = b->L) */
	int L = b->L;
	struct cs_moe_layer *l = NULL;
	float *x, *w, *out;
	int32_t *idx;
	double *lat;
	long bad = 0;
	int ret;

	if (!tmax)
		tmax = 1;
	if (maxb > MOE_MAX_BYTES) { /* the receive room: tokens x ranks */
		fprintf(stderr, "cs-trainer-bench: -o moe: -e at most %d MiB\n",
			MOE_MAX_BYTES >> 20);
		return 2;
	}
	cfg.tokens = (uint32_t)tmax;
	x = malloc(tmax * MOE_H * sizeof(float));
	out = malloc(tmax * MOE_H * sizeof(float));
	w = malloc(tmax * K * sizeof(float));
	idx = malloc(tmax * K * sizeof(int32_t));
	lat = malloc(sizeof(double) * ((size_t)iters + 1));
	ret = x && out && w && idx && lat ? 0 : -ENOMEM;
	if (!ret)
		ret = cs_moe_layer_create(b->g, &cfg, &l);
	if (ret) {
		fprintf(stderr, "cs-trainer-bench: moe layer: %s\n",
			cs_strerror(ret));
		goto out;
	}
	if (!b->rank)
		printf("# op moe ranks %d (libcollstack through collstackd): "
		       "tokens of %d f32, top-%u of %u experts%s%s; size = a "
		       "rank's tokens; time = dispatch + experts + combine\n"
		       "#%11s %8s %10s %8s %10s %10s %6s\n",
		       b->n, MOE_H, K, E, b->node_sum ? ", node-sum" : "",
		       b->node_rows ? ", node-rows" : "", "size", "tokens",
		       "time(us)", "algbw", "p50(us)", "p99(us)", "#wrong");
	for (size_t bytes = minb; bytes <= maxb && !ret; bytes *= factor) {
		size_t T = bytes / (MOE_H * sizeof(float)), q;
		long wrong = 0;
		double total = 0, tm;
		cs_req_t r = 0;

		if (!T)
			T = 1;
		for (size_t t = 0; t < T; t++) {
			for (size_t h = 0; h < MOE_H; h++)
				x[t * MOE_H + h] = moe_x(b->rank, t, h);
			for (uint32_t j = 0; j < K; j++) {
				idx[t * K + j] =
					(int32_t)((3u * (uint32_t)b->rank +
						   5u * (uint32_t)t + j) %
						  E);
				w[t * K + j] = 0.5f + 0.25f * (float)j;
			}
		}
		for (int it = -warmup; it < iters && !ret; it++) {
			double t0;

			if ((ret = barrier(b)))
				break;
			t0 = now_us();
			ret = cs_moe_dispatch(l, (uint32_t)T, x, idx, w, &r);
			if ((ret = finish(b, ret, r, "moe dispatch")))
				break;
			for (uint32_t i = 0; i < cs_moe_local_experts(l); i++) {
				uint32_t e, n;
				const float *rows;
				const uint32_t *a, *c, *d;
				float *y = cs_moe_layer_out(l, i);

				cs_moe_rows(l, i, &e, &n, &rows, &a, &c, &d);
				for (q = 0; q < (size_t)n * MOE_H; q++)
					y[q] = (float)(e + 1) * rows[q];
			}
			ret = cs_moe_combine(l, NULL, out, &r);
			if ((ret = finish(b, ret, r, "moe combine")))
				break;
			if (it >= 0)
				total += lat[it] = now_us() - t0;
			for (size_t t = 0; t < T; t++)
				for (size_t h = 0; h < MOE_H; h++) {
					float acc = moe_ref(b, L, w + t * K,
							    idx + t * K, K,
							    x[t * MOE_H + h]);

					wrong += memcmp(&acc,
							&out[t * MOE_H + h],
							sizeof(acc)) != 0;
				}
		}
		if (ret)
			break;
		/* the slowest rank per iteration; wrong summed */
		memcpy(b->meta, lat, sizeof(double) * (size_t)iters);
		b->meta[iters] = total;
		ret = cs_allreduce(b->g, b->meta, b->meta, (size_t)iters + 1,
				   CS_F64, CS_MAX, &r);
		if ((ret = finish(b, ret, r, "timing max")))
			break;
		memcpy(lat, b->meta, sizeof(double) * (size_t)iters);
		tm = b->meta[iters] / iters;
		b->meta[0] = (double)wrong;
		ret = cs_allreduce(b->g, b->meta, b->meta, 1, CS_F64, CS_SUM,
				   &r);
		if ((ret = finish(b, ret, r, "#wrong sum")))
			break;
		wrong = (long)b->meta[0];
		bad += wrong;
		qsort(lat, (size_t)iters, sizeof(double), cs_bench_cmp_double);
		if (!b->rank)
			printf("%12zu %8zu %10.1f %8.3f %10.1f %10.1f %6ld\n",
			       T * MOE_H * sizeof(float), T, tm,
			       (double)(T * MOE_H * sizeof(float)) / (tm * 1e3),
			       lat[(size_t)(iters - 1) / 2],
			       lat[(size_t)(iters - 1) * 99 / 100], wrong);
	}
out:
	cs_moe_layer_free(l);
	free(x);
	free(out);
	free(w);
	free(idx);
	free(lat);
	return ret ? 1 : bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	size_t minb = 4096, maxb = 64 << 20, factor = 4;
	int iters = 20, warmup = 5, ret = 1, bad = 0, buckets = 1, moe = 0;
	const char *group = "bench";
	struct cs_buf *bs = NULL, *br = NULL, *bm = NULL;
	struct bench b = { 0 };
	enum cs_bench_op op = OP_ALLREDUCE;
	enum cs_bench_mode mode = CS_BENCH_B2B;
	float expect97[97];
	double *lat = NULL;
	float *send, *recv;
	FILE *trace = NULL;
	const char *trace_dir = getenv("COLLSTACK_BENCH_TRACE_DIR");
	const char *bad_how = NULL;
	size_t buflen;

	b.seed = 1;
	b.silent = b.sink = -1;
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
		else if (!strcmp(argv[i], "-k"))
			buckets = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--skew"))
			b.skew = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			b.seed = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--zero"))
			b.zero_pct = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--silent"))
			b.silent = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--sink"))
			b.sink = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--bad"))
			bad_how = argv[i + 1];
		else if (!strcmp(argv[i], "--node-sum"))
			b.node_sum = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--node-rows"))
			b.node_rows = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-m")) {
			if (cs_bench_parse_mode(argv[i + 1], &mode)) {
				fprintf(stderr,
					"cs-trainer-bench: -m %s: b2b "
					"or iter\n",
					argv[i + 1]);
				return 2;
			}
		} else if (!strcmp(argv[i], "-o") &&
			   !strcmp(argv[i + 1], "moe")) {
			moe = 1;
		} else if (!strcmp(argv[i], "-o")) {
			unsigned k;

			for (k = 0; k < CS_BENCH_NOPS; k++)
				if (!strcmp(argv[i + 1], cs_bench_op_names[k]))
					break;
			if (k == CS_BENCH_NOPS) {
				fprintf(stderr,
					"cs-trainer-bench: -o %s: allreduce, "
					"reduce_scatter, all_gather, "
					"broadcast, alltoall, alltoallv, "
					"sendrecv or reduce\n",
					argv[i + 1]);
				return 2;
			}
			op = (enum cs_bench_op)k;
		} else {
			fprintf(stderr,
				"cs-trainer-bench: unknown option "
				"%s\n",
				argv[i]);
			return 2;
		}
	}
	if (factor < 2 || minb < sizeof(float) || maxb < minb || iters < 1 ||
	    warmup < 0 || buckets < 1 || buckets > BENCH_MAX_BUCKETS ||
	    b.skew < 0 || b.zero_pct < 0 || b.zero_pct > 100 ||
	    (bad_how && strcmp(bad_how, "counts") &&
	     strcmp(bad_how, "displ"))) {
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
	b.L = getenv("LOCAL_WORLD_SIZE") ? atoi(getenv("LOCAL_WORLD_SIZE")) : 1;
	if (b.L < 1)
		b.L = 1;
	ret = cs_group_join_env(b.c, group, &b.g);
	if (ret) {
		fprintf(stderr, "cs-trainer-bench: join: %s (%s)\n",
			cs_strerror(ret), cs_errmsg(b.c));
		goto out_client;
	}
	b.rank = cs_group_rank(b.g);
	b.n = cs_group_size(b.g);
	b.buckets = buckets;
	/* all-to-all-v: a rank may receive everything (--sink), and the
	 * layouts have gaps */
	buflen = op == OP_ALLTOALLV
			 ? (size_t)b.n * maxb + 4 * sizeof(float) * (size_t)b.n
			 : maxb;
	b.stride = buflen / sizeof(float);
	if (op == OP_SENDRECV && (b.n < 2 || b.n % 2)) {
		fprintf(stderr,
			"cs-trainer-bench: -o sendrecv pairs rank i "
			"with i + n/2: needs an even number of ranks, "
			"not %d\n",
			b.n);
		ret = 2;
		goto out_group;
	}
	if ((b.silent >= b.n || b.sink >= b.n ||
	     (bad_how && (op != OP_ALLTOALLV || b.n < 2)))) {
		fprintf(stderr, "cs-trainer-bench: --silent/--sink past the "
				"group, or --bad without -o alltoallv on 2+ "
				"ranks\n");
		ret = 2;
		goto out_group;
	}
	b.mat = calloc((size_t)b.n * b.n + 4 * (size_t)b.n, sizeof(size_t));
	b.sc = b.mat + (size_t)b.n * b.n;
	b.sd = b.sc + b.n;
	b.rc = b.sd + b.n;
	b.rd = b.rc + b.n;
	ret = b.mat ? cs_buf_alloc(b.c, buflen * (size_t)buckets, &bs)
		    : -ENOMEM;
	if (!ret)
		ret = cs_buf_alloc(b.c, buflen * (size_t)buckets, &br);
	if (!ret)
		ret = cs_buf_alloc(b.c, sizeof(double) * (size_t)(iters + 2),
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
	if (moe) {
		ret = run_moe(&b, minb, maxb, factor, warmup, iters);
		goto out_bufs;
	}
	b.sidecar = sidecar_pid();
	for (size_t i = 0; i < 97; i++) {
		expect97[i] = 0;
		for (int r = 0; r < b.n; r++)
			expect97[i] += val(r, i);
	}
	if (!b.rank)
		printf("# op %s ranks %d (libcollstack through collstackd), "
		       "timing %s, %d bucket(s) posted before waiting%s\n"
		       "#%11s %12s %6s %6s %5s %10s %8s %8s %6s %10s %10s "
		       "%6s %9s\n",
		       cs_bench_op_names[op], b.n,
		       mode == CS_BENCH_B2B ? "b2b" : "iter", buckets,
		       buckets > 1 ? " (time, p50, p99 per bucket)" : "",
		       "size", "count", "type", "redop", "root", "time(us)",
		       "algbw", "busbw", "#wrong", "p50(us)", "p99(us)",
		       "place", "cpu(s/GB)");
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
				b.rank, b.n, cs_bench_op_names[op]);
	}
	if (bad_how &&
	    a2av_bad(&b, bad_how, send, recv, minb / sizeof(float))) {
		ret = 1;
		goto out_bufs;
	}
	for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
		size_t count = bytes / sizeof(float);

		/* a pair's message is kept whole, a reduce's too */
		if (op != OP_SENDRECV && op != OP_REDUCE)
			count -= count % (size_t)b.n;
		if (op == OP_ALLTOALLV) {
			a2av_matrix(&b, count);
			if (!b.rank) /* tools/mpi_bench.c's format */
				print_counts(&b, count);
		}
		for (int inplace = 0; inplace < 2; inplace++) {
			long wrong = 0;
			cs_req_t r = 0;
			struct timed t = { .lat = lat, .wrong = 0 };

			/* broadcast is in place; all-to-all never */
			if ((op == OP_BROADCAST || op == OP_ALLTOALL ||
			     op == OP_ALLTOALLV || op == OP_SENDRECV) &&
			    inplace)
				continue;
			if (mode == CS_BENCH_B2B)
				ret = run_b2b(op, &b, send, recv, count,
					      inplace, warmup, iters, expect97,
					      &t);
			else
				ret = run_iter(op, &b, send, recv, count,
					       inplace, warmup, iters, expect97,
					       trace, &t);
			if (ret)
				goto out_fail;
			/* slowest rank per iteration and in total; CPU and
			 * wrong summed over ranks */
			memcpy(b.meta, lat, sizeof(double) * (size_t)iters);
			b.meta[iters] = t.total;
			ret = cs_allreduce(b.g, b.meta, b.meta,
					   (size_t)iters + 1, CS_F64, CS_MAX,
					   &r);
			if (finish(&b, ret, r, "timing max"))
				goto out_fail;
			memcpy(lat, b.meta, sizeof(double) * (size_t)iters);
			t.total = b.meta[iters];
			b.meta[0] = (double)t.wrong;
			b.meta[1] = t.cpu;
			ret = cs_allreduce(b.g, b.meta, b.meta, 2, CS_F64,
					   CS_SUM, &r);
			if (finish(&b, ret, r, "#wrong sum"))
				goto out_fail;
			wrong = (long)b.meta[0];
			t.cpu = b.meta[1];
			if (!b.rank)
				print_row(op, &b, count, inplace, iters, lat,
					  &t, wrong, mode);
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
out_group:
	free(b.mat);
	cs_group_leave(b.g);
out_client:
	cs_disconnect(b.c);
	return ret || bad ? 1 : 0;
}
