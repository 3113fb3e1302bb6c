/* SPDX-License-Identifier: MIT */
/*
 * Parameter server: sans-IO pieces (tables, shard map, optimizers, the
 * shard store and the worker engine). Nothing here opens a socket or
 * reads a clock: messages come in as byte buffers, go out through a send
 * callback, and time is an argument. The persistence pieces that do I/O
 * (checkpoint writer, SSD spill through io_uring) are in ps_io.h.
 *
 * The design, and what is wired and what not, is in docs/ps.md.
 */
#ifndef CS_COLLECTIVES_PS_H
#define CS_COLLECTIVES_PS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <collstack/ps.h>
#include <collstack/types.h>

#include "internal/util.h"

/* Limits. They bound every length read from a message. */
#define CS_PS_DIM_MAX 65536u /* values per row */
#define CS_PS_TABLES_MAX 64u /* tables per store / worker (ids 0..63) */
#define CS_PS_WORKERS_MAX 4096u /* workers of one table */
#define CS_PS_SERVERS_MAX 1024u /* servers in a shard map */
#define CS_PS_VNODES_MAX 1024u /* virtual nodes per server */
/*
 * Push ids a server accepts ahead of the lowest one it has not seen, per
 * (table, worker): the size of its exactly-once window. A worker keeps at
 * most this many pushes in flight per (table, server).
 */
#define CS_PS_DEDUP_WINDOW 64u
/* Versions a worker may push ahead of what a server has completed. */
#define CS_PS_AHEAD 32u
/* Pushes a server keeps that came ahead of that window (taken when their
 * version becomes current; more are dropped, and resent by the worker). */
#define CS_PS_EARLY_MAX 1024u
#define CS_PS_EARLY_BYTES ((size_t)64 << 20)
/* A pull a server refused for a full parking (-EBUSY) is sent again
 * after the worker's rto / this, not after its rto. */
#define CS_PS_BUSY_RETRY_DIV 16u
#define CS_PS_MSG_MIN 256u /* smallest msg_max accepted */
#define CS_PS_MSG_MAX (1u << 24) /* largest message */

/* enum cs_ps_mode, cs_ps_opt_kind, cs_ps_init_kind, struct cs_ps_opt and
 * struct cs_ps_init are in <collstack/ps.h>: the trainer API shares them. */

/**
 * struct cs_ps_table_spec - what a table is; identical on every node
 * @id: table id, below CS_PS_TABLES_MAX
 * @dim: values per row
 * @dtype: CS_F32, CS_F64, CS_F16 or CS_BF16 (rows are stored and carried
 *	in this type; optimizer state and arithmetic are f32)
 * @key_max: keys are 0 .. key_max - 1 (a dense table is every key)
 * @mode: update mode
 * @staleness: s of ssp
 * @workers: number of workers pushing (ranks 0 .. workers - 1)
 * @opt: server-side optimizer
 * @init: initializer of rows that do not exist yet
 */
struct cs_ps_table_spec {
	uint32_t id;
	uint32_t dim;
	enum cs_dtype dtype;
	uint64_t key_max;
	enum cs_ps_mode mode;
	uint32_t staleness;
	uint32_t workers;
	struct cs_ps_opt opt;
	struct cs_ps_init init;
};

/* Defaults for an optimizer kind (lr 0.01, momentum 0.9, adam 0.9/0.999,
 * eps 1e-8 (adam) / 1e-10 (adagrad), adagrad accumulator 0). */
void cs_ps_opt_defaults(struct cs_ps_opt *o, enum cs_ps_opt_kind kind);
/* 0, or -EINVAL when a field is out of range. */
int cs_ps_spec_check(const struct cs_ps_table_spec *s);
/* "sync", "async", "ssp:S"; returns 0 or -EINVAL. */
int cs_ps_mode_parse(const char *s, enum cs_ps_mode *mode, uint32_t *stale);
/* "sgd", "momentum", "adagrad", "adam"; returns 0 or -EINVAL. */
int cs_ps_opt_parse(const char *s, enum cs_ps_opt_kind *kind);
const char *cs_ps_opt_name(enum cs_ps_opt_kind kind);
const char *cs_ps_mode_name(enum cs_ps_mode mode);

/* Bytes of one row in the table's dtype; f32 values of optimizer state. */
size_t cs_ps_row_bytes(const struct cs_ps_table_spec *s);
unsigned cs_ps_state_floats(const struct cs_ps_table_spec *s);
/* Bytes of one row in memory and on the SSD tier: the values padded to 8,
 * then the optimizer state (f32) padded to 8. */
size_t cs_ps_frame_bytes(const struct cs_ps_table_spec *s);

/* A memory budget holds at least this many rows (frames). */
#define CS_PS_BUDGET_ROWS_MIN 64u

/**
 * cs_ps_budget_check - may table @s keep @budget bytes of rows in memory
 *	(the rest on the SSD tier)?
 * @why: out, the reason of a refusal (the budget, the rows it holds,
 *	a row's bytes and the bound), NUL-terminated; may be NULL
 *
 * Returns 0 (@budget 0: no limit, no SSD tier) or -EINVAL: fewer than
 * CS_PS_BUDGET_ROWS_MIN rows, or more than UINT32_MAX / 2.
 */
int cs_ps_budget_check(const struct cs_ps_table_spec *s, uint64_t budget,
		       char *why, size_t wl);

/* Row <-> f32 (host order). f16/bf16 round to nearest even. */
void cs_ps_row_to_f32(enum cs_dtype t, const void *src, float *dst, uint32_t n);
void cs_ps_row_from_f32(enum cs_dtype t, const float *src, void *dst,
			uint32_t n);

/**
 * cs_ps_init_row - the initial value of a row that does not exist yet
 * @s: table
 * @key: the row's key
 * @row: out, cs_ps_row_bytes(s) bytes in the table's dtype
 *
 * A pure function of (seed, table id, key, index): every node, every
 * restart and the reference compute the same row.
 */
void cs_ps_init_row(const struct cs_ps_table_spec *s, uint64_t key, void *row);

/**
 * cs_ps_opt_apply - one optimizer step on one row
 * @s: table (optimizer and its parameters)
 * @w: the row's values as f32, updated in place
 * @state: cs_ps_state_floats(s) floats of the row's state, updated
 * @step: the row's step count (Adam's bias correction), incremented
 * @g: the aggregated gradient of this step
 *
 * Sparse semantics: a row's state advances only on the steps that touch
 * the row (as PyTorch's SparseAdam / TF's sparse apply do).
 */
void cs_ps_opt_apply(const struct cs_ps_table_spec *s, float *w, float *state,
		     uint32_t *step, const float *g);

/* The initial optimizer state of a new row. */
void cs_ps_opt_state_init(const struct cs_ps_table_spec *s, float *state);

/* ---- shard map: consistent hashing with virtual nodes ---------------- */

struct cs_ps_vnode {
	uint64_t point;
	uint32_t server;
	uint32_t idx; /* of server in cs_ps_shardmap.servers */
};

/**
 * struct cs_ps_shardmap - which server owns a key
 *
 * Each server owns @vnodes points on a 64-bit hash circle (a pure
 * function of its id), and a key belongs to the first point at or after
 * the key's hash. Adding or removing a server moves only the keys of the
 * arcs it gains or loses: about 1/n of them.
 */
struct cs_ps_shardmap {
	struct cs_ps_vnode *pts; /* sorted by point */
	uint32_t npts;
	/* first[b]: the first point >= b << (64 - bits), so a key's owner
	 * is a short walk from there (the binary search's answer) */
	uint32_t *first;
	unsigned bits;
	uint32_t *servers; /* server ids, as given */
	uint32_t nservers;
	uint32_t vnodes;
};

int cs_ps_shardmap_init(struct cs_ps_shardmap *m, const uint32_t *servers,
			uint32_t n, uint32_t vnodes);
void cs_ps_shardmap_fini(struct cs_ps_shardmap *m);
/* Server id owning (table, key). The map must hold at least one server. */
uint32_t cs_ps_shard_of(const struct cs_ps_shardmap *m, uint32_t table,
			uint64_t key);
/* Index in m->servers of the server owning (table, key). */
uint32_t cs_ps_shard_index_of(const struct cs_ps_shardmap *m, uint32_t table,
			      uint64_t key);
/* Index of @server in m->servers, or -ENOENT. */
int cs_ps_shardmap_index(const struct cs_ps_shardmap *m, uint32_t server);

/* ---- rows: the memory tier and the SSD tier --------------------------- */

/* One read or write of the spill file. */
struct cs_ps_io_req {
	uint64_t off;
	void *buf;
	uint32_t len;
};

/*
 * The SSD tier behind a table's rows: a batch of reads or writes that
 * returns when all are done (0) or one failed (-errno). The io_uring one
 * is in ps_io.h; tests also use an in-memory one.
 */
struct cs_ps_spill_ops {
	int (*write)(void *ctx, struct cs_ps_io_req *r, unsigned n);
	int (*read)(void *ctx, struct cs_ps_io_req *r, unsigned n);
	/*
	 * Optional (both or neither): a batch of reads started and left in
	 * flight, so that the thread serves on (a pull waits for its cold
	 * rows on a later flush instead of blocking it). @read_start: 0
	 * started (the requests were copied), -E2BIG (more than it takes at
	 * once: the caller reads them with @read), -EBUSY (a batch is in
	 * flight), -errno. @read_poll: 1 still in flight, 0 all done, or
	 * the first -errno (done too); @wait: until done. One batch at a
	 * time; @read and @write may be called while it is in flight.
	 */
	int (*read_start)(void *ctx, const struct cs_ps_io_req *r, unsigned n);
	int (*read_poll)(void *ctx, bool wait);
};

struct cs_ps_spill {
	const struct cs_ps_spill_ops *ops;
	void *ctx;
};

struct cs_ps_rows;

/* ---- snapshot (checkpoint) records ------------------------------------ */

/*
 * A checkpoint is a header and records; a record is a cs_ps_rec_head and
 * the row's frame (values in the table's dtype, padded to 8, then the f32
 * optimizer state). Host byte order; the header says which.
 */
struct cs_ps_rec_head {
	uint64_t key;
	uint32_t step;
	uint32_t pad;
};

/*
 * Where a snapshot's chunks go: @chunk takes ownership of a malloc'd
 * buffer of records (the checkpoint writer hands it to its control
 * thread), @nrec the records that end in it; @end is called once with the
 * record count when the snapshot is complete. Returning non-zero from
 * @chunk aborts the snapshot. Concatenated in order, the chunks are the
 * records.
 *
 * @align 0: each chunk holds whole records. Otherwise (a power of two) a
 * record may be split over two chunks: every chunk but the last is exactly
 * the snapshot's chunk size (rounded up to a multiple of @align), and each
 * buffer starts at a multiple of @align and is a multiple of @align long,
 * whatever @len (what lies past @len is the sink's to use) -- what an
 * O_DIRECT write of each chunk needs (cs_ps_ckpt_start sets it).
 */
struct cs_ps_snap_sink {
	int (*chunk)(void *ctx, void *buf, size_t len, uint64_t nrec);
	void (*end)(void *ctx, uint64_t nrec, int rc);
	void *ctx;
	size_t align;
};

/* ---- shard store (server side) ---------------------------------------- */

struct cs_ps_store;

/*
 * Where a store's replies go. @peer is the worker's node id from the
 * message's worker field.
 */
struct cs_ps_store_io {
	int (*send)(void *ctx, uint32_t worker, const void *msg, size_t len);
	void *ctx;
};

struct cs_ps_store_cfg {
	uint32_t server; /* this node's server id (for the shard check) */
	const struct cs_ps_shardmap *map; /* NULL: accept every key */
	size_t msg_max; /* largest reply this store builds */
	uint32_t parked_max; /* pulls waiting at once (others -EBUSY); a
			      * copy of a waiting pull does not count; a
			      * pull the next flush answers is taken
			      * beyond it (up to parked_max more) */
};

struct cs_ps_store_stats {
	uint64_t push_applied; /* push messages taken into an update */
	uint64_t push_dup; /* duplicates acknowledged, not applied */
	uint64_t push_early; /* beyond the window, none parked: dropped, no
			      * ack */
	uint64_t push_parked; /* ahead of the version window: parked */
	uint64_t rejected; /* malformed or refused messages */
	uint64_t rows_updated; /* optimizer steps (one per key per flush) */
	uint64_t grads_in; /* gradient rows received (after worker combine) */
	uint64_t pulls_served;
	uint64_t pulls_parked;
	uint64_t pull_dup; /* a copy of a pull already waiting: dropped */
	uint64_t pull_busy; /* refused -EBUSY: parked_max pulls waited */
	uint64_t rows_served;
	uint64_t spill_writes, spill_reads; /* rows */
	uint64_t spill_reads_async; /* of spill_reads: read while the store
				     * served on (read_start) */
	uint64_t pull_io_waits; /* flushes that left a pull parked for its
				 * reads in flight */
	uint64_t push_reads_async; /* of spill_reads_async: rows a push's
				    * update was parked for (its reads
				    * started, the store serving on) */
	uint64_t push_io_waits; /* flushes that left pushes' updates parked
				 * for reads in flight */
	uint64_t snap_reads_async; /* of spill_reads_async: rows a
				    * snapshot read while the store served
				    * on */
	uint32_t max_staleness; /* ssp: largest t - min clock at a serve */
};

int cs_ps_store_create(struct cs_ps_store **out,
		       const struct cs_ps_store_cfg *cfg,
		       const struct cs_ps_store_io *io);
void cs_ps_store_destroy(struct cs_ps_store *st);

/**
 * cs_ps_store_add_table - serve a table
 * @st: store
 * @spec: the table
 * @mem_budget: bytes of rows (values + state) kept in memory; 0 for no
 *	limit. Beyond it cold rows go to @spill.
 * @spill: the SSD tier, or NULL (then @mem_budget must be 0)
 *
 * Returns: 0, -EINVAL (bad spec, budget without spill or smaller than 64
 * rows), -EEXIST, -ENOMEM.
 */
int cs_ps_store_add_table(struct cs_ps_store *st,
			  const struct cs_ps_table_spec *spec,
			  size_t mem_budget, const struct cs_ps_spill *spill);

/**
 * cs_ps_store_rx - one message from a worker
 * @st: store
 * @msg: the bytes (untrusted)
 * @len: their length
 *
 * Validates, deduplicates and queues the message; replies go out through
 * io->send (an error reply names the reason). Pushes are applied by
 * cs_ps_store_flush(). Returns: 0 (also for a refused message, which is
 * counted and answered), or -ENOMEM.
 */
int cs_ps_store_rx(struct cs_ps_store *st, const void *msg, size_t len);

/**
 * cs_ps_store_flush - apply what arrived, answer the pulls that may go
 *
 * The pump calls it after each burst of received messages: every key
 * pushed since the last flush (async, ssp) or every complete version
 * (sync) gets one optimizer step with its aggregated gradient, then the
 * parked pulls that are now allowed are answered. Where the spill reads
 * without waiting (read_start), an update whose rows are on disk is
 * parked instead while they are read, and applied, once and in order, by
 * a later flush (cs_ps_store_io_pending says when to call again); a pull
 * waits for the pushes taken before it (sync: for its version, as
 * always). cs_ps_store_peek and cs_ps_store_snap_begin first apply what
 * is parked, waiting for the reads. Returns 0 or -errno (a spill I/O
 * error).
 */
int cs_ps_store_flush(struct cs_ps_store *st);

/* A row as the store holds it now (or the initializer's value). */
int cs_ps_store_peek(struct cs_ps_store *st, uint32_t table, uint64_t key,
		     void *row);
/* Versions applied (sync) or the smallest worker clock (ssp, async). */
uint64_t cs_ps_store_clock(struct cs_ps_store *st, uint32_t table);
/* Reads of cold rows for a pull in flight, or pushes' updates parked
 * for theirs (the pump should poll the store again soon:
 * cs_ps_store_flush completes them). */
bool cs_ps_store_io_pending(struct cs_ps_store *st);
/* Rows held (memory + spilled) and rows in memory. */
void cs_ps_store_nrows(struct cs_ps_store *st, uint32_t table, uint64_t *total,
		       uint64_t *resident);
const struct cs_ps_store_stats *cs_ps_store_stats(struct cs_ps_store *st);
/* What @table's SSD tier did, in words for a log line ("N rows held, M
 * in memory; rows written ..."), into @buf of @len bytes. */
void cs_ps_store_spill_summary(struct cs_ps_store *st, uint32_t table,
			       char *buf, size_t len);

/**
 * cs_ps_store_snap_begin - start a point-in-time snapshot of a table
 *
 * The snapshot is the table as it is at this call. It is copied out in
 * bounded steps (cs_ps_store_snap_step) while pushes keep being applied:
 * a row about to change before its turn is copied first (copy on write).
 * Returns 0, -EBUSY (one is running), -ENOENT.
 */
int cs_ps_store_snap_begin(struct cs_ps_store *st, uint32_t table,
			   const struct cs_ps_snap_sink *sink,
			   size_t chunk_bytes);
/* Copy up to @max_rows more rows out. Returns 1 while rows remain, 0 when
 * the snapshot ended (sink->end was called), -errno on failure. */
int cs_ps_store_snap_step(struct cs_ps_store *st, uint32_t max_rows);
/* The clock recorded at snap_begin (goes in the checkpoint header). */
uint64_t cs_ps_store_snap_clock(struct cs_ps_store *st);

/**
 * struct cs_ps_snap_pace - when a pump runs its next snapshot step
 *
 * A snapshot's steps copy rows on the core that applies pushes. Paced,
 * they take at most @share of that core's time: after a step that took
 * t ns, the next is due t (1 - share) / share ns later. The rows per step
 * adapt so that a step takes about @step_ns (shorter steps cost more
 * calls; longer ones delay the pushes behind them). A checkpoint writer
 * that falls behind (more than @queued_max bytes handed over and not
 * written) holds the next step back by @step_ns more. Sans-IO: the
 * pump passes its clock.
 */
struct cs_ps_snap_pace {
	double share;
	cs_ns_t step_ns;
	uint32_t rows; /* for the next step */
	cs_ns_t due; /* no step before */
	uint64_t steps, held; /* steps run; held back by the writer */
};

#define CS_PS_PACE_ROWS_MIN 16u
#define CS_PS_PACE_ROWS_MAX (1u << 20)

/* @share in (0, 1], @step_ns > 0. Returns 0 or -EINVAL. */
int cs_ps_snap_pace_init(struct cs_ps_snap_pace *p, double share,
			 cs_ns_t step_ns);
/* Whether a step may run at @now (then with p->rows rows). */
static inline bool cs_ps_snap_pace_due(const struct cs_ps_snap_pace *p,
				       cs_ns_t now)
{
	return now >= p->due;
}
/* A step ran from @start to @end; @queued: the writer's backlog. */
void cs_ps_snap_pace_done(struct cs_ps_snap_pace *p, cs_ns_t start, cs_ns_t end,
			  size_t queued, size_t queued_max);

/* Load one record of a checkpoint (restore). The table must be empty of
 * that key. Returns 0, -EEXIST, -ENOMEM, -EINVAL. */
int cs_ps_store_load_rec(struct cs_ps_store *st, uint32_t table,
			 const struct cs_ps_rec_head *h, const void *frame,
			 size_t frame_len);
/* Set the restored clock of a table (every worker at @clock). */
int cs_ps_store_set_clock(struct cs_ps_store *st, uint32_t table,
			  uint64_t clock);
/* Bytes of a record's frame for this table (checkpoint validation). */
size_t cs_ps_store_frame_bytes(struct cs_ps_store *st, uint32_t table);
const struct cs_ps_table_spec *cs_ps_store_spec(struct cs_ps_store *st,
						uint32_t table);

/* ---- worker engine ----------------------------------------------------- */

struct cs_ps_worker;

struct cs_ps_worker_io {
	/* a message to server @server (its node id) */
	int (*send)(void *ctx, uint32_t server, const void *msg, size_t len);
	/* operation @op finished: 0, or an error; @peer names the server for
	 * CS_ERR_PEER_LOST and the error replies */
	void (*done)(void *ctx, uint64_t op, int rc, uint32_t peer);
	void *ctx;
};

struct cs_ps_worker_cfg {
	uint32_t rank; /* worker rank, 0 .. workers - 1 */
	const struct cs_ps_shardmap *map;
	size_t msg_max; /* largest message built */
	cs_ns_t rto; /* first retransmission timeout */
	cs_ns_t rto_max; /* back-off cap */
	uint32_t max_tries; /* sends of one message before CS_ERR_PEER_LOST;
			     * 0: no limit */
};

struct cs_ps_worker_stats {
	uint64_t msgs_sent, retransmits, replies, dup_replies, bad_replies;
	uint64_t keys_combined; /* duplicate keys folded into one row */
	/* of retransmits: pushes and pulls the timer sent again */
	uint64_t retx_push, retx_pull;
	/* pull replies that said wait (-EINPROGRESS: parked at the server
	 * for its clock; -EBUSY: its parking was full) */
	uint64_t pull_waits;
};

int cs_ps_worker_create(struct cs_ps_worker **out,
			const struct cs_ps_worker_cfg *cfg,
			const struct cs_ps_worker_io *io);
void cs_ps_worker_destroy(struct cs_ps_worker *w);
int cs_ps_worker_add_table(struct cs_ps_worker *w,
			   const struct cs_ps_table_spec *spec);

/**
 * cs_ps_worker_push - push sparse gradients for one version
 * @w: worker
 * @table: table id
 * @version: the worker's clock (0, 1, 2 ... in sync and ssp)
 * @keys: @n keys, duplicates allowed (combined here, summed in order)
 * @rows: @n rows in the table's dtype
 * @now: current time
 * @op: out, the operation id handed to io->done
 *
 * In sync and ssp every server gets a push for every version (an empty
 * one where no key is its own): that is how a server knows a worker's
 * version is complete. The rows are copied; the caller may reuse them.
 * Returns: 0, -EINVAL (bad table, key out of range), -ENOMEM.
 */
int cs_ps_worker_push(struct cs_ps_worker *w, uint32_t table, uint64_t version,
		      const uint64_t *keys, const void *rows, uint32_t n,
		      cs_ns_t now, uint64_t *op);

/**
 * cs_ps_worker_pull - pull rows
 * @clock: the worker's clock: sync answers once versions < @clock are
 *	applied; ssp once every worker completed @clock - s versions
 * @out: @n rows in the table's dtype, written before io->done(op, 0)
 *
 * Duplicate keys are asked once. @out must stay valid until done.
 */
int cs_ps_worker_pull(struct cs_ps_worker *w, uint32_t table, uint64_t clock,
		      const uint64_t *keys, uint32_t n, void *out, cs_ns_t now,
		      uint64_t *op);

/* A message from server @from (untrusted; the carrier says who sent it).
 * Returns 0 (a bad one is counted and dropped) or -ENOMEM. */
int cs_ps_worker_rx(struct cs_ps_worker *w, uint32_t from, const void *msg,
		    size_t len, cs_ns_t now);
/* Retransmit what timed out, send what the window now allows. Returns
 * the next time tick should be called (UINT64_MAX: nothing pending). */
cs_ns_t cs_ps_worker_tick(struct cs_ps_worker *w, cs_ns_t now);
/**
 * cs_ps_worker_reset - start over after a recovery
 *
 * Every operation in flight completes with CS_ERR_CANCELLED and the push
 * ids to every server start from 0 again: what a worker does when the job
 * rolled its servers back to a checkpoint (their exactly-once windows
 * start over too). Messages of before the reset must not reach the
 * restored servers: the transport core drops them by epoch.
 */
void cs_ps_worker_reset(struct cs_ps_worker *w);
/* Operations not yet done. */
uint32_t cs_ps_worker_inflight(const struct cs_ps_worker *w);
const struct cs_ps_worker_stats *cs_ps_worker_stats(struct cs_ps_worker *w);

/* A key and where it came from (its index in the caller's list). */
struct cs_ps_key_idx {
	uint64_t key;
	uint32_t idx;
};

/**
 * cs_ps_sort_keys - sort @v by key, equal keys kept in the order given:
 * with @v in ascending idx, the order of a sort by (key, idx). A radix
 * sort over the key bytes that differ (a short insertion sort below 24);
 * the combine and the pull's grouping ran qsort, 5 % of a PS step's CPU.
 * Returns: 0, or -ENOMEM.
 */
int cs_ps_sort_keys(struct cs_ps_key_idx *v, uint32_t n);

/**
 * cs_ps_combine - fold duplicate keys, summing their rows in f32 in the
 *	order they appear
 * @keys: in, @n keys; out, the unique keys in ascending order
 * @rows: in, @n f32 rows of @dim; out, the combined rows (same order)
 * @n: count
 *
 * Returns: the number of unique keys, or -ENOMEM.
 */
int cs_ps_combine(uint64_t *keys, float *rows, uint32_t n, uint32_t dim);

#endif
