/* SPDX-License-Identifier: MIT */
/*
 * Device (GPU) memory for an RDMA device through ibverbs: a struct
 * cs_gpu_nic (gpu/gpu.h) over a protection domain, whose reg_dmabuf is
 * ibv_reg_dmabuf_mr, reg_peer ibv_reg_mr (device addresses need the
 * peer-memory module, nvidia_peermem) and dereg ibv_dereg_mr.
 *
 * This is the registration only: there is no verbs port yet (no QPs, no
 * work requests), so nothing in collstackd uses it. Built where meson
 * found libibverbs (CS_HAVE_VERBS).
 */
#ifndef CS_DATAPLANE_VERBS_GPU_H
#define CS_DATAPLANE_VERBS_GPU_H

#include <stddef.h>
#include <stdint.h>

struct ibv_pd;
struct ibv_mr;
struct cs_gpu_nic;
struct cs_verbs_gpu;

/* The libibverbs calls, behind a table so that tests can pass fakes. */
struct cs_verbs_mr_ops {
	struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset,
					size_t length, uint64_t iova, int fd,
					int access);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
				 int access);
	int (*dereg_mr)(struct ibv_mr *mr);
};

/* libibverbs itself */
extern const struct cs_verbs_mr_ops cs_verbs_mr_ibv;

/* What a device range is registered for: the NIC writes into it
 * (receive, RDMA write) and reads from it (send, RDMA read). */
extern const int cs_verbs_gpu_access;

/**
 * cs_verbs_gpu_open - open an RDMA device and a protection domain on it
 * @dev: the device's name ("mlx5_0"), or NULL/"" for the first one
 * @out: the registration context
 * @why: out: the reason when it fails ("no verbs device ...")
 *
 * Returns: 0, -ENODEV (no verbs device, or none of that name), or the
 * negative errno of ibv_open_device / ibv_alloc_pd.
 */
int cs_verbs_gpu_open(const char *dev, struct cs_verbs_gpu **out, char *why,
		      size_t whylen);

/**
 * cs_verbs_gpu_from_pd - a registration context over the caller's @pd
 * @pd: a protection domain (it stays the caller's)
 * @name: the device's name, for the log
 * @ops: the verbs calls, NULL for libibverbs (&cs_verbs_mr_ibv)
 * @out: the context
 *
 * Returns: 0, -EINVAL, -ENOMEM.
 */
int cs_verbs_gpu_from_pd(struct ibv_pd *pd, const char *name,
			 const struct cs_verbs_mr_ops *ops,
			 struct cs_verbs_gpu **out);

/**
 * cs_verbs_gpu_nic - the registrar's hooks over @vg (which must outlive
 * every registration made through them)
 */
void cs_verbs_gpu_nic(struct cs_verbs_gpu *vg, struct cs_gpu_nic *out);

/* Close what cs_verbs_gpu_open opened (NULL is ignored). */
void cs_verbs_gpu_close(struct cs_verbs_gpu *vg);

#endif
