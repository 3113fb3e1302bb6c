/* SPDX-License-Identifier: MIT */
/* Trainers' device buffers in the sidecar (collstackd built with CUDA). */
#ifndef CS_GPU_IPC_DEV_H
#define CS_GPU_IPC_DEV_H

#include "control/ipc/ipc_server.h"

struct cs_gpu_ipc;

struct cs_gpu_nic;

/**
 * cs_gpu_ipc_create - serve trainers' device ranges of one GPU
 * @ordinal: the CUDA device
 * @port_name: the port's name, for the registration log ("udp", "dpdk")
 * @nic: the running port's hooks for device memory (cs_port_gpu_nic(),
 *	copied; the port must outlive the context), or NULL for a port
 *	without them: every range is then staged, and the log says so
 * @out: the context for cs_gpu_ipc_ops
 *
 * Returns: 0, or -ENODEV (no usable device: logged at info level; the
 * sidecar then refuses device registrations), -EIO, -ENOMEM.
 */
int cs_gpu_ipc_create(int ordinal, const char *port_name,
		      const struct cs_gpu_nic *nic, struct cs_gpu_ipc **out);
void cs_gpu_ipc_destroy(struct cs_gpu_ipc *x);

/* for cs_ipc_server_set_dev(), with the context above */
extern const struct cs_ipc_dev_ops cs_gpu_ipc_ops;

#endif
