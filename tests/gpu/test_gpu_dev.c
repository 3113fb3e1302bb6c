// SPDX-License-Identifier: MIT
/* gpu/ on a real device: discovery and placement, the reduction kernels
 * bit for bit against collectives/reduce.h, the staging pipeline over CUDA
 * streams, trainers' allocations (CUDA IPC handle, VMM POSIX fd over a Unix
 * socket) mapped by another process with the bad-input refusals, and dma-buf
 * registration. Exits 77 with the reason where no device is usable. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "collectives/reduce.h"
#include "gpu/gpu.h"
#include "check.h"
#include "gpu_util.h"

#define CUOK(x) ((x) == cudaSuccess)

static struct cs_gpu_dev dev0;

/* ---- discovery ---------------------------------------------------------- */

static void test_discover(void)
{
	struct cs_gpu_placement p;
	struct dirent *d;
	DIR *dir;
	int err = cs_gpu_discover(0, &dev0);

	CHECK(!err, "discover: %d", err);
	printf("device 0: %s, PCI %s, NUMA node %d, %.1f GiB, sm_%d%d, "
	       "dma-buf %d, GPUDirect RDMA %d, VMM POSIX fd %d\n",
	       dev0.name, dev0.bdf, dev0.numa,
	       dev0.mem_bytes / (1024.0 * 1024 * 1024), dev0.cc_major,
	       dev0.cc_minor, dev0.dmabuf, dev0.gdr, dev0.vmm_fd);
	CHECK(dev0.mem_bytes > 0 && dev0.bdf[0], "device described");
	/* the placement logic is checked on a fake tree (test_gpu_core);
	 * here it reports what this machine's sysfs says */
	err = cs_gpu_placement("/sys", dev0.bdf, NULL, &p);
	if (err)
		printf("device 0 not found in /sys/bus/pci/devices: %d\n", err);
	/* every network interface with a PCI device behind it */
	dir = opendir("/sys/class/net");
	while (dir && (d = readdir(dir))) {
		char link[PATH_MAX], real[PATH_MAX];
		const char *bdf;

		if (d->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "/sys/class/net/%s/device",
			 d->d_name);
		if (!realpath(link, real) || !strstr(real, "/pci"))
			continue;
		bdf = strrchr(real, '/') + 1;
		err = cs_gpu_placement("/sys", dev0.bdf, bdf, &p);
		if (err)
			printf("NIC %s (%s): placement error %d\n", d->d_name,
			       bdf, err);
		else
			printf("NIC %s (%s): %s, %u PCIe hops, GPU NUMA %d, "
			       "NIC NUMA %d\n",
			       d->d_name, bdf, cs_gpu_path_name(p.path), p.hops,
			       p.gpu_numa, p.nic_numa);
	}
	if (dir)
		closedir(dir);
}

/* ---- kernels against the CPU reference ----------------------------------- */

static bool is_nan(const void *p, enum cs_dtype t)
{
	uint64_t x = 0;

	memcpy(&x, p, cs_dtype_size(t));
	switch (t) {
	case CS_F32:
		return (x & 0x7fffffff) > 0x7f800000;
	case CS_F64:
		return (x & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
	case CS_F16:
		return (x & 0x7fff) > 0x7c00;
	case CS_BF16:
		return (x & 0x7fff) > 0x7f80;
	default:
		return false;
	}
}

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill(void *p, size_t n, enum cs_dtype t)
{
	size_t esz = cs_dtype_size(t);

	for (size_t i = 0; i < n; i++) {
		uint64_t r = next_rand();
		unsigned char *e = (unsigned char *)p + i * esz;

		/* half random bits (every class: NaN, inf, subnormal, -0),
		 * half ordinary values */
		if (r & 1) {
			memcpy(e, &r, esz);
		} else if (t == CS_F32) {
			float f = (float)((int64_t)(r >> 8) % 200000) / 97.0f;

			memcpy(e, &f, 4);
		} else if (t == CS_F64) {
			double f = (double)((int64_t)(r >> 8) % 200000) / 97.0;

			memcpy(e, &f, 8);
		} else {
			/* a small f16 / bf16: exponent near the bias */
			uint16_t h = (uint16_t)((r >> 8) & 0x83ff);

			h |= t == CS_F16 ? 0x3c00 : 0x3f80;
			memcpy(e, &h, 2);
		}
	}
}

static void test_kernels(void)
{
	static const enum cs_dtype types[] = { CS_F32, CS_F64, CS_F16,
					       CS_BF16 };
	static const size_t sizes[] = { 1, 3, 8, 1000, 65537, (1u << 20) + 5 };
	const size_t maxn = (1u << 20) + 8;
	void *a = malloc(maxn * 8), *b = malloc(maxn * 8);
	void *ref = malloc(maxn * 8), *got = malloc(maxn * 8);
	void *da = NULL, *db = NULL;
	unsigned combos = 0;

	CHECK(CUOK(cudaMalloc(&da, maxn * 8 + 64)) &&
		      CUOK(cudaMalloc(&db, maxn * 8 + 64)),
	      "cudaMalloc");
	for (size_t ti = 0; ti < 4; ti++)
		for (int op = 0; op < CS_REDOP_COUNT; op++)
			for (size_t si = 0; si < 6; si++)
				for (int al = 0; al < 3; al++) {
					enum cs_dtype t = types[ti];
					size_t n = sizes[si],
					       esz = cs_dtype_size(t);
					/* aligned; both one element off (scalar
					 * path); dst only */
					size_t doff = al ? esz : 0,
					       soff = al == 1 ? esz : 0;
					unsigned char *pa =
						(unsigned char *)da + doff;
					unsigned char *pb =
						(unsigned char *)db + soff;
					size_t bad = 0, first = 0;
					int err;

					fill(a, n, t);
					fill(b, n, t);
					memcpy(ref, a, n * esz);
					cs_reduce_into(ref, b, n, t,
						       (enum cs_redop)op);
					cudaMemcpy(pa, a, n * esz,
						   cudaMemcpyHostToDevice);
					cudaMemcpy(pb, b, n * esz,
						   cudaMemcpyHostToDevice);
					err = cs_gpu_reduce(pa, pb, n, t,
							    (enum cs_redop)op,
							    NULL);
					CHECK(!err && CUOK(cudaDeviceSynchronize()),
					      "launch: %d", err);
					cudaMemcpy(got, pa, n * esz,
						   cudaMemcpyDeviceToHost);
					for (size_t i = 0; i < n; i++) {
						const unsigned char *x =
							(unsigned char *)got +
							i * esz;
						const unsigned char *y =
							(unsigned char *)ref +
							i * esz;

						if (memcmp(x, y, esz) &&
						    !(is_nan(x, t) &&
						      is_nan(y, t)))
							if (!bad++)
								first = i;
					}
					CHECK(!bad,
					      "%s %s n=%zu align=%d: %zu of %zu differ, first at %zu",
					      cs_dtype_name(t),
					      cs_redop_name((enum cs_redop)op),
					      n, al, bad, n, first);
					combos++;
				}
	printf("kernels: %u type/op/size/alignment combinations checked "
	       "against the CPU reference\n",
	       combos);
	CHECK(cs_gpu_reduce(da, db, 4, CS_I32, CS_SUM, NULL) == -EOPNOTSUPP,
	      "i32: the host reduces it");
	CHECK(cs_gpu_reduce((char *)da + 1, db, 4, CS_F32, CS_SUM, NULL) ==
		      -EINVAL,
	      "misaligned");
	CHECK(cs_gpu_reduce(da, db, 4, CS_F32, 7, NULL) == -EINVAL, "bad op");
	CHECK(cs_gpu_reduce(NULL, NULL, 0, CS_F32, CS_SUM, NULL) == 0, "empty");
	cudaFree(da);
	cudaFree(db);
	free(a);
	free(b);
	free(ref);
	free(got);
}

/* ---- staging over CUDA streams --------------------------------------------
 */

/* incoming chunks reduced into device memory where they land: @dev holds
 * f32 values, @in arrives from the wire; checked against cs_reduce_into */
static void test_stage_reduce(void *dev, const void *in)
{
	const size_t len = (16u << 20) + 12, chunk = 1u << 20;
	struct cs_gpu_stage_cfg cfg = { .chunk = chunk, .depth = 4 };
	struct cs_gpu_cuda_copier *cp = NULL;
	struct cs_gpu_stage *st = NULL;
	void *slots = pinned_shm(chunk * cfg.depth);
	float *ref = malloc(len), *got = malloc(len);
	size_t bad = 0;
	int err;

	cudaMemcpy(ref, dev, len, cudaMemcpyDeviceToHost);
	cs_reduce_into(ref, in, len / 4, CS_F32, CS_SUM);
	err = cs_gpu_cuda_copier_create(cfg.depth, &cp);
	if (!err)
		err = cs_gpu_cuda_copier_reduce(cp, chunk, CS_F32, CS_SUM);
	if (!err)
		err = cs_gpu_stage_create(&cfg, slots, &cs_gpu_cuda_copy_ops,
					  cp, &st);
	CHECK(!err && slots, "reducing stage: %d", err);
	CHECK(cp && cs_gpu_cuda_copier_reduce(cp, chunk, CS_I32, CS_SUM) ==
			      -EINVAL,
	      "reduce mode set twice");
	if (!err && slots)
		err = stage_in_run(st, dev, len, in, chunk);
	cudaMemcpy(got, dev, len, cudaMemcpyDeviceToHost);
	for (size_t i = 0; i < len / 4; i++)
		if (memcmp(&got[i], &ref[i], 4) &&
		    !(is_nan(&got[i], CS_F32) && is_nan(&ref[i], CS_F32)))
			bad++;
	CHECK(!err && !bad,
	      "wire -> device reduced where it lands: %d, %zu of %zu differ",
	      err, bad, len / 4);
	cs_gpu_stage_destroy(st);
	cs_gpu_cuda_copier_destroy(cp);
	pinned_shm_free(slots, chunk * cfg.depth);
	free(ref);
	free(got);
}

static void test_stage(void)
{
	const size_t len = (64u << 20) + 12345, chunk = 1u << 20;
	const unsigned depth = 4;
	struct cs_gpu_stage_cfg cfg = { .chunk = chunk, .depth = depth };
	struct cs_gpu_cuda_copier *cp = NULL;
	struct cs_gpu_stage *st = NULL;
	unsigned char *src = malloc(len), *dst = calloc(1, len);
	void *slots = pinned_shm(chunk * depth), *d1 = NULL, *d2 = NULL;
	int err;

	for (size_t i = 0; i < len; i++)
		src[i] = (unsigned char)(i * 31 + (i >> 20));
	CHECK(slots, "pinned memfd slots");
	CHECK(CUOK(cudaMalloc(&d1, len)) && CUOK(cudaMalloc(&d2, len)),
	      "cudaMalloc");
	cudaMemcpy(d1, src, len, cudaMemcpyHostToDevice);
	err = cs_gpu_cuda_copier_create(depth, &cp);
	CHECK(!err, "copier: %d", err);
	err = cs_gpu_stage_create(&cfg, slots, &cs_gpu_cuda_copy_ops, cp, &st);
	CHECK(!err, "stage: %d", err);
	if (!st || !slots)
		goto out;
	err = stage_out_run(st, d1, len, dst);
	CHECK(!err && !memcmp(src, dst, len), "device -> wire intact: %d", err);
	err = stage_in_run(st, d2, len, src, chunk);
	memset(dst, 0, len);
	cudaMemcpy(dst, d2, len, cudaMemcpyDeviceToHost);
	CHECK(!err && !memcmp(src, dst, len), "wire -> device intact: %d", err);
	test_stage_reduce(d2, src);
out:
	cs_gpu_stage_destroy(st);
	cs_gpu_cuda_copier_destroy(cp);
	pinned_shm_free(slots, chunk * depth);
	cudaFree(d1);
	cudaFree(d2);
	free(src);
	free(dst);
}

/* ---- registration ---------------------------------------------------------
 */

static int tn_dmabuf(void *ctx, int fd, uint64_t off, size_t len, void *va,
		     void **mr, char *why, size_t whylen)
{
	off_t end = lseek(fd, 0, SEEK_END);

	(void)ctx;
	(void)off;
	(void)va;
	printf("dma-buf fd %d: lseek end %lld for %zu bytes\n", fd,
	       (long long)end, len);
	if (end < (off_t)len) {
		snprintf(why, whylen, "the dma-buf is shorter than the range");
		return -EINVAL;
	}
	*mr = &tn_dmabuf;
	return 0;
}

static void test_register(void)
{
	struct cs_gpu_nic nic = { .name = "test-nic", .reg_dmabuf = tn_dmabuf };
	struct cs_gpu_nic udp = { .name = "udp" };
	struct cs_gpu_host_caps host;
	struct cs_gpu_mr mr;
	size_t len = 4u << 20;
	void *d = NULL;
	int err;

	cs_gpu_host_caps_read("/sys", &host);
	CHECK(CUOK(cudaMalloc(&d, len)), "cudaMalloc");
	err = cs_gpu_register(&dev0, &host, &nic, &cs_gpu_cuda_export_ops, NULL,
			      d, len, &mr);
	printf("registration: %s\n", mr.why);
	CHECK(!err && (mr.kind == CS_GPU_REG_DMABUF || !dev0.dmabuf),
	      "dma-buf where the device has it: %s", mr.why);
	cs_gpu_deregister(&nic, &mr);
	err = cs_gpu_register(&dev0, &host, &udp, &cs_gpu_cuda_export_ops, NULL,
			      d, len, &mr);
	printf("registration: %s\n", mr.why);
	CHECK(!err && mr.kind == CS_GPU_REG_STAGING, "udp stages: %s", mr.why);
	cs_gpu_deregister(&udp, &mr);
	cudaFree(d);
}

/* ---- allocations shared with another process ------------------------------
 */

struct share_msg {
	struct cs_gpu_handle a, freed;
	uint8_t uuid[CS_GPU_UUID_LEN];
	uint64_t vmm_len;
	uint32_t pattern;
};

static int drv_sym(const char *name, void *fnp)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (!CUOK(cudaGetDriverEntryPointByVersion(name, &fn, 12000,
						   cudaEnableDefault, &q)) ||
	    !fn)
		return -ENOSYS;
	memcpy(fnp, &fn, sizeof(fn));
	return 0;
}

/* a VMM allocation exportable as a POSIX fd, mapped here too */
static int vmm_alloc(size_t *len, int *fd, void **va)
{
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
			   const CUmemAllocationProp *, unsigned long long);
	CUresult (*gran)(size_t *, const CUmemAllocationProp *,
			 CUmemAllocationGranularity_flags);
	CUresult (*export)(void *, CUmemGenericAllocationHandle,
			   CUmemAllocationHandleType, unsigned long long);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
			    unsigned long long);
	CUresult (*map)(CUdeviceptr, size_t, size_t,
			CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *,
			   size_t);
	CUmemAllocationProp prop = { 0 };
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc acc = { 0 };
	CUdeviceptr p;
	size_t g;

	if (drv_sym("cuMemCreate", &create) ||
	    drv_sym("cuMemGetAllocationGranularity", &gran) ||
	    drv_sym("cuMemExportToShareableHandle", &export) ||
	    drv_sym("cuMemAddressReserve", &reserve) ||
	    drv_sym("cuMemMap", &map) || drv_sym("cuMemSetAccess", &access))
		return -ENOSYS;
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	if (gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
		return -EIO;
	*len = 2 * g;
	if (create(&h, *len, &prop, 0) != CUDA_SUCCESS ||
	    export(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
		    CUDA_SUCCESS ||
	    reserve(&p, *len, g, 0, 0) != CUDA_SUCCESS ||
	    map(p, *len, 0, h, 0) != CUDA_SUCCESS)
		return -EIO;
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (access(p, *len, &acc, 1) != CUDA_SUCCESS)
		return -EIO;
	*va = (void *)(uintptr_t)p;
	return 0;
}

static int send_fd(int sock, const void *buf, size_t len, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (fd >= 0) {
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &mh, 0) == (ssize_t)len ? 0 : -errno;
}

static int recv_fd(int sock, void *buf, size_t len, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;

	*fd = -1;
	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != (ssize_t)len)
		return -EIO;
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	return 0;
}

static uint32_t read_u32(void *d)
{
	uint32_t v = 0;

	cudaMemcpy(&v, d, 4, cudaMemcpyDeviceToHost);
	return v;
}

/* the sidecar's side: map what the trainer sent, refuse what is wrong */
static int sidecar_main(int sock)
{
	struct cs_gpu_map_cfg cfg = { .max_entries = 16 };
	char why[CS_GPU_WHY_LEN];
	struct share_msg msg;
	struct cs_gpu_handle h;
	struct cs_gpu_map *m = NULL;
	uint32_t id = 0, id2 = 0;
	unsigned held;
	uint64_t opens;
	void *p;
	int err, fd, fd2;

	CHECK(!recv_fd(sock, &msg, sizeof(msg), &fd), "receive the handles");
	memcpy(cfg.uuid, msg.uuid, CS_GPU_UUID_LEN);
	CHECK(!cs_gpu_map_create(&cfg, &cs_gpu_cuda_map_ops, NULL, &m),
	      "map create");
	if (!m)
		return 1;

	/* an offset past the allocation, said in the handle: refused after
	 * opening, and closed again */
	h = msg.a;
	h.len = msg.a.len + (1u << 30);
	err = cs_gpu_map_get(m, 1, &h, -1, &id, why, sizeof(why));
	CHECK(err == -EINVAL, "length past the allocation: %d %s", err, why);
	printf("sidecar: refused: %s\n", why);
	err = cs_gpu_map_get(m, 1, &msg.a, -1, &id, why, sizeof(why));
	CHECK(!err, "CUDA IPC handle mapped: %d %s", err, why);
	err = cs_gpu_map_get(m, 1, &msg.a, -1, &id2, why, sizeof(why));
	cs_gpu_map_counts(m, &held, &opens);
	CHECK(!err && id2 == id && held == 1 && opens == 2,
	      "mapped once, then cached: held %u opens %llu", held,
	      (unsigned long long)opens);
	CHECK(!cs_gpu_map_addr(m, 1, id, 4096, 4, &p) &&
		      read_u32(p) == msg.pattern,
	      "the trainer's bytes read through the mapping");
	CHECK(cs_gpu_map_addr(m, 1, id, msg.a.len, 1, &p) == -ERANGE,
	      "offset past the allocation");
	CHECK(cs_gpu_map_addr(m, 2, id, 0, 1, &p) == -EBADF,
	      "another trainer's mapping");

	h = msg.a;
	h.uuid[0] ^= 0xff;
	err = cs_gpu_map_get(m, 1, &h, -1, &id2, why, sizeof(why));
	CHECK(err == -ENODEV, "a handle of another device: %d %s", err, why);
	printf("sidecar: refused: %s\n", why);
	err = cs_gpu_map_get(m, 1, &msg.freed, -1, &id2, why, sizeof(why));
	CHECK(err == -ENOENT, "a freed allocation: %d %s", err, why);
	printf("sidecar: refused: %s\n", why);
	h = msg.a;
	for (unsigned i = 0; i < sizeof(h.ipc); i++)
		h.ipc[i] = (uint8_t)(next_rand() >> 24);
	err = cs_gpu_map_get(m, 1, &h, -1, &id2, why, sizeof(why));
	CHECK(err < 0, "a garbage handle: %d %s", err, why);
	printf("sidecar: refused: %s\n", why);

	if (fd >= 0) {
		h = (struct cs_gpu_handle){ .kind = CS_GPU_HANDLE_POSIX_FD,
					    .len = msg.vmm_len * 2 };
		memcpy(h.uuid, msg.uuid, CS_GPU_UUID_LEN);
		fd2 = dup(fd);
		err = cs_gpu_map_get(m, 1, &h, fd2, &id2, why, sizeof(why));
		CHECK(err == -EINVAL, "VMM fd, length past it: %d %s", err,
		      why);
		printf("sidecar: refused: %s\n", why);
		h.len = msg.vmm_len;
		err = cs_gpu_map_get(m, 1, &h, fd, &id2, why, sizeof(why));
		CHECK(!err, "VMM POSIX fd imported: %d %s", err, why);
		CHECK(!err && !cs_gpu_map_addr(m, 1, id2, 64, 4, &p) &&
			      read_u32(p) == msg.pattern + 1,
		      "the trainer's VMM bytes read through the mapping");
	} else {
		printf("sidecar: no VMM fd (the trainer could not export one)\n");
	}
	cs_gpu_map_drop_owner(m, 1);
	cs_gpu_map_counts(m, &held, &opens);
	CHECK(held == 0, "all unmapped: %u", held);
	cs_gpu_map_destroy(m);
	return check_report("sidecar (child)");
}

static void test_share(const char *self)
{
	struct share_msg msg = { .pattern = 0x5eed1234 };
	uint32_t second = msg.pattern + 1;
	void *a = NULL, *b = NULL, *v = NULL;
	size_t alen = 8u << 20;
	int sv[2], fd = -1, status = 0, err;
	pid_t pid;

	CHECK(CUOK(cudaMalloc(&a, alen)) && CUOK(cudaMalloc(&b, 1u << 20)),
	      "cudaMalloc");
	cudaMemcpy((char *)a + 4096, &msg.pattern, 4, cudaMemcpyHostToDevice);
	msg.a.kind = msg.freed.kind = CS_GPU_HANDLE_CUDA_IPC;
	msg.a.len = alen;
	msg.freed.len = 1u << 20;
	memcpy(msg.uuid, dev0.uuid, CS_GPU_UUID_LEN);
	memcpy(msg.a.uuid, dev0.uuid, CS_GPU_UUID_LEN);
	memcpy(msg.freed.uuid, dev0.uuid, CS_GPU_UUID_LEN);
	CHECK(CUOK(cudaIpcGetMemHandle((cudaIpcMemHandle_t *)msg.a.ipc, a)) &&
		      CUOK(cudaIpcGetMemHandle(
			      (cudaIpcMemHandle_t *)msg.freed.ipc, b)),
	      "cudaIpcGetMemHandle");
	cudaFree(b); /* its handle now names a freed allocation */
	err = vmm_alloc(&alen, &fd, &v);
	if (!err) {
		msg.vmm_len = alen;
		cudaMemcpy((char *)v + 64, &second, 4, cudaMemcpyHostToDevice);
	} else {
		printf("trainer: no VMM POSIX-fd allocation: %d\n", err);
	}
	CHECK(!socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), "socketpair");
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		char arg[16];

		close(sv[0]);
		snprintf(arg, sizeof(arg), "%d", sv[1]);
		execl(self, self, "--sidecar", arg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	CHECK(!send_fd(sv[0], &msg, sizeof(msg), fd), "send the handles");
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		      WEXITSTATUS(status) == 0,
	      "the sidecar process passed: status %#x", status);
	close(sv[0]);
	if (fd >= 0)
		close(fd);
	cudaFree(a);
}

int main(int argc, char **argv)
{
	char why[CS_GPU_WHY_LEN] = "";
	char self[PATH_MAX];

	if (argc == 3 && !strcmp(argv[1], "--sidecar"))
		return sidecar_main(atoi(argv[2]));
	if (cs_gpu_available(why, sizeof(why)) <= 0) {
		printf("SKIP test_gpu_dev: %s\n", why);
		return 77;
	}
	if (!realpath("/proc/self/exe", self))
		snprintf(self, sizeof(self), "%s", argv[0]);
	test_discover();
	test_kernels();
	test_stage();
	test_register();
	test_share(self);
	return check_report("test_gpu_dev");
}
