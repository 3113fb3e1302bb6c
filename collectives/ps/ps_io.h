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

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "collectives/ps/ps.h"

#define CS_PS_CKPT_MAGIC "CSPSCKP1"
#define CS_PS_CKPT_VERSION                                                     \
	4u /* 2: shard, shard count, vnodes, name tag;                         \
	    * 3: records checked by CRC-32C;                                   \
	    * 4: records from byte 4096 (written with O_DIRECT) */
#define CS_PS_CKPT_HDR 4096u /* records start here */
/* The writer's O_DIRECT unit: file offsets, lengths and buffers. */
#define CS_PS_CKPT_ALIGN 4096u

struct cs_ps_uring_spill;

/**
 * cs_ps_spill_open - an SSD spill file driven by its own io_uring
 * @out: the file
 * @path: created or truncated
 * @qdepth: submission queue entries (a batch larger is split)
 * @spill: out, ready for cs_ps_store_add_table
 *
 * The ring belongs to the thread that serves the table (the dataplane):
 * a batch of reads is submitted at once and waited for together, or
 * (@spill->ops->read_start) left in flight and completed by read_poll,
 * the store answering the pull that needs them on a later flush.
 * Returns 0 or -errno (-ENOTSUP without liburing).
 */
int cs_ps_spill_open(struct cs_ps_uring_spill **out, const char *path,
		     unsigned qdepth, struct cs_ps_spill *spill);
/**
 * cs_ps_spill_create - a spill file of its own in a directory
 * @out: the file
 * @dir: an existing, writable directory (absolute or not)
 * @prefix: the file is "<dir>/<prefix>.XXXXXX.spill" (a new name, created
 *	exclusively, mode 0600); no '/' in it
 * @qdepth: as cs_ps_spill_open
 * @spill: out, ready for cs_ps_store_add_table
 * @path: out, the file's name (may be NULL); @plen its size
 *
 * cs_ps_spill_close() removes the file. Returns 0 or -errno: -ENOENT (no
 * such directory), -ENOTDIR, -EACCES / -EROFS (not writable), -EINVAL (a
 * '/' in @prefix), -ENAMETOOLONG, -ENOTSUP (no liburing).
 */
int cs_ps_spill_create(struct cs_ps_uring_spill **out, const char *dir,
		       const char *prefix, unsigned qdepth,
		       struct cs_ps_spill *spill, char *path, size_t plen);
/* Close the file's ring and descriptor; a file made by cs_ps_spill_create
 * is removed. */
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
/**
 * cs_ps_ckpt_set_shard - which part of a sharded checkpoint this file is
 * @c: the writer (before the snapshot ends)
 * @shard: this store's server id in the map, 0 .. @nshards - 1
 * @nshards: servers of the map (its server ids are 0 .. @nshards - 1)
 * @vnodes: the map's virtual nodes per server
 * @tag: names the table (cs_ps_ckpt_name_tag of its name)
 *
 * Recorded in the header, so that a restore onto another set of shards
 * (cs_ps_restore_start) finds every file of one checkpoint and checks
 * it. Without it a file is shard 0 of 1, no map, tag 0.
 */
void cs_ps_ckpt_set_shard(struct cs_ps_ckpt *c, uint32_t shard,
			  uint32_t nshards, uint32_t vnodes, uint64_t tag);
/* FNV-1a 64 of a table's name: the tag of its checkpoint files. */
uint64_t cs_ps_ckpt_name_tag(const char *name);
/**
 * cs_ps_ckpt_shard_path - "<dir>/<name>.shard<shard>.ckpt"
 * Returns 0, -EINVAL (a '/' in @name would name another folder) or
 * -ENAMETOOLONG.
 */
static inline int cs_ps_ckpt_shard_path(char *out, size_t len, const char *dir,
					const char *name, uint32_t shard)
{
	int n;

	if (strchr(name, '/'))
		return -EINVAL;
	n = snprintf(out, len, "%s/%s.shard%u.ckpt", dir, name, shard);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
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

/* ---- restore onto another set of shards (resharding) ------------------- */

/*
 * Why a sharded restore refused the checkpoint (cs_ps_restore_info.why),
 * with the file (@bad_shard) that made it refuse.
 */
enum cs_ps_restore_why {
	CS_PS_RS_OK = 0,
	CS_PS_RS_IO, /* a file could not be read: -errno */
	CS_PS_RS_MISSING, /* a shard's file is missing: -ENOENT */
	CS_PS_RS_DAMAGED, /* header, size or checksum wrong: -EBADMSG */
	CS_PS_RS_OTHER_TABLE, /* the file of a table of another name: -EINVAL */
	CS_PS_RS_SPEC, /* dim, dtype, row size, key range, optimizer: -EINVAL */
	CS_PS_RS_CLOCK, /* another clock than shard 0's file: -EBADMSG */
	CS_PS_RS_SET, /* another shard count, shard number, or rows of
		       * another shard in it: -EBADMSG */
	CS_PS_RS_NOT_EMPTY, /* the table has rows already: -EEXIST */
};

/**
 * struct cs_ps_restore_src - where a sharded checkpoint is and who loads
 * @dir, @name: files "<dir>/<name>.shard<S>.ckpt", S = 0 .. N - 1 (N is
 *	read from shard 0's file)
 * @tag: cs_ps_ckpt_name_tag(name): every file must carry it
 * @map: the NEW shard map (server ids 0 .. M - 1); NULL: this store owns
 *	every key
 * @self: this store's server id in @map
 */
struct cs_ps_restore_src {
	const char *dir;
	const char *name;
	uint64_t tag;
	const struct cs_ps_shardmap *map;
	uint32_t self;
};

struct cs_ps_restore_info {
	int rc;
	enum cs_ps_restore_why why;
	uint32_t bad_shard; /* the file that made it refuse */
	uint32_t nshards; /* N: shards of the checkpoint */
	uint64_t clock; /* the checkpoint's */
	uint32_t files_read; /* 1 when N == M (its own file only), else N */
	uint64_t recs_read, rows_loaded;
};

struct cs_ps_restore;

/**
 * cs_ps_restore_start - load a checkpoint written by N shards into this
 * shard of M, each row into the shard that owns it under the new map
 * @out: the job
 * @st, @table: an empty table of the checkpoint's spec (dim, dtype, row
 *	frame, key range, optimizer kind; the worker count may differ)
 * @src: where the files are, the new map and this shard
 *
 * A thread with its own io_uring reads the files one at a time, checks
 * each whole (magic, version, checksums, tag, spec, shard count and
 * number, clock equal to shard 0's, every record's key owned by that
 * file's shard under the old map) and keeps the records this shard owns
 * under the new one. When N == M the maps are the same and only this
 * shard's own file is read. Nothing is loaded before every file passed:
 * the caller polls cs_ps_restore_ready(), then loads in bounded steps
 * (cs_ps_restore_step) on the thread that owns the store, and ends with
 * cs_ps_restore_finish. @src's strings and map must live until
 * cs_ps_restore_finish. Returns 0, -EEXIST (rows already), -ENOENT (no
 * such table), -ENOMEM, -errno.
 */
int cs_ps_restore_start(struct cs_ps_restore **out, struct cs_ps_store *st,
			uint32_t table, const struct cs_ps_restore_src *src);
/* Non-blocking: the files are read and checked (or refused). */
bool cs_ps_restore_ready(struct cs_ps_restore *r);
/* Load up to @max_rows of the kept records (after ready): 1 while more
 * remain, 0 once all are loaded and the table's clock set, or -errno
 * (the files were refused: nothing was loaded). */
int cs_ps_restore_step(struct cs_ps_restore *r, uint32_t max_rows);
/* Wait for the thread, free the job; the outcome in @info (may be NULL).
 * Returns info->rc: 0 only if every row was loaded. */
int cs_ps_restore_finish(struct cs_ps_restore *r,
			 struct cs_ps_restore_info *info);
/* The whole of it in one call (start, wait, every step, finish). */
int cs_ps_restore_sharded(struct cs_ps_store *st, uint32_t table,
			  const struct cs_ps_restore_src *src,
			  struct cs_ps_restore_info *info);

#endif
