// SPDX-License-Identifier: MIT
/* cs-gpu-bench: GPU reduction kernels against a device-to-device copy, and
 * the staging pipeline against one pinned copy of the same bytes. Run by
 * scripts/gpu-check.sh; prints one line per measurement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "gpu/gpu.h"
#include "gpu_util.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int iters_for(size_t bytes)
{
	size_t it = (size_t)(4ull << 30) / bytes;

	return (int)(it < 20 ? 20 : it > 2000 ? 2000 : it);
}

/* mean GB/s of destination bytes over back-to-back launches */
static double time_kernel(void *dst, const void *src, size_t bytes,
			  enum cs_dtype t, int copy)
{
	size_t n = bytes / cs_dtype_size(t);
	int iters = iters_for(bytes);
	cudaEvent_t e0, e1;
	float ms = 0;

	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	for (int i = 0; i < 3; i++) {
		if (copy)
			cudaMemcpyAsync(dst, src, bytes,
					cudaMemcpyDeviceToDevice, 0);
		else
			cs_gpu_reduce(dst, src, n, t, CS_SUM, NULL);
	}
	cudaEventRecord(e0, 0);
	for (int i = 0; i < iters; i++) {
		if (copy)
			cudaMemcpyAsync(dst, src, bytes,
					cudaMemcpyDeviceToDevice, 0);
		else
			cs_gpu_reduce(dst, src, n, t, CS_SUM, NULL);
	}
	cudaEventRecord(e1, 0);
	cudaEventSynchronize(e1);
	cudaEventElapsedTime(&ms, e0, e1);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return (double)bytes * iters / (ms * 1e-3) / 1e9;
}

static void bench_kernels(void)
{
	static const size_t sizes[] = { 4096, 1u << 20, 64u << 20, 256u << 20 };
	static const enum cs_dtype types[] = { CS_F32, CS_BF16, CS_F16 };
	void *d = NULL, *s = NULL;

	if (cudaMalloc(&d, 256u << 20) != cudaSuccess ||
	    cudaMalloc(&s, 256u << 20) != cudaSuccess) {
		printf("kernels: cudaMalloc failed\n");
		return;
	}
	cudaMemset(d, 0, 256u << 20);
	cudaMemset(s, 0, 256u << 20);
	printf("# kernel: dst += src (sum), GB/s of destination bytes; "
	       "copy: cudaMemcpyAsync device to device\n");
	printf("%-8s %12s %10s %10s %8s\n", "type", "bytes", "kernel",
	       "d2d-copy", "ratio");
	for (size_t ti = 0; ti < 3; ti++)
		for (size_t si = 0; si < 4; si++) {
			double k = time_kernel(d, s, sizes[si], types[ti], 0);
			double c = time_kernel(d, s, sizes[si], types[ti], 1);

			printf("%-8s %12zu %10.1f %10.1f %8.2f\n",
			       cs_dtype_name(types[ti]), sizes[si], k, c,
			       k / c);
		}
	cudaFree(d);
	cudaFree(s);
}

static void bench_staging(void)
{
	static const size_t chunks[] = { 512u << 10, 1u << 20, 4u << 20 };
	static const unsigned depths[] = { 2, 4, 8 };
	const size_t len = 64u << 20;
	const int iters = 20;
	void *dev = NULL, *pin = pinned_shm(len);
	unsigned char *host = malloc(len);
	double t, pin_out, pin_in;

	if (!pin || !host || cudaMalloc(&dev, len) != cudaSuccess) {
		printf("staging: set-up failed\n");
		return;
	}
	memset(host, 1, len);
	cudaMemset(dev, 2, len);
	/* one pinned copy of the whole buffer, each way */
	cudaMemcpy(pin, dev, len, cudaMemcpyDeviceToHost);
	t = now_s();
	for (int i = 0; i < iters; i++)
		cudaMemcpy(pin, dev, len, cudaMemcpyDeviceToHost);
	pin_out = (double)len * iters / (now_s() - t) / 1e9;
	t = now_s();
	for (int i = 0; i < iters; i++)
		cudaMemcpy(dev, pin, len, cudaMemcpyHostToDevice);
	pin_in = (double)len * iters / (now_s() - t) / 1e9;
	printf("# staging of %zu bytes through pinned memfd slots; "
	       "pinned copy of the whole buffer: d2h %.1f GB/s, h2d %.1f GB/s\n",
	       len, pin_out, pin_in);
	printf("# wire 'none': the wire takes each chunk at once; 'memcpy': it "
	       "copies each chunk once on the CPU (what a udp port does)\n");
	printf("%-4s %-7s %10s %6s %10s %8s\n", "dir", "wire", "chunk",
	       "depth", "GB/s", "vs-pin");
	for (size_t ci = 0; ci < 3; ci++)
		for (size_t di = 0; di < 3; di++)
			for (int wire = 0; wire < 2; wire++) {
		struct cs_gpu_stage_cfg cfg = { .chunk = chunks[ci],
						.depth = depths[di] };
		struct cs_gpu_cuda_copier *cp = NULL;
		struct cs_gpu_stage *st = NULL;
		void *slots = pinned_shm(cfg.chunk * cfg.depth);
		double out, in;
		int err = 0;

		if (!slots || cs_gpu_cuda_copier_create(cfg.depth, &cp) ||
		    cs_gpu_stage_create(&cfg, slots, &cs_gpu_cuda_copy_ops, cp,
					&st)) {
			printf("staging: set-up of %zu x %u failed\n",
			       cfg.chunk, cfg.depth);
			goto next;
		}
		err |= stage_out_run(st, dev, len, wire ? host : NULL);
		t = now_s();
		for (int i = 0; i < iters; i++)
			err |= stage_out_run(st, dev, len, wire ? host : NULL);
		out = (double)len * iters / (now_s() - t) / 1e9;
		t = now_s();
		for (int i = 0; i < iters; i++)
			err |= stage_in_run(st, dev, len, wire ? host : NULL,
					    cfg.chunk);
		in = (double)len * iters / (now_s() - t) / 1e9;
		printf("%-4s %-7s %10zu %6u %10.1f %8.2f%s\n", "d2h",
		       wire ? "memcpy" : "none", cfg.chunk, cfg.depth, out,
		       out / pin_out, err ? "  ERROR" : "");
		printf("%-4s %-7s %10zu %6u %10.1f %8.2f%s\n", "h2d",
		       wire ? "memcpy" : "none", cfg.chunk, cfg.depth, in,
		       in / pin_in, err ? "  ERROR" : "");
next:
		cs_gpu_stage_destroy(st);
		cs_gpu_cuda_copier_destroy(cp);
		pinned_shm_free(slots, cfg.chunk * cfg.depth);
			}
	/* in, reduced where it lands (f32 sum into the device buffer) */
	printf("# h2d-reduce: each incoming chunk copied to a device scratch "
	       "slot and summed (f32) into the destination on the copier's "
	       "stream\n");
	for (size_t ci = 1; ci < 3; ci++) {
		struct cs_gpu_stage_cfg cfg = { .chunk = chunks[ci], .depth = 4 };
		struct cs_gpu_cuda_copier *cp = NULL;
		struct cs_gpu_stage *st = NULL;
		void *slots = pinned_shm(cfg.chunk * cfg.depth);
		int err = -1;
		double in;

		if (slots && !cs_gpu_cuda_copier_create(cfg.depth, &cp) &&
		    !cs_gpu_cuda_copier_reduce(cp, cfg.chunk, CS_F32, CS_SUM) &&
		    !cs_gpu_stage_create(&cfg, slots, &cs_gpu_cuda_copy_ops, cp,
					 &st)) {
			cudaMemset(dev, 0, len);
			err = stage_in_run(st, dev, len, NULL, cfg.chunk);
			t = now_s();
			for (int i = 0; i < iters; i++)
				err |= stage_in_run(st, dev, len, NULL,
						    cfg.chunk);
			in = (double)len * iters / (now_s() - t) / 1e9;
			printf("%-4s %-7s %10zu %6u %10.1f %8.2f%s\n",
			       "h2d+", "none", cfg.chunk, cfg.depth, in,
			       in / pin_in, err ? "  ERROR" : "");
		}
		cs_gpu_stage_destroy(st);
		cs_gpu_cuda_copier_destroy(cp);
		pinned_shm_free(slots, cfg.chunk * cfg.depth);
	}
	cudaFree(dev);
	pinned_shm_free(pin, len);
	free(host);
}

int main(int argc, char **argv)
{
	char why[CS_GPU_WHY_LEN] = "";
	struct cs_gpu_dev d;

	if (cs_gpu_available(why, sizeof(why)) <= 0) {
		printf("SKIP cs-gpu-bench: %s\n", why);
		return 77;
	}
	if (!cs_gpu_discover(0, &d))
		printf("# device 0: %s, PCI %s, NUMA %d\n", d.name, d.bdf,
		       d.numa);
	if (argc < 2 || !strcmp(argv[1], "kernels"))
		bench_kernels();
	if (argc < 2 || !strcmp(argv[1], "staging"))
		bench_staging();
	return 0;
}
