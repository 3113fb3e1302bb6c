/* SPDX-License-Identifier: MIT */
/* Worker engine: combining, splitting by shard and into parts, the push
 * window, retransmission, a lost server, pull scatter, bad replies. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"

#define MAXS 512

struct sent {
	uint32_t server;
	uint8_t raw[4096];
	size_t len;
	struct cs_ps_msg m;
};

static struct sent *out;
static unsigned nout;
static uint64_t done_op;
static int done_rc, ndone;
static uint32_t done_peer;

static int cap_send(void *ctx, uint32_t server, const void *msg, size_t len)
{
	(void)ctx;
	cr_assert_lt(nout, MAXS);
	cr_assert_leq(len, sizeof(out[0].raw));
	out[nout].server = server;
	memcpy(out[nout].raw, msg, len);
	out[nout].len = len;
	cr_assert_eq(cs_ps_wire_decode(out[nout].raw, len, &out[nout].m), 0);
	nout++;
	return 0;
}

static void cap_done(void *ctx, uint64_t op, int rc, uint32_t peer)
{
	(void)ctx;
	done_op = op;
	done_rc = rc;
	done_peer = peer;
	ndone++;
}

static struct cs_ps_shardmap map;
static struct cs_ps_table_spec spec;

static struct cs_ps_worker *mk(enum cs_ps_mode mode, size_t msg_max,
			       uint32_t max_tries)
{
	uint32_t servers[2] = { 100, 200 };
	struct cs_ps_worker_cfg cfg = { .rank = 1,
					.map = &map,
					.msg_max = msg_max,
					.rto = 1000,
					.rto_max = 4000,
					.max_tries = max_tries };
	struct cs_ps_worker_io io = { cap_send, cap_done, NULL };
	struct cs_ps_worker *w;

	if (!out)
		out = malloc(sizeof(*out) * MAXS);
	nout = 0;
	ndone = 0;
	memset(&spec, 0, sizeof(spec));
	spec.id = 4;
	spec.dim = 2;
	spec.dtype = CS_F32;
	spec.key_max = 1 << 20;
	spec.mode = mode;
	spec.workers = 2;
	cs_ps_opt_defaults(&spec.opt, CS_PS_OPT_SGD);
	cr_assert_eq(cs_ps_shardmap_init(&map, servers, 2, 32), 0);
	cr_assert_eq(cs_ps_worker_create(&w, &cfg, &io), 0);
	cr_assert_eq(cs_ps_worker_add_table(w, &spec), 0);
	return w;
}

static void fini(struct cs_ps_worker *w)
{
	cs_ps_worker_destroy(w);
	cs_ps_shardmap_fini(&map);
}

static size_t ack(const struct sent *s, uint8_t *buf, int status)
{
	struct cs_ps_msg m = s->m;

	m.type = s->m.type == CS_PS_MSG_PUSH ? CS_PS_MSG_PUSH_ACK
					     : CS_PS_MSG_PULL_REPLY;
	m.status = status;
	m.nkeys = 0;
	m.part = 0;
	m.nparts = 1;
	cs_ps_wire_put_hdr(buf, &m);
	return CS_PS_WIRE_HDR;
}

Test(ps_worker, push_combines_and_splits_by_shard)
{
	struct cs_ps_worker *w = mk(CS_PS_SYNC, 4096, 0);
	uint64_t keys[6] = { 5, 9, 5, 77, 9, 5 }, op;
	float rows[6][2] = { { 1, 2 }, { 3, 4 },  { 5, 6 },
			     { 7, 8 }, { 9, 10 }, { 11, 12 } };
	unsigned seen = 0;

	cr_assert_eq(cs_ps_worker_push(w, 4, 0, keys, rows, 6, 0, &op), 0);
	cr_assert_eq(nout, 2, "sync: one push to every server");
	for (unsigned i = 0; i < nout; i++) {
		const struct cs_ps_msg *m = &out[i].m;

		cr_assert_eq(m->type, CS_PS_MSG_PUSH);
		cr_assert_eq(m->worker, 1);
		cr_assert_eq(m->version, 0);
		cr_assert_eq(m->nparts, 1);
		for (uint32_t k = 0; k < m->nkeys; k++) {
			uint64_t key = cs_ps_wire_key(m, k);
			float r[2];

			cr_assert_eq(cs_ps_shard_of(&map, 4, key),
				     out[i].server);
			cs_ps_wire_row(m, k, r);
			if (key == 5)
				cr_assert(r[0] == 17 && r[1] == 20);
			else if (key == 9)
				cr_assert(r[0] == 12 && r[1] == 14);
			else
				cr_assert(key == 77 && r[0] == 7);
			seen++;
		}
	}
	cr_assert_eq(seen, 3);
	cr_assert_eq(cs_ps_worker_stats(w)->keys_combined, 3);
	cr_assert_eq(cs_ps_worker_inflight(w), 1);
	fini(w);
}

Test(ps_worker, async_sends_nothing_to_servers_without_keys)
{
	struct cs_ps_worker *w = mk(CS_PS_ASYNC, 4096, 0);
	uint64_t op, k = 5;
	float r[2] = { 1, 1 };

	cr_assert_eq(cs_ps_worker_push(w, 4, 0, &k, r, 1, 0, &op), 0);
	cr_assert_eq(nout, 1);
	/* nothing at all: done at once */
	cr_assert_eq(cs_ps_worker_push(w, 4, 1, NULL, NULL, 0, 0, &op), 0);
	cr_assert_eq(ndone, 1);
	cr_assert_eq(done_op, op);
	cr_assert_eq(done_rc, 0);
	fini(w);
}

/* Small messages: one server's keys go in parts, all with one version and
 * nparts; at most CS_PS_DEDUP_WINDOW in flight until acks come. */
Test(ps_worker, parts_and_window)
{
	struct cs_ps_worker *w = mk(CS_PS_ASYNC, 256, 0);
	static uint64_t keys[4000];
	static float rows[4000][2];
	uint32_t per = (256 - CS_PS_WIRE_HDR) / (8 + 8), total = 0;
	uint64_t op;
	uint8_t buf[64];
	unsigned first;

	for (uint32_t i = 0; i < 4000; i++)
		keys[i] = i, rows[i][0] = 1, rows[i][1] = 2;
	cr_assert_eq(cs_ps_worker_push(w, 4, 3, keys, rows, 4000, 0, &op), 0);
	/* 4000 keys, 13 a message: about 154 per server, 64 sent each */
	cr_assert_eq(nout, 2 * CS_PS_DEDUP_WINDOW);
	for (unsigned i = 0; i < nout; i++) {
		cr_assert_eq(out[i].m.version, 3);
		cr_assert_leq(out[i].m.nkeys, per);
		cr_assert_gt(out[i].m.nparts, CS_PS_DEDUP_WINDOW);
	}
	/* acks open the window, one message each */
	while (ndone == 0) {
		first = nout;
		for (unsigned i = 0; i < first; i++) {
			if (out[i].len == 0)
				continue;
			size_t n = ack(&out[i], buf, 0);

			total += out[i].m.nkeys;
			out[i].len = 0;
			cr_assert_eq(
				cs_ps_worker_rx(w, out[i].server, buf, n, 1),
				0);
		}
		cr_assert(nout > first || ndone, "no progress");
	}
	cr_assert_eq(total, 4000);
	cr_assert_eq(done_rc, 0);
	cr_assert_eq(cs_ps_worker_stats(w)->retransmits, 0);
	fini(w);
}

Test(ps_worker, retransmits_then_names_the_lost_server)
{
	struct cs_ps_worker *w = mk(CS_PS_SYNC, 4096, 3);
	uint64_t op, k = 5;
	float r[2] = { 1, 1 };
	uint8_t buf[64];
	uint32_t lost;
	cs_ns_t next;
	unsigned i;

	cr_assert_eq(cs_ps_worker_push(w, 4, 0, &k, r, 1, 0, &op), 0);
	cr_assert_eq(nout, 2);
	/* the server of key 5 answers; the other never does */
	for (i = 0; i < 2; i++)
		if (cs_ps_shard_of(&map, 4, 5) == out[i].server)
			break;
	lost = out[1 - i].server;
	cs_ps_worker_rx(w, out[i].server, buf, ack(&out[i], buf, 0), 10);
	/* an ack from the wrong server is not this message's */
	cs_ps_worker_rx(w, out[i].server, buf, ack(&out[1 - i], buf, 0), 10);
	cr_assert_eq(cs_ps_worker_stats(w)->dup_replies, 1);
	next = cs_ps_worker_tick(w, 999);
	cr_assert_eq(next, 1000);
	cr_assert_eq(nout, 2);
	next = cs_ps_worker_tick(w, 1000); /* try 2, rto doubles */
	cr_assert_eq(nout, 3);
	cr_assert_eq(next, 3000);
	cs_ps_worker_tick(w, 3000); /* try 3 */
	cr_assert_eq(nout, 4);
	cr_assert_eq(ndone, 0);
	cs_ps_worker_tick(w, 3000 + 4000); /* out of tries */
	cr_assert_eq(ndone, 1);
	cr_assert_eq(done_rc, CS_ERR_PEER_LOST);
	cr_assert_eq(done_peer, lost);
	cr_assert_eq(cs_ps_worker_inflight(w), 0);
	cr_assert_eq(cs_ps_worker_tick(w, 100000), UINT64_MAX);
	fini(w);
}

Test(ps_worker, pull_asks_each_key_once_and_scatters)
{
	struct cs_ps_worker *w = mk(CS_PS_SYNC, 4096, 0);
	uint64_t keys[5] = { 8, 3, 8, 8, 1000 }, op;
	float res[5][2];
	uint8_t buf[512];
	unsigned asked = 0;

	memset(res, 0, sizeof(res));
	cr_assert_eq(cs_ps_worker_pull(w, 4, 7, keys, 5, res, 0, &op), 0);
	for (unsigned i = 0; i < nout; i++) {
		struct cs_ps_msg m = out[i].m;

		cr_assert_eq(m.type, CS_PS_MSG_PULL);
		cr_assert_eq(m.version, 7);
		asked += m.nkeys;
		/* a reply with the wrong row count is refused */
		m.type = CS_PS_MSG_PULL_REPLY;
		m.nkeys = out[i].m.nkeys + 1;
		cs_ps_wire_put_hdr(buf, &m);
		cs_ps_worker_rx(w, out[i].server, buf,
				cs_ps_wire_len(m.type, m.nkeys, 2, CS_F32, 0),
				1);
		cr_assert_eq(ndone, 0);
		/* the right one: row = { key, -key } */
		m.nkeys = out[i].m.nkeys;
		cs_ps_wire_put_hdr(buf, &m);
		for (uint32_t k = 0; k < m.nkeys; k++) {
			float r[2] = { (float)cs_ps_wire_key(&out[i].m, k),
				       -(float)cs_ps_wire_key(&out[i].m, k) };

			cs_ps_wire_put_row(buf, &m, k, r);
		}
		cs_ps_worker_rx(w, out[i].server, buf,
				cs_ps_wire_len(m.type, m.nkeys, 2, CS_F32, 0),
				1);
	}
	cr_assert_eq(asked, 3);
	cr_assert_eq(ndone, 1);
	cr_assert_eq(done_rc, 0);
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(res[i][0], (float)keys[i]);
		cr_assert_eq(res[i][1], -(float)keys[i]);
	}
	cr_assert_geq(cs_ps_worker_stats(w)->bad_replies, 1);
	fini(w);
}

Test(ps_worker, error_reply_fails_the_op_with_the_server)
{
	struct cs_ps_worker *w = mk(CS_PS_ASYNC, 4096, 0);
	uint64_t op, k = 12;
	float res[2];
	uint8_t buf[64];

	cr_assert_eq(cs_ps_worker_pull(w, 4, 0, &k, 1, res, 0, &op), 0);
	cr_assert_eq(nout, 1);
	/* busy: asked again after the timeout, not failed */
	cs_ps_worker_rx(w, out[0].server, buf, ack(&out[0], buf, -EBUSY), 5);
	cr_assert_eq(ndone, 0);
	cs_ps_worker_tick(w, 5 + 1000);
	cr_assert_eq(nout, 2);
	cs_ps_worker_rx(w, out[1].server, buf, ack(&out[1], buf, -ERANGE), 6);
	cr_assert_eq(ndone, 1);
	cr_assert_eq(done_rc, -ERANGE);
	cr_assert_eq(done_peer, out[0].server);
	fini(w);
}

/*
 * A pull refused for a full parking (-EBUSY) is not kept by the server:
 * it is asked again after rto / CS_PS_BUSY_RETRY_DIV, not a whole rto
 * later; one the server keeps waiting (-EINPROGRESS) after the rto.
 */
Test(ps_worker, busy_pull_asked_again_soon)
{
	struct cs_ps_worker *w = mk(CS_PS_SYNC, 4096, 0);
	cs_ns_t soon = 1000 / CS_PS_BUSY_RETRY_DIV;
	uint64_t op, k = 12;
	float res[2];
	uint8_t buf[64];

	cr_assert_eq(cs_ps_worker_pull(w, 4, 1, &k, 1, res, 0, &op), 0);
	cr_assert_eq(nout, 1);
	cs_ps_worker_rx(w, out[0].server, buf, ack(&out[0], buf, -EBUSY), 5);
	cs_ps_worker_tick(w, 5 + soon - 1);
	cr_assert_eq(nout, 1);
	cs_ps_worker_tick(w, 5 + soon);
	cr_assert_eq(nout, 2, "a refused pull waited for the rto");
	cr_assert_eq(cs_ps_worker_stats(w)->pull_waits, 1);
	cr_assert_eq(cs_ps_worker_stats(w)->retx_pull, 1);
	/* parked there now: asked again only after the (doubled) rto */
	cs_ps_worker_rx(w, out[1].server, buf, ack(&out[1], buf, -EINPROGRESS),
			100);
	cs_ps_worker_tick(w, 100 + soon);
	cr_assert_eq(nout, 2);
	cs_ps_worker_tick(w, 100 + 2000);
	cr_assert_eq(nout, 3);
	cr_assert_eq(ndone, 0);
	fini(w);
}

Test(ps_worker, bad_arguments)
{
	struct cs_ps_worker *w = mk(CS_PS_ASYNC, 4096, 0);
	struct cs_ps_worker_cfg cfg = {
		.rank = 0, .map = &map, .msg_max = 100, .rto = 1, .rto_max = 1
	};
	struct cs_ps_worker_io io = { cap_send, cap_done, NULL };
	struct cs_ps_worker *x;
	uint64_t op, k = 1 << 20;
	float r[2] = { 0 };

	cr_assert_eq(cs_ps_worker_push(w, 4, 0, &k, r, 1, 0, &op), -EINVAL);
	cr_assert_eq(cs_ps_worker_pull(w, 4, 0, &k, 1, r, 0, &op), -EINVAL);
	k = 1;
	cr_assert_eq(cs_ps_worker_push(w, 5, 0, &k, r, 1, 0, &op), -EINVAL);
	cr_assert_eq(cs_ps_worker_add_table(w, &spec), -EEXIST);
	cr_assert_eq(cs_ps_worker_create(&x, &cfg, &io), -EINVAL);
	cr_assert_eq(nout, 0);
	cr_assert_eq(cs_ps_worker_inflight(w), 0);
	/* garbage and replies to nothing are counted, not fatal */
	cr_assert_eq(cs_ps_worker_rx(w, 100, "junk", 4, 0), 0);
	cr_assert_eq(cs_ps_worker_stats(w)->bad_replies, 1);
	fini(w);
}

/* One worker and one real store, no loss: push then pull sees the
 * update. Messages wait in a queue: the engines' send callbacks must not
 * call back into an engine. */
static struct cs_ps_store *loop_store;
static struct cs_ps_worker *loop_worker;
static struct {
	bool to_store;
	uint8_t b[4096];
	size_t len;
} lq[64];
static unsigned lq_n;

static int to_store(void *ctx, uint32_t s, const void *msg, size_t len)
{
	(void)ctx, (void)s;
	cr_assert_lt(lq_n, 64);
	lq[lq_n].to_store = true;
	memcpy(lq[lq_n].b, msg, len);
	lq[lq_n++].len = len;
	return 0;
}

static int to_worker(void *ctx, uint32_t wk, const void *msg, size_t len)
{
	(void)ctx, (void)wk;
	cr_assert_lt(lq_n, 64);
	lq[lq_n].to_store = false;
	memcpy(lq[lq_n].b, msg, len);
	lq[lq_n++].len = len;
	return 0;
}

static void pump(void)
{
	while (lq_n) {
		static uint8_t b[4096];
		bool st = lq[0].to_store;
		size_t len = lq[0].len;

		memcpy(b, lq[0].b, len);
		memmove(lq, lq + 1, sizeof(lq[0]) * --lq_n);
		if (st) {
			cr_assert_eq(cs_ps_store_rx(loop_store, b, len), 0);
			cr_assert_eq(cs_ps_store_flush(loop_store), 0);
		} else {
			cr_assert_eq(cs_ps_worker_rx(loop_worker, 7, b, len, 0),
				     0);
		}
	}
}

Test(ps_worker, round_trip_with_a_store)
{
	uint32_t sid = 7;
	struct cs_ps_shardmap m1;
	struct cs_ps_store_cfg scfg = {
		.server = 7, .map = &m1, .msg_max = 4096, .parked_max = 8
	};
	struct cs_ps_store_io sio = { to_worker, NULL };
	struct cs_ps_worker_cfg wcfg = {
		.rank = 0, .map = &m1, .msg_max = 4096, .rto = 10, .rto_max = 10
	};
	struct cs_ps_worker_io wio = { to_store, cap_done, NULL };
	struct cs_ps_table_spec s;
	uint64_t keys[3] = { 2, 2, 9 }, op;
	float g[3][2] = { { 1, 1 }, { 2, 2 }, { 4, 4 } }, res[3][2];

	memset(&s, 0, sizeof(s));
	s.id = 0;
	s.dim = 2;
	s.dtype = CS_F32;
	s.key_max = 10;
	s.mode = CS_PS_SYNC;
	s.workers = 1;
	cs_ps_opt_defaults(&s.opt, CS_PS_OPT_SGD);
	s.opt.lr = 0.5f;
	ndone = 0;
	cr_assert_eq(cs_ps_shardmap_init(&m1, &sid, 1, 4), 0);
	cr_assert_eq(cs_ps_store_create(&loop_store, &scfg, &sio), 0);
	cr_assert_eq(cs_ps_store_add_table(loop_store, &s, 0, NULL), 0);
	cr_assert_eq(cs_ps_worker_create(&loop_worker, &wcfg, &wio), 0);
	cr_assert_eq(cs_ps_worker_add_table(loop_worker, &s), 0);
	/* the pull at clock 1 goes first and waits for version 0 */
	cr_assert_eq(cs_ps_worker_pull(loop_worker, 0, 1, keys, 3, res, 0, &op),
		     0);
	pump();
	cr_assert_eq(ndone, 0);
	cr_assert_eq(cs_ps_worker_push(loop_worker, 0, 0, keys, g, 3, 0, &op),
		     0);
	pump();
	cr_assert_eq(ndone, 2);
	cr_assert_eq(done_rc, 0);
	cr_assert_eq(res[0][0], -1.5f); /* 0 - 0.5 * (1 + 2) */
	cr_assert_eq(res[1][0], -1.5f);
	cr_assert_eq(res[2][1], -2.0f);
	cs_ps_worker_destroy(loop_worker);
	cs_ps_store_destroy(loop_store);
	cs_ps_shardmap_fini(&m1);
}

/* A pull waiting at a live server is answered "in progress": the count of
 * sends towards CS_ERR_PEER_LOST starts over, so only a silent server is
 * declared lost. */
Test(ps_worker, in_progress_is_not_lost)
{
	struct cs_ps_worker *w = mk(CS_PS_SYNC, 4096, 3);
	uint64_t op, k = 12;
	float res[2];
	uint8_t buf[64];
	cs_ns_t t = 0;

	cr_assert_eq(cs_ps_worker_pull(w, 4, 5, &k, 1, res, t, &op), 0);
	cr_assert_eq(nout, 1);
	t = cs_ps_worker_tick(w, 1000); /* send 2 */
	t = cs_ps_worker_tick(w, t); /* send 3 */
	cr_assert_eq(nout, 3);
	cs_ps_worker_rx(w, out[2].server, buf, ack(&out[2], buf, -EINPROGRESS),
			t);
	for (int i = 0; i < 3; i++) /* three more sends allowed */
		t = cs_ps_worker_tick(w, t + 100000);
	cr_assert_eq(nout, 6);
	cr_assert_eq(ndone, 0);
	cs_ps_worker_tick(w, t + 100000);
	cr_assert_eq(ndone, 1);
	cr_assert_eq(done_rc, CS_ERR_PEER_LOST);
	cr_assert_eq(done_peer, out[0].server);
	fini(w);
}
