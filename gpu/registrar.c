// SPDX-License-Identifier: MIT
/* Registering device memory for a NIC: dma-buf, else peer memory, else
 * staging, with the choice and the reasons logged. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#define CS_LOG_MODULE "gpu"
#include "internal/log.h"

#include "gpu/gpu.h"

const char *cs_gpu_reg_name(enum cs_gpu_reg_kind k)
{
	static const char *const names[CS_GPU_REG_COUNT] = {
		[CS_GPU_REG_DMABUF] = "dma-buf",
		[CS_GPU_REG_PEERMEM] = "peer-memory",
		[CS_GPU_REG_STAGING] = "staging",
	};

	return (unsigned)k < CS_GPU_REG_COUNT ? names[k] : "?";
}

void cs_gpu_host_caps_read(const char *sysfs, struct cs_gpu_host_caps *out)
{
	static const char *const mods[] = { "module/nvidia_peermem",
					    "module/nv_peer_mem",
					    "kernel/mm/memory_peers/nv_mem" };
	char path[512];
	struct stat st;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", sysfs, mods[i]);
		if (!stat(path, &st))
			out->peermem = true;
	}
}

/* append "path: reason; " to the registration's story */
static void note(struct cs_gpu_mr *mr, enum cs_gpu_reg_kind k,
		 const char *reason)
{
	size_t used = strlen(mr->why);

	snprintf(mr->why + used, sizeof(mr->why) - used, "%s%s: %s",
		 used ? "; " : "", cs_gpu_reg_name(k), reason);
}

/*
 * A NIC callback said no: "<what> (ENOTSUP): <the port's reason>", or
 * strerror() where the port gave none. The errno's name is in the text so
 * that a log search finds every refusal of one kind.
 */
static void refused(struct cs_gpu_mr *mr, enum cs_gpu_reg_kind k,
		    const char *what, int err, const char *port_why)
{
	char why[CS_GPU_WHY_LEN];
	const char *name = strerrorname_np(-err);

	snprintf(why, sizeof(why), "%s (%s): %s", what, name ? name : "?",
		 port_why && port_why[0] ? port_why : strerror(-err));
	note(mr, k, why);
}

static int try_dmabuf(const struct cs_gpu_dev *dev,
		      const struct cs_gpu_nic *nic,
		      const struct cs_gpu_export_ops *ex, void *ex_ctx,
		      struct cs_gpu_mr *mr)
{
	char why[CS_GPU_WHY_LEN] = "";
	int fd = -1, err;

	if (!dev->dmabuf) {
		note(mr, CS_GPU_REG_DMABUF, "the device cannot export dma-buf");
		return -EOPNOTSUPP;
	}
	if (!nic->reg_dmabuf) {
		note(mr, CS_GPU_REG_DMABUF, "the port cannot import dma-buf");
		return -EOPNOTSUPP;
	}
	if (!ex || !ex->dmabuf_export) {
		note(mr, CS_GPU_REG_DMABUF, "no exporter (built without CUDA)");
		return -EOPNOTSUPP;
	}
	err = ex->dmabuf_export(ex_ctx, mr->va, mr->len, &fd, why, sizeof(why));
	if (err) {
		note(mr, CS_GPU_REG_DMABUF, why[0] ? why : "export failed");
		return err;
	}
	why[0] = 0;
	err = nic->reg_dmabuf(nic->ctx, fd, 0, mr->len, mr->va, &mr->nic_mr,
			      why, sizeof(why));
	if (err) {
		refused(mr, CS_GPU_REG_DMABUF, "the port refused the dma-buf",
			err, why);
		close(fd);
		return err;
	}
	mr->dmabuf_fd = fd;
	return 0;
}

static int try_peermem(const struct cs_gpu_dev *dev,
		       const struct cs_gpu_host_caps *host,
		       const struct cs_gpu_nic *nic, struct cs_gpu_mr *mr)
{
	char why[CS_GPU_WHY_LEN];
	int err;

	if (!dev->gdr) {
		note(mr, CS_GPU_REG_PEERMEM,
		     "the device has no GPUDirect RDMA");
		return -EOPNOTSUPP;
	}
	if (!host->peermem) {
		note(mr, CS_GPU_REG_PEERMEM, "nvidia_peermem is not loaded");
		return -EOPNOTSUPP;
	}
	if (!nic->reg_peer) {
		note(mr, CS_GPU_REG_PEERMEM,
		     "the port cannot register device addresses");
		return -EOPNOTSUPP;
	}
	why[0] = 0;
	err = nic->reg_peer(nic->ctx, mr->va, mr->len, &mr->nic_mr, why,
			    sizeof(why));
	if (err)
		refused(mr, CS_GPU_REG_PEERMEM, "the port refused it", err,
			why);
	return err;
}

int cs_gpu_register(const struct cs_gpu_dev *dev,
		    const struct cs_gpu_host_caps *host,
		    const struct cs_gpu_nic *nic,
		    const struct cs_gpu_export_ops *ex, void *ex_ctx, void *va,
		    size_t len, struct cs_gpu_mr *out)
{
	char chosen[sizeof(out->why)];

	if (!dev || !host || !nic || !out || !va || !len)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->va = va;
	out->len = len;
	out->dmabuf_fd = -1;
	if (!try_dmabuf(dev, nic, ex, ex_ctx, out))
		out->kind = CS_GPU_REG_DMABUF;
	else if (!try_peermem(dev, host, nic, out))
		out->kind = CS_GPU_REG_PEERMEM;
	else
		out->kind = CS_GPU_REG_STAGING;
	/* "staging for udp (dma-buf: the port cannot ...; peer-memory: ...)" */
	snprintf(chosen, sizeof(chosen), "%s", out->why);
	if (snprintf(out->why, sizeof(out->why), "%s for %s (%s)",
		     cs_gpu_reg_name(out->kind), nic->name ? nic->name : "port",
		     chosen[0] ? chosen : "first choice") < 0)
		out->why[0] = 0;
	CS_INFO("device memory %p+%zu on %s registered: %s", va, len,
		dev->bdf[0] ? dev->bdf : "gpu", out->why);
	return 0;
}

void cs_gpu_deregister(const struct cs_gpu_nic *nic, struct cs_gpu_mr *mr)
{
	if (!mr)
		return;
	if (mr->nic_mr && nic && nic->dereg)
		nic->dereg(nic->ctx, mr->nic_mr);
	mr->nic_mr = NULL;
	if (mr->dmabuf_fd >= 0)
		close(mr->dmabuf_fd);
	mr->dmabuf_fd = -1;
}
