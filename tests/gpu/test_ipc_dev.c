// SPDX-License-Identifier: MIT
/* Device buffers through the trainer API, without a GPU: a sidecar whose
 * device ops are a fake (a "device allocation" is a memfd the trainer
 * sends as a POSIX-fd handle; the fake maps it), two trainers that
 * allreduce in place in their device ranges, mixed host/device buffers,
 * and the refusals (a range past the allocation, a handle that does not
 * open, a range of the wrong device) reaching cs_errmsg(). */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "collstack/collstack.h"
#include "control/ipc/ipc_server.h"
#include "check.h"

#define ALLOC_LEN (8u << 20)
#define RANGE_OFF 4096u
#define COUNT ((5u << 20) / 4 + 3) /* floats: two 4 MiB pieces of copying */

static const unsigned char the_uuid[16] = { 0x42, 0x42 };

/* ---- the sidecar, with fake device ops ------------------------------------ */

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

	(void)ctx;
	if (off > r->len || len > r->len - off)
		return -ERANGE;
	memcpy(host, r->map + r->off + off, len);
	return 0;
}

static int fd_from_host(void *ctx, void *cookie, uint64_t off,
			const void *host, size_t len)
{
	struct fake_range *r = cookie;

	(void)ctx;
	if (off > r->len || len > r->len - off)
		return -ERANGE;
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
	.map = fd_map, .unmap = fd_unmap,
	.to_host = fd_to_host, .from_host = fd_from_host,
	.shadow_alloc = fd_shadow_alloc, .shadow_free = fd_shadow_free,
};

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int sidecar(const char *path, bool with_dev)
{
	struct cs_ipc_server *srv;
	struct cs_ipc_cfg cfg;
	struct timespec ts;
	int ret;

	signal(SIGTERM, on_term);
	ret = cs_cfg_defaults(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg);
	if (ret)
		return 1;
	snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s", path);
	cfg.sock_poll_interval = 100000;
	if (cs_ipc_server_create(&cfg, NULL, &srv))
		return 1;
	if (with_dev)
		cs_ipc_server_set_dev(srv, &fake_dev_ops, NULL);
	while (!stop) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (cs_ipc_server_poll(srv, (cs_ns_t)ts.tv_sec * 1000000000 +
						    (cs_ns_t)ts.tv_nsec) <= 0)
			usleep(50);
	}
	cs_ipc_server_destroy(srv);
	return 0;
}

/* ---- trainers ------------------------------------------------------------- */

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
	CHECK(!err && !cs_wait(c, r, 30000000000ll), "allreduce in place on "
	      "a device range: %d %s", err, cs_errmsg(c));
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

	/* refusals */
	err = cs_buf_register_dev(c, &m, ALLOC_LEN - 4096, 8192, &bad);
	CHECK(err == -EINVAL, "range past the allocation (client): %d", err);
	m.alloc_len = 2 * ALLOC_LEN; /* a lie about the size: the sidecar checks */
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
	CHECK(cs_buf_register_dev(c, &m, 0, 4096, &bad) == -EINVAL,
	      "bad kind");

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

static pid_t spawn_sidecar(const char *path, bool with_dev)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(sidecar(path, with_dev));
	return pid;
}

static void reap(pid_t pid, const char *who)
{
	int st = 0;

	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
		      WEXITSTATUS(st) == 0,
	      "%s exited %#x", who, st);
}

int main(void)
{
	char dir[] = "/tmp/cs-ipc-dev-XXXXXX", path[64];
	pid_t sc, tr[4];
	const int size = 3;

	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/sock", dir);
	sc = spawn_sidecar(path, true);
	for (int r = 0; r < size; r++) {
		tr[r] = fork();
		if (tr[r] == 0)
			_exit(trainer(path, r, size));
	}
	for (int r = 0; r < size; r++)
		reap(tr[r], "trainer");
	kill(sc, SIGTERM);
	reap(sc, "sidecar");

	snprintf(path, sizeof(path), "%s/sock2", dir);
	sc = spawn_sidecar(path, false);
	tr[0] = fork();
	if (tr[0] == 0)
		_exit(no_gpu_trainer(path));
	reap(tr[0], "trainer");
	kill(sc, SIGTERM);
	reap(sc, "sidecar");
	unlink(path);
	snprintf(path, sizeof(path), "%s/sock", dir);
	unlink(path);
	rmdir(dir);
	return check_report("test_ipc_dev");
}
