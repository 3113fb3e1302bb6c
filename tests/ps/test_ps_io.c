/* SPDX-License-Identifier: MIT */
/* PS persistence over io_uring: checkpoint round trip while pushes go on,
 * restore refusing damaged or foreign files, the SSD spill file. The
 * binary exits 77, saying why, where liburing is missing or the kernel
 * refuses io_uring (main() at the end). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_io.h"
#include "collectives/ps/ps_wire.h"

static char dir[256];

static int drop(void *ctx, uint32_t w, const void *m, size_t n)
{
	(void)ctx, (void)w, (void)m, (void)n;
	return 0;
}

static void setup(void)
{
	const char *t = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/cs-ps-io.XXXXXX", t ? t : "/tmp");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

/* Skip unless a spill file can be opened (liburing, io_uring allowed). */
static void need_uring(void)
{
	struct cs_ps_uring_spill *u;
	struct cs_ps_spill sp;
	char path[300];
	int rc;

	snprintf(path, sizeof(path), "%s/probe", dir);
	rc = cs_ps_spill_open(&u, path, 4, &sp);
	if (rc == -ENOTSUP)
		cr_skip_test("built without liburing");
	if (rc)
		cr_skip_test("io_uring unavailable here: %s", strerror(-rc));
	cs_ps_spill_close(u);
}

static struct cs_ps_table_spec mkspec(uint32_t dim)
{
	struct cs_ps_table_spec s;

	memset(&s, 0, sizeof(s));
	s.id = 6;
	s.dim = dim;
	s.dtype = CS_F32;
	s.key_max = 1 << 20;
	s.mode = CS_PS_ASYNC;
	s.workers = 1;
	cs_ps_opt_defaults(&s.opt, CS_PS_OPT_ADAM);
	s.init.kind = CS_PS_INIT_UNIFORM;
	s.init.seed = 5;
	s.init.scale = 0.1f;
	return s;
}

static struct cs_ps_store *mkstore(const struct cs_ps_table_spec *s,
				   size_t budget, const struct cs_ps_spill *sp)
{
	struct cs_ps_store_cfg cfg = { .server = 0,
				       .msg_max = 1 << 16,
				       .parked_max = 4 };
	struct cs_ps_store_io io = { .send = drop };
	struct cs_ps_store *st;

	cr_assert_eq(cs_ps_store_create(&st, &cfg, &io), 0);
	cr_assert_eq(cs_ps_store_add_table(st, s, budget, sp), 0);
	return st;
}

static uint8_t msg[1 << 16];
static uint64_t next_id;

/* Push 500 keys from @base (step 7) with gradient @g. */
static void push_to(struct cs_ps_store **sts, int n,
		    const struct cs_ps_table_spec *s, uint64_t base, float g)
{
	struct cs_ps_msg m = { .type = CS_PS_MSG_PUSH,
			       .table = s->id,
			       .id = next_id++,
			       .nparts = 1,
			       .nkeys = 500,
			       .dim = s->dim,
			       .dtype = s->dtype };
	size_t len = cs_ps_wire_len(m.type, 500, s->dim, s->dtype, 0);
	float row[8];

	cs_ps_wire_put_hdr(msg, &m);
	for (uint32_t i = 0; i < 500; i++) {
		for (uint32_t j = 0; j < s->dim; j++)
			row[j] = g * (float)(j + 1);
		cs_ps_wire_put_key(msg, i, (base + 7ull * i) % 20000);
		cs_ps_wire_put_row(msg, &m, i, row);
	}
	for (int k = 0; k < n; k++) {
		cr_assert_eq(cs_ps_store_rx(sts[k], msg, len), 0);
		cr_assert_eq(cs_ps_store_flush(sts[k]), 0);
	}
}

static void same_rows(struct cs_ps_store *a, struct cs_ps_store *b,
		      uint32_t dim)
{
	for (uint64_t k = 0; k < 20000; k++) {
		float ra[8], rb[8];

		cr_assert_eq(cs_ps_store_peek(a, 6, k, ra), 0);
		cr_assert_eq(cs_ps_store_peek(b, 6, k, rb), 0);
		cr_assert_eq(memcmp(ra, rb, sizeof(float) * dim), 0,
			     "key %llu differs", (unsigned long long)k);
	}
}

/*
 * Checkpoint a table (Adam, @dim) whose rows are mostly on the SSD tier
 * (@mem_rows in memory) while pushes keep changing it, in chunks of
 * @chunk bytes, @step_rows rows a step; restore into a fresh store; it
 * must equal a twin that stopped at the checkpoint, values and optimizer
 * state alike (one more identical push to both keeps them equal), and the
 * file must hold the records and nothing more (no O_DIRECT padding).
 * @unaligned: the sink's alignment is taken away (whole records a chunk),
 * so the writer must leave O_DIRECT mid-file.
 */
static void ckpt_round_trip(uint32_t dim, uint32_t mem_rows, size_t chunk,
			    uint32_t step_rows, bool unaligned)
{
	struct cs_ps_table_spec s = mkspec(dim);
	struct cs_ps_uring_spill *u;
	struct cs_ps_spill sp;
	struct cs_ps_store *live, *twin, *back, *both[2];
	struct cs_ps_snap_sink sink;
	struct cs_ps_ckpt *c;
	char path[300], sp_path[300];
	struct stat sb;
	uint64_t total, res;
	size_t frame;
	int rc, steps = 0;

	need_uring();
	snprintf(path, sizeof(path), "%s/table6.ckpt", dir);
	snprintf(sp_path, sizeof(sp_path), "%s/spill", dir);
	cr_assert_eq(cs_ps_spill_open(&u, sp_path, 32, &sp), 0);
	twin = mkstore(&s, 0, NULL);
	frame = cs_ps_store_frame_bytes(twin, 6);
	live = mkstore(&s, mem_rows * frame, &sp);
	both[0] = live;
	both[1] = twin;
	for (int i = 0; i < 20; i++)
		push_to(both, 2, &s, (uint64_t)i * 977, 0.01f * (float)(i + 1));
	cs_ps_store_nrows(live, 6, &total, &res);
	cr_assert_gt(total, 5000);
	cr_assert_leq(res, mem_rows);

	cr_assert_eq(cs_ps_ckpt_start(&c, path, live, 6, 8, &sink), 0);
	cr_assert_eq(sink.align, CS_PS_CKPT_ALIGN);
	if (unaligned)
		sink.align = 0;
	cr_assert_eq(cs_ps_store_snap_begin(live, 6, &sink, chunk), 0);
	cs_ps_ckpt_set_clock(c, cs_ps_store_snap_clock(live));
	do {
		push_to(&live, 1, &s, (uint64_t)steps * 31, -0.5f);
		rc = cs_ps_store_snap_step(live, step_rows);
		steps++;
	} while (rc == 1);
	cr_assert_eq(rc, 0);
	cr_assert_gt(steps, 5, "the snapshot ran between pushes");
	/* its rows on disk read while the store served on (in batches the
	 * ring of 32 takes) */
	cr_assert_gt(
		cs_ps_store_stats(live)->snap_reads_async, 1000, "%llu",
		(unsigned long long)cs_ps_store_stats(live)->snap_reads_async);
	cr_assert_eq(cs_ps_ckpt_wait(c), 0);
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(sb.st_size,
		     CS_PS_CKPT_HDR +
			     total * (sizeof(struct cs_ps_rec_head) + frame),
		     "%lld bytes for %llu records", (long long)sb.st_size,
		     (unsigned long long)total);
	snprintf(sp_path, sizeof(sp_path), "%s/table6.ckpt.tmp", dir);
	cr_assert_neq(stat(sp_path, &sb), 0, "the temporary file remains");

	back = mkstore(&s, 0, NULL);
	cr_assert_eq(cs_ps_ckpt_restore(back, 6, path), 0);
	same_rows(back, twin, dim);
	both[0] = back;
	push_to(both, 2, &s, 3, 0.25f);
	same_rows(back, twin, dim);
	/* a table that already holds rows is not restored over */
	cr_assert_eq(cs_ps_ckpt_restore(back, 6, path), -EEXIST);
	cs_ps_store_destroy(live);
	cs_ps_store_destroy(twin);
	cs_ps_store_destroy(back);
	cs_ps_spill_close(u);
}

/* dim 4: 64-byte records, whole blocks of them */
Test(ps_io, checkpoint_round_trip_while_pushing, .init = setup,
     .fini = teardown)
{
	ckpt_round_trip(4, 1000, 64 * 1024, 500, false);
}

/* dim 3: 56-byte records split over chunks of 3 blocks (12,288 bytes,
 * asked for 100 bytes less), spilled rows among the split ones */
Test(ps_io, checkpoint_records_split_over_blocks, .init = setup,
     .fini = teardown)
{
	ckpt_round_trip(3, 700, 3 * 4096 - 100, 333, false);
}

Test(ps_io, checkpoint_of_unaligned_chunks, .init = setup, .fini = teardown)
{
	ckpt_round_trip(3, 700, 3 * 4096 - 100, 333, true);
}

static void write_ckpt(const char *path, const struct cs_ps_table_spec *s)
{
	struct cs_ps_store *st = mkstore(s, 0, NULL);
	struct cs_ps_snap_sink sink;
	struct cs_ps_ckpt *c;

	push_to(&st, 1, s, 0, 1.0f);
	cr_assert_eq(cs_ps_ckpt_start(&c, path, st, 6, 4, &sink), 0);
	cr_assert_eq(cs_ps_store_snap_begin(st, 6, &sink, 4096), 0);
	while (cs_ps_store_snap_step(st, 100) == 1)
		;
	cr_assert_eq(cs_ps_ckpt_wait(c), 0);
	cs_ps_store_destroy(st);
}

static void poke(const char *path, off_t off, int delta_len)
{
	int fd = open(path, O_RDWR);
	struct stat sb;
	uint8_t b;

	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &sb), 0);
	if (delta_len) {
		cr_assert_eq(ftruncate(fd, sb.st_size + delta_len), 0);
	} else {
		cr_assert_eq(pread(fd, &b, 1, off), 1);
		b ^= 0x10;
		cr_assert_eq(pwrite(fd, &b, 1, off), 1);
	}
	close(fd);
}

static int restore_into_fresh(const char *path,
			      const struct cs_ps_table_spec *s)
{
	struct cs_ps_store *st = mkstore(s, 0, NULL);
	uint64_t total, res;
	int rc = cs_ps_ckpt_restore(st, 6, path);

	cs_ps_store_nrows(st, 6, &total, &res);
	if (rc)
		cr_assert_eq(total, 0, "rows loaded from a refused file");
	cs_ps_store_destroy(st);
	return rc;
}

Test(ps_io, restore_refuses_damaged_and_foreign_files, .init = setup,
     .fini = teardown)
{
	struct cs_ps_table_spec s = mkspec(4), other;
	char path[300];

	need_uring();
	snprintf(path, sizeof(path), "%s/c", dir);
	cr_assert_eq(restore_into_fresh(path, &s), -ENOENT);
	write_ckpt(path, &s);
	cr_assert_eq(restore_into_fresh(path, &s), 0);
	poke(path, CS_PS_CKPT_HDR + 100, 0); /* a record bit */
	cr_assert_eq(restore_into_fresh(path, &s), -EBADMSG);
	write_ckpt(path, &s);
	poke(path, 20, 0); /* a header bit */
	cr_assert_eq(restore_into_fresh(path, &s), -EBADMSG);
	write_ckpt(path, &s);
	poke(path, 0, -10); /* truncated */
	cr_assert_eq(restore_into_fresh(path, &s), -EBADMSG);
	write_ckpt(path, &s);
	poke(path, 0, 48); /* grown */
	cr_assert_eq(restore_into_fresh(path, &s), -EBADMSG);
	write_ckpt(path, &s);
	poke(path, 0, -(CS_PS_CKPT_HDR + 500 * 64)); /* empty */
	cr_assert_eq(restore_into_fresh(path, &s), -EBADMSG);
	write_ckpt(path, &s);
	other = mkspec(2); /* another table's layout */
	cr_assert_eq(restore_into_fresh(path, &other), -EINVAL);
	other = mkspec(4);
	other.opt.kind = CS_PS_OPT_SGD;
	cr_assert_eq(restore_into_fresh(path, &other), -EINVAL);
}

/* A second checkpoint replaces the first only once complete: a writer
 * whose snapshot failed leaves the old file as it was. */
Test(ps_io, failed_checkpoint_keeps_the_previous_one, .init = setup,
     .fini = teardown)
{
	struct cs_ps_table_spec s = mkspec(4);
	struct cs_ps_snap_sink sink;
	struct cs_ps_ckpt *c;
	char path[300], bad[300];
	struct stat a, b;

	need_uring();
	snprintf(path, sizeof(path), "%s/c", dir);
	write_ckpt(path, &s);
	cr_assert_eq(stat(path, &a), 0);
	/* the snapshot ends with an error: nothing renamed */
	{
		struct cs_ps_store *st = mkstore(&s, 0, NULL);

		cr_assert_eq(cs_ps_ckpt_start(&c, path, st, 6, 4, &sink), 0);
		sink.end(sink.ctx, 0, -EIO);
		cr_assert_eq(cs_ps_ckpt_wait(c), -EIO);
		cs_ps_store_destroy(st);
	}
	cr_assert_eq(stat(path, &b), 0);
	cr_assert_eq(a.st_ino, b.st_ino);
	cr_assert_eq(restore_into_fresh(path, &s), 0);
	/* an unwritable place: an error from the writer, no crash */
	snprintf(bad, sizeof(bad), "%s/no/such/dir/c", dir);
	{
		struct cs_ps_store *st = mkstore(&s, 0, NULL);

		cr_assert_eq(cs_ps_ckpt_start(&c, bad, st, 6, 4, &sink), 0);
		cr_assert_eq(cs_ps_store_snap_begin(st, 6, &sink, 4096), 0);
		while (cs_ps_store_snap_step(st, 100) == 1)
			;
		cr_assert_eq(cs_ps_ckpt_wait(c), -ENOENT);
		cs_ps_store_destroy(st);
	}
}

/* The io_uring spill file against a store without a budget. */
Test(ps_io, spill_file_round_trip, .init = setup, .fini = teardown)
{
	struct cs_ps_table_spec s = mkspec(8);
	struct cs_ps_uring_spill *u;
	struct cs_ps_spill sp;
	struct cs_ps_store *a, *b, *both[2];
	char path[300];

	need_uring();
	snprintf(path, sizeof(path), "%s/spill", dir);
	cr_assert_eq(cs_ps_spill_open(&u, path, 16, &sp), 0);
	a = mkstore(&s, 0, NULL);
	b = mkstore(&s, 128 * 96, &sp); /* 128 rows of 32 + 64 bytes */
	both[0] = a;
	both[1] = b;
	for (int i = 0; i < 30; i++)
		push_to(both, 2, &s, (uint64_t)i * 101, 0.1f);
	same_rows(a, b, 8);
	cr_assert_gt(cs_ps_store_stats(b)->spill_reads, 1000);
	cr_assert_gt(cs_ps_store_stats(b)->spill_writes, 1000);
	cs_ps_store_destroy(a);
	cs_ps_store_destroy(b);
	cs_ps_spill_close(u);
	cr_assert_eq(cs_ps_spill_open(&u, path, 0, &sp), -EINVAL);
}

/* ---- restore onto another set of shards (resharding) ------------------- */

#define RS_KEYS 20000u
#define RS_VNODES 64u
#define RS_CLOCK 9u

/* mkshard's memory budget: 0, or so many bytes with the rest of the rows
 * in a spill file (rs_spill, closed by rs_spill_close) */
static size_t rs_budget;
static struct cs_ps_uring_spill *rs_spill[64];
static unsigned rs_nspill;

/* A shard store of map @m (NULL: owns every key) and its push ids. */
struct rs_shard {
	struct cs_ps_store *st;
	uint64_t id;
};

static struct cs_ps_store *mkshard(const struct cs_ps_table_spec *s,
				   const struct cs_ps_shardmap *m,
				   uint32_t server)
{
	struct cs_ps_store_cfg cfg = {
		.server = server, .map = m, .msg_max = 1 << 16, .parked_max = 4
	};
	struct cs_ps_store_io io = { .send = drop };
	struct cs_ps_store *st;

	struct cs_ps_spill sp;

	cr_assert_eq(cs_ps_store_create(&st, &cfg, &io), 0);
	if (!rs_budget) {
		cr_assert_eq(cs_ps_store_add_table(st, s, 0, NULL), 0);
		return st;
	}
	/* the SSD tier: a file of its own in the test's folder */
	cr_assert_lt(rs_nspill, CS_ARRAY_SIZE(rs_spill));
	cr_assert_eq(cs_ps_spill_create(&rs_spill[rs_nspill], dir, "rs", 16,
					&sp, NULL, 0),
		     0);
	rs_nspill++;
	cr_assert_eq(cs_ps_store_add_table(st, s, rs_budget, &sp), 0);
	return st;
}

/* Close (and remove) the spill files of the shards destroyed. */
static void rs_spill_close(void)
{
	for (unsigned i = 0; i < rs_nspill; i++)
		cs_ps_spill_close(rs_spill[i]);
	rs_nspill = 0;
}

static void mkmap(struct cs_ps_shardmap *m, uint32_t n)
{
	uint32_t ids[16];

	for (uint32_t i = 0; i < n; i++)
		ids[i] = i;
	cr_assert_eq(cs_ps_shardmap_init(m, ids, n, RS_VNODES), 0);
}

/* Push the keys of @keys (@n) that @m gives to @server (every key when
 * @m is NULL) to @sh, gradient @g * (j + 1 + key % 3). */
static void push_keys(struct rs_shard *sh, const struct cs_ps_table_spec *s,
		      const struct cs_ps_shardmap *m, uint32_t server,
		      const uint64_t *keys, uint32_t n, float g)
{
	struct cs_ps_msg h = { .type = CS_PS_MSG_PUSH,
			       .table = s->id,
			       .id = sh->id++,
			       .nparts = 1,
			       .dim = s->dim,
			       .dtype = s->dtype };
	uint32_t k = 0;
	float row[8];

	for (uint32_t i = 0; i < n; i++)
		if (!m || cs_ps_shard_of(m, s->id, keys[i]) == server)
			k++;
	h.nkeys = k;
	cs_ps_wire_put_hdr(msg, &h);
	k = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (m && cs_ps_shard_of(m, s->id, keys[i]) != server)
			continue;
		for (uint32_t j = 0; j < s->dim; j++)
			row[j] = g * (float)(j + 1 + keys[i] % 3);
		cs_ps_wire_put_key(msg, k, keys[i]);
		cs_ps_wire_put_row(msg, &h, k, row);
		k++;
	}
	cr_assert_eq(
		cs_ps_store_rx(sh->st, msg,
			       cs_ps_wire_len(h.type, k, s->dim, s->dtype, 0)),
		0);
	cr_assert_eq(cs_ps_store_flush(sh->st), 0);
}

/* Push @round's 500 keys to the reference @ref and to shards @sh of map
 * @m (@n of them), each shard its own keys. */
static void push_round(struct rs_shard *ref, struct rs_shard *sh, uint32_t n,
		       const struct cs_ps_shardmap *m,
		       const struct cs_ps_table_spec *s, int round)
{
	uint64_t keys[500];
	float g = 0.01f * (float)(round % 7 + 1);

	for (uint32_t i = 0; i < 500; i++)
		keys[i] = ((uint64_t)round * 977 + 7ull * i) % RS_KEYS;
	push_keys(ref, s, NULL, 0, keys, 500, g);
	for (uint32_t i = 0; i < n; i++)
		push_keys(&sh[i], s, n > 1 ? m : NULL, i, keys, 500, g);
}

/* Checkpoint shard @i of @n (map of RS_VNODES) of table @name to @d at
 * @clock. */
static void ckpt_shard(struct cs_ps_store *st, const char *d, const char *name,
		       uint32_t i, uint32_t n, uint64_t clock)
{
	struct cs_ps_snap_sink sink;
	struct cs_ps_ckpt *c;
	char path[400];

	cr_assert_eq(cs_ps_ckpt_shard_path(path, sizeof(path), d, name, i), 0);
	cr_assert_eq(cs_ps_ckpt_start(&c, path, st, 6, 4, &sink), 0);
	cr_assert_eq(cs_ps_store_snap_begin(st, 6, &sink, 4096), 0);
	cs_ps_ckpt_set_clock(c, clock);
	cs_ps_ckpt_set_shard(c, i, n, RS_VNODES, cs_ps_ckpt_name_tag(name));
	while (cs_ps_store_snap_step(st, 1000) == 1)
		;
	cr_assert_eq(cs_ps_ckpt_wait(c), 0);
}

/* A table trained on @n shards (and on a reference store alone), each
 * shard checkpointed to @d as table @name; the reference is returned. */
static struct rs_shard train_on(uint32_t n, const struct cs_ps_table_spec *s,
				const char *d, const char *name)
{
	size_t budget = rs_budget;
	struct rs_shard ref, sh[16];
	struct cs_ps_shardmap m;

	rs_budget = 0; /* the reference: every row in memory */
	ref = (struct rs_shard){ mkshard(s, NULL, 0), 0 };
	rs_budget = budget;

	mkmap(&m, n);
	for (uint32_t i = 0; i < n; i++)
		sh[i] = (struct rs_shard){ mkshard(s, &m, i), 0 };
	for (int r = 0; r < 12; r++)
		push_round(&ref, sh, n, &m, s, r);
	for (uint32_t i = 0; i < n; i++) {
		ckpt_shard(sh[i].st, d, name, i, n, RS_CLOCK);
		cs_ps_store_destroy(sh[i].st);
	}
	cs_ps_shardmap_fini(&m);
	return ref;
}

static uint64_t rows_of(struct cs_ps_store *st)
{
	uint64_t total, res;

	cs_ps_store_nrows(st, 6, &total, &res);
	return total;
}

/* Every key's row on its owner under @m equals the reference's, and each
 * shard holds exactly the reference's rows it owns. */
static void same_as_ref(struct rs_shard *ref, struct rs_shard *sh, uint32_t m,
			const struct cs_ps_shardmap *map, uint32_t dim)
{
	uint64_t own[16] = { 0 }, ref_rows = 0;

	for (uint64_t k = 0; k < RS_KEYS; k++) {
		uint32_t o = cs_ps_shard_of(map, 6, k);
		float a[8], b[8];

		cr_assert_eq(cs_ps_store_peek(ref->st, 6, k, a), 0);
		cr_assert_eq(cs_ps_store_peek(sh[o].st, 6, k, b), 0);
		cr_assert_eq(memcmp(a, b, sizeof(float) * dim), 0,
			     "key %llu differs on shard %u",
			     (unsigned long long)k, o);
	}
	/* which keys the reference holds: those some round pushed */
	for (uint64_t k = 0; k < RS_KEYS; k++) {
		bool held = false;

		for (int r = 0; r < 12 && !held; r++)
			for (uint32_t i = 0; i < 500 && !held; i++)
				held = ((uint64_t)r * 977 + 7ull * i) %
					       RS_KEYS ==
				       k;
		if (held) {
			own[cs_ps_shard_of(map, 6, k)]++;
			ref_rows++;
		}
	}
	cr_assert_eq(rows_of(ref->st), ref_rows);
	for (uint32_t j = 0; j < m; j++)
		cr_assert_eq(rows_of(sh[j].st), own[j],
			     "shard %u of %u holds %llu rows, owns %llu", j, m,
			     (unsigned long long)rows_of(sh[j].st),
			     (unsigned long long)own[j]);
}

/* N shards' files into M owners: every row lands on its new owner with
 * its optimizer state (Adam: moments and step count), the clock is the
 * checkpoint's; pushed again alike, the new shards still equal the
 * reference. */
static void reshard_cases(void)
{
	static const uint32_t nm[][2] = { { 4, 3 }, { 2, 4 }, { 3, 3 },
					  { 1, 2 }, { 4, 1 }, { 3, 5 } };
	struct cs_ps_table_spec s = mkspec(4);

	need_uring();
	for (size_t c = 0; c < CS_ARRAY_SIZE(nm); c++) {
		uint32_t n = nm[c][0], m = nm[c][1];
		struct rs_shard ref, sh[16];
		struct cs_ps_restore_info in;
		struct cs_ps_shardmap map;
		char d[300];

		snprintf(d, sizeof(d), "%s/c%zu", dir, c);
		cr_assert_eq(mkdir(d, 0700), 0);
		ref = train_on(n, &s, d, "emb");
		mkmap(&map, m);
		for (uint32_t j = 0; j < m; j++) {
			struct cs_ps_restore_src src = {
				.dir = d,
				.name = "emb",
				.tag = cs_ps_ckpt_name_tag("emb"),
				.map = &map,
				.self = j
			};

			sh[j] = (struct rs_shard){ mkshard(&s, &map, j), 0 };
			cr_assert_eq(
				cs_ps_restore_sharded(sh[j].st, 6, &src, &in),
				0, "%u -> %u: shard %u: %d why %d", n, m, j,
				in.rc, in.why);
			cr_assert_eq(in.nshards, n);
			cr_assert_eq(in.clock, RS_CLOCK);
			cr_assert_eq(cs_ps_store_clock(sh[j].st, 6), RS_CLOCK);
			cr_assert_eq(in.files_read, n == m ? 1 : n);
			cr_assert_eq(in.rows_loaded, rows_of(sh[j].st));
		}
		same_as_ref(&ref, sh, m, &map, 4);
		/* the state came along: the same pushes keep them equal */
		for (int r = 3; r < 6; r++)
			push_round(&ref, sh, m, &map, &s, r);
		for (uint64_t k = 0; k < RS_KEYS; k++) {
			float a[4], b[4];

			cs_ps_store_peek(ref.st, 6, k, a);
			cs_ps_store_peek(sh[cs_ps_shard_of(&map, 6, k)].st, 6,
					 k, b);
			cr_assert_eq(memcmp(a, b, sizeof(a)), 0,
				     "%u -> %u: key %llu after more pushes", n,
				     m, (unsigned long long)k);
		}
		if (rs_budget) /* most rows were on the SSD tier */
			for (uint32_t j = 0; j < m; j++) {
				uint64_t total, res;

				cs_ps_store_nrows(sh[j].st, 6, &total, &res);
				cr_assert_leq(res * 48, rs_budget);
				cr_assert_gt(total, 2 * res,
					     "%u -> %u: shard %u: %llu rows, "
					     "%llu in memory",
					     n, m, j, (unsigned long long)total,
					     (unsigned long long)res);
				cr_assert_gt(cs_ps_store_stats(sh[j].st)
						     ->spill_reads,
					     0);
			}
		for (uint32_t j = 0; j < m; j++)
			cs_ps_store_destroy(sh[j].st);
		cs_ps_store_destroy(ref.st);
		cs_ps_shardmap_fini(&map);
		rs_spill_close();
	}
}

Test(ps_io, reshard_files_of_n_shards_into_m_owners, .init = setup,
     .fini = teardown)
{
	rs_budget = 0;
	reshard_cases();
}

/* The same with every shard (not the reference) keeping 200 rows of
 * 48 bytes in memory and the rest on its own io_uring spill file: the
 * snapshot reads spilled rows back for the files, the restore spills
 * while it loads, and every row still equals the reference. */
Test(ps_io, reshard_with_rows_on_the_ssd_tier, .init = setup, .fini = teardown)
{
	rs_budget = 200 * 48;
	reshard_cases();
	rs_budget = 0;
}

/* The io_uring file's reads left in flight (read_start, read_poll): the
 * bytes land, one batch at a time, more than the ring's depth refused,
 * and blocking reads and writes meanwhile keep their completions apart
 * from the batch's. */
Test(ps_io, spill_reads_in_flight_while_the_ring_serves_on, .init = setup,
     .fini = teardown)
{
	static uint8_t w[64][128], r[64][128], x[128];
	struct cs_ps_io_req q[64], one;
	struct cs_ps_uring_spill *u;
	struct cs_ps_spill sp;
	int rc, polls = 0;

	need_uring();
	cr_assert_eq(cs_ps_spill_create(&u, dir, "rd", 16, &sp, NULL, 0), 0);
	cr_assert_not_null(sp.ops->read_start);
	cr_assert_not_null(sp.ops->read_poll);
	for (int i = 0; i < 64; i++) {
		memset(w[i], i + 1, sizeof(w[i]));
		q[i] = (struct cs_ps_io_req){ .off = (uint64_t)i * 128,
					      .buf = w[i],
					      .len = 128 };
	}
	cr_assert_eq(sp.ops->write(sp.ctx, q, 64), 0);
	for (int i = 0; i < 64; i++)
		q[i].buf = r[i];
	cr_assert_eq(sp.ops->read_start(sp.ctx, q, 17), -E2BIG);
	cr_assert_eq(sp.ops->read_start(sp.ctx, q, 16), 0);
	cr_assert_eq(sp.ops->read_start(sp.ctx, q + 16, 4), -EBUSY);
	/* meanwhile: a blocking write and read of another slot */
	memset(x, 0xee, sizeof(x));
	one = (struct cs_ps_io_req){ .off = 100 * 128, .buf = x, .len = 128 };
	cr_assert_eq(sp.ops->write(sp.ctx, &one, 1), 0);
	memset(x, 0, sizeof(x));
	cr_assert_eq(sp.ops->read(sp.ctx, &one, 1), 0);
	cr_assert_eq(x[0], 0xee);
	cr_assert_eq(x[127], 0xee);
	while ((rc = sp.ops->read_poll(sp.ctx, false)) == 1)
		polls++;
	cr_assert_eq(rc, 0);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(memcmp(r[i], w[i], 128), 0, "read %d", i);
	cr_assert_eq(sp.ops->read_poll(sp.ctx, false), 0, "nothing flies");
	/* a second batch, waited for; then one past the file's end */
	cr_assert_eq(sp.ops->read_start(sp.ctx, q + 16, 16), 0);
	cr_assert_eq(sp.ops->read_poll(sp.ctx, true), 0);
	for (int i = 16; i < 32; i++)
		cr_assert_eq(memcmp(r[i], w[i], 128), 0, "read %d", i);
	one.off = 200 * 128;
	cr_assert_eq(sp.ops->read_start(sp.ctx, &one, 1), 0);
	cr_assert_eq(sp.ops->read_poll(sp.ctx, true), -EIO, "a short read");
	/* closed with a batch in flight: waited for, file removed */
	cr_assert_eq(sp.ops->read_start(sp.ctx, q, 16), 0);
	cs_ps_spill_close(u);
	(void)polls;
}

/* cs_ps_spill_create: a new file in the folder, rows through it, removed
 * at close; a missing folder, a file in the way and a '/' in the prefix
 * refused. */
Test(ps_io, spill_file_created_in_a_folder_and_removed, .init = setup,
     .fini = teardown)
{
	struct cs_ps_uring_spill *a, *b;
	struct cs_ps_spill sa, sb;
	char pa[400], pb[400], bad[400];
	uint8_t w[256], r[256];
	struct cs_ps_io_req q;
	struct stat st;
	int fd;

	need_uring();
	cr_assert_eq(cs_ps_spill_create(&a, dir, "cs-pst-1-t", 8, &sa, pa,
					sizeof(pa)),
		     0);
	cr_assert_eq(cs_ps_spill_create(&b, dir, "cs-pst-1-t", 8, &sb, pb,
					sizeof(pb)),
		     0);
	cr_assert_str_neq(pa, pb, "two tables, one file");
	cr_assert_eq(strncmp(pa, dir, strlen(dir)), 0);
	cr_assert_not_null(strstr(pa, "/cs-pst-1-t."));
	cr_assert_eq(strcmp(pa + strlen(pa) - 6, ".spill"), 0, "%s", pa);
	cr_assert_eq(stat(pa, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	for (unsigned i = 0; i < sizeof(w); i++)
		w[i] = (uint8_t)(i * 7 + 1);
	q = (struct cs_ps_io_req){ .off = 4096, .buf = w, .len = sizeof(w) };
	cr_assert_eq(sa.ops->write(sa.ctx, &q, 1), 0);
	q.buf = r;
	cr_assert_eq(sa.ops->read(sa.ctx, &q, 1), 0);
	cr_assert_eq(memcmp(w, r, sizeof(w)), 0);
	cs_ps_spill_close(a);
	cr_assert_neq(stat(pa, &st), 0, "%s left after close", pa);
	cr_assert_eq(stat(pb, &st), 0, "closing one removed the other");
	cs_ps_spill_close(b);
	cr_assert_neq(stat(pb, &st), 0);

	snprintf(bad, sizeof(bad), "%s/missing", dir);
	cr_assert_eq(cs_ps_spill_create(&a, bad, "x", 8, &sa, NULL, 0),
		     -ENOENT);
	snprintf(bad, sizeof(bad), "%s/file", dir);
	fd = open(bad, O_CREAT | O_WRONLY, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(cs_ps_spill_create(&a, bad, "x", 8, &sa, NULL, 0),
		     -ENOTDIR);
	cr_assert_eq(cs_ps_spill_create(&a, dir, "a/b", 8, &sa, NULL, 0),
		     -EINVAL);
	cr_assert_eq(cs_ps_spill_create(&a, dir, "x", 0, &sa, NULL, 0),
		     -EINVAL);
}

/* Restore shard @self of @m from @d (table @name); returns the error and
 * checks that a refusal loaded nothing. */
static int rs_try(const char *d, const char *name,
		  const struct cs_ps_table_spec *s, uint32_t self, uint32_t m,
		  struct cs_ps_restore_info *in)
{
	struct cs_ps_shardmap map;
	struct cs_ps_store *st;
	struct cs_ps_restore_src src = { .dir = d,
					 .name = name,
					 .tag = cs_ps_ckpt_name_tag(name),
					 .map = &map,
					 .self = self };
	int rc;

	mkmap(&map, m);
	st = mkshard(s, &map, self);
	rc = cs_ps_restore_sharded(st, 6, &src, in);
	if (rc)
		cr_assert_eq(rows_of(st), 0, "rows loaded from a refused set");
	cs_ps_store_destroy(st);
	cs_ps_shardmap_fini(&map);
	return rc;
}

static void copy_file(const char *from, const char *to)
{
	char cmd[1000];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	cr_assert_eq(system(cmd), 0);
}

/* Files that are not one checkpoint of the table are refused by name,
 * with the file that made it refuse, and nothing is loaded. */
Test(ps_io, reshard_refuses_sets_that_are_not_one_checkpoint, .init = setup,
     .fini = teardown)
{
	struct cs_ps_table_spec s = mkspec(4), s2 = mkspec(2);
	struct cs_ps_restore_info in;
	char d[300], o[300], a[400], b[400];
	struct rs_shard ref;
	struct cs_ps_store *st;

	need_uring();
	snprintf(d, sizeof(d), "%s/set", dir);
	snprintf(o, sizeof(o), "%s/other", dir);
	cr_assert_eq(mkdir(d, 0700), 0);
	cr_assert_eq(mkdir(o, 0700), 0);
	ref = train_on(3, &s, d, "emb");
	cs_ps_store_destroy(ref.st);
	for (uint32_t self = 0; self < 2; self++)
		cr_assert_eq(rs_try(d, "emb", &s, self, 2, &in), 0);

	/* a shard's file missing */
	cs_ps_ckpt_shard_path(a, sizeof(a), d, "emb", 1);
	cs_ps_ckpt_shard_path(b, sizeof(b), o, "keep", 1);
	copy_file(a, b);
	cr_assert_eq(unlink(a), 0);
	cr_assert_eq(rs_try(d, "emb", &s, 0, 2, &in), -ENOENT);
	cr_assert_eq(in.why, CS_PS_RS_MISSING);
	cr_assert_eq(in.bad_shard, 1);
	/* shard 0's missing: nothing says how many there were */
	cr_assert_eq(rs_try(d, "nothing", &s, 0, 2, &in), -ENOENT);
	cr_assert_eq(in.why, CS_PS_RS_MISSING);
	cr_assert_eq(in.bad_shard, 0);

	/* in its place, shard 1 of another table of the same spec */
	ref = train_on(3, &s, o, "other");
	cs_ps_store_destroy(ref.st);
	cs_ps_ckpt_shard_path(b, sizeof(b), o, "other", 1);
	copy_file(b, a);
	cr_assert_eq(rs_try(d, "emb", &s, 1, 2, &in), -EINVAL);
	cr_assert_eq(in.why, CS_PS_RS_OTHER_TABLE);
	cr_assert_eq(in.bad_shard, 1);

	/* shard 1 of this table, but of another clock */
	{
		struct cs_ps_shardmap m3;

		mkmap(&m3, 3);
		st = mkshard(&s, &m3, 1);
		ckpt_shard(st, d, "emb", 1, 3, RS_CLOCK + 1);
		cs_ps_store_destroy(st);
		cs_ps_shardmap_fini(&m3);
	}
	cr_assert_eq(rs_try(d, "emb", &s, 0, 2, &in), -EBADMSG);
	cr_assert_eq(in.why, CS_PS_RS_CLOCK);
	cr_assert_eq(in.bad_shard, 1);

	/* shard 1 of a checkpoint of 4 shards (a stale file) */
	{
		struct cs_ps_shardmap m4;

		mkmap(&m4, 4);
		st = mkshard(&s, &m4, 1);
		ckpt_shard(st, d, "emb", 1, 4, RS_CLOCK);
		cs_ps_store_destroy(st);
		cs_ps_shardmap_fini(&m4);
	}
	cr_assert_eq(rs_try(d, "emb", &s, 0, 2, &in), -EBADMSG);
	cr_assert_eq(in.why, CS_PS_RS_SET);
	cr_assert_eq(in.bad_shard, 1);

	/* shard 1 as it was: the set is whole again */
	cs_ps_ckpt_shard_path(b, sizeof(b), o, "keep", 1);
	copy_file(b, a);
	cr_assert_eq(rs_try(d, "emb", &s, 0, 2, &in), 0, "the set again");

	/* shard 2's file with a header byte changed, then a record byte */
	cs_ps_ckpt_shard_path(a, sizeof(a), d, "emb", 2);
	cs_ps_ckpt_shard_path(b, sizeof(b), o, "keep", 2);
	copy_file(a, b);
	poke(a, 136, 0); /* the shard count */
	cr_assert_eq(rs_try(d, "emb", &s, 0, 2, &in), -EBADMSG);
	cr_assert_eq(in.why, CS_PS_RS_DAMAGED, "the header checksum");
	cr_assert_eq(in.bad_shard, 2);
	copy_file(b, a);
	poke(a, CS_PS_CKPT_HDR + 40, 0);
	cr_assert_eq(rs_try(d, "emb", &s, 1, 2, &in), -EBADMSG);
	cr_assert_eq(in.why, CS_PS_RS_DAMAGED);
	cr_assert_eq(in.bad_shard, 2);

	/* a sound file named shard 2 that holds shard 1's rows */
	{
		struct rs_shard x;
		struct cs_ps_shardmap m3;
		uint64_t keys[500];

		mkmap(&m3, 3);
		x = (struct rs_shard){ mkshard(&s, &m3, 1), 0 };
		for (uint32_t i = 0; i < 500; i++)
			keys[i] = i;
		push_keys(&x, &s, &m3, 1, keys, 500, 0.5f);
		cr_assert_gt(rows_of(x.st), 0);
		ckpt_shard(x.st, d, "emb", 2, 3, RS_CLOCK);
		cs_ps_store_destroy(x.st);
		cs_ps_shardmap_fini(&m3);
	}
	cr_assert_eq(rs_try(d, "emb", &s, 1, 2, &in), -EBADMSG);
	cr_assert_eq(in.why, CS_PS_RS_SET, "why %d", in.why);
	cr_assert_eq(in.bad_shard, 2);
	copy_file(b, a);
	cr_assert_eq(rs_try(d, "emb", &s, 1, 2, &in), 0, "the set again");

	/* a table of another spec, and one that is not empty */
	cr_assert_eq(rs_try(d, "emb", &s2, 0, 2, &in), -EINVAL);
	cr_assert_eq(in.why, CS_PS_RS_SPEC);
	{
		struct rs_shard x = { mkshard(&s, NULL, 0), 0 };
		uint64_t k = 1;
		struct cs_ps_restore_src src = { .dir = d,
						 .name = "emb",
						 .tag = cs_ps_ckpt_name_tag(
							 "emb") };

		push_keys(&x, &s, NULL, 0, &k, 1, 1.0f);
		cr_assert_eq(cs_ps_restore_sharded(x.st, 6, &src, &in),
			     -EEXIST);
		cr_assert_eq(in.why, CS_PS_RS_NOT_EMPTY);
		cs_ps_store_destroy(x.st);
	}
}

/*
 * Without liburing, or where the kernel refuses io_uring (a seccomp
 * profile, io_uring_disabled), the whole test skips with the reason and
 * exit status 77, as the suites expect.
 */
int main(int argc, char *argv[])
{
	struct criterion_test_set *tests;
	struct cs_ps_uring_spill *u;
	struct cs_ps_spill sp;
	char path[] = "/tmp/cs-ps-probe.XXXXXX";
	int fd = mkstemp(path), rc;

	if (fd < 0) {
		perror("mkstemp");
		return 1;
	}
	close(fd);
	rc = cs_ps_spill_open(&u, path, 4, &sp);
	unlink(path);
	if (rc) {
		printf("SKIP: %s\n", rc == -ENOTSUP ? "built without liburing"
						    : strerror(-rc));
		return 77;
	}
	cs_ps_spill_close(u);
	tests = criterion_initialize();
	rc = 0;
	if (criterion_handle_args(argc, argv, true))
		rc = !criterion_run_all_tests(tests);
	criterion_finalize(tests);
	return rc;
}
