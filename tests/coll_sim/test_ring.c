/* SPDX-License-Identifier: MIT */
/* Ring collectives engine: schedules, exactly-once, retransmission rules. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ring.h"
#include "collectives/coll_data.h"
#include "ring_harness.h"

struct run {
	enum cs_coll_kind kind;
	uint32_t n, root, C, window, mtu, flags;
	size_t count;
	uint64_t chunk;
	enum cs_dtype t;
	enum cs_redop op;
	bool inplace;
	bool null_recv; /* reduce: non-root ranks pass no recvbuf */
	double loss, dup, ackloss;
	uint64_t seed;
	uint64_t direct; /* coll.direct_max (0: the ring) */
};

struct bufs {
	uint8_t **send, **recv;
	uint8_t **alloc_s, **alloc_r;
};

/* Logical index (for the data formula) of rank r's input element x. */
static uint64_t in_index(const struct run *R, uint32_t r, size_t x)
{
	if (R->kind == CS_COLL_ALL_GATHER)
		return (uint64_t)r * R->count + x;
	return x;
}

static size_t send_elems(const struct run *R)
{
	return R->kind == CS_COLL_REDUCE_SCATTER ? R->n * R->count : R->count;
}

static size_t recv_elems(const struct run *R)
{
	return R->kind == CS_COLL_ALL_GATHER ? R->n * R->count : R->count;
}

static void make_bufs(const struct run *R, struct bufs *B)
{
	size_t es = cs_dtype_size(R->t);

	B->send = calloc(R->n, sizeof(void *));
	B->recv = calloc(R->n, sizeof(void *));
	B->alloc_s = calloc(R->n, sizeof(void *));
	B->alloc_r = calloc(R->n, sizeof(void *));
	for (uint32_t r = 0; r < R->n; r++) {
		size_t ns = send_elems(R), nr = recv_elems(R);

		B->alloc_s[r] = calloc(ns + 1, es);
		B->alloc_r[r] = calloc(nr + 1, es);
		memset(B->alloc_r[r], 0x5a, (nr + 1) * es);
		B->send[r] = B->alloc_s[r];
		B->recv[r] = B->alloc_r[r];
		if (R->inplace) {
			switch (R->kind) {
			case CS_COLL_REDUCE_SCATTER:
				B->recv[r] = B->send[r] + r * R->count * es;
				break;
			case CS_COLL_ALL_GATHER:
				B->send[r] = B->recv[r] + r * R->count * es;
				break;
			default:
				B->send[r] = B->recv[r];
				break;
			}
		}
		for (size_t x = 0; x < ns; x++)
			cs_td_store(R->t, B->send[r], x,
				    cs_td_value(R->t, R->op, R->n, R->seed, r,
						in_index(R, r, x)));
		if (R->null_recv && R->kind == CS_COLL_REDUCE && r != R->root &&
		    !R->inplace)
			B->recv[r] = NULL;
	}
}

static void free_bufs(const struct run *R, struct bufs *B)
{
	for (uint32_t r = 0; r < R->n; r++) {
		free(B->alloc_s[r]);
		free(B->alloc_r[r]);
	}
	free(B->send);
	free(B->recv);
	free(B->alloc_s);
	free(B->alloc_r);
}

static double expect_at(const struct run *R, uint32_t r, size_t x)
{
	switch (R->kind) {
	case CS_COLL_ALLREDUCE:
	case CS_COLL_REDUCE:
		return cs_td_expect(R->t, R->op, R->n, R->seed, x);
	case CS_COLL_REDUCE_SCATTER:
		return cs_td_expect(R->t, R->op, R->n, R->seed,
				    (uint64_t)r * R->count + x);
	case CS_COLL_ALL_GATHER:
		return cs_td_value(R->t, R->op, R->n, R->seed,
				   (uint32_t)(x / R->count), x);
	default:
		return cs_td_value(R->t, R->op, R->n, R->seed, R->root, x);
	}
}

static void check(const struct run *R, const struct bufs *B)
{
	size_t nr = recv_elems(R), es = cs_dtype_size(R->t);

	for (uint32_t r = 0; r < R->n; r++) {
		if (R->kind == CS_COLL_REDUCE && r != R->root)
			continue;
		if (R->kind == CS_COLL_BARRIER)
			continue;
		for (size_t x = 0; x < nr; x++) {
			double got = cs_td_load(R->t, B->recv[r], x);
			double exp = expect_at(R, r, x);

			cr_assert_eq(got, exp,
				     "%s n=%u count=%zu %s/%s inplace=%d "
				     "rank %u elem %zu: got %g want %g",
				     cs_coll_kind_name(R->kind), R->n, R->count,
				     cs_dtype_name(R->t), cs_redop_name(R->op),
				     R->inplace, r, x, got, exp);
		}
		/* nothing written past the end of the result */
		if (!R->inplace || R->kind != CS_COLL_REDUCE_SCATTER)
			for (size_t b = 0; b < es; b++)
				cr_assert_eq(B->alloc_r[r][nr * es + b], 0x5a);
	}
}

static void run_one(const struct run *R)
{
	struct bufs B;
	struct rh_net w = {
		.n = R->n,
		.rng = R->seed * 7 + 1,
		.loss = R->loss,
		.dup = R->dup,
		.ackloss = R->ackloss,
	};
	struct cs_coll_params p;
	uint64_t expect_rx = 0;

	make_bufs(R, &B);
	w.ops = calloc(R->n, sizeof(void *));
	for (uint32_t r = 0; r < R->n; r++) {
		cs_coll_params_default(&p, NULL);
		p.direct_max = R->direct;
		p.kind = R->kind;
		p.nranks = R->n;
		p.rank = r;
		p.root = R->root;
		p.sendbuf = B.send[r];
		p.recvbuf = B.recv[r];
		p.count = R->count;
		p.dtype = R->t;
		p.op = R->op;
		p.channels = R->C ? R->C : 1;
		p.chunk = R->chunk ? R->chunk : 64;
		p.window = R->window ? R->window : 2;
		p.mtu_payload = R->mtu ? R->mtu : 24;
		p.flags = R->flags;
		cr_assert_eq(cs_coll_init(&p, &w.ops[r]), 0, "init rank %u", r);
	}
	cr_assert(rh_run(&w, 50000000), "%s n=%u count=%zu: %s",
		  cs_coll_kind_name(R->kind), R->n, R->count, w.err);
	for (uint32_t r = 0; r < R->n; r++) {
		struct cs_coll_stats st;

		cr_assert(cs_coll_result_ready(w.ops[r]));
		cs_coll_get_stats(w.ops[r], &st);
		expect_rx += st.rx_pkts;
		cr_assert_eq(st.tx_bytes, st.ideal_tx_bytes);
	}
	/* every packet reduced exactly once */
	cr_assert_eq(expect_rx, w.delivered);
	check(R, &B);
	for (uint32_t r = 0; r < R->n; r++)
		cs_coll_free(w.ops[r]);
	free(w.ops);
	free_bufs(R, &B);
}

static const uint32_t ranks[] = { 1, 2, 3, 4, 7, 8 };

Test(ring, allreduce_shapes)
{
	/* count 0, count < n, not divisible, several chunks per segment */
	static const size_t counts[] = { 0, 1, 3, 5, 64, 1001 };

	for (size_t a = 0; a < CS_ARRAY_SIZE(ranks); a++)
		for (size_t b = 0; b < CS_ARRAY_SIZE(counts); b++)
			for (int ip = 0; ip < 2; ip++) {
				struct run R = {
					.kind = CS_COLL_ALLREDUCE,
					.n = ranks[a],
					.count = counts[b],
					.t = CS_F32,
					.op = CS_SUM,
					.inplace = ip,
					.C = 1 + b % 3,
					.flags = b & 1 ? CS_COLL_F_ALT_DIR : 0,
					.seed = a * 100 + b * 10 + ip,
				};
				run_one(&R);
			}
}

Test(ring, allreduce_loss_dup_reorder)
{
	for (size_t a = 0; a < CS_ARRAY_SIZE(ranks); a++)
		for (int ip = 0; ip < 2; ip++) {
			struct run R = {
				.kind = CS_COLL_ALLREDUCE,
				.n = ranks[a],
				.count = 777,
				.t = CS_I32,
				.op = CS_SUM,
				.inplace = ip,
				.C = 2,
				.flags = CS_COLL_F_ALT_DIR,
				.loss = 0.1,
				.dup = 0.1,
				.ackloss = 0.2,
				.seed = 1000 + a * 2 + ip,
			};
			run_one(&R);
		}
}

Test(ring, allreduce_every_dtype_op)
{
	for (int t = 0; t < CS_DTYPE_COUNT; t++)
		for (int op = 0; op < CS_REDOP_COUNT; op++)
			for (int ip = 0; ip < 2; ip++) {
				struct run R = {
					.kind = CS_COLL_ALLREDUCE,
					.n = 5,
					.count = 203,
					.t = t,
					.op = op,
					.inplace = ip,
					.C = 2,
					.loss = 0.05,
					.dup = 0.05,
					.ackloss = 0.05,
					.seed = 77 + t * 10 + op + ip,
				};
				run_one(&R);
			}
}

Test(ring, other_collectives)
{
	static const enum cs_coll_kind kinds[] = {
		CS_COLL_REDUCE_SCATTER, CS_COLL_ALL_GATHER, CS_COLL_BROADCAST,
		CS_COLL_REDUCE,		CS_COLL_BARRIER,
	};
	static const size_t counts[] = { 0, 1, 2, 17, 300 };

	for (size_t k = 0; k < CS_ARRAY_SIZE(kinds); k++)
		for (size_t a = 0; a < CS_ARRAY_SIZE(ranks); a++)
			for (size_t b = 0; b < CS_ARRAY_SIZE(counts); b++)
				for (int ip = 0; ip < 2; ip++) {
					struct run R = {
						.kind = kinds[k],
						.n = ranks[a],
						.root = ranks[a] / 2,
						.count = counts[b],
						.t = b & 1 ? CS_F16 : CS_I64,
						.op = (enum cs_redop)(b % 4),
						.inplace = ip,
						.null_recv = b & 1,
						.C = 1 + (a % 3),
						.flags = CS_COLL_F_ALT_DIR,
						.loss = 0.05,
						.dup = 0.05,
						.ackloss = 0.1,
						.seed = k * 1000 + a * 10 + b,
					};
					run_one(&R);
				}
}

Test(ring, every_dtype_op_other_collectives)
{
	for (int k = CS_COLL_REDUCE_SCATTER; k <= CS_COLL_REDUCE; k++)
		for (int t = 0; t < CS_DTYPE_COUNT; t++)
			for (int op = 0; op < CS_REDOP_COUNT; op++) {
				struct run R = {
					.kind = k,
					.n = 4,
					.root = 3,
					.count = 50,
					.t = t,
					.op = op,
					.inplace = (t + op) & 1,
					.C = 2,
					.seed = 5 + k * 100 + t * 10 + op,
				};
				run_one(&R);
			}
}

/* Random floats: rounding happens, and every rank must still hold the
 * same bits (each segment is reduced once, by one rank). */
static void float_bit_identical(uint64_t direct_max)
{
	const uint32_t n = 7;
	const size_t count = 1000;
	struct rh_net w = {
		.n = n,
		.rng = 99,
		.loss = 0.1,
		.dup = 0.1,
		.ackloss = 0.1,
	};
	struct cs_coll_params p;
	float *buf[7];
	double *ref = calloc(count, sizeof(double));
	uint64_t rng = 12345;

	w.ops = calloc(n, sizeof(void *));
	for (uint32_t r = 0; r < n; r++) {
		buf[r] = malloc(count * sizeof(float));
		for (size_t i = 0; i < count; i++) {
			buf[r][i] = (float)(cs_rand_unit(&rng) * 2 - 1) *
				    powf(10, (float)(i % 7) - 3);
			ref[i] += buf[r][i];
		}
		cs_coll_params_default(&p, NULL);
		p.direct_max = direct_max;
		p.kind = CS_COLL_ALLREDUCE;
		p.nranks = n;
		p.rank = r;
		p.sendbuf = p.recvbuf = buf[r];
		p.count = count;
		p.dtype = CS_F32;
		p.op = CS_SUM;
		p.channels = 3;
		p.flags = CS_COLL_F_ALT_DIR;
		p.chunk = 40;
		p.mtu_payload = 16;
		cr_assert_eq(cs_coll_init(&p, &w.ops[r]), 0);
	}
	cr_assert(rh_run(&w, 10000000), "%s", w.err);
	for (uint32_t r = 1; r < n; r++)
		cr_assert_eq(memcmp(buf[0], buf[r], count * sizeof(float)), 0,
			     "rank %u differs from rank 0", r);
	for (size_t i = 0; i < count; i++)
		cr_assert(fabs(buf[0][i] - ref[i]) <=
				  1e-5 * (fabs(ref[i]) +
					  powf(10, (float)(i % 7) - 3)),
			  "elem %zu: %g vs %g", i, buf[0][i], ref[i]);
	for (uint32_t r = 0; r < n; r++) {
		cs_coll_free(w.ops[r]);
		free(buf[r]);
	}
	free(w.ops);
	free(ref);
}

Test(ring, float_results_bit_identical)
{
	float_bit_identical(0);
}

/* Direct exchange: each rank reduces the slots in rank order. */
Test(ring, float_results_bit_identical_direct)
{
	float_bit_identical(1 << 20);
}

/* Two ranks driven by hand: init state, packets, acks. */
struct pair {
	struct cs_coll *op[2];
	int32_t buf[2][64];
};

static void pair_init(struct pair *P, uint32_t window)
{
	struct cs_coll_params p;

	for (uint32_t r = 0; r < 2; r++) {
		for (int i = 0; i < 64; i++)
			P->buf[r][i] = (int32_t)(r * 1000 + i);
		cs_coll_params_default(&p, NULL);
		p.direct_max = 0; /* the ring's behaviour */
		p.kind = CS_COLL_ALLREDUCE;
		p.nranks = 2;
		p.rank = r;
		p.sendbuf = p.recvbuf = P->buf[r];
		p.count = 64;
		p.dtype = CS_I32;
		p.op = CS_SUM;
		p.channels = 1;
		p.chunk = 32; /* 8 elements, 2 packets */
		p.mtu_payload = 16; /* 4 elements per packet */
		p.window = window;
		cr_assert_eq(cs_coll_init(&p, &P->op[r]), 0);
	}
}

static void pair_fini(struct pair *P)
{
	cs_coll_free(P->op[0]);
	cs_coll_free(P->op[1]);
}

Test(ring, duplicate_is_never_reduced_twice)
{
	struct pair P;
	struct cs_coll_tx tx;
	int32_t snap[64];

	pair_init(&P, 4);
	cr_assert_eq(cs_coll_next_packets(P.op[0], 0, &tx, 1), 1);
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &tx.hdr, tx.payload),
		     CS_COLL_RX_NEW);
	memcpy(snap, P.buf[1], sizeof(snap));
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &tx.hdr, tx.payload),
		     CS_COLL_RX_DUP);
	cr_assert_eq(memcmp(snap, P.buf[1], sizeof(snap)), 0);
	pair_fini(&P);
}

Test(ring, bad_packets_are_protocol_errors)
{
	struct pair P;
	struct cs_coll_tx tx;
	struct cs_pkt_hdr h;

	pair_init(&P, 4);
	cr_assert_eq(cs_coll_next_packets(P.op[0], 0, &tx, 1), 1);
	h = tx.hdr;
	h.src = 1; /* not the predecessor */
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.offset += 4; /* not a packet boundary */
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.offset += 2; /* not element aligned */
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.len -= 4; /* wrong length */
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.step = 2; /* no such step */
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.channel = 1; /* no such channel */
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload), CS_ERR_PROTO);
	h = tx.hdr;
	h.offset = 0; /* segment 0 is not what rank 1 receives */
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload), CS_ERR_PROTO);
	/* an all-gather packet for a region rank 1 has not sent yet */
	h = tx.hdr;
	h.step = 1;
	h.offset = 0;
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload), CS_ERR_PROTO);
	/* nothing was counted */
	cr_assert_not(cs_coll_rx_has(P.op[1], 0, 0, tx.hdr.offset));
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &tx.hdr, tx.payload),
		     CS_COLL_RX_NEW);
	cr_assert_eq(cs_coll_on_acked(P.op[0], 0x12345678ull), -EINVAL);
	pair_fini(&P);
}

Test(ring, window_limits_unacknowledged_chunks)
{
	struct pair P;
	struct cs_coll_tx tx[16];
	unsigned k;

	pair_init(&P, 1);
	/* window 1: one chunk (2 packets) then nothing until acked */
	k = cs_coll_next_packets(P.op[0], 0, tx, 16);
	cr_assert_eq(k, 2);
	cr_assert(!cs_coll_all_sent(P.op[0]), "the window holds the rest");
	cr_assert(tx[1].hdr.flags & CS_PKT_F_LAST);
	cr_assert_eq(cs_coll_next_packets(P.op[0], 0, tx + 2, 14), 0);
	cr_assert_eq(cs_coll_on_acked(P.op[0], tx[0].cookie), 0);
	cr_assert_eq(cs_coll_next_packets(P.op[0], 0, tx + 2, 14), 0);
	cr_assert_eq(cs_coll_on_acked(P.op[0], tx[1].cookie), 0);
	cr_assert_eq(cs_coll_on_acked(P.op[0], tx[1].cookie), 0);
	cr_assert_eq(cs_coll_next_packets(P.op[0], 0, tx + 2, 14), 2);
	/* a cookie not yet sent is refused */
	cr_assert_eq(cs_coll_rebuild(P.op[0], tx[3].cookie + 1, &tx[15]),
		     -EINVAL);
	pair_fini(&P);
}

/*
 * The retransmission rule: a reduce-scatter packet whose region has since
 * been overwritten by the all-gather result is refused (-ESTALE); before
 * that it is rebuilt with exactly the original bytes.
 */
Test(ring, stale_retransmission_is_refused)
{
	struct pair P;
	struct cs_coll_tx a[64], b[64], rb;
	uint8_t orig[16];
	unsigned na, nb;

	pair_init(&P, 64);
	na = cs_coll_next_packets(P.op[0], 0, a, 64);
	nb = cs_coll_next_packets(P.op[1], 0, b, 64);
	cr_assert_eq(na, 8); /* rank 0's reduce-scatter: 32 elements */
	cr_assert_eq(nb, 8);
	memcpy(orig, a[0].payload, 16);
	/* rank 1 gets rank 0's first chunk, the acks are "lost" */
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &a[0].hdr, a[0].payload),
		     CS_COLL_RX_NEW);
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &a[1].hdr, a[1].payload),
		     CS_COLL_RX_NEW);
	/* before the overwrite the rebuild carries the original bytes */
	cr_assert_eq(cs_coll_rebuild(P.op[0], a[0].cookie, &rb), 0);
	cr_assert_eq(memcmp(rb.payload, orig, 16), 0);
	cr_assert(rb.hdr.flags & CS_PKT_F_RETX);
	/* rank 1's reduced first packet goes back in the all-gather */
	nb = cs_coll_next_packets(P.op[1], 0, b + 8, 56);
	cr_assert(nb >= 1);
	cr_assert_eq(b[8].hdr.step, 1);
	cr_assert_eq(cs_coll_on_data(P.op[0], 0, &b[8].hdr, b[8].payload),
		     CS_COLL_RX_NEW);
	/* rank 0's region now holds the final value: different bytes */
	cr_assert_neq(memcmp(a[0].payload, orig, 16), 0);
	cr_assert_eq(cs_coll_rebuild(P.op[0], a[0].cookie, &rb), -ESTALE);
	cr_assert(cs_coll_rx_has(P.op[1], a[0].hdr.step, 0, a[0].hdr.offset));
	/* other packets are unaffected */
	cr_assert_eq(cs_coll_rebuild(P.op[0], a[1].cookie, &rb), 0);
	pair_fini(&P);
}

Test(ring, bad_parameters)
{
	struct cs_coll_params p;
	struct cs_coll *c;
	int32_t x[4];

	cs_coll_params_default(&p, NULL);
	p.direct_max = 0; /* the ring's behaviour */
	p.kind = CS_COLL_ALLREDUCE;
	p.nranks = 4;
	p.rank = 4;
	p.sendbuf = p.recvbuf = x;
	p.count = 4;
	p.dtype = CS_I32;
	cr_assert_eq(cs_coll_init(&p, &c), CS_ERR_BAD_DESC);
	p.rank = 0;
	p.nranks = 0;
	cr_assert_eq(cs_coll_init(&p, &c), CS_ERR_BAD_DESC);
	p.nranks = 4;
	p.dtype = CS_DTYPE_COUNT;
	cr_assert_eq(cs_coll_init(&p, &c), -EINVAL);
	p.dtype = CS_I32;
	p.op = CS_REDOP_COUNT;
	cr_assert_eq(cs_coll_init(&p, &c), -EINVAL);
	p.op = CS_SUM;
	p.channels = 0;
	cr_assert_eq(cs_coll_init(&p, &c), -EINVAL);
	p.channels = 1;
	p.sendbuf = NULL;
	cr_assert_eq(cs_coll_init(&p, &c), CS_ERR_BAD_DESC);
	p.sendbuf = x;
	cr_assert_eq(cs_coll_init(&p, &c), 0);
	cs_coll_free(c);
}

/* Packets of an older epoch are dropped and counted, a newer one is an
 * error; neither touches the buffer. */
Test(ring, stale_epoch_is_dropped_and_counted)
{
	struct pair P;
	struct cs_coll_tx tx;
	struct cs_coll_stats st;
	struct cs_pkt_hdr h;
	int32_t snap[64];

	pair_init(&P, 4);
	cr_assert_eq(cs_coll_next_packets(P.op[0], 0, &tx, 1), 1);
	memcpy(snap, P.buf[1], sizeof(snap));
	h = tx.hdr;
	h.epoch = tx.hdr.epoch - 1; /* older (wraps: serial compare) */
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload),
		     CS_COLL_RX_STALE);
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload),
		     CS_COLL_RX_STALE);
	h.epoch = tx.hdr.epoch + 1;
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &h, tx.payload), CS_ERR_EPOCH);
	cr_assert_eq(memcmp(snap, P.buf[1], sizeof(snap)), 0);
	cs_coll_get_stats(P.op[1], &st);
	cr_assert_eq(st.rx_stale_epoch, 2);
	cr_assert_eq(st.rx_pkts, 0);
	cr_assert_not(cs_coll_rx_has(P.op[1], 0, 0, tx.hdr.offset));
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &tx.hdr, tx.payload),
		     CS_COLL_RX_NEW);
	pair_fini(&P);
}

/* "What is it waiting for": data from the predecessor, then (window full)
 * acks from the successor; the formatted line names both. */
Test(ring, waiting_on_names_the_rank_and_chunk)
{
	struct pair P;
	struct cs_coll_tx tx[16];
	struct cs_coll_wait w;
	char line[200];

	pair_init(&P, 1);
	/* rank 1 has received nothing: it waits on rank 0, step 0, chunk 0 */
	cr_assert(cs_coll_waiting_on(P.op[1], &w));
	cr_assert_eq(w.kind, CS_COLL_WAIT_DATA);
	cr_assert_eq(w.rank, 1);
	cr_assert_eq(w.peer, 0);
	cr_assert_eq(w.step, 0);
	cr_assert_eq(w.chunk, 0);
	cr_assert_eq(w.pkts_missing, 2);
	cr_assert_eq(w.pkts_total, 2);
	cs_coll_wait_format(P.op[1], &w, line, sizeof(line));
	cr_assert_str_eq(line,
			 "rank 1 waits on rank 0: allreduce op 0 "
			 "channel 0 reduce-scatter step 0 chunk 0 (packets 2 "
			 "of 2 missing)");
	/* one packet of the first chunk arrives: 1 of 2 missing */
	cr_assert_eq(cs_coll_next_packets(P.op[0], 0, tx, 16), 2);
	cr_assert_eq(cs_coll_on_data(P.op[1], 0, &tx[0].hdr, tx[0].payload),
		     CS_COLL_RX_NEW);
	cr_assert(cs_coll_waiting_on(P.op[1], &w));
	cr_assert_eq(w.pkts_missing, 1);
	/* rank 0's window (1 chunk) is full: it waits on rank 1's acks */
	cr_assert(cs_coll_waiting_on(P.op[0], &w));
	cr_assert_eq(w.kind, CS_COLL_WAIT_ACK);
	cr_assert_eq(w.peer, 1);
	cr_assert_eq(w.chunk, 0);
	cr_assert_eq(w.pkts_missing, 2);
	cs_coll_wait_format(P.op[0], &w, line, sizeof(line));
	cr_assert(strstr(line,
			 "rank 0 waits on rank 1: allreduce op 0 "
			 "channel 0 acks for reduce-scatter step 0 chunk 0"),
		  "%s", line);
	cr_assert_eq(cs_coll_on_acked(P.op[0], tx[0].cookie), 0);
	cr_assert(cs_coll_waiting_on(P.op[0], &w));
	cr_assert_eq(w.pkts_missing, 1);
	pair_fini(&P);
}

/* Abort: the op completes with the error and names the culprit; it sends
 * nothing more, ignores late packets and acks, refuses rebuilds. */
Test(ring, abort_completes_with_the_error)
{
	struct pair P;
	struct cs_coll_tx tx[16], rb;
	struct cs_coll_stats st;
	struct cs_coll_wait w;
	uint32_t who;
	int32_t snap[64];

	pair_init(&P, 4);
	cr_assert_eq(cs_coll_status(P.op[0], &who), -EINPROGRESS);
	cr_assert_eq(cs_coll_next_packets(P.op[0], 0, tx, 2), 2);
	cr_assert_not(cs_coll_done(P.op[0]));
	cr_assert_eq(cs_coll_abort(P.op[0], 5, 1), -EINVAL);
	cr_assert_eq(cs_coll_abort(P.op[0], CS_ERR_PEER_LOST, 1), 0);
	cr_assert_eq(cs_coll_abort(P.op[0], CS_ERR_TIMEOUT, 0), -EALREADY);
	cr_assert_eq(cs_coll_status(P.op[0], &who), CS_ERR_PEER_LOST);
	cr_assert_eq(who, 1);
	cr_assert(cs_coll_done(P.op[0]));
	cr_assert_not(cs_coll_result_ready(P.op[0]));
	cr_assert_not(cs_coll_waiting_on(P.op[0], &w));
	cr_assert_eq(cs_coll_next_packets(P.op[0], 0, tx + 2, 14), 0);
	cr_assert_eq(cs_coll_next_on(P.op[0], 0, 0, tx + 2, 14), 0);
	cr_assert_eq(cs_coll_rebuild(P.op[0], tx[0].cookie, &rb), -ECANCELED);
	cr_assert_eq(cs_coll_on_acked(P.op[0], tx[0].cookie), 0);
	/* a late packet from rank 1 is ignored */
	cr_assert_eq(cs_coll_next_packets(P.op[1], 0, tx + 2, 1), 1);
	memcpy(snap, P.buf[0], sizeof(snap));
	cr_assert_eq(cs_coll_on_data(P.op[0], 0, &tx[2].hdr, tx[2].payload),
		     CS_COLL_RX_LATE);
	cr_assert_eq(memcmp(snap, P.buf[0], sizeof(snap)), 0);
	cs_coll_get_stats(P.op[0], &st);
	cr_assert_eq(st.rx_late, 1);
	/* a running op is unaffected; a completed one cannot be aborted */
	cr_assert_eq(cs_coll_status(P.op[1], NULL), -EINPROGRESS);
	pair_fini(&P);
}

/* The deadline: nothing before start + deadline, then CS_ERR_TIMEOUT
 * naming the rank waited on, with the snapshot kept for the report. */
Test(ring, deadline_times_out_naming_the_rank)
{
	struct cs_coll_params p;
	struct cs_coll *c;
	struct cs_coll_wait w;
	char line[200];
	int32_t buf[64] = { 0 };
	uint32_t who;

	cs_coll_params_default(&p, NULL);
	p.direct_max = 0; /* the ring's behaviour */
	cr_assert(p.deadline > 0, "coll.deadline has a default");
	p.kind = CS_COLL_ALLREDUCE;
	p.nranks = 4;
	p.rank = 2;
	p.sendbuf = p.recvbuf = buf;
	p.count = 64;
	p.dtype = CS_I32;
	p.op = CS_SUM;
	p.channels = 1;
	p.op_id = 12;
	p.start = 1000;
	p.deadline = 500;
	cr_assert_eq(cs_coll_init(&p, &c), 0);
	cr_assert_eq(cs_coll_next_deadline(c), 1500);
	cr_assert_not(cs_coll_check_deadline(c, 1499));
	cr_assert_eq(cs_coll_status(c, NULL), -EINPROGRESS);
	cr_assert(cs_coll_check_deadline(c, 1500));
	cr_assert_eq(cs_coll_status(c, &who), CS_ERR_TIMEOUT);
	cr_assert_eq(who, 1);
	cr_assert_eq(cs_coll_next_deadline(c), UINT64_MAX);
	cr_assert_not(cs_coll_check_deadline(c, 2000));
	cs_coll_abort_wait(c, &w);
	cr_assert_eq(w.kind, CS_COLL_WAIT_DATA);
	cs_coll_wait_format(c, &w, line, sizeof(line));
	cr_assert_str_eq(line,
			 "rank 2 waits on rank 1: allreduce op 12 "
			 "channel 0 reduce-scatter step 0 chunk 0 (packets 1 "
			 "of 1 missing)");
	cs_coll_free(c);
	/* 0: no deadline */
	p.deadline = 0;
	cr_assert_eq(cs_coll_init(&p, &c), 0);
	cr_assert_eq(cs_coll_next_deadline(c), UINT64_MAX);
	cr_assert_not(cs_coll_check_deadline(c, UINT64_MAX - 1));
	cs_coll_free(c);
}

/* Direct exchange (coll.direct_max): every shape, rank count, type and op,
 * under loss, duplication and lost ACKs; results as the ring's check. */
Test(ring, direct_exchange_allreduce)
{
	static const enum cs_redop ops[] = { CS_SUM, CS_PROD, CS_MIN, CS_MAX };
	uint64_t seed = 900;

	for (size_t i = 0; i < CS_ARRAY_SIZE(ranks); i++)
		for (size_t count = 1; count <= 70; count += 23)
			for (int ip = 0; ip < 2; ip++) {
				struct run R = {
					.kind = CS_COLL_ALLREDUCE,
					.n = ranks[i],
					.count = count,
					.t = CS_F32,
					.op = ops[count % 4],
					.inplace = ip,
					.loss = 0.1,
					.dup = 0.05,
					.ackloss = 0.1,
					.seed = seed++,
					.direct = 1 << 20,
				};

				run_one(&R);
			}
}

Test(ring, direct_exchange_is_chosen_by_size_and_ranks)
{
	struct cs_coll_params p;
	struct cs_coll *c;
	float buf[64] = { 0 };

	cs_coll_params_default(&p, NULL);
	p.kind = CS_COLL_ALLREDUCE;
	p.nranks = 5;
	p.rank = 1;
	p.sendbuf = buf;
	p.recvbuf = buf;
	p.count = 64;
	p.dtype = CS_F32;
	p.direct_max = 256; /* exactly 64 floats */
	cr_assert(cs_coll_is_direct(&p));
	cr_assert_eq(cs_coll_init(&p, &c), 0);
	cr_assert_eq(cs_coll_channels(c), 4, "a channel per peer");
	for (uint32_t ch = 0; ch < 4; ch++) {
		int64_t nx, pv;

		cs_coll_chan_peers(c, ch, &nx, &pv);
		cr_assert_eq(nx, (1 + ch + 1) % 5);
		cr_assert_eq(pv, (1 + 5 - ch - 1) % 5);
	}
	/* all sent once every channel's one packet was handed out, long
	 * before anything is acknowledged or received */
	for (uint32_t ch = 0; ch < 4; ch++) {
		struct cs_coll_tx tx;

		cr_assert(!cs_coll_all_sent(c));
		cr_assert_eq(cs_coll_next_on(c, 0, ch, &tx, 1), 1);
	}
	cr_assert(cs_coll_all_sent(c));
	cr_assert(!cs_coll_result_ready(c));
	cr_assert(!cs_coll_done(c));
	cs_coll_free(c);
	p.direct_max = 255; /* one byte short: the ring */
	cr_assert(!cs_coll_is_direct(&p));
	p.direct_max = 256;
	p.max_direct_peers = 3; /* more peers than the caller can serve */
	cr_assert(!cs_coll_is_direct(&p));
	p.max_direct_peers = 0;
	p.kind = CS_COLL_REDUCE_SCATTER; /* allreduce only */
	cr_assert(!cs_coll_is_direct(&p));
}
