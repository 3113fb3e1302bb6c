/* SPDX-License-Identifier: MIT */
/* Bootstrap messages and the coordinator's admission state machine. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <collstack/types.h>

#define CS_LOG_MODULE "boot"
#include "internal/log.h"

#include "control/auth.h"
#include "control/boot.h"

struct wbuf {
	uint8_t *p;
	size_t n, cap;
	bool overflow;
};

static void put(struct wbuf *w, const void *src, size_t n)
{
	if (w->n + n > w->cap) {
		w->overflow = true;
		return;
	}
	memcpy(w->p + w->n, src, n);
	w->n += n;
}

static void put_u32(struct wbuf *w, uint32_t v)
{
	uint8_t b[4] = { v >> 24, v >> 16, v >> 8, v };

	put(w, b, 4);
}

static void put_u64(struct wbuf *w, uint64_t v)
{
	put_u32(w, (uint32_t)(v >> 32));
	put_u32(w, (uint32_t)v);
}

static void put_u16(struct wbuf *w, uint16_t v)
{
	uint8_t b[2] = { v >> 8, v };

	put(w, b, 2);
}

static void put_addr(struct wbuf *w, const struct cs_node_addr *a)
{
	put(w, a->mac, 6);
	put(w, &a->numa, 1);
	put(w, &a->state, 1);
	put_u32(w, a->ip);
	put_u16(w, a->udp_port);
	put_u16(w, a->queues);
	put_u32(w, a->qpn);
}

struct rbuf {
	const uint8_t *p;
	size_t n, off;
	bool bad;
};

static void get(struct rbuf *r, void *dst, size_t n)
{
	if (r->bad || r->n - r->off < n) {
		r->bad = true;
		memset(dst, 0, n);
		return;
	}
	memcpy(dst, r->p + r->off, n);
	r->off += n;
}

static uint32_t get_u32(struct rbuf *r)
{
	uint8_t b[4];

	get(r, b, 4);
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
	       (uint32_t)b[2] << 8 | b[3];
}

static uint64_t get_u64(struct rbuf *r)
{
	uint64_t hi = get_u32(r);

	return hi << 32 | get_u32(r);
}

static uint16_t get_u16(struct rbuf *r)
{
	uint8_t b[2];

	get(r, b, 2);
	return (uint16_t)(b[0] << 8 | b[1]);
}

static void get_addr(struct rbuf *r, struct cs_node_addr *a)
{
	get(r, a->mac, 6);
	get(r, &a->numa, 1);
	get(r, &a->state, 1);
	a->ip = get_u32(r);
	a->udp_port = get_u16(r);
	a->queues = get_u16(r);
	a->qpn = get_u32(r);
}

/* One clock per process: collstackd's trace clock (boot.h). */
static cs_ns_t (*stamp_clock)(void);
static _Atomic uint32_t stamp_gen; /* bumped when the clock is stepped */

void cs_boot_set_stamp_clock(cs_ns_t (*clock)(void))
{
	stamp_clock = clock;
}

void cs_boot_stamp_clock_stepped(void)
{
	atomic_fetch_add(&stamp_gen, 1);
}

int cs_boot_encode(const struct cs_boot_msg *m, uint8_t *buf, size_t cap)
{
	struct wbuf w = { .p = buf, .cap = cap };
	uint32_t len;

	put_u32(&w, 0); /* length, patched below */
	put(&w, &m->type, 1);
	switch (m->type) {
	case CS_BOOT_CHALLENGE:
		put(&w, m->nonce, CS_BOOT_NONCE_LEN);
		break;
	case CS_BOOT_JOIN:
		put(&w, m->nonce, CS_BOOT_NONCE_LEN);
		put(&w, m->mac, 32);
		put_u32(&w, (uint32_t)m->want_rank);
		put_addr(&w, &m->addr);
		break;
	case CS_BOOT_WELCOME:
		put_u32(&w, m->node);
		put_u32(&w, m->world);
		put(&w, m->mac, 32);
		break;
	case CS_BOOT_REFUSE:
		put_u32(&w, (uint32_t)m->code);
		put(&w, m->reason, strnlen(m->reason, sizeof(m->reason) - 1));
		break;
	case CS_BOOT_TABLE:
		if (m->n > CS_BOOT_MAX_RANKS)
			return -EINVAL;
		put_u32(&w, m->epoch);
		put_u32(&w, m->n);
		for (uint32_t i = 0; i < m->n; i++)
			put_addr(&w, &m->table[i]);
		break;
	case CS_BOOT_HEARTBEAT:
		put_u32(&w, m->node);
		put_u32(&w, m->epoch);
		if (m->stamped)
			put_u64(&w, m->ts_tx);
		break;
	case CS_BOOT_DUMP:
		put_u32(&w, m->node);
		put_u64(&w, m->dump_id);
		break;
	case CS_BOOT_VIEW:
		if (m->n > CS_BOOT_MAX_RANKS)
			return -EINVAL;
		put_u32(&w, m->epoch);
		put_u32(&w, m->n);
		for (uint32_t i = 0; i < m->n; i++)
			put_u32(&w, m->lost[i]);
		if (m->stamped) {
			put_u64(&w, m->ts_echo);
			put_u64(&w, m->ts_rx);
			put_u64(&w, m->ts_tx);
		}
		break;
	default:
		return -EINVAL;
	}
	if (w.overflow)
		return -ENOSPC;
	len = (uint32_t)w.n;
	buf[0] = len >> 24, buf[1] = len >> 16, buf[2] = len >> 8, buf[3] = len;
	return (int)len;
}

int cs_boot_decode(const uint8_t *buf, size_t len, struct cs_boot_msg *m)
{
	struct rbuf r = { .p = buf, .n = len };
	uint32_t total;
	size_t tlen;

	if (len < 4)
		return 0;
	total = get_u32(&r);
	if (total > CS_BOOT_MAX_MSG)
		return -EMSGSIZE;
	if (total < 5)
		return -EPROTO;
	if (len < total)
		return 0;
	r.n = total; /* never read past this message */
	get(&r, &m->type, 1);
	switch (m->type) {
	case CS_BOOT_CHALLENGE:
		get(&r, m->nonce, CS_BOOT_NONCE_LEN);
		break;
	case CS_BOOT_JOIN:
		get(&r, m->nonce, CS_BOOT_NONCE_LEN);
		get(&r, m->mac, 32);
		m->want_rank = (int32_t)get_u32(&r);
		get_addr(&r, &m->addr);
		break;
	case CS_BOOT_WELCOME:
		m->node = get_u32(&r);
		m->world = get_u32(&r);
		get(&r, m->mac, 32);
		break;
	case CS_BOOT_REFUSE:
		m->code = (int32_t)get_u32(&r);
		tlen = r.n - r.off;
		if (r.bad || tlen >= sizeof(m->reason))
			return -EPROTO;
		get(&r, m->reason, tlen);
		m->reason[tlen] = 0;
		break;
	case CS_BOOT_TABLE:
		m->epoch = get_u32(&r);
		m->n = get_u32(&r);
		if (r.bad || m->n > CS_BOOT_MAX_RANKS ||
		    (size_t)m->n * CS_BOOT_ADDR_WIRE_LEN != r.n - r.off)
			return -EPROTO;
		if (m->n > m->cap || !m->table)
			return -ENOSPC;
		for (uint32_t i = 0; i < m->n; i++)
			get_addr(&r, &m->table[i]);
		break;
	case CS_BOOT_HEARTBEAT:
		m->node = get_u32(&r);
		m->epoch = get_u32(&r);
		m->stamped = !r.bad && r.n - r.off == 8;
		if (m->stamped)
			m->ts_tx = get_u64(&r);
		break;
	case CS_BOOT_DUMP:
		m->node = get_u32(&r);
		m->dump_id = get_u64(&r);
		break;
	case CS_BOOT_VIEW:
		m->epoch = get_u32(&r);
		m->n = get_u32(&r);
		if (r.bad || m->n > CS_BOOT_MAX_RANKS ||
		    ((size_t)m->n * 4 != r.n - r.off &&
		     (size_t)m->n * 4 + 24 != r.n - r.off))
			return -EPROTO;
		m->stamped = (size_t)m->n * 4 != r.n - r.off;
		if (m->n > m->cap || !m->lost)
			return -ENOSPC;
		for (uint32_t i = 0; i < m->n; i++)
			m->lost[i] = get_u32(&r);
		if (m->stamped) {
			m->ts_echo = get_u64(&r);
			m->ts_rx = get_u64(&r);
			m->ts_tx = get_u64(&r);
		}
		break;
	default:
		return -EPROTO;
	}
	if (r.bad || r.off != r.n)
		return -EPROTO;
	return (int)total;
}

void cs_boot_join_mac(const char *token, const uint8_t nonce_c[32],
		      const uint8_t nonce_m[32], const struct cs_node_addr *a,
		      uint8_t mac[32])
{
	uint8_t ab[CS_BOOT_ADDR_WIRE_LEN];
	struct wbuf w = { .p = ab, .cap = sizeof(ab) };
	struct cs_node_addr tmp = *a;
	struct cs_mac h;

	tmp.state = 0;
	put_addr(&w, &tmp);
	cs_mac_init(&h, token, CS_BOOT_MAC_CTX);
	cs_mac_update(&h, "cs-join", 7);
	cs_mac_update(&h, nonce_c, 32);
	cs_mac_update(&h, nonce_m, 32);
	cs_mac_update(&h, ab, sizeof(ab));
	cs_mac_final(&h, mac);
}

void cs_boot_welcome_proof(const char *token, const uint8_t nonce_m[32],
			   uint32_t node, uint8_t proof[32])
{
	uint8_t nb[4] = { node >> 24, node >> 16, node >> 8, node };
	struct cs_mac h;

	cs_mac_init(&h, token, CS_BOOT_MAC_CTX);
	cs_mac_update(&h, "cs-welcome", 10);
	cs_mac_update(&h, nonce_m, 32);
	cs_mac_update(&h, nb, 4);
	cs_mac_final(&h, proof);
}

/* -------- coordinator -------- */

int cs_coord_init(struct cs_coord *c, const char *token, uint32_t world,
		  uint32_t max_conns, const struct cs_member_params *mp,
		  uint64_t seed)
{
	if (!world || world > CS_BOOT_MAX_RANKS || max_conns < world ||
	    strlen(token) >= sizeof(c->token) || !*token)
		return -EINVAL;
	memset(c, 0, sizeof(*c));
	c->conns = calloc(max_conns, sizeof(*c->conns));
	if (!c->conns)
		return -ENOMEM;
	c->table = calloc(world, sizeof(*c->table));
	if (!c->table)
		goto out_free_conns;
	c->rank_conn = calloc(world, sizeof(*c->rank_conn));
	if (!c->rank_conn)
		goto out_free_table;
	strcpy(c->token, token);
	c->world = world;
	c->cap = world;
	c->max_conns = max_conns;
	c->mp = *mp;
	c->rng = seed;
	for (uint32_t i = 0; i < world; i++)
		c->rank_conn[i] = UINT32_MAX;
	return 0;

out_free_table:
	free(c->table);
out_free_conns:
	free(c->conns);
	return -ENOMEM;
}

int cs_coord_allow_growth(struct cs_coord *c, uint32_t spare)
{
	uint32_t cap = c->world + spare;
	struct cs_node_addr *t;
	uint32_t *rc;

	if (c->joined)
		return -EBUSY;
	if (cap > CS_BOOT_MAX_RANKS || cap < c->world || cap > c->max_conns)
		return -EINVAL;
	t = realloc(c->table, cap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	c->table = t;
	rc = realloc(c->rank_conn, cap * sizeof(*rc));
	if (!rc)
		return -ENOMEM;
	c->rank_conn = rc;
	memset(t + c->world, 0, spare * sizeof(*t));
	for (uint32_t r = c->world; r < cap; r++)
		rc[r] = UINT32_MAX;
	c->cap = cap;
	return 0;
}

void cs_coord_fini(struct cs_coord *c)
{
	if (c->complete)
		cs_coord_fd_fini(&c->fd);
	free(c->rank_conn);
	free(c->table);
	free(c->conns);
	memset(c, 0, sizeof(*c));
}

static void refuse(struct cs_coord *c, uint32_t conn, int code, const char *why,
		   const struct cs_coord_out *o)
{
	struct cs_boot_msg m = { .type = CS_BOOT_REFUSE, .code = code };

	snprintf(m.reason, sizeof(m.reason), "%s", why);
	c->refused++;
	o->send(o->ctx, conn, &m);
	o->close(o->ctx, conn);
	c->conns[conn].open = false;
}

int cs_coord_on_open(struct cs_coord *c, uint32_t conn, cs_ns_t now,
		     const struct cs_coord_out *o)
{
	struct cs_boot_msg m = { .type = CS_BOOT_CHALLENGE };
	struct cs_coord_conn *cc;

	(void)now;
	if (conn >= c->max_conns) {
		o->close(o->ctx, conn);
		return -ENOSPC;
	}
	cc = &c->conns[conn];
	memset(cc, 0, sizeof(*cc));
	cc->open = true;
	for (unsigned i = 0; i < CS_BOOT_NONCE_LEN; i += 8) {
		uint64_t v = cs_rand_next(&c->rng);

		memcpy(cc->nonce + i, &v, 8);
	}
	memcpy(m.nonce, cc->nonce, CS_BOOT_NONCE_LEN);
	o->send(o->ctx, conn, &m);
	return 0;
}

static void send_table(struct cs_coord *c, const struct cs_coord_out *o)
{
	struct cs_boot_msg m = {
		.type = CS_BOOT_TABLE,
		.epoch = c->fd.epoch,
		.n = c->world,
		.table = c->table,
	};

	for (uint32_t r = 0; r < c->world; r++)
		c->table[r].state = c->fd.state[r];
	for (uint32_t r = 0; r < c->world; r++)
		if (c->rank_conn[r] != UINT32_MAX)
			o->send(o->ctx, c->rank_conn[r], &m);
}

static int admit(struct cs_coord *c, uint32_t conn, const struct cs_boot_msg *m,
		 cs_ns_t now, const struct cs_coord_out *o)
{
	struct cs_coord_conn *cc = &c->conns[conn];
	struct cs_boot_msg w = { .type = CS_BOOT_WELCOME };
	uint8_t mac[32];
	uint32_t rank, lo, hi;

	cs_boot_join_mac(c->token, cc->nonce, m->nonce, &m->addr, mac);
	if (!cs_auth_equal(mac, m->mac, sizeof(mac))) {
		CS_WARN("refused a member on connection %u: it does not hold the job token (bad join MAC)",
			conn);
		refuse(c, conn, CS_ERR_AUTH, "bad job token", o);
		return CS_ERR_AUTH;
	}
	/* before the group forms, ranks 0 .. world-1; after, the spare
	 * ranks of cs_coord_allow_growth() (the next free one) */
	lo = c->complete ? c->world + c->joining : 0;
	hi = c->complete ? c->cap : c->world;
	if (c->complete ? lo >= hi : c->joined == c->world) {
		CS_WARN("refused a member on connection %u: group of %u is full",
			conn, c->world);
		refuse(c, conn, -EBUSY, "group is full", o);
		return -EBUSY;
	}
	if (m->want_rank >= 0) {
		rank = (uint32_t)m->want_rank;
		if (rank < lo || rank >= hi || (c->complete && rank != lo) ||
		    c->rank_conn[rank] != UINT32_MAX) {
			CS_WARN("refused a member on connection %u: rank %d taken or outside %u..%u",
				conn, m->want_rank, lo, hi - 1);
			refuse(c, conn, -EADDRINUSE,
			       "rank taken or out of range", o);
			return -EADDRINUSE;
		}
	} else {
		for (rank = lo; c->rank_conn[rank] != UINT32_MAX; rank++)
			;
	}
	cc->admitted = true;
	cc->rank = rank;
	c->rank_conn[rank] = conn;
	c->table[rank] = m->addr;
	w.node = rank;
	w.world = c->world;
	if (c->complete) {
		/* outside the group (and its failure detector) until
		 * cs_coord_admit_joining(); the world it will join has at
		 * least rank + 1 members */
		c->joining++;
		c->table[rank].state = CS_MEMBER_JOINING;
		w.world = rank + 1;
		cs_boot_welcome_proof(c->token, m->nonce, rank, w.mac);
		o->send(o->ctx, conn, &w);
		CS_INFO("admitted rank %u to join at the next boundary", rank);
		return 0;
	}
	c->joined++;
	cs_boot_welcome_proof(c->token, m->nonce, rank, w.mac);
	o->send(o->ctx, conn, &w);
	CS_INFO("admitted rank %u (%u of %u)", rank, c->joined, c->world);
	if (c->joined == c->world) {
		/* the detector covers the spare ranks too, as JOINING (not
		 * watched) until they join */
		int err = cs_coord_fd_init(&c->fd, &c->mp, c->cap, 1, now);

		if (err)
			return err;
		for (uint32_t r = c->world; r < c->cap; r++)
			c->fd.state[r] = CS_MEMBER_JOINING;
		c->fd.alive = c->world;
		c->complete = true;
		send_table(c, o);
	}
	return 0;
}

static void declare_lost(struct cs_coord *c, const uint32_t *lost, unsigned k,
			 const struct cs_coord_out *o)
{
	struct cs_boot_msg v = {
		.type = CS_BOOT_VIEW,
		.epoch = c->fd.epoch,
		.n = k,
		.lost = (uint32_t *)lost,
	};

	for (unsigned i = 0; i < k; i++) {
		uint32_t conn = c->rank_conn[lost[i]];

		CS_WARN("rank %u lost; group epoch is now %u", lost[i],
			c->fd.epoch);
		if (conn != UINT32_MAX && c->conns[conn].open) {
			c->conns[conn].open = false;
			o->close(o->ctx, conn);
		}
		c->rank_conn[lost[i]] = UINT32_MAX;
		if (o->lost)
			o->lost(o->ctx, lost[i], c->fd.epoch);
	}
	for (uint32_t r = 0; r < c->world; r++)
		if (c->rank_conn[r] != UINT32_MAX)
			o->send(o->ctx, c->rank_conn[r], &v);
}

int cs_coord_on_msg(struct cs_coord *c, uint32_t conn,
		    const struct cs_boot_msg *m, cs_ns_t now,
		    const struct cs_coord_out *o)
{
	struct cs_coord_conn *cc;

	if (conn >= c->max_conns || !c->conns[conn].open)
		return -EBADF;
	cc = &c->conns[conn];
	if (!cc->admitted) {
		if (m->type != CS_BOOT_JOIN) {
			refuse(c, conn, -EPROTO, "expected JOIN", o);
			return -EPROTO;
		}
		return admit(c, conn, m, now, o);
	}
	if (m->type == CS_BOOT_DUMP && m->node == cc->rank && c->complete) {
		/* to every member, the origin too (its own record) */
		for (uint32_t r = 0; r < c->world; r++)
			if (c->rank_conn[r] != UINT32_MAX &&
			    c->fd.state[r] == CS_MEMBER_ALIVE)
				o->send(o->ctx, c->rank_conn[r], m);
		return 0;
	}
	if (m->type != CS_BOOT_HEARTBEAT || m->node != cc->rank) {
		refuse(c, conn, -EPROTO, "unexpected message", o);
		cs_coord_on_close(c, conn, now, o);
		return -EPROTO;
	}
	if (c->complete) {
		struct cs_boot_msg v = { .type = CS_BOOT_VIEW,
					 .epoch = c->fd.epoch };

		if (m->stamped && stamp_clock) {
			v.stamped = true;
			v.ts_echo = m->ts_tx;
			v.ts_rx = stamp_clock();
		}
		cs_coord_fd_heard(&c->fd, cc->rank, now);
		if (v.stamped)
			v.ts_tx = stamp_clock();
		o->send(o->ctx, conn, &v);
	}
	return 0;
}

void cs_coord_on_close(struct cs_coord *c, uint32_t conn, cs_ns_t now,
		       const struct cs_coord_out *o)
{
	struct cs_coord_conn *cc;
	uint32_t rank;

	(void)now;
	if (conn >= c->max_conns)
		return;
	cc = &c->conns[conn];
	if (!cc->admitted) {
		cc->open = false;
		return;
	}
	rank = cc->rank;
	cc->admitted = false;
	cc->open = false;
	if (c->rank_conn[rank] != conn)
		return;
	if (!c->complete) {
		/* Left before the group formed: the rank is free again. */
		c->rank_conn[rank] = UINT32_MAX;
		c->joined--;
		return;
	}
	if (c->fd.state[rank] == CS_MEMBER_JOINING) {
		/* left before it joined: it joins as a lost member (its rank
		 * is taken), so that the ranks after it stay in place */
		c->fd.state[rank] = CS_MEMBER_LOST;
		c->rank_conn[rank] = UINT32_MAX;
		return;
	}
	if (c->fd.state[rank] == CS_MEMBER_ALIVE) {
		/* A closed control connection is a loss, detected at once. */
		c->fd.state[rank] = CS_MEMBER_LOST;
		c->fd.alive--;
		c->fd.epoch++;
		c->rank_conn[rank] = UINT32_MAX;
		declare_lost(c, &rank, 1, o);
	}
}

void cs_coord_on_timer(struct cs_coord *c, cs_ns_t now,
		       const struct cs_coord_out *o)
{
	uint32_t lost[64];
	unsigned k;

	if (!c->complete)
		return;
	while ((k = cs_coord_fd_poll(&c->fd, now, lost, CS_ARRAY_SIZE(lost))))
		declare_lost(c, lost, k, o);
}

cs_ns_t cs_coord_next_deadline(const struct cs_coord *c)
{
	return c->complete ? cs_coord_fd_deadline(&c->fd) : UINT64_MAX;
}

uint32_t cs_coord_admit_joining(struct cs_coord *c, cs_ns_t now,
				const struct cs_coord_out *o)
{
	uint32_t k = c->joining;

	if (!c->complete || !k)
		return 0;
	for (uint32_t r = c->world; r < c->world + k; r++) {
		if (c->fd.state[r] != CS_MEMBER_JOINING)
			continue; /* left before it joined: stays lost */
		c->fd.state[r] = CS_MEMBER_ALIVE;
		c->fd.last_heard[r] = now;
		c->fd.alive++;
	}
	c->world += k;
	c->joined += k;
	c->joining = 0;
	c->fd.epoch++;
	CS_INFO("%u members joined: %u in the group, epoch %u", k, c->world,
		c->fd.epoch);
	send_table(c, o);
	return k;
}

/* -------- member -------- */

int cs_boot_member_init(struct cs_boot_member *b, const char *token,
			int32_t want_rank, const struct cs_node_addr *self,
			const struct cs_member_params *mp, uint64_t seed)
{
	if (!*token || strlen(token) >= sizeof(b->token))
		return -EINVAL;
	memset(b, 0, sizeof(*b));
	strcpy(b->token, token);
	b->want_rank = want_rank;
	b->self = *self;
	b->mp = *mp;
	b->rng = seed;
	return 0;
}

int cs_boot_member_on_msg(struct cs_boot_member *b, const struct cs_boot_msg *m,
			  cs_ns_t now, struct cs_boot_msg *reply,
			  uint32_t *lost, unsigned maxlost, unsigned *nlost)
{
	uint8_t proof[32];

	*nlost = 0;
	if (m->type == CS_BOOT_REFUSE) {
		snprintf(b->error, sizeof(b->error),
			 "coordinator refused us: %s (%s)", m->reason,
			 cs_strerror(m->code));
		b->state = CS_BOOT_M_FAILED;
		return -ECONNREFUSED;
	}
	switch (b->state) {
	case CS_BOOT_M_WAIT_CHALLENGE:
		if (m->type != CS_BOOT_CHALLENGE)
			break;
		for (unsigned i = 0; i < CS_BOOT_NONCE_LEN; i += 8) {
			uint64_t v = cs_rand_next(&b->rng);

			memcpy(b->nonce + i, &v, 8);
		}
		memset(reply, 0, sizeof(*reply));
		reply->type = CS_BOOT_JOIN;
		reply->want_rank = b->want_rank;
		reply->addr = b->self;
		memcpy(reply->nonce, b->nonce, CS_BOOT_NONCE_LEN);
		cs_boot_join_mac(b->token, m->nonce, b->nonce, &b->self,
				 reply->mac);
		b->state = CS_BOOT_M_WAIT_WELCOME;
		return CS_BOOT_M_REPLY;
	case CS_BOOT_M_WAIT_WELCOME:
		if (m->type != CS_BOOT_WELCOME)
			break;
		cs_boot_welcome_proof(b->token, b->nonce, m->node, proof);
		if (!cs_auth_equal(proof, m->mac, sizeof(proof))) {
			snprintf(b->error, sizeof(b->error),
				 "coordinator does not hold the job token");
			b->state = CS_BOOT_M_FAILED;
			return CS_ERR_AUTH;
		}
		if (m->world == 0 || m->world > CS_BOOT_MAX_RANKS ||
		    m->node >= m->world)
			break;
		b->rank = m->node;
		b->world = m->world;
		b->state = CS_BOOT_M_WAIT_TABLE;
		return 0;
	case CS_BOOT_M_WAIT_TABLE:
	case CS_BOOT_M_READY:
		if (m->type == CS_BOOT_TABLE) {
			/* the world may have grown (cs_coord_admit_joining()),
			 * never below our own rank */
			if (m->n <= b->rank || m->n < b->world ||
			    m->n > CS_BOOT_MAX_RANKS || m->table == NULL)
				break;
			memcpy(b->table, m->table, m->n * sizeof(*m->table));
			b->world = m->n;
			if (b->state == CS_BOOT_M_WAIT_TABLE)
				cs_member_fd_init(&b->fd, &b->mp, m->epoch,
						  now);
			else
				cs_member_fd_on_view(&b->fd, m->epoch, now);
			b->epoch = m->epoch;
			b->state = CS_BOOT_M_READY;
			return CS_BOOT_M_TABLE;
		}
		if (m->type == CS_BOOT_DUMP && b->state == CS_BOOT_M_READY) {
			/* a diagnostic: one naming no member is ignored */
			if (m->node >= b->world)
				return 0;
			b->dump_origin = m->node;
			b->dump_id = m->dump_id;
			return CS_BOOT_M_DUMP;
		}
		if (m->type == CS_BOOT_VIEW && b->state == CS_BOOT_M_READY) {
			int r = 0;

			if (m->stamped)
				b->coord_new = true;
			/* a reply to our last HEARTBEAT: a clock sample (a
			 * stale or forged echo is not one) */
			if (m->stamped && stamp_clock && b->hb_t1 &&
			    m->ts_echo == b->hb_t1 &&
			    b->hb_gen == atomic_load(&stamp_gen)) {
				cs_hb_clock_add(&b->clk, b->hb_t1, m->ts_rx,
						m->ts_tx, stamp_clock());
				b->hb_t1 = 0;
			}
			if (cs_member_fd_on_view(&b->fd, m->epoch, now)) {
				for (uint32_t i = 0; i < m->n; i++) {
					if (m->lost[i] < b->world)
						b->table[m->lost[i]].state =
							CS_MEMBER_LOST;
					if (i < maxlost)
						lost[(*nlost)++] = m->lost[i];
				}
				b->epoch = m->epoch;
				r = CS_BOOT_M_VIEW;
			}
			return r;
		}
		break;
	case CS_BOOT_M_FAILED:
		return -EPROTO;
	}
	snprintf(b->error, sizeof(b->error),
		 "unexpected message type %u from the coordinator in state %d",
		 m->type, b->state);
	b->state = CS_BOOT_M_FAILED;
	return -EPROTO;
}

unsigned cs_boot_member_poll(struct cs_boot_member *b, cs_ns_t now,
			     struct cs_boot_msg *hb)
{
	unsigned a, r = 0;

	if (b->state != CS_BOOT_M_READY)
		return 0;
	a = cs_member_fd_poll(&b->fd, now);
	if (a & CS_MEMBER_SEND_HB) {
		memset(hb, 0, sizeof(*hb));
		hb->type = CS_BOOT_HEARTBEAT;
		hb->node = b->rank;
		hb->epoch = b->epoch;
		if (stamp_clock) {
			uint32_t gen = atomic_load(&stamp_gen);

			if (gen != b->hb_gen) { /* samples of the old clock */
				memset(&b->clk, 0, sizeof(b->clk));
				b->hb_gen = gen;
			}
			hb->stamped = true;
			hb->ts_tx = b->hb_t1 = stamp_clock();
		}
		r |= CS_BOOT_M_REPLY;
	}
	if (a & CS_MEMBER_COORD_LOST)
		r |= CS_BOOT_M_COORD_LOST;
	return r;
}

int cs_boot_member_dump(const struct cs_boot_member *b, uint64_t id,
			struct cs_boot_msg *m)
{
	if (b->state != CS_BOOT_M_READY)
		return -EAGAIN;
	if (!b->coord_new)
		return -ENOTSUP;
	memset(m, 0, sizeof(*m));
	m->type = CS_BOOT_DUMP;
	m->node = b->rank;
	m->dump_id = id;
	return 0;
}

int cs_boot_member_clock(const struct cs_boot_member *b,
			 struct cs_hb_clock_est *e)
{
	if (!stamp_clock)
		return -EAGAIN;
	return cs_hb_clock_get(&b->clk, stamp_clock(), e);
}

cs_ns_t cs_boot_member_deadline(const struct cs_boot_member *b)
{
	return b->state == CS_BOOT_M_READY ? cs_member_fd_deadline(&b->fd)
					   : UINT64_MAX;
}
