// SPDX-License-Identifier: MIT
/* Device buffers through the trainer API, without a GPU: a sidecar whose
 * device ops are a fake (a "device allocation" is a memfd the trainer
 * sends as a POSIX-fd handle; the fake maps it), three trainers that
 * allreduce, all-gather, reduce-scatter and broadcast on their device
 * ranges, mixed host/device buffers, copy errors, and the refusals (a
 * range past the allocation, a handle that does not open, a range of the
 * wrong device) reaching cs_errmsg(). Twice: with synchronous fake copies
 * (to_host / from_host) and with asynchronous ones (copy_start /
 * copy_poll) that finish after a random number of polls, out of order.
 * Then, asynchronous only: the overlap of one operation's copies with
 * another's network step (a fake backend; seen in the fake's log of
 * calls, not timed), and a trainer that dies with copies in flight.
 * Then one large operation cut into ipc.dev_pipe slices, its copies
 * beside its own network step (pipe_trainer(), pipe_die_trainer()).
 * Then ipc.dev_reduce: the local ranks' contributions reduced into a
 * device destination by the device ops (the fake's reduce_start, a CPU
 * emulation of the kernel call, in stream order), every type and
 * operator checked element by element, the pieces counted
 * (red_trainer()). */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "collstack/collstack.h"
#include "collectives/reduce.h"
#include "control/ipc/ipc_server.h"
#include "check.h"

#define ALLOC_LEN (8u << 20)
#define RANGE_OFF 4096u
#define COUNT ((5u << 20) / 4 + 3) /* floats: two 4 MiB pieces of copying */

static const unsigned char the_uuid[16] = { 0x42, 0x42 };

/* ---- state shared by the sidecar, the trainers and main (MAP_SHARED) ----- */

enum { FAIL_NONE, FAIL_TO_HOST, FAIL_FROM_HOST };
enum { STALL_NONE, STALL_ALL, STALL_OUT }; /* STALL_OUT: shadow -> device */
enum { EV_START, EV_DONE, EV_INTER_START, EV_INTER_DONE, EV_VERDICT };

#define LOG_MAX 8192

struct ev {
	uint8_t kind; /* EV_* */
	uint8_t to_host;
	uint32_t op; /* EV_INTER_*: the backend's operation number */
	int32_t slice; /* EV_INTER_*, EV_VERDICT: the step's slice, or -1 */
	uint64_t off; /* EV_START / EV_DONE: offset in the device range */
	uint64_t len;
};

struct shared {
	_Atomic int fail; /* FAIL_*: the next copy that way fails (once) */
	_Atomic int stall; /* STALL_*: copies do not finish ... */
	_Atomic int victim_dead; /* ... until main saw the victim exit */
	_Atomic uint32_t starts; /* copies started */
	_Atomic uint32_t starts_out; /* of them, shadow -> device */
	_Atomic uint32_t late; /* copies finished after victim_dead was set */
	_Atomic uint32_t uaf; /* range or shadow freed under a copy */
	_Atomic uint32_t eio; /* trainers that got -EIO (copy out) */
	_Atomic uint32_t bar; /* barrier() */
	_Atomic uint64_t hold; /* bit n: the backend holds its n-th step */
	/* bit s: the backend holds the step of slice s of a pipelined
	 * instance (ipc.dev_pipe) */
	_Atomic uint64_t hold_sl;
	_Atomic int fail_skip; /* copies the way of sh->fail that go first */
	_Atomic int fail_slice; /* s + 1: the step of slice s fails */
	_Atomic uint32_t cancels; /* steps the backend was told to forget */
	_Atomic uint32_t inflight_at_fail; /* copies when fail_slice hit */
	_Atomic int view_now; /* the sidecar moves to a new node view */
	_Atomic uint64_t pipe_ops, pipe_slices, pipe_overlap; /* at exit */
	/* reduce_start pieces the fake ran (ipc.dev_reduce), those with
	 * @first (a plain copy into the destination), and the server's
	 * counters at exit */
	_Atomic uint32_t reduces, reduce_firsts;
	_Atomic uint64_t dev_reduce_ops, dev_reduce_pieces;
	_Atomic uint32_t nlog;
	struct ev log[LOG_MAX];
};

static struct shared *sh;

static void log_ev(const struct ev *e)
{
	uint32_t i = atomic_fetch_add(&sh->nlog, 1);

	if (i < LOG_MAX)
		sh->log[i] = *e;
}

/* ---- the sidecar, with fake device ops ------------------------------------
 */

struct fake_range {
	unsigned char *map;
	size_t map_len;
	uint64_t off, len;
};

static int fd_map(void *ctx, uint32_t owner, uint32_t kind,
		  const uint8_t *handle, const uint8_t *uuid, uint64_t off,
		  uint64_t len, int fd, void **cookie, char *why, size_t whylen)
{
	struct fake_range *r;
	struct stat st;
	void *p;

	(void)ctx;
	(void)owner;
	(void)handle;
	if (memcmp(uuid, the_uuid, 16)) {
		snprintf(why, whylen, "the handle is of another device");
		if (fd >= 0)
			close(fd);
		return -ENODEV;
	}
	if (kind != 2 || fd < 0) { /* only POSIX fds open in the fake */
		snprintf(why, whylen, "fake: handle does not open");
		if (fd >= 0)
			close(fd);
		return -ENOENT;
	}
	if (fstat(fd, &st) || off + len > (uint64_t)st.st_size ||
	    off + len < off) {
		snprintf(why, whylen, "range runs past the allocation");
		close(fd);
		return -EINVAL;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -errno;
	r = calloc(1, sizeof(*r));
	r->map = p;
	r->map_len = (size_t)st.st_size;
	r->off = off;
	r->len = len;
	*cookie = r;
	return 0;
}

static void fd_unmap(void *ctx, void *cookie)
{
	struct fake_range *r = cookie;

	(void)ctx;
	munmap(r->map, r->map_len);
	free(r);
}

static int fd_to_host(void *ctx, void *cookie, uint64_t off, void *host,
		      size_t len)
{
	struct fake_range *r = cookie;

	int want = FAIL_TO_HOST;

	(void)ctx;
	if (off > r->len || len > r->len - off)
		return -ERANGE;
	if (atomic_compare_exchange_strong(&sh->fail, &want, FAIL_NONE))
		return -EIO;
	memcpy(host, r->map + r->off + off, len);
	return 0;
}

static int fd_from_host(void *ctx, void *cookie, uint64_t off, const void *host,
			size_t len)
{
	struct fake_range *r = cookie;

	int want = FAIL_FROM_HOST;

	(void)ctx;
	if (off > r->len || len > r->len - off)
		return -ERANGE;
	if (atomic_compare_exchange_strong(&sh->fail, &want, FAIL_NONE))
		return -EIO;
	memcpy(r->map + r->off + off, host, len);
	return 0;
}

static void *fd_shadow_alloc(void *ctx, size_t len)
{
	void *p;

	(void)ctx;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void fd_shadow_free(void *ctx, void *p, size_t len)
{
	(void)ctx;
	munmap(p, len);
}

static const struct cs_ipc_dev_ops fake_dev_ops = {
	.map = fd_map,
	.unmap = fd_unmap,
	.to_host = fd_to_host,
	.from_host = fd_from_host,
	.shadow_alloc = fd_shadow_alloc,
	.shadow_free = fd_shadow_free,
};

/*
 * The asynchronous fake: copy_start only notes the copy; it happens when
 * copy_poll finds it done, after 1 to 4 polls (random, so pieces finish
 * out of order), and not at all while sh->stall holds (until main saw
 * the victim exit). The shadow comes from malloc, so that ASan sees a
 * copy into a freed one; unmapping a range or freeing a shadow under a
 * copy in flight is counted (sh->uaf).
 */
#define JOBS 512

struct job {
	bool used;
	bool to_host;
	/* reduce_start: range = op(range, host), or = host when @first;
	 * @rseq: its place in the fake stream's order */
	bool reduce, first;
	enum cs_dtype t;
	enum cs_redop op;
	uint64_t rseq;
	struct fake_range *r;
	uint64_t off;
	uint8_t *host;
	size_t len;
	int polls;
};

static struct job jobs[JOBS]; /* in the sidecar */
static unsigned rng = 12345;
/* reduce pieces started, and done: one finishes only after every piece
 * started before it (a CUDA stream's order) */
static uint64_t red_started, red_done;

static int fa_start(void *ctx, void *cookie, uint64_t off, void *host,
		    size_t len, bool to_host, uint64_t *token)
{
	struct fake_range *r = cookie;
	unsigned i;

	(void)ctx;
	if (off > r->len || len > r->len - off)
		return -ERANGE;
	for (i = 0; i < JOBS && jobs[i].used; i++)
		;
	if (i == JOBS)
		return -EAGAIN;
	jobs[i] = (struct job){ .used = true,
				.to_host = to_host,
				.r = r,
				.off = off,
				.host = host,
				.len = len,
				.polls = 1 + (int)(rand_r(&rng) % 4) };
	atomic_fetch_add(&sh->starts, 1);
	if (!to_host)
		atomic_fetch_add(&sh->starts_out, 1);
	log_ev(&(struct ev){
		.kind = EV_START, .to_host = to_host, .off = off, .len = len });
	*token = i;
	return 0;
}

static int fa_poll(void *ctx, uint64_t token)
{
	struct job *j = &jobs[token % JOBS];
	int want = j->to_host ? FAIL_TO_HOST : FAIL_FROM_HOST, stall;

	(void)ctx;
	if (token >= JOBS || !j->used)
		return -EINVAL;
	stall = atomic_load(&sh->stall);
	if (stall && !atomic_load(&sh->victim_dead) &&
	    (stall == STALL_ALL || !j->to_host))
		return 0;
	if (--j->polls > 0)
		return 0;
	if (j->reduce && j->rseq != red_done)
		return 0; /* a piece started before it still runs */
	if (j->reduce)
		red_done++;
	j->used = false;
	if (atomic_load(&sh->fail) == want && atomic_load(&sh->fail_skip) > 0) {
		atomic_fetch_sub(&sh->fail_skip, 1);
		want = -1; /* not this one */
	}
	if (atomic_load(&sh->victim_dead))
		atomic_fetch_add(&sh->late, 1);
	log_ev(&(struct ev){ .kind = EV_DONE,
			     .to_host = j->to_host,
			     .off = j->off,
			     .len = j->len });
	if (atomic_compare_exchange_strong(&sh->fail, &want, FAIL_NONE))
		return -EIO;
	if (j->to_host) {
		memcpy(j->host, j->r->map + j->r->off + j->off, j->len);
	} else if (j->reduce && !j->first) { /* the kernel, emulated */
		uint8_t *dst = j->r->map + j->r->off + j->off;

		cs_reduce_get(j->t, j->op)(dst, dst, j->host,
					   j->len / cs_dtype_size(j->t));
	} else {
		memcpy(j->r->map + j->r->off + j->off, j->host, j->len);
	}
	return 1;
}

/* The fake's reduce_start: noted like a copy (a job), run when polled
 * done, in the order started. */
static int fa_reduce_start(void *ctx, void *cookie, uint64_t off,
			   const void *host, size_t len, enum cs_dtype t,
			   enum cs_redop op, bool first, uint64_t *token)
{
	int err;

	if (t != CS_F32 && t != CS_F16 && t != CS_BF16)
		return -EOPNOTSUPP;
	if (len % cs_dtype_size(t))
		return -EINVAL;
	err = fa_start(ctx, cookie, off, (void *)host, len, false, token);
	if (err)
		return err;
	jobs[*token].reduce = true;
	jobs[*token].first = first;
	jobs[*token].t = t;
	jobs[*token].op = op;
	jobs[*token].rseq = red_started++;
	atomic_fetch_add(&sh->reduces, 1);
	if (first)
		atomic_fetch_add(&sh->reduce_firsts, 1);
	return 0;
}

static void fa_unmap(void *ctx, void *cookie)
{
	for (unsigned i = 0; i < JOBS; i++)
		if (jobs[i].used && jobs[i].r == cookie)
			atomic_fetch_add(&sh->uaf, 1);
	fd_unmap(ctx, cookie);
}

static void *fa_shadow_alloc(void *ctx, size_t len)
{
	(void)ctx;
	return malloc(len);
}

static void fa_shadow_free(void *ctx, void *p, size_t len)
{
	(void)ctx;
	for (unsigned i = 0; i < JOBS; i++)
		if (jobs[i].used && jobs[i].host >= (uint8_t *)p &&
		    jobs[i].host < (uint8_t *)p + len)
			atomic_fetch_add(&sh->uaf, 1);
	free(p);
}

static const struct cs_ipc_dev_ops async_dev_ops = {
	.map = fd_map,
	.unmap = fa_unmap,
	.to_host = fd_to_host,
	.from_host = fd_from_host,
	.shadow_alloc = fa_shadow_alloc,
	.shadow_free = fa_shadow_free,
	.copy_start = fa_start,
	.copy_poll = fa_poll,
	.reduce_start = fa_reduce_start,
};

/*
 * A fake backend for groups of size 2 with one rank here: the other node
 * holds the same data, so an f32 sum allreduce doubles it. Each operation
 * ends at the sidecar's next round.
 */
struct wire_op {
	bool used;
	uint32_t n; /* started n-th */
	struct cs_ipc_inter_op op;
};

static struct wire_op wire[CS_IPC_RING_SLOTS];
static uint32_t wire_n;

static int wire_start(void *ctx, const struct cs_ipc_inter_op *op)
{
	(void)ctx;
	if (op->kind == CS_IPC_INTER_VERDICT) { /* noted, nothing to run */
		log_ev(&(struct ev){ .kind = EV_VERDICT,
				     .slice = op->slices ? (int32_t)op->slice
							 : -1 });
		return 0;
	}
	for (unsigned i = 0; i < CS_IPC_RING_SLOTS; i++)
		if (!wire[i].used) {
			wire[i] = (struct wire_op){ .used = true,
						    .n = wire_n++,
						    .op = *op };
			log_ev(&(struct ev){
				.kind = EV_INTER_START,
				.op = wire[i].n,
				.slice =
					op->slices ? (int32_t)op->slice : -1 });
			return 0;
		}
	return -EBUSY;
}

static void wire_cancel(void *ctx, uint64_t cookie)
{
	(void)ctx;
	for (unsigned i = 0; i < CS_IPC_RING_SLOTS; i++)
		if (wire[i].used && wire[i].op.cookie == cookie) {
			wire[i].used = false;
			atomic_fetch_add(&sh->cancels, 1);
			/* stalled copies may finish from now on: the server
			 * must wait for them before it unmaps (sh->uaf) */
			atomic_store(&sh->victim_dead, 1);
		}
}

static void wire_tick(struct cs_ipc_server *srv)
{
	for (unsigned i = 0; i < CS_IPC_RING_SLOTS; i++) {
		struct wire_op *w = &wire[i];
		float *b = w->op.buf;
		const float *src = w->op.sendbuf ? w->op.sendbuf : w->op.buf;

		int32_t sl = w->op.slices ? (int32_t)w->op.slice : -1;

		if (!w->used ||
		    (w->n < 64 && atomic_load(&sh->hold) >> w->n & 1) ||
		    (sl >= 0 && sl < 64 && atomic_load(&sh->hold_sl) >> sl & 1))
			continue;
		w->used = false;
		if (sl >= 0 && atomic_load(&sh->fail_slice) == sl + 1) {
			uint32_t busy = 0;

			for (unsigned j = 0; j < JOBS; j++)
				busy += jobs[j].used;
			atomic_store(&sh->inflight_at_fail, busy);
			atomic_store(&sh->fail_slice, 0);
			/* stalled copies may finish from now on (sh->late) */
			atomic_store(&sh->victim_dead, 1);
			log_ev(&(struct ev){ .kind = EV_INTER_DONE,
					     .op = w->n,
					     .slice = sl });
			cs_ipc_server_inter_fail(srv, w->op.cookie,
						 CS_ERR_TIMEOUT, 0, -1);
			continue;
		}
		if (w->op.kind == CS_IPC_INTER_ALLREDUCE &&
		    w->op.dtype == CS_F32)
			for (uint64_t k = 0; k < w->op.count; k++)
				b[k] = 2 * src[k];
		/* a broadcast from the other node (ranks 2, 3): a pattern of
		 * the slice and the element in it */
		if (w->op.kind == CS_IPC_INTER_BROADCAST &&
		    w->op.dtype == CS_F32 && w->op.root >= w->op.local_size)
			for (uint64_t k = 0; k < w->op.count; k++)
				b[k] = (float)((sl > 0 ? sl : 0) * 1000 +
					       (int)(k % 997));
		log_ev(&(struct ev){
			.kind = EV_INTER_DONE, .op = w->n, .slice = sl });
		cs_ipc_server_inter_done(srv, w->op.cookie, 0);
	}
}

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

enum mode { NO_DEV, SYNC, ASYNC, ASYNC_RED /* with ipc.dev_reduce */ };

static int sidecar(const char *path, enum mode mode)
{
	struct cs_ipc_backend be = { .start_inter_node = wire_start,
				     .cancel = wire_cancel,
				     .verdicts = true };
	struct cs_ipc_server *srv;
	struct cs_ipc_cfg cfg;
	struct cs_ipc_stats st;
	struct timespec ts;
	char err[256] = "";
	uint32_t epoch = 0;
	int ret;

	signal(SIGTERM, on_term);
	ret = cs_cfg_defaults(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg);
	if (ret)
		return 1;
	snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s", path);
	cfg.sock_poll_interval = 100000;
	/* many pieces per operation, few in flight */
	if (cs_cfg_set(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg,
		       "ipc.dev_chunk", "256k", err, sizeof(err)) ||
	    cs_cfg_set(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg,
		       "ipc.dev_depth", "3", err, sizeof(err)) ||
	    /* operations over 1 MiB across nodes go in 1 MiB slices */
	    cs_cfg_set(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg,
		       "ipc.dev_pipe", "1M", err, sizeof(err))) {
		fprintf(stderr, "sidecar: %s\n", err);
		return 1;
	}
	if (mode == ASYNC_RED &&
	    cs_cfg_set(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg,
		       "ipc.dev_reduce", "1", err, sizeof(err))) {
		fprintf(stderr, "sidecar: %s\n", err);
		return 1;
	}
	if (cs_ipc_server_create(&cfg, mode >= ASYNC ? &be : NULL, &srv))
		return 1;
	if (mode != NO_DEV)
		cs_ipc_server_set_dev(
			srv, mode >= ASYNC ? &async_dev_ops : &fake_dev_ops,
			NULL);
	while (!stop) {
		if (atomic_exchange(&sh->view_now, 0)) /* a node was lost */
			cs_ipc_server_view(srv, ++epoch, 1);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ret = cs_ipc_server_poll(srv, (cs_ns_t)ts.tv_sec * 1000000000 +
						      (cs_ns_t)ts.tv_nsec);
		if (mode >= ASYNC)
			wire_tick(srv);
		if (ret <= 0)
			usleep(50);
	}
	cs_ipc_server_stats(srv, &st);
	atomic_store(&sh->pipe_ops, st.pipe_ops);
	atomic_store(&sh->pipe_slices, st.pipe_slices);
	atomic_store(&sh->pipe_overlap, st.pipe_overlap);
	atomic_store(&sh->dev_reduce_ops, st.dev_reduce_ops);
	atomic_store(&sh->dev_reduce_pieces, st.dev_reduce_pieces);
	cs_ipc_server_destroy(srv);
	return 0;
}

/* ---- trainers -------------------------------------------------------------
 */

static int connect_retry(const char *path, struct cs_client **c)
{
	int err = -ENOENT;

	for (int i = 0; i < 3000 && err; i++) {
		err = cs_connect(path, c);
		if (err)
			usleep(10000);
	}
	return err;
}

/* a "device allocation": a memfd of ALLOC_LEN, mapped here */
static int dev_alloc(struct cs_dev_mem *m)
{
	int fd = memfd_create("fake-gpu-alloc", MFD_CLOEXEC);
	void *p;

	if (fd < 0 || ftruncate(fd, ALLOC_LEN))
		return -errno;
	p = mmap(NULL, ALLOC_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	memset(m, 0, sizeof(*m));
	m->kind = CS_DEV_POSIX_FD;
	m->fd = fd;
	memcpy(m->uuid, the_uuid, 16);
	m->base = p;
	m->alloc_len = ALLOC_LEN;
	return 0;
}

static int wait_for(struct cs_client *c, cs_req_t r)
{
	return cs_wait(c, r, 30000000000ll);
}

/* f32 sum allreduce in place of x[i] = (rank + 1) i: sum = s(s+1)/2 i */
static int sum_check(struct cs_client *c, struct cs_group *g, float *x,
		     size_t n, int rank, int size, int *status)
{
	cs_req_t r;
	int err;

	for (size_t i = 0; i < n; i++)
		x[i] = (float)(rank + 1) * (float)i;
	err = cs_allreduce(g, x, x, n, CS_F32, CS_SUM, &r);
	*status = err ? err : wait_for(c, r);
	if (*status)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (x[i] != (float)(size * (size + 1) / 2) * (float)i)
			return -1;
	return 0;
}

/*
 * Every rank of the world is here (the @n-th time): before rank 0 arms a
 * fault, every rank's last operation must be complete. With synchronous
 * copies a rank's completion goes as soon as its own result is copied
 * out, before the next rank's, whose copy would take the fault.
 */
static void barrier(int size, uint32_t *n)
{
	uint32_t want = (uint32_t)size * ++*n;

	atomic_fetch_add(&sh->bar, 1);
	for (int i = 0; i < 2000000 && atomic_load(&sh->bar) < want; i++)
		usleep(10);
}

/*
 * All-gather in place on the device range, reduce-scatter from it into a
 * host buffer, a broadcast with its values, then copy errors: a copy in
 * that fails gives -EIO to every rank, a copy out that fails gives it to
 * the one rank whose result it was (counted in sh->eio: main wants 1);
 * the operation after each succeeds. Rank 0 arms the fault before it
 * posts: the operation cannot start before then.
 */
static int more_ops(struct cs_client *c, struct cs_group *g, float *x, float *h,
		    int rank, int size)
{
	size_t k = COUNT / 4;
	uint32_t nbar = 0;
	cs_req_t r;
	int err, st;

	for (size_t i = 0; i < k; i++)
		x[(size_t)rank * k + i] = (float)(rank * 1000000 + (int)i);
	err = cs_all_gather(g, x + (size_t)rank * k, x, k, CS_F32, &r);
	CHECK(!err && !wait_for(c, r), "all-gather in place: %d", err);
	for (int q = 0; q < size; q++)
		for (size_t i = 0; i < k; i += 997)
			if (x[(size_t)q * k + i] !=
			    (float)(q * 1000000 + (int)i)) {
				CHECK(0, "all-gather block %d [%zu]: %g", q, i,
				      x[(size_t)q * k + i]);
				return -1;
			}
	for (size_t i = 0; i < (size_t)size * k; i++)
		x[i] = (float)(rank + 1) * (float)(i % 4096);
	err = cs_reduce_scatter(g, x, h, k, CS_F32, CS_SUM, &r);
	CHECK(!err && !wait_for(c, r), "reduce-scatter device -> host: %d",
	      err);
	for (size_t i = 0; i < k; i++)
		if (h[i] != (float)(size * (size + 1) / 2) *
				    (float)(((size_t)rank * k + i) % 4096)) {
			CHECK(0, "reduce-scatter [%zu]: %g", i, h[i]);
			return -1;
		}
	for (size_t i = 0; i < COUNT; i++)
		x[i] = rank ? -1.0f : (float)i * 0.5f;
	err = cs_broadcast(g, x, COUNT, CS_F32, 0, &r);
	CHECK(!err && !wait_for(c, r), "broadcast from a device range");
	for (size_t i = 0; i < COUNT; i++)
		if (x[i] != (float)i * 0.5f) {
			CHECK(0, "broadcast [%zu]: %g", i, x[i]);
			return -1;
		}

	barrier(size, &nbar);
	if (!rank)
		atomic_store(&sh->fail, FAIL_TO_HOST);
	CHECK(!sum_check(c, g, x, COUNT, rank, size, &st) && st == -EIO,
	      "a failed copy in: %d (want -EIO)", st);
	CHECK(!sum_check(c, g, x, COUNT, rank, size, &st) && !st,
	      "the operation after a failed copy in: %d", st);
	barrier(size, &nbar);
	if (!rank)
		atomic_store(&sh->fail, FAIL_FROM_HOST);
	CHECK(!sum_check(c, g, x, COUNT, rank, size, &st) &&
		      (!st || st == -EIO),
	      "a failed copy out: %d", st);
	if (st == -EIO)
		atomic_fetch_add(&sh->eio, 1);
	CHECK(!sum_check(c, g, x, COUNT, rank, size, &st) && !st,
	      "the operation after a failed copy out: %d", st);
	return 0;
}

static int trainer(const char *path, int rank, int size)
{
	struct cs_client *c = NULL;
	struct cs_group *g = NULL;
	struct cs_buf *db = NULL, *hb = NULL, *bad = NULL;
	struct cs_dev_mem m;
	cs_req_t r;
	float *x, *h;
	int err;

	CHECK(!connect_retry(path, &c), "connect");
	if (!c)
		return 1;
	CHECK(!dev_alloc(&m), "fake device allocation");
	CHECK(!cs_group_join(c, "devg", rank, size, rank, size, &g), "join");
	err = cs_buf_register_dev(c, &m, RANGE_OFF, COUNT * 4, &db);
	CHECK(!err && cs_buf_ptr(db) == (char *)m.base + RANGE_OFF,
	      "register a device range: %d %s", err, cs_errmsg(c));
	CHECK(!cs_buf_alloc(c, COUNT * 4, &hb), "host buffer");
	if (!db || !hb || !g)
		return 1;
	x = cs_buf_ptr(db); /* here the trainer's own mapping stands in for
			     * device memory it would write with kernels */
	h = cs_buf_ptr(hb);
	for (unsigned i = 0; i < COUNT; i++)
		x[i] = (float)(rank + 1) * (float)i;
	err = cs_allreduce(g, x, x, COUNT, CS_F32, CS_SUM, &r);
	CHECK(!err && !cs_wait(c, r, 30000000000ll),
	      "allreduce in place on "
	      "a device range: %d %s",
	      err, cs_errmsg(c));
	for (unsigned i = 0; i < COUNT; i++)
		if (x[i] != (float)(size * (size + 1) / 2) * (float)i) {
			CHECK(0, "rank %d element %u: %g", rank, i, x[i]);
			break;
		}
	/* mixed: host send, device recv; then device send, host recv */
	for (unsigned i = 0; i < COUNT; i++)
		h[i] = (float)rank;
	err = cs_allreduce(g, h, x, COUNT, CS_F32, CS_MAX, &r);
	CHECK(!err && !cs_wait(c, r, 30000000000ll), "host -> device");
	CHECK(x[0] == (float)(size - 1) && x[COUNT - 1] == (float)(size - 1),
	      "host -> device result %g", x[0]);
	err = cs_allreduce(g, x, h, COUNT, CS_F32, CS_SUM, &r);
	CHECK(!err && !cs_wait(c, r, 30000000000ll), "device -> host");
	CHECK(h[7] == (float)(size * (size - 1)), "device -> host result %g",
	      h[7]);
	err = cs_broadcast(g, x, COUNT, CS_F32, 0, &r);
	CHECK(!err && !cs_wait(c, r, 30000000000ll), "broadcast");
	err = more_ops(c, g, x, h, rank, size);
	CHECK(!err, "all-gather, reduce-scatter, broadcast, copy errors");

	/* refusals */
	err = cs_buf_register_dev(c, &m, ALLOC_LEN - 4096, 8192, &bad);
	CHECK(err == -EINVAL, "range past the allocation (client): %d", err);
	m.alloc_len =
		2 * ALLOC_LEN; /* a lie about the size: the sidecar checks */
	err = cs_buf_register_dev(c, &m, ALLOC_LEN - 4096, 8192, &bad);
	CHECK(err == -EINVAL && strstr(cs_errmsg(c), "past the allocation"),
	      "range past the allocation (sidecar): %d '%s'", err,
	      cs_errmsg(c));
	m.alloc_len = 1ull << 40; /* beyond ipc.max_segment_bytes (64G) */
	err = cs_buf_register_dev(c, &m, 0, 65ull << 30, &bad);
	CHECK(err == -EINVAL && strstr(cs_errmsg(c), "size out of range"),
	      "a range beyond ipc.max_segment_bytes: %d '%s'", err,
	      cs_errmsg(c));
	m.alloc_len = ALLOC_LEN;
	m.uuid[0] ^= 1;
	err = cs_buf_register_dev(c, &m, 0, 4096, &bad);
	CHECK(err == -ENODEV && strstr(cs_errmsg(c), "another device"),
	      "another device: %d '%s'", err, cs_errmsg(c));
	m.uuid[0] ^= 1;
	m.kind = CS_DEV_CUDA_IPC;
	memset(m.handle, 0xab, sizeof(m.handle));
	err = cs_buf_register_dev(c, &m, 0, 4096, &bad);
	CHECK(err == -ENOENT && strstr(cs_errmsg(c), "does not open"),
	      "a handle that does not open: %d '%s'", err, cs_errmsg(c));
	m.kind = 9;
	CHECK(cs_buf_register_dev(c, &m, 0, 4096, &bad) == -EINVAL, "bad kind");

	CHECK(!cs_buf_free(db), "free the device range");
	CHECK(!cs_buf_free(hb), "free the host buffer");
	cs_group_leave(g);
	cs_disconnect(c);
	close(m.fd);
	return check_report("trainer");
}

static int no_gpu_trainer(const char *path)
{
	struct cs_client *c = NULL;
	struct cs_buf *b = NULL;
	struct cs_dev_mem m;
	int err;

	CHECK(!connect_retry(path, &c), "connect");
	if (!c)
		return 1;
	dev_alloc(&m);
	err = cs_buf_register_dev(c, &m, 0, 4096, &b);
	CHECK(err == -EOPNOTSUPP && strstr(cs_errmsg(c), "no GPU support"),
	      "a sidecar without GPU support: %d '%s'", err, cs_errmsg(c));
	cs_disconnect(c);
	return check_report("trainer of a sidecar without GPU support");
}

/* ---- overlap: two operations of one group copy at once --------------- */

#define WN (128u << 10) /* floats: 512 KiB, two 256 KiB pieces */
#define B_OFF (WN * 4u) /* operation B's half of the range */

/* whether the log shows a copy in (a start) of B's half of the range */
static bool b_copy_started(void)
{
	uint32_t n = atomic_load(&sh->nlog);

	if (n > LOG_MAX)
		n = LOG_MAX;
	for (uint32_t i = 0; i < n; i++)
		if (sh->log[i].kind == EV_START && sh->log[i].to_host &&
		    sh->log[i].off >= B_OFF)
			return true;
	return false;
}

/* whether the log from @from on has an event @kind (of step @op, or of
 * the half of the range @half: 0 A's, 1 B's; @to_host for copies) */
static bool log_has(uint32_t from, int kind, uint32_t op, int half,
		    bool to_host)
{
	uint32_t n = atomic_load(&sh->nlog);

	if (n > LOG_MAX)
		n = LOG_MAX;
	for (uint32_t i = from; i < n; i++) {
		const struct ev *e = &sh->log[i];

		if (e->kind != kind)
			continue;
		if ((kind == EV_INTER_START || kind == EV_INTER_DONE) &&
		    e->op == op)
			return true;
		if ((kind == EV_START || kind == EV_DONE) &&
		    e->to_host == to_host && (e->off >= B_OFF) == half)
			return true;
	}
	return false;
}

static bool wait_log(uint32_t from, int kind, uint32_t op, int half,
		     bool to_host)
{
	for (int i = 0; i < 200000; i++) { /* ~10 s: failure only */
		if (log_has(from, kind, op, half, to_host))
			return true;
		usleep(50);
	}
	return false;
}

/*
 * With the network in the picture (the fake backend holds steps on the
 * "wire" as told, sh->hold): C goes on the wire (its step number @n);
 * then D copies in and goes on the wire while C is still there; then C
 * comes off the wire, copies out and completes while D is still on it.
 */
static void wire_overlap(struct cs_client *c, struct cs_group *g, float *x,
			 uint32_t n)
{
	uint32_t mark;
	cs_req_t rc, rd;
	int err, sc = -1, sd = -1;

	for (unsigned i = 0; i < 2 * WN; i++)
		x[i] = (float)i;
	atomic_store(&sh->hold, 3ull << n);
	err = cs_allreduce(g, x, x, WN, CS_F32, CS_SUM, &rc);
	CHECK(!err && wait_log(0, EV_INTER_START, n, 0, false),
	      "C on the wire");
	mark = atomic_load(&sh->nlog);
	err = err ? err
		  : cs_allreduce(g, x + WN, x + WN, WN, CS_F32, CS_SUM, &rd);
	CHECK(!err && wait_log(mark, EV_INTER_START, n + 1, 0, false),
	      "D on the wire");
	CHECK(log_has(mark, EV_DONE, 0, 1, true) &&
		      !log_has(0, EV_INTER_DONE, n, 0, false) &&
		      cs_test(c, rc) == -EINPROGRESS,
	      "D copied in while C was on the wire");
	mark = atomic_load(&sh->nlog);
	atomic_fetch_and(&sh->hold, ~(1ull << n));
	if (!err)
		sc = wait_for(c, rc);
	CHECK(!sc && log_has(mark, EV_DONE, 0, 0, false) &&
		      !log_has(0, EV_INTER_DONE, n + 1, 0, false) &&
		      cs_test(c, rd) == -EINPROGRESS,
	      "C copied out and complete (%d) while D was on the wire", sc);
	atomic_store(&sh->hold, 0);
	if (!err)
		sd = wait_for(c, rd);
	CHECK(!sd, "D: %d", sd);
	for (unsigned i = 0; i < 2 * WN; i++)
		if (x[i] != 2.0f * (float)i) {
			CHECK(0, "C, D [%u]: %g, want %g", i, x[i], 2.0f * i);
			break;
		}
}

/*
 * One rank of a group of 2 over two nodes (the fake backend is the other
 * node). After a first operation (the group's first waits for the
 * membership check), the fake device stops finishing copies; A and B go
 * in, on the two halves of the range. B's copy in must start while A's
 * copies are still in flight and A is not complete (a sidecar that waits
 * for each copy, or copies one operation at a time, never gets there).
 * Then the device goes on, and both results are checked.
 */
static int wire_trainer(const char *path)
{
	struct cs_client *c = NULL;
	struct cs_group *g = NULL;
	struct cs_buf *db = NULL;
	struct cs_dev_mem m;
	cs_req_t ra, rb;
	float *x;
	int err, sa = -1, sb = -1;
	bool seen = false;

	CHECK(!connect_retry(path, &c), "connect");
	if (!c)
		return 1;
	CHECK(!dev_alloc(&m), "fake device allocation");
	CHECK(!cs_group_join(c, "wire", 0, 2, 0, 1, &g), "join");
	err = cs_buf_register_dev(c, &m, RANGE_OFF, 2 * WN * 4, &db);
	CHECK(!err, "register: %d %s", err, cs_errmsg(c));
	if (!db || !g)
		return 1;
	x = cs_buf_ptr(db);
	for (unsigned i = 0; i < 2 * WN; i++)
		x[i] = (float)i;
	err = cs_allreduce(g, x, x, WN, CS_F32, CS_SUM, &ra);
	CHECK(!err && !wait_for(c, ra), "first operation over the wire");
	CHECK(x[5] == 10.0f, "first operation: %g", x[5]);

	atomic_store(&sh->stall, STALL_ALL);
	for (unsigned i = 0; i < 2 * WN; i++)
		x[i] = (float)i;
	err = cs_allreduce(g, x, x, WN, CS_F32, CS_SUM, &ra);
	err = err ? err
		  : cs_allreduce(g, x + WN, x + WN, WN, CS_F32, CS_SUM, &rb);
	CHECK(!err, "post A and B: %d", err);
	for (int i = 0; i < 200000 && !seen; i++) { /* ~10 s: failure only */
		seen = b_copy_started();
		if (!seen)
			usleep(50);
	}
	CHECK(seen, "B's copy in started while A's copies were in flight");
	CHECK(cs_test(c, ra) == -EINPROGRESS,
	      "A not complete when B's copy in started");
	atomic_store(&sh->stall, STALL_NONE);
	if (!err) {
		sa = wait_for(c, ra);
		sb = wait_for(c, rb);
	}
	CHECK(!sa && !sb, "A %d, B %d", sa, sb);
	for (unsigned i = 0; i < 2 * WN; i++)
		if (x[i] != 2.0f * (float)i) {
			CHECK(0, "[%u]: %g, want %g", i, x[i], 2.0f * i);
			break;
		}
	wire_overlap(c, g, x, 3); /* steps 0, 1, 2: the first one, A, B */
	CHECK(!cs_buf_free(db), "free the device range");
	cs_group_leave(g);
	cs_disconnect(c);
	close(m.fd);
	return check_report("trainer over the wire");
}

/* ---- a trainer dies with copies in flight ------------------------------- */

/* @out: the victim dies while the results are copied out, not in */
static int die_trainer(const char *path, int rank, bool out)
{
	_Atomic uint32_t *started = out ? &sh->starts_out : &sh->starts;
	struct cs_client *c = NULL;
	struct cs_group *g = NULL, *g2 = NULL;
	struct cs_buf *db = NULL;
	struct cs_dev_mem m;
	cs_req_t r;
	float *x;
	int err, st = -1;

	CHECK(!connect_retry(path, &c), "connect");
	if (!c)
		return 1;
	CHECK(!dev_alloc(&m), "fake device allocation");
	CHECK(!cs_group_join(c, "die", rank, 2, rank, 2, &g), "join");
	err = cs_buf_register_dev(c, &m, RANGE_OFF, COUNT * 4, &db);
	CHECK(!err, "register: %d %s", err, cs_errmsg(c));
	if (!db || !g)
		return 1;
	x = cs_buf_ptr(db);
	for (unsigned i = 0; i < COUNT; i++)
		x[i] = 1.0f;
	err = cs_allreduce(g, x, x, COUNT, CS_F32, CS_SUM, &r);
	CHECK(!err, "post: %d", err);
	if (rank == 0) { /* the victim (local rank 0: its pieces go first) */
		for (int i = 0; i < 200000 && !atomic_load(started); i++)
			usleep(50);
		CHECK(atomic_load(started) > 0, "copies %s started",
		      out ? "out" : "in");
		check_report("victim");
		_exit(check_failed ? 1 : 0);
	}
	st = wait_for(c, r);
	CHECK(st == CS_ERR_PEER_LOST, "the survivor's operation: %d", st);
	/* the sidecar goes on: a new group, a device operation */
	CHECK(!cs_group_join(c, "after", 0, 1, 0, 1, &g2), "join again");
	CHECK(g2 && !sum_check(c, g2, x, COUNT, 0, 1, &st) && !st,
	      "an operation after the death: %d", st);
	CHECK(!cs_buf_free(db), "free the device range");
	cs_group_leave(g2);
	cs_disconnect(c);
	close(m.fd);
	return check_report("survivor");
}

/* ---- one large operation pipelined with its own copies (ipc.dev_pipe) -- */

/*
 * Groups of 4 over two nodes: ranks 0 and 1 here (two trainers), 2 and 3
 * the fake backend (which holds the same data: a sum doubles the local
 * one). ipc.dev_pipe is 1M, so COUNT floats (5 MiB + 12 bytes) go in 6
 * slices of PIPE_E floats, 4 pieces of 256 KiB each (ipc.dev_chunk).
 */
#define PIPE_E (262144u)
#define PIPE_N 6u
#define PIPE_SLICE_BYTES ((uint64_t)PIPE_E * 4)

/* whether the log from @from on has an event @kind (@to_host: 0, 1, or
 * -1: either; @slice, or -1: any) at a range offset in [@lo, @hi) */
static uint32_t ev_count(uint32_t from, int kind, int to_host, int slice,
			 uint64_t lo, uint64_t hi)
{
	uint32_t n = atomic_load(&sh->nlog), c = 0;

	if (n > LOG_MAX)
		n = LOG_MAX;
	for (uint32_t i = from; i < n; i++) {
		const struct ev *e = &sh->log[i];

		if (e->kind != kind)
			continue;
		if ((kind == EV_START || kind == EV_DONE) &&
		    ((to_host >= 0 && e->to_host != to_host) || e->off < lo ||
		     e->off >= hi))
			continue;
		if (kind != EV_START && kind != EV_DONE && slice >= 0 &&
		    e->slice != slice)
			continue;
		c++;
	}
	return c;
}

static bool ev_wait(uint32_t from, int kind, int to_host, int slice,
		    uint64_t lo, uint64_t hi, uint32_t want)
{
	for (int i = 0; i < 200000; i++) { /* ~10 s: failure only */
		if (ev_count(from, kind, to_host, slice, lo, hi) >= want)
			return true;
		usleep(50);
	}
	return false;
}

#define SL(k) ((uint64_t)(k)*PIPE_SLICE_BYTES)
#define ALL_OFF 0, UINT64_MAX

/* x[i] = (rank + 1) i, summed here and doubled by the other node: 6 i */
static int pipe_sum(struct cs_client *c, struct cs_group *g, float *x,
		    float *out, int rank, cs_req_t *r, bool wait)
{
	int err;

	for (size_t i = 0; i < COUNT; i++)
		x[i] = (float)(rank + 1) * (float)i;
	err = cs_allreduce(g, x, out, COUNT, CS_F32, CS_SUM, r);
	if (err || !wait)
		return err;
	err = wait_for(c, *r);
	if (err)
		return err;
	for (size_t i = 0; i < COUNT; i++)
		if (out[i] != 6.0f * (float)i) {
			CHECK(0, "rank %d [%zu]: %g, want %g", rank, i, out[i],
			      6.0f * (float)i);
			return -1;
		}
	return 0;
}

/*
 * Rank 0 watches the fake's log while both ranks run: slice 0 held on the
 * wire, slice 1 must copy in meanwhile; slice 1 held, slice 0 must copy
 * out meanwhile; the last slice held with every other slice out, the
 * operation must not be complete. Then exact results; a broadcast from
 * the other node and one from here; a copy in and a copy out that fail
 * mid-operation; a step that fails with copies in flight. After each
 * failure the next operation succeeds.
 */
static int pipe_trainer(const char *path, int rank)
{
	struct cs_client *c = NULL;
	struct cs_group *g = NULL;
	struct cs_buf *db = NULL, *hb = NULL;
	struct cs_dev_mem m;
	uint32_t nbar = 0, mark = 0;
	cs_req_t r;
	float *x, *h;
	int err, st;

	CHECK(!connect_retry(path, &c), "connect");
	if (!c)
		return 1;
	CHECK(!dev_alloc(&m), "fake device allocation");
	CHECK(!cs_group_join(c, "pipe", rank, 4, rank, 2, &g), "join");
	err = cs_buf_register_dev(c, &m, RANGE_OFF, COUNT * 4, &db);
	CHECK(!err, "register: %d %s", err, cs_errmsg(c));
	CHECK(!cs_buf_alloc(c, COUNT * 4, &hb), "host buffer");
	if (!db || !hb || !g)
		return 1;
	x = cs_buf_ptr(db);
	h = cs_buf_ptr(hb);

	/* 1. the overlap, from the log */
	if (!rank) {
		atomic_store(&sh->hold_sl, 1ull << 0);
		mark = atomic_load(&sh->nlog);
	}
	barrier(2, &nbar);
	err = pipe_sum(c, g, x, x, rank, &r, false);
	CHECK(!err, "post: %d", err);
	if (!rank) {
		CHECK(ev_wait(mark, EV_INTER_START, -1, 0, ALL_OFF, 1),
		      "slice 0 on the wire");
		CHECK(ev_wait(mark, EV_START, 1, -1, SL(1), SL(2), 1) &&
			      !ev_count(mark, EV_INTER_DONE, -1, 0, ALL_OFF),
		      "slice 1 copies in while slice 0 is on the wire");
		CHECK(!ev_count(mark, EV_START, 0, -1, ALL_OFF),
		      "nothing copied out before a slice came off the wire");
		atomic_store(&sh->hold_sl, 1ull << 1);
		CHECK(ev_wait(mark, EV_INTER_START, -1, 1, ALL_OFF, 1),
		      "slice 1 on the wire");
		CHECK(ev_wait(mark, EV_START, 0, -1, SL(0), SL(1), 1) &&
			      !ev_count(mark, EV_INTER_DONE, -1, 1, ALL_OFF),
		      "slice 0 copies out while slice 1 is on the wire");
		atomic_store(&sh->hold_sl, 1ull << (PIPE_N - 1));
		CHECK(ev_wait(mark, EV_INTER_START, -1, (int)PIPE_N - 1,
			      ALL_OFF, 1),
		      "the last slice on the wire");
		/* slices 0 .. 4 out: 2 ranks x 5 MiB in 256 KiB pieces */
		CHECK(ev_wait(mark, EV_DONE, 0, -1, 0, SL(PIPE_N - 1), 40),
		      "slices 0 .. %u copied out (%u pieces)", PIPE_N - 2,
		      ev_count(mark, EV_DONE, 0, -1, 0, SL(PIPE_N - 1)));
		CHECK(cs_test(c, r) == -EINPROGRESS,
		      "not complete while its last slice is on the wire");
		CHECK(ev_count(mark, EV_INTER_START, -1, -1, ALL_OFF) == PIPE_N,
		      "one step per slice: %u",
		      ev_count(mark, EV_INTER_START, -1, -1, ALL_OFF));
		atomic_store(&sh->hold_sl, 0);
	}
	st = err ? err : wait_for(c, r);
	CHECK(!st, "pipelined allreduce: %d", st);
	for (size_t i = 0; !st && i < COUNT; i++)
		if (x[i] != 6.0f * (float)i) {
			CHECK(0,
			      "pipelined allreduce rank %d [%zu]: %g, want "
			      "%g",
			      rank, i, x[i], 6.0f * (float)i);
			break;
		}
	/* device send, host recv (local rank 0's recv: a host buffer) */
	CHECK(!pipe_sum(c, g, x, h, rank, &r, true), "device -> host");

	/* 2. broadcasts: from the other node (rank 2), and from here */
	for (size_t i = 0; i < COUNT; i++)
		x[i] = -1.0f;
	err = cs_broadcast(g, x, COUNT, CS_F32, 2, &r);
	CHECK(!err && !wait_for(c, r), "broadcast from rank 2");
	for (size_t i = 0; i < COUNT; i++)
		if (x[i] != (float)((int)(i / PIPE_E) * 1000 +
				    (int)(i % PIPE_E % 997))) {
			CHECK(0, "broadcast from rank 2 [%zu]: %g", i, x[i]);
			break;
		}
	for (size_t i = 0; i < COUNT; i++)
		x[i] = rank ? -1.0f : (float)i * 0.5f;
	err = cs_broadcast(g, x, COUNT, CS_F32, 0, &r);
	CHECK(!err && !wait_for(c, r), "broadcast from rank 0");
	for (size_t i = 0; i < COUNT; i++)
		if (x[i] != (float)i * 0.5f) {
			CHECK(0, "broadcast from rank 0 [%zu]: %g", i, x[i]);
			break;
		}

	/* 3. a copy in fails in the middle: -EIO everywhere, the other
	 * nodes told in the slice they wait in; then all is well */
	barrier(2, &nbar);
	if (!rank) {
		mark = atomic_load(&sh->nlog);
		atomic_store(&sh->fail_skip, 10);
		atomic_store(&sh->fail, FAIL_TO_HOST);
	}
	barrier(2, &nbar);
	st = pipe_sum(c, g, x, x, rank, &r, true);
	CHECK(st == -EIO, "a failed copy in (slice 1 or 2): %d", st);
	barrier(2, &nbar);
	if (!rank) {
		uint32_t steps =
			ev_count(mark, EV_INTER_START, -1, -1, ALL_OFF);

		CHECK(steps >= 1 && steps < PIPE_N &&
			      ev_count(mark, EV_VERDICT, -1, (int)steps,
				       ALL_OFF) == 1,
		      "one verdict for slice %u (the first not started)",
		      steps);
	}
	CHECK(!pipe_sum(c, g, x, x, rank, &r, true),
	      "the operation after a failed copy in");

	/* 4. a copy out fails in the middle: -EIO for that rank only */
	barrier(2, &nbar);
	if (!rank) {
		atomic_store(&sh->eio, 0);
		atomic_store(&sh->fail_skip, 10);
		atomic_store(&sh->fail, FAIL_FROM_HOST);
	}
	barrier(2, &nbar);
	st = pipe_sum(c, g, x, x, rank, &r, true);
	CHECK(!st || st == -EIO, "a failed copy out: %d", st);
	if (st == -EIO)
		atomic_fetch_add(&sh->eio, 1);
	barrier(2, &nbar);
	CHECK(atomic_load(&sh->eio) == 1, "a failed copy out: -EIO to %u ranks",
	      atomic_load(&sh->eio));
	CHECK(!pipe_sum(c, g, x, x, rank, &r, true),
	      "the operation after a failed copy out");

	/* 5. slice 2's step fails with copies in flight: the copies out
	 * stall until it failed (slices 0 and 1 are out by then; slice 2
	 * copied in before any copy out took a slot, pipe_issue()): every
	 * rank gets its error, no copy outlives its shadow (sh->uaf, main),
	 * the next operation succeeds */
	barrier(2, &nbar);
	if (!rank) {
		mark = atomic_load(&sh->nlog);
		atomic_store(&sh->late, 0);
		atomic_store(&sh->fail_slice, 3);
		atomic_store(&sh->stall, STALL_OUT);
	}
	barrier(2, &nbar);
	err = pipe_sum(c, g, x, x, rank, &r, false);
	st = err ? err : wait_for(c, r);
	CHECK(st == CS_ERR_TIMEOUT, "a slice's step failed: %d", st);
	barrier(2, &nbar);
	if (!rank) {
		CHECK(atomic_load(&sh->inflight_at_fail) > 0 &&
			      atomic_load(&sh->late) > 0,
		      "copies in flight when the step failed: %u (finished "
		      "after: %u)",
		      atomic_load(&sh->inflight_at_fail),
		      atomic_load(&sh->late));
		atomic_store(&sh->stall, STALL_NONE);
		atomic_store(&sh->victim_dead, 0);
	}
	barrier(2, &nbar);
	CHECK(!pipe_sum(c, g, x, x, rank, &r, true),
	      "the operation after a failed step");

	/* 6. the group fails (a node lost: a new view) with slice 1 on the
	 * wire and slice 0's copies out stalled (until the backend is told
	 * to forget the step): CS_ERR_PEER_LOST everywhere, then a new
	 * group runs */
	barrier(2, &nbar);
	if (!rank) {
		mark = atomic_load(&sh->nlog);
		atomic_store(&sh->late, 0);
		atomic_store(&sh->cancels, 0);
		atomic_store(&sh->hold_sl, 1ull << 1);
		atomic_store(&sh->stall, STALL_OUT);
	}
	barrier(2, &nbar);
	err = pipe_sum(c, g, x, x, rank, &r, false);
	if (!rank) {
		CHECK(ev_wait(mark, EV_INTER_START, -1, 1, ALL_OFF, 1) &&
			      ev_wait(mark, EV_START, 0, -1, ALL_OFF, 1),
		      "slice 1 on the wire, slice 0 copying out");
		atomic_store(&sh->view_now, 1);
	}
	st = err ? err : wait_for(c, r);
	CHECK(st == CS_ERR_PEER_LOST, "the group failed mid-pipeline: %d", st);
	barrier(2, &nbar);
	if (!rank) {
		CHECK(atomic_load(&sh->cancels) == 1 &&
			      atomic_load(&sh->late) > 0,
		      "the step on the wire cancelled (%u), copies in flight "
		      "(finished after: %u)",
		      atomic_load(&sh->cancels), atomic_load(&sh->late));
		atomic_store(&sh->hold_sl, 0);
		atomic_store(&sh->stall, STALL_NONE);
		atomic_store(&sh->victim_dead, 0);
	}
	barrier(2, &nbar);
	cs_group_leave(g);
	g = NULL;
	CHECK(!cs_group_join(c, "pipe2", rank, 4, rank, 2, &g) && g,
	      "a new group");
	CHECK(g && !pipe_sum(c, g, x, x, rank, &r, true),
	      "an operation of the new group");

	CHECK(!cs_buf_free(db), "free the device range");
	CHECK(!cs_buf_free(hb), "free the host buffer");
	cs_group_leave(g);
	cs_disconnect(c);
	close(m.fd);
	return check_report(rank ? "pipe rank 1" : "pipe rank 0");
}

/*
 * A trainer dies in the middle of a pipelined operation: slice 1 held on
 * the wire, slice 0's copies out stalled (until the fake backend is told
 * to forget the step: the server must then wait for them before it
 * unmaps the dead trainer's ranges). The other rank gets
 * CS_ERR_PEER_LOST, the other nodes a verdict in slice 1, and the other
 * rank goes on.
 */
static int pipe_die_trainer(const char *path, int rank)
{
	struct cs_client *c = NULL;
	struct cs_group *g = NULL, *g2 = NULL;
	struct cs_buf *db = NULL;
	struct cs_dev_mem m;
	cs_req_t r;
	float *x;
	int err, st = -1;

	CHECK(!connect_retry(path, &c), "connect");
	if (!c)
		return 1;
	CHECK(!dev_alloc(&m), "fake device allocation");
	CHECK(!cs_group_join(c, "pipedie", rank, 4, rank, 2, &g), "join");
	err = cs_buf_register_dev(c, &m, RANGE_OFF, COUNT * 4, &db);
	CHECK(!err, "register: %d %s", err, cs_errmsg(c));
	if (!db || !g)
		return 1;
	x = cs_buf_ptr(db);
	err = pipe_sum(c, g, x, x, rank, &r, false);
	CHECK(!err, "post: %d", err);
	if (rank == 0) { /* the victim (local rank 0: its pieces go first) */
		CHECK(ev_wait(0, EV_INTER_START, -1, 1, ALL_OFF, 1) &&
			      ev_wait(0, EV_START, 0, -1, ALL_OFF, 1),
		      "slice 1 on the wire, slice 0 copying out");
		check_report("pipe victim");
		_exit(check_failed ? 1 : 0);
	}
	st = wait_for(c, r);
	CHECK(st == CS_ERR_PEER_LOST, "the survivor's operation: %d", st);
	CHECK(!cs_group_join(c, "after", 0, 1, 0, 1, &g2), "join again");
	CHECK(g2 && !sum_check(c, g2, x, COUNT, 0, 1, &st) && !st,
	      "an operation after the death: %d", st);
	CHECK(!cs_buf_free(db), "free the device range");
	cs_group_leave(g2);
	cs_disconnect(c);
	close(m.fd);
	return check_report("pipe survivor");
}

/* ---- ipc.dev_reduce: the local reduction on the device ---------------- */

#define RED_CHUNK (256u << 10) /* the test sidecar's ipc.dev_chunk */

/* element @i of rank @r's contribution, type @t, operation @k: random
 * bits (NaN, inf, subnormals, -0 among them) in 1 element of 8, else
 * small values whose sums and products stay finite */
static void red_fill(void *x, size_t n, enum cs_dtype t, int r, int k)
{
	unsigned seed = 977u * (unsigned)k + 31u * (unsigned)r + 7u;

	for (size_t i = 0; i < n; i++) {
		unsigned v = rand_r(&seed);
		float f = (float)((int)(v % 2001) - 1000) / 64.0f;

		if (t == CS_F32) {
			if (v % 8 == 3)
				((uint32_t *)x)[i] =
					(uint32_t)rand_r(&seed) * 2654435761u;
			else
				((float *)x)[i] = f;
			continue;
		}
		if (v % 8 == 3) {
			((uint16_t *)x)[i] = (uint16_t)rand_r(&seed);
			continue;
		}
		/* bf16: the f32 value cut to its top half; f16: a finite
		 * positive bit pattern */
		{
			uint32_t b;

			memcpy(&b, &f, 4);
			((uint16_t *)x)[i] = t == CS_BF16
						     ? (uint16_t)(b >> 16)
						     : (uint16_t)(v % 0x7800);
		}
	}
}

/*
 * Three trainers of one local group allreduce device ranges with
 * ipc.dev_reduce on: every type (f32, f16, bf16) and operator, in place
 * and out of place (send and recv different device ranges: rank 0's
 * contribution copied into the destination first), every element
 * compared bit for bit with the fold of the three contributions in rank
 * order by the CPU kernels (collectives/reduce.h); the fake's count of
 * reduce_start pieces must be exactly what the server owes (in place:
 * ranks 1 and 2; else every rank; per ipc.dev_chunk piece). Then a host
 * destination (reduced on the CPU: no piece), and a reduction piece
 * that fails (-EIO to every rank; the next operation succeeds).
 */
static int red_trainer(const char *path, int rank, int size)
{
	static const enum cs_dtype types[] = { CS_F32, CS_F16, CS_BF16 };
	static const enum cs_redop ops[] = { CS_SUM, CS_PROD, CS_MIN, CS_MAX };
	struct cs_client *c = NULL;
	struct cs_group *g = NULL;
	struct cs_buf *db = NULL, *hb = NULL;
	size_t half = (COUNT * 4 / 2) & ~(size_t)63;
	uint8_t *mine, *other;
	uint32_t nbar = 0;
	struct cs_dev_mem m;
	int k = 0, err, st;
	cs_req_t r;

	CHECK(!connect_retry(path, &c), "connect");
	if (!c)
		return 1;
	CHECK(!dev_alloc(&m), "fake device allocation");
	CHECK(!cs_group_join(c, "redg", rank, size, rank, size, &g), "join");
	err = cs_buf_register_dev(c, &m, RANGE_OFF, COUNT * 4, &db);
	CHECK(!err, "register a device range: %d %s", err, cs_errmsg(c));
	CHECK(!cs_buf_alloc(c, COUNT * 4, &hb), "host buffer");
	mine = malloc(half);
	other = malloc(half);
	if (!db || !hb || !g || !mine || !other)
		return 1;
	for (unsigned ti = 0; ti < 3; ti++)
		for (unsigned oi = 0; oi < 4; oi++, k++) {
			enum cs_dtype t = types[ti];
			enum cs_redop op = ops[oi];
			size_t esz = cs_dtype_size(t), n = half / esz;
			uint8_t *x = cs_buf_ptr(db);
			uint8_t *y = k % 2 ? x + half : x; /* out of place */
			uint32_t before = atomic_load(&sh->reduces);
			uint32_t f0 = atomic_load(&sh->reduce_firsts);
			uint32_t pieces =
				(uint32_t)((half + RED_CHUNK - 1) / RED_CHUNK);
			cs_reduce_fn fn = cs_reduce_get(t, op);
			size_t bad = 0;

			red_fill(x, n, t, rank, k);
			err = cs_allreduce(g, x, y, n, t, op, &r);
			st = err ? err : wait_for(c, r);
			CHECK(!st, "%s %s %s: %d %s", cs_dtype_name(t),
			      cs_redop_name(op),
			      k % 2 ? "out of place" : "in place", st,
			      cs_errmsg(c));
			/* the fold in rank order, as the CPU path does */
			red_fill(mine, n, t, 0, k);
			for (int q = 1; q < size; q++) {
				red_fill(other, n, t, q, k);
				fn(mine, mine, other, n);
			}
			for (size_t i = 0; i < n && !st; i++)
				bad += memcmp(y + i * esz, mine + i * esz,
					      esz) != 0;
			CHECK(!bad, "%s %s %s: %zu of %zu elements differ",
			      cs_dtype_name(t), cs_redop_name(op),
			      k % 2 ? "out of place" : "in place", bad, n);
			CHECK(atomic_load(&sh->reduces) - before ==
					      (k % 2 ? 3u : 2u) * pieces &&
				      atomic_load(&sh->reduce_firsts) - f0 ==
					      (k % 2 ? pieces : 0u),
			      "%s %s: %u device reduce pieces (%u first), "
			      "want %u (%u)",
			      cs_dtype_name(t), cs_redop_name(op),
			      atomic_load(&sh->reduces) - before,
			      atomic_load(&sh->reduce_firsts) - f0,
			      (k % 2 ? 3u : 2u) * pieces, k % 2 ? pieces : 0u);
			barrier(size, &nbar); /* the counters are this op's */
		}
	/* a host destination: the CPU reduces, as before */
	{
		uint32_t before = atomic_load(&sh->reduces);
		float *x = cs_buf_ptr(db), *h = cs_buf_ptr(hb);

		for (size_t i = 0; i < 4096; i++)
			x[i] = (float)(rank + 1) * (float)i;
		err = cs_allreduce(g, x, h, 4096, CS_F32, CS_SUM, &r);
		CHECK(!err && !wait_for(c, r), "device -> host");
		for (size_t i = 0; i < 4096; i++)
			if (h[i] != (float)(size * (size + 1) / 2) * (float)i) {
				CHECK(0, "device -> host [%zu]: %g", i, h[i]);
				break;
			}
		CHECK(atomic_load(&sh->reduces) == before,
		      "a host destination reduced on the device");
	}
	/* a reduction piece fails: every rank -EIO; then it works */
	barrier(size, &nbar);
	if (!rank)
		atomic_store(&sh->fail, FAIL_FROM_HOST);
	CHECK(!sum_check(c, g, cs_buf_ptr(db), COUNT, rank, size, &st) &&
		      st == -EIO,
	      "a failed device reduction: %d (want -EIO)", st);
	CHECK(!sum_check(c, g, cs_buf_ptr(db), COUNT, rank, size, &st) && !st,
	      "the operation after a failed device reduction: %d", st);
	free(mine);
	free(other);
	CHECK(!cs_buf_free(db), "free the device range");
	CHECK(!cs_buf_free(hb), "free the host buffer");
	cs_group_leave(g);
	cs_disconnect(c);
	close(m.fd);
	return check_report("red trainer");
}

static pid_t spawn_sidecar(const char *path, enum mode mode)
{
	pid_t pid;

	atomic_store(&sh->nlog, 0);
	pid = fork();
	if (pid == 0)
		_exit(sidecar(path, mode));
	return pid;
}

static void reap(pid_t pid, const char *who)
{
	int st = 0;

	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
		      WEXITSTATUS(st) == 0,
	      "%s exited %#x", who, st);
}

/* three trainers on one node, all the operations (trainer()) */
static void world(const char *path, enum mode mode)
{
	const int size = 3;
	pid_t sc, tr[3];

	atomic_store(&sh->eio, 0);
	atomic_store(&sh->bar, 0);
	sc = spawn_sidecar(path, mode);
	for (int r = 0; r < size; r++) {
		tr[r] = fork();
		if (tr[r] == 0)
			_exit(trainer(path, r, size));
	}
	for (int r = 0; r < size; r++)
		reap(tr[r], "trainer");
	kill(sc, SIGTERM);
	reap(sc, "sidecar");
	unlink(path);
	CHECK(atomic_load(&sh->eio) == 1,
	      "%s: a failed copy out gave -EIO to %u ranks (want 1)",
	      mode == SYNC ? "sync" : "async", atomic_load(&sh->eio));
}

/*
 * Two trainers of one group post an allreduce of device ranges; the fake
 * device stops finishing copies (all of them, or those out: @out); one
 * trainer dies once copies are in flight. The other gets
 * CS_ERR_PEER_LOST and goes on in a new group; the sidecar frees nothing
 * under a copy (sh->uaf; under ASan: no use after free, no leak) and exits
 * cleanly. The copies finish after main saw the victim exit (sh->late).
 */
static void die(const char *path, int out)
{
	pid_t sc, tr[2];
	uint32_t uaf;

	atomic_store(&sh->starts, 0);
	atomic_store(&sh->starts_out, 0);
	atomic_store(&sh->late, 0);
	atomic_store(&sh->uaf, 0);
	atomic_store(&sh->stall, out ? STALL_OUT : STALL_ALL);
	sc = spawn_sidecar(path, ASYNC);
	for (int r = 0; r < 2; r++) {
		tr[r] = fork();
		if (tr[r] == 0)
			_exit(die_trainer(path, r, out));
	}
	reap(tr[0], "victim");
	atomic_store(&sh->victim_dead, 1);
	reap(tr[1], "survivor");
	kill(sc, SIGTERM);
	reap(sc, "sidecar");
	unlink(path);
	uaf = atomic_load(&sh->uaf);
	CHECK(!uaf, "%s: %u copies in flight when their range or shadow went",
	      out ? "out" : "in", uaf);
	CHECK(atomic_load(&sh->late) > 0,
	      "%s: copies in flight when the victim died (finished after: %u)",
	      out ? "out" : "in", atomic_load(&sh->late));
	atomic_store(&sh->stall, STALL_NONE);
	atomic_store(&sh->victim_dead, 0);
}

/* three trainers, the local reduction on the device (red_trainer()) */
static void red_world(const char *path)
{
	const int size = 3;
	pid_t sc, tr[3];

	atomic_store(&sh->bar, 0);
	atomic_store(&sh->uaf, 0);
	atomic_store(&sh->reduces, 0);
	sc = spawn_sidecar(path, ASYNC_RED);
	for (int r = 0; r < size; r++) {
		tr[r] = fork();
		if (tr[r] == 0)
			_exit(red_trainer(path, r, size));
	}
	for (int r = 0; r < size; r++)
		reap(tr[r], "red trainer");
	kill(sc, SIGTERM);
	reap(sc, "sidecar");
	unlink(path);
	/* 12 checked + the failed one + the one after it */
	CHECK(atomic_load(&sh->dev_reduce_ops) == 14 &&
		      atomic_load(&sh->dev_reduce_pieces) ==
			      atomic_load(&sh->reduces),
	      "dev_reduce: stats %llu operations, %llu pieces (the fake ran "
	      "%u)",
	      (unsigned long long)atomic_load(&sh->dev_reduce_ops),
	      (unsigned long long)atomic_load(&sh->dev_reduce_pieces),
	      atomic_load(&sh->reduces));
	CHECK(!atomic_load(&sh->uaf), "dev_reduce: %u pieces under a free",
	      atomic_load(&sh->uaf));
	atomic_store(&sh->fail, FAIL_NONE);
}

/* two trainers of a group over two nodes, pipelined (pipe_trainer()) */
static void pipe_world(const char *path)
{
	pid_t sc, tr[2];

	atomic_store(&sh->bar, 0);
	atomic_store(&sh->uaf, 0);
	sc = spawn_sidecar(path, ASYNC);
	for (int r = 0; r < 2; r++) {
		tr[r] = fork();
		if (tr[r] == 0)
			_exit(pipe_trainer(path, r));
	}
	for (int r = 0; r < 2; r++)
		reap(tr[r], "pipe trainer");
	kill(sc, SIGTERM);
	reap(sc, "sidecar");
	unlink(path);
	/* 12 operations of 6 slices each (4 of them cut short); copies
	 * beside their own network step */
	CHECK(atomic_load(&sh->pipe_ops) == 12 &&
		      atomic_load(&sh->pipe_slices) == 72 &&
		      atomic_load(&sh->pipe_overlap) > 0,
	      "pipe: stats %llu operations, %llu slices, %llu pieces beside "
	      "their step",
	      (unsigned long long)atomic_load(&sh->pipe_ops),
	      (unsigned long long)atomic_load(&sh->pipe_slices),
	      (unsigned long long)atomic_load(&sh->pipe_overlap));
	CHECK(!atomic_load(&sh->uaf),
	      "pipe: %u copies in flight when their range or shadow went",
	      atomic_load(&sh->uaf));
	atomic_store(&sh->hold_sl, 0);
	atomic_store(&sh->fail, FAIL_NONE);
	atomic_store(&sh->fail_skip, 0);
}

static void pipe_die(const char *path)
{
	pid_t sc, tr[2];

	atomic_store(&sh->late, 0);
	atomic_store(&sh->uaf, 0);
	atomic_store(&sh->cancels, 0);
	atomic_store(&sh->hold_sl, 1ull << 1);
	atomic_store(&sh->stall, STALL_OUT);
	sc = spawn_sidecar(path, ASYNC);
	for (int r = 0; r < 2; r++) {
		tr[r] = fork();
		if (tr[r] == 0)
			_exit(pipe_die_trainer(path, r));
	}
	reap(tr[0], "pipe victim");
	atomic_store(&sh->victim_dead, 1);
	reap(tr[1], "pipe survivor");
	kill(sc, SIGTERM);
	reap(sc, "sidecar");
	unlink(path);
	CHECK(!atomic_load(&sh->uaf),
	      "pipe die: %u copies in flight when their range or shadow went",
	      atomic_load(&sh->uaf));
	CHECK(atomic_load(&sh->late) > 0 && atomic_load(&sh->cancels) == 1,
	      "pipe die: copies in flight at the death (finished after: %u), "
	      "the step on the wire cancelled (%u)",
	      atomic_load(&sh->late), atomic_load(&sh->cancels));
	CHECK(ev_count(0, EV_VERDICT, -1, 1, ALL_OFF) == 1,
	      "pipe die: the other nodes told in slice 1 (%u verdicts)",
	      ev_count(0, EV_VERDICT, -1, 1, ALL_OFF));
	atomic_store(&sh->hold_sl, 0);
	atomic_store(&sh->stall, STALL_NONE);
	atomic_store(&sh->victim_dead, 0);
}

/* the settings' checks: a bad chunk or depth names its key */
static void bad_settings(void)
{
	struct cs_ipc_server *srv = NULL;
	struct cs_ipc_cfg cfg;
	char err[256] = "";

	cs_cfg_defaults(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg);
	CHECK(cs_cfg_set(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg,
			 "ipc.dev_chunk", "1k", err, sizeof(err)) == -EINVAL &&
		      strstr(err, "ipc.dev_chunk"),
	      "ipc.dev_chunk=1k: '%s'", err);
	CHECK(cs_cfg_set(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg,
			 "ipc.dev_depth", "0", err, sizeof(err)) == -EINVAL &&
		      strstr(err, "ipc.dev_depth"),
	      "ipc.dev_depth=0: '%s'", err);
	snprintf(cfg.socket_path, sizeof(cfg.socket_path), "/nonexistent/s");
	cfg.dev_chunk = 100;
	CHECK(cs_ipc_server_create(&cfg, NULL, &srv) == -EINVAL,
	      "a server with a 100-byte chunk");
	cfg.dev_chunk = 4096;
	cfg.dev_depth = 0;
	CHECK(cs_ipc_server_create(&cfg, NULL, &srv) == -EINVAL,
	      "a server with depth 0");
	cfg.dev_depth = 8;
	CHECK(cs_cfg_set(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg,
			 "ipc.dev_pipe", "2G", err, sizeof(err)) == -EINVAL &&
		      strstr(err, "ipc.dev_pipe"),
	      "ipc.dev_pipe=2G: '%s'", err);
	cfg.dev_pipe = 4096; /* within the table's bounds, under 64K */
	CHECK(cs_ipc_server_create(&cfg, NULL, &srv) == -EINVAL,
	      "a server with a 4K pipeline slice");
}

int main(void)
{
	char dir[] = "/tmp/cs-ipc-dev-XXXXXX", path[64];
	pid_t sc, tr[1];

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED || !mkdtemp(dir))
		return 1;
	bad_settings();
	snprintf(path, sizeof(path), "%s/sock", dir);
	world(path, SYNC);
	CHECK(!atomic_load(&sh->starts), "sync: no asynchronous copy");
	world(path, ASYNC);
	CHECK(atomic_load(&sh->starts) > 100, "async: %u pieces",
	      atomic_load(&sh->starts));
	/* ipc.dev_reduce off (the default): the CPU reduces, though the
	 * device ops could */
	CHECK(!atomic_load(&sh->reduces) && !atomic_load(&sh->dev_reduce_ops),
	      "async: %u device reduce pieces without ipc.dev_reduce",
	      atomic_load(&sh->reduces));
	red_world(path);

	sc = spawn_sidecar(path, ASYNC);
	tr[0] = fork();
	if (tr[0] == 0)
		_exit(wire_trainer(path));
	reap(tr[0], "trainer over the wire");
	atomic_store(&sh->stall, STALL_NONE);
	kill(sc, SIGTERM);
	reap(sc, "sidecar");
	unlink(path);

	for (int out = 0; out < 2; out++)
		die(path, out);
	pipe_world(path);
	pipe_die(path);

	snprintf(path, sizeof(path), "%s/sock2", dir);
	sc = spawn_sidecar(path, NO_DEV);
	tr[0] = fork();
	if (tr[0] == 0)
		_exit(no_gpu_trainer(path));
	reap(tr[0], "trainer");
	kill(sc, SIGTERM);
	reap(sc, "sidecar");
	unlink(path);
	rmdir(dir);
	return check_report("test_ipc_dev");
}
