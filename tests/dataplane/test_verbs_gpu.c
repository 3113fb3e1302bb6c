/* SPDX-License-Identifier: MIT */
/*
 * ibverbs registration of device memory (dataplane/verbs_gpu.h): device
 * discovery as it is on this machine (no RDMA device here: a clear
 * refusal; where one exists, host memory registered and deregistered
 * through it), and the callback glue through fake verbs calls.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "dataplane/verbs_gpu.h"
#include "gpu/gpu.h"
#include "gpu_fake_export.h"

Test(verbs_gpu, discovery_opens_a_device_or_says_there_is_none)
{
	struct cs_verbs_gpu *vg = (void *)1;
	struct cs_gpu_nic nic;
	char why[CS_GPU_WHY_LEN] = "";
	size_t len = 1u << 16;
	void *buf, *mr = NULL;
	int ret;

	ret = cs_verbs_gpu_open("cs-no-such-device", &vg, why, sizeof(why));
	cr_assert_eq(ret, -ENODEV, "%d", ret);
	cr_assert_null(vg);
	cr_assert(strstr(why, "no verbs device"), "why: %s", why);

	ret = cs_verbs_gpu_open(NULL, &vg, why, sizeof(why));
	if (ret) {
		cr_assert_eq(ret, -ENODEV, "%d: %s", ret, why);
		cr_assert(!strncmp(why, "no verbs device (", 17), "why: %s",
			  why);
		cr_log_info("no RDMA device here: %s", why);
		return;
	}
	/* an RDMA device: host memory goes through ibv_reg_mr anywhere */
	cs_verbs_gpu_nic(vg, &nic);
	cr_assert(!strncmp(nic.name, "verbs:", 6));
	cr_assert_eq(posix_memalign(&buf, 4096, len), 0);
	ret = nic.reg_peer(nic.ctx, buf, len, &mr, why, sizeof(why));
	cr_assert_eq(ret, 0, "%s", why);
	cr_assert_eq(((struct ibv_mr *)mr)->length, len);
	nic.dereg(nic.ctx, mr);
	cs_verbs_gpu_close(vg);
	free(buf);
}

/* fake verbs: what they were called with, and what they answer */
static struct {
	struct ibv_pd *pd;
	uint64_t off, iova;
	size_t len;
	void *addr;
	int fd, access, fail, calls, deregs;
	struct ibv_mr mr;
} fk;

static struct ibv_mr *fk_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
				       size_t length, uint64_t iova, int fd,
				       int access)
{
	fk.calls++;
	fk.pd = pd;
	fk.off = offset;
	fk.len = length;
	fk.iova = iova;
	fk.fd = fd;
	fk.access = access;
	if (fk.fail) {
		errno = fk.fail;
		return NULL;
	}
	return &fk.mr;
}

static struct ibv_mr *fk_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
				int access)
{
	fk.calls++;
	fk.pd = pd;
	fk.addr = addr;
	fk.len = length;
	fk.access = access;
	if (fk.fail) {
		errno = fk.fail;
		return NULL;
	}
	return &fk.mr;
}

static int fk_dereg_mr(struct ibv_mr *mr)
{
	cr_assert_eq(mr, &fk.mr, "dereg of what was registered");
	fk.deregs++;
	return 0;
}

static const struct cs_verbs_mr_ops fk_ops = {
	.reg_dmabuf_mr = fk_reg_dmabuf_mr,
	.reg_mr = fk_reg_mr,
	.dereg_mr = fk_dereg_mr,
};

static const int want_access = IBV_ACCESS_LOCAL_WRITE |
			       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

Test(verbs_gpu, callbacks_pass_the_range_and_report_refusals)
{
	struct ibv_pd pd = { 0 };
	struct cs_verbs_gpu *vg;
	struct cs_gpu_nic nic;
	char why[CS_GPU_WHY_LEN] = "", va[256];
	void *mr = NULL;
	int ret;

	cr_assert_eq(cs_verbs_gpu_from_pd(NULL, "x", &fk_ops, &vg), -EINVAL);
	cr_assert_eq(cs_verbs_gpu_from_pd(&pd, "fake0", &fk_ops, &vg), 0);
	cs_verbs_gpu_nic(vg, &nic);
	cr_assert_str_eq(nic.name, "verbs:fake0");
	cr_assert_null(nic.bdf);

	ret = nic.reg_dmabuf(nic.ctx, 42, 4096, 128, va, &mr, why, sizeof(why));
	cr_assert_eq(ret, 0);
	cr_assert(fk.pd == &pd && fk.fd == 42 && fk.off == 4096 &&
		  fk.len == 128);
	cr_assert_eq(fk.iova, (uint64_t)(uintptr_t)va, "iova is the VA");
	cr_assert_eq(fk.access, want_access);
	cr_assert_eq(mr, &fk.mr);
	nic.dereg(nic.ctx, mr);
	cr_assert_eq(fk.deregs, 1);

	ret = nic.reg_peer(nic.ctx, va, 256, &mr, why, sizeof(why));
	cr_assert(!ret && fk.addr == va && fk.len == 256 &&
		  fk.access == want_access);
	nic.dereg(nic.ctx, mr);
	cr_assert_eq(fk.deregs, 2);

	fk.fail = EOPNOTSUPP;
	mr = NULL;
	ret = nic.reg_dmabuf(nic.ctx, 42, 0, 128, va, &mr, why, sizeof(why));
	cr_assert_eq(ret, -EOPNOTSUPP);
	cr_assert_null(mr);
	cr_assert_str_eq(why, "ibv_reg_dmabuf_mr on verbs:fake0: Operation "
			      "not supported");
	fk.fail = EFAULT;
	ret = nic.reg_peer(nic.ctx, va, 128, &mr, why, sizeof(why));
	cr_assert_eq(ret, -EFAULT);
	cr_assert_str_eq(why, "ibv_reg_mr on verbs:fake0: Bad address");
	cs_verbs_gpu_close(vg);
}

/* The registrar over verbs: dma-buf first; when the provider refuses it,
 * peer memory, and the log says what ibverbs said. */
Test(verbs_gpu, registrar_order_over_verbs)
{
	struct cs_gpu_dev dev = { .dmabuf = true, .gdr = true };
	struct cs_gpu_host_caps host = { .peermem = true };
	const struct cs_gpu_export_ops ex = { .dmabuf_export = fx_export };
	struct ibv_pd pd = { 0 };
	struct cs_verbs_gpu *vg;
	struct cs_gpu_nic nic;
	struct cs_gpu_mr mr;
	char va[4096];

	cr_assert_eq(cs_verbs_gpu_from_pd(&pd, "fake0", &fk_ops, &vg), 0);
	cs_verbs_gpu_nic(vg, &nic);
	cr_assert_eq(cs_gpu_register(&dev, &host, &nic, &ex, NULL, va,
				     sizeof(va), &mr),
		     0);
	cr_assert_eq(mr.kind, CS_GPU_REG_DMABUF, "%s", mr.why);
	cr_assert_eq(fk.fd, mr.dmabuf_fd, "the exported fd reached verbs");
	cs_gpu_deregister(&nic, &mr);
	cr_assert_eq(fk.deregs, 1);

	fk.calls = 0;
	fk.fail = EOPNOTSUPP; /* both calls refuse */
	cr_assert_eq(cs_gpu_register(&dev, &host, &nic, &ex, NULL, va,
				     sizeof(va), &mr),
		     0);
	cr_assert_eq(mr.kind, CS_GPU_REG_STAGING, "%s", mr.why);
	cr_assert_eq(fk.calls, 2, "dma-buf, then peer memory");
	cr_assert(strstr(mr.why, "staging for verbs:fake0 (dma-buf: the port "
				 "refused the dma-buf (EOPNOTSUPP): "
				 "ibv_reg_dmabuf_mr on verbs:fake0") &&
			  strstr(mr.why, "peer-memory: the port refused it "
					 "(EOPNOTSUPP): ibv_reg_mr on "
					 "verbs:fake0"),
		  "why: %s", mr.why);
	cs_gpu_deregister(&nic, &mr);
	cr_assert_eq(fk.deregs, 1, "nothing registered, nothing undone");
	cs_verbs_gpu_close(vg);
}
