// SPDX-License-Identifier: MIT
/* PS persistence over io_uring: SSD spill file and checkpoints (ps_io.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <liburing.h>

#define CS_LOG_MODULE "ps"
#include "collectives/ps/ps_io.h"
#include "internal/log.h"

/* ---- SSD spill: batch I/O on the file's ring ------------------------------
 */

/* user_data of the reads of the batch started by spill_read_start */
#define SPILL_ASYNC (1ull << 63)

struct cs_ps_uring_spill {
	int fd;
	unsigned depth;
	struct io_uring ring;
	char *made; /* cs_ps_spill_create's file: removed at close */
	/* the batch in flight (spill_read_start): requests, lengths */
	unsigned a_n, a_got;
	int a_rc;
	uint32_t *a_len;
};

/* A completion of the batch in flight. */
static void async_cqe(struct cs_ps_uring_spill *s, struct io_uring_cqe *cqe)
{
	uint64_t i = io_uring_cqe_get_data64(cqe) & ~SPILL_ASYNC;

	if (cqe->res < 0 && !s->a_rc)
		s->a_rc = cqe->res;
	else if (i < s->a_n && cqe->res != (int)s->a_len[i] && !s->a_rc)
		s->a_rc = -EIO;
	s->a_got++;
}

/* Submit @n reads or writes (up to the ring's depth at once) and wait for
 * all of them; every one must move its whole length. Completions of the
 * batch in flight that come meanwhile are counted for it. */
static int ring_batch(struct cs_ps_uring_spill *s, struct cs_ps_io_req *r,
		      unsigned n, bool wr)
{
	struct io_uring *ring = &s->ring;
	unsigned depth = s->depth;
	int fd = s->fd, rc = 0;

	for (unsigned i0 = 0; i0 < n; i0 += depth) {
		unsigned k = CS_MIN(depth, n - i0), got = 0;
		int ret;

		for (unsigned i = 0; i < k; i++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

			if (!sqe)
				return -EBUSY; /* cannot happen: k <= depth */
			if (wr)
				io_uring_prep_write(sqe, fd, r[i0 + i].buf,
						    r[i0 + i].len,
						    r[i0 + i].off);
			else
				io_uring_prep_read(sqe, fd, r[i0 + i].buf,
						   r[i0 + i].len,
						   r[i0 + i].off);
			io_uring_sqe_set_data64(sqe, i0 + i);
		}
		ret = io_uring_submit(ring);
		if (ret < 0)
			return ret;
		while (got < k) {
			struct io_uring_cqe *cqe;
			uint64_t i;

			ret = io_uring_wait_cqe(ring, &cqe);
			if (ret == -EINTR)
				continue;
			if (ret < 0)
				return ret;
			i = io_uring_cqe_get_data64(cqe);
			if (i & SPILL_ASYNC) {
				async_cqe(s, cqe);
				io_uring_cqe_seen(ring, cqe);
				continue;
			}
			if (cqe->res < 0 && !rc)
				rc = cqe->res;
			else if (i < n && cqe->res != (int)r[i].len && !rc)
				rc = -EIO; /* short: a file shorter than ours */
			io_uring_cqe_seen(ring, cqe);
			got++;
		}
		if (rc)
			return rc;
	}
	return 0;
}

static int spill_write(void *ctx, struct cs_ps_io_req *r, unsigned n)
{
	return ring_batch(ctx, r, n, true);
}

static int spill_read(void *ctx, struct cs_ps_io_req *r, unsigned n)
{
	return ring_batch(ctx, r, n, false);
}

/* Reads submitted, not waited for: spill_read_poll completes them. At
 * most the ring's depth (the completion queue holds twice that: room for
 * a blocking batch meanwhile). */
static int spill_read_start(void *ctx, const struct cs_ps_io_req *r, unsigned n)
{
	struct cs_ps_uring_spill *s = ctx;
	int ret;

	if (s->a_n)
		return -EBUSY;
	if (n > s->depth)
		return -E2BIG;
	if (!s->a_len) {
		s->a_len = malloc(sizeof(*s->a_len) * s->depth);
		if (!s->a_len)
			return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

		if (!sqe)
			return -EBUSY; /* cannot happen: n <= depth, none queued
					*/
		io_uring_prep_read(sqe, s->fd, r[i].buf, r[i].len, r[i].off);
		io_uring_sqe_set_data64(sqe, SPILL_ASYNC | i);
		s->a_len[i] = r[i].len;
	}
	s->a_n = n;
	s->a_got = 0;
	s->a_rc = 0;
	ret = io_uring_submit(&s->ring);
	if (ret < 0) {
		/* nothing went: the prepared entries stay queued; the next
		 * submit takes them, so wait for them as if they went */
		return ret == -EAGAIN || ret == -EINTR ? 0 : ret;
	}
	return 0;
}

static int spill_read_poll(void *ctx, bool wait)
{
	struct cs_ps_uring_spill *s = ctx;
	int rc;

	while (s->a_got < s->a_n) {
		struct io_uring_cqe *cqe;
		int ret;

		if (io_uring_sq_ready(&s->ring)) /* a submit that failed */
			(void)io_uring_submit(&s->ring);
		ret = wait ? io_uring_wait_cqe(&s->ring, &cqe)
			   : io_uring_peek_cqe(&s->ring, &cqe);
		if (ret == -EINTR)
			continue;
		if (ret == -EAGAIN && !wait)
			return 1;
		if (ret < 0) {
			s->a_n = 0;
			return ret;
		}
		async_cqe(s, cqe);
		io_uring_cqe_seen(&s->ring, cqe);
	}
	rc = s->a_rc;
	s->a_n = 0;
	return rc;
}

static const struct cs_ps_spill_ops spill_uring_ops = {
	.write = spill_write,
	.read = spill_read,
	.read_start = spill_read_start,
	.read_poll = spill_read_poll,
};

int cs_ps_spill_open(struct cs_ps_uring_spill **out, const char *path,
		     unsigned qdepth, struct cs_ps_spill *spill)
{
	struct cs_ps_uring_spill *s;
	int rc;

	if (qdepth == 0 || qdepth > 4096)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->depth = qdepth;
	s->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (s->fd < 0) {
		rc = -errno;
		goto out_free;
	}
	rc = io_uring_queue_init(qdepth, &s->ring, 0);
	if (rc)
		goto out_close;
	spill->ops = &spill_uring_ops;
	spill->ctx = s;
	*out = s;
	return 0;
out_close:
	close(s->fd);
out_free:
	free(s);
	return rc;
}

int cs_ps_spill_create(struct cs_ps_uring_spill **out, const char *dir,
		       const char *prefix, unsigned qdepth,
		       struct cs_ps_spill *spill, char *path, size_t plen)
{
	struct cs_ps_uring_spill *s;
	char name[PATH_MAX];
	int n, rc;

	if (qdepth == 0 || qdepth > 4096 || !dir || !*dir || !prefix ||
	    strchr(prefix, '/'))
		return -EINVAL;
	n = snprintf(name, sizeof(name), "%s/%s.XXXXXX.spill", dir, prefix);
	if (n < 0 || (size_t)n >= sizeof(name))
		return -ENAMETOOLONG;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->depth = qdepth;
	s->fd = mkostemps(name, 6, O_CLOEXEC);
	if (s->fd < 0) {
		rc = -errno;
		goto out_free;
	}
	s->made = strdup(name);
	if (!s->made) {
		rc = -ENOMEM;
		goto out_close;
	}
	rc = io_uring_queue_init(qdepth, &s->ring, 0);
	if (rc)
		goto out_close;
	if (path && plen)
		snprintf(path, plen, "%s", name);
	spill->ops = &spill_uring_ops;
	spill->ctx = s;
	*out = s;
	return 0;
out_close:
	close(s->fd);
	(void)unlink(name);
	free(s->made);
out_free:
	free(s);
	return rc;
}

void cs_ps_spill_close(struct cs_ps_uring_spill *s)
{
	if (!s)
		return;
	if (s->a_n) /* the reads land in their caller's buffer */
		(void)spill_read_poll(s, true);
	free(s->a_len);
	io_uring_queue_exit(&s->ring);
	close(s->fd);
	if (s->made && unlink(s->made))
		CS_WARN("spill file %s: not removed: %s", s->made,
			strerror(errno));
	free(s->made);
	free(s);
}

/* ---- checkpoint file layout -------------------------------------------- */

/*
 * Header, host byte order (the endian word says which), CS_PS_CKPT_HDR
 * bytes, zero padded; hdr_sum covers every byte before it.
 */
struct ckpt_hdr {
	char magic[8];
	uint32_t version;
	uint32_t endian; /* 0x01020304 as written */
	uint32_t hdr_bytes;
	uint32_t frame_bytes;
	uint64_t nrec;
	uint64_t clock;
	uint64_t data_bytes;
	uint64_t data_sum; /* CRC-32C of the records (data_sum()) */
	uint32_t id, dim, dtype, mode, staleness, workers;
	uint64_t key_max;
	uint32_t opt_kind;
	float lr, momentum, beta1, beta2, eps, initial_acc;
	uint32_t init_kind;
	uint64_t init_seed;
	float init_scale;
	/* version 2: where the file sits in a sharded checkpoint */
	uint32_t shard; /* this file's server id, 0 .. nshards - 1 */
	uint32_t nshards; /* servers of the map that wrote it */
	uint32_t vnodes; /* that map's virtual nodes per server; 0: none */
	uint64_t name_tag; /* cs_ps_ckpt_name_tag of the table's name */
	uint64_t hdr_sum;
};
_Static_assert(offsetof(struct ckpt_hdr, name_tag) == 144 &&
		       offsetof(struct ckpt_hdr, hdr_sum) == 152,
	       "no padding in the ckpt header (its checksum covers it)");
_Static_assert(sizeof(struct ckpt_hdr) <= CS_PS_CKPT_HDR, "ckpt header");

#define FNV_OFF 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * FNV_PRIME;
	return h;
}

/*
 * The records' checksum (data_sum, version 3): CRC-32C (Castagnoli,
 * reflected 0x82f63b78, initial and final xor ~0), streamed over any split
 * of the data. SSE4.2's crc32 instruction where the CPU has it: about
 * 7 GB/s on one core of the development VM, where the byte-wise FNV-1a
 * of versions 1-2 ran at 1 GB/s, a second of the writer thread's CPU per
 * GiB checkpointed (and as long again to check it on restore); a table
 * elsewhere. The header keeps FNV-1a (152 bytes).
 */
static uint32_t crc32c_tab[256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc32c_tab[i] = c;
	}
}

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *b, size_t n)
{
	pthread_once(&crc32c_once, crc32c_init);
	while (n--)
		crc = crc32c_tab[(crc ^ *b++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(uint32_t crc, const uint8_t *b, size_t n)
{
	uint64_t x = crc;

	for (; n >= 8; n -= 8, b += 8) {
		uint64_t w;

		memcpy(&w, b, 8);
		x = __builtin_ia32_crc32di(x, w);
	}
	crc = (uint32_t)x;
	while (n--)
		crc = __builtin_ia32_crc32qi(crc, *b++);
	return crc;
}
#endif

/* The running checksum of the records: cs_ps_data_sum(0, ...) first. */
static uint64_t data_sum(uint64_t sum, const void *p, size_t n)
{
	uint32_t crc = ~(uint32_t)sum;

#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		return ~crc32c_hw(crc, p, n) & 0xffffffffu;
#endif
	return ~crc32c_sw(crc, p, n) & 0xffffffffu;
}

static void hdr_fill(struct ckpt_hdr *h, const struct cs_ps_table_spec *s,
		     size_t frame_bytes)
{
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, CS_PS_CKPT_MAGIC, 8);
	h->version = CS_PS_CKPT_VERSION;
	h->endian = 0x01020304;
	h->hdr_bytes = CS_PS_CKPT_HDR;
	h->frame_bytes = (uint32_t)frame_bytes;
	h->id = s->id;
	h->dim = s->dim;
	h->dtype = (uint32_t)s->dtype;
	h->mode = (uint32_t)s->mode;
	h->staleness = s->staleness;
	h->workers = s->workers;
	h->key_max = s->key_max;
	h->opt_kind = (uint32_t)s->opt.kind;
	h->lr = s->opt.lr;
	h->momentum = s->opt.momentum;
	h->beta1 = s->opt.beta1;
	h->beta2 = s->opt.beta2;
	h->eps = s->opt.eps;
	h->initial_acc = s->opt.initial_acc;
	h->init_kind = (uint32_t)s->init.kind;
	h->init_seed = s->init.seed;
	h->init_scale = s->init.scale;
	h->shard = 0;
	h->nshards = 1;
}

uint64_t cs_ps_ckpt_name_tag(const char *name)
{
	return fnv(FNV_OFF, name, strlen(name));
}

/* ---- checkpoint writer -----------------------------------------------------
 */

struct ckpt_item {
	struct ckpt_item *next;
	void *buf; /* NULL: the end marker */
	size_t len;
	size_t wlen; /* written: len, or rounded up for O_DIRECT */
	int rc;
	uint64_t nrec;
};

struct cs_ps_ckpt {
	char path[PATH_MAX], tmp[PATH_MAX + 8], dir[PATH_MAX];
	struct ckpt_hdr hdr;
	unsigned depth;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct ckpt_item *head, **tail;
	size_t queued;
	uint64_t clock;
	bool done;
	int result;
};

static void q_push(struct cs_ps_ckpt *c, struct ckpt_item *it)
{
	pthread_mutex_lock(&c->mu);
	it->next = NULL;
	*c->tail = it;
	c->tail = &it->next;
	c->queued += it->len;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static struct ckpt_item *q_pop(struct cs_ps_ckpt *c)
{
	struct ckpt_item *it;

	pthread_mutex_lock(&c->mu);
	while (!c->head)
		pthread_cond_wait(&c->cv, &c->mu);
	it = c->head;
	c->head = it->next;
	if (!c->head)
		c->tail = &c->head;
	pthread_mutex_unlock(&c->mu);
	return it;
}

static void q_written(struct cs_ps_ckpt *c, size_t len)
{
	pthread_mutex_lock(&c->mu);
	c->queued -= len;
	pthread_mutex_unlock(&c->mu);
}

static int sink_chunk(void *ctx, void *buf, size_t len, uint64_t nrec)
{
	struct cs_ps_ckpt *c = ctx;
	struct ckpt_item *it = malloc(sizeof(*it));

	if (!it) {
		free(buf);
		return -ENOMEM;
	}
	*it = (struct ckpt_item){ .buf = buf, .len = len, .nrec = nrec };
	q_push(c, it);
	return 0;
}

/* The end marker when none can be allocated (one writer at a time may
 * use it: the snapshot is one per store, and it only ends once). */
static struct ckpt_item ckpt_oom_end = { .rc = -ENOMEM };

static void item_free(struct ckpt_item *it)
{
	if (it != &ckpt_oom_end)
		free(it);
}

static void sink_end(void *ctx, uint64_t nrec, int rc)
{
	struct cs_ps_ckpt *c = ctx;
	struct ckpt_item *it = malloc(sizeof(*it));

	if (!it) {
		q_push(c, &ckpt_oom_end);
		return;
	}
	*it = (struct ckpt_item){ .rc = rc, .nrec = nrec };
	q_push(c, it);
}

static int ring_one(struct io_uring *ring, struct io_uring_sqe *sqe)
{
	struct io_uring_cqe *cqe;
	int rc;

	(void)sqe;
	rc = io_uring_submit(ring);
	if (rc < 0)
		return rc;
	do
		rc = io_uring_wait_cqe(ring, &cqe);
	while (rc == -EINTR);
	if (rc < 0)
		return rc;
	rc = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return rc;
}

static int ckpt_finish(struct cs_ps_ckpt *c, struct io_uring *ring, int fd,
		       uint64_t nrec, uint64_t data_bytes, uint64_t sum)
{
	uint8_t *hb;
	struct io_uring_sqe *sqe;
	int rc, dfd;

	/* the records are written; drop the last chunk's O_DIRECT padding */
	if (ftruncate(fd, (off_t)(CS_PS_CKPT_HDR + data_bytes)))
		return -errno;
	pthread_mutex_lock(&c->mu);
	c->hdr.nrec = nrec;
	c->hdr.clock = c->clock;
	pthread_mutex_unlock(&c->mu);
	c->hdr.data_bytes = data_bytes;
	c->hdr.data_sum = sum;
	c->hdr.hdr_sum =
		fnv(FNV_OFF, &c->hdr, offsetof(struct ckpt_hdr, hdr_sum));
	hb = aligned_alloc(CS_PS_CKPT_ALIGN, CS_PS_CKPT_HDR);
	if (!hb)
		return -ENOMEM;
	memset(hb, 0, CS_PS_CKPT_HDR);
	memcpy(hb, &c->hdr, sizeof(c->hdr));
	sqe = io_uring_get_sqe(ring);
	io_uring_prep_write(sqe, fd, hb, CS_PS_CKPT_HDR, 0);
	rc = ring_one(ring, sqe);
	free(hb);
	if (rc != (int)CS_PS_CKPT_HDR)
		return rc < 0 ? rc : -EIO;
	sqe = io_uring_get_sqe(ring);
	io_uring_prep_fsync(sqe, fd, 0);
	rc = ring_one(ring, sqe);
	if (rc < 0)
		return rc;
	sqe = io_uring_get_sqe(ring);
	io_uring_prep_renameat(sqe, AT_FDCWD, c->tmp, AT_FDCWD, c->path, 0);
	rc = ring_one(ring, sqe);
	if (rc == -EINVAL && rename(c->tmp, c->path) == 0)
		rc = 0; /* a kernel without IORING_OP_RENAMEAT */
	if (rc < 0)
		return rc;
	/* the rename itself is durable once the directory is synced */
	dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	sqe = io_uring_get_sqe(ring);
	io_uring_prep_fsync(sqe, dfd, 0);
	rc = ring_one(ring, sqe);
	close(dfd);
	return rc < 0 ? rc : 0;
}

/* Wait for one write in flight; the first failure is kept in *rc. */
static void ckpt_reap(struct cs_ps_ckpt *c, struct io_uring *ring,
		      unsigned *n_in, int *rc)
{
	struct io_uring_cqe *cqe;
	struct ckpt_item *w;

	io_uring_submit(ring);
	if (io_uring_wait_cqe(ring, &cqe))
		return;
	w = (struct ckpt_item *)io_uring_cqe_get_data(cqe);
	if (cqe->res != (int)w->wlen && !*rc)
		*rc = cqe->res < 0 ? cqe->res : -EIO;
	io_uring_cqe_seen(ring, cqe);
	q_written(c, w->len);
	free(w->buf);
	free(w);
	(*n_in)--;
}

/*
 * The file is opened with O_DIRECT where its file system takes it: the
 * chunks (cs_ps_snap_sink.align) go from the snapshot's buffers to the
 * device without a copy into the page cache, whose copy and writeback cost
 * about a second of CPU per GiB here (BENCHMARKS.md), beside the lcore and
 * the trainers. The last, short chunk is padded to the block and the file
 * cut back to its length before the header goes in. A chunk that is not
 * aligned (a sink without .align) turns O_DIRECT off for the rest.
 */
static void *ckpt_thread(void *arg)
{
	struct cs_ps_ckpt *c = arg;
	uint64_t off = CS_PS_CKPT_HDR, sum = 0, nrec = 0;
	unsigned n_in = 0;
	struct io_uring ring;
	bool direct = true;
	int fd, rc;

	fd = open(c->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT,
		  0600);
	if (fd < 0 && errno == EINVAL) {
		direct = false; /* e.g. a tmpfs of an older kernel */
		fd = open(c->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			  0600);
	}
	if (fd < 0) {
		rc = -errno;
		goto out_drain;
	}
	rc = io_uring_queue_init(c->depth + 4, &ring, 0);
	if (rc) {
		close(fd);
		goto out_drain;
	}
	for (;;) {
		struct ckpt_item *it = q_pop(c);
		struct io_uring_sqe *sqe;

		if (!it->buf) {
			int end_rc = it->rc;

			nrec = it->nrec;
			item_free(it);
			while (n_in) /* reap what is in flight */
				ckpt_reap(c, &ring, &n_in, &rc);
			if (!rc)
				rc = end_rc;
			if (!rc)
				rc = ckpt_finish(c, &ring, fd, nrec,
						 off - CS_PS_CKPT_HDR, sum);
			break;
		}
		sum = data_sum(sum, it->buf, it->len);
		it->wlen = it->len;
		if (direct && (off % CS_PS_CKPT_ALIGN ||
			       (uintptr_t)it->buf % CS_PS_CKPT_ALIGN)) {
			/* not aligned: buffered from here on */
			while (n_in)
				ckpt_reap(c, &ring, &n_in, &rc);
			if (fcntl(fd, F_SETFL,
				  fcntl(fd, F_GETFL) & ~O_DIRECT) &&
			    !rc)
				rc = -errno;
			direct = false;
		} else if (direct && it->len % CS_PS_CKPT_ALIGN) {
			/* the last chunk: its buffer is whole blocks */
			it->wlen = (it->len + CS_PS_CKPT_ALIGN - 1) &
				   ~(size_t)(CS_PS_CKPT_ALIGN - 1);
			memset((uint8_t *)it->buf + it->len, 0,
			       it->wlen - it->len);
		}
		while (n_in >= c->depth || !(sqe = io_uring_get_sqe(&ring)))
			ckpt_reap(c, &ring, &n_in, &rc);
		io_uring_prep_write(sqe, fd, it->buf, (unsigned)it->wlen, off);
		io_uring_sqe_set_data(sqe, it);
		off += it->len;
		n_in++;
		io_uring_submit(&ring);
	}
	io_uring_queue_exit(&ring);
	close(fd);
	if (rc)
		unlink(c->tmp);
	goto out;
out_drain:
	/* no file: take the queue down to its end marker */
	for (;;) {
		struct ckpt_item *it = q_pop(c);
		bool end = !it->buf;

		q_written(c, it->len);
		free(it->buf);
		item_free(it);
		if (end)
			break;
	}
out:
	if (rc)
		CS_WARN("checkpoint %s: %s", c->path, strerror(-rc));
	pthread_mutex_lock(&c->mu);
	c->result = rc;
	c->done = true;
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int cs_ps_ckpt_start(struct cs_ps_ckpt **out, const char *path,
		     struct cs_ps_store *st, uint32_t table, unsigned qdepth,
		     struct cs_ps_snap_sink *sink)
{
	const struct cs_ps_table_spec *spec = cs_ps_store_spec(st, table);
	struct cs_ps_ckpt *c;
	char *slash;
	int rc;

	if (!spec)
		return -ENOENT;
	if (qdepth == 0 || qdepth > 250 || strlen(path) >= PATH_MAX)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	strcpy(c->path, path);
	snprintf(c->tmp, sizeof(c->tmp), "%s.tmp", path);
	strcpy(c->dir, path);
	slash = strrchr(c->dir, '/');
	if (!slash)
		strcpy(c->dir, ".");
	else if (slash == c->dir)
		c->dir[1] = 0;
	else
		*slash = 0;
	hdr_fill(&c->hdr, spec, cs_ps_store_frame_bytes(st, table));
	c->depth = qdepth;
	c->tail = &c->head;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	rc = -pthread_create(&c->thr, NULL, ckpt_thread, c);
	if (rc) {
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		free(c);
		return rc;
	}
	sink->chunk = sink_chunk;
	sink->end = sink_end;
	sink->ctx = c;
	sink->align = CS_PS_CKPT_ALIGN;
	*out = c;
	return 0;
}

void cs_ps_ckpt_set_shard(struct cs_ps_ckpt *c, uint32_t shard,
			  uint32_t nshards, uint32_t vnodes, uint64_t tag)
{
	pthread_mutex_lock(&c->mu);
	c->hdr.shard = shard;
	c->hdr.nshards = nshards;
	c->hdr.vnodes = vnodes;
	c->hdr.name_tag = tag;
	pthread_mutex_unlock(&c->mu);
}

void cs_ps_ckpt_set_clock(struct cs_ps_ckpt *c, uint64_t clock)
{
	pthread_mutex_lock(&c->mu);
	c->clock = clock;
	pthread_mutex_unlock(&c->mu);
}

size_t cs_ps_ckpt_queued(struct cs_ps_ckpt *c)
{
	size_t n;

	pthread_mutex_lock(&c->mu);
	n = c->queued;
	pthread_mutex_unlock(&c->mu);
	return n;
}

bool cs_ps_ckpt_done(struct cs_ps_ckpt *c)
{
	bool d;

	pthread_mutex_lock(&c->mu);
	d = c->done;
	pthread_mutex_unlock(&c->mu);
	return d;
}

int cs_ps_ckpt_wait(struct cs_ps_ckpt *c)
{
	int rc;

	pthread_join(c->thr, NULL);
	rc = c->result;
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c);
	return rc;
}

/* ---- restore --------------------------------------------------------------
 */

static int read_all(const char *path, uint8_t **out, size_t *len)
{
	struct io_uring ring;
	struct stat sb;
	uint8_t *buf;
	size_t off = 0;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb)) {
		rc = -errno;
		goto out_close;
	}
	if (sb.st_size < CS_PS_CKPT_HDR ||
	    (uint64_t)sb.st_size > SIZE_MAX / 2) {
		rc = -EBADMSG;
		goto out_close;
	}
	buf = malloc((size_t)sb.st_size);
	if (!buf) {
		rc = -ENOMEM;
		goto out_close;
	}
	rc = io_uring_queue_init(8, &ring, 0);
	if (rc)
		goto out_buf;
	while (off < (size_t)sb.st_size) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
		size_t n = CS_MIN((size_t)sb.st_size - off, (size_t)1 << 26);

		io_uring_prep_read(sqe, fd, buf + off, (unsigned)n, off);
		rc = ring_one(&ring, sqe);
		if (rc <= 0) {
			rc = rc < 0 ? rc : -EBADMSG; /* shrank under us */
			break;
		}
		off += (size_t)rc;
		rc = 0;
	}
	io_uring_queue_exit(&ring);
	if (rc)
		goto out_buf;
	close(fd);
	*out = buf;
	*len = off;
	return 0;
out_buf:
	free(buf);
out_close:
	close(fd);
	return rc;
}

int cs_ps_ckpt_restore(struct cs_ps_store *st, uint32_t table, const char *path)
{
	const struct cs_ps_table_spec *spec = cs_ps_store_spec(st, table);
	struct ckpt_hdr h, want;
	size_t len = 0, fb, rec;
	uint64_t total, resident;
	uint8_t *buf = NULL;
	int rc;

	if (!spec)
		return -ENOENT;
	cs_ps_store_nrows(st, table, &total, &resident);
	if (total)
		return -EEXIST;
	rc = read_all(path, &buf, &len);
	if (rc)
		return rc;
	memcpy(&h, buf, sizeof(h));
	fb = cs_ps_store_frame_bytes(st, table);
	rec = sizeof(struct cs_ps_rec_head) + fb;
	hdr_fill(&want, spec, fb);
	rc = -EBADMSG;
	if (memcmp(h.magic, CS_PS_CKPT_MAGIC, 8) ||
	    h.version != CS_PS_CKPT_VERSION || h.endian != 0x01020304 ||
	    h.hdr_bytes != CS_PS_CKPT_HDR ||
	    h.hdr_sum != fnv(FNV_OFF, &h, offsetof(struct ckpt_hdr, hdr_sum)))
		goto out;
	rc = -EINVAL; /* a sound file of another table */
	if (h.frame_bytes != fb || h.id != want.id || h.dim != want.dim ||
	    h.dtype != want.dtype || h.key_max != want.key_max ||
	    h.opt_kind != want.opt_kind)
		goto out;
	rc = -EBADMSG;
	if (h.data_bytes != len - CS_PS_CKPT_HDR || h.data_bytes % rec ||
	    h.data_bytes / rec != h.nrec)
		goto out; /* truncated or padded */
	if (data_sum(0, buf + CS_PS_CKPT_HDR, h.data_bytes) != h.data_sum)
		goto out;
	for (uint64_t i = 0; i < h.nrec; i++) {
		const uint8_t *p = buf + CS_PS_CKPT_HDR + i * rec;
		struct cs_ps_rec_head rh;

		memcpy(&rh, p, sizeof(rh));
		if (rh.key >= spec->key_max)
			goto out;
	}
	for (uint64_t i = 0; i < h.nrec; i++) {
		const uint8_t *p = buf + CS_PS_CKPT_HDR + i * rec;
		struct cs_ps_rec_head rh;

		memcpy(&rh, p, sizeof(rh));
		rc = cs_ps_store_load_rec(st, table, &rh, p + sizeof(rh), fb);
		if (rc)
			goto out;
	}
	rc = cs_ps_store_set_clock(st, table, h.clock);
out:
	free(buf);
	return rc;
}

/* ---- restore onto another set of shards ------------------------------------
 */

struct cs_ps_restore {
	struct cs_ps_store *st;
	uint32_t table;
	struct cs_ps_restore_src src;
	struct ckpt_hdr want; /* the table's spec, as a header */
	size_t fb, rec; /* frame and record bytes */
	uint64_t key_max;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool ready;
	bool complete; /* every kept row loaded, the clock set */
	struct cs_ps_restore_info info;
	uint8_t *keep; /* the records this shard owns */
	size_t keep_len, keep_cap;
	uint64_t nkeep, next;
};

static int rs_refuse(struct cs_ps_restore *r, int rc,
		     enum cs_ps_restore_why why, uint32_t shard)
{
	r->info.why = why;
	r->info.bad_shard = shard;
	return rc;
}

/* A header read alone (shard 0's, for N and the clock). */
static int read_hdr(const char *path, struct ckpt_hdr *h)
{
	uint8_t b[CS_PS_CKPT_HDR];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = pread(fd, b, sizeof(b), 0);
	close(fd);
	if (n < 0)
		return -errno;
	if (n != (ssize_t)sizeof(b))
		return -EBADMSG;
	memcpy(h, b, sizeof(*h));
	return 0;
}

/* Header @h of shard @s's file against the table and shard 0's @h0
 * (NULL: @h is shard 0's). */
static int rs_check_hdr(struct cs_ps_restore *r, const struct ckpt_hdr *h,
			uint32_t s, const struct ckpt_hdr *h0)
{
	const struct ckpt_hdr *w = &r->want;

	if (memcmp(h->magic, CS_PS_CKPT_MAGIC, 8) ||
	    h->version != CS_PS_CKPT_VERSION || h->endian != 0x01020304 ||
	    h->hdr_bytes != CS_PS_CKPT_HDR ||
	    h->hdr_sum != fnv(FNV_OFF, h, offsetof(struct ckpt_hdr, hdr_sum)))
		return rs_refuse(r, -EBADMSG, CS_PS_RS_DAMAGED, s);
	if (h->name_tag != r->src.tag)
		return rs_refuse(r, -EINVAL, CS_PS_RS_OTHER_TABLE, s);
	if (h->frame_bytes != r->fb || h->id != w->id || h->dim != w->dim ||
	    h->dtype != w->dtype || h->key_max != w->key_max ||
	    h->opt_kind != w->opt_kind)
		return rs_refuse(r, -EINVAL, CS_PS_RS_SPEC, s);
	if (h->shard != s || h->nshards == 0 ||
	    h->nshards > CS_PS_SERVERS_MAX || (h->nshards > 1 && !h->vnodes) ||
	    (h0 && (h->nshards != h0->nshards || h->vnodes != h0->vnodes)))
		return rs_refuse(r, -EBADMSG, CS_PS_RS_SET, s);
	if (h0 && h->clock != h0->clock)
		return rs_refuse(r, -EBADMSG, CS_PS_RS_CLOCK, s);
	return 0;
}

static int keep_put(struct cs_ps_restore *r, const uint8_t *p)
{
	if (r->keep_len + r->rec > r->keep_cap) {
		size_t cap = r->keep_cap ? r->keep_cap * 2 : r->rec * 1024;
		uint8_t *q = realloc(r->keep, cap);

		if (!q)
			return -ENOMEM;
		r->keep = q;
		r->keep_cap = cap;
	}
	memcpy(r->keep + r->keep_len, p, r->rec);
	r->keep_len += r->rec;
	r->nkeep++;
	return 0;
}

/* Shard @s's file: read whole, checked, this shard's records kept. */
static int rs_file(struct cs_ps_restore *r, uint32_t s,
		   const struct ckpt_hdr *h0, const struct cs_ps_shardmap *old,
		   const struct cs_ps_shardmap *cur, uint32_t self)
{
	char path[PATH_MAX];
	struct ckpt_hdr h;
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	rc = cs_ps_ckpt_shard_path(path, sizeof(path), r->src.dir, r->src.name,
				   s);
	if (rc)
		return rs_refuse(r, rc, CS_PS_RS_IO, s);
	rc = read_all(path, &buf, &len);
	if (rc == -ENOENT)
		return rs_refuse(r, rc, CS_PS_RS_MISSING, s);
	if (rc == -EBADMSG)
		return rs_refuse(r, rc, CS_PS_RS_DAMAGED, s);
	if (rc)
		return rs_refuse(r, rc, CS_PS_RS_IO, s);
	r->info.files_read++;
	memcpy(&h, buf, sizeof(h));
	rc = rs_check_hdr(r, &h, s, h0);
	if (rc)
		goto out;
	rc = rs_refuse(r, -EBADMSG, CS_PS_RS_DAMAGED, s);
	if (h.data_bytes != len - CS_PS_CKPT_HDR || h.data_bytes % r->rec ||
	    h.data_bytes / r->rec != h.nrec)
		goto out; /* truncated or padded */
	if (data_sum(0, buf + CS_PS_CKPT_HDR, h.data_bytes) != h.data_sum)
		goto out;
	for (uint64_t i = 0; i < h.nrec; i++) {
		const uint8_t *p = buf + CS_PS_CKPT_HDR + i * r->rec;
		struct cs_ps_rec_head rh;

		memcpy(&rh, p, sizeof(rh));
		if (rh.key >= r->key_max) {
			rc = rs_refuse(r, -EBADMSG, CS_PS_RS_DAMAGED, s);
			goto out;
		}
		/* a row of another shard: not a file of this layout */
		if (old && cs_ps_shard_of(old, h.id, rh.key) != s) {
			rc = rs_refuse(r, -EBADMSG, CS_PS_RS_SET, s);
			goto out;
		}
		r->info.recs_read++;
		if (cur && cs_ps_shard_of(cur, r->table, rh.key) != self)
			continue;
		rc = keep_put(r, p);
		if (rc) {
			rs_refuse(r, rc, CS_PS_RS_IO, s);
			goto out;
		}
	}
	rc = 0;
out:
	free(buf);
	return rc;
}

/* Whether @m's servers are 0 .. n - 1 with @vnodes each. */
static bool map_is(const struct cs_ps_shardmap *m, uint32_t n, uint32_t vnodes)
{
	if (m->nservers != n || (n > 1 && m->vnodes != vnodes))
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (m->servers[i] != i)
			return false;
	return true;
}

static int rs_read(struct cs_ps_restore *r)
{
	const struct cs_ps_shardmap *cur = r->src.map;
	uint32_t self = cur ? r->src.self : 0, m = cur ? cur->nservers : 1;
	struct cs_ps_shardmap old = { 0 };
	uint32_t *ids = NULL, n;
	char path[PATH_MAX];
	struct ckpt_hdr h0;
	int rc;

	rc = cs_ps_ckpt_shard_path(path, sizeof(path), r->src.dir, r->src.name,
				   0);
	if (rc)
		return rs_refuse(r, rc, CS_PS_RS_IO, 0);
	rc = read_hdr(path, &h0);
	if (rc)
		return rs_refuse(r, rc,
				 rc == -ENOENT	  ? CS_PS_RS_MISSING
				 : rc == -EBADMSG ? CS_PS_RS_DAMAGED
						  : CS_PS_RS_IO,
				 0);
	rc = rs_check_hdr(r, &h0, 0, NULL);
	if (rc)
		return rc;
	n = h0.nshards;
	r->info.nshards = n;
	r->info.clock = h0.clock;
	if (n > 1) {
		ids = malloc(n * sizeof(*ids));
		if (!ids)
			return rs_refuse(r, -ENOMEM, CS_PS_RS_IO, 0);
		for (uint32_t i = 0; i < n; i++)
			ids[i] = i;
		rc = cs_ps_shardmap_init(&old, ids, n, h0.vnodes);
		free(ids);
		if (rc)
			return rs_refuse(r, rc, CS_PS_RS_SET, 0);
	}
	if (n == m && (!cur || map_is(cur, n, h0.vnodes))) {
		/* the same map: this shard's rows are all in its own file */
		rc = rs_file(r, self, &h0, n > 1 ? &old : NULL, cur, self);
	} else {
		for (uint32_t s = 0; s < n && !rc; s++)
			rc = rs_file(r, s, &h0, n > 1 ? &old : NULL, cur, self);
	}
	if (n > 1)
		cs_ps_shardmap_fini(&old);
	return rc;
}

static void *restore_thread(void *arg)
{
	struct cs_ps_restore *r = arg;
	int rc = rs_read(r);

	pthread_mutex_lock(&r->mu);
	r->info.rc = rc;
	r->ready = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int cs_ps_restore_start(struct cs_ps_restore **out, struct cs_ps_store *st,
			uint32_t table, const struct cs_ps_restore_src *src)
{
	const struct cs_ps_table_spec *spec = cs_ps_store_spec(st, table);
	struct cs_ps_restore *r;
	uint64_t total, resident;
	int rc;

	if (!spec)
		return -ENOENT;
	if (!src || !src->dir || !src->name ||
	    (src->map && cs_ps_shardmap_index(src->map, src->self) < 0))
		return -EINVAL;
	cs_ps_store_nrows(st, table, &total, &resident);
	if (total)
		return -EEXIST;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->st = st;
	r->table = table;
	r->src = *src;
	r->fb = cs_ps_store_frame_bytes(st, table);
	r->rec = sizeof(struct cs_ps_rec_head) + r->fb;
	r->key_max = spec->key_max;
	hdr_fill(&r->want, spec, r->fb);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	rc = -pthread_create(&r->thr, NULL, restore_thread, r);
	if (rc) {
		pthread_mutex_destroy(&r->mu);
		pthread_cond_destroy(&r->cv);
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

bool cs_ps_restore_ready(struct cs_ps_restore *r)
{
	bool d;

	pthread_mutex_lock(&r->mu);
	d = r->ready;
	pthread_mutex_unlock(&r->mu);
	return d;
}

int cs_ps_restore_step(struct cs_ps_restore *r, uint32_t max_rows)
{
	uint64_t end;
	int rc;

	if (!cs_ps_restore_ready(r))
		return -EAGAIN;
	if (r->info.rc)
		return r->info.rc;
	end = CS_MIN(r->nkeep, r->next + (max_rows ? max_rows : 1));
	for (; r->next < end; r->next++) {
		const uint8_t *p = r->keep + r->next * r->rec;
		struct cs_ps_rec_head rh;

		memcpy(&rh, p, sizeof(rh));
		rc = cs_ps_store_load_rec(r->st, r->table, &rh, p + sizeof(rh),
					  r->fb);
		if (rc) { /* a row there already: a push came first */
			r->info.rc = rc;
			r->info.why = rc == -EEXIST ? CS_PS_RS_NOT_EMPTY
						    : CS_PS_RS_IO;
			return rc;
		}
		r->info.rows_loaded++;
	}
	if (r->next < r->nkeep)
		return 1;
	rc = cs_ps_store_set_clock(r->st, r->table, r->info.clock);
	r->info.rc = rc;
	r->complete = !rc;
	return rc;
}

int cs_ps_restore_finish(struct cs_ps_restore *r,
			 struct cs_ps_restore_info *info)
{
	int rc;

	pthread_join(r->thr, NULL);
	/* not every kept row loaded: never a success */
	if (!r->info.rc && !r->complete)
		r->info.rc = -ECANCELED;
	rc = r->info.rc;
	if (info)
		*info = r->info;
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r->keep);
	free(r);
	return rc;
}

int cs_ps_restore_sharded(struct cs_ps_store *st, uint32_t table,
			  const struct cs_ps_restore_src *src,
			  struct cs_ps_restore_info *info)
{
	struct cs_ps_restore *r;
	int rc = cs_ps_restore_start(&r, st, table, src);

	if (rc) {
		if (info) {
			memset(info, 0, sizeof(*info));
			info->rc = rc;
			info->why = rc == -EEXIST ? CS_PS_RS_NOT_EMPTY
						  : CS_PS_RS_IO;
		}
		return rc;
	}
	pthread_mutex_lock(&r->mu);
	while (!r->ready)
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	while (cs_ps_restore_step(r, 65536) == 1)
		;
	return cs_ps_restore_finish(r, info);
}
