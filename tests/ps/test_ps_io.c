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

/* Checkpoint a table whose rows are partly on the SSD tier while pushes
 * keep changing it; restore into a fresh store; it must equal a twin that
 * stopped at the checkpoint, values and optimizer state alike (one more
 * identical push to both keeps them equal). */
Test(ps_io, checkpoint_round_trip_while_pushing, .init = setup,
     .fini = teardown)
{
	struct cs_ps_table_spec s = mkspec(4);
	struct cs_ps_uring_spill *u;
	struct cs_ps_spill sp;
	struct cs_ps_store *live, *twin, *back, *both[2];
	struct cs_ps_snap_sink sink;
	struct cs_ps_ckpt *c;
	char path[300], sp_path[300];
	struct stat sb;
	uint64_t total, res;
	int rc, steps = 0;

	need_uring();
	snprintf(path, sizeof(path), "%s/table6.ckpt", dir);
	snprintf(sp_path, sizeof(sp_path), "%s/spill", dir);
	cr_assert_eq(cs_ps_spill_open(&u, sp_path, 32, &sp), 0);
	/* Adam, dim 4: 16 + 32 bytes a frame; room for 1000 rows */
	live = mkstore(&s, 1000 * 48, &sp);
	twin = mkstore(&s, 0, NULL);
	both[0] = live;
	both[1] = twin;
	for (int i = 0; i < 20; i++)
		push_to(both, 2, &s, (uint64_t)i * 977, 0.01f * (float)(i + 1));
	cs_ps_store_nrows(live, 6, &total, &res);
	cr_assert_gt(total, 5000);
	cr_assert_leq(res, 1000);

	cr_assert_eq(cs_ps_ckpt_start(&c, path, live, 6, 8, &sink), 0);
	cr_assert_eq(cs_ps_store_snap_begin(live, 6, &sink, 64 * 1024), 0);
	cs_ps_ckpt_set_clock(c, cs_ps_store_snap_clock(live));
	do {
		push_to(&live, 1, &s, (uint64_t)steps * 31, -0.5f);
		rc = cs_ps_store_snap_step(live, 500);
		steps++;
	} while (rc == 1);
	cr_assert_eq(rc, 0);
	cr_assert_gt(steps, 5, "the snapshot ran between pushes");
	cr_assert_eq(cs_ps_ckpt_wait(c), 0);
	cr_assert_eq(stat(path, &sb), 0);
	snprintf(sp_path, sizeof(sp_path), "%s/table6.ckpt.tmp", dir);
	cr_assert_neq(stat(sp_path, &sb), 0, "the temporary file remains");

	back = mkstore(&s, 0, NULL);
	cr_assert_eq(cs_ps_ckpt_restore(back, 6, path), 0);
	same_rows(back, twin, 4);
	both[0] = back;
	push_to(both, 2, &s, 3, 0.25f);
	same_rows(back, twin, 4);
	/* a table that already holds rows is not restored over */
	cr_assert_eq(cs_ps_ckpt_restore(back, 6, path), -EEXIST);
	cs_ps_store_destroy(live);
	cs_ps_store_destroy(twin);
	cs_ps_store_destroy(back);
	cs_ps_spill_close(u);
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
