// SPDX-License-Identifier: MIT
/* The CUDA backends of gpu/: discovery, mapping trainers' allocations,
 * dma-buf export, the staging copier. Only built with CS_HAVE_CUDA. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define CS_LOG_MODULE "gpu"
#include "internal/log.h"

#include "gpu/gpu.h"

/*
 * The driver API is reached through cudaGetDriverEntryPointByVersion, so
 * nothing links libcuda.so.1: the binaries load (and report "no CUDA
 * driver") on machines without the driver, like the build machines.
 */
#define CS_DRV_VERSION 12000

struct drv {
	int ok; /* 1 resolved, -1 failed */
	CUresult (*get_attr)(int *, CUdevice_attribute, CUdevice);
	CUresult (*addr_range)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*range_handle)(void *, CUdeviceptr, size_t,
				 CUmemRangeHandleType, unsigned long long);
	CUresult (*import)(CUmemGenericAllocationHandle *, void *,
			   CUmemAllocationHandleType);
	CUresult (*props)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
	CUresult (*gran)(size_t *, const CUmemAllocationProp *,
			 CUmemAllocationGranularity_flags);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
			    unsigned long long);
	CUresult (*map)(CUdeviceptr, size_t, size_t,
			CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *,
			   size_t);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*addr_free)(CUdeviceptr, size_t);
};

static struct drv drv;

static int sym(const char *name, void *fnp)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion(name, &fn, CS_DRV_VERSION,
					     cudaEnableDefault, &q) !=
		    cudaSuccess ||
	    q != cudaDriverEntryPointSuccess || !fn)
		return -ENOSYS;
	memcpy(fnp, &fn, sizeof(fn));
	return 0;
}

static int drv_load(void)
{
	if (drv.ok)
		return drv.ok > 0 ? 0 : -ENOSYS;
	drv.ok = -1;
	if (sym("cuDeviceGetAttribute", &drv.get_attr) ||
	    sym("cuMemGetAddressRange", &drv.addr_range) ||
	    sym("cuMemGetHandleForAddressRange", &drv.range_handle) ||
	    sym("cuMemImportFromShareableHandle", &drv.import) ||
	    sym("cuMemGetAllocationPropertiesFromHandle", &drv.props) ||
	    sym("cuMemGetAllocationGranularity", &drv.gran) ||
	    sym("cuMemAddressReserve", &drv.reserve) ||
	    sym("cuMemMap", &drv.map) || sym("cuMemSetAccess", &drv.access) ||
	    sym("cuMemRelease", &drv.release) ||
	    sym("cuMemUnmap", &drv.unmap) ||
	    sym("cuMemAddressFree", &drv.addr_free))
		return -ENOSYS;
	drv.ok = 1;
	return 0;
}

int cs_gpu_available(char *why, size_t whylen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		snprintf(why, whylen, "no usable CUDA device%s: %s (%s)",
			 access("/dev/nvidiactl", F_OK) ?
				 " (no NVIDIA driver: /dev/nvidiactl absent)" :
				 "",
			 cudaGetErrorString(e), cudaGetErrorName(e));
		cudaGetLastError();
		return 0;
	}
	if (n <= 0)
		snprintf(why, whylen, "no CUDA device");
	return n;
}

static int numa_of(const char *bdf)
{
	char path[96], buf[16];
	FILE *f;
	int v = -1;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bdf);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fgets(buf, sizeof(buf), f))
		v = atoi(buf);
	fclose(f);
	return v;
}

static bool attr(int dev, CUdevice_attribute a)
{
	int v = 0;

	return drv.get_attr && drv.get_attr(&v, a, dev) == CUDA_SUCCESS && v;
}

int cs_gpu_discover(int ordinal, struct cs_gpu_dev *out)
{
	struct cudaDeviceProp p;

	memset(out, 0, sizeof(*out));
	if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess) {
		cudaGetLastError();
		return -ENODEV;
	}
	drv_load();
	out->ordinal = ordinal;
	p.name[sizeof(out->name) - 1] = 0; /* the name fits in 64 */
	memcpy(out->name, p.name, sizeof(out->name));
	snprintf(out->bdf, sizeof(out->bdf), "%04x:%02x:%02x.0",
		 (unsigned)p.pciDomainID, (unsigned)p.pciBusID,
		 (unsigned)p.pciDeviceID);
	memcpy(out->uuid, p.uuid.bytes, CS_GPU_UUID_LEN);
	out->numa = numa_of(out->bdf);
	out->mem_bytes = p.totalGlobalMem;
	out->cc_major = p.major;
	out->cc_minor = p.minor;
	out->dmabuf = attr(ordinal, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
	out->gdr = attr(ordinal, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
	out->vmm_fd =
		attr(ordinal,
		     CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) &&
		attr(ordinal,
		     CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
	return 0;
}

/* ---- mapping trainers' allocations -------------------------------------- */

static int cu_open_ipc(void *ctx, const uint8_t *handle, void **base,
		       size_t *size, char *why, size_t whylen)
{
	cudaIpcMemHandle_t h;
	CUdeviceptr b = 0;
	void *p = NULL;
	cudaError_t e;

	(void)ctx;
	if (drv_load()) {
		snprintf(why, whylen, "CUDA driver API not available");
		return -ENOSYS;
	}
	memcpy(&h, handle, sizeof(h));
	e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess) {
		snprintf(why, whylen,
			 "cudaIpcOpenMemHandle refused the handle: %s (a freed "
			 "allocation, a handle of an exited process or "
			 "garbage)",
			 cudaGetErrorName(e));
		cudaGetLastError();
		return -ENOENT;
	}
	if (drv.addr_range(&b, size, (CUdeviceptr)(uintptr_t)p) !=
		    CUDA_SUCCESS ||
	    b != (CUdeviceptr)(uintptr_t)p) {
		snprintf(why, whylen, "cuMemGetAddressRange failed on it");
		cudaIpcCloseMemHandle(p);
		return -EIO;
	}
	*base = p;
	return 0;
}

static void cu_close_ipc(void *ctx, void *base)
{
	(void)ctx;
	cudaIpcCloseMemHandle(base);
}

static int cu_import_fd(void *ctx, int fd, size_t len, void **base,
			size_t *size, char *why, size_t whylen)
{
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	CUdeviceptr va = 0;
	size_t g = 0, rlen;
	CUresult r;

	(void)ctx;
	if (drv_load()) {
		snprintf(why, whylen, "CUDA driver API not available");
		return -ENOSYS;
	}
	r = drv.import(&h, (void *)(uintptr_t)fd,
		       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r != CUDA_SUCCESS) {
		snprintf(why, whylen,
			 "cuMemImportFromShareableHandle refused fd: error %d",
			 (int)r);
		return -ENOENT;
	}
	memset(&prop, 0, sizeof(prop));
	if (drv.props(&prop, h) != CUDA_SUCCESS ||
	    drv.gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
		    CUDA_SUCCESS ||
	    !g) {
		snprintf(why, whylen, "cannot read the allocation's properties");
		goto out_release;
	}
	rlen = (len + g - 1) / g * g;
	if (drv.reserve(&va, rlen, g, 0, 0) != CUDA_SUCCESS) {
		snprintf(why, whylen, "cuMemAddressReserve of %zu bytes failed",
			 rlen);
		goto out_release;
	}
	if (drv.map(va, rlen, 0, h, 0) != CUDA_SUCCESS) {
		snprintf(why, whylen,
			 "cuMemMap of %zu bytes failed: longer than the "
			 "allocation?",
			 rlen);
		goto out_free;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (drv.access(va, rlen, &acc, 1) != CUDA_SUCCESS) {
		snprintf(why, whylen, "cuMemSetAccess failed");
		drv.unmap(va, rlen);
		goto out_free;
	}
	drv.release(h); /* the mapping holds the memory */
	*base = (void *)(uintptr_t)va;
	*size = rlen;
	return 0;

out_free:
	drv.addr_free(va, rlen);
out_release:
	drv.release(h);
	return -EINVAL;
}

static void cu_release_fd(void *ctx, void *base, size_t size)
{
	(void)ctx;
	drv.unmap((CUdeviceptr)(uintptr_t)base, size);
	drv.addr_free((CUdeviceptr)(uintptr_t)base, size);
}

static int cu_dev_uuid(void *ctx, void *base, uint8_t *uuid)
{
	struct cudaPointerAttributes a;
	struct cudaDeviceProp p;

	(void)ctx;
	if (cudaPointerGetAttributes(&a, base) != cudaSuccess ||
	    cudaGetDeviceProperties(&p, a.device) != cudaSuccess) {
		cudaGetLastError();
		return -EIO;
	}
	memcpy(uuid, p.uuid.bytes, CS_GPU_UUID_LEN);
	return 0;
}

const struct cs_gpu_map_ops cs_gpu_cuda_map_ops = {
	.open_ipc = cu_open_ipc,
	.close_ipc = cu_close_ipc,
	.import_fd = cu_import_fd,
	.release_fd = cu_release_fd,
	.dev_uuid = cu_dev_uuid,
};

/* ---- dma-buf export ------------------------------------------------------ */

static int cu_dmabuf_export(void *ctx, void *va, size_t len, int *fd,
			    char *why, size_t whylen)
{
	int h = -1;
	CUresult r;

	(void)ctx;
	if (drv_load()) {
		snprintf(why, whylen, "CUDA driver API not available");
		return -ENOSYS;
	}
	r = drv.range_handle(&h, (CUdeviceptr)(uintptr_t)va, len,
			     CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	if (r != CUDA_SUCCESS || h < 0) {
		snprintf(why, whylen,
			 "cuMemGetHandleForAddressRange(DMA_BUF_FD) failed: "
			 "error %d (range not page aligned, or no dma-buf "
			 "support in the kernel driver)",
			 (int)r);
		return -EIO;
	}
	*fd = h;
	return 0;
}

const struct cs_gpu_export_ops cs_gpu_cuda_export_ops = {
	.dmabuf_export = cu_dmabuf_export,
};

/* ---- the staging copier --------------------------------------------------- */

struct cs_gpu_cuda_copier {
	cudaStream_t stream;
	unsigned depth;
	/* reduce mode (cs_gpu_cuda_copier_reduce): an incoming chunk is
	 * copied into its slot's device scratch, then reduced into place */
	bool reduce;
	enum cs_dtype t;
	enum cs_redop op;
	size_t chunk;
	uint8_t *scratch;
	cudaEvent_t ev[];
};

int cs_gpu_cuda_copier_create(unsigned depth, struct cs_gpu_cuda_copier **out)
{
	struct cs_gpu_cuda_copier *cp;
	unsigned i;

	if (!depth || depth > CS_GPU_STAGE_MAX_DEPTH)
		return -EINVAL;
	cp = calloc(1, sizeof(*cp) + depth * sizeof(cp->ev[0]));
	if (!cp)
		return -ENOMEM;
	if (cudaStreamCreateWithFlags(&cp->stream, cudaStreamNonBlocking) !=
	    cudaSuccess)
		goto out_free;
	for (i = 0; i < depth; i++)
		if (cudaEventCreateWithFlags(&cp->ev[i],
					     cudaEventDisableTiming) !=
		    cudaSuccess)
			goto out_events;
	cp->depth = depth;
	*out = cp;
	return 0;

out_events:
	while (i--)
		cudaEventDestroy(cp->ev[i]);
	cudaStreamDestroy(cp->stream);
out_free:
	cudaGetLastError();
	free(cp);
	return -EIO;
}

void cs_gpu_cuda_copier_destroy(struct cs_gpu_cuda_copier *cp)
{
	if (!cp)
		return;
	cudaStreamSynchronize(cp->stream);
	if (cp->scratch)
		cudaFree(cp->scratch);
	for (unsigned i = 0; i < cp->depth; i++)
		cudaEventDestroy(cp->ev[i]);
	cudaStreamDestroy(cp->stream);
	free(cp);
}

int cs_gpu_cuda_copier_reduce(struct cs_gpu_cuda_copier *cp, size_t chunk,
			      enum cs_dtype t, enum cs_redop op)
{
	size_t esz = cs_dtype_size(t);

	if (!esz || (unsigned)op >= CS_REDOP_COUNT || !chunk || chunk % esz ||
	    cp->scratch)
		return -EINVAL;
	if (t != CS_F32 && t != CS_F64 && t != CS_F16 && t != CS_BF16)
		return -EOPNOTSUPP;
	if (cudaMalloc((void **)&cp->scratch, chunk * cp->depth) !=
	    cudaSuccess) {
		cudaGetLastError();
		cp->scratch = NULL;
		return -ENOMEM;
	}
	cp->reduce = true;
	cp->t = t;
	cp->op = op;
	cp->chunk = chunk;
	return 0;
}

static int cu_copy_start(void *ctx, void *dst, const void *src, size_t len,
			 enum cs_gpu_stage_dir dir, unsigned slot)
{
	struct cs_gpu_cuda_copier *cp = ctx;
	enum cudaMemcpyKind k = dir == CS_GPU_STAGE_OUT ?
					cudaMemcpyDeviceToHost :
					cudaMemcpyHostToDevice;
	size_t esz = cs_dtype_size(cp->t);

	if (slot >= cp->depth)
		return -EINVAL;
	if (dir == CS_GPU_STAGE_IN && cp->reduce) {
		uint8_t *scr = cp->scratch + (size_t)slot * cp->chunk;

		if (len > cp->chunk || len % esz || (uintptr_t)dst % esz)
			return -EINVAL;
		if (cudaMemcpyAsync(scr, src, len, k, cp->stream) !=
			    cudaSuccess ||
		    cs_gpu_reduce(dst, scr, len / esz, cp->t, cp->op,
				  cp->stream) ||
		    cudaEventRecord(cp->ev[slot], cp->stream) != cudaSuccess) {
			cudaGetLastError();
			return -EIO;
		}
		return 0;
	}
	if (cudaMemcpyAsync(dst, src, len, k, cp->stream) != cudaSuccess ||
	    cudaEventRecord(cp->ev[slot], cp->stream) != cudaSuccess) {
		cudaGetLastError();
		return -EIO;
	}
	return 0;
}

static int cu_copy_done(void *ctx, unsigned slot)
{
	struct cs_gpu_cuda_copier *cp = ctx;
	cudaError_t e = cudaEventQuery(cp->ev[slot]);

	if (e == cudaSuccess)
		return 1;
	if (e == cudaErrorNotReady)
		return 0;
	cudaGetLastError();
	return -EIO;
}

const struct cs_gpu_copy_ops cs_gpu_cuda_copy_ops = {
	.start = cu_copy_start,
	.done = cu_copy_done,
};
