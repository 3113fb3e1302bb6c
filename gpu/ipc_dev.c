// SPDX-License-Identifier: MIT
/* Trainers' device buffers in the sidecar: the device side of the IPC
 * server (cs_ipc_dev_ops) over the mapping cache, the registrar and CUDA
 * copies into pinned host shadows. Only built with CS_HAVE_CUDA. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define CS_LOG_MODULE "gpu"
#include "internal/log.h"

#include "gpu/gpu.h"
#include "gpu/ipc_dev.h"

struct cs_gpu_ipc {
	struct cs_gpu_map *map;
	struct cs_gpu_dev dev;
	struct cs_gpu_host_caps host;
	struct cs_gpu_nic nic;
	char nic_name[96];
	cudaStream_t stream; /* synchronous copies (to_host, from_host) */
	/* asynchronous copies (copy_start): device -> host and host ->
	 * device on streams of their own (both copy engines), one event per
	 * piece, from a free list (events are made once, reused) */
	cudaStream_t d2h, h2d;
	struct gi_ev *free_ev;
	unsigned nev_out; /* pieces started and not yet polled done */
};

struct gi_ev {
	cudaEvent_t ev;
	/* reduce_start: the chunk's device scratch (grown, kept with the
	 * event: free again when the event completed) */
	void *scratch;
	size_t scratch_len;
	struct gi_ev *next;
};

static void gi_ev_free(struct gi_ev *e)
{
	cudaEventDestroy(e->ev);
	if (e->scratch)
		cudaFree(e->scratch);
	free(e);
}

/* one registered range: what the server's cookie points to */
struct range {
	uint32_t owner, id;
	uint64_t off, len;
	struct cs_gpu_mr mr;
};

int cs_gpu_ipc_create(int ordinal, const char *port_name,
		      const struct cs_gpu_nic *nic, struct cs_gpu_ipc **out)
{
	struct cs_gpu_map_cfg cfg = { .max_entries = 1024 };
	char why[CS_GPU_WHY_LEN];
	struct cs_gpu_ipc *x;
	int n = cs_gpu_available(why, sizeof(why)), err;

	if (n <= ordinal) {
		CS_INFO("no device memory for trainers: %s",
			n > 0 ? "no such device" : why);
		return -ENODEV;
	}
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	err = cs_gpu_discover(ordinal, &x->dev);
	if (err)
		goto out_free;
	if (cudaSetDevice(ordinal) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking) !=
		    cudaSuccess) {
		cudaGetLastError();
		err = -EIO;
		goto out_free;
	}
	if (cudaStreamCreateWithFlags(&x->d2h, cudaStreamNonBlocking) !=
	    cudaSuccess) {
		cudaGetLastError();
		err = -EIO;
		goto out_stream;
	}
	if (cudaStreamCreateWithFlags(&x->h2d, cudaStreamNonBlocking) !=
	    cudaSuccess) {
		cudaGetLastError();
		err = -EIO;
		goto out_d2h;
	}
	memcpy(cfg.uuid, x->dev.uuid, CS_GPU_UUID_LEN);
	err = cs_gpu_map_create(&cfg, &cs_gpu_cuda_map_ops, NULL, &x->map);
	if (err)
		goto out_h2d;
	cs_gpu_host_caps_read("/sys", &x->host);
	/* The running port's hooks (dpdk: extmem + DMA map on its device),
	 * or none (udp): the registrar tries them, or says they are missing,
	 * and logs why it chose what it chose. */
	if (nic && nic->name)
		snprintf(x->nic_name, sizeof(x->nic_name), "%s", nic->name);
	else
		snprintf(x->nic_name, sizeof(x->nic_name), "port %s",
			 port_name ? port_name : "?");
	if (nic)
		x->nic = *nic;
	x->nic.name = x->nic_name;
	CS_INFO("device memory for trainers: GPU %d %s (PCI %s, NUMA %d, "
		"dma-buf %d, GPUDirect RDMA %d, peer memory module %d)",
		ordinal, x->dev.name, x->dev.bdf, x->dev.numa, x->dev.dmabuf,
		x->dev.gdr, x->host.peermem);
	*out = x;
	return 0;

out_h2d:
	cudaStreamDestroy(x->h2d);
out_d2h:
	cudaStreamDestroy(x->d2h);
out_stream:
	cudaStreamDestroy(x->stream);
out_free:
	free(x);
	return err;
}

void cs_gpu_ipc_destroy(struct cs_gpu_ipc *x)
{
	if (!x)
		return;
	/* the server polled every piece it started before it unmapped */
	if (x->nev_out)
		CS_WARN("%u device copies never polled to the end", x->nev_out);
	cudaStreamSynchronize(x->d2h);
	cudaStreamSynchronize(x->h2d);
	while (x->free_ev) {
		struct gi_ev *e = x->free_ev;

		x->free_ev = e->next;
		gi_ev_free(e);
	}
	cs_gpu_map_destroy(x->map);
	cudaStreamDestroy(x->h2d);
	cudaStreamDestroy(x->d2h);
	cudaStreamDestroy(x->stream);
	free(x);
}

static int gi_map(void *ctx, uint32_t owner, uint32_t kind,
		  const uint8_t *handle, const uint8_t *uuid, uint64_t off,
		  uint64_t len, int fd, void **cookie, char *why, size_t whylen)
{
	struct cs_gpu_ipc *x = ctx;
	struct cs_gpu_handle h = { .kind = kind };
	struct range *r;
	void *va;
	int err;

	if (off + len < off) {
		snprintf(why, whylen, "offset + length overflow");
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	h.len = off + len; /* the allocation must reach the range's end */
	memcpy(h.uuid, uuid, CS_GPU_UUID_LEN);
	memcpy(h.ipc, handle, CS_GPU_IPC_HANDLE_LEN);
	err = cs_gpu_map_get(x->map, owner, &h, fd, &r->id, why, whylen);
	if (err) {
		CS_INFO("trainer %u: device range refused: %s", owner, why);
		free(r);
		return err;
	}
	r->owner = owner;
	r->off = off;
	r->len = len;
	err = cs_gpu_map_addr(x->map, owner, r->id, off, len, &va);
	if (!err)
		err = cs_gpu_register(&x->dev, &x->host, &x->nic,
				      &cs_gpu_cuda_export_ops, NULL, va, len,
				      &r->mr);
	if (err) {
		snprintf(why, whylen, "device range: %s", strerror(-err));
		cs_gpu_map_put(x->map, owner, r->id);
		free(r);
		return err;
	}
	*cookie = r;
	return 0;
}

static void gi_unmap(void *ctx, void *cookie)
{
	struct cs_gpu_ipc *x = ctx;
	struct range *r = cookie;

	cs_gpu_deregister(&x->nic, &r->mr);
	cs_gpu_map_put(x->map, r->owner, r->id);
	free(r);
}

static int gi_copy(struct cs_gpu_ipc *x, struct range *r, uint64_t off,
		   void *host, size_t len, bool to_host)
{
	void *va;

	if (off > r->len || len > r->len - off ||
	    cs_gpu_map_addr(x->map, r->owner, r->id, r->off + off, len, &va))
		return -ERANGE;
	if ((to_host ? cudaMemcpyAsync(host, va, len, cudaMemcpyDeviceToHost,
				       x->stream)
		     : cudaMemcpyAsync(va, host, len, cudaMemcpyHostToDevice,
				       x->stream)) != cudaSuccess ||
	    cudaStreamSynchronize(x->stream) != cudaSuccess) {
		CS_ERR("device copy of %zu bytes failed: %s", len,
		       cudaGetErrorString(cudaGetLastError()));
		return -EIO;
	}
	return 0;
}

static int gi_to_host(void *ctx, void *cookie, uint64_t off, void *host,
		      size_t len)
{
	return gi_copy(ctx, cookie, off, host, len, true);
}

static int gi_from_host(void *ctx, void *cookie, uint64_t off, const void *host,
			size_t len)
{
	return gi_copy(ctx, cookie, off, (void *)host, len, false);
}

/* An event for a piece: from the free list, or a new one. */
static int gi_ev_get(struct cs_gpu_ipc *x, struct gi_ev **out)
{
	struct gi_ev *e = x->free_ev;

	if (e) {
		x->free_ev = e->next;
		*out = e;
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	if (cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming) !=
	    cudaSuccess) {
		CS_ERR("cudaEventCreate: %s",
		       cudaGetErrorString(cudaGetLastError()));
		free(e);
		return -EIO;
	}
	*out = e;
	return 0;
}

/*
 * Start one piece: cudaMemcpyAsync on the direction's stream, then an
 * event recorded behind it; the token is the event's holder. Nothing on
 * this path waits for the device.
 */
static int gi_copy_start(void *ctx, void *cookie, uint64_t off, void *host,
			 size_t len, bool to_host, uint64_t *token)
{
	struct cs_gpu_ipc *x = ctx;
	struct range *r = cookie;
	cudaStream_t st = to_host ? x->d2h : x->h2d;
	struct gi_ev *e;
	void *va;
	int err;

	if (off > r->len || len > r->len - off ||
	    cs_gpu_map_addr(x->map, r->owner, r->id, r->off + off, len, &va))
		return -ERANGE;
	err = gi_ev_get(x, &e);
	if (err)
		return err;
	if ((to_host ? cudaMemcpyAsync(host, va, len, cudaMemcpyDeviceToHost,
				       st)
		     : cudaMemcpyAsync(va, host, len, cudaMemcpyHostToDevice,
				       st)) != cudaSuccess ||
	    cudaEventRecord(e->ev, st) != cudaSuccess) {
		CS_ERR("device copy of %zu bytes did not start: %s", len,
		       cudaGetErrorString(cudaGetLastError()));
		e->next = x->free_ev;
		x->free_ev = e;
		return -EIO;
	}
	x->nev_out++;
	*token = (uint64_t)(uintptr_t)e;
	return 0;
}

static int gi_copy_poll(void *ctx, uint64_t token)
{
	struct cs_gpu_ipc *x = ctx;
	struct gi_ev *e = (struct gi_ev *)(uintptr_t)token;
	cudaError_t q = cudaEventQuery(e->ev);
	int ret = 1;

	if (q == cudaErrorNotReady)
		return 0;
	if (q != cudaSuccess) {
		CS_ERR("device copy failed: %s", cudaGetErrorString(q));
		cudaGetLastError();
		/* a failed event is not reused: a new one is made */
		gi_ev_free(e);
		x->nev_out--;
		return -EIO;
	}
	e->next = x->free_ev;
	x->free_ev = e;
	x->nev_out--;
	return ret;
}

/*
 * Reduce a chunk in pinned host memory into the range where it lands:
 * on the host -> device stream (after the copies and reductions started
 * on it before: the server's order), the chunk goes into the event's
 * device scratch and cs_gpu_reduce (gpu/kernels.cu) folds it into the
 * range; @first copies it there instead. An event behind it is the
 * token, as for a copy; the scratch is the event's until it completed.
 * A scratch is grown with cudaMalloc (it synchronises the device: once
 * per event, at the largest piece, ipc.dev_chunk).
 */
static int gi_reduce_start(void *ctx, void *cookie, uint64_t off,
			   const void *host, size_t len, enum cs_dtype t,
			   enum cs_redop op, bool first, uint64_t *token)
{
	struct cs_gpu_ipc *x = ctx;
	struct range *r = cookie;
	size_t esz = cs_dtype_size(t);
	struct gi_ev *e;
	void *va;
	int err;

	if (t != CS_F32 && t != CS_F16 && t != CS_BF16 && t != CS_F64)
		return -EOPNOTSUPP;
	if (!esz || len % esz || off > r->len || len > r->len - off ||
	    cs_gpu_map_addr(x->map, r->owner, r->id, r->off + off, len, &va))
		return -ERANGE;
	err = gi_ev_get(x, &e);
	if (err)
		return err;
	if (!first && e->scratch_len < len) {
		if (e->scratch)
			cudaFree(e->scratch);
		e->scratch = NULL;
		e->scratch_len = 0;
		if (cudaMalloc(&e->scratch, len) != cudaSuccess) {
			CS_ERR("device scratch of %zu bytes: %s", len,
			       cudaGetErrorString(cudaGetLastError()));
			e->scratch = NULL;
			err = -ENOMEM;
			goto out_put;
		}
		e->scratch_len = len;
	}
	if (first) {
		if (cudaMemcpyAsync(va, host, len, cudaMemcpyHostToDevice,
				    x->h2d) != cudaSuccess)
			err = -EIO;
	} else if (cudaMemcpyAsync(e->scratch, host, len,
				   cudaMemcpyHostToDevice,
				   x->h2d) != cudaSuccess) {
		err = -EIO;
	} else {
		err = cs_gpu_reduce(va, e->scratch, len / esz, t, op, x->h2d);
	}
	if (!err && cudaEventRecord(e->ev, x->h2d) != cudaSuccess)
		err = -EIO;
	if (err) {
		CS_ERR("device reduction of %zu bytes did not start: %s (%s)",
		       len, cs_strerror(err),
		       cudaGetErrorString(cudaGetLastError()));
		goto out_put;
	}
	x->nev_out++;
	*token = (uint64_t)(uintptr_t)e;
	return 0;

out_put:
	e->next = x->free_ev;
	x->free_ev = e;
	return err;
}

static void *gi_shadow_alloc(void *ctx, size_t len)
{
	void *p = NULL;

	(void)ctx;
	if (cudaHostAlloc(&p, len, cudaHostAllocPortable) != cudaSuccess) {
		cudaGetLastError();
		return NULL;
	}
	return p;
}

static void gi_shadow_free(void *ctx, void *p, size_t len)
{
	(void)ctx;
	(void)len;
	cudaFreeHost(p);
}

const struct cs_ipc_dev_ops cs_gpu_ipc_ops = {
	.map = gi_map,
	.unmap = gi_unmap,
	.to_host = gi_to_host,
	.from_host = gi_from_host,
	.shadow_alloc = gi_shadow_alloc,
	.shadow_free = gi_shadow_free,
	.copy_start = gi_copy_start,
	.copy_poll = gi_copy_poll,
	.reduce_start = gi_reduce_start,
};
