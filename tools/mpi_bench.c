/* SPDX-License-Identifier: MIT */
/*
 * mpi_bench: the Open MPI side of scripts/bench-vs-mpi.sh. Runs the same
 * operations and sizes as `collstack bench` and prints the same
 * nccl-tests-style columns, so both stacks are compared like for like.
 *
 *   mpirun -np 4 build/tools/cs-mpi-bench -o allreduce -b 4K -e 64M -f 4
 *                                         [-m b2b|iter]
 *   mpirun -np 4 build/tools/cs-mpi-bench -o ps [--pattern push|pull|pushpull]
 *          [--row-bytes B] [--keys-per-push P] [--rows N] [--skew Z]
 *          [--mode sync|async|ssp:S] [--dense 0|1] [-n ITERS] [-w WARMUP]
 *   (the parameter-server pattern of `collstack bench -o ps`, below)
 *   mpirun -np 4 build/tools/cs-mpi-bench -o alltoall|alltoallv ...
 *          [--zipf-skew Z] [--zipf-seed S]   (alltoallv: the exponent of
 *          its counts, default 1.1, and their seed, default 1)
 *   mpirun -np 4 build/tools/cs-mpi-bench -o sendrecv ...   (pairs)
 *
 * alltoall (MPI_Alltoall): size is each rank's send buffer, n blocks of
 * size/n, block j to rank j; element i of the block from s to d is
 * cs_bench_a2a_val(s, d, i), as tools/cs_trainer_bench.c; algbw = size / time,
 * busbw = algbw x (n-1)/n (nccl-tests: the own block does not cross).
 * alltoallv (MPI_Alltoallv): every rank sends size bytes in all, split
 * over the destinations by tools/zipf_split.h, the rule cs-trainer-bench
 * -o alltoallv uses too (its --skew Z --seed S are --zipf-skew Z
 * --zipf-seed S here): Zipf weights w = 1/(k+1)^Z, k the destination's
 * place in a permutation of the ranks drawn from the seed (splitmix64,
 * Fisher-Yates; the same for every rank, so one rank is every rank's
 * hottest destination, as a popular MoE expert); count(d) = floor(
 * elements x w_k / sum w), the remainder to the hottest. Rank 0 prints
 * the matrix of each size ("# counts SIZE: row 0 / row 1 / ...", in
 * elements, the format of cs-trainer-bench) before its row. Element i of
 * the block from s to d is cs_bench_a2a_val(s, d, i), as for alltoall, and
 * every element received is checked (the receive buffer is set to NaNs first).
 * algbw = size / time; busbw = algbw x (n-1)/n, as alltoall: every rank's
 * counts add up to size and every rank receives its column from n-1
 * others, so that is what crosses per rank on average.
 *
 * sendrecv (MPI_Irecv + MPI_Isend to the partner, then MPI_Waitall, as
 * osu_bibw / MPI_Sendrecv): n must be even; rank i is paired with rank
 * (i + n/2) mod n (one rank per node: every pair crosses nodes), and each
 * rank sends size bytes to its partner and receives size bytes from it
 * per iteration; element i from s to d is cs_bench_a2a_val(s, d, i), every
 * element received is checked (set to NaNs first). algbw = busbw = size / time:
 * the bytes each rank sends per iteration (each also receives as much),
 * as cs-trainer-bench -o sendrecv.
 *
 * Timing, -m as in tools/cs_trainer_bench.c: b2b (default; nccl-tests and
 * OSU: a barrier, the timed iterations back to back, time(us) = the
 * slowest rank's total / iterations, p50/p99 over the per-iteration gaps)
 * or iter (each iteration refilled, a barrier, timed alone; the mean of
 * the slowest rank's times). Every warm-up iteration is checked, and in
 * iter mode every timed one (b2b: one at least). cpu(s/GB), b2b only: the
 * ranks' CPU seconds (getrusage) over the timed iterations, summed, over
 * the bytes all ranks sent (cs_bench_moved).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench_util.h"
#include "zipf_split.h"
#include "collectives/ps/ps.h"
#include "collectives/ps/ps_pattern.h"

/* alltoallv: elements every rank sends to each rank (the same split on
 * every rank: tools/zipf_split.h), this rank's displacements, and what it
 * receives. */
static int *v_cnt, *v_sdis, *v_rcnt, *v_rdis;
static uint64_t v_seed = 1;
static double v_skew = 1.1;

/* The split of @count elements over @n destinations (tools/zipf_split.h,
 * as cs-trainer-bench), into v_cnt; rank 0 prints it (every sender's row,
 * all alike here) as cs-trainer-bench does, for scripts/bench-vs-mpi.sh to
 * compare the two sides' matrices. */
static void v_counts(size_t count, int n, int rank)
{
	int *perm = malloc(sizeof(int) * (size_t)n);
	size_t *c = malloc(sizeof(size_t) * (size_t)n);

	if (!perm || !c) {
		fprintf(stderr, "mpi_bench: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	cs_zipf_split(count, n, v_skew, v_seed, NULL, perm, c);
	for (int d = 0; d < n; d++)
		v_cnt[d] = (int)c[d];
	if (!rank) {
		printf("# counts %zu:", count * sizeof(float));
		for (int s = 0; s < n; s++)
			for (int d = 0; d < n; d++)
				printf("%s%zu",
				       d   ? " "
				       : s ? " / "
					   : " ",
				       c[d]);
		printf("\n");
	}
	free(perm);
	free(c);
}

/* sendrecv: this rank's partner, and the exchange (posted both ways,
 * then waited for) */
static int sr_peer(int rank, int n)
{
	return (rank + n / 2) % n;
}

static void sendrecv(float *send, float *recv, size_t count, int rank, int n)
{
	MPI_Request r[2];
	int peer = sr_peer(rank, n);

	MPI_Irecv(recv, (int)count, MPI_FLOAT, peer, 7, MPI_COMM_WORLD, &r[0]);
	MPI_Isend(send, (int)count, MPI_FLOAT, peer, 7, MPI_COMM_WORLD, &r[1]);
	MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
}

/* Value every rank puts at element i: small integers, so float sums are
 * exact and the check can be exact too. */
static float val(int rank, size_t i)
{
	return (float)((rank * 7 + (int)(i % 97)) % 13);
}

/* Run one op; returns the number of wrong elements on this rank. */
static long run_once(enum cs_bench_op op, float *send, float *recv,
		     size_t count, int rank, int n, int inplace)
{
	size_t per = count / (size_t)n;
	long wrong = 0;

	switch (op) {
	case OP_ALLREDUCE:
		if (inplace)
			MPI_Allreduce(MPI_IN_PLACE, recv, (int)count, MPI_FLOAT,
				      MPI_SUM, MPI_COMM_WORLD);
		else
			MPI_Allreduce(send, recv, (int)count, MPI_FLOAT,
				      MPI_SUM, MPI_COMM_WORLD);
		for (size_t i = 0; i < count; i++) {
			float want = 0;

			for (int r = 0; r < n; r++)
				want += val(r, i);
			wrong += recv[i] != want;
		}
		break;
	case OP_REDUCE_SCATTER:
		MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : send, recv,
					 (int)per, MPI_FLOAT, MPI_SUM,
					 MPI_COMM_WORLD);
		for (size_t i = 0; i < per; i++) {
			float want = 0;

			for (int r = 0; r < n; r++)
				want += val(r, (size_t)rank * per + i);
			wrong += recv[i] != want;
		}
		break;
	case OP_ALL_GATHER:
		MPI_Allgather(inplace ? MPI_IN_PLACE : send, (int)per,
			      MPI_FLOAT, recv, (int)per, MPI_FLOAT,
			      MPI_COMM_WORLD);
		for (size_t i = 0; i < per * (size_t)n; i++)
			wrong += recv[i] != val((int)(i / per), i % per);
		break;
	case OP_BROADCAST:
		MPI_Bcast(recv, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
		for (size_t i = 0; i < count; i++)
			wrong += recv[i] != val(0, i);
		break;
	case OP_ALLTOALL: /* block i / per came from that rank */
		MPI_Alltoall(send, (int)per, MPI_FLOAT, recv, (int)per,
			     MPI_FLOAT, MPI_COMM_WORLD);
		for (size_t i = 0; i < per * (size_t)n; i++) {
			float want =
				cs_bench_a2a_val((int)(i / per), rank, i % per);

			wrong += memcmp(&recv[i], &want, sizeof(want)) != 0;
		}
		break;
	case OP_ALLTOALLV:
		MPI_Alltoallv(send, v_cnt, v_sdis, MPI_FLOAT, recv, v_rcnt,
			      v_rdis, MPI_FLOAT, MPI_COMM_WORLD);
		for (int s = 0; s < n; s++)
			for (int i = 0; i < v_rcnt[s]; i++) {
				float want =
					cs_bench_a2a_val(s, rank, (size_t)i);

				wrong += memcmp(&recv[v_rdis[s] + i], &want,
						sizeof(want)) != 0;
			}
		break;
	case OP_REDUCE:
		MPI_Reduce(inplace && !rank ? MPI_IN_PLACE : send, recv,
			   (int)count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
		for (size_t i = 0; !rank && i < count; i++) {
			float want = 0;

			for (int r = 0; r < n; r++)
				want += val(r, i);
			wrong += recv[i] != want;
		}
		break;
	case OP_SENDRECV:
		sendrecv(send, recv, count, rank, n);
		for (size_t i = 0; i < count; i++) {
			float want =
				cs_bench_a2a_val(sr_peer(rank, n), rank, i);

			wrong += memcmp(&recv[i], &want, sizeof(want)) != 0;
		}
		break;
	}
	return wrong;
}

/* The collective alone, as timed. */
static void timed_op(enum cs_bench_op op, float *send, float *recv,
		     size_t count, int rank, int n, int inplace)
{
	switch (op) {
	case OP_ALLREDUCE:
		MPI_Allreduce(inplace ? MPI_IN_PLACE : send, recv, (int)count,
			      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		break;
	case OP_REDUCE_SCATTER:
		MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : send, recv,
					 (int)(count / (size_t)n), MPI_FLOAT,
					 MPI_SUM, MPI_COMM_WORLD);
		break;
	case OP_ALL_GATHER:
		MPI_Allgather(inplace ? MPI_IN_PLACE : send,
			      (int)(count / (size_t)n), MPI_FLOAT, recv,
			      (int)(count / (size_t)n), MPI_FLOAT,
			      MPI_COMM_WORLD);
		break;
	case OP_BROADCAST:
		MPI_Bcast(recv, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
		break;
	case OP_ALLTOALL:
		MPI_Alltoall(send, (int)(count / (size_t)n), MPI_FLOAT, recv,
			     (int)(count / (size_t)n), MPI_FLOAT,
			     MPI_COMM_WORLD);
		break;
	case OP_ALLTOALLV:
		MPI_Alltoallv(send, v_cnt, v_sdis, MPI_FLOAT, recv, v_rcnt,
			      v_rdis, MPI_FLOAT, MPI_COMM_WORLD);
		break;
	case OP_SENDRECV:
		sendrecv(send, recv, count, rank, n);
		break;
	case OP_REDUCE:
		MPI_Reduce(inplace && !rank ? MPI_IN_PLACE : send, recv,
			   (int)count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
		break;
	}
}

static void fill(enum cs_bench_op op, float *send, float *recv, size_t count,
		 int rank, int n, int inplace)
{
	size_t per = count / (size_t)n;

	for (size_t i = 0; i < count; i++)
		send[i] = val(rank, i);
	switch (op) {
	case OP_ALLREDUCE:
	case OP_REDUCE_SCATTER:
	case OP_REDUCE:
		memcpy(recv, send, count * sizeof(float));
		break;
	case OP_ALL_GATHER:
		memset(recv, 0, count * sizeof(float));
		for (size_t i = 0; i < per; i++) {
			send[i] = val(rank, i);
			if (inplace)
				recv[(size_t)rank * per + i] = val(rank, i);
		}
		break;
	case OP_BROADCAST:
		if (rank == 0)
			memcpy(recv, send, count * sizeof(float));
		else
			memset(recv, 0, count * sizeof(float));
		break;
	case OP_ALLTOALL: /* block j (per elements) goes to rank j */
		for (size_t i = 0; i < count; i++)
			send[i] =
				cs_bench_a2a_val(rank, (int)(i / per), i % per);
		memset(recv, 0xff, count * sizeof(float)); /* NaNs */
		break;
	case OP_ALLTOALLV:
		for (int d = 0; d < n; d++)
			for (int i = 0; i < v_cnt[d]; i++)
				send[v_sdis[d] + i] =
					cs_bench_a2a_val(rank, d, (size_t)i);
		/* what this rank receives: n blocks of v_cnt[rank] */
		memset(recv, 0xff,
		       (size_t)n * (size_t)v_cnt[rank] * sizeof(float));
		break;
	case OP_SENDRECV: /* to the partner */
		for (size_t i = 0; i < count; i++)
			send[i] = cs_bench_a2a_val(rank, sr_peer(rank, n), i);
		memset(recv, 0xff, count * sizeof(float)); /* NaNs */
		break;
	}
}

/* ---- -o ps: the parameter-server pattern (collectives/ps/ps_pattern.h) --
 *
 * Every rank is a server and a worker. Keys are owned as in collstack's
 * sidecar job (the same consistent-hashing map over ranks 0..n-1, 64
 * virtual nodes). A step: the worker combines duplicate keys, sends each
 * owner one push message (keys + f32 rows; sync and ssp: every owner, an
 * empty push where it owns no key, as the sidecar's worker engine does)
 * and/or one pull message (the unique keys it owns), point to point,
 * then serves and waits until every push is acknowledged and every pull
 * answered. A server applies a push on arrival (row -= lr * g), answers
 * with an ack, and answers a pull once the mode allows it (sync: every
 * worker pushed the versions below the pull's clock; ssp:s: below clock
 * - s; async: at once). Every pulled row is checked exactly as the
 * sidecar's (cs_ps_pat_check), and every shard at the end. */

enum { T_PUSH = 11, T_ACK, T_PULL, T_REPLY };

struct ps_pend { /* a pull waiting for its clock */
	int src;
	uint64_t clock;
	uint32_t n;
	uint64_t *keys;
};

struct ps_mpi {
	int rank, n;
	struct cs_ps_pat pat;
	struct cs_ps_shardmap map;
	enum cs_ps_mode mode;
	uint32_t stale, dim;
	int32_t *idx; /* key -> row of this shard, or -1 */
	float *tab;
	uint64_t *wclock; /* per worker: push messages taken (sync, ssp) */
	struct ps_pend *pend;
	uint32_t npend, cpend;
	MPI_Request *reqs;
	void **rbufs;
	uint32_t nreqs, creqs;
	uint32_t acks_left, replies_left;
	/* worker: unique keys per owner of the pull in flight */
	uint64_t *ukeys;
	uint32_t *ustart, *ucount;
	float *urows;
};

static void ps_die(const char *why)
{
	fprintf(stderr, "mpi_bench -o ps: %s\n", why);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

static void *ps_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		ps_die("out of memory");
	return p;
}

/* Send @buf (ours now, freed once sent). */
static void ps_isend(struct ps_mpi *s, int dst, int tag, void *buf, size_t len)
{
	if (s->nreqs == s->creqs) {
		/* free what completed before growing */
		uint32_t k = 0;

		for (uint32_t i = 0; i < s->nreqs; i++) {
			int done = 0;

			MPI_Test(&s->reqs[i], &done, MPI_STATUS_IGNORE);
			if (done) {
				free(s->rbufs[i]);
			} else {
				s->reqs[k] = s->reqs[i];
				s->rbufs[k++] = s->rbufs[i];
			}
		}
		s->nreqs = k;
		if (s->nreqs == s->creqs) {
			s->creqs = s->creqs ? 2 * s->creqs : 64;
			s->reqs = realloc(s->reqs, sizeof(*s->reqs) * s->creqs);
			s->rbufs =
				realloc(s->rbufs, sizeof(*s->rbufs) * s->creqs);
			if (!s->reqs || !s->rbufs)
				ps_die("out of memory");
		}
	}
	MPI_Isend(buf, (int)len, MPI_BYTE, dst, tag, MPI_COMM_WORLD,
		  &s->reqs[s->nreqs]);
	s->rbufs[s->nreqs++] = buf;
}

static bool ps_pull_ready(const struct ps_mpi *s, uint64_t clock)
{
	uint64_t need = cs_ps_pat_lo_version(s->mode, s->stale, clock), lo;

	if (s->mode == CS_PS_ASYNC)
		return true;
	lo = s->wclock[0];
	for (int w = 1; w < s->n; w++)
		lo = s->wclock[w] < lo ? s->wclock[w] : lo;
	return lo >= need;
}

static void ps_reply(struct ps_mpi *s, int dst, const uint64_t *keys,
		     uint32_t n)
{
	size_t rb = (size_t)s->dim * sizeof(float);
	uint8_t *buf = ps_xmalloc(rb * n);

	for (uint32_t i = 0; i < n; i++)
		memcpy(buf + rb * i, s->tab + (size_t)s->idx[keys[i]] * s->dim,
		       rb);
	ps_isend(s, dst, T_REPLY, buf, rb * n);
}

static void ps_serve_parked(struct ps_mpi *s)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < s->npend; i++) {
		struct ps_pend *p = &s->pend[i];

		if (ps_pull_ready(s, p->clock)) {
			ps_reply(s, p->src, p->keys, p->n);
			free(p->keys);
		} else {
			s->pend[k++] = *p;
		}
	}
	s->npend = k;
}

/* One message, if any: serve it (server) or take it (worker). */
static int ps_progress(struct ps_mpi *s)
{
	MPI_Status st;
	int flag = 0, len;
	uint8_t *buf;
	uint64_t hdr[2]; /* version or clock, nkeys */

	MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
	if (!flag)
		return 0;
	MPI_Get_count(&st, MPI_BYTE, &len);
	buf = ps_xmalloc((size_t)len);
	MPI_Recv(buf, len, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD,
		 MPI_STATUS_IGNORE);
	switch (st.MPI_TAG) {
	case T_PUSH: {
		const uint64_t *keys = (const uint64_t *)(buf + sizeof(hdr));
		const float *g;

		memcpy(hdr, buf, sizeof(hdr));
		g = (const float *)(keys + hdr[1]);
		for (uint64_t i = 0; i < hdr[1]; i++) {
			float *row = s->tab + (size_t)s->idx[keys[i]] * s->dim;

			for (uint32_t j = 0; j < s->dim; j++)
				row[j] -= CS_PS_PAT_LR * g[i * s->dim + j];
		}
		s->wclock[st.MPI_SOURCE]++;
		ps_isend(s, st.MPI_SOURCE, T_ACK, ps_xmalloc(8), 8);
		ps_serve_parked(s);
		break;
	}
	case T_PULL:
		memcpy(hdr, buf, sizeof(hdr));
		if (ps_pull_ready(s, hdr[0])) {
			ps_reply(s, st.MPI_SOURCE,
				 (const uint64_t *)(buf + sizeof(hdr)),
				 (uint32_t)hdr[1]);
		} else {
			struct ps_pend p = { st.MPI_SOURCE, hdr[0],
					     (uint32_t)hdr[1],
					     ps_xmalloc(hdr[1] * 8) };

			memcpy(p.keys, buf + sizeof(hdr), hdr[1] * 8);
			if (s->npend == s->cpend) {
				s->cpend = s->cpend ? 2 * s->cpend : 16;
				s->pend = realloc(s->pend,
						  sizeof(*s->pend) * s->cpend);
				if (!s->pend)
					ps_die("out of memory");
			}
			s->pend[s->npend++] = p;
		}
		break;
	case T_ACK:
		s->acks_left--;
		break;
	case T_REPLY: {
		int from = st.MPI_SOURCE;

		memcpy(s->urows + (size_t)s->ustart[from] * s->dim, buf,
		       (size_t)len);
		s->replies_left--;
		break;
	}
	}
	free(buf);
	return 1;
}

/* Keys and rows by owner: sort the (combined) unique keys by owner. */
static void ps_by_owner(struct ps_mpi *s, uint64_t *u, float *g, uint32_t nu,
			bool with_rows)
{
	uint32_t *own = ps_xmalloc(sizeof(*own) * nu), pos[1024];
	uint64_t *k2 = ps_xmalloc(8 * (size_t)nu);
	float *g2 = with_rows ? ps_xmalloc(4 * (size_t)nu * s->dim) : NULL;

	memset(s->ucount, 0, sizeof(*s->ucount) * (size_t)s->n);
	for (uint32_t i = 0; i < nu; i++) {
		own[i] = cs_ps_shard_of(&s->map, CS_PS_PAT_TABLE, u[i]);
		s->ucount[own[i]]++;
	}
	for (int r = 0, a = 0; r < s->n; r++) {
		s->ustart[r] = (uint32_t)a;
		pos[r] = (uint32_t)a;
		a += (int)s->ucount[r];
	}
	for (uint32_t i = 0; i < nu; i++) {
		uint32_t p = pos[own[i]]++;

		k2[p] = u[i];
		if (g2)
			memcpy(g2 + (size_t)p * s->dim, g + (size_t)i * s->dim,
			       4 * (size_t)s->dim);
	}
	memcpy(u, k2, 8 * (size_t)nu);
	if (g2)
		memcpy(g, g2, 4 * (size_t)nu * s->dim);
	free(own);
	free(k2);
	free(g2);
}

static void ps_send_kind(struct ps_mpi *s, int tag, uint64_t v,
			 const uint64_t *u, const float *g)
{
	for (int r = 0; r < s->n; r++) {
		uint32_t c = s->ucount[r];
		size_t len =
			16 + 8 * (size_t)c + (g ? 4 * (size_t)c * s->dim : 0);
		uint64_t hdr[2] = { v, c };
		uint8_t *buf;

		if (!c && (tag == T_PULL || s->mode == CS_PS_ASYNC))
			continue;
		buf = ps_xmalloc(len);
		memcpy(buf, hdr, 16);
		memcpy(buf + 16, u + s->ustart[r], 8 * (size_t)c);
		if (g)
			memcpy(buf + 16 + 8 * (size_t)c,
			       g + (size_t)s->ustart[r] * s->dim,
			       4 * (size_t)c * s->dim);
		if (tag == T_PUSH)
			s->acks_left++;
		else
			s->replies_left++;
		ps_isend(s, r, tag, buf, len);
	}
}

static int ps_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int ps_main(int argc, char **argv, int rank, int n)
{
	const char *pattern = "pushpull", *mode = "sync";
	unsigned rb = 64, kpp = 256, rows = 100000, iters = 100, warm = 5;
	double skew = 0;
	int dense = 0, pat;
	struct ps_mpi s = { .rank = rank, .n = n };
	uint32_t *srv, *tot, *lo_all, *own, steps, versions, nown = 0;
	uint64_t *keys, *u, lo_v = 0, rows_timed = 0;
	float *grads, *pulled;
	double *lat, t_timed = 0, t_end = 0;
	long wrong = 0, checked = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		const char *a = argv[i], *v = argv[i + 1];

		if (!strcmp(a, "--pattern"))
			pattern = v;
		else if (!strcmp(a, "--row-bytes"))
			rb = (unsigned)atoi(v);
		else if (!strcmp(a, "--keys-per-push"))
			kpp = (unsigned)atoi(v);
		else if (!strcmp(a, "--rows"))
			rows = (unsigned)atoi(v);
		else if (!strcmp(a, "--skew"))
			skew = atof(v);
		else if (!strcmp(a, "--mode"))
			mode = v;
		else if (!strcmp(a, "--dense"))
			dense = atoi(v);
		else if (!strcmp(a, "-n"))
			iters = (unsigned)atoi(v);
		else if (!strcmp(a, "-w"))
			warm = (unsigned)atoi(v);
	}
	pat = !strcmp(pattern, "push") ? 1 : !strcmp(pattern, "pull") ? 2 : 0;
	if (dense)
		kpp = rows;
	if (cs_ps_mode_parse(mode, &s.mode, &s.stale) || rb < 4 || rb % 4 ||
	    rb > 1024 || !iters || n > 1024 ||
	    (strcmp(pattern, "pushpull") && pat == 0) ||
	    cs_ps_pat_init(&s.pat, rows, kpp, (uint32_t)n, rb / 4, skew,
			   dense)) {
		if (!rank)
			fprintf(stderr, "mpi_bench -o ps: bad arguments\n");
		return 2;
	}
	s.dim = rb / 4;
	srv = ps_xmalloc(sizeof(*srv) * (size_t)n);
	for (int r = 0; r < n; r++)
		srv[r] = (uint32_t)r;
	if (cs_ps_shardmap_init(&s.map, srv, (uint32_t)n, 64))
		ps_die("shard map");
	steps = warm + iters + (pat == 1);
	versions = pat == 2 ? warm : warm + iters;
	s.idx = ps_xmalloc(sizeof(*s.idx) * rows);
	for (uint32_t k = 0; k < rows; k++)
		s.idx[k] = cs_ps_shard_of(&s.map, CS_PS_PAT_TABLE, k) ==
					   (uint32_t)rank
				   ? (int32_t)nown++
				   : -1;
	s.tab = ps_xmalloc(4 * (size_t)nown * s.dim);
	for (size_t i = 0; i < (size_t)nown * s.dim; i++)
		s.tab[i] = 1.0f;
	s.wclock = calloc((size_t)n, sizeof(*s.wclock));
	s.ustart = ps_xmalloc(sizeof(*s.ustart) * (size_t)n);
	s.ucount = ps_xmalloc(sizeof(*s.ucount) * (size_t)n);
	tot = calloc(rows, sizeof(*tot));
	lo_all = calloc(rows, sizeof(*lo_all));
	own = calloc(rows, sizeof(*own));
	keys = ps_xmalloc(8 * (size_t)kpp);
	u = ps_xmalloc(8 * (size_t)kpp);
	grads = ps_xmalloc(4 * (size_t)kpp * s.dim);
	pulled = ps_xmalloc(4 * (size_t)kpp * s.dim);
	s.urows = ps_xmalloc(4 * (size_t)kpp * s.dim);
	lat = calloc(iters, sizeof(*lat));
	if (!s.wclock || !tot || !lo_all || !own || !lat)
		ps_die("out of memory");
	cs_ps_pat_count(&s.pat, 0, versions, tot);
	MPI_Barrier(MPI_COMM_WORLD);
	for (uint32_t it = 0; it < steps; it++) {
		bool push = pat == 1   ? it < versions
			    : pat == 2 ? it < warm
				       : true;
		bool pull = pat == 1 ? !push : true;
		uint64_t clock = pat == 1   ? versions
				 : pat == 2 ? (push ? it + 1u : warm)
					    : it + 1u;
		bool timed = it >= warm && it < warm + iters;
		double t0 = MPI_Wtime();
		int nu;

		if (it == warm)
			t_timed = t0;
		cs_ps_pat_keys(&s.pat, (uint32_t)rank,
			       pat == 1 && pull ? versions - 1u : it, keys);
		if (push) {
			memcpy(u, keys, 8 * (size_t)kpp);
			cs_ps_pat_grads(&s.pat, u, kpp, grads);
			nu = cs_ps_combine(u, grads, kpp, s.dim);
			if (nu < 0)
				ps_die("out of memory");
			ps_by_owner(&s, u, grads, (uint32_t)nu, true);
			ps_send_kind(&s, T_PUSH, it, u, grads);
		}
		if (pull) {
			uint32_t nq = 0;

			memcpy(u, keys, 8 * (size_t)kpp);
			qsort(u, kpp, 8, ps_cmp_u64);
			for (uint32_t i = 0; i < kpp; i++)
				if (!i || u[i] != u[i - 1])
					u[nq++] = u[i];
			ps_by_owner(&s, u, NULL, nq, false);
			ps_send_kind(&s, T_PULL, clock, u, NULL);
			while (s.acks_left || s.replies_left)
				ps_progress(&s);
			/* scatter: the unique keys are sorted per owner */
			for (uint32_t i = 0; i < kpp; i++) {
				uint32_t r = cs_ps_shard_of(
					&s.map, CS_PS_PAT_TABLE, keys[i]);
				uint64_t *b = u + s.ustart[r];
				uint64_t *f = bsearch(&keys[i], b, s.ucount[r],
						      8, ps_cmp_u64);

				memcpy(pulled + (size_t)i * s.dim,
				       s.urows + (size_t)(f - u) * s.dim,
				       4 * (size_t)s.dim);
			}
		}
		while (s.acks_left || s.replies_left)
			ps_progress(&s);
		if (pull) {
			uint64_t lv =
				cs_ps_pat_lo_version(s.mode, s.stale, clock);

			if (lv > lo_v) {
				cs_ps_pat_count(&s.pat, lo_v, lv, lo_all);
				lo_v = lv;
			}
			for (uint32_t i = 0; i < kpp; i++) {
				uint64_t lo, hi;

				cs_ps_pat_bounds(s.mode, lo_all[keys[i]],
						 own[keys[i]], tot[keys[i]],
						 &lo, &hi);
				wrong += cs_ps_pat_check(&s.pat, keys[i],
							 pulled + (size_t)i *
									  s.dim,
							 lo, hi) != 0;
				checked++;
			}
		}
		if (push)
			for (uint32_t i = 0; i < kpp; i++)
				own[keys[i]]++;
		if (timed) {
			t_end = MPI_Wtime();
			lat[it - warm] = (t_end - t0) * 1e6;
			rows_timed += (uint64_t)kpp * (push + pull);
		}
	}
	/* serve the others until every rank is done */
	{
		MPI_Request b;
		int done = 0;

		MPI_Ibarrier(MPI_COMM_WORLD, &b);
		while (!done) {
			ps_progress(&s);
			MPI_Test(&b, &done, MPI_STATUS_IGNORE);
		}
	}
	for (uint32_t k = 0; k < rows; k++) {
		if (s.idx[k] < 0)
			continue;
		wrong += cs_ps_pat_check(&s.pat, k,
					 s.tab + (size_t)s.idx[k] * s.dim,
					 tot[k], tot[k]) != 0;
		checked++;
	}
	{
		double mx[3], mxr[3] = { 0 }, sm[3], smr[3] = { 0 };
		long swrong, schecked;
		double msecs, mp50, mp99, srows;

		qsort(lat, iters, sizeof(double), cs_bench_cmp_double);
		/* slowest rank's time and percentiles; sums of the rest */
		mx[0] = t_end - t_timed;
		mx[1] = lat[(iters - 1) / 2];
		mx[2] = lat[(size_t)ceil(0.99 * iters) - 1];
		sm[0] = (double)rows_timed;
		sm[1] = (double)wrong;
		sm[2] = (double)checked;
		MPI_Reduce(mx, mxr, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(sm, smr, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		msecs = mxr[0];
		mp50 = mxr[1];
		mp99 = mxr[2];
		srows = smr[0];
		swrong = (long)smr[1];
		schecked = (long)smr[2];
		if (!rank) {
			double t = msecs / iters, rps = srows / msecs;

			if (dense) {
				double alg = (double)rows * rb / t / 1e9;

				printf("ps-bench stack=mpi pattern=dense "
				       "bytes=%.0f row_bytes=%u mode=%s "
				       "nodes=%d iters=%u time_us=%.1f "
				       "p50_us=%.1f p99_us=%.1f "
				       "rows_per_s=%.0f algbw_GBps=%.3f "
				       "busbw_GBps=%.3f wrong=%ld "
				       "rows_checked=%ld\n",
				       (double)rows * rb, rb, mode, n, iters,
				       t * 1e6, mp50, mp99, rps, alg,
				       alg * 2 * (n - 1) / n, swrong, schecked);
			} else {
				printf("ps-bench stack=mpi pattern=%s "
				       "row_bytes=%u keys_per_push=%u "
				       "rows=%u skew=%g mode=%s nodes=%d "
				       "iters=%u time_us=%.1f p50_us=%.1f "
				       "p99_us=%.1f rows_per_s=%.0f "
				       "GB_per_s=%.3f wrong=%ld "
				       "rows_checked=%ld\n",
				       pattern, rb, kpp, rows, skew, mode, n,
				       iters, t * 1e6, mp50, mp99, rps,
				       rps * rb / 1e9, swrong, schecked);
			}
			fflush(stdout);
		}
		wrong = swrong;
		MPI_Bcast(&wrong, 1, MPI_LONG, 0, MPI_COMM_WORLD);
	}
	for (uint32_t i = 0; i < s.nreqs; i++) {
		MPI_Wait(&s.reqs[i], MPI_STATUS_IGNORE);
		free(s.rbufs[i]);
	}
	for (uint32_t i = 0; i < s.npend; i++)
		free(s.pend[i].keys);
	free(s.pend);
	free(s.reqs);
	free(s.rbufs);
	free(srv);
	free(s.idx);
	free(s.tab);
	free(s.wclock);
	free(s.ustart);
	free(s.ucount);
	free(s.urows);
	free(tot);
	free(lo_all);
	free(own);
	free(keys);
	free(u);
	free(grads);
	free(pulled);
	free(lat);
	cs_ps_shardmap_fini(&s.map);
	cs_ps_pat_fini(&s.pat);
	return wrong ? 1 : 0;
}

int main(int argc, char **argv)
{
	size_t minb = 4096, maxb = 64 << 20, factor = 4;
	int iters = 20, warmup = 5, rank, n;
	enum cs_bench_op op = OP_ALLREDUCE;
	enum cs_bench_mode mode = CS_BENCH_B2B;
	int bad_mode = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "-o") && !strcmp(argv[i + 1], "ps")) {
			int rc = ps_main(argc, argv, rank, n);

			MPI_Finalize();
			return rc;
		}
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-b"))
			minb = cs_bench_parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "-e"))
			maxb = cs_bench_parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "-f"))
			factor = (size_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-n"))
			iters = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-w"))
			warmup = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-m"))
			bad_mode = cs_bench_parse_mode(argv[i + 1], &mode);
		else if (!strcmp(argv[i], "--zipf-seed"))
			v_seed = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--zipf-skew"))
			v_skew = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "-o")) {
			int found = 0;

			for (unsigned k = 0; k < CS_BENCH_NOPS; k++)
				if (!strcasecmp(argv[i + 1],
						cs_bench_op_names[k]) ||
				    (k == 1 &&
				     !strcmp(argv[i + 1], "reduce-scatter")) ||
				    (k == 2 &&
				     !strcmp(argv[i + 1], "all-gather"))) {
					op = (enum cs_bench_op)k;
					found = 1;
				}
			if (!found) {
				if (!rank)
					fprintf(stderr,
						"mpi_bench: unknown op %s "
						"(allreduce, reduce_scatter, "
						"all_gather, broadcast, "
						"alltoall, alltoallv, sendrecv, "
						"ps)\n",
						argv[i + 1]);
				MPI_Finalize();
				return 2;
			}
		}
	}
	if (factor < 2 || !minb || maxb < minb || iters < 1 || bad_mode ||
	    !(v_skew >= 0 && v_skew <= 16) ||
	    (op == OP_ALLTOALLV &&
	     maxb / sizeof(float) > (size_t)INT_MAX / (size_t)n)) {
		if (!rank)
			fprintf(stderr, "mpi_bench: bad arguments\n");
		MPI_Finalize();
		return 2;
	}
	if (op == OP_SENDRECV && n % 2) {
		if (!rank)
			fprintf(stderr,
				"mpi_bench: -o sendrecv pairs rank i "
				"with i + n/2: needs an even number of "
				"ranks, not %d\n",
				n);
		MPI_Finalize();
		return 2;
	}
	/* alltoallv: the hottest rank receives up to n x size */
	float *send = malloc(maxb),
	      *recv = malloc(op == OP_ALLTOALLV ? maxb * (size_t)n : maxb);
	double *lat = malloc(sizeof(double) * (size_t)iters);

	v_cnt = malloc(sizeof(int) * (size_t)n);
	v_sdis = malloc(sizeof(int) * (size_t)n);
	v_rcnt = malloc(sizeof(int) * (size_t)n);
	v_rdis = malloc(sizeof(int) * (size_t)n);
	if (!send || !recv || !lat || !v_cnt || !v_sdis || !v_rcnt || !v_rdis) {
		fprintf(stderr, "mpi_bench: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (!rank)
		printf("# op %s ranks %d, timing %s\n#%11s %12s %6s %6s %5s %10s %8s %8s %6s %10s %10s %6s %9s\n",
		       cs_bench_op_names[op], n,
		       mode == CS_BENCH_B2B ? "b2b" : "iter", "size", "count",
		       "type", "redop", "root", "time(us)", "algbw", "busbw",
		       "#wrong", "p50(us)", "p99(us)", "place", "cpu(s/GB)");
	for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
		size_t count = bytes / sizeof(float);

		if (op != OP_ALLREDUCE && op != OP_BROADCAST &&
		    op != OP_SENDRECV && op != OP_REDUCE)
			count -= count % (size_t)n;
		if (op == OP_ALLTOALLV) {
			v_counts(count, n, rank);
			for (int d = 0, a = 0; d < n; d++) {
				v_sdis[d] = a;
				a += v_cnt[d];
				v_rcnt[d] = v_cnt[rank];
				v_rdis[d] = d * v_cnt[rank];
			}
		}
		for (int inplace = 0; inplace < 2; inplace++) {
			long wrong = 0, total_wrong = 0;
			double sum = 0, cpu = 0;

			/* broadcast is in place; all-to-all never (as
			 * cs-trainer-bench) */
			if ((op == OP_BROADCAST || op == OP_ALLTOALL ||
			     op == OP_ALLTOALLV || op == OP_SENDRECV) &&
			    inplace)
				continue;
			/* Warm-up and check: every element, every time
			 * (b2b: at least once) */
			int checked = mode == CS_BENCH_ITER ? warmup + iters
				      : warmup		    ? warmup
							    : 1;

			for (int it = 0; it < checked; it++) {
				fill(op, send, recv, count, rank, n, inplace);
				MPI_Barrier(MPI_COMM_WORLD);
				wrong = run_once(op, send, recv, count, rank, n,
						 inplace);
				if (it >= warmup || mode == CS_BENCH_B2B)
					total_wrong += wrong;
			}
			if (mode == CS_BENCH_B2B) {
				double t0, prev, c0, tot;

				fill(op, send, recv, count, rank, n, inplace);
				MPI_Barrier(MPI_COMM_WORLD);
				c0 = cs_bench_cpu_self();
				t0 = prev = MPI_Wtime();
				for (int it = 0; it < iters; it++) {
					double now;

					timed_op(op, send, recv, count, rank, n,
						 inplace);
					now = MPI_Wtime();
					lat[it] = (now - prev) * 1e6;
					prev = now;
				}
				tot = prev - t0;
				cpu = cs_bench_cpu_self() - c0;
				MPI_Allreduce(MPI_IN_PLACE, lat, iters,
					      MPI_DOUBLE, MPI_MAX,
					      MPI_COMM_WORLD);
				MPI_Allreduce(&tot, &sum, 1, MPI_DOUBLE,
					      MPI_MAX, MPI_COMM_WORLD);
				MPI_Allreduce(MPI_IN_PLACE, &cpu, 1, MPI_DOUBLE,
					      MPI_SUM, MPI_COMM_WORLD);
			}
			/* iter: collective only, max over ranks */
			for (int it = 0; mode == CS_BENCH_ITER && it < iters;
			     it++) {
				double t0, dt, mx;

				fill(op, send, recv, count, rank, n, inplace);
				MPI_Barrier(MPI_COMM_WORLD);
				t0 = MPI_Wtime();
				timed_op(op, send, recv, count, rank, n,
					 inplace);
				dt = MPI_Wtime() - t0;
				MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX,
					      MPI_COMM_WORLD);
				lat[it] = mx * 1e6;
				sum += mx;
			}
			MPI_Allreduce(MPI_IN_PLACE, &total_wrong, 1, MPI_LONG,
				      MPI_SUM, MPI_COMM_WORLD);
			if (!rank) {
				double t = sum / iters * 1e6;
				double sz = (double)count * sizeof(float);
				double alg = sz / (t * 1e3);
				double bus = alg;

				/* alltoallv as alltoall: every rank's
				 * counts add up to count and every rank
				 * receives its column from n - 1 others,
				 * so (n-1)/n of size crosses per rank */
				/* sendrecv: size / time, the bytes each
				 * rank sends (and receives) */
				if (op == OP_ALLREDUCE)
					bus = alg * 2.0 * (n - 1) / n;
				else if (op != OP_BROADCAST &&
					 op != OP_SENDRECV && op != OP_REDUCE)
					bus = alg * (double)(n - 1) / n;
				char cpus[32] = "NA";
				double moved =
					op == OP_SENDRECV
						? sz * n
						: cs_bench_moved(
							  op == OP_ALLREDUCE,
							  op == OP_BROADCAST ||
								  op == OP_REDUCE,
							  sz, n);

				if (mode == CS_BENCH_B2B)
					snprintf(cpus, sizeof(cpus), "%.2f",
						 cpu / (moved * iters / 1e9));
				qsort(lat, (size_t)iters, sizeof(double),
				      cs_bench_cmp_double);
				printf("%12zu %12zu %6s %6s %5d %10.1f %8.3f %8.3f %6ld %10.1f %10.1f %6s %9s\n",
				       count * sizeof(float), count, "float",
				       op == OP_ALLREDUCE ||
						       op == OP_REDUCE_SCATTER ||
						       op == OP_REDUCE
					       ? "sum"
					       : "none",
				       op == OP_BROADCAST || op == OP_REDUCE
					       ? 0
					       : -1,
				       t, alg, bus, total_wrong,
				       lat[(size_t)(iters - 1) / 2],
				       lat[(size_t)ceil(0.99 * iters) - 1],
				       inplace ? "in" : "out", cpus);
				fflush(stdout);
			}
		}
	}
	free(send);
	free(recv);
	free(lat);
	free(v_cnt);
	free(v_sdis);
	free(v_rcnt);
	free(v_rdis);
	MPI_Finalize();
	return 0;
}
