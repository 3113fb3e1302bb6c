// SPDX-License-Identifier: MIT
/* gpu/ without a GPU: PCIe placement from a fake sysfs, the registration
 * order and its fallbacks, the mapping cache and its refusals, and the
 * staging pipeline over a fake copy backend completing in random order. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "gpu/gpu.h"
#include "check.h"

/* ---- placement ---------------------------------------------------------- */

static char root[PATH_MAX];

static void mkdirs(const char *rel)
{
	char p[PATH_MAX * 2];
	size_t n = (size_t)snprintf(p, sizeof(p), "%s/%s", root, rel);

	for (size_t i = strlen(root) + 1; i <= n; i++)
		if (p[i] == '/' || !p[i]) {
			char c = p[i];

			p[i] = 0;
			mkdir(p, 0755);
			p[i] = c;
		}
}

/* a device at devices/<path>, linked from bus/pci/devices/<last part> */
static void pci_dev(const char *path, int numa)
{
	char dir[PATH_MAX], link[PATH_MAX * 2], f[PATH_MAX * 4];
	const char *bdf = strrchr(path, '/') + 1;
	FILE *fp;

	snprintf(dir, sizeof(dir), "devices/%s", path);
	mkdirs(dir);
	mkdirs("bus/pci/devices");
	snprintf(f, sizeof(f), "%s/%s/numa_node", root, dir);
	fp = fopen(f, "w");
	fprintf(fp, "%d\n", numa);
	fclose(fp);
	snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, bdf);
	snprintf(f, sizeof(f), "../../../%s", dir);
	if (symlink(f, link))
		perror("symlink");
}

static void test_placement(void)
{
	struct cs_gpu_placement p;
	int err;

	snprintf(root, sizeof(root), "/tmp/cs-gpu-sysfs-XXXXXX");
	if (!mkdtemp(root)) {
		CHECK(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	/* root port 00:01.0 -> switch 01:00.0 -> down ports 02:00.0, 02:01.0 */
	pci_dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
		0); /* the GPU */
	pci_dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
		0); /* NIC behind the same switch */
	pci_dev("pci0000:00/0000:00:02.0/0000:05:00.0",
		0); /* other root port */
	pci_dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/"
		"0000:06:00.0/0000:07:00.0/0000:08:00.0",
		0); /* behind a second switch */
	pci_dev("pci0000:40/0000:40:01.0/0000:41:00.0", 0); /* same node */
	pci_dev("pci0000:80/0000:80:01.0/0000:81:00.0", 1); /* other node */

	err = cs_gpu_placement(root, "0000:03:00.0", "0000:04:00.0", &p);
	CHECK(!err && p.path == CS_GPU_PATH_PIX && p.hops == 3 &&
		      p.gpu_numa == 0 && p.nic_numa == 0,
	      "err %d path %s hops %u", err, cs_gpu_path_name(p.path), p.hops);
	err = cs_gpu_placement(root, "0000:03:00.0", "0000:08:00.0", &p);
	CHECK(!err && p.path == CS_GPU_PATH_PXB, "err %d path %s", err,
	      cs_gpu_path_name(p.path));
	err = cs_gpu_placement(root, "0000:03:00.0", "0000:05:00.0", &p);
	CHECK(!err && p.path == CS_GPU_PATH_PHB, "err %d path %s", err,
	      cs_gpu_path_name(p.path));
	err = cs_gpu_placement(root, "0000:03:00.0", "0000:41:00.0", &p);
	CHECK(!err && p.path == CS_GPU_PATH_NODE, "err %d path %s", err,
	      cs_gpu_path_name(p.path));
	err = cs_gpu_placement(root, "0000:03:00.0", "0000:81:00.0", &p);
	CHECK(!err && p.path == CS_GPU_PATH_SYS && p.nic_numa == 1,
	      "err %d path %s numa %d", err, cs_gpu_path_name(p.path),
	      p.nic_numa);
	err = cs_gpu_placement(root, "0000:03:00.0", NULL, &p);
	CHECK(!err && p.path == CS_GPU_PATH_NONE, "err %d", err);
	err = cs_gpu_placement(root, "0000:99:00.0", "0000:04:00.0", &p);
	CHECK(err == -ENOENT, "missing device: %d", err);
	err = cs_gpu_placement(root, "../../etc", NULL, &p);
	CHECK(err == -EINVAL, "path in a bdf: %d", err);
	err = cs_gpu_placement(root, "0000:03:00.0", "0000:03:00.0", &p);
	CHECK(err == -EINVAL, "the same device twice: %d", err);
}

/* ---- registration ------------------------------------------------------- */

struct fake_nic {
	int dmabuf_err, peer_err;
	const char *dmabuf_why, *peer_why; /* the port's reason, or none */
	int dmabuf_fd_seen;
	int deregs;
};

static int fn_reg_dmabuf(void *ctx, int fd, uint64_t off, size_t len, void *va,
			 void **mr, char *why, size_t whylen)
{
	struct fake_nic *n = ctx;

	(void)off;
	(void)len;
	(void)va;
	n->dmabuf_fd_seen = fd;
	if (n->dmabuf_why)
		snprintf(why, whylen, "%s", n->dmabuf_why);
	if (n->dmabuf_err)
		return n->dmabuf_err;
	*mr = n;
	return 0;
}

static int fn_reg_peer(void *ctx, void *va, size_t len, void **mr, char *why,
		       size_t whylen)
{
	struct fake_nic *n = ctx;

	(void)va;
	(void)len;
	if (n->peer_why)
		snprintf(why, whylen, "%s", n->peer_why);
	if (n->peer_err)
		return n->peer_err;
	*mr = n;
	return 0;
}

static void fn_dereg(void *ctx, void *mr)
{
	struct fake_nic *n = ctx;

	CHECK(mr == n, "dereg of what was registered");
	n->deregs++;
}

static int export_fail;

static int fx_export(void *ctx, void *va, size_t len, int *fd, char *why,
		     size_t whylen)
{
	(void)ctx;
	(void)va;
	(void)len;
	if (export_fail) {
		snprintf(why, whylen, "fake export refused");
		return -EIO;
	}
	*fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return *fd < 0 ? -errno : 0;
}

static bool fd_open(int fd)
{
	return fd >= 0 && fcntl(fd, F_GETFD) >= 0;
}

static void test_registrar(void)
{
	struct cs_gpu_dev dev = { .dmabuf = true, .gdr = true };
	struct cs_gpu_host_caps host = { .peermem = true };
	const struct cs_gpu_export_ops ex = { .dmabuf_export = fx_export };
	struct fake_nic fn = { 0 };
	struct cs_gpu_nic nic = { .name = "fake",
				  .ctx = &fn,
				  .reg_dmabuf = fn_reg_dmabuf,
				  .reg_peer = fn_reg_peer,
				  .dereg = fn_dereg };
	struct cs_gpu_nic udp = { .name = "udp" };
	struct cs_gpu_mr mr;
	char va[64];
	int err, fd, deregs0;

	err = cs_gpu_register(&dev, &host, &nic, &ex, NULL, va, 64, &mr);
	CHECK(!err && mr.kind == CS_GPU_REG_DMABUF && fd_open(mr.dmabuf_fd) &&
		      strstr(mr.why, "dma-buf for fake (first choice)"),
	      "err %d kind %s why '%s'", err, cs_gpu_reg_name(mr.kind), mr.why);
	fd = mr.dmabuf_fd;
	cs_gpu_deregister(&nic, &mr);
	CHECK(fn.deregs == 1 && !fd_open(fd), "dereg closes the dma-buf fd");

	/* the port refuses the dma-buf: its fd is closed, peer memory next;
	 * with no reason of its own, strerror() and the errno's name */
	fn.dmabuf_err = -EIO;
	err = cs_gpu_register(&dev, &host, &nic, &ex, NULL, va, 64, &mr);
	CHECK(!err && mr.kind == CS_GPU_REG_PEERMEM &&
		      !fd_open(fn.dmabuf_fd_seen) &&
		      strstr(mr.why, "dma-buf: the port refused the dma-buf "
				     "(EIO): Input/output error") &&
		      strstr(mr.why, "peer-memory for fake ("),
	      "kind %s why '%s'", cs_gpu_reg_name(mr.kind), mr.why);
	cs_gpu_deregister(&nic, &mr);
	fn.dmabuf_err = 0;

	/* both refused with the port's reasons (a dpdk vdev): staging, and
	 * the log line carries each reason and errno name, in order */
	fn.dmabuf_err = -EOPNOTSUPP;
	fn.dmabuf_why = "net_af_packet_x is a virtual device";
	fn.peer_err = -EOPNOTSUPP;
	fn.peer_why = "net_af_packet_x again";
	deregs0 = fn.deregs;
	err = cs_gpu_register(&dev, &host, &nic, &ex, NULL, va, 64, &mr);
	CHECK(!err && mr.kind == CS_GPU_REG_STAGING && !mr.nic_mr &&
		      !strncmp(mr.why, "staging for fake (dma-buf: ", 27) &&
		      strstr(mr.why, "the port refused the dma-buf "
				     "(EOPNOTSUPP): net_af_packet_x is a "
				     "virtual device; peer-memory: the port "
				     "refused it (EOPNOTSUPP): net_af_packet_x "
				     "again)"),
	      "kind %s why '%s'", cs_gpu_reg_name(mr.kind), mr.why);
	cs_gpu_deregister(&nic, &mr);
	CHECK(fn.deregs == deregs0, "nothing to deregister after two refusals");
	fn.dmabuf_err = fn.peer_err = 0;
	fn.dmabuf_why = fn.peer_why = NULL;

	/* export fails, peer memory refused too: staging, both reasons */
	export_fail = 1;
	fn.peer_err = -EPERM;
	err = cs_gpu_register(&dev, &host, &nic, &ex, NULL, va, 64, &mr);
	CHECK(!err && mr.kind == CS_GPU_REG_STAGING &&
		      strstr(mr.why, "fake export refused") &&
		      strstr(mr.why,
			     "peer-memory: the port refused it (EPERM): "
			     "Operation not permitted"),
	      "kind %s why '%s'", cs_gpu_reg_name(mr.kind), mr.why);
	cs_gpu_deregister(&nic, &mr);
	export_fail = 0;
	fn.peer_err = 0;

	/* no dma-buf on the device, no peermem module */
	dev.dmabuf = false;
	host.peermem = false;
	err = cs_gpu_register(&dev, &host, &nic, &ex, NULL, va, 64, &mr);
	CHECK(!err && mr.kind == CS_GPU_REG_STAGING &&
		      strstr(mr.why, "the device cannot export dma-buf") &&
		      strstr(mr.why, "nvidia_peermem is not loaded"),
	      "why '%s'", mr.why);
	host.peermem = true;
	err = cs_gpu_register(&dev, &host, &nic, &ex, NULL, va, 64, &mr);
	CHECK(!err && mr.kind == CS_GPU_REG_PEERMEM, "why '%s'", mr.why);
	cs_gpu_deregister(&nic, &mr);
	dev.dmabuf = true;

	/* a kernel-socket port: staging, and says why */
	err = cs_gpu_register(&dev, &host, &udp, &ex, NULL, va, 64, &mr);
	CHECK(!err && mr.kind == CS_GPU_REG_STAGING &&
		      strstr(mr.why, "staging for udp") &&
		      strstr(mr.why, "the port cannot import dma-buf") &&
		      strstr(mr.why, "cannot register device addresses"),
	      "why '%s'", mr.why);
	cs_gpu_deregister(&udp, &mr);
	/* without CUDA (no exporter) */
	err = cs_gpu_register(&dev, &host, &nic, NULL, NULL, va, 64, &mr);
	CHECK(!err && mr.kind == CS_GPU_REG_PEERMEM &&
		      strstr(mr.why, "no exporter"),
	      "why '%s'", mr.why);
	cs_gpu_deregister(&nic, &mr);
	CHECK(cs_gpu_register(&dev, &host, &nic, &ex, NULL, NULL, 64, &mr) ==
		      -EINVAL,
	      "NULL va");

	mkdirs("module/nvidia_peermem");
	cs_gpu_host_caps_read(root, &host);
	CHECK(host.peermem, "peermem module found in the fake sysfs");
	cs_gpu_host_caps_read("/nonexistent", &host);
	CHECK(!host.peermem, "no peermem without the module");
}

/* ---- the mapping cache --------------------------------------------------- */

#define FAKE_ALLOCS 8

/* fake device allocations; a handle carries an index and a serial */
struct fake_alloc {
	uint8_t *mem;
	size_t size;
	uint32_t serial;
	bool freed;
	bool open; /* CUDA refuses a second open of a handle */
	uint8_t uuid[CS_GPU_UUID_LEN];
};

static struct fake_alloc fa[FAKE_ALLOCS];
static unsigned fake_opens, fake_closes;

static int fm_open(void *ctx, const uint8_t *handle, void **base, size_t *size,
		   char *why, size_t whylen)
{
	uint32_t i, serial;

	(void)ctx;
	memcpy(&i, handle, 4);
	memcpy(&serial, handle + 4, 4);
	if (i >= FAKE_ALLOCS || fa[i].freed || fa[i].serial != serial) {
		snprintf(why, whylen, "no such allocation");
		return -ENOENT;
	}
	if (fa[i].open) {
		snprintf(why, whylen, "already mapped");
		return -EEXIST;
	}
	fa[i].open = true;
	fake_opens++;
	*base = fa[i].mem;
	*size = fa[i].size;
	return 0;
}

static void fm_close(void *ctx, void *base)
{
	(void)ctx;
	for (unsigned i = 0; i < FAKE_ALLOCS; i++)
		if (fa[i].mem == base && fa[i].open) {
			fa[i].open = false;
			fake_closes++;
			return;
		}
	CHECK(0, "close of an address never opened");
}

static int fm_import(void *ctx, int fd, size_t len, void **base, size_t *size,
		     char *why, size_t whylen)
{
	struct stat st;

	(void)ctx;
	if (fstat(fd, &st) || (size_t)st.st_size < len) {
		snprintf(why, whylen, "longer than the allocation");
		return -EINVAL;
	}
	*base = fa[7].mem;
	*size = (size_t)st.st_size;
	fake_opens++;
	return 0;
}

static void fm_release(void *ctx, void *base, size_t size)
{
	(void)ctx;
	(void)base;
	(void)size;
	fake_closes++;
}

static int fm_uuid(void *ctx, void *base, uint8_t *uuid)
{
	(void)ctx;
	for (unsigned i = 0; i < FAKE_ALLOCS; i++)
		if (fa[i].mem == base) {
			memcpy(uuid, fa[i].uuid, CS_GPU_UUID_LEN);
			return 0;
		}
	return -EIO;
}

static const struct cs_gpu_map_ops fake_map_ops = {
	.open_ipc = fm_open,
	.close_ipc = fm_close,
	.import_fd = fm_import,
	.release_fd = fm_release,
	.dev_uuid = fm_uuid,
};

static const uint8_t my_uuid[CS_GPU_UUID_LEN] = { 0xaa, 1, 2, 3 };
static const uint8_t other_uuid[CS_GPU_UUID_LEN] = { 0xbb, 1, 2, 3 };

static struct cs_gpu_handle handle_of(unsigned i, uint64_t len)
{
	struct cs_gpu_handle h = { .kind = CS_GPU_HANDLE_CUDA_IPC, .len = len };

	memcpy(h.ipc, &i, 4);
	memcpy(h.ipc + 4, &fa[i].serial, 4);
	memcpy(h.uuid, my_uuid, CS_GPU_UUID_LEN);
	return h;
}

static void test_map(void)
{
	struct cs_gpu_map_cfg cfg = { .max_entries = 4 };
	struct cs_gpu_map *m;
	struct cs_gpu_handle h;
	char why[CS_GPU_WHY_LEN];
	uint32_t id, id2, ids[4];
	unsigned held;
	uint64_t opens;
	void *p;
	int err, fd;

	for (unsigned i = 0; i < FAKE_ALLOCS; i++) {
		fa[i].size = 4096 * (i + 1);
		fa[i].mem = calloc(1, fa[i].size);
		fa[i].serial = 100 + i;
		memcpy(fa[i].uuid, i == 5 ? other_uuid : my_uuid,
		       CS_GPU_UUID_LEN);
	}
	memcpy(cfg.uuid, my_uuid, CS_GPU_UUID_LEN);
	CHECK(cs_gpu_map_create(&cfg, &fake_map_ops, NULL, &m) == 0, "create");
	cs_gpu_map_destroy(m);
	cfg.max_entries = 0;
	CHECK(cs_gpu_map_create(&cfg, &fake_map_ops, NULL, &m) == -EINVAL,
	      "0 entries refused");
	cfg.max_entries = 4;
	cs_gpu_map_create(&cfg, &fake_map_ops, NULL, &m);

	/* mapped once, then cached */
	h = handle_of(1, fa[1].size);
	err = cs_gpu_map_get(m, 7, &h, -1, &id, why, sizeof(why));
	CHECK(!err, "get: %d %s", err, why);
	err = cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(!err && id2 == id && fake_opens == 1,
	      "second get is cached: err %d opens %u", err, fake_opens);
	cs_gpu_map_counts(m, &held, &opens);
	CHECK(held == 1 && opens == 1, "held %u opens %llu", held,
	      (unsigned long long)opens);
	CHECK(!cs_gpu_map_addr(m, 7, id, 100, 200, &p) && p == fa[1].mem + 100,
	      "address inside");
	CHECK(!cs_gpu_map_addr(m, 7, id, 0, fa[1].size, &p), "whole range");
	CHECK(cs_gpu_map_addr(m, 7, id, fa[1].size - 4, 8, &p) == -ERANGE,
	      "range past the end");
	CHECK(cs_gpu_map_addr(m, 7, id, fa[1].size + 1, 0, &p) == -ERANGE,
	      "offset past the end");
	CHECK(cs_gpu_map_addr(m, 7, id, UINT64_MAX, 2, &p) == -ERANGE,
	      "offset overflow");
	CHECK(cs_gpu_map_addr(m, 8, id, 0, 4, &p) == -EBADF,
	      "another trainer's id");
	CHECK(cs_gpu_map_addr(m, 7, id ^ 3, 0, 4, &p) == -EBADF, "unknown id");

	/* a length beyond the allocation */
	h = handle_of(2, fa[2].size + 1);
	err = cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(err == -EINVAL && strstr(why, "runs past the allocation") &&
		      !fa[2].open,
	      "too long: %d '%s'", err, why);
	h = handle_of(1, fa[1].size * 2);
	err = cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(err == -EINVAL && strstr(why, "runs past"),
	      "too long, cached: %d '%s'", err, why);

	/* a freed allocation, garbage */
	fa[3].freed = true;
	h = handle_of(3, 64);
	err = cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(err == -ENOENT && strstr(why, "no such allocation"),
	      "freed: %d '%s'", err, why);
	memset(h.ipc, 0xee, sizeof(h.ipc));
	err = cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(err == -ENOENT, "garbage handle: %d", err);
	h.kind = 9;
	err = cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(err == -EINVAL && strstr(why, "unknown handle kind"),
	      "bad kind: %d '%s'", err, why);

	/* another device: said so by the trainer, or found after opening */
	h = handle_of(4, 64);
	memcpy(h.uuid, other_uuid, CS_GPU_UUID_LEN);
	err = cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(err == -ENODEV && strstr(why, "this sidecar serves") &&
		      !fa[4].open,
	      "other device: %d '%s'", err, why);
	h = handle_of(5, 64);
	err = cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(err == -ENODEV && strstr(why, "the allocation lives on") &&
		      !fa[5].open,
	      "lies about its device: %d '%s'", err, why);

	/* references: the last put unmaps; a stale id is refused */
	CHECK(!cs_gpu_map_put(m, 7, id) && fa[1].open, "put 1 of 2");
	CHECK(!cs_gpu_map_put(m, 7, id) && !fa[1].open, "put 2 of 2 unmaps");
	CHECK(cs_gpu_map_put(m, 7, id) == -EBADF, "put of a freed id");
	h = handle_of(1, 64);
	cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(cs_gpu_map_addr(m, 7, id, 0, 4, &p) == -EBADF &&
		      !cs_gpu_map_addr(m, 7, id2, 0, 4, &p),
	      "stale id of a reused slot refused");

	/* full */
	for (unsigned i = 0; i < 3; i++) {
		h = handle_of(i == 0 ? 0 : i == 1 ? 2 : 6, 64);
		err = cs_gpu_map_get(m, 9, &h, -1, &ids[i], why, sizeof(why));
		CHECK(!err, "fill %u: %d %s", i, err, why);
	}
	h = handle_of(4, 64);
	err = cs_gpu_map_get(m, 9, &h, -1, &ids[3], why, sizeof(why));
	CHECK(err == -ENOSPC, "full: %d", err);
	cs_gpu_map_drop_owner(m, 9);
	cs_gpu_map_counts(m, &held, &opens);
	CHECK(held == 1 && !fa[0].open && !fa[2].open && !fa[6].open,
	      "drop_owner unmaps its allocations: held %u", held);

	/* POSIX fd: imported, the fd closed, the length checked */
	fd = memfd_create("cs-gpu-test", MFD_CLOEXEC);
	CHECK(fd >= 0 && !ftruncate(fd, 8192), "memfd");
	h = (struct cs_gpu_handle){ .kind = CS_GPU_HANDLE_POSIX_FD,
				    .len = 8192 };
	memcpy(h.uuid, my_uuid, CS_GPU_UUID_LEN);
	err = cs_gpu_map_get(m, 7, &h, fd, &id2, why, sizeof(why));
	CHECK(!err && !fd_open(fd), "fd import: %d %s", err, why);
	CHECK(!cs_gpu_map_addr(m, 7, id2, 4096, 4096, &p) &&
		      cs_gpu_map_addr(m, 7, id2, 4096, 4097, &p) == -ERANGE,
	      "fd bounds");
	fd = memfd_create("cs-gpu-test", MFD_CLOEXEC);
	CHECK(fd >= 0 && !ftruncate(fd, 4096), "memfd");
	h.len = 8192;
	err = cs_gpu_map_get(m, 7, &h, fd, &id2, why, sizeof(why));
	CHECK(err == -EINVAL && !fd_open(fd), "fd too long: %d '%s'", err, why);
	err = cs_gpu_map_get(m, 7, &h, -1, &id2, why, sizeof(why));
	CHECK(err == -EINVAL && strstr(why, "without an fd"), "no fd: %d", err);

	cs_gpu_map_destroy(m);
	CHECK(fake_opens == fake_closes, "every open closed: %u vs %u",
	      fake_opens, fake_closes);
	for (unsigned i = 0; i < FAKE_ALLOCS; i++)
		free(fa[i].mem);
}

/* ---- staging ------------------------------------------------------------- */

/* a copy backend whose copies finish when the test says so */
struct fake_copier {
	struct {
		bool busy, done;
		void *dst;
		const void *src;
		size_t len;
	} c[CS_GPU_STAGE_MAX_DEPTH];
	unsigned in_flight, max_in_flight;
	int fail_at; /* the n-th start fails (-1: never) */
	unsigned starts;
};

static int fc_start(void *ctx, void *dst, const void *src, size_t len,
		    enum cs_gpu_stage_dir dir, unsigned slot)
{
	struct fake_copier *f = ctx;

	(void)dir;
	if (f->fail_at >= 0 && f->starts == (unsigned)f->fail_at)
		return -EIO;
	f->starts++;
	CHECK(!f->c[slot].busy, "copy started on a busy slot %u", slot);
	f->c[slot].busy = true;
	f->c[slot].done = false;
	f->c[slot].dst = dst;
	f->c[slot].src = src;
	f->c[slot].len = len;
	if (++f->in_flight > f->max_in_flight)
		f->max_in_flight = f->in_flight;
	return 0;
}

static int fc_done(void *ctx, unsigned slot)
{
	struct fake_copier *f = ctx;

	if (!f->c[slot].busy || !f->c[slot].done)
		return 0;
	memcpy(f->c[slot].dst, f->c[slot].src, f->c[slot].len);
	f->c[slot].busy = false;
	f->in_flight--;
	return 1;
}

static const struct cs_gpu_copy_ops fake_copy_ops = {
	.start = fc_start,
	.done = fc_done,
};

/* finish a random busy copy */
static void finish_some(struct fake_copier *f, unsigned depth)
{
	unsigned s = (unsigned)rand() % depth;

	for (unsigned k = 0; k < depth; k++, s = (s + 1) % depth)
		if (f->c[s].busy && !f->c[s].done) {
			f->c[s].done = true;
			return;
		}
}

struct wire {
	uint8_t *dst;
	uint64_t pending[CS_GPU_STAGE_MAX_DEPTH];
	unsigned npending;
	uint64_t *seen; /* times each chunk was sent */
	size_t chunk;
};

static void wire_send(void *ctx, uint64_t idx, uint64_t off, const void *host,
		      size_t len)
{
	struct wire *w = ctx;

	CHECK(off == idx * w->chunk, "offset of chunk %llu",
	      (unsigned long long)idx);
	memcpy(w->dst + off, host, len);
	w->seen[idx]++;
	w->pending[w->npending++] = idx;
}

static void test_stage_out(size_t len, size_t chunk, unsigned depth,
			   unsigned seed)
{
	struct cs_gpu_stage_cfg cfg = { .chunk = chunk, .depth = depth };
	struct fake_copier f = { .fail_at = -1 };
	uint64_t n = (len + chunk - 1) / chunk;
	uint8_t *dev = malloc(len), *out = calloc(1, len);
	uint8_t *slots = malloc(chunk * depth);
	struct wire w = { .dst = out, .seen = calloc(n, 8), .chunk = chunk };
	struct cs_gpu_stage *st;
	int r = 0, loops = 0;

	srand(seed);
	for (size_t i = 0; i < len; i++)
		dev[i] = (uint8_t)(i * 7 + seed);
	CHECK(!cs_gpu_stage_create(&cfg, slots, &fake_copy_ops, &f, &st),
	      "create");
	CHECK(!cs_gpu_stage_start(st, CS_GPU_STAGE_OUT, dev, len, wire_send,
				  &w),
	      "start");
	CHECK(cs_gpu_stage_start(st, CS_GPU_STAGE_OUT, dev, len, wire_send,
				 &w) == -EBUSY,
	      "second start refused");
	CHECK(cs_gpu_stage_chunks(st) == n, "chunks");
	while (r == 0 && loops++ < 1000000) {
		if (rand() % 2)
			finish_some(&f, depth);
		if (w.npending && rand() % 2) {
			unsigned k = (unsigned)rand() % w.npending;

			CHECK(!cs_gpu_stage_sent(st, w.pending[k]), "sent");
			CHECK(cs_gpu_stage_sent(st, w.pending[k]) == -EINVAL,
			      "sent twice refused");
			w.pending[k] = w.pending[--w.npending];
		}
		r = cs_gpu_stage_poll(st);
	}
	CHECK(r == 1, "out transfer finished: %d after %d loops", r, loops);
	CHECK(!memcmp(dev, out, len), "out: bytes arrived intact");
	for (uint64_t i = 0; i < n; i++)
		CHECK(w.seen[i] == 1, "chunk %llu sent %llu times",
		      (unsigned long long)i, (unsigned long long)w.seen[i]);
	CHECK(f.max_in_flight <= depth && (n < depth || f.max_in_flight > 1),
	      "in flight at most depth, and overlapped: %u", f.max_in_flight);
	cs_gpu_stage_destroy(st);
	free(dev);
	free(out);
	free(slots);
	free(w.seen);
}

static void test_stage_in(size_t len, size_t chunk, unsigned depth,
			  unsigned seed)
{
	struct cs_gpu_stage_cfg cfg = { .chunk = chunk, .depth = depth };
	struct fake_copier f = { .fail_at = -1 };
	uint64_t n = (len + chunk - 1) / chunk, landed = 0;
	uint8_t *src = malloc(len), *dev = calloc(1, len);
	uint8_t *slots = malloc(chunk * depth);
	uint8_t *got = calloc(n, 1);
	struct cs_gpu_stage *st;
	int r = 0, loops = 0, dups = 0;

	srand(seed);
	for (size_t i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 13 + seed);
	CHECK(!cs_gpu_stage_create(&cfg, slots, &fake_copy_ops, &f, &st),
	      "create");
	CHECK(!cs_gpu_stage_start(st, CS_GPU_STAGE_IN, dev, len, NULL, NULL),
	      "start");
	while (r == 0 && loops++ < 1000000) {
		/* a chunk from the wire, any of the next few, maybe again */
		uint64_t idx = landed + (uint64_t)rand() % (2 * depth);
		void *slot;

		if (idx < n) {
			slot = cs_gpu_stage_rx_slot(st, idx);
			if (slot) {
				size_t l = idx == n - 1 ? len - idx * chunk
							: chunk;

				CHECK(!got[idx], "a chunk landed twice");
				memcpy(slot, src + idx * chunk, l);
				CHECK(!cs_gpu_stage_received(st, idx),
				      "received");
				got[idx] = 1;
			} else if (got[idx]) {
				dups++;
				CHECK(cs_gpu_stage_received(st, idx) == -EINVAL,
				      "duplicate refused");
			}
		}
		while (landed < n && got[landed])
			landed++;
		if (rand() % 2)
			finish_some(&f, depth);
		r = cs_gpu_stage_poll(st);
	}
	CHECK(r == 1, "in transfer finished: %d after %d loops", r, loops);
	CHECK(!memcmp(src, dev, len), "in: bytes landed intact");
	CHECK(cs_gpu_stage_rx_slot(st, 0) == NULL, "nothing after the end");
	cs_gpu_stage_destroy(st);
	free(src);
	free(dev);
	free(slots);
	free(got);
	(void)dups;
}

static void nop_send(void *ctx, uint64_t idx, uint64_t off, const void *host,
		     size_t len)
{
	(void)ctx;
	(void)idx;
	(void)off;
	(void)host;
	(void)len;
}

static void test_stage_bad(void)
{
	struct cs_gpu_stage_cfg cfg = { .chunk = 0, .depth = 4 };
	struct fake_copier f = { .fail_at = 2 };
	struct cs_gpu_stage *st;
	uint8_t slots[4 * 64], dev[1000];
	int r = 0, loops = 0;

	CHECK(cs_gpu_stage_create(&cfg, slots, &fake_copy_ops, &f, &st) ==
		      -EINVAL,
	      "chunk 0");
	cfg.chunk = 64;
	cfg.depth = 0;
	CHECK(cs_gpu_stage_create(&cfg, slots, &fake_copy_ops, &f, &st) ==
		      -EINVAL,
	      "depth 0");
	cfg.depth = CS_GPU_STAGE_MAX_DEPTH + 1;
	CHECK(cs_gpu_stage_create(&cfg, slots, &fake_copy_ops, &f, &st) ==
		      -EINVAL,
	      "depth too big");
	cfg.depth = 4;
	CHECK(cs_gpu_stage_create(&cfg, NULL, &fake_copy_ops, &f, &st) ==
		      -EINVAL,
	      "no slots");
	CHECK(!cs_gpu_stage_create(&cfg, slots, &fake_copy_ops, &f, &st),
	      "create");
	CHECK(cs_gpu_stage_start(st, CS_GPU_STAGE_OUT, dev, 0, nop_send,
				 NULL) == -EINVAL,
	      "empty transfer");
	CHECK(cs_gpu_stage_start(st, CS_GPU_STAGE_OUT, dev, 10, NULL, NULL) ==
		      -EINVAL,
	      "out without a wire");
	CHECK(!cs_gpu_stage_start(st, CS_GPU_STAGE_OUT, dev, sizeof(dev),
				  nop_send, NULL),
	      "start");
	CHECK(cs_gpu_stage_sent(st, 99) == -EINVAL, "sent of an unknown chunk");
	CHECK(cs_gpu_stage_rx_slot(st, 0) == NULL,
	      "rx_slot on an out transfer");
	/* the third copy fails to start: the transfer ends with the error */
	while (r == 0 && loops++ < 1000)
		r = cs_gpu_stage_poll(st);
	CHECK(r == -EIO, "copy error reported: %d", r);
	CHECK(cs_gpu_stage_poll(st) == -EINVAL, "nothing running after it");
	cs_gpu_stage_destroy(st);
}

int main(void)
{
	test_placement();
	test_registrar();
	test_map();
	test_stage_out(1000, 64, 4, 1);
	test_stage_out(64 * 8, 64, 8, 2);
	test_stage_out(5, 64, 3, 3);
	test_stage_out(100000, 1000, 16, 4);
	test_stage_in(1000, 64, 4, 5);
	test_stage_in(100000, 1000, 16, 6);
	test_stage_in(7, 64, 1, 7);
	test_stage_bad();
	if (root[0]) {
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd))
			fprintf(stderr, "could not remove %s\n", root);
	}
	return check_report("test_gpu_core");
}
