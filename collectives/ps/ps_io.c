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

/* ---- batch I/O on a ring ------------------------------------------------ */

/* Submit @n reads or writes (up to the ring's depth at once) and wait for
 * all of them; every one must move its whole length. */
static int ring_batch(struct io_uring *ring, unsigned depth, int fd,
		      struct cs_ps_io_req *r, unsigned n, bool wr)
{
	int rc = 0;

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

/* ---- SSD spill ----------------------------------------------------------- */

struct cs_ps_uring_spill {
	int fd;
	unsigned depth;
	struct io_uring ring;
};

static int spill_write(void *ctx, struct cs_ps_io_req *r, unsigned n)
{
	struct cs_ps_uring_spill *s = ctx;

	return ring_batch(&s->ring, s->depth, s->fd, r, n, true);
}

static int spill_read(void *ctx, struct cs_ps_io_req *r, unsigned n)
{
	struct cs_ps_uring_spill *s = ctx;

	return ring_batch(&s->ring, s->depth, s->fd, r, n, false);
}

static const struct cs_ps_spill_ops spill_uring_ops = {
	.write = spill_write,
	.read = spill_read,
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

void cs_ps_spill_close(struct cs_ps_uring_spill *s)
{
	if (!s)
		return;
	io_uring_queue_exit(&s->ring);
	close(s->fd);
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
	uint64_t data_sum; /* FNV-1a 64 of the records */
	uint32_t id, dim, dtype, mode, staleness, workers;
	uint64_t key_max;
	uint32_t opt_kind;
	float lr, momentum, beta1, beta2, eps, initial_acc;
	uint32_t init_kind;
	uint64_t init_seed;
	float init_scale;
	uint32_t pad;
	uint64_t hdr_sum;
};
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
}

/* ---- checkpoint writer -----------------------------------------------------
 */

struct ckpt_item {
	struct ckpt_item *next;
	void *buf; /* NULL: the end marker */
	size_t len;
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
	uint8_t hb[CS_PS_CKPT_HDR];
	struct io_uring_sqe *sqe;
	int rc, dfd;

	c->hdr.nrec = nrec;
	c->hdr.clock = c->clock;
	c->hdr.data_bytes = data_bytes;
	c->hdr.data_sum = sum;
	c->hdr.hdr_sum =
		fnv(FNV_OFF, &c->hdr, offsetof(struct ckpt_hdr, hdr_sum));
	memset(hb, 0, sizeof(hb));
	memcpy(hb, &c->hdr, sizeof(c->hdr));
	sqe = io_uring_get_sqe(ring);
	io_uring_prep_write(sqe, fd, hb, sizeof(hb), 0);
	rc = ring_one(ring, sqe);
	if (rc != (int)sizeof(hb))
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

static void *ckpt_thread(void *arg)
{
	struct cs_ps_ckpt *c = arg;
	uint64_t off = CS_PS_CKPT_HDR, sum = FNV_OFF, nrec = 0;
	unsigned n_in = 0;
	struct io_uring ring;
	int fd, rc;

	fd = open(c->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
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
			/* reap what is in flight */
			while (n_in) {
				struct io_uring_cqe *cqe;
				struct ckpt_item *w;

				if (io_uring_wait_cqe(&ring, &cqe))
					continue;
				w = (struct ckpt_item *)io_uring_cqe_get_data(
					cqe);
				if (cqe->res != (int)w->len && !rc)
					rc = cqe->res < 0 ? cqe->res : -EIO;
				io_uring_cqe_seen(&ring, cqe);
				q_written(c, w->len);
				free(w->buf);
				free(w);
				n_in--;
			}
			if (!rc)
				rc = end_rc;
			if (!rc)
				rc = ckpt_finish(c, &ring, fd, nrec,
						 off - CS_PS_CKPT_HDR, sum);
			break;
		}
		sum = fnv(sum, it->buf, it->len);
		while (n_in >= c->depth || !(sqe = io_uring_get_sqe(&ring))) {
			struct io_uring_cqe *cqe;
			struct ckpt_item *w;

			io_uring_submit(&ring);
			if (io_uring_wait_cqe(&ring, &cqe))
				continue;
			w = (struct ckpt_item *)io_uring_cqe_get_data(cqe);
			if (cqe->res != (int)w->len && !rc)
				rc = cqe->res < 0 ? cqe->res : -EIO;
			io_uring_cqe_seen(&ring, cqe);
			q_written(c, w->len);
			free(w->buf);
			free(w);
			n_in--;
		}
		io_uring_prep_write(sqe, fd, it->buf, (unsigned)it->len, off);
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
	*out = c;
	return 0;
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
	if (fnv(FNV_OFF, buf + CS_PS_CKPT_HDR, h.data_bytes) != h.data_sum)
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
