/* SPDX-License-Identifier: MIT */
/*
 * PS persistence over io_uring (liburing): the SSD tier behind a table's
 * memory budget, and checkpoints.
 *
 * A checkpoint is written off the dataplane. The dataplane starts a
 * snapshot (cs_ps_store_snap_begin) whose sink is a checkpoint writer and
 * copies rows out in bounded steps (cs_ps_store_snap_step) between bursts;
 * each chunk of records goes, as a message on a queue, to the writer's
 * control thread, which owns its own io_uring: it writes the chunks into
 * "<path>.tmp", then the header, fsyncs, renames the file over <path> and
 * fsyncs the directory. A crash at any point leaves the previous
 * checkpoint or the new one, never a mix.
 *
 * Built without liburing, every function here returns -ENOTSUP.
 */
#ifndef CS_COLLECTIVES_PS_IO_H
#define CS_COLLECTIVES_PS_IO_H

#include "collectives/ps/ps.h"

#define CS_PS_CKPT_MAGIC "CSPSCKP1"
#define CS_PS_CKPT_VERSION 1u
#define CS_PS_CKPT_HDR 256u /* records start here */

struct cs_ps_uring_spill;

/**
 * cs_ps_spill_open - an SSD spill file driven by its own io_uring
 * @out: the file
 * @path: created or truncated
 * @qdepth: submission queue entries (a batch larger is split)
 * @spill: out, ready for cs_ps_store_add_table
 *
 * The ring belongs to the thread that serves the table (the dataplane):
 * a batch of reads is submitted at once and waited for together.
 * Returns 0 or -errno (-ENOTSUP without liburing).
 */
int cs_ps_spill_open(struct cs_ps_uring_spill **out, const char *path,
		     unsigned qdepth, struct cs_ps_spill *spill);
void cs_ps_spill_close(struct cs_ps_uring_spill *s);

struct cs_ps_ckpt;

/**
 * cs_ps_ckpt_start - start a checkpoint writer (a control thread)
 * @out: the writer
 * @path: final file name; "<path>.tmp" is written first
 * @st: the store, @table: the table (its spec goes in the header)
 * @qdepth: writes in flight
 * @sink: out, the sink to hand to cs_ps_store_snap_begin
 *
 * Returns 0 or -errno.
 */
int cs_ps_ckpt_start(struct cs_ps_ckpt **out, const char *path,
		     struct cs_ps_store *st, uint32_t table, unsigned qdepth,
		     struct cs_ps_snap_sink *sink);
/* The clock to record (cs_ps_store_snap_clock after snap_begin). */
void cs_ps_ckpt_set_clock(struct cs_ps_ckpt *c, uint64_t clock);
/* Bytes handed over and not yet written: a pump slows its snap_step
 * when this grows. */
size_t cs_ps_ckpt_queued(struct cs_ps_ckpt *c);
/* Non-blocking: true once the file is renamed into place or failed. */
bool cs_ps_ckpt_done(struct cs_ps_ckpt *c);
/* Wait for the writer (the snapshot must have ended); 0 or -errno.
 * Frees the writer. */
int cs_ps_ckpt_wait(struct cs_ps_ckpt *c);

/**
 * cs_ps_ckpt_restore - load a checkpoint into an empty table
 * @st: store, @table: a table added with the same spec (dim, dtype,
 *	key range and optimizer kind must match the file's)
 * @path: the checkpoint
 *
 * The file is read with io_uring and checked whole (magic, version, byte
 * order, header checksum, spec, size, record checksum) before a row is
 * loaded. Returns 0, -ENOENT, -EBADMSG (corrupt or truncated), -EINVAL
 * (another table's file), -ENOMEM, -errno.
 */
int cs_ps_ckpt_restore(struct cs_ps_store *st, uint32_t table,
		       const char *path);

#endif
