/* SPDX-License-Identifier: MIT */
/* Shard store: update modes, exactly-once pushes, hot-key aggregation,
 * refused messages, the SSD tier and the copy-on-write snapshot. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"

#define MAXR 64

struct reply {
	struct cs_ps_msg m;
	uint8_t raw[4096];
	size_t len;
};

static struct reply rep[MAXR];
static unsigned nrep;

static int cap_send(void *ctx, uint32_t worker, const void *msg, size_t len)
{
	(void)ctx;
	cr_assert_lt(nrep, MAXR);
	cr_assert_leq(len, sizeof(rep[0].raw));
	memcpy(rep[nrep].raw, msg, len);
	rep[nrep].len = len;
	cr_assert_eq(cs_ps_wire_decode(rep[nrep].raw, len, &rep[nrep].m), 0);
	cr_assert_eq(rep[nrep].m.worker, worker);
	nrep++;
	return 0;
}

static struct cs_ps_table_spec mkspec(enum cs_ps_mode mode, uint32_t stale,
				      uint32_t workers, enum cs_ps_opt_kind opt)
{
	struct cs_ps_table_spec s;

	memset(&s, 0, sizeof(s));
	s.id = 2;
	s.dim = 2;
	s.dtype = CS_F32;
	s.key_max = 100000;
	s.mode = mode;
	s.staleness = stale;
	s.workers = workers;
	cs_ps_opt_defaults(&s.opt, opt);
	s.opt.lr = 1.0f;
	s.init.kind = CS_PS_INIT_CONST;
	s.init.scale = 10.0f;
	return s;
}

static struct cs_ps_store *mkstore(const struct cs_ps_table_spec *s,
				   size_t budget,
				   const struct cs_ps_spill *spill)
{
	struct cs_ps_store_cfg cfg = { .server = 0,
				       .msg_max = 4096,
				       .parked_max = 4 };
	struct cs_ps_store_io io = { .send = cap_send };
	struct cs_ps_store *st;

	nrep = 0;
	cr_assert_eq(cs_ps_store_create(&st, &cfg, &io), 0);
	cr_assert_eq(cs_ps_store_add_table(st, s, budget, spill), 0);
	return st;
}

static uint8_t msg[1 << 16];

/* A push of @n keys, row i = { g[i], 2 * g[i] }. */
static size_t push(const struct cs_ps_table_spec *s, uint32_t worker,
		   uint64_t id, uint64_t version, const uint64_t *keys,
		   const float *g, uint32_t n, uint16_t part, uint16_t nparts)
{
	struct cs_ps_msg m = { .type = CS_PS_MSG_PUSH,
			       .table = s->id,
			       .worker = worker,
			       .id = id,
			       .version = version,
			       .part = part,
			       .nparts = nparts,
			       .nkeys = n,
			       .dim = s->dim,
			       .dtype = s->dtype };
	size_t len = cs_ps_wire_len(m.type, n, m.dim, m.dtype, 0);

	cs_ps_wire_put_hdr(msg, &m);
	for (uint32_t i = 0; i < n; i++) {
		double row[4] = { 0 }; /* room for the malformed dims */
		float f[2] = { g[i], 2 * g[i] };

		memcpy(row, f, sizeof(f));
		cs_ps_wire_put_key(msg, i, keys[i]);
		cs_ps_wire_put_row(msg, &m, i, row);
	}
	return len;
}

static size_t pull(const struct cs_ps_table_spec *s, uint32_t worker,
		   uint64_t id, uint64_t clock, const uint64_t *keys,
		   uint32_t n)
{
	struct cs_ps_msg m = { .type = CS_PS_MSG_PULL,
			       .table = s->id,
			       .worker = worker,
			       .id = id,
			       .version = clock,
			       .nparts = 1,
			       .nkeys = n,
			       .dim = s->dim,
			       .dtype = s->dtype };

	cs_ps_wire_put_hdr(msg, &m);
	for (uint32_t i = 0; i < n; i++)
		cs_ps_wire_put_key(msg, i, keys[i]);
	return cs_ps_wire_len(m.type, n, m.dim, m.dtype, 0);
}

static float val(struct cs_ps_store *st, uint64_t key, int j)
{
	float row[2];

	cr_assert_eq(cs_ps_store_peek(st, 2, key, row), 0);
	return row[j];
}

Test(ps_store, duplicate_push_applied_once)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 2, CS_PS_OPT_SGD);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k = 5;
	float g = 1.0f;
	size_t n = push(&s, 1, 0, 0, &k, &g, 1, 0, 1);

	cr_assert_eq(cs_ps_store_rx(st, msg, n), 0);
	cr_assert_eq(cs_ps_store_rx(st, msg, n), 0); /* network copy */
	cr_assert_eq(cs_ps_store_flush(st), 0);
	cr_assert_eq(cs_ps_store_rx(st, msg, n), 0); /* late retransmit */
	cr_assert_eq(cs_ps_store_flush(st), 0);
	cr_assert_eq(val(st, 5, 0), 9.0f);
	cr_assert_eq(val(st, 5, 1), 8.0f);
	cr_assert_eq(cs_ps_store_stats(st)->push_dup, 2);
	cr_assert_eq(cs_ps_store_stats(st)->push_applied, 1);
	/* every copy acknowledged, so the worker stops sending */
	cr_assert_eq(nrep, 3);
	for (unsigned i = 0; i < 3; i++) {
		cr_assert_eq(rep[i].m.type, CS_PS_MSG_PUSH_ACK);
		cr_assert_eq(rep[i].m.status, 0);
		cr_assert_eq(rep[i].m.id, 0);
	}
	/* the same push id from another worker is another push */
	n = push(&s, 0, 0, 0, &k, &g, 1, 0, 1);
	cr_assert_eq(cs_ps_store_rx(st, msg, n), 0);
	cr_assert_eq(cs_ps_store_flush(st), 0);
	cr_assert_eq(val(st, 5, 0), 8.0f);
	cs_ps_store_destroy(st);
}

Test(ps_store, out_of_order_ids_and_window)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_SGD);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k = 1;
	float g = 1.0f;
	size_t n;

	/* ids 2, 0, 1 (reordered), then a copy of 2 */
	n = push(&s, 0, 2, 0, &k, &g, 1, 0, 1);
	cs_ps_store_rx(st, msg, n);
	n = push(&s, 0, 0, 0, &k, &g, 1, 0, 1);
	cs_ps_store_rx(st, msg, n);
	n = push(&s, 0, 1, 0, &k, &g, 1, 0, 1);
	cs_ps_store_rx(st, msg, n);
	n = push(&s, 0, 2, 0, &k, &g, 1, 0, 1);
	cs_ps_store_rx(st, msg, n);
	cs_ps_store_flush(st);
	cr_assert_eq(val(st, 1, 0), 7.0f);
	/* beyond the window: dropped without an ack, applied later */
	nrep = 0;
	n = push(&s, 0, 3 + CS_PS_DEDUP_WINDOW, 0, &k, &g, 1, 0, 1);
	cs_ps_store_rx(st, msg, n);
	cs_ps_store_flush(st);
	cr_assert_eq(nrep, 0);
	cr_assert_eq(cs_ps_store_stats(st)->push_early, 1);
	cr_assert_eq(val(st, 1, 0), 7.0f);
	cs_ps_store_destroy(st);
}

/* Sync: a push CS_PS_AHEAD versions ahead of what the server applied is
 * parked (no ack yet, nothing applied), taken once its version is in the
 * window; a copy of it that arrives meanwhile is not parked twice. */
Test(ps_store, early_push_parked_then_taken)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_SYNC, 0, 2, CS_PS_OPT_SGD);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k = 7;
	float g = 1.0f;
	size_t n;

	for (uint64_t v = 0; v <= CS_PS_AHEAD; v++) {
		n = push(&s, 0, v, v, &k, &g, 1, 0, 1);
		cr_assert_eq(cs_ps_store_rx(st, msg, n), 0);
	}
	/* the copy a worker's timer sends */
	cr_assert_eq(cs_ps_store_rx(st, msg, n), 0);
	cr_assert_eq(cs_ps_store_flush(st), 0);
	cr_assert_eq(nrep, CS_PS_AHEAD);
	cr_assert_eq(cs_ps_store_stats(st)->push_parked, 1);
	cr_assert_eq(cs_ps_store_stats(st)->push_early, 0);
	/* worker 1 completes version 0: the parked push is taken */
	n = push(&s, 1, 0, 0, NULL, NULL, 0, 0, 1);
	cr_assert_eq(cs_ps_store_rx(st, msg, n), 0);
	cr_assert_eq(cs_ps_store_flush(st), 0);
	cr_assert_eq(cs_ps_store_clock(st, 2), 1);
	cr_assert_eq(nrep, CS_PS_AHEAD + 2);
	cr_assert_eq(rep[nrep - 1].m.type, CS_PS_MSG_PUSH_ACK);
	cr_assert_eq(rep[nrep - 1].m.id, CS_PS_AHEAD);
	cr_assert_eq(rep[nrep - 1].m.status, 0);
	nrep = 0;
	for (uint64_t v = 1; v <= CS_PS_AHEAD; v++) {
		n = push(&s, 1, v, v, NULL, NULL, 0, 0, 1);
		cr_assert_eq(cs_ps_store_rx(st, msg, n), 0);
		cr_assert_eq(cs_ps_store_flush(st), 0);
	}
	cr_assert_eq(cs_ps_store_clock(st, 2), CS_PS_AHEAD + 1);
	cr_assert_eq(nrep, CS_PS_AHEAD);
	/* every version's gradient applied once */
	cr_assert_eq(val(st, 7, 0), 10.0f - (float)(CS_PS_AHEAD + 1));
	cr_assert_eq(cs_ps_store_stats(st)->push_applied,
		     2 * (CS_PS_AHEAD + 1));
	cr_assert_eq(cs_ps_store_stats(st)->push_early, 0);
	cs_ps_store_destroy(st);
}

/* Sync: a version is applied only when every worker's push (all its
 * parts) arrived; a pull at clock 1 waits for it. */
Test(ps_store, sync_waits_for_every_worker)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_SYNC, 0, 3, CS_PS_OPT_SGD);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k[2] = { 7, 8 };
	float g[2] = { 1.0f, 0.5f };
	size_t n;

	n = push(&s, 0, 0, 0, k, g, 2, 0, 1);
	cs_ps_store_rx(st, msg, n);
	n = pull(&s, 0, 0, 1, k, 2);
	cs_ps_store_rx(st, msg, n);
	/* worker 1 sends its version in two parts; part 1 first */
	n = push(&s, 1, 0, 0, &k[1], &g[1], 1, 1, 2);
	cs_ps_store_rx(st, msg, n);
	n = push(&s, 2, 0, 0, NULL, NULL, 0, 0, 1); /* nothing but a clock */
	cs_ps_store_rx(st, msg, n);
	cs_ps_store_flush(st);
	cr_assert_eq(cs_ps_store_clock(st, 2), 0);
	cr_assert_eq(val(st, 7, 0), 10.0f);
	cr_assert_eq(nrep, 3); /* acks only, the pull waits */
	n = push(&s, 1, 1, 0, &k[0], &g[0], 1, 0, 2);
	cs_ps_store_rx(st, msg, n);
	cs_ps_store_flush(st);
	cr_assert_eq(cs_ps_store_clock(st, 2), 1);
	cr_assert_eq(val(st, 7, 0), 8.0f); /* 10 - (1 + 1) */
	cr_assert_eq(val(st, 8, 0), 9.0f); /* 10 - (0.5 + 0.5) */
	cr_assert_eq(nrep, 5);
	cr_assert_eq(rep[4].m.type, CS_PS_MSG_PULL_REPLY);
	cr_assert_eq(rep[4].m.status, 0);
	cr_assert_eq(rep[4].m.version, 1);
	{
		float row[2];

		cs_ps_wire_row(&rep[4].m, 0, row);
		cr_assert_eq(row[0], 8.0f);
		cs_ps_wire_row(&rep[4].m, 1, row);
		cr_assert_eq(row[1], 8.0f); /* 10 - 2 * 1 */
	}
	cs_ps_store_destroy(st);
}

/* Many workers push one hot key before a flush: one optimizer step on
 * the sum, not one per push (Adam's step count says which). */
Test(ps_store, hot_key_aggregated_before_apply)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 4, CS_PS_OPT_ADAM);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k = 42;
	float g = 0.25f, w[2] = { 10.0f, 10.0f }, state[4] = { 0 };
	float sum[2] = { 1.0f, 2.0f };
	uint32_t step = 0;

	for (uint32_t i = 0; i < 4; i++) {
		size_t n = push(&s, i, 0, 0, &k, &g, 1, 0, 1);

		cs_ps_store_rx(st, msg, n);
	}
	cs_ps_store_flush(st);
	cr_assert_eq(cs_ps_store_stats(st)->rows_updated, 1);
	cs_ps_opt_apply(&s, w, state, &step, sum);
	cr_assert_eq(val(st, 42, 0), w[0]);
	cr_assert_eq(val(st, 42, 1), w[1]);
	cs_ps_store_destroy(st);
}

static void expect_refused(struct cs_ps_store *st, size_t n, int status)
{
	unsigned before = nrep;

	cr_assert_eq(cs_ps_store_rx(st, msg, n), 0);
	cr_assert_eq(nrep, before + 1);
	cr_assert_eq(rep[before].m.status, status, "status %d, want %d",
		     rep[before].m.status, status);
}

Test(ps_store, malformed_pushes_refused_nothing_applied)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 2, CS_PS_OPT_SGD);
	struct cs_ps_table_spec other = s;
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k[2] = { 3, 100000 };
	float g[2] = { 1.0f, 1.0f };
	size_t n;

	/* one key outside the table's range: the whole push is refused */
	n = push(&s, 0, 0, 0, k, g, 2, 0, 1);
	expect_refused(st, n, -ERANGE);
	other.id = 9; /* unknown table (ids count per table) */
	n = push(&other, 0, 0, 0, k, g, 1, 0, 1);
	expect_refused(st, n, -ENOENT);
	other = s, other.dim = 3; /* row size mismatch */
	n = push(&other, 0, 1, 0, k, g, 1, 0, 1);
	expect_refused(st, n, -EBADMSG);
	other = s, other.dtype = CS_BF16;
	n = push(&other, 0, 2, 0, k, g, 1, 0, 1);
	expect_refused(st, n, -EBADMSG);
	n = push(&s, 5, 0, 0, k, g, 1, 0, 1); /* no such worker */
	expect_refused(st, n, -EINVAL);
	/* garbage: counted, no reply (no one to answer) */
	memset(msg, 0x5a, 100);
	cr_assert_eq(cs_ps_store_rx(st, msg, 100), 0);
	cr_assert_eq(nrep, 5);
	cs_ps_store_flush(st);
	cr_assert_eq(val(st, 3, 0), 10.0f);
	cr_assert_eq(cs_ps_store_stats(st)->rejected, 6);
	/* a copy of a refused push gets the same answer, not an "ok" */
	n = push(&s, 0, 0, 0, k, g, 2, 0, 1);
	cs_ps_store_rx(st, msg, n);
	cr_assert_eq(nrep, 6);
	cr_assert_eq(rep[5].m.status, -ERANGE);
	cr_assert_eq(cs_ps_store_stats(st)->push_dup, 1);
	cr_assert_eq(cs_ps_store_stats(st)->push_applied, 0);
	{
		uint64_t total, res;

		cs_ps_store_nrows(st, 2, &total, &res);
		cr_assert_eq(total, 0);
	}
	/* the refused ids moved the window: 64 more pushes are taken */
	nrep = 0;
	for (uint64_t id = 3; id < 3 + CS_PS_DEDUP_WINDOW; id++)
		cs_ps_store_rx(st, msg, push(&s, 0, id, 0, k, g, 1, 0, 1));
	cs_ps_store_flush(st);
	cr_assert_eq(cs_ps_store_stats(st)->push_applied, CS_PS_DEDUP_WINDOW);
	cr_assert_eq(cs_ps_store_stats(st)->push_early, 0);
	cs_ps_store_destroy(st);
}

Test(ps_store, key_of_another_shard_refused)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_SGD);
	uint32_t servers[2] = { 0, 1 };
	struct cs_ps_shardmap map;
	struct cs_ps_store_cfg cfg = {
		.server = 0, .map = &map, .msg_max = 4096, .parked_max = 4
	};
	struct cs_ps_store_io io = { .send = cap_send };
	struct cs_ps_store *st;
	uint64_t k = 0;
	float g = 1.0f;

	cr_assert_eq(cs_ps_shardmap_init(&map, servers, 2, 16), 0);
	while (cs_ps_shard_of(&map, 2, k) == 0)
		k++;
	nrep = 0;
	cr_assert_eq(cs_ps_store_create(&st, &cfg, &io), 0);
	cr_assert_eq(cs_ps_store_add_table(st, &s, 0, NULL), 0);
	expect_refused(st, push(&s, 0, 0, 0, &k, &g, 1, 0, 1), -ENXIO);
	expect_refused(st, pull(&s, 0, 0, 0, &k, 1), -ENXIO);
	cs_ps_store_destroy(st);
	cs_ps_shardmap_fini(&map);
}

/* A push for a version the worker already completed, under a new id, is
 * a protocol error; nparts changing within a version too. */
Test(ps_store, late_version_and_parts_mismatch)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_SSP, 1, 2, CS_PS_OPT_SGD);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k = 1;
	float g = 1.0f;

	cs_ps_store_rx(st, msg, push(&s, 0, 0, 0, &k, &g, 1, 0, 1));
	expect_refused(st, push(&s, 0, 1, 0, &k, &g, 1, 0, 1), CS_ERR_PROTO);
	cs_ps_store_rx(st, msg, push(&s, 0, 2, 1, &k, &g, 1, 0, 3));
	expect_refused(st, push(&s, 0, 3, 1, &k, &g, 1, 1, 2), CS_ERR_PROTO);
	cs_ps_store_flush(st);
	cr_assert_eq(val(st, 1, 0), 8.0f);
	cs_ps_store_destroy(st);
}

/* ssp:1, two workers: worker 0 runs ahead; its pull at clock 3 waits
 * until worker 1 completed 2 versions. */
Test(ps_store, ssp_pull_waits_for_the_slow_worker)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_SSP, 1, 2, CS_PS_OPT_SGD);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k = 1;
	float g = 1.0f;

	for (uint64_t v = 0; v < 3; v++)
		cs_ps_store_rx(st, msg, push(&s, 0, v, v, &k, &g, 1, 0, 1));
	cs_ps_store_rx(st, msg, pull(&s, 0, 0, 3, &k, 1));
	cs_ps_store_flush(st);
	cr_assert_eq(nrep, 3); /* three acks, no reply */
	cr_assert_eq(val(st, 1, 0), 7.0f); /* async application */
	cs_ps_store_rx(st, msg, push(&s, 1, 0, 0, &k, &g, 1, 0, 1));
	cs_ps_store_flush(st);
	cr_assert_eq(nrep, 4);
	cs_ps_store_rx(st, msg, push(&s, 1, 1, 1, &k, &g, 1, 0, 1));
	cs_ps_store_flush(st);
	cr_assert_eq(nrep, 6);
	cr_assert_eq(rep[5].m.type, CS_PS_MSG_PULL_REPLY);
	cr_assert_eq(rep[5].m.version, 2); /* the slowest clock served */
	cr_assert_leq(cs_ps_store_stats(st)->max_staleness, 1);
	/* a pull within the bound goes at once; async at any clock */
	cs_ps_store_rx(st, msg, pull(&s, 1, 1, 3, &k, 1));
	cs_ps_store_flush(st);
	cr_assert_eq(nrep, 7);
	cs_ps_store_destroy(st);
}

Test(ps_store, pulls_of_absent_keys_create_nothing)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_ADAM);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k[3] = { 11, 12, 11 }, total, res;
	float row[2];

	s.init.kind = CS_PS_INIT_UNIFORM;
	cs_ps_store_rx(st, msg, pull(&s, 0, 0, 0, k, 3));
	cs_ps_store_flush(st);
	cr_assert_eq(nrep, 1);
	cr_assert_eq(rep[0].m.nkeys, 3);
	cs_ps_wire_row(&rep[0].m, 2, row);
	cr_assert_eq(row[0], 10.0f);
	cs_ps_store_nrows(st, 2, &total, &res);
	cr_assert_eq(total, 0);
	cs_ps_store_destroy(st);
}

Test(ps_store, pull_too_big_and_queue_full)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_SYNC, 0, 2, CS_PS_OPT_SGD);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	static uint64_t k[1000];

	for (int i = 0; i < 1000; i++)
		k[i] = (uint64_t)i;
	/* 1000 rows of 8 bytes do not fit a 4096-byte reply */
	expect_refused(st, pull(&s, 0, 0, 0, k, 1000), -EMSGSIZE);
	/* four pulls wait (clock 1, nothing applied); copies do not count;
	 * the fifth is told to come back later */
	for (uint64_t id = 1; id <= 4; id++) {
		cs_ps_store_rx(st, msg, pull(&s, 0, id, 1, k, 1));
		cs_ps_store_rx(st, msg, pull(&s, 0, id, 1, k, 1));
	}
	/* the refusal, then one "still waiting" per copy */
	cr_assert_eq(nrep, 5);
	for (unsigned i = 1; i < 5; i++)
		cr_assert_eq(rep[i].m.status, -EINPROGRESS);
	cr_assert_eq(cs_ps_store_stats(st)->pull_dup, 4);
	expect_refused(st, pull(&s, 1, 9, 1, k, 1), -EBUSY);
	cs_ps_store_destroy(st);
}

/*
 * Sync, parked_max 4: four pulls of clock 1 wait for version 0, which
 * needs worker 1's push, and worker 1 first pulls clock 0 (answerable at
 * once). Refused for the full parking, that pull would come back only at
 * worker 1's timer, and every worker would wait for it: it is taken and
 * answered at the next flush. Pulls the next flush cannot answer are
 * still refused, and so is a ready one once the room beyond parked_max
 * is full too.
 */
Test(ps_store, ready_pull_taken_when_waiting_pulls_fill_the_parking)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_SYNC, 0, 2, CS_PS_OPT_SGD);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	uint64_t k = 5;
	float g = 1.0f;

	for (uint64_t id = 1; id <= 4; id++)
		cr_assert_eq(cs_ps_store_rx(st, msg, pull(&s, 0, id, 1, &k, 1)),
			     0);
	cr_assert_eq(nrep, 0);
	expect_refused(st, pull(&s, 1, 7, 1, &k, 1), -EBUSY);
	/* worker 1's pull of clock 0: taken, answered by the flush */
	cr_assert_eq(cs_ps_store_rx(st, msg, pull(&s, 1, 8, 0, &k, 1)), 0);
	cr_assert_eq(nrep, 1, "the ready pull was refused");
	cr_assert_eq(cs_ps_store_flush(st), 0);
	cr_assert_eq(nrep, 2);
	cr_assert_eq(rep[1].m.type, CS_PS_MSG_PULL_REPLY);
	cr_assert_eq(rep[1].m.worker, 1);
	cr_assert_eq(rep[1].m.id, 8);
	cr_assert_eq(rep[1].m.status, 0);
	cr_assert_eq(rep[1].m.nkeys, 1);
	cr_assert_eq(cs_ps_store_stats(st)->pull_busy, 1);
	/* then both workers push version 0: the waiting pulls are served */
	cr_assert_eq(
		cs_ps_store_rx(st, msg, push(&s, 0, 0, 0, &k, &g, 1, 0, 1)), 0);
	cr_assert_eq(
		cs_ps_store_rx(st, msg, push(&s, 1, 0, 0, &k, &g, 1, 0, 1)), 0);
	nrep = 0;
	cr_assert_eq(cs_ps_store_flush(st), 0);
	cr_assert_eq(nrep, 4);
	for (unsigned i = 0; i < 4; i++) {
		cr_assert_eq(rep[i].m.type, CS_PS_MSG_PULL_REPLY);
		cr_assert_eq(rep[i].m.worker, 0);
		cr_assert_eq(rep[i].m.status, 0);
	}
	/* the room beyond parked_max is bounded too: four waiting again,
	 * four ready ones taken (no flush between), the fifth refused */
	nrep = 0;
	for (uint64_t id = 11; id <= 14; id++)
		cr_assert_eq(cs_ps_store_rx(st, msg, pull(&s, 0, id, 2, &k, 1)),
			     0);
	for (uint64_t id = 21; id <= 24; id++)
		cr_assert_eq(cs_ps_store_rx(st, msg, pull(&s, 1, id, 1, &k, 1)),
			     0);
	cr_assert_eq(nrep, 0);
	expect_refused(st, pull(&s, 1, 25, 1, &k, 1), -EBUSY);
	cr_assert_eq(cs_ps_store_flush(st), 0);
	cr_assert_eq(nrep, 5); /* the refusal, the four ready ones */
	cs_ps_store_destroy(st);
}

/* ---- SSD tier: an in-memory file ---------------------------------------- */

struct memfile {
	uint8_t p[1 << 20];
	unsigned reads, writes;
	bool fail;
	/* reads started (mf_read_start), done by mf_read_poll unless held */
	struct cs_ps_io_req a[256];
	unsigned an, astarted;
	bool hold, afail;
	bool late; /* the bytes land when the batch completes, not before */
	unsigned waited; /* polls that waited for a batch in flight */
	unsigned amax; /* 0, or the most reads a batch may have (-E2BIG) */
};

static int mf_write(void *ctx, struct cs_ps_io_req *r, unsigned n)
{
	struct memfile *f = ctx;

	if (f->fail)
		return -EIO;
	for (unsigned i = 0; i < n; i++) {
		cr_assert_leq(r[i].off + r[i].len, sizeof(f->p));
		memcpy(f->p + r[i].off, r[i].buf, r[i].len);
		f->writes++;
	}
	return 0;
}

static int mf_read(void *ctx, struct cs_ps_io_req *r, unsigned n)
{
	struct memfile *f = ctx;

	if (f->fail)
		return -EIO;
	for (unsigned i = 0; i < n; i++) {
		cr_assert_leq(r[i].off + r[i].len, sizeof(f->p));
		memcpy(r[i].buf, f->p + r[i].off, r[i].len);
		f->reads++;
	}
	return 0;
}

static const struct cs_ps_spill_ops mf_ops = { mf_write, mf_read };

static int mf_read_start(void *ctx, const struct cs_ps_io_req *r, unsigned n)
{
	struct memfile *f = ctx;

	if (f->an)
		return -EBUSY;
	if (n > CS_ARRAY_SIZE(f->a) || (f->amax && n > f->amax))
		return -E2BIG;
	memcpy(f->a, r, sizeof(*r) * n);
	f->an = n;
	f->astarted++;
	/* the file's bytes as they are now: a row written back to its slot
	 * while the reads fly is not in them (a real file may do either) */
	return f->afail || f->late ? 0 : mf_read(f, f->a, n);
}

static int mf_read_poll(void *ctx, bool wait)
{
	struct memfile *f = ctx;

	if (!f->an)
		return 0;
	if (f->hold && !wait)
		return 1;
	f->waited += wait;
	if (f->late && !f->afail)
		(void)mf_read(f, f->a, f->an);
	f->an = 0;
	return f->afail ? -EIO : 0;
}

static const struct cs_ps_spill_ops mf_async_ops = { mf_write, mf_read,
						     mf_read_start,
						     mf_read_poll };

/* Adam rows (values + 2 state vectors: 24 bytes a frame) with room for
 * 64 in memory; 1000 rows pushed twice each, against a store without a
 * budget: same values, state kept across the trip to disk. */
Test(ps_store, spill_keeps_rows_and_state)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_ADAM);
	static struct memfile mf;
	struct cs_ps_spill sp = { &mf_ops, &mf };
	struct cs_ps_store *a, *b;
	uint64_t keys[50], total, res;
	float g[50];

	s.init.kind = CS_PS_INIT_UNIFORM;
	s.init.seed = 3;
	cr_assert_eq(cs_ps_store_add_table((a = mkstore(&s, 0, NULL), a), &s, 0,
					   NULL),
		     -EEXIST);
	b = mkstore(&s, 64 * 24, &sp);
	cr_assert_eq(cs_ps_store_add_table(b, &s, 10, &sp), -EEXIST);
	for (uint64_t id = 0; id < 40; id++) {
		for (int i = 0; i < 50; i++) {
			keys[i] = (id * 50 + (uint64_t)i) % 1000;
			g[i] = 0.01f * (float)(i + 1) * (id % 3 ? 1 : -1);
		}
		nrep = 0;
		size_t n = push(&s, 0, id, 0, keys, g, 50, 0, 1);

		cs_ps_store_rx(a, msg, n);
		cs_ps_store_rx(b, msg, n);
		cs_ps_store_flush(a);
		cs_ps_store_flush(b);
	}
	cs_ps_store_nrows(b, 2, &total, &res);
	cr_assert_eq(total, 1000);
	cr_assert_leq(res, 64);
	cr_assert_gt(mf.writes, 900);
	cr_assert_gt(mf.reads, 900);
	/* a pull of cold rows reads them back */
	for (int i = 0; i < 50; i++)
		keys[i] = (uint64_t)(i * 19);
	nrep = 0;
	cs_ps_store_rx(a, msg, pull(&s, 0, 0, 0, keys, 50));
	cs_ps_store_rx(b, msg, pull(&s, 0, 0, 0, keys, 50));
	cs_ps_store_flush(a);
	cs_ps_store_flush(b);
	cr_assert_eq(nrep, 2);
	cr_assert_eq(rep[0].len, rep[1].len);
	cr_assert_eq(memcmp(rep[0].raw, rep[1].raw, rep[0].len), 0);
	for (uint64_t k = 0; k < 1000; k++) {
		float ra[2], rb[2];

		cr_assert_eq(cs_ps_store_peek(a, 2, k, ra), 0);
		cr_assert_eq(cs_ps_store_peek(b, 2, k, rb), 0);
		cr_assert_eq(memcmp(ra, rb, sizeof(ra)), 0, "key %llu",
			     (unsigned long long)k);
	}
	cr_assert_gt(cs_ps_store_stats(b)->spill_reads, 0);
	/* the file fails: an error, not a crash, and no row is lost */
	mf.fail = true;
	keys[0] = 999;
	keys[1] = 5;
	g[0] = 1.0f;
	g[1] = -1.0f;
	cs_ps_store_rx(a, msg, push(&s, 0, 40, 0, keys, g, 2, 0, 1));
	cs_ps_store_flush(a);
	cs_ps_store_rx(b, msg, push(&s, 0, 40, 0, keys, g, 2, 0, 1));
	for (int i = 0; i < 50; i++)
		keys[i] = (uint64_t)(i * 7);
	cs_ps_store_rx(b, msg, pull(&s, 0, 1, 0, keys, 50));
	cr_assert_eq(cs_ps_store_flush(b), -EIO);
	mf.fail = false;
	cr_assert_eq(cs_ps_store_flush(b), 0);
	/* the acknowledged push was applied once, after the error */
	for (uint64_t k = 0; k < 1000; k++) {
		float ra[2], rb[2];

		cr_assert_eq(cs_ps_store_peek(a, 2, k, ra), 0);
		cr_assert_eq(cs_ps_store_peek(b, 2, k, rb), 0);
		cr_assert_eq(memcmp(ra, rb, sizeof(ra)), 0, "key %llu",
			     (unsigned long long)k);
	}
	cs_ps_store_destroy(a);
	cs_ps_store_destroy(b);
}

/*
 * A pull of rows on disk does not hold the store up: its reads are
 * started and the pull stays parked while pushes are acknowledged (their
 * updates, of rows on disk too, wait for the batch in flight, then for
 * their own), then a later flush serves it. A row of the batch in flight
 * that a push brings in meanwhile is not overwritten by the stale read;
 * a failed read leaves the pull parked, served once the file works.
 * Every reply equals a store without a budget's (the pull: as that store
 * answers it when it arrives, before the pushes after it).
 */
Test(ps_store, pull_of_cold_rows_waits_without_blocking)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_ADAM);
	static struct memfile mf;
	struct cs_ps_spill sp = { &mf_async_ops, &mf };
	struct cs_ps_store *a, *b;
	uint64_t keys[50], pk[20], id = 0;
	float g[50];
	struct reply ra, ref;
	size_t n;

	s.init.kind = CS_PS_INIT_UNIFORM;
	s.init.seed = 7;
	a = mkstore(&s, 0, NULL);
	b = mkstore(&s, 64 * 24, &sp);
	for (; id < 20; id++) {
		for (int i = 0; i < 50; i++) {
			keys[i] = (id * 50 + (uint64_t)i) % 1000;
			g[i] = 0.01f * (float)(i + 1);
		}
		n = push(&s, 0, id, 0, keys, g, 50, 0, 1);
		cs_ps_store_rx(a, msg, n);
		cs_ps_store_rx(b, msg, n);
		cr_assert_eq(cs_ps_store_flush(a), 0);
		cr_assert_eq(cs_ps_store_flush(b), 0);
	}
	/* 20 keys of the first pushes: on disk by now */
	for (int i = 0; i < 20; i++)
		pk[i] = (uint64_t)(i * 7);
	mf.hold = true;
	nrep = 0;
	cs_ps_store_rx(a, msg, pull(&s, 0, 0, 0, pk, 20));
	cr_assert_eq(cs_ps_store_flush(a), 0);
	cr_assert_eq(nrep, 1);
	ref = rep[0];
	nrep = 0;
	cs_ps_store_rx(b, msg, pull(&s, 0, 0, 0, pk, 20));
	cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(nrep, 0, "served before its reads landed");
	cr_assert_eq(cs_ps_store_stats(b)->spill_reads_async, 0);
	cr_assert_eq(mf.astarted, 1);
	cr_assert_eq(mf.an, 20, "its 20 rows on disk were started");
	cr_assert(cs_ps_store_io_pending(b));
	cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(nrep, 0);
	cr_assert_gt(cs_ps_store_stats(b)->pull_io_waits, 1);
	/* meanwhile a push, of a key the reads also bring (0) and one on
	 * disk (500): acknowledged while the reads fly, its update parked */
	keys[0] = 0;
	keys[1] = 500;
	g[0] = 1.0f;
	g[1] = -2.0f;
	n = push(&s, 0, id, 0, keys, g, 2, 0, 1);
	cs_ps_store_rx(a, msg, n);
	cs_ps_store_rx(b, msg, n);
	id++;
	cr_assert_eq(cs_ps_store_flush(a), 0);
	cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(nrep, 2, "the push was not acknowledged meanwhile");
	cr_assert_eq(rep[1].m.type, CS_PS_MSG_PUSH_ACK);
	cr_assert_eq(rep[1].m.status, 0);
	cr_assert(cs_ps_store_stats(b)->push_io_waits > 0);
	/* 100 new rows: key 0, changed, goes back to its slot on disk; the
	 * reads in flight hold its old bytes, which must not come back */
	for (int i = 0; i < 50; i++) {
		keys[i] = 2000 + (uint64_t)i;
		g[i] = 0.5f;
	}
	for (int r = 0; r < 2; r++, id++) {
		n = push(&s, 0, id, 0, keys, g, 50, 0, 1);
		cs_ps_store_rx(a, msg, n);
		cs_ps_store_rx(b, msg, n);
		cr_assert_eq(cs_ps_store_flush(a), 0);
		cr_assert_eq(cs_ps_store_flush(b), 0);
		for (int i = 0; i < 50; i++)
			keys[i] += 50;
	}
	cr_assert_eq(nrep, 6, "pushes not acknowledged by both stores");
	/* the reads land: the next flushes read the parked update's row
	 * on disk (500) and serve the pull, then apply the updates */
	mf.hold = false;
	cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(nrep, 7);
	cr_assert(!cs_ps_store_io_pending(b));
	cr_assert_geq(cs_ps_store_stats(b)->spill_reads_async, 20);
	cr_assert_geq(cs_ps_store_stats(b)->push_reads_async, 1);
	ra = rep[6];
	cr_assert_eq(ra.m.type, CS_PS_MSG_PULL_REPLY);
	cr_assert_eq(ra.len, ref.len);
	cr_assert_eq(
		memcmp(ra.raw, ref.raw, ra.len), 0,
		"the pull's rows differ from the store without a budget's");
	cr_assert_geq(mf.astarted, 2);
	/* a read that fails: the pull stays parked, then is served */
	for (int i = 0; i < 20; i++)
		pk[i] = (uint64_t)(i * 11 + 1);
	mf.afail = true;
	nrep = 0;
	cs_ps_store_rx(b, msg, pull(&s, 0, 1, 0, pk, 20));
	cr_assert_eq(cs_ps_store_flush(b), 0); /* started */
	cr_assert_eq(cs_ps_store_flush(b), -EIO);
	cr_assert_eq(nrep, 0);
	mf.afail = false;
	cr_assert_eq(cs_ps_store_flush(b), 0); /* started again */
	cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(nrep, 1);
	ra = rep[0];
	cs_ps_store_rx(a, msg, pull(&s, 0, 1, 0, pk, 20));
	cr_assert_eq(cs_ps_store_flush(a), 0);
	cr_assert_eq(memcmp(ra.raw, rep[1].raw, ra.len), 0);
	for (uint64_t k = 0; k < 1000; k++) {
		float x[2], y[2];

		cr_assert_eq(cs_ps_store_peek(a, 2, k, x), 0);
		cr_assert_eq(cs_ps_store_peek(b, 2, k, y), 0);
		cr_assert_eq(memcmp(x, y, sizeof(x)), 0, "key %llu",
			     (unsigned long long)k);
	}
	cs_ps_store_destroy(a);
	cs_ps_store_destroy(b);
}

/* The reply to pull @id among the replies captured, copied to @out. */
static void find_pull_reply(uint64_t id, struct reply *out)
{
	for (unsigned i = 0; i < nrep; i++)
		if (rep[i].m.type == CS_PS_MSG_PULL_REPLY &&
		    rep[i].m.id == id && rep[i].m.status == 0) {
			*out = rep[i];
			return;
		}
	cr_assert_fail("no reply to pull %llu", (unsigned long long)id);
}

/*
 * One round on store @st: both workers push (keys with duplicates, a key
 * on disk, a hot key), the push of the round before is sent again, then a
 * pull of the pushed keys and one of the hot key alone, back to back.
 * Returns the first flush's status.
 */
static void parked_round(struct cs_ps_store *st,
			 const struct cs_ps_table_spec *s, uint64_t r,
			 struct memfile *mf, bool hold, struct reply *pa,
			 struct reply *pb, struct reply *pc)
{
	uint64_t keys[2][40], hot = 7;
	float g[40];
	uint32_t seed = (uint32_t)r * 2654435761u + 1;
	/* async: ids 2r, and 2r + 1 for a push of no keys (below) */
	uint64_t id = s->mode == CS_PS_ASYNC ? 2 * r : r, id0;
	struct reply e;

	for (uint32_t w = 0; w < 2; w++) {
		for (int i = 0; i < 40; i++) {
			seed = seed * 1103515245u + 12345u;
			keys[w][i] = (seed >> 8) % 1000;
			g[i] = 0.125f * (float)((int)(seed >> 20) % 17 - 8);
		}
		keys[w][3] = keys[w][1]; /* a key twice in one push */
		keys[w][5] = (r * 37) % 1000; /* pulled back to back */
		keys[w][6] = hot;
		if (mf)
			mf->hold = hold;
		if (s->mode == CS_PS_SSP && w == 1) {
			/* ssp:1, clock r + 2: waits for worker 1's push of
			 * r (not in yet: not served by this flush), then
			 * must see it, parked for its reads or not */
			cs_ps_store_rx(
				st, msg,
				pull(s, 0, 4000 + r, r + 2, keys[1] + 20, 20));
			cr_assert_eq(cs_ps_store_flush(st), 0);
		}
		cs_ps_store_rx(st, msg,
			       push(s, w, id, r, keys[w], g, 40, 0, 1));
		id0 = s->mode == CS_PS_ASYNC ? id - 2 : id - 1;
		if (r) /* a retransmission of the round before's */
			cs_ps_store_rx(
				st, msg,
				push(s, w, id0, r - 1, keys[w], g, 40, 0, 1));
	}
	cs_ps_store_rx(st, msg, pull(s, 0, 1000 + r, r + 1, keys[0], 20));
	cs_ps_store_rx(st, msg, pull(s, 1, 2000 + r, r + 1, &hot, 1));
	cr_assert_eq(cs_ps_store_flush(st), 0);
	if (mf && hold) {
		/* the reads fly: copies of both pushes are acknowledged
		 * again, not applied again */
		for (uint32_t w = 0; w < 2; w++)
			cs_ps_store_rx(st, msg,
				       push(s, w, id, r, keys[w], g, 40, 0, 1));
		cr_assert_eq(cs_ps_store_flush(st), 0);
	}
	if (mf) {
		mf->hold = false;
		for (int i = 0; i < 64 && cs_ps_store_io_pending(st); i++)
			cr_assert_eq(cs_ps_store_flush(st), 0);
		cr_assert(!cs_ps_store_io_pending(st), "round %llu stuck",
			  (unsigned long long)r);
	}
	find_pull_reply(1000 + r, pa);
	find_pull_reply(2000 + r, pb);
	if (s->mode == CS_PS_SSP)
		find_pull_reply(4000 + r, pc);
	if (s->mode != CS_PS_ASYNC)
		return;
	/* a push of no keys (nothing to apply), then a pull: served */
	nrep = 0;
	cs_ps_store_rx(st, msg, push(s, 1, id + 1, r, keys[1], g, 0, 0, 1));
	cs_ps_store_rx(st, msg, pull(s, 1, 3000 + r, r + 1, &hot, 1));
	cr_assert_eq(cs_ps_store_flush(st), 0);
	for (int i = 0; i < 64 && cs_ps_store_io_pending(st); i++)
		cr_assert_eq(cs_ps_store_flush(st), 0);
	find_pull_reply(3000 + r, &e);
}

/*
 * Pushes whose rows are on disk do not hold the store up: their update
 * is parked while the rows are read (read_start), and applied once, in
 * order, by a later flush. Every mode, Adam, 64 of 1,000 rows in memory,
 * reads held in flight over several flushes on two rounds of three (and
 * their bytes only there once they completed):
 * every pull reply (also of a key pushed just before it, on disk, and of
 * a hot key in memory whose update waits behind another key's read) and
 * the final table equal a store without a budget's, bit for bit, with as
 * many optimizer steps (none twice, none lost).
 */
Test(ps_store, push_of_cold_rows_parked_exact_in_every_mode)
{
	static const struct {
		enum cs_ps_mode mode;
		uint32_t stale;
	} modes[] = { { CS_PS_SYNC, 0 }, { CS_PS_ASYNC, 0 }, { CS_PS_SSP, 1 } };

	for (unsigned mi = 0; mi < CS_ARRAY_SIZE(modes); mi++) {
		struct cs_ps_table_spec s = mkspec(
			modes[mi].mode, modes[mi].stale, 2, CS_PS_OPT_ADAM);
		static struct memfile mf;
		struct cs_ps_spill sp = { &mf_async_ops, &mf };
		const struct cs_ps_store_stats *sa, *sb;
		struct cs_ps_store *a, *b;

		memset(&mf, 0, sizeof(mf));
		mf.late = true;
		s.init.kind = CS_PS_INIT_UNIFORM;
		s.init.seed = 11;
		s.opt.lr = 0.01f;
		a = mkstore(&s, 0, NULL);
		b = mkstore(&s, 64 * 24, &sp);
		for (uint64_t r = 0; r < 30; r++) {
			struct reply ra, rb, ha, hb, ca, cb;

			nrep = 0;
			parked_round(a, &s, r, NULL, false, &ra, &ha, &ca);
			nrep = 0;
			parked_round(b, &s, r, &mf, r % 3 != 0, &rb, &hb, &cb);
			if (modes[mi].mode == CS_PS_SSP)
				cr_assert_eq(memcmp(ca.raw, cb.raw, ca.len), 0,
					     "round %llu: ssp pull differs",
					     (unsigned long long)r);
			cr_assert_eq(ra.len, rb.len);
			cr_assert_eq(memcmp(ra.raw, rb.raw, ra.len), 0,
				     "mode %u round %llu: pull differs", mi,
				     (unsigned long long)r);
			cr_assert_eq(
				memcmp(ha.raw, hb.raw, ha.len), 0,
				"mode %u round %llu: hot key's pull differs",
				mi, (unsigned long long)r);
		}
		sa = cs_ps_store_stats(a);
		sb = cs_ps_store_stats(b);
		cr_assert_eq(sb->rows_updated, sa->rows_updated,
			     "mode %u: %llu optimizer steps, %llu expected", mi,
			     (unsigned long long)sb->rows_updated,
			     (unsigned long long)sa->rows_updated);
		cr_assert_eq(sb->push_applied, sa->push_applied);
		cr_assert_gt(sb->push_io_waits, 10, "mode %u", mi);
		cr_assert_gt(sb->push_reads_async, 100, "mode %u", mi);
		for (uint64_t k = 0; k < 1000; k++) {
			float x[2], y[2];

			cr_assert_eq(cs_ps_store_peek(a, 2, k, x), 0);
			cr_assert_eq(cs_ps_store_peek(b, 2, k, y), 0);
			cr_assert_eq(memcmp(x, y, sizeof(x)), 0,
				     "mode %u key %llu", mi,
				     (unsigned long long)k);
		}
		cs_ps_store_destroy(a);
		cs_ps_store_destroy(b);
	}
}

/*
 * Pulls whose rows evict each other's: four parked pulls of 30 rows on
 * disk each, 64 rows in memory. Each one's read lands and sends the
 * others' rows back to disk; a pull whose reads were started once is
 * served after its batch (what went back read the blocking way), so all
 * four are answered, equal to a store without a budget's.
 */
Test(ps_store, pulls_evicting_each_others_rows_all_served)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_ADAM);
	static struct memfile mf;
	struct cs_ps_spill sp = { &mf_async_ops, &mf };
	struct cs_ps_store *a, *b;
	struct reply want[4];
	uint64_t keys[50];
	float g[50];
	int i, n;

	a = mkstore(&s, 0, NULL);
	b = mkstore(&s, 64 * 24, &sp);
	for (uint64_t id = 0; id < 20; id++) {
		for (i = 0; i < 50; i++) {
			keys[i] = (id * 50 + (uint64_t)i) % 1000;
			g[i] = 0.25f * (float)(i % 5 + 1);
		}
		size_t len = push(&s, 0, id, 0, keys, g, 50, 0, 1);

		cs_ps_store_rx(a, msg, len);
		cs_ps_store_rx(b, msg, len);
		cr_assert_eq(cs_ps_store_flush(a), 0);
		cr_assert_eq(cs_ps_store_flush(b), 0);
		for (n = 0; n < 8 && cs_ps_store_io_pending(b); n++)
			cr_assert_eq(cs_ps_store_flush(b), 0);
	}
	nrep = 0;
	for (int p = 0; p < 4; p++) {
		for (i = 0; i < 30; i++)
			keys[i] = (uint64_t)(p * 250 + i * 7);
		cs_ps_store_rx(a, msg,
			       pull(&s, 0, 100 + (uint64_t)p, 0, keys, 30));
		cr_assert_eq(cs_ps_store_flush(a), 0);
		find_pull_reply(100 + (uint64_t)p, &want[p]);
		cs_ps_store_rx(b, msg,
			       pull(&s, 0, 100 + (uint64_t)p, 0, keys, 30));
	}
	nrep = 0;
	for (n = 0; n < 50 && nrep < 4; n++)
		cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(nrep, 4, "%u of 4 pulls served after %d flushes", nrep, n);
	for (int p = 0; p < 4; p++) {
		struct reply got;

		find_pull_reply(100 + (uint64_t)p, &got);
		cr_assert_eq(got.len, want[p].len);
		cr_assert_eq(memcmp(got.raw, want[p].raw, got.len), 0,
			     "pull %d differs", p);
	}
	cr_assert_gt(cs_ps_store_stats(b)->spill_reads_async, 30);
	cs_ps_store_destroy(a);
	cs_ps_store_destroy(b);
}

/*
 * A queue of parked updates that never runs dry: a push every flush, the
 * reads held every other flush, so that the store always has updates
 * waiting while it applies the front of the queue (and drops it). The
 * table and its optimizer steps equal a store without a budget's.
 */
Test(ps_store, parked_updates_that_never_run_dry)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_ADAM);
	static struct memfile mf;
	struct cs_ps_spill sp = { &mf_async_ops, &mf };
	struct cs_ps_store *a, *b;
	uint64_t keys[30];
	float g[30];
	uint32_t seed = 5;
	unsigned busy = 0;

	memset(&mf, 0, sizeof(mf));
	mf.late = true;
	a = mkstore(&s, 0, NULL);
	b = mkstore(&s, 64 * 24, &sp);
	for (uint64_t id = 0; id < 300; id++) {
		size_t len;

		for (int i = 0; i < 30; i++) {
			seed = seed * 1103515245u + 12345u;
			keys[i] = (seed >> 8) % 1000;
			g[i] = 0.125f * (float)((int)(seed >> 20) % 9 - 4);
		}
		len = push(&s, 0, id, 0, keys, g, 30, 0, 1);
		nrep = 0;
		cs_ps_store_rx(a, msg, len);
		cs_ps_store_rx(b, msg, len);
		mf.hold = id % 2 == 0;
		cr_assert_eq(cs_ps_store_flush(a), 0);
		cr_assert_eq(cs_ps_store_flush(b), 0);
		busy += cs_ps_store_io_pending(b);
	}
	cr_assert_gt(busy, 250, "the queue ran dry %u times of 300",
		     300 - busy);
	mf.hold = false;
	for (int n = 0; n < 1000 && cs_ps_store_io_pending(b); n++)
		cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(cs_ps_store_stats(b)->rows_updated,
		     cs_ps_store_stats(a)->rows_updated);
	/* every push applied: a pull now is served (it waits for them) */
	nrep = 0;
	cs_ps_store_rx(b, msg, pull(&s, 0, 7, 0, keys, 30));
	for (int n = 0; n < 64 && !nrep; n++)
		cr_assert_eq(cs_ps_store_flush(b), 0);
	cr_assert_eq(nrep, 1, "the pull after every push waits for ever");
	for (uint64_t k = 0; k < 1000; k++) {
		float x[2], y[2];

		cr_assert_eq(cs_ps_store_peek(a, 2, k, x), 0);
		cr_assert_eq(cs_ps_store_peek(b, 2, k, y), 0);
		cr_assert_eq(memcmp(x, y, sizeof(x)), 0, "key %llu",
			     (unsigned long long)k);
	}
	cs_ps_store_destroy(a);
	cs_ps_store_destroy(b);
}

Test(ps_store, budget_needs_a_spill_and_room)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_SGD);
	struct cs_ps_store_cfg cfg = { .server = 0,
				       .msg_max = 4096,
				       .parked_max = 4 };
	struct cs_ps_store_io io = { .send = cap_send };
	static struct memfile mf;
	struct cs_ps_spill sp = { &mf_ops, &mf };
	struct cs_ps_store *st;

	cr_assert_eq(cs_ps_store_create(&st, &cfg, &io), 0);
	cr_assert_eq(cs_ps_store_add_table(st, &s, 1 << 20, NULL), -EINVAL);
	cr_assert_eq(cs_ps_store_add_table(st, &s, 8 * 10, &sp), -EINVAL);
	s.dim = 0;
	cr_assert_eq(cs_ps_store_add_table(st, &s, 0, NULL), -EINVAL);
	cs_ps_store_destroy(st);
	cfg.msg_max = 10;
	cr_assert_eq(cs_ps_store_create(&st, &cfg, &io), -EINVAL);
}

/* ---- snapshot: copy on write ----------------------------------------------
 */

struct snapcap {
	uint8_t *p;
	size_t len;
	uint64_t nrec;
	int ended, rc;
};

static int cap_chunk(void *ctx, void *buf, size_t len, uint64_t nrec)
{
	struct snapcap *c = ctx;

	c->p = realloc(c->p, c->len + len);
	memcpy(c->p + c->len, buf, len);
	c->len += len;
	c->nrec += nrec;
	free(buf);
	return 0;
}

static void cap_end(void *ctx, uint64_t nrec, int rc)
{
	struct snapcap *c = ctx;

	c->ended++;
	c->rc = rc;
	cr_assert_eq(nrec, c->nrec);
}

Test(ps_store, snapshot_is_the_table_at_begin)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_SGD);
	struct cs_ps_store *st = mkstore(&s, 0, NULL);
	struct snapcap cap = { 0 };
	struct cs_ps_snap_sink sink = { cap_chunk, cap_end, &cap };
	uint64_t keys[100];
	float g[100], at_begin[100][2];
	size_t fb = cs_ps_store_frame_bytes(st, 2), rec;
	uint64_t id = 0;
	int rc;

	for (int i = 0; i < 100; i++)
		keys[i] = (uint64_t)i, g[i] = (float)i;
	cs_ps_store_rx(st, msg, push(&s, 0, id++, 0, keys, g, 100, 0, 1));
	cs_ps_store_flush(st);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(cs_ps_store_peek(st, 2, (uint64_t)i, at_begin[i]),
			     0);
	cr_assert_eq(cs_ps_store_snap_begin(st, 2, &sink, 256), 0);
	cr_assert_eq(cs_ps_store_snap_begin(st, 2, &sink, 256), -EBUSY);
	do {
		/* between steps every row changes and new ones appear */
		for (int i = 0; i < 100; i++)
			keys[i] = (uint64_t)(i * 3 % 100) + (id % 2) * 100;
		cs_ps_store_rx(st, msg,
			       push(&s, 0, id++, 0, keys, g, 100, 0, 1));
		cs_ps_store_flush(st);
		rc = cs_ps_store_snap_step(st, 7);
	} while (rc == 1);
	cr_assert_eq(rc, 0);
	cr_assert_eq(cap.ended, 1);
	cr_assert_eq(cap.rc, 0);
	cr_assert_eq(cap.nrec, 100);
	rec = sizeof(struct cs_ps_rec_head) + fb;
	cr_assert_eq(cap.len, 100 * rec);
	for (int i = 0; i < 100; i++) {
		struct cs_ps_rec_head h;
		float v[2];

		memcpy(&h, cap.p + rec * (size_t)i, sizeof(h));
		cr_assert_lt(h.key, 100);
		memcpy(v, cap.p + rec * (size_t)i + sizeof(h), sizeof(v));
		cr_assert_eq(v[0], at_begin[h.key][0], "key %llu",
			     (unsigned long long)h.key);
		cr_assert_eq(v[1], at_begin[h.key][1]);
		cr_assert_eq(h.step, 1);
	}
	free(cap.p);
	cs_ps_store_destroy(st);
}

/*
 * A snapshot of a table mostly on disk reads its rows on disk without
 * waiting (read_start): a step gathers them into one batch and returns;
 * a later step (or the flush of a push that polls the batch) copies them
 * when they landed. Rows change between steps (copy on write), reads are
 * held in flight over steps and their bytes land only at completion:
 * the snapshot is still the table at begin, each row once. The file
 * takes 12 reads at once: the batches shrink to fit.
 */
static void snap_reads_run(size_t align, struct snapcap *cap, unsigned *reads)
{
	struct cs_ps_table_spec s = mkspec(CS_PS_ASYNC, 0, 1, CS_PS_OPT_SGD);
	size_t fb = cs_ps_frame_bytes(&s), rec;
	static struct memfile mf;
	struct cs_ps_spill sp = { &mf_async_ops, &mf };
	struct cs_ps_snap_sink sink = { cap_chunk, cap_end, cap, align };
	static float at_begin[500][2];
	static uint8_t seen[500];
	struct cs_ps_store *st;
	uint64_t keys[50], id = 0;
	float g[50];
	int rc, steps = 0, held_steps = 0;

	memset(&mf, 0, sizeof(mf));
	memset(seen, 0, sizeof(seen));
	mf.late = true;
	mf.amax = 12; /* a ring of 12: the step's batches of 32 halved */
	st = mkstore(&s, 64 * fb, &sp);
	for (; id < 10; id++) {
		for (int i = 0; i < 50; i++) {
			keys[i] = id * 50 + (uint64_t)i;
			g[i] = 0.5f * (float)(i % 3 + 1);
		}
		cs_ps_store_rx(st, msg, push(&s, 0, id, 0, keys, g, 50, 0, 1));
		for (int n = 0;
		     n < 64 && (n == 0 || cs_ps_store_io_pending(st)); n++)
			cr_assert_eq(cs_ps_store_flush(st), 0);
	}
	for (uint64_t k = 0; k < 500; k++)
		cr_assert_eq(cs_ps_store_peek(st, 2, k, at_begin[k]), 0);
	cr_assert_eq(cs_ps_store_snap_begin(st, 2, &sink, 512), 0);
	do {
		mf.hold = steps % 3 != 2;
		rc = cs_ps_store_snap_step(st, 40);
		if (rc == 1 && mf.hold && mf.an)
			held_steps++; /* returned with its reads in flight */
		if (steps == 0) {
			float row[2];

			/* rows of the batch in flight brought in (a peek
			 * waits for them) and changed: copied before the
			 * change, not again when the batch lands */
			uint64_t upd = cs_ps_store_stats(st)->rows_updated;

			cr_assert_gt(mf.an, 0);
			for (int i = 0; i < 8; i++) {
				keys[i] = (uint64_t)i;
				cr_assert_eq(
					cs_ps_store_peek(st, 2, keys[i], row),
					0);
			}
			cs_ps_store_rx(st, msg,
				       push(&s, 0, id++, 0, keys, g, 8, 0, 1));
			cr_assert_eq(cs_ps_store_flush(st), 0);
			cr_assert_gt(mf.an, 0, "the batch landed meanwhile");
			cr_assert_eq(cs_ps_store_stats(st)->rows_updated,
				     upd + 8, "not changed meanwhile");
		}
		/* rows change between steps, new ones appear */
		for (int i = 0; i < 50; i++)
			keys[i] = (id * 37 + (uint64_t)i * 11) % 600;
		cs_ps_store_rx(st, msg,
			       push(&s, 0, id++, 0, keys, g, 50, 0, 1));
		cr_assert_eq(cs_ps_store_flush(st), 0);
		steps++;
	} while (rc == 1 && steps < 10000);
	cr_assert_eq(rc, 0, "steps %d", steps);
	cr_assert_eq(cap->ended, 1);
	cr_assert_eq(cap->rc, 0);
	cr_assert_eq(cap->nrec, 500);
	rec = sizeof(struct cs_ps_rec_head) + fb;
	cr_assert_eq(cap->len, 500 * rec);
	for (uint64_t i = 0; i < 500; i++) {
		struct cs_ps_rec_head h;
		float v[2];

		memcpy(&h, cap->p + rec * i, sizeof(h));
		cr_assert_lt(h.key, 500);
		cr_assert_not(seen[h.key], "key %llu twice",
			      (unsigned long long)h.key);
		seen[h.key] = 1;
		memcpy(v, cap->p + rec * i + sizeof(h), sizeof(v));
		cr_assert(v[0] == at_begin[h.key][0] &&
				  v[1] == at_begin[h.key][1],
			  "key %llu: %g %g, at begin %g %g",
			  (unsigned long long)h.key, v[0], v[1],
			  at_begin[h.key][0], at_begin[h.key][1]);
	}
	cr_assert_geq(
		cs_ps_store_stats(st)->snap_reads_async, 50,
		"%llu async, %d steps, %d held",
		(unsigned long long)cs_ps_store_stats(st)->snap_reads_async,
		steps, held_steps);
	cr_assert_gt(held_steps, 3);
	cr_assert_eq(mf.waited, 0, "a step waited for its reads");
	*reads = mf.reads;
	cs_ps_store_destroy(st);
}

Test(ps_store, snapshot_reads_rows_on_disk_without_blocking)
{
	struct snapcap a = { 0 }, b = { 0 };
	unsigned ra, rb;

	snap_reads_run(0, &a, &ra);
	/* the same with the checkpoint writer's alignment (records split
	 * over 4 KiB chunks): the same bytes, and no row read again */
	snap_reads_run(4096, &b, &rb);
	cr_assert_eq(a.len, b.len);
	cr_assert_eq(memcmp(a.p, b.p, a.len), 0, "split records differ");
	cr_assert_eq(ra, rb, "reads: %u whole records, %u split", ra, rb);
	free(a.p);
	free(b.p);
}

/*
 * The snapshot pacer: a step that took t ns makes the next one due
 * t (1 - share) / share later; rows per step grow while steps are short
 * and shrink while they are long; a writer behind holds the next step
 * back; bad settings are refused.
 */
Test(ps_store, snapshot_pacer)
{
	struct cs_ps_snap_pace p;

	cr_assert_eq(cs_ps_snap_pace_init(&p, 0.0, 1000), -EINVAL);
	cr_assert_eq(cs_ps_snap_pace_init(&p, 1.5, 1000), -EINVAL);
	cr_assert_eq(cs_ps_snap_pace_init(&p, 0.05, 0), -EINVAL);
	cr_assert_eq(cs_ps_snap_pace_init(&p, 0.05, 200000), 0);
	cr_assert(cs_ps_snap_pace_due(&p, 0));
	/* 90 us: short, more rows; next due 19 x 90 us later */
	cs_ps_snap_pace_done(&p, 1000000, 1090000, 0, 1 << 20);
	cr_assert_eq(p.rows, 512);
	cr_assert_eq(p.due, 1090000 + 1710000);
	cr_assert_not(cs_ps_snap_pace_due(&p, 2799999));
	cr_assert(cs_ps_snap_pace_due(&p, 2800000));
	/* 1 ms: long, fewer rows; the writer behind: held 200 us more */
	cs_ps_snap_pace_done(&p, 3000000, 4000000, 2 << 20, 1 << 20);
	cr_assert_eq(p.rows, 256);
	cr_assert_eq(p.due, 4000000 + 19000000 + 200000);
	cr_assert_eq(p.held, 1);
	cr_assert_eq(p.steps, 2);
	/* share 1: back to back */
	cr_assert_eq(cs_ps_snap_pace_init(&p, 1.0, 200000), 0);
	cs_ps_snap_pace_done(&p, 0, 300000, 0, 1 << 20);
	cr_assert_eq(p.due, 300000);
	cr_assert_eq(p.rows, 256);
}
