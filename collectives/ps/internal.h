/* SPDX-License-Identifier: MIT */
/* PS internals shared by the store's files: the row tiers. */
#ifndef CS_COLLECTIVES_PS_INTERNAL_H
#define CS_COLLECTIVES_PS_INTERNAL_H

#include "collectives/ps/ps.h"

#define CS_PS_NO_FRAME UINT32_MAX
/* owner of a frame handed out by the eviction now running */
#define CS_PS_FRAME_BUSY (UINT32_MAX - 1)

/* One row's bookkeeping; always in memory (about 40 bytes a row). */
struct cs_ps_ent {
	uint64_t key;
	uint64_t disk; /* spill slot + 1; 0: never written to the file */
	uint32_t frame; /* memory frame, or CS_PS_NO_FRAME (on disk) */
	uint32_t step; /* optimizer steps taken */
	uint32_t snap_gen; /* == rows->snap_gen: already in the snapshot */
	uint32_t pin; /* == rows->pin_gen: must stay in memory */
	uint8_t dirty; /* memory newer than the file */
	uint8_t ref; /* clock bit: used since the hand last passed */
	uint8_t reading; /* in the read batch in flight (rows->rd_*) */
};

struct cs_ps_rows {
	const struct cs_ps_table_spec *spec;
	size_t vbytes; /* values in the dtype */
	size_t voff_state; /* offset of the state in a frame */
	size_t frame_bytes;
	unsigned sfl; /* state floats */

	uint32_t *idx; /* open addressing: entry + 1, 0 empty */
	uint32_t idx_mask;
	struct cs_ps_ent *ents;
	uint32_t nents, ents_cap;

	uint8_t *mem; /* frames */
	uint32_t *owner; /* frame -> entry */
	uint32_t nframes, frames_cap;
	uint32_t frames_max; /* 0: no limit, no spill */
	uint32_t hand; /* clock hand over frames */
	uint32_t pin_gen;
	struct cs_ps_spill spill;
	uint64_t disk_slots;
	uint64_t *n_wr, *n_rd; /* the store's counters */
	struct cs_ps_io_req *reqs;
	/* the read batch in flight (spill.ops->read_start): its entries and
	 * requests, into rd_buf (not frames: nothing is reserved while it
	 * flies, and an entry brought in meanwhile is dropped from it) */
	uint32_t *rd_e;
	struct cs_ps_io_req *rd_reqs;
	uint8_t *rd_buf;
	uint32_t rd_n;
	/* the batch in flight is a snapshot's (snap_read): its rows go
	 * into the snapshot of generation rd_snap_gen, not into frames */
	bool rd_snap;
	uint32_t rd_snap_gen;
	uint64_t *n_rd_async;
	uint64_t *n_rd_snap_async; /* of n_rd_async: a snapshot's */

	/* snapshot */
	bool snap;
	uint32_t snap_gen;
	uint32_t snap_n, snap_cur;
	struct cs_ps_snap_sink sink;
	bool snap_yielded; /* a step stopped for another's batch in flight */
	uint32_t snap_rd_max; /* 0, or the largest batch the spill took */
	uint8_t *chunk;
	size_t chunk_len, chunk_cap;
	uint8_t *snap_row; /* sink.align: a spilled row read for a split record
			    */
	uint64_t chunk_nrec, snap_nrec;
	int snap_rc;
};

int cs_ps_rows_init(struct cs_ps_rows *r, const struct cs_ps_table_spec *s,
		    size_t mem_budget, const struct cs_ps_spill *spill);
void cs_ps_rows_fini(struct cs_ps_rows *r);
/* Entry of @key, or -1. */
int64_t cs_ps_rows_find(const struct cs_ps_rows *r, uint64_t key);
/* Entry of @key, created from the initializer when absent, in memory.
 * Returns the entry (>= 0) or -errno. */
int64_t cs_ps_rows_get(struct cs_ps_rows *r, uint64_t key);
/* Bring entries @e[0..n) into memory (one batch of reads) and pin them
 * until the next cs_ps_rows_unpin(). n <= cs_ps_rows_batch(). */
int cs_ps_rows_fault_in(struct cs_ps_rows *r, const uint32_t *e, uint32_t n);
void cs_ps_rows_unpin(struct cs_ps_rows *r);
/* Largest batch cs_ps_rows_fault_in takes. */
uint32_t cs_ps_rows_batch(const struct cs_ps_rows *r);
/*
 * Start reading the entries of @e[0..n) that are on disk, without
 * waiting (spill.ops->read_start). Returns 1 (in flight: complete it
 * with cs_ps_rows_read_poll), 0 (none on disk), -EBUSY (a batch flies),
 * -EOPNOTSUPP (the spill cannot; or more than it or cs_ps_rows_batch()
 * take at once: read them with cs_ps_rows_fault_in), -errno.
 */
int cs_ps_rows_read_start(struct cs_ps_rows *r, const uint32_t *e, uint32_t n);
/* The batch in flight: 1 still flying, 0 done (its entries not brought
 * in meanwhile are in memory now, none pinned) or none, -errno (nothing
 * brought in). @wait: until it is done. */
int cs_ps_rows_read_poll(struct cs_ps_rows *r, bool wait);
static inline bool cs_ps_rows_can_read_async(const struct cs_ps_rows *r)
{
	return r->frames_max && r->spill.ops->read_start &&
	       r->spill.ops->read_poll;
}

static inline uint8_t *cs_ps_rows_frame(struct cs_ps_rows *r, uint32_t e)
{
	return r->mem + (size_t)r->ents[e].frame * r->frame_bytes;
}

/* Before entry @e changes: copy it into a running snapshot if due. */
int cs_ps_rows_cow(struct cs_ps_rows *r, uint32_t e);
int cs_ps_rows_snap_begin(struct cs_ps_rows *r,
			  const struct cs_ps_snap_sink *sink,
			  size_t chunk_bytes);
int cs_ps_rows_snap_step(struct cs_ps_rows *r, uint32_t max_rows);
int cs_ps_rows_load(struct cs_ps_rows *r, const struct cs_ps_rec_head *h,
		    const void *frame);

#endif
