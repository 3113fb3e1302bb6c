// SPDX-License-Identifier: MIT
/*
 * Row tiers of one table on one shard: an index (key -> entry), memory
 * frames up to a budget, and the SSD tier behind them. A frame is the
 * row's values (table dtype) padded to 8 bytes, then its f32 optimizer
 * state; the spill file holds frame images at slot * frame_bytes, so a
 * row read back is exactly the row written.
 *
 * Eviction is CLOCK over the frames: a row used since the hand last
 * passed gets a second chance; rows pinned by the batch being served are
 * skipped. Victims that changed since they were last written are written
 * in one batch, then the batch's reads are issued in one batch.
 *
 * The snapshot copies rows out in bounded steps with copy on write: an
 * entry about to change before the step reached it is copied first, so
 * the snapshot is the table at snap_begin.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/internal.h"

#define ROWS_IDX_MIN 64u
#define ROWS_BATCH_MAX 1024u

static uint64_t hkey(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

int cs_ps_rows_init(struct cs_ps_rows *r, const struct cs_ps_table_spec *s,
		    size_t mem_budget, const struct cs_ps_spill *spill)
{
	memset(r, 0, sizeof(*r));
	r->spec = s;
	r->vbytes = cs_ps_row_bytes(s);
	r->voff_state = (r->vbytes + 7) & ~(size_t)7;
	r->sfl = cs_ps_state_floats(s);
	r->frame_bytes = cs_ps_frame_bytes(s);
	if (mem_budget) {
		if (!spill || !spill->ops)
			return -EINVAL;
		if (cs_ps_budget_check(s, mem_budget, NULL, 0))
			return -EINVAL;
		r->frames_max = (uint32_t)(mem_budget / r->frame_bytes);
		r->spill = *spill;
		r->reqs = malloc(sizeof(*r->reqs) * ROWS_BATCH_MAX);
		if (!r->reqs)
			return -ENOMEM;
	}
	r->idx = calloc(ROWS_IDX_MIN, sizeof(*r->idx));
	if (!r->idx) {
		free(r->reqs);
		return -ENOMEM;
	}
	r->idx_mask = ROWS_IDX_MIN - 1;
	r->pin_gen = 1;
	r->snap_gen = 0;
	return 0;
}

void cs_ps_rows_fini(struct cs_ps_rows *r)
{
	if (r->rd_n) /* the reads land in rd_buf: wait for them */
		(void)r->spill.ops->read_poll(r->spill.ctx, true);
	free(r->rd_e);
	free(r->rd_reqs);
	free(r->rd_buf);
	free(r->idx);
	free(r->ents);
	free(r->mem);
	free(r->owner);
	free(r->reqs);
	free(r->chunk);
	free(r->snap_row);
	memset(r, 0, sizeof(*r));
}

int64_t cs_ps_rows_find(const struct cs_ps_rows *r, uint64_t key)
{
	uint32_t i = (uint32_t)hkey(key) & r->idx_mask;

	for (;; i = (i + 1) & r->idx_mask) {
		uint32_t e = r->idx[i];

		if (!e)
			return -1;
		if (r->ents[e - 1].key == key)
			return e - 1;
	}
}

static int idx_grow(struct cs_ps_rows *r)
{
	uint32_t cap = (r->idx_mask + 1) * 2, mask = cap - 1;
	uint32_t *n = calloc(cap, sizeof(*n));

	if (!n)
		return -ENOMEM;
	for (uint32_t e = 0; e < r->nents; e++) {
		uint32_t i = (uint32_t)hkey(r->ents[e].key) & mask;

		while (n[i])
			i = (i + 1) & mask;
		n[i] = e + 1;
	}
	free(r->idx);
	r->idx = n;
	r->idx_mask = mask;
	return 0;
}

static int64_t ent_add(struct cs_ps_rows *r, uint64_t key)
{
	uint32_t i;
	int rc;

	if (r->nents == UINT32_MAX - 1)
		return -ENOSPC;
	if ((uint64_t)(r->nents + 1) * 2 > (uint64_t)r->idx_mask + 1) {
		rc = idx_grow(r);
		if (rc)
			return rc;
	}
	if (r->nents == r->ents_cap) {
		uint32_t cap = r->ents_cap ? r->ents_cap * 2 : 64;
		struct cs_ps_ent *n = realloc(r->ents, sizeof(*n) * cap);

		if (!n)
			return -ENOMEM;
		r->ents = n;
		r->ents_cap = cap;
	}
	memset(&r->ents[r->nents], 0, sizeof(r->ents[0]));
	r->ents[r->nents].key = key;
	r->ents[r->nents].frame = CS_PS_NO_FRAME;
	/* not part of a running snapshot: created after its begin */
	r->ents[r->nents].snap_gen = r->snap_gen;
	i = (uint32_t)hkey(key) & r->idx_mask;
	while (r->idx[i])
		i = (i + 1) & r->idx_mask;
	r->idx[i] = r->nents + 1;
	return r->nents++;
}

/* A frame that has never been used, when the budget allows one more. */
static int frame_new(struct cs_ps_rows *r, uint32_t *out)
{
	if (r->frames_max && r->nframes >= r->frames_max)
		return -ENOSPC;
	if (r->nframes == r->frames_cap) {
		uint32_t cap = r->frames_cap ? r->frames_cap * 2 : 64;
		uint8_t *m;
		uint32_t *o;

		if (r->frames_max && cap > r->frames_max)
			cap = r->frames_max;
		m = realloc(r->mem, r->frame_bytes * cap);
		if (!m)
			return -ENOMEM;
		r->mem = m;
		o = realloc(r->owner, sizeof(*o) * cap);
		if (!o)
			return -ENOMEM;
		r->owner = o;
		r->frames_cap = cap;
	}
	*out = r->nframes++;
	return 0;
}

/* Frames taken but not given an owner go back to the free state. */
static void frames_release(struct cs_ps_rows *r, const uint32_t *f, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		r->owner[f[i]] = CS_PS_NO_FRAME;
}

/*
 * Take @n frames for new or faulting rows, evicting cold ones; the dirty
 * victims are written in one batch before their frames are reused.
 */
static int frames_take(struct cs_ps_rows *r, uint32_t *out, uint32_t n)
{
	uint32_t vic_e[ROWS_BATCH_MAX], vic_f[ROWS_BATCH_MAX];
	uint32_t got = 0, nw = 0, scanned = 0;
	int rc;

	if (n > ROWS_BATCH_MAX)
		return -E2BIG;

	while (got < n) {
		uint32_t f, e;
		struct cs_ps_ent *v;

		if (frame_new(r, &f) == 0) {
			r->owner[f] = CS_PS_FRAME_BUSY;
			out[got++] = f;
			continue;
		}
		if (!r->frames_max)
			return -ENOMEM;
		if (scanned > 2u * r->nframes + 2)
			return -ENOSPC; /* everything pinned */
		f = r->hand;
		r->hand = (r->hand + 1) % r->nframes;
		scanned++;
		e = r->owner[f];
		if (e == CS_PS_FRAME_BUSY)
			continue; /* taken earlier in this call */
		if (e == CS_PS_NO_FRAME)
			goto take;
		v = &r->ents[e];
		if (v->pin == r->pin_gen)
			continue;
		if (v->ref) {
			v->ref = 0;
			continue;
		}
		/* a row leaving memory keeps its place in a snapshot: copy it
		 * now if the snapshot has not reached it yet */
		rc = cs_ps_rows_cow(r, e);
		if (rc)
			return rc;
		if (v->dirty || !v->disk) {
			if (!v->disk)
				v->disk = ++r->disk_slots;
			vic_e[nw] = e;
			vic_f[nw] = f;
			r->reqs[nw++] = (struct cs_ps_io_req){
				.off = (v->disk - 1) * r->frame_bytes,
				.buf = r->mem + (size_t)f * r->frame_bytes,
				.len = (uint32_t)r->frame_bytes,
			};
		}
		v->frame = CS_PS_NO_FRAME;
		v->dirty = 0;
	take:
		r->owner[f] = CS_PS_FRAME_BUSY;
		out[got++] = f;
		scanned = 0;
	}
	if (nw) {
		rc = r->spill.ops->write(r->spill.ctx, r->reqs, nw);
		if (rc) {
			/* not on disk: the victims stay in memory, dirty */
			frames_release(r, out, got);
			for (uint32_t i = 0; i < nw; i++) {
				r->ents[vic_e[i]].frame = vic_f[i];
				r->ents[vic_e[i]].dirty = 1;
				r->owner[vic_f[i]] = vic_e[i];
			}
			return rc;
		}
		if (r->n_wr)
			*r->n_wr += nw;
	}
	return 0;
}

uint32_t cs_ps_rows_batch(const struct cs_ps_rows *r)
{
	if (!r->frames_max)
		return ROWS_BATCH_MAX;
	return CS_MIN(ROWS_BATCH_MAX, r->frames_max / 2);
}

void cs_ps_rows_unpin(struct cs_ps_rows *r)
{
	r->pin_gen++;
	if (r->pin_gen == 0)
		r->pin_gen = 1;
}

int cs_ps_rows_fault_in(struct cs_ps_rows *r, const uint32_t *e, uint32_t n)
{
	uint32_t frames[ROWS_BATCH_MAX], want[ROWS_BATCH_MAX];
	uint32_t nwant = 0, i;
	int rc;

	if (n > cs_ps_rows_batch(r))
		return -E2BIG;
	for (i = 0; i < n; i++) {
		struct cs_ps_ent *v = &r->ents[e[i]];

		if (v->pin == r->pin_gen)
			continue; /* a key twice in the batch */
		v->pin = r->pin_gen;
		v->ref = 1;
		if (v->frame == CS_PS_NO_FRAME)
			want[nwant++] = e[i];
	}
	if (!nwant)
		return 0;
	rc = frames_take(r, frames, nwant);
	if (rc)
		return rc;
	for (i = 0; i < nwant; i++) {
		struct cs_ps_ent *v = &r->ents[want[i]];

		r->reqs[i] = (struct cs_ps_io_req){
			.off = (v->disk - 1) * r->frame_bytes,
			.buf = r->mem + (size_t)frames[i] * r->frame_bytes,
			.len = (uint32_t)r->frame_bytes,
		};
	}
	rc = r->spill.ops->read(r->spill.ctx, r->reqs, nwant);
	if (rc) {
		frames_release(r, frames, nwant);
		return rc;
	}
	if (r->n_rd)
		*r->n_rd += nwant;
	for (i = 0; i < nwant; i++) {
		r->ents[want[i]].frame = frames[i];
		r->ents[want[i]].reading = 0; /* the batch in flight skips it */
		r->owner[frames[i]] = want[i];
	}
	return 0;
}

/* The buffers of the read batch (allocated the first time). */
static int rd_bufs(struct cs_ps_rows *r)
{
	uint32_t max = cs_ps_rows_batch(r);

	if (r->rd_e)
		return 0;
	r->rd_e = malloc(sizeof(*r->rd_e) * max);
	r->rd_reqs = malloc(sizeof(*r->rd_reqs) * max);
	r->rd_buf = malloc(r->frame_bytes * max);
	if (!r->rd_e || !r->rd_reqs || !r->rd_buf) {
		free(r->rd_e);
		free(r->rd_reqs);
		free(r->rd_buf);
		r->rd_e = NULL;
		r->rd_reqs = NULL;
		r->rd_buf = NULL;
		return -ENOMEM;
	}
	return 0;
}

int cs_ps_rows_read_start(struct cs_ps_rows *r, const uint32_t *e, uint32_t n)
{
	uint32_t k = 0, max = cs_ps_rows_batch(r);
	int rc;

	if (!cs_ps_rows_can_read_async(r))
		return -EOPNOTSUPP;
	if (r->rd_n)
		return -EBUSY;
	rc = rd_bufs(r);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		struct cs_ps_ent *v = &r->ents[e[i]];

		if (v->frame != CS_PS_NO_FRAME || v->reading)
			continue; /* in memory, or a key twice */
		if (k == max) {
			rc = -E2BIG;
			break;
		}
		v->reading = 1;
		r->rd_e[k] = e[i];
		r->rd_reqs[k] = (struct cs_ps_io_req){
			.off = (v->disk - 1) * r->frame_bytes,
			.buf = r->rd_buf + (size_t)k * r->frame_bytes,
			.len = (uint32_t)r->frame_bytes,
		};
		k++;
	}
	if (!rc && k)
		rc = r->spill.ops->read_start(r->spill.ctx, r->rd_reqs, k);
	if (rc) {
		for (uint32_t i = 0; i < k; i++)
			r->ents[r->rd_e[i]].reading = 0;
		return rc == -E2BIG ? -EOPNOTSUPP : rc;
	}
	r->rd_n = k;
	return k ? 1 : 0;
}

static int snap_land(struct cs_ps_rows *r, int rc);

int cs_ps_rows_read_poll(struct cs_ps_rows *r, bool wait)
{
	uint32_t frames[ROWS_BATCH_MAX], in[ROWS_BATCH_MAX], k = 0;
	int rc;

	if (!r->rd_n)
		return 0;
	rc = r->spill.ops->read_poll(r->spill.ctx, wait);
	if (rc == 1)
		return 1;
	if (r->rd_snap)
		return snap_land(r, rc);
	/* landed (or failed): the entries not brought in meanwhile */
	for (uint32_t i = 0; i < r->rd_n; i++) {
		struct cs_ps_ent *v = &r->ents[r->rd_e[i]];

		if (v->reading && v->frame == CS_PS_NO_FRAME)
			in[k++] = i;
		v->reading = 0;
	}
	r->rd_n = 0;
	if (rc)
		return rc;
	if (!k)
		return 0;
	rc = frames_take(r, frames, k);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < k; i++) {
		uint32_t e = r->rd_e[in[i]];

		memcpy(r->mem + (size_t)frames[i] * r->frame_bytes,
		       r->rd_buf + (size_t)in[i] * r->frame_bytes,
		       r->frame_bytes);
		r->ents[e].frame = frames[i];
		r->ents[e].ref = 1;
		r->owner[frames[i]] = e;
	}
	if (r->n_rd)
		*r->n_rd += k;
	if (r->n_rd_async)
		*r->n_rd_async += k;
	return 0;
}

int64_t cs_ps_rows_get(struct cs_ps_rows *r, uint64_t key)
{
	int64_t e = cs_ps_rows_find(r, key);
	uint32_t f, ue;
	uint8_t *fr;
	int rc;

	if (e >= 0) {
		ue = (uint32_t)e;
		if (r->ents[ue].frame == CS_PS_NO_FRAME) {
			rc = cs_ps_rows_fault_in(r, &ue, 1);
			if (rc)
				return rc;
		}
		r->ents[ue].ref = 1;
		return e;
	}
	rc = frames_take(r, &f, 1);
	if (rc)
		return rc;
	e = ent_add(r, key);
	if (e < 0) {
		frames_release(r, &f, 1);
		return e;
	}
	ue = (uint32_t)e;
	r->ents[ue].frame = f;
	r->ents[ue].ref = 1;
	r->ents[ue].dirty = 1;
	r->owner[f] = ue;
	fr = cs_ps_rows_frame(r, ue);
	memset(fr, 0, r->frame_bytes);
	cs_ps_init_row(r->spec, key, fr);
	cs_ps_opt_state_init(r->spec, (float *)(fr + r->voff_state));
	return e;
}

/* ---- snapshot ---------------------------------------------------------- */

static size_t rec_bytes(const struct cs_ps_rows *r)
{
	return sizeof(struct cs_ps_rec_head) + r->frame_bytes;
}

static int chunk_flush(struct cs_ps_rows *r)
{
	int rc;

	if (!r->chunk_len)
		return 0;
	rc = r->sink.chunk(r->sink.ctx, r->chunk, r->chunk_len, r->chunk_nrec);
	r->chunk = NULL; /* the sink owns it now */
	r->chunk_len = 0;
	r->chunk_nrec = 0;
	return rc ? -EIO : 0;
}

static int chunk_new(struct cs_ps_rows *r)
{
	r->chunk = r->sink.align ? aligned_alloc(r->sink.align, r->chunk_cap)
				 : malloc(r->chunk_cap);
	return r->chunk ? 0 : -ENOMEM;
}

static int chunk_room(struct cs_ps_rows *r)
{
	int rc;

	if (r->chunk && r->chunk_len + rec_bytes(r) <= r->chunk_cap)
		return 0;
	rc = chunk_flush(r);
	if (rc)
		return rc;
	return chunk_new(r);
}

/* sink.align: append @n bytes, handing each chunk on as it fills up. */
static int chunk_put(struct cs_ps_rows *r, const void *p, size_t n)
{
	while (n) {
		size_t k;
		int rc;

		if (!r->chunk && chunk_new(r))
			return -ENOMEM;
		k = r->chunk_cap - r->chunk_len;
		if (k > n)
			k = n;
		memcpy(r->chunk + r->chunk_len, p, k);
		r->chunk_len += k;
		p = (const uint8_t *)p + k;
		n -= k;
		if (r->chunk_len == r->chunk_cap) {
			rc = chunk_flush(r);
			if (rc)
				return rc;
		}
	}
	return 0;
}

static int row_read(struct cs_ps_rows *r, const struct cs_ps_ent *v,
		    uint8_t *dst)
{
	struct cs_ps_io_req q = {
		.off = (v->disk - 1) * r->frame_bytes,
		.buf = dst,
		.len = (uint32_t)r->frame_bytes,
	};
	int rc = r->spill.ops->read(r->spill.ctx, &q, 1);

	if (!rc && r->n_rd)
		*r->n_rd += 1;
	return rc;
}

/*
 * sink.align: entry @e's record, split over two chunks where it does not
 * fit in the one being filled; its row from @bytes (a snapshot read's),
 * memory or the file (a spilled row that does not fit is read into
 * snap_row first).
 */
static int snap_emit_split(struct cs_ps_rows *r, struct cs_ps_ent *v,
			   const struct cs_ps_rec_head *h, uint32_t e,
			   const uint8_t *bytes)
{
	const uint8_t *row;
	int rc;

	if (!r->chunk && chunk_new(r))
		return -ENOMEM;
	r->chunk_nrec++; /* counted in the chunk it starts in */
	r->snap_nrec++;
	if (!bytes && v->frame == CS_PS_NO_FRAME &&
	    r->chunk_len + rec_bytes(r) <= r->chunk_cap) {
		/* it fits: the row is read straight into place */
		memcpy(r->chunk + r->chunk_len, h, sizeof(*h));
		rc = row_read(r, v, r->chunk + r->chunk_len + sizeof(*h));
		if (rc)
			return rc;
		r->chunk_len += rec_bytes(r);
		if (r->chunk_len == r->chunk_cap)
			return chunk_flush(r);
		return 0;
	}
	if (bytes) {
		row = bytes;
	} else if (v->frame != CS_PS_NO_FRAME) {
		row = cs_ps_rows_frame(r, e);
	} else {
		if (!r->snap_row && !(r->snap_row = malloc(r->frame_bytes)))
			return -ENOMEM;
		rc = row_read(r, v, r->snap_row);
		if (rc)
			return rc;
		row = r->snap_row;
	}
	rc = chunk_put(r, h, sizeof(*h));
	return rc ? rc : chunk_put(r, row, r->frame_bytes);
}

/* Append entry @e's record; its bytes come from @bytes (a snapshot
 * read's), memory or the file. */
static int snap_emit_from(struct cs_ps_rows *r, uint32_t e,
			  const uint8_t *bytes)
{
	struct cs_ps_ent *v = &r->ents[e];
	struct cs_ps_rec_head h = { .key = v->key, .step = v->step };
	uint8_t *dst;
	int rc;

	if (r->sink.align) {
		rc = snap_emit_split(r, v, &h, e, bytes);
		if (!rc)
			v->snap_gen = r->snap_gen;
		return rc;
	}
	rc = chunk_room(r);
	if (rc)
		return rc;
	dst = r->chunk + r->chunk_len;
	memcpy(dst, &h, sizeof(h));
	dst += sizeof(h);
	if (bytes) {
		memcpy(dst, bytes, r->frame_bytes);
	} else if (v->frame != CS_PS_NO_FRAME) {
		memcpy(dst, cs_ps_rows_frame(r, e), r->frame_bytes);
	} else {
		rc = row_read(r, v, dst);
		if (rc)
			return rc;
	}
	r->chunk_len += rec_bytes(r);
	r->chunk_nrec++;
	r->snap_nrec++;
	v->snap_gen = r->snap_gen;
	return 0;
}

static int snap_emit(struct cs_ps_rows *r, uint32_t e)
{
	return snap_emit_from(r, e, NULL);
}

/*
 * A snapshot's batch of reads landed (@rc: its status): each row not
 * copied meanwhile goes into the snapshot from the bytes read. Those
 * bytes are the row as it was at snap_begin: a row changed since was
 * copied first (cs_ps_rows_cow: its snap_gen is set, it is skipped
 * here), and a row not changed is on disk as it was, whether it went
 * through memory meanwhile or not. A failed batch fails the snapshot (its
 * rows were passed over by the step). Returns 0: the batch is the
 * snapshot's business, not the caller's.
 */
static int snap_land(struct cs_ps_rows *r, int rc)
{
	uint32_t n = r->rd_n;

	r->rd_n = 0;
	r->rd_snap = false;
	if (!r->snap || r->rd_snap_gen != r->snap_gen)
		return 0; /* that snapshot ended */
	if (rc) {
		if (!r->snap_rc)
			r->snap_rc = rc;
		return 0;
	}
	for (uint32_t i = 0; i < n && !r->snap_rc; i++) {
		uint32_t e = r->rd_e[i];

		if (r->ents[e].snap_gen == r->snap_gen)
			continue;
		rc = snap_emit_from(r, e,
				    r->rd_buf + (size_t)i * r->frame_bytes);
		if (rc)
			r->snap_rc = rc;
	}
	if (r->n_rd)
		*r->n_rd += n;
	if (r->n_rd_async)
		*r->n_rd_async += n;
	if (r->n_rd_snap_async)
		*r->n_rd_snap_async += n;
	return 0;
}

/* Start reading the snapshot's entries @e[0..n) (on disk) without
 * waiting. Returns how many of the first ones were started (the step
 * copies the others waiting): fewer where the spill takes fewer at once
 * (-E2BIG: the ring's depth), which later steps then gather. */
static uint32_t snap_read_start(struct cs_ps_rows *r, const uint32_t *e,
				uint32_t n)
{
	int rc;

	if (!n || r->rd_n)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		r->rd_e[i] = e[i];
		r->rd_reqs[i] = (struct cs_ps_io_req){
			.off = (r->ents[e[i]].disk - 1) * r->frame_bytes,
			.buf = r->rd_buf + (size_t)i * r->frame_bytes,
			.len = (uint32_t)r->frame_bytes,
		};
	}
	for (;;) {
		rc = r->spill.ops->read_start(r->spill.ctx, r->rd_reqs, n);
		if (rc != -E2BIG || n == 1)
			break;
		n /= 2;
		r->snap_rd_max = n;
	}
	if (rc)
		return 0;
	r->rd_n = n;
	r->rd_snap = true;
	r->rd_snap_gen = r->snap_gen;
	return n;
}

int cs_ps_rows_cow(struct cs_ps_rows *r, uint32_t e)
{
	int rc;

	if (!r->snap || e >= r->snap_n || r->ents[e].snap_gen == r->snap_gen)
		return 0;
	rc = snap_emit(r, e);
	if (rc)
		r->snap_rc = rc;
	return 0; /* a failed snapshot does not fail the update */
}

int cs_ps_rows_snap_begin(struct cs_ps_rows *r,
			  const struct cs_ps_snap_sink *sink,
			  size_t chunk_bytes)
{
	if (r->snap)
		return -EBUSY;
	if (sink->align) {
		if (sink->align & (sink->align - 1))
			return -EINVAL;
		if (chunk_bytes < sink->align)
			chunk_bytes = sink->align;
		chunk_bytes =
			(chunk_bytes + sink->align - 1) & ~(sink->align - 1);
	} else if (chunk_bytes < rec_bytes(r)) {
		chunk_bytes = rec_bytes(r);
	}
	r->sink = *sink;
	r->chunk_cap = chunk_bytes;
	r->chunk = NULL;
	r->chunk_len = 0;
	r->chunk_nrec = 0;
	r->snap_nrec = 0;
	r->snap_rc = 0;
	r->snap_gen++;
	if (r->snap_gen == 0) {
		/* wrapped: no entry may look already copied */
		for (uint32_t e = 0; e < r->nents; e++)
			r->ents[e].snap_gen = 0;
		r->snap_gen = 1;
	}
	r->snap_n = r->nents;
	r->snap_cur = 0;
	r->snap = true;
	return 0;
}

static void snap_end(struct cs_ps_rows *r, int rc)
{
	free(r->chunk);
	r->chunk = NULL;
	free(r->snap_row);
	r->snap_row = NULL;
	r->snap = false;
	r->sink.end(r->sink.ctx, r->snap_nrec, rc);
}

/*
 * Where the spill reads without waiting, the rows of a step that are on
 * disk are gathered into one batch (up to cs_ps_rows_batch()) and read
 * while the thread serves on; a later step (or any poll of the batch:
 * a pull's, a push's) copies them into the snapshot when they landed,
 * and the snapshot does not end before. Otherwise each is read waiting.
 */
int cs_ps_rows_snap_step(struct cs_ps_rows *r, uint32_t max_rows)
{
	uint32_t done = 0, bmax = cs_ps_rows_batch(r), nb = 0;
	uint32_t batch[ROWS_BATCH_MAX];
	bool async = cs_ps_rows_can_read_async(r);
	int rc;

	if (!r->snap)
		return 0;
	if (r->rd_n) {
		rc = cs_ps_rows_read_poll(r, false);
		if (rc == 1 && r->rd_snap)
			return 1; /* ours flies: nothing to copy meanwhile */
		/* another's flies (its poll or flush completes it), or it
		 * landed */
	}
	if (!r->rd_n)
		r->snap_yielded = false;
	if (async && rd_bufs(r))
		async = false; /* no memory for them: each read waiting */
	if (r->snap_rd_max && r->snap_rd_max < bmax)
		bmax = r->snap_rd_max;
	while (r->snap_cur < r->snap_n && done < max_rows && !r->snap_rc) {
		uint32_t e = r->snap_cur;

		if (r->ents[e].snap_gen == r->snap_gen) {
			r->snap_cur++;
			continue;
		}
		if (async && r->ents[e].frame == CS_PS_NO_FRAME) {
			if (!r->rd_n && nb == bmax)
				break; /* the batch is full: this row next */
			if (!r->rd_n) {
				batch[nb++] = e;
				r->snap_cur++;
				done++;
				continue;
			}
			/* a pull's or a push's batch flies: the next step,
			 * once; then waiting, so the snapshot gets on */
			if (!r->snap_yielded) {
				r->snap_yielded = true;
				break;
			}
		}
		rc = snap_emit(r, e);
		if (rc)
			r->snap_rc = rc;
		r->snap_cur++;
		done++;
	}
	if (nb && !r->snap_rc) {
		uint32_t i = snap_read_start(r, batch, nb);

		for (; i < nb && !r->snap_rc; i++) {
			rc = snap_emit(r, batch[i]);
			if (rc)
				r->snap_rc = rc;
		}
	}
	if (r->snap_rc) {
		rc = r->snap_rc;
		if (r->rd_n && r->rd_snap)
			(void)cs_ps_rows_read_poll(r, true);
		snap_end(r, rc);
		return rc;
	}
	if (r->snap_cur < r->snap_n || (r->rd_n && r->rd_snap))
		return 1;
	rc = chunk_flush(r);
	snap_end(r, rc);
	return rc;
}

int cs_ps_rows_load(struct cs_ps_rows *r, const struct cs_ps_rec_head *h,
		    const void *frame)
{
	int64_t e;
	uint32_t f;
	int rc;

	if (h->key >= r->spec->key_max)
		return -EINVAL;
	if (cs_ps_rows_find(r, h->key) >= 0)
		return -EEXIST;
	rc = frames_take(r, &f, 1);
	if (rc)
		return rc;
	e = ent_add(r, h->key);
	if (e < 0) {
		frames_release(r, &f, 1);
		return (int)e;
	}
	r->ents[e].frame = f;
	r->ents[e].step = h->step;
	r->ents[e].dirty = 1;
	r->owner[f] = (uint32_t)e;
	memcpy(cs_ps_rows_frame(r, (uint32_t)e), frame, r->frame_bytes);
	return 0;
}
