// SPDX-License-Identifier: MIT
/* Device (GPU) memory registered with an RDMA device through ibverbs. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define CS_LOG_MODULE "verbs"
#include "internal/log.h"

#include "dataplane/verbs_gpu.h"
#include "gpu/gpu.h"

struct cs_verbs_gpu {
	struct ibv_context *ctx; /* NULL: the pd is the caller's */
	struct ibv_pd *pd;
	const struct cs_verbs_mr_ops *ops;
	char name[80]; /* "verbs:mlx5_0" */
	char bdf[32]; /* "" if not found */
};

/* ibv_reg_mr is a macro in rdma-core's header: a function for the table */
static struct ibv_mr *ibv_reg_mr_fn(struct ibv_pd *pd, void *addr,
				    size_t length, int access)
{
	return ibv_reg_mr(pd, addr, length, access);
}

const struct cs_verbs_mr_ops cs_verbs_mr_ibv = {
	.reg_dmabuf_mr = ibv_reg_dmabuf_mr,
	.reg_mr = ibv_reg_mr_fn,
	.dereg_mr = ibv_dereg_mr,
};

const int cs_verbs_gpu_access = IBV_ACCESS_LOCAL_WRITE |
				IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ;

/* a verbs call returned no MR: its errno, and why for the registrar */
static int refusal(const struct cs_verbs_gpu *vg, const char *call, int e,
		   char *why, size_t whylen)
{
	int err = e > 0 ? -e : -EIO;

	snprintf(why, whylen, "%s on %s: %s", call, vg->name, strerror(-err));
	return err;
}

static int vg_reg_dmabuf(void *ctx, int fd, uint64_t off, size_t len, void *va,
			 void **mr, char *why, size_t whylen)
{
	struct cs_verbs_gpu *vg = ctx;
	struct ibv_mr *m;

	/* iova = the range's address in this process, as ibv_reg_mr gives
	 * host memory: work requests name device and host memory alike */
	errno = 0;
	m = vg->ops->reg_dmabuf_mr(vg->pd, off, len, (uint64_t)(uintptr_t)va,
				   fd, cs_verbs_gpu_access);
	if (!m)
		return refusal(vg, "ibv_reg_dmabuf_mr", errno, why, whylen);
	*mr = m;
	return 0;
}

static int vg_reg_peer(void *ctx, void *va, size_t len, void **mr, char *why,
		       size_t whylen)
{
	struct cs_verbs_gpu *vg = ctx;
	struct ibv_mr *m;

	errno = 0;
	m = vg->ops->reg_mr(vg->pd, va, len, cs_verbs_gpu_access);
	if (!m)
		return refusal(vg, "ibv_reg_mr", errno, why, whylen);
	*mr = m;
	return 0;
}

static void vg_dereg(void *ctx, void *mr)
{
	struct cs_verbs_gpu *vg = ctx;
	int ret = vg->ops->dereg_mr(mr);

	if (ret)
		CS_WARN("ibv_dereg_mr on %s: %s", vg->name, strerror(ret));
}

void cs_verbs_gpu_nic(struct cs_verbs_gpu *vg, struct cs_gpu_nic *out)
{
	memset(out, 0, sizeof(*out));
	out->name = vg->name;
	out->bdf = vg->bdf[0] ? vg->bdf : NULL;
	out->ctx = vg;
	out->reg_dmabuf = vg_reg_dmabuf;
	out->reg_peer = vg_reg_peer;
	out->dereg = vg_dereg;
}

int cs_verbs_gpu_from_pd(struct ibv_pd *pd, const char *name,
			 const struct cs_verbs_mr_ops *ops,
			 struct cs_verbs_gpu **out)
{
	struct cs_verbs_gpu *vg;

	*out = NULL;
	if (!pd || !name)
		return -EINVAL;
	vg = calloc(1, sizeof(*vg));
	if (!vg)
		return -ENOMEM;
	vg->pd = pd;
	vg->ops = ops ? ops : &cs_verbs_mr_ibv;
	snprintf(vg->name, sizeof(vg->name), "verbs:%s", name);
	*out = vg;
	return 0;
}

/* The PCI address of an RDMA device (<ibdev_path>/device is a link to
 * it), or "" */
static void dev_bdf(struct ibv_device *d, char *bdf, size_t len)
{
	char path[PATH_MAX], link[PATH_MAX];
	const char *base;
	ssize_t n;

	bdf[0] = 0;
	snprintf(path, sizeof(path), "%s/device", d->ibdev_path);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return;
	link[n] = 0;
	base = strrchr(link, '/');
	base = base ? base + 1 : link;
	if (strlen(base) < len) /* "0000:3b:00.0"; anything longer is not */
		memcpy(bdf, base, strlen(base) + 1);
}

int cs_verbs_gpu_open(const char *dev, struct cs_verbs_gpu **out, char *why,
		      size_t whylen)
{
	struct ibv_device **list, *d = NULL;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int n = 0, err;

	*out = NULL;
	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list) {
		/* ENOSYS: the kernel has no RDMA support at all */
		snprintf(why, whylen,
			 "no verbs device (ibv_get_device_list: "
			 "%s)",
			 strerror(errno ? errno : ENODEV));
		return -ENODEV;
	}
	for (int i = 0; i < n && !d; i++)
		if (!dev || !dev[0] ||
		    !strcmp(ibv_get_device_name(list[i]), dev))
			d = list[i];
	if (!d) {
		if (n && dev && dev[0])
			snprintf(why, whylen,
				 "no verbs device named %s (%d others)", dev,
				 n);
		else
			snprintf(why, whylen,
				 "no verbs device (ibv_get_device_list found "
				 "none)");
		err = -ENODEV;
		goto out_list;
	}
	ctx = ibv_open_device(d);
	if (!ctx) {
		err = errno ? -errno : -EIO;
		snprintf(why, whylen, "ibv_open_device %s: %s",
			 ibv_get_device_name(d), strerror(-err));
		goto out_list;
	}
	pd = ibv_alloc_pd(ctx);
	if (!pd) {
		err = errno ? -errno : -EIO;
		snprintf(why, whylen, "ibv_alloc_pd on %s: %s",
			 ibv_get_device_name(d), strerror(-err));
		goto out_close;
	}
	err = cs_verbs_gpu_from_pd(pd, ibv_get_device_name(d), NULL, out);
	if (err) {
		snprintf(why, whylen, "%s", strerror(-err));
		goto out_pd;
	}
	(*out)->ctx = ctx;
	dev_bdf(d, (*out)->bdf, sizeof((*out)->bdf));
	CS_INFO("%s (PCI %s): protection domain for device memory",
		(*out)->name, (*out)->bdf[0] ? (*out)->bdf : "none");
	ibv_free_device_list(list);
	return 0;

out_pd:
	ibv_dealloc_pd(pd);
out_close:
	ibv_close_device(ctx);
out_list:
	ibv_free_device_list(list);
	return err;
}

void cs_verbs_gpu_close(struct cs_verbs_gpu *vg)
{
	if (!vg)
		return;
	if (vg->ctx) {
		ibv_dealloc_pd(vg->pd);
		ibv_close_device(vg->ctx);
	}
	free(vg);
}
