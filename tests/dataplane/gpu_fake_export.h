/* SPDX-License-Identifier: MIT */
/*
 * A dma-buf exporter for the registrar's tests (gpu/gpu.h,
 * cs_gpu_export_ops.dmabuf_export): any range "exports" as an fd of
 * /dev/null, so the NIC hooks under test get a real fd to keep and close.
 */
#ifndef CS_TESTS_GPU_FAKE_EXPORT_H
#define CS_TESTS_GPU_FAKE_EXPORT_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>

static inline int fx_export(void *ctx, void *va, size_t len, int *fd, char *why,
			    size_t whylen)
{
	(void)ctx;
	(void)va;
	(void)len;
	(void)why;
	(void)whylen;
	*fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return *fd < 0 ? -errno : 0;
}

#endif
