/* SPDX-License-Identifier: MIT */
/* Shared by test_gpu_dev and cs-gpu-bench: pinned shared-memory slots and
 * driving the staging engine to the end of a transfer. */
#ifndef CS_TESTS_GPU_UTIL_H
#define CS_TESTS_GPU_UTIL_H

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>

#include "gpu/gpu.h"

/* pinned host memory the way the sidecar has it: a MAP_SHARED memfd
 * mapping registered with cudaHostRegister */
static inline void *pinned_shm(size_t len)
{
	int fd = memfd_create("cs-gpu-slots", MFD_CLOEXEC);
	void *p;

	if (fd < 0)
		return NULL;
	if (ftruncate(fd, (off_t)len)) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	if (cudaHostRegister(p, len, cudaHostRegisterDefault) != cudaSuccess) {
		cudaGetLastError();
		munmap(p, len);
		return NULL;
	}
	return p;
}

static inline void pinned_shm_free(void *p, size_t len)
{
	if (!p)
		return;
	cudaHostUnregister(p);
	munmap(p, len);
}

/* the wire of an out transfer: copy the chunk (or not) and let it go */
struct sink {
	struct cs_gpu_stage *st;
	unsigned char *dst; /* NULL: a wire that takes no time */
};

static inline void sink_send(void *ctx, uint64_t idx, uint64_t off,
			     const void *host, size_t len)
{
	struct sink *s = ctx;

	if (s->dst)
		memcpy(s->dst + off, host, len);
	cs_gpu_stage_sent(s->st, idx);
}

/* device -> slots -> @dst (or nowhere); returns 0 or the poll error */
static inline int stage_out_run(struct cs_gpu_stage *st, void *dev, size_t len,
				void *dst)
{
	struct sink s = { .st = st, .dst = dst };
	int r = cs_gpu_stage_start(st, CS_GPU_STAGE_OUT, dev, len, sink_send,
				   &s);

	while (!r)
		r = cs_gpu_stage_poll(st);
	return r < 0 ? r : 0;
}

/* @src -> slots -> device, chunks handed in as soon as their slot is free */
static inline int stage_in_run(struct cs_gpu_stage *st, void *dev, size_t len,
			       const void *src, size_t chunk)
{
	const unsigned char *s = src;
	uint64_t next = 0, n;
	int r = cs_gpu_stage_start(st, CS_GPU_STAGE_IN, dev, len, NULL, NULL);

	n = cs_gpu_stage_chunks(st);
	while (!r) {
		void *slot;

		while (next < n && (slot = cs_gpu_stage_rx_slot(st, next))) {
			size_t l = next == n - 1 ? len - next * chunk : chunk;

			if (s)
				memcpy(slot, s + next * chunk, l);
			r = cs_gpu_stage_received(st, next);
			if (r)
				return r;
			next++;
		}
		r = cs_gpu_stage_poll(st);
	}
	return r < 0 ? r : 0;
}

#endif
