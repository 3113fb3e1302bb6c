// SPDX-License-Identifier: MIT
/*
 * Shard store: the server side of push/pull for the tables of one shard.
 *
 * Exactly once: each (table, worker) has a window of push ids. Ids below
 * done_below and those marked in the bitmap were taken; a copy of one is
 * acknowledged again and dropped. An id beyond the window is dropped
 * without an acknowledgement (the worker sends it again later). An id is
 * marked when its push is taken into an update or refused, never twice.
 *
 * Versions: a worker's push for version v may come in several messages
 * (part/nparts); v is complete for that worker when all arrived, and the
 * worker's clock is the first version it has not completed. Sync keeps
 * each worker's rows of versions [applied, applied + CS_PS_AHEAD) apart
 * and applies version v when every worker completed it, summing the
 * workers' rows in rank order: the result does not depend on arrival
 * order, and equals the serial reference bit for bit. Async and ssp add
 * every push into one aggregate as it arrives; flush applies one
 * optimizer step per key (hot keys pushed by many workers in one burst
 * are one update).
 *
 * Pulls are parked on arrival and answered by flush, after the pushes
 * that arrived before them were applied, once their mode allows: sync at
 * clock t once versions < t are applied; ssp once every worker's clock is
 * at least t - s; async at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/internal.h"
#include "collectives/ps/ps_wire.h"

struct ps_buf {
	uint8_t *p;
	size_t len, cap;
};

/* Refused push ids remembered per (table, worker), for their copies. */
#define PS_REFUSED_KEEP 8u

struct ps_wstate {
	uint64_t done_below; /* every push id below was taken */
	uint64_t bits; /* bit i: id done_below + i taken */
	uint64_t ref_id[PS_REFUSED_KEEP];
	int32_t ref_st[PS_REFUSED_KEEP]; /* 0: slot unused */
	uint32_t ref_next;
	uint64_t clock; /* versions complete */
	uint16_t parts[CS_PS_AHEAD], nparts[CS_PS_AHEAD];
};

struct ps_parked {
	uint8_t *msg;
	size_t len;
	/* a pull (async, ssp): served once the table's pushes up to seq
	 * are applied: those taken before it came, then (when its clock
	 * first allowed it) those taken until then, which its clock counts
	 * on (ssp: the versions of the slowest worker) */
	uint64_t seq;
	bool seq_final;
	bool read_once; /* a pull whose own reads were started */
};

/* A group of updates in ps_table.pend: its end, its last push. */
struct ps_group {
	size_t end;
	uint64_t seq;
};

struct ps_table {
	struct cs_ps_table_spec spec;
	struct cs_ps_rows rows;
	struct ps_wstate *ws; /* [workers] */
	uint64_t applied; /* sync: versions applied */
	bool sync_pending; /* the aggregate holds version @applied */
	struct ps_buf *sync; /* [CS_PS_AHEAD][workers]: (key, f32 row)... */

	/* aggregate: key -> f32 row */
	uint32_t *agg_idx; /* open addressing: slot + 1 */
	uint32_t agg_mask;
	uint64_t *agg_keys;
	float *agg_rows;
	uint32_t agg_n, agg_cap;
	float *work; /* dim f32 */
	float *grad; /* dim f32 */
	uint32_t *batch; /* rows_batch entries */

	/*
	 * Updates taken but not applied yet, where the spill reads without
	 * waiting: each flush's aggregate (sync: the version's) is appended
	 * as (key, f32 row) records, applied in order from pend_off in
	 * batches whose rows on disk are read first while the store serves
	 * on (the applied front dropped now and then: pend_compact).
	 * groups[] mark where each flush's aggregate ends and the last push
	 * in it; a pull (async, ssp) waits until the pushes up to its seq
	 * are applied (seq_applied).
	 */
	struct ps_buf pend;
	size_t pend_off;
	size_t pend_read; /* pend_off + 1 of the batch whose read landed */
	struct ps_buf groups; /* struct ps_group, from groups_off */
	size_t groups_off;
	uint64_t push_seq; /* pushes taken into the table */
	uint64_t seq_sealed; /* pushes up to this one in pend (or applied) */
	uint64_t seq_applied; /* pushes up to this one applied */
};

struct cs_ps_store {
	struct cs_ps_store_cfg cfg;
	struct cs_ps_store_io io;
	struct ps_table *tab[CS_PS_TABLES_MAX];
	struct ps_parked *parked;
	uint32_t nparked;
	/* pushes that came ahead of the window, taken when it reaches them */
	struct ps_parked early[CS_PS_EARLY_MAX];
	uint32_t nearly;
	size_t early_bytes;
	uint8_t *reply;
	struct cs_ps_store_stats st;
	int snap_table;
	uint64_t snap_clock;
	/* the last flush left a pull parked for reads: call again (its
	 * batch may have landed already, completed by another's poll) */
	bool io_again;
};

static int buf_put(struct ps_buf *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		uint8_t *q;

		while (cap < b->len + n)
			cap *= 2;
		q = realloc(b->p, cap);
		if (!q)
			return -ENOMEM;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

int cs_ps_store_create(struct cs_ps_store **out,
		       const struct cs_ps_store_cfg *cfg,
		       const struct cs_ps_store_io *io)
{
	struct cs_ps_store *st;

	if (!io || !io->send || cfg->msg_max < CS_PS_MSG_MIN ||
	    cfg->msg_max > CS_PS_MSG_MAX || cfg->parked_max == 0 ||
	    cfg->parked_max > UINT32_MAX / 2)
		return -EINVAL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->cfg = *cfg;
	st->io = *io;
	st->snap_table = -1;
	st->reply = malloc(cfg->msg_max);
	/* parked_max waiting pulls, and as many more that can be answered
	 * at the next flush (rx_pull) */
	st->parked = calloc(2 * (size_t)cfg->parked_max, sizeof(*st->parked));
	if (!st->reply || !st->parked) {
		free(st->reply);
		free(st->parked);
		free(st);
		return -ENOMEM;
	}
	*out = st;
	return 0;
}

static void table_free(struct ps_table *t)
{
	if (!t)
		return;
	cs_ps_rows_fini(&t->rows);
	if (t->sync)
		for (size_t i = 0; i < CS_PS_AHEAD * (size_t)t->spec.workers;
		     i++)
			free(t->sync[i].p);
	free(t->sync);
	free(t->ws);
	free(t->agg_idx);
	free(t->agg_keys);
	free(t->agg_rows);
	free(t->work);
	free(t->grad);
	free(t->batch);
	free(t->pend.p);
	free(t->groups.p);
	free(t);
}

void cs_ps_store_destroy(struct cs_ps_store *st)
{
	if (!st)
		return;
	for (unsigned i = 0; i < CS_PS_TABLES_MAX; i++)
		table_free(st->tab[i]);
	for (uint32_t i = 0; i < st->nparked; i++)
		free(st->parked[i].msg);
	for (uint32_t i = 0; i < st->nearly; i++)
		free(st->early[i].msg);
	free(st->parked);
	free(st->reply);
	free(st);
}

int cs_ps_store_add_table(struct cs_ps_store *st,
			  const struct cs_ps_table_spec *spec,
			  size_t mem_budget, const struct cs_ps_spill *spill)
{
	struct ps_table *t;
	int rc;

	rc = cs_ps_spec_check(spec);
	if (rc)
		return rc;
	if (st->tab[spec->id])
		return -EEXIST;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->spec = *spec;
	rc = cs_ps_rows_init(&t->rows, &t->spec, mem_budget, spill);
	if (rc) {
		free(t);
		return rc;
	}
	t->rows.n_wr = &st->st.spill_writes;
	t->rows.n_rd = &st->st.spill_reads;
	t->rows.n_rd_async = &st->st.spill_reads_async;
	t->rows.n_rd_snap_async = &st->st.snap_reads_async;
	t->ws = calloc(spec->workers, sizeof(*t->ws));
	/* f32 work row; also a row of the dtype (f64: 8 bytes a value) */
	t->work = malloc(sizeof(double) * spec->dim);
	t->grad = malloc(sizeof(float) * spec->dim);
	t->batch = malloc(sizeof(uint32_t) * cs_ps_rows_batch(&t->rows));
	t->agg_idx = calloc(64, sizeof(*t->agg_idx));
	t->agg_mask = 63;
	if (spec->mode == CS_PS_SYNC)
		t->sync = calloc(CS_PS_AHEAD * (size_t)spec->workers,
				 sizeof(*t->sync));
	if (!t->ws || !t->work || !t->grad || !t->batch || !t->agg_idx ||
	    (spec->mode == CS_PS_SYNC && !t->sync)) {
		table_free(t);
		return -ENOMEM;
	}
	st->tab[spec->id] = t;
	return 0;
}

/* ---- aggregate ---------------------------------------------------------- */

static uint32_t agg_hash(uint64_t k)
{
	k ^= k >> 31;
	k *= 0x9e3779b97f4a7c15ull;
	return (uint32_t)(k >> 32);
}

static int agg_grow(struct ps_table *t)
{
	uint32_t cap = (t->agg_mask + 1) * 2, mask = cap - 1;
	uint32_t *n = calloc(cap, sizeof(*n));

	if (!n)
		return -ENOMEM;
	for (uint32_t s = 0; s < t->agg_n; s++) {
		uint32_t i = agg_hash(t->agg_keys[s]) & mask;

		while (n[i])
			i = (i + 1) & mask;
		n[i] = s + 1;
	}
	free(t->agg_idx);
	t->agg_idx = n;
	t->agg_mask = mask;
	return 0;
}

/* Add @g to the aggregate of @key; the first contribution is copied. */
static int agg_add(struct ps_table *t, uint64_t key, const float *g)
{
	uint32_t d = t->spec.dim, i;
	float *acc;
	int rc;

	i = agg_hash(key) & t->agg_mask;
	for (; t->agg_idx[i]; i = (i + 1) & t->agg_mask) {
		uint32_t s = t->agg_idx[i] - 1;

		if (t->agg_keys[s] == key) {
			acc = t->agg_rows + (size_t)s * d;
			for (uint32_t j = 0; j < d; j++)
				acc[j] += g[j];
			return 0;
		}
	}
	if ((uint64_t)(t->agg_n + 1) * 2 > (uint64_t)t->agg_mask + 1) {
		rc = agg_grow(t);
		if (rc)
			return rc;
		i = agg_hash(key) & t->agg_mask;
		while (t->agg_idx[i])
			i = (i + 1) & t->agg_mask;
	}
	if (t->agg_n == t->agg_cap) {
		uint32_t cap = t->agg_cap ? t->agg_cap * 2 : 64;
		uint64_t *k = realloc(t->agg_keys, sizeof(*k) * cap);
		float *r;

		if (!k)
			return -ENOMEM;
		t->agg_keys = k;
		r = realloc(t->agg_rows, sizeof(float) * d * (size_t)cap);
		if (!r)
			return -ENOMEM;
		t->agg_rows = r;
		t->agg_cap = cap;
	}
	t->agg_keys[t->agg_n] = key;
	memcpy(t->agg_rows + (size_t)t->agg_n * d, g, sizeof(float) * d);
	t->agg_idx[i] = ++t->agg_n;
	return 0;
}

/* Keep the aggregate's keys from @from on (an I/O error stopped the
 * apply there); the ones before were applied. */
static void agg_keep_from(struct ps_table *t, uint32_t from)
{
	uint32_t d = t->spec.dim, n = t->agg_n - from;

	if (n) {
		memmove(t->agg_keys, t->agg_keys + from, sizeof(uint64_t) * n);
		memmove(t->agg_rows, t->agg_rows + (size_t)from * d,
			sizeof(float) * d * (size_t)n);
	}
	t->agg_n = n;
	memset(t->agg_idx, 0, sizeof(*t->agg_idx) * (t->agg_mask + 1ull));
	for (uint32_t s = 0; s < n; s++) {
		uint32_t i = agg_hash(t->agg_keys[s]) & t->agg_mask;

		while (t->agg_idx[i])
			i = (i + 1) & t->agg_mask;
		t->agg_idx[i] = s + 1;
	}
}

/*
 * One optimizer step per aggregated key, then the aggregate is empty. On
 * a spill I/O error the keys not yet applied stay for the next flush, so
 * an acknowledged push is neither lost nor applied twice.
 */
static int agg_apply(struct cs_ps_store *st, struct ps_table *t)
{
	struct cs_ps_rows *r = &t->rows;
	uint32_t d = t->spec.dim, bmax = cs_ps_rows_batch(r);
	uint32_t s = 0;
	int rc = 0;

	for (uint32_t s0 = 0; s0 < t->agg_n && !rc; s0 += bmax) {
		uint32_t n = CS_MIN(bmax, t->agg_n - s0), nb = 0;

		/* existing rows of this batch that are on disk: one read */
		for (s = s0; s < s0 + n; s++) {
			int64_t e = cs_ps_rows_find(r, t->agg_keys[s]);

			if (e >= 0)
				t->batch[nb++] = (uint32_t)e;
		}
		s = s0;
		rc = cs_ps_rows_fault_in(r, t->batch, nb);
		for (; s < s0 + n && !rc; s++) {
			int64_t e = cs_ps_rows_get(r, t->agg_keys[s]);
			uint8_t *fr;

			if (e < 0) {
				rc = (int)e;
				break;
			}
			cs_ps_rows_cow(r, (uint32_t)e);
			fr = cs_ps_rows_frame(r, (uint32_t)e);
			cs_ps_row_to_f32(t->spec.dtype, fr, t->work, d);
			cs_ps_opt_apply(&t->spec, t->work,
					(float *)(fr + r->voff_state),
					&r->ents[e].step,
					t->agg_rows + (size_t)s * d);
			cs_ps_row_from_f32(t->spec.dtype, t->work, fr, d);
			r->ents[e].dirty = 1;
			st->st.rows_updated++;
		}
		cs_ps_rows_unpin(r);
	}
	if (rc) {
		agg_keep_from(t, s);
		return rc;
	}
	t->agg_n = 0;
	memset(t->agg_idx, 0, sizeof(*t->agg_idx) * (t->agg_mask + 1ull));
	return 0;
}

/* ---- updates parked for their reads ------------------------------------- */

/* table_apply / pend_apply: reads in flight, the rest parked in pend */
#define PS_APPLY_WAIT 1

static size_t pend_rec(const struct ps_table *t)
{
	return sizeof(uint64_t) + sizeof(float) * t->spec.dim;
}

static bool pend_empty(const struct ps_table *t)
{
	return t->pend_off == t->pend.len;
}

/* Drop what was applied from the front of pend and groups (so that a
 * queue that never runs dry does not grow for ever). */
static void pend_compact(struct ps_table *t)
{
	size_t off = t->pend_off, goff = t->groups_off;

	if (!off || off < t->pend.len / 2)
		return;
	memmove(t->pend.p, t->pend.p + off, t->pend.len - off);
	t->pend.len -= off;
	t->pend_off = 0;
	t->pend_read = t->pend_read == off + 1 ? 1 : 0;
	memmove(t->groups.p, t->groups.p + goff, t->groups.len - goff);
	t->groups.len -= goff;
	t->groups_off = 0;
	for (size_t i = 0; i < t->groups.len; i += sizeof(struct ps_group)) {
		struct ps_group g;

		memcpy(&g, t->groups.p + i, sizeof(g));
		g.end -= off;
		memcpy(t->groups.p + i, &g, sizeof(g));
	}
}

/* Move the aggregate to the end of pend, as one group (its order kept:
 * the same optimizer steps a blocking flush would take). */
static int pend_seal(struct ps_table *t)
{
	uint32_t d = t->spec.dim;
	struct ps_group g = { 0, 0 };
	int rc;

	if (pend_empty(t)) {
		t->pend.len = t->pend_off = 0;
		t->groups.len = t->groups_off = 0;
		t->pend_read = 0;
	} else {
		pend_compact(t);
	}
	/* room first, so that a failure leaves the aggregate whole */
	rc = buf_put(&t->groups, &g, sizeof(g));
	if (rc)
		return rc;
	t->groups.len -= sizeof(g);
	if (t->agg_n) {
		size_t old = t->pend.len;

		for (uint32_t s = 0; s < t->agg_n && !rc; s++) {
			rc = buf_put(&t->pend, &t->agg_keys[s],
				     sizeof(uint64_t));
			if (!rc)
				rc = buf_put(&t->pend,
					     t->agg_rows + (size_t)s * d,
					     sizeof(float) * d);
		}
		if (rc) {
			t->pend.len = old;
			return rc;
		}
	}
	g = (struct ps_group){ t->pend.len, t->push_seq };
	t->seq_sealed = t->push_seq;
	(void)buf_put(&t->groups, &g, sizeof(g)); /* room taken above */
	t->agg_n = 0;
	memset(t->agg_idx, 0, sizeof(*t->agg_idx) * (t->agg_mask + 1ull));
	return 0;
}

/* pend applied up to pend_off: the groups that ended are done. */
static void pend_groups_done(struct ps_table *t)
{
	while (t->groups_off < t->groups.len) {
		struct ps_group g;

		memcpy(&g, t->groups.p + t->groups_off, sizeof(g));
		if (g.end > t->pend_off)
			break;
		t->seq_applied = g.seq;
		t->groups_off += sizeof(g);
	}
}

static uint64_t pend_key(const struct ps_table *t, size_t off)
{
	uint64_t k;

	memcpy(&k, t->pend.p + off, sizeof(k));
	return k;
}

/*
 * Apply pend in order, a batch of records at a time. A batch with rows
 * on disk has them read without waiting (read_start) and returns
 * PS_APPLY_WAIT; a later call finds them in and applies the batch. Its
 * rows may be sent back to disk before then (a pull's serve evicting
 * them): the second time the batch is read the blocking way, so it always
 * gets on. @block: every batch read the blocking way (nothing left). An
 * I/O error leaves the records not applied in pend, each applied at most
 * once. Returns 0 (pend empty), PS_APPLY_WAIT or -errno.
 */
static int pend_apply(struct cs_ps_store *st, struct ps_table *t, bool block)
{
	struct cs_ps_rows *r = &t->rows;
	uint32_t d = t->spec.dim, bmax = cs_ps_rows_batch(r);
	size_t rec = pend_rec(t);
	int rc = 0;

	while (!pend_empty(t)) {
		size_t off0 = t->pend_off, off;
		uint32_t n, nb = 0, ncold = 0;

		n = (uint32_t)CS_MIN((size_t)bmax, (t->pend.len - off0) / rec);
		for (uint32_t i = 0; i < n; i++) {
			int64_t e =
				cs_ps_rows_find(r, pend_key(t, off0 + i * rec));

			if (e < 0)
				continue;
			t->batch[nb++] = (uint32_t)e;
			ncold += r->ents[e].frame == CS_PS_NO_FRAME;
		}
		if (ncold && !block && r->rd_n) {
			/* a batch in flight (ours or a pull's) */
			rc = cs_ps_rows_read_poll(r, false);
			if (rc == 1) {
				st->st.push_io_waits++;
				return PS_APPLY_WAIT;
			}
			if (rc) {
				t->pend_read = 0; /* started again */
				return rc;
			}
			continue; /* landed: count again */
		}
		if (ncold && !block && t->pend_read != off0 + 1) {
			rc = cs_ps_rows_read_start(r, t->batch, nb);
			if (rc == 1) {
				t->pend_read = off0 + 1;
				st->st.push_reads_async += r->rd_n;
				st->st.push_io_waits++;
				return PS_APPLY_WAIT;
			}
			if (rc < 0 && rc != -EOPNOTSUPP && rc != -EBUSY)
				return rc;
			/* not started: read below, waiting */
		}
		rc = cs_ps_rows_fault_in(r, t->batch, nb);
		off = off0;
		for (uint32_t i = 0; i < n && !rc; i++, off += rec) {
			int64_t e = cs_ps_rows_get(r, pend_key(t, off));
			uint8_t *fr;

			if (e < 0) {
				rc = (int)e;
				break;
			}
			/* the record's floats may be unaligned */
			memcpy(t->grad, t->pend.p + off + sizeof(uint64_t),
			       sizeof(float) * d);
			cs_ps_rows_cow(r, (uint32_t)e);
			fr = cs_ps_rows_frame(r, (uint32_t)e);
			cs_ps_row_to_f32(t->spec.dtype, fr, t->work, d);
			cs_ps_opt_apply(&t->spec, t->work,
					(float *)(fr + r->voff_state),
					&r->ents[e].step, t->grad);
			cs_ps_row_from_f32(t->spec.dtype, t->work, fr, d);
			r->ents[e].dirty = 1;
			st->st.rows_updated++;
		}
		cs_ps_rows_unpin(r);
		t->pend_off = off;
		pend_groups_done(t);
		if (rc)
			return rc;
	}
	pend_groups_done(t); /* a group of pushes without keys */
	return 0;
}

/*
 * Apply the table's aggregate (async, ssp; sync: the version's). Where the
 * spill reads without waiting it goes through pend (above); otherwise it
 * is applied here, reading cold rows the blocking way. Returns 0,
 * PS_APPLY_WAIT or -errno.
 */
static int table_apply(struct cs_ps_store *st, struct ps_table *t, bool block)
{
	int rc;

	if (!cs_ps_rows_can_read_async(&t->rows) && pend_empty(t)) {
		rc = agg_apply(st, t);
		if (!rc)
			t->seq_applied = t->seq_sealed = t->push_seq;
		return rc;
	}
	if (t->agg_n ||
	    (t->spec.mode != CS_PS_SYNC && t->seq_sealed != t->push_seq)) {
		rc = pend_seal(t);
		if (rc)
			return rc;
	}
	return pend_apply(st, t, block);
}

/* ---- replies ------------------------------------------------------------ */

static void reply_status(struct cs_ps_store *st, const struct cs_ps_msg *in,
			 uint8_t type, int status, uint64_t version)
{
	struct cs_ps_msg m = {
		.type = type,
		.table = in->table,
		.worker = in->worker,
		.status = status,
		.id = in->id,
		.version = version,
		.nparts = 1,
		.dim = in->dim,
		.dtype = in->dtype,
	};

	cs_ps_wire_put_hdr(st->reply, &m);
	st->io.send(st->io.ctx, in->worker, st->reply, CS_PS_WIRE_HDR);
}

static void refuse(struct cs_ps_store *st, const struct cs_ps_msg *in,
		   int status)
{
	st->st.rejected++;
	reply_status(st, in,
		     in->type == CS_PS_MSG_PUSH ? CS_PS_MSG_PUSH_ACK
						: CS_PS_MSG_PULL_REPLY,
		     status, 0);
}

static uint64_t min_clock(const struct ps_table *t)
{
	uint64_t m = UINT64_MAX;

	for (uint32_t w = 0; w < t->spec.workers; w++)
		m = CS_MIN(m, t->ws[w].clock);
	return m;
}

/* Checks shared by push and pull; 0 or the status to refuse with. */
static int check_common(struct cs_ps_store *st, const struct cs_ps_msg *m,
			struct ps_table **out)
{
	struct ps_table *t;

	if (m->table >= CS_PS_TABLES_MAX || !st->tab[m->table])
		return -ENOENT;
	t = st->tab[m->table];
	if (m->dim != t->spec.dim || m->dtype != t->spec.dtype)
		return -EBADMSG; /* row size mismatch */
	if (m->worker >= t->spec.workers)
		return -EINVAL;
	for (uint32_t i = 0; i < m->nkeys; i++) {
		uint64_t k = cs_ps_wire_key(m, i);

		if (k >= t->spec.key_max)
			return -ERANGE;
		if (st->cfg.map &&
		    cs_ps_shard_of(st->cfg.map, m->table, k) != st->cfg.server)
			return -ENXIO; /* not this shard's key */
	}
	*out = t;
	return 0;
}

static bool id_taken(const struct ps_wstate *w, uint64_t id)
{
	if (id < w->done_below)
		return true;
	if (id - w->done_below >= CS_PS_DEDUP_WINDOW)
		return false;
	return (w->bits >> (id - w->done_below)) & 1;
}

static void id_take(struct ps_wstate *w, uint64_t id)
{
	w->bits |= 1ull << (id - w->done_below);
	while (w->bits & 1) {
		w->bits >>= 1;
		w->done_below++;
	}
}

/* The worker's clock moves over every version now complete. */
static void clock_advance(struct ps_wstate *w)
{
	for (;;) {
		unsigned s = (unsigned)(w->clock % CS_PS_AHEAD);

		if (!w->nparts[s] || w->parts[s] != w->nparts[s])
			return;
		w->parts[s] = 0;
		w->nparts[s] = 0;
		w->clock++;
	}
}

/* The status a taken id was refused with, or 0 (it was applied). */
static int refusal_of(const struct ps_wstate *w, uint64_t id)
{
	for (unsigned i = 0; i < PS_REFUSED_KEEP; i++)
		if (w->ref_st[i] && w->ref_id[i] == id)
			return w->ref_st[i];
	return 0;
}

/* Refuse a push whose id has a window: the id is taken (the window moves
 * on, as the worker's does on any answer) and its status kept, so a copy
 * gets the same answer. */
static void refuse_push(struct cs_ps_store *st, struct ps_wstate *w,
			const struct cs_ps_msg *m, int status)
{
	unsigned i = w->ref_next++ % PS_REFUSED_KEEP;

	id_take(w, m->id);
	w->ref_id[i] = m->id;
	w->ref_st[i] = status;
	refuse(st, m, status);
}

/* rx_push: a push for a version beyond the window (nothing done) */
#define PS_PUSH_EARLY 1

static int rx_push(struct cs_ps_store *st, const struct cs_ps_msg *m)
{
	uint32_t d = m->dim;
	struct ps_wstate *w;
	struct ps_table *t;
	unsigned slot;
	int rc;

	t = m->table < CS_PS_TABLES_MAX ? st->tab[m->table] : NULL;
	if (!t || m->worker >= t->spec.workers) {
		/* no (table, worker) to keep an id for: refused each time */
		refuse(st, m, t ? -EINVAL : -ENOENT);
		return 0;
	}
	w = &t->ws[m->worker];
	if (id_taken(w, m->id)) {
		/* a copy: the same answer as the first time */
		st->st.push_dup++;
		reply_status(st, m, CS_PS_MSG_PUSH_ACK, refusal_of(w, m->id),
			     m->version);
		return 0;
	}
	if (m->id - w->done_below >= CS_PS_DEDUP_WINDOW) {
		st->st.push_early++;
		return 0;
	}
	rc = check_common(st, m, &t);
	if (rc) {
		refuse_push(st, w, m, rc);
		return 0;
	}
	if (t->spec.mode != CS_PS_ASYNC) {
		uint64_t lim = w->clock + CS_PS_AHEAD;

		if (t->spec.mode == CS_PS_SYNC)
			lim = CS_MIN(lim, t->applied + CS_PS_AHEAD);
		if (m->version < w->clock) {
			/* version already done */
			refuse_push(st, w, m, CS_ERR_PROTO);
			return 0;
		}
		if (m->version >= lim)
			return PS_PUSH_EARLY; /* parked or dropped: rx */
		slot = (unsigned)(m->version % CS_PS_AHEAD);
		if (w->nparts[slot] && w->nparts[slot] != m->nparts) {
			refuse_push(st, w, m, CS_ERR_PROTO);
			return 0;
		}
	}
	/* take the rows */
	for (uint32_t i = 0; i < m->nkeys; i++) {
		uint64_t k = cs_ps_wire_key(m, i);
		uint8_t row[8 * 64];
		float *g = t->work;

		if (cs_ps_row_bytes(&t->spec) <= sizeof(row)) {
			cs_ps_wire_row(m, i, row);
			cs_ps_row_to_f32(t->spec.dtype, row, g, d);
		} else {
			/* wide rows: convert in pieces */
			size_t es = cs_dtype_size(t->spec.dtype);
			struct cs_ps_msg part = *m;

			for (uint32_t j = 0; j < d; j += 64) {
				uint32_t n = CS_MIN(64u, d - j);

				part.dim = n;
				part.rows = m->rows + ((size_t)i * d + j) * es;
				cs_ps_wire_row(&part, 0, row);
				cs_ps_row_to_f32(t->spec.dtype, row, g + j, n);
			}
		}
		if (t->spec.mode == CS_PS_SYNC) {
			struct ps_buf *b = &t->sync[(m->version % CS_PS_AHEAD) *
							    t->spec.workers +
						    m->worker];

			rc = buf_put(b, &k, sizeof(k));
			if (!rc)
				rc = buf_put(b, g, sizeof(float) * d);
		} else {
			rc = agg_add(t, k, g);
		}
		if (rc)
			return rc; /* nothing acknowledged: the worker resends
				    */
	}
	st->st.grads_in += m->nkeys;
	st->st.push_applied++;
	t->push_seq++;
	id_take(w, m->id);
	if (t->spec.mode != CS_PS_ASYNC) {
		slot = (unsigned)(m->version % CS_PS_AHEAD);
		w->nparts[slot] = m->nparts;
		w->parts[slot]++;
		clock_advance(w);
	}
	reply_status(st, m, CS_PS_MSG_PUSH_ACK, 0, m->version);
	return 0;
}

static bool pull_ready(const struct ps_table *t, uint64_t clock,
		       uint64_t *served);

static int rx_pull(struct cs_ps_store *st, const struct cs_ps_msg *m,
		   const void *raw, size_t len)
{
	size_t rb, room = st->cfg.msg_max - CS_PS_WIRE_HDR;
	uint64_t served;
	struct ps_table *t;
	uint8_t *copy;
	int rc;

	rc = check_common(st, m, &t);
	if (rc) {
		refuse(st, m, rc);
		return 0;
	}
	rb = cs_ps_row_bytes(&t->spec);
	if (m->nkeys > room / rb) {
		refuse(st, m, -EMSGSIZE); /* the reply would not fit */
		return 0;
	}
	/* a retransmission of a pull still waiting: it is answered once */
	for (uint32_t i = 0; i < st->nparked; i++) {
		struct cs_ps_msg p;

		cs_ps_wire_decode(st->parked[i].msg, st->parked[i].len, &p);
		if (p.table == m->table && p.worker == m->worker &&
		    p.id == m->id) {
			/* tell the worker it waits on us, not on a dead
			 * server: its retransmission count starts over */
			st->st.pull_dup++;
			reply_status(st, m, CS_PS_MSG_PULL_REPLY, -EINPROGRESS,
				     0);
			return 0;
		}
	}
	/*
	 * parked_max pulls may wait; one that the next flush answers (its
	 * clock is reached) is taken beyond them, up to parked_max more.
	 * The waiting ones may wait for the very worker whose pull this is
	 * (sync: a worker pulls clock t before it pushes version t): refused,
	 * it would come back only at its worker's timer, and every worker
	 * would wait for that one.
	 */
	if (st->nparked >= st->cfg.parked_max &&
	    (st->nparked == 2 * st->cfg.parked_max ||
	     !pull_ready(t, m->version, &served))) {
		st->st.pull_busy++;
		refuse(st, m, -EBUSY);
		return 0;
	}
	copy = malloc(len);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, raw, len);
	/* async, ssp: served once the pushes taken before it are applied */
	st->parked[st->nparked++] =
		(struct ps_parked){ copy, len, t->push_seq, false, false };
	st->st.pulls_parked++;
	return 0;
}

/*
 * Park push @msg that came ahead of its window (bounded: beyond
 * CS_PS_EARLY_MAX messages or CS_PS_EARLY_BYTES it is dropped, no ack,
 * and the worker's timer resends it). A copy of one parked already is
 * dropped.
 */
static void early_park(struct cs_ps_store *st, const struct cs_ps_msg *m,
		       const void *msg, size_t len)
{
	uint8_t *copy;

	for (uint32_t i = 0; i < st->nearly; i++) {
		struct cs_ps_msg q;

		cs_ps_wire_decode(st->early[i].msg, st->early[i].len, &q);
		if (q.table == m->table && q.worker == m->worker &&
		    q.id == m->id)
			return;
	}
	if (st->nearly == CS_PS_EARLY_MAX ||
	    st->early_bytes + len > CS_PS_EARLY_BYTES ||
	    !(copy = malloc(len))) {
		st->st.push_early++;
		return;
	}
	memcpy(copy, msg, len);
	st->early[st->nearly++] =
		(struct ps_parked){ copy, len, 0, false, false };
	st->early_bytes += len;
	st->st.push_parked++;
}

/* Take the parked pushes whose versions the window now reaches (each
 * taken one may move a worker's clock: again until none is taken). */
static int early_retry(struct cs_ps_store *st)
{
	bool again = true;
	int rc = 0;

	while (again && !rc) {
		again = false;
		for (uint32_t i = 0; i < st->nearly && !rc;) {
			struct ps_parked p = st->early[i];
			struct cs_ps_msg q;

			cs_ps_wire_decode(p.msg, p.len, &q);
			rc = rx_push(st, &q);
			if (rc == PS_PUSH_EARLY) {
				rc = 0;
				i++;
				continue;
			}
			/* taken, refused, or not taken for lack of memory
			 * (no ack: the worker resends) */
			st->early[i] = st->early[--st->nearly];
			st->early_bytes -= p.len;
			free(p.msg);
			again = true;
		}
	}
	return rc;
}

int cs_ps_store_rx(struct cs_ps_store *st, const void *msg, size_t len)
{
	struct cs_ps_msg m;
	int rc;

	rc = cs_ps_wire_decode(msg, len, &m);
	if (rc) {
		st->st.rejected++; /* cannot even say to whom: dropped */
		return 0;
	}
	switch (m.type) {
	case CS_PS_MSG_PUSH:
		rc = rx_push(st, &m);
		if (rc == PS_PUSH_EARLY) {
			early_park(st, &m, msg, len);
			return 0;
		}
		if (rc || !st->nearly)
			return rc;
		return early_retry(st);
	case CS_PS_MSG_PULL:
		return rx_pull(st, &m, msg, len);
	default:
		st->st.rejected++; /* a reply sent to a server */
		return 0;
	}
}

/* ---- flush: apply, then serve ------------------------------------------- */

/*
 * Apply every version all workers completed. The version's aggregate is
 * built whole (workers in rank order) before its buffers are dropped; an
 * apply cut short by an I/O error leaves the rest of that aggregate for
 * the next flush (sync_pending), so nothing is added twice; so does an
 * apply waiting for its reads (PS_APPLY_WAIT: the version is not applied
 * until they landed and the rest was applied).
 */
static int sync_apply(struct cs_ps_store *st, struct ps_table *t, bool block)
{
	uint32_t d = t->spec.dim, nw = t->spec.workers;
	size_t rec = sizeof(uint64_t) + sizeof(float) * d;
	int rc;

	while (t->sync_pending || min_clock(t) > t->applied) {
		struct ps_buf *b = &t->sync[(t->applied % CS_PS_AHEAD) * nw];

		for (uint32_t w = 0; w < nw && !t->sync_pending; w++) {
			for (size_t off = 0; off < b[w].len; off += rec) {
				uint64_t k;

				memcpy(&k, b[w].p + off, sizeof(k));
				/* the record's floats may be unaligned */
				memcpy(t->work, b[w].p + off + sizeof(k),
				       sizeof(float) * d);
				rc = agg_add(t, k, t->work);
				if (rc) {
					agg_keep_from(t, t->agg_n);
					return rc;
				}
			}
		}
		if (!t->sync_pending) {
			for (uint32_t w = 0; w < nw; w++)
				b[w].len = 0;
			t->sync_pending = true;
		}
		rc = table_apply(st, t, block);
		if (rc)
			return rc; /* or PS_APPLY_WAIT: still sync_pending */
		t->sync_pending = false;
		t->applied++;
	}
	return 0;
}

static bool pull_ready(const struct ps_table *t, uint64_t clock,
		       uint64_t *served)
{
	switch (t->spec.mode) {
	case CS_PS_SYNC:
		*served = t->applied;
		return t->applied >= clock;
	case CS_PS_SSP:
		*served = min_clock(t);
		return clock <= t->spec.staleness ||
		       *served >= clock - t->spec.staleness;
	default:
		*served = min_clock(t);
		return true;
	}
}

static int serve(struct cs_ps_store *st, struct ps_table *t,
		 const struct cs_ps_msg *q, uint64_t served)
{
	struct cs_ps_rows *r = &t->rows;
	uint32_t bmax = cs_ps_rows_batch(r);
	struct cs_ps_msg m = {
		.type = CS_PS_MSG_PULL_REPLY,
		.table = q->table,
		.worker = q->worker,
		.id = q->id,
		.version = served,
		.nparts = 1,
		.nkeys = q->nkeys,
		.dim = q->dim,
		.dtype = q->dtype,
	};
	uint8_t *row = (uint8_t *)t->work; /* 8 * dim bytes */
	int rc = 0;

	cs_ps_wire_put_hdr(st->reply, &m);
	for (uint32_t i0 = 0; i0 < q->nkeys && !rc; i0 += bmax) {
		uint32_t n = CS_MIN(bmax, q->nkeys - i0), nb = 0;

		for (uint32_t i = i0; i < i0 + n; i++) {
			int64_t e = cs_ps_rows_find(r, cs_ps_wire_key(q, i));

			if (e >= 0)
				t->batch[nb++] = (uint32_t)e;
		}
		rc = cs_ps_rows_fault_in(r, t->batch, nb);
		for (uint32_t i = i0; i < i0 + n && !rc; i++) {
			uint64_t k = cs_ps_wire_key(q, i);
			int64_t e = cs_ps_rows_find(r, k);

			if (e >= 0) {
				cs_ps_wire_put_row(
					st->reply, &m, i,
					cs_ps_rows_frame(r, (uint32_t)e));
			} else {
				cs_ps_init_row(&t->spec, k, row);
				cs_ps_wire_put_row(st->reply, &m, i, row);
			}
		}
		cs_ps_rows_unpin(r);
	}
	if (rc)
		return rc;
	st->io.send(st->io.ctx, q->worker, st->reply,
		    cs_ps_wire_len(m.type, m.nkeys, m.dim, m.dtype, 0));
	st->st.pulls_served++;
	st->st.rows_served += q->nkeys;
	if (t->spec.mode == CS_PS_SSP && q->version > served)
		st->st.max_staleness = CS_MAX(st->st.max_staleness,
					      (uint32_t)(q->version - served));
	return 0;
}

/*
 * Before a pull is served: its rows on disk are read without waiting
 * where the spill can (read_start), and the pull stays parked until a
 * later flush finds them in (read_poll). @once: its reads were started
 * before; once no batch flies it is served, what was sent back to disk
 * meanwhile (other batches landing, a tiny budget) read the blocking way
 * in serve(), so that pulls evicting each other's rows still get on.
 * Returns 2 (its reads started: wait), 1 (wait), 0 (serve it now: its
 * rows are in, or they are read the blocking way in serve()) or -errno
 * (the reads failed; it stays parked and is tried again).
 */
static int pull_prefetch(struct ps_table *t, const struct cs_ps_msg *q,
			 bool once)
{
	struct cs_ps_rows *r = &t->rows;
	uint32_t nb = 0;
	int rc;

	if (r->rd_n) {
		rc = cs_ps_rows_read_poll(r, false);
		if (rc)
			return rc; /* 1: in flight; or its error */
	}
	if (once)
		return 0;
	for (uint32_t i = 0; i < q->nkeys; i++) {
		int64_t e = cs_ps_rows_find(r, cs_ps_wire_key(q, i));

		if (e >= 0 && r->ents[e].frame == CS_PS_NO_FRAME) {
			if (nb == cs_ps_rows_batch(r))
				return 0; /* more than a batch: blocking */
			t->batch[nb++] = (uint32_t)e;
		}
	}
	if (!nb)
		return 0;
	rc = cs_ps_rows_read_start(r, t->batch, nb);
	return rc == 1 ? 2 : 0; /* not started: serve() reads them */
}

bool cs_ps_store_io_pending(struct cs_ps_store *st)
{
	if (st->io_again)
		return true;
	for (unsigned i = 0; i < CS_PS_TABLES_MAX; i++)
		if (st->tab[i] &&
		    (st->tab[i]->rows.rd_n || !pend_empty(st->tab[i])))
			return true;
	return false;
}

int cs_ps_store_flush(struct cs_ps_store *st)
{
	uint32_t keep = 0;
	int rc = 0;

	st->io_again = false;
	for (unsigned i = 0; i < CS_PS_TABLES_MAX; i++) {
		struct ps_table *t = st->tab[i];

		if (!t)
			continue;
		rc = t->spec.mode == CS_PS_SYNC ? sync_apply(st, t, false)
						: table_apply(st, t, false);
		if (rc < 0)
			return rc;
		rc = 0; /* PS_APPLY_WAIT: its pulls wait (seq, clock) */
	}
	if (st->nearly) {
		rc = early_retry(st);
		if (rc)
			return rc;
	}
	for (uint32_t i = 0; i < st->nparked; i++) {
		struct ps_parked p = st->parked[i];
		struct cs_ps_msg q;
		uint64_t served;
		struct ps_table *t;

		/* validated at rx; the table cannot go away */
		cs_ps_wire_decode(p.msg, p.len, &q);
		t = st->tab[q.table];
		if (!rc && t->spec.mode != CS_PS_SYNC && !p.seq_final &&
		    pull_ready(t, q.version, &served)) {
			p.seq = t->push_seq;
			p.seq_final = true;
		}
		if (rc || !pull_ready(t, q.version, &served) ||
		    (t->spec.mode != CS_PS_SYNC && t->seq_applied < p.seq)) {
			st->parked[keep++] = p;
			continue;
		}
		if (cs_ps_rows_can_read_async(&t->rows)) {
			int w = pull_prefetch(t, &q, p.read_once);

			if (w == 2) {
				p.read_once = true;
				w = 1;
			}
			if (w) {
				if (w == 1) {
					st->st.pull_io_waits++;
					st->io_again = true;
				} else {
					rc = w;
				}
				st->parked[keep++] = p;
				continue;
			}
		}
		rc = serve(st, t, &q, served);
		if (rc) {
			st->parked[keep++] = p;
			continue;
		}
		free(p.msg);
	}
	st->nparked = keep;
	return rc;
}

/* ---- inspection, snapshot, restore ------------------------------------- */

/*
 * What earlier flushes left waiting for reads, applied now, waiting for
 * them (sync: the version in progress, then it counts as applied).
 * @all: also what a flush would apply now (before a snapshot: what is
 * complete is in it, and no version is half applied).
 */
static int table_settle(struct cs_ps_store *st, struct ps_table *t, bool all)
{
	int rc;

	if (all)
		return t->spec.mode == CS_PS_SYNC ? sync_apply(st, t, true)
						  : table_apply(st, t, true);
	if (pend_empty(t))
		return 0;
	rc = pend_apply(st, t, true);
	if (rc)
		return rc;
	if (t->spec.mode == CS_PS_SYNC && t->sync_pending && !t->agg_n) {
		t->sync_pending = false;
		t->applied++;
	}
	return 0;
}

int cs_ps_store_peek(struct cs_ps_store *st, uint32_t table, uint64_t key,
		     void *row)
{
	struct ps_table *t;
	int64_t e;

	if (table >= CS_PS_TABLES_MAX || !st->tab[table])
		return -ENOENT;
	t = st->tab[table];
	if (key >= t->spec.key_max)
		return -ERANGE;
	e = table_settle(st, t, false);
	if (e < 0)
		return (int)e;
	e = cs_ps_rows_find(&t->rows, key);
	if (e < 0) {
		cs_ps_init_row(&t->spec, key, row);
		return 0;
	}
	e = cs_ps_rows_get(&t->rows, key);
	if (e >= 0)
		memcpy(row, cs_ps_rows_frame(&t->rows, (uint32_t)e),
		       cs_ps_row_bytes(&t->spec));
	cs_ps_rows_unpin(&t->rows);
	return e < 0 ? (int)e : 0;
}

uint64_t cs_ps_store_clock(struct cs_ps_store *st, uint32_t table)
{
	struct ps_table *t = table < CS_PS_TABLES_MAX ? st->tab[table] : NULL;

	if (!t)
		return 0;
	return t->spec.mode == CS_PS_SYNC ? t->applied : min_clock(t);
}

void cs_ps_store_nrows(struct cs_ps_store *st, uint32_t table, uint64_t *total,
		       uint64_t *resident)
{
	struct ps_table *t = table < CS_PS_TABLES_MAX ? st->tab[table] : NULL;
	uint64_t res = 0;

	*total = t ? t->rows.nents : 0;
	if (t)
		for (uint32_t e = 0; e < t->rows.nents; e++)
			res += t->rows.ents[e].frame != CS_PS_NO_FRAME;
	*resident = res;
}

const struct cs_ps_store_stats *cs_ps_store_stats(struct cs_ps_store *st)
{
	return &st->st;
}

void cs_ps_store_spill_summary(struct cs_ps_store *st, uint32_t table,
			       char *buf, size_t len)
{
	const struct cs_ps_store_stats *ss = &st->st;
	uint64_t total, res;

	cs_ps_store_nrows(st, table, &total, &res);
	snprintf(buf, len,
		 "%" PRIu64 " rows held, %" PRIu64 " in memory; rows written "
		 "%" PRIu64 ", read %" PRIu64 " (%" PRIu64
		 " while the lcore served on, %" PRIu64
		 " of them for pushes, %" PRIu64 " for checkpoints; %" PRIu64
		 " pull waits, %" PRIu64 " push waits)",
		 total, res, ss->spill_writes, ss->spill_reads,
		 ss->spill_reads_async, ss->push_reads_async,
		 ss->snap_reads_async, ss->pull_io_waits, ss->push_io_waits);
}

int cs_ps_store_snap_begin(struct cs_ps_store *st, uint32_t table,
			   const struct cs_ps_snap_sink *sink,
			   size_t chunk_bytes)
{
	struct ps_table *t = table < CS_PS_TABLES_MAX ? st->tab[table] : NULL;
	int rc;

	if (!t)
		return -ENOENT;
	if (st->snap_table >= 0)
		return -EBUSY;
	if (!sink || !sink->chunk || !sink->end)
		return -EINVAL;
	rc = table_settle(st, t, true);
	if (rc)
		return rc;
	rc = cs_ps_rows_snap_begin(&t->rows, sink, chunk_bytes);
	if (rc)
		return rc;
	st->snap_table = (int)table;
	st->snap_clock = cs_ps_store_clock(st, table);
	return 0;
}

int cs_ps_store_snap_step(struct cs_ps_store *st, uint32_t max_rows)
{
	int rc;

	if (st->snap_table < 0)
		return 0;
	rc = cs_ps_rows_snap_step(&st->tab[st->snap_table]->rows, max_rows);
	if (rc <= 0)
		st->snap_table = -1;
	return rc;
}

uint64_t cs_ps_store_snap_clock(struct cs_ps_store *st)
{
	return st->snap_clock;
}

int cs_ps_snap_pace_init(struct cs_ps_snap_pace *p, double share,
			 cs_ns_t step_ns)
{
	if (!(share > 0.0 && share <= 1.0) || !step_ns)
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	p->share = share;
	p->step_ns = step_ns;
	p->rows = 256;
	return 0;
}

void cs_ps_snap_pace_done(struct cs_ps_snap_pace *p, cs_ns_t start, cs_ns_t end,
			  size_t queued, size_t queued_max)
{
	cs_ns_t spent = end > start ? end - start : 0;

	p->steps++;
	if (spent < p->step_ns / 2 && p->rows < CS_PS_PACE_ROWS_MAX)
		p->rows *= 2;
	else if (spent > 2 * p->step_ns && p->rows > CS_PS_PACE_ROWS_MIN)
		p->rows /= 2;
	p->due = end + (cs_ns_t)((double)spent * (1.0 - p->share) / p->share);
	if (queued > queued_max) {
		p->held++;
		p->due += p->step_ns;
	}
}

int cs_ps_store_load_rec(struct cs_ps_store *st, uint32_t table,
			 const struct cs_ps_rec_head *h, const void *frame,
			 size_t frame_len)
{
	struct ps_table *t = table < CS_PS_TABLES_MAX ? st->tab[table] : NULL;

	if (!t)
		return -ENOENT;
	if (frame_len != t->rows.frame_bytes)
		return -EINVAL;
	return cs_ps_rows_load(&t->rows, h, frame);
}

int cs_ps_store_set_clock(struct cs_ps_store *st, uint32_t table,
			  uint64_t clock)
{
	struct ps_table *t = table < CS_PS_TABLES_MAX ? st->tab[table] : NULL;

	if (!t)
		return -ENOENT;
	t->applied = clock;
	for (uint32_t w = 0; w < t->spec.workers; w++) {
		memset(&t->ws[w], 0, sizeof(t->ws[w]));
		t->ws[w].clock = clock;
	}
	return 0;
}

size_t cs_ps_store_frame_bytes(struct cs_ps_store *st, uint32_t table)
{
	struct ps_table *t = table < CS_PS_TABLES_MAX ? st->tab[table] : NULL;

	return t ? t->rows.frame_bytes : 0;
}

const struct cs_ps_table_spec *cs_ps_store_spec(struct cs_ps_store *st,
						uint32_t table)
{
	struct ps_table *t = table < CS_PS_TABLES_MAX ? st->tab[table] : NULL;

	return t ? &t->spec : NULL;
}
