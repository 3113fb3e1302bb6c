// SPDX-License-Identifier: MIT
/*
 * Worker engine: turns push and pull calls into messages to the owning
 * servers, keeps every message until its reply came, sends it again on
 * timeout (time is an argument), and completes operations.
 *
 * A push combines duplicate keys first (one row per key, summed in the
 * order given), then splits the keys by owning server. Push ids count up
 * per (table, server) from 0, and at most CS_PS_DEDUP_WINDOW of them are
 * in flight past the lowest unacknowledged one, which is exactly what the
 * server's exactly-once window accepts.
 *
 * The transport core will carry these messages reliably; the worker's own
 * retransmission then only fires on a lost server (CS_ERR_PEER_LOST after
 * max_tries). Over the test queue it is what recovers from loss.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"

struct wsrv {
	uint64_t next_id;
	uint64_t acked_below; /* every push id below was acknowledged */
	uint64_t bits; /* bit i: id acked_below + i acknowledged */
};

struct wtable {
	struct cs_ps_table_spec spec;
	struct wsrv *srv; /* [nservers] */
};

struct wmsg {
	uint8_t *buf;
	size_t len;
	uint32_t server, sidx, table, op;
	uint64_t id;
	uint8_t type;
	bool sent;
	uint32_t tries;
	cs_ns_t deadline, rto;
	uint32_t u0, nu; /* pull: its keys in the op's unique list */
};

struct wop {
	bool used;
	uint64_t id;
	uint8_t type;
	uint32_t table;
	uint32_t pending;
	int rc;
	uint32_t peer;
	/* pull */
	uint8_t *out;
	uint32_t n, nu;
	uint32_t *pos_u;
	uint8_t *urows;
};

struct cs_ps_worker {
	struct cs_ps_worker_cfg cfg;
	struct cs_ps_worker_io io;
	struct wtable *tab[CS_PS_TABLES_MAX];
	struct wmsg *msgs;
	uint32_t nmsgs, msgs_cap;
	struct wop *ops;
	uint32_t nops_cap, inflight;
	uint64_t next_op, next_req;
	struct cs_ps_worker_stats st;
};

int cs_ps_worker_create(struct cs_ps_worker **out,
			const struct cs_ps_worker_cfg *cfg,
			const struct cs_ps_worker_io *io)
{
	struct cs_ps_worker *w;

	if (!cfg->map || !cfg->map->nservers || !io || !io->send || !io->done ||
	    cfg->msg_max < CS_PS_MSG_MIN || cfg->msg_max > CS_PS_MSG_MAX ||
	    cfg->rto == 0 || cfg->rto_max < cfg->rto)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->cfg = *cfg;
	w->io = *io;
	w->next_op = 1;
	*out = w;
	return 0;
}

static void op_free(struct wop *o)
{
	free(o->pos_u);
	free(o->urows);
	memset(o, 0, sizeof(*o));
}

void cs_ps_worker_destroy(struct cs_ps_worker *w)
{
	if (!w)
		return;
	for (unsigned i = 0; i < CS_PS_TABLES_MAX; i++) {
		if (w->tab[i])
			free(w->tab[i]->srv);
		free(w->tab[i]);
	}
	for (uint32_t i = 0; i < w->nmsgs; i++)
		free(w->msgs[i].buf);
	for (uint32_t i = 0; i < w->nops_cap; i++)
		op_free(&w->ops[i]);
	free(w->msgs);
	free(w->ops);
	free(w);
}

int cs_ps_worker_add_table(struct cs_ps_worker *w,
			   const struct cs_ps_table_spec *spec)
{
	struct wtable *t;
	int rc = cs_ps_spec_check(spec);

	if (rc)
		return rc;
	if (w->cfg.rank >= spec->workers)
		return -EINVAL;
	if (w->tab[spec->id])
		return -EEXIST;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->spec = *spec;
	t->srv = calloc(w->cfg.map->nservers, sizeof(*t->srv));
	if (!t->srv) {
		free(t);
		return -ENOMEM;
	}
	w->tab[spec->id] = t;
	return 0;
}

uint32_t cs_ps_worker_inflight(const struct cs_ps_worker *w)
{
	return w->inflight;
}

const struct cs_ps_worker_stats *cs_ps_worker_stats(struct cs_ps_worker *w)
{
	return &w->st;
}

static int op_new(struct cs_ps_worker *w, uint8_t type, uint32_t table,
		  uint32_t *out)
{
	uint32_t i;

	for (i = 0; i < w->nops_cap; i++)
		if (!w->ops[i].used)
			break;
	if (i == w->nops_cap) {
		uint32_t cap = w->nops_cap ? w->nops_cap * 2 : 16;
		struct wop *n = realloc(w->ops, sizeof(*n) * cap);

		if (!n)
			return -ENOMEM;
		memset(n + w->nops_cap, 0, sizeof(*n) * (cap - w->nops_cap));
		w->ops = n;
		w->nops_cap = cap;
	}
	w->ops[i] = (struct wop){
		.used = true,
		.id = w->next_op++,
		.type = type,
		.table = table,
	};
	w->inflight++;
	*out = i;
	return 0;
}

static void op_finish(struct cs_ps_worker *w, uint32_t oi)
{
	struct wop *o = &w->ops[oi];
	uint64_t id = o->id;
	int rc = o->rc;
	uint32_t peer = o->peer;

	if (!rc && o->type == CS_PS_MSG_PULL) {
		size_t rb = cs_ps_row_bytes(&w->tab[o->table]->spec);

		for (uint32_t p = 0; p < o->n; p++)
			memcpy(o->out + rb * p, o->urows + rb * o->pos_u[p],
			       rb);
	}
	op_free(o);
	w->inflight--;
	w->io.done(w->io.ctx, id, rc, peer);
}

/* Drop every message of op @oi still in flight (the op failed). */
static void op_drop_msgs(struct cs_ps_worker *w, uint32_t oi)
{
	uint32_t keep = 0;

	for (uint32_t i = 0; i < w->nmsgs; i++) {
		if (w->msgs[i].op == oi) {
			free(w->msgs[i].buf);
			continue;
		}
		w->msgs[keep++] = w->msgs[i];
	}
	w->nmsgs = keep;
}

static int msg_add(struct cs_ps_worker *w, const struct wmsg *m)
{
	if (w->nmsgs == w->msgs_cap) {
		uint32_t cap = w->msgs_cap ? w->msgs_cap * 2 : 64;
		struct wmsg *n = realloc(w->msgs, sizeof(*n) * cap);

		if (!n)
			return -ENOMEM;
		w->msgs = n;
		w->msgs_cap = cap;
	}
	w->msgs[w->nmsgs++] = *m;
	return 0;
}

static bool may_send(const struct cs_ps_worker *w, const struct wmsg *m)
{
	const struct wsrv *s;

	if (m->type != CS_PS_MSG_PUSH)
		return true;
	s = &w->tab[m->table]->srv[m->sidx];
	return m->id < s->acked_below + CS_PS_DEDUP_WINDOW;
}

static void msg_send(struct cs_ps_worker *w, struct wmsg *m, cs_ns_t now)
{
	if (m->sent) {
		w->st.retransmits++;
		if (m->type == CS_PS_MSG_PUSH)
			w->st.retx_push++;
		else
			w->st.retx_pull++;
		m->rto = CS_MIN(m->rto * 2, w->cfg.rto_max);
	} else {
		m->rto = w->cfg.rto;
	}
	m->sent = true;
	m->tries++;
	m->deadline = now + m->rto;
	w->st.msgs_sent++;
	w->io.send(w->io.ctx, m->server, m->buf, m->len);
}

cs_ns_t cs_ps_worker_tick(struct cs_ps_worker *w, cs_ns_t now)
{
	cs_ns_t next = UINT64_MAX;

	for (uint32_t i = 0; i < w->nmsgs; i++) {
		struct wmsg *m = &w->msgs[i];

		if (!m->sent) {
			if (may_send(w, m))
				msg_send(w, m, now);
		} else if (m->deadline <= now) {
			if (w->cfg.max_tries && m->tries >= w->cfg.max_tries) {
				uint32_t oi = m->op;

				w->ops[oi].rc = CS_ERR_PEER_LOST;
				w->ops[oi].peer = m->server;
				op_drop_msgs(w, oi);
				op_finish(w, oi);
				i = (uint32_t)-1; /* the array changed */
				next = UINT64_MAX;
				continue;
			}
			msg_send(w, m, now);
		}
		if (m->sent)
			next = CS_MIN(next, m->deadline);
	}
	return next;
}

static int check_keys(const struct wtable *t, const uint64_t *keys, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (keys[i] >= t->spec.key_max)
			return -EINVAL;
	return 0;
}

/* Keys grouped by server index, stable: order[] of positions, start[]. */
static int group(struct cs_ps_worker *w, uint32_t table, const uint64_t *keys,
		 uint32_t n, uint32_t **order, uint32_t **start)
{
	const struct cs_ps_shardmap *map = w->cfg.map;
	uint32_t ns = map->nservers, *sidx, *o, *s;

	sidx = malloc(sizeof(*sidx) * (n ? n : 1));
	o = malloc(sizeof(*o) * (n ? n : 1));
	s = calloc(ns + 1, sizeof(*s));
	if (!sidx || !o || !s) {
		free(sidx);
		free(o);
		free(s);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		sidx[i] = cs_ps_shard_index_of(map, table, keys[i]);
		s[sidx[i] + 1]++;
	}
	for (uint32_t k = 0; k < ns; k++)
		s[k + 1] += s[k];
	{
		uint32_t *fill = malloc(sizeof(*fill) * ns);

		if (!fill) {
			free(sidx);
			free(o);
			free(s);
			return -ENOMEM;
		}
		memcpy(fill, s, sizeof(*fill) * ns);
		for (uint32_t i = 0; i < n; i++)
			o[fill[sidx[i]]++] = i;
		free(fill);
	}
	free(sidx);
	*order = o;
	*start = s;
	return 0;
}

int cs_ps_worker_push(struct cs_ps_worker *w, uint32_t table, uint64_t version,
		      const uint64_t *keys, const void *rows, uint32_t n,
		      cs_ns_t now, uint64_t *op)
{
	struct wtable *t = table < CS_PS_TABLES_MAX ? w->tab[table] : NULL;
	uint32_t *order = NULL, *start = NULL, oi, d, per, ns;
	uint64_t *ukeys = NULL;
	float *f = NULL;
	uint8_t *row = NULL;
	size_t rb;
	int rc, u;

	if (!t || (n && (!keys || !rows)))
		return -EINVAL;
	rc = check_keys(t, keys, n);
	if (rc)
		return rc;
	d = t->spec.dim;
	rb = cs_ps_row_bytes(&t->spec);
	ns = w->cfg.map->nservers;
	per = (uint32_t)((w->cfg.msg_max - CS_PS_WIRE_HDR) / (8 + rb));
	if (per == 0)
		return -EMSGSIZE;
	ukeys = malloc(sizeof(*ukeys) * (n ? n : 1));
	f = malloc(sizeof(float) * d * (size_t)(n ? n : 1));
	row = malloc(rb);
	if (!ukeys || !f || !row) {
		rc = -ENOMEM;
		goto out_free;
	}
	if (n)
		memcpy(ukeys, keys, sizeof(*ukeys) * n);
	for (uint32_t i = 0; i < n; i++)
		cs_ps_row_to_f32(t->spec.dtype, (const uint8_t *)rows + rb * i,
				 f + (size_t)d * i, d);
	u = cs_ps_combine(ukeys, f, n, d);
	if (u < 0) {
		rc = u;
		goto out_free;
	}
	w->st.keys_combined += n - (uint32_t)u;
	rc = group(w, table, ukeys, (uint32_t)u, &order, &start);
	if (rc)
		goto out_free;
	rc = op_new(w, CS_PS_MSG_PUSH, table, &oi);
	if (rc)
		goto out_free;
	for (uint32_t s = 0; s < ns; s++) {
		uint32_t cnt = start[s + 1] - start[s];
		uint32_t nparts = cnt ? CS_DIV_ROUND_UP(cnt, per) : 1;

		if (!cnt && t->spec.mode == CS_PS_ASYNC)
			continue;
		if (nparts > UINT16_MAX) {
			rc = -E2BIG;
			goto out_op;
		}
		for (uint32_t p = 0; p < nparts; p++) {
			uint32_t k0 = p * per, nk = CS_MIN(per, cnt - k0);
			struct cs_ps_msg m = {
				.type = CS_PS_MSG_PUSH,
				.table = table,
				.worker = w->cfg.rank,
				.id = t->srv[s].next_id++,
				.version = version,
				.part = (uint16_t)p,
				.nparts = (uint16_t)nparts,
				.nkeys = cnt ? nk : 0,
				.dim = d,
				.dtype = t->spec.dtype,
			};
			struct wmsg wm = {
				.server = w->cfg.map->servers[s],
				.sidx = s,
				.table = table,
				.op = oi,
				.id = m.id,
				.type = CS_PS_MSG_PUSH,
			};

			wm.len = cs_ps_wire_len(m.type, m.nkeys, d,
						t->spec.dtype, 0);
			wm.buf = malloc(wm.len);
			if (!wm.buf) {
				rc = -ENOMEM;
				goto out_op;
			}
			cs_ps_wire_put_hdr(wm.buf, &m);
			for (uint32_t k = 0; k < m.nkeys; k++) {
				uint32_t i = order[start[s] + k0 + k];

				cs_ps_wire_put_key(wm.buf, k, ukeys[i]);
				cs_ps_row_from_f32(t->spec.dtype,
						   f + (size_t)d * i, row, d);
				cs_ps_wire_put_row(wm.buf, &m, k, row);
			}
			rc = msg_add(w, &wm);
			if (rc) {
				free(wm.buf);
				goto out_op;
			}
			w->ops[oi].pending++;
		}
	}
	*op = w->ops[oi].id;
	if (!w->ops[oi].pending)
		op_finish(w, oi);
	else
		cs_ps_worker_tick(w, now);
	goto out_free;
out_op:
	op_drop_msgs(w, oi);
	op_free(&w->ops[oi]);
	w->inflight--;
out_free:
	free(order);
	free(start);
	free(ukeys);
	free(f);
	free(row);
	return rc;
}

int cs_ps_worker_pull(struct cs_ps_worker *w, uint32_t table, uint64_t clock,
		      const uint64_t *keys, uint32_t n, void *out, cs_ns_t now,
		      uint64_t *op)
{
	struct wtable *t = table < CS_PS_TABLES_MAX ? w->tab[table] : NULL;
	uint32_t *order = NULL, *start = NULL, oi, per, nu = 0;
	struct cs_ps_key_idx *pk = NULL;
	uint64_t *ukeys = NULL;
	struct wop *o;
	size_t rb;
	int rc;

	if (!t || (n && (!keys || !out)))
		return -EINVAL;
	rc = check_keys(t, keys, n);
	if (rc)
		return rc;
	rb = cs_ps_row_bytes(&t->spec);
	per = (uint32_t)((w->cfg.msg_max - CS_PS_WIRE_HDR) / CS_MAX(rb, 8));
	rc = op_new(w, CS_PS_MSG_PULL, table, &oi);
	if (rc)
		return rc;
	o = &w->ops[oi];
	o->out = out;
	o->n = n;
	pk = malloc(sizeof(*pk) * (n ? n : 1));
	ukeys = malloc(sizeof(*ukeys) * (n ? n : 1));
	o->pos_u = malloc(sizeof(*o->pos_u) * (n ? n : 1));
	if (!pk || !ukeys || !o->pos_u) {
		rc = -ENOMEM;
		goto out_op;
	}
	for (uint32_t i = 0; i < n; i++)
		pk[i] = (struct cs_ps_key_idx){ keys[i], i };
	if (cs_ps_sort_keys(pk, n)) {
		rc = -ENOMEM;
		goto out_op;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (!i || pk[i].key != pk[i - 1].key)
			ukeys[nu++] = pk[i].key;
		o->pos_u[pk[i].idx] = nu - 1;
	}
	o->nu = nu;
	o->urows = malloc(rb * (nu ? nu : 1));
	if (!o->urows) {
		rc = -ENOMEM;
		goto out_op;
	}
	rc = group(w, table, ukeys, nu, &order, &start);
	if (rc)
		goto out_op;
	/* the reply order is the message's key order: u indices, so a
	 * message's keys are a run of order[] */
	for (uint32_t s = 0; s < w->cfg.map->nservers; s++) {
		uint32_t cnt = start[s + 1] - start[s];

		for (uint32_t k0 = 0; k0 < cnt; k0 += per) {
			uint32_t nk = CS_MIN(per, cnt - k0);
			struct cs_ps_msg m = {
				.type = CS_PS_MSG_PULL,
				.table = table,
				.worker = w->cfg.rank,
				.id = w->next_req++,
				.version = clock,
				.nparts = 1,
				.nkeys = nk,
				.dim = t->spec.dim,
				.dtype = t->spec.dtype,
			};
			struct wmsg wm = {
				.server = w->cfg.map->servers[s],
				.sidx = s,
				.table = table,
				.op = oi,
				.id = m.id,
				.type = CS_PS_MSG_PULL,
				.u0 = start[s] + k0,
				.nu = nk,
			};

			wm.len = cs_ps_wire_len(m.type, nk, m.dim, m.dtype, 0);
			wm.buf = malloc(wm.len);
			if (!wm.buf) {
				rc = -ENOMEM;
				goto out_op;
			}
			cs_ps_wire_put_hdr(wm.buf, &m);
			for (uint32_t k = 0; k < nk; k++)
				cs_ps_wire_put_key(
					wm.buf, k,
					ukeys[order[start[s] + k0 + k]]);
			rc = msg_add(w, &wm);
			if (rc) {
				free(wm.buf);
				goto out_op;
			}
			o->pending++;
		}
	}
	/* keep the order so a reply row finds its unique key */
	{
		uint32_t *pos_u = o->pos_u,
			 *inv = malloc(sizeof(*inv) * (nu ? nu : 1));

		if (!inv) {
			rc = -ENOMEM;
			goto out_op;
		}
		/* message rows come in order[] order: renumber u so that
		 * u' = place in order[]; pos_u maps to u' */
		for (uint32_t i = 0; i < nu; i++)
			inv[order[i]] = i;
		for (uint32_t p = 0; p < n; p++)
			pos_u[p] = inv[pos_u[p]];
		free(inv);
	}
	*op = o->id;
	if (!o->pending)
		op_finish(w, oi);
	else
		cs_ps_worker_tick(w, now);
	goto out_free;
out_op:
	op_drop_msgs(w, oi);
	op_free(&w->ops[oi]);
	w->inflight--;
out_free:
	free(order);
	free(start);
	free(pk);
	free(ukeys);
	return rc;
}

void cs_ps_worker_reset(struct cs_ps_worker *w)
{
	for (uint32_t i = 0; i < w->nmsgs; i++)
		free(w->msgs[i].buf);
	w->nmsgs = 0;
	for (unsigned t = 0; t < CS_PS_TABLES_MAX; t++)
		if (w->tab[t])
			memset(w->tab[t]->srv, 0,
			       sizeof(*w->tab[t]->srv) * w->cfg.map->nservers);
	for (uint32_t i = 0; i < w->nops_cap; i++) {
		if (!w->ops[i].used)
			continue;
		w->ops[i].rc = CS_ERR_CANCELLED;
		op_finish(w, i);
	}
}

static void ack_push(struct wsrv *s, uint64_t id)
{
	if (id < s->acked_below || id - s->acked_below >= 64)
		return;
	s->bits |= 1ull << (id - s->acked_below);
	while (s->bits & 1) {
		s->bits >>= 1;
		s->acked_below++;
	}
}

int cs_ps_worker_rx(struct cs_ps_worker *w, uint32_t from, const void *buf,
		    size_t len, cs_ns_t now)
{
	uint8_t want;
	struct cs_ps_msg m;
	struct wtable *t;
	struct wmsg *q = NULL;
	struct wop *o;
	uint32_t i, oi;

	if (cs_ps_wire_decode(buf, len, &m) || m.worker != w->cfg.rank ||
	    (m.type != CS_PS_MSG_PUSH_ACK && m.type != CS_PS_MSG_PULL_REPLY) ||
	    m.table >= CS_PS_TABLES_MAX || !w->tab[m.table]) {
		w->st.bad_replies++;
		return 0;
	}
	t = w->tab[m.table];
	want = m.type == CS_PS_MSG_PUSH_ACK ? CS_PS_MSG_PUSH : CS_PS_MSG_PULL;
	for (i = 0; i < w->nmsgs; i++) {
		q = &w->msgs[i];
		if (q->type == want && q->table == m.table &&
		    q->server == from && q->id == m.id && q->sent)
			break;
	}
	if (i == w->nmsgs) {
		w->st.dup_replies++; /* already answered, or never asked */
		return 0;
	}
	if (m.dim != t->spec.dim || m.dtype != t->spec.dtype ||
	    (m.type == CS_PS_MSG_PULL_REPLY && !m.status && m.nkeys != q->nu)) {
		w->st.bad_replies++;
		return 0;
	}
	w->st.replies++;
	oi = q->op;
	o = &w->ops[oi];
	if ((m.status == -EBUSY || m.status == -EINPROGRESS) &&
	    m.type == CS_PS_MSG_PULL_REPLY) {
		/* the server's pull queue was full (ask again later), or
		 * the pull waits there for its clock: the server is alive,
		 * so the count towards CS_ERR_PEER_LOST starts over */
		w->st.pull_waits++;
		q->tries = 0;
		/* a waiting pull is answered when its clock comes; a refused
		 * one (-EBUSY) is not kept there: it comes back only with
		 * this timer, soon rather than a whole rto later */
		q->deadline = now + q->rto;
		if (m.status == -EBUSY)
			q->deadline =
				now + CS_MAX(w->cfg.rto / CS_PS_BUSY_RETRY_DIV,
					     (cs_ns_t)1);
		return 0;
	}
	if (m.type == CS_PS_MSG_PUSH_ACK)
		ack_push(&t->srv[q->sidx], q->id);
	else if (!m.status)
		for (uint32_t k = 0; k < m.nkeys; k++)
			cs_ps_wire_row(&m, k,
				       o->urows + cs_ps_row_bytes(&t->spec) *
							  (q->u0 + k));
	if (m.status && !o->rc) {
		o->rc = m.status;
		o->peer = from;
	}
	free(q->buf);
	w->msgs[i] = w->msgs[--w->nmsgs];
	if (--o->pending == 0)
		op_finish(w, oi);
	/* acks open the window: send what waited */
	cs_ps_worker_tick(w, now);
	return 0;
}
