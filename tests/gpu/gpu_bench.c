// SPDX-License-Identifier: MIT
/* cs-gpu-bench: GPU reduction kernels against a device-to-device copy, and
 * the staging pipeline against one pinned copy of the same bytes. Run by
 * scripts/gpu-check.sh; prints one line per measurement. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>

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

/*
 * Both halves of a staged transfer over a real wire: device -> pinned
 * slots -> a Unix stream socket -> pinned slots -> device (optionally
 * reduced into it), the sender's copies overlapping the socket writes and
 * the receiver's the reads. Next to it, the same bytes from host memory
 * to host memory over the same socket: the wire alone.
 */
struct pipe_rx {
	int fd;
	struct cs_gpu_stage *st; /* NULL: the wire alone, into @host */
	void *dev, *host;
	size_t len, chunk;
	int err;
};

static int read_all(int fd, void *p, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = recv(fd, (char *)p + got, n - got, 0);

		if (r <= 0)
			return -EIO;
		got += (size_t)r;
	}
	return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	for (size_t put = 0; put < n;) {
		ssize_t r = send(fd, (const char *)p + put, n - put,
				 MSG_NOSIGNAL);

		if (r <= 0)
			return -EIO;
		put += (size_t)r;
	}
	return 0;
}

static void *pipe_rx_main(void *arg)
{
	struct pipe_rx *rx = arg;
	uint64_t n = (rx->len + rx->chunk - 1) / rx->chunk, next = 0;
	int r;

	if (!rx->st) {
		rx->err = read_all(rx->fd, rx->host, rx->len);
		return NULL;
	}
	r = cs_gpu_stage_start(rx->st, CS_GPU_STAGE_IN, rx->dev, rx->len,
			       NULL, NULL);
	while (!r) {
		void *slot;

		while (next < n && (slot = cs_gpu_stage_rx_slot(rx->st, next))) {
			size_t l = next == n - 1 ? rx->len - next * rx->chunk :
						   rx->chunk;

			r = read_all(rx->fd, slot, l);
			if (!r)
				r = cs_gpu_stage_received(rx->st, next);
			if (r)
				break;
			next++;
		}
		if (!r)
			r = cs_gpu_stage_poll(rx->st);
	}
	rx->err = r < 0 ? r : 0;
	return NULL;
}

struct pipe_tx {
	int fd;
	struct cs_gpu_stage *st;
	int err;
};

static void pipe_send(void *ctx, uint64_t idx, uint64_t off, const void *host,
		      size_t len)
{
	struct pipe_tx *tx = ctx;

	(void)off;
	if (write_all(tx->fd, host, len))
		tx->err = -EIO;
	cs_gpu_stage_sent(tx->st, idx);
}

static double pipe_once(int sv[2], struct cs_gpu_stage *out,
			struct cs_gpu_stage *in, void *src, void *dst,
			size_t len, size_t chunk, int *err)
{
	struct pipe_rx rx = { .fd = sv[1], .st = in, .dev = dst, .host = dst,
			      .len = len, .chunk = chunk };
	struct pipe_tx tx = { .fd = sv[0], .st = out };
	pthread_t thr;
	double t = now_s();
	int r = 0;

	pthread_create(&thr, NULL, pipe_rx_main, &rx);
	if (!out) {
		tx.err = write_all(sv[0], src, len);
	} else {
		r = cs_gpu_stage_start(out, CS_GPU_STAGE_OUT, src, len,
				       pipe_send, &tx);
		while (!r)
			r = cs_gpu_stage_poll(out);
	}
	pthread_join(thr, NULL);
	t = now_s() - t;
	*err |= (r < 0 ? r : 0) | tx.err | rx.err;
	return (double)len / t / 1e9;
}

static void bench_pipe(void)
{
	const size_t len = 64u << 20, chunk = 1u << 20;
	const unsigned depth = 4;
	struct cs_gpu_stage_cfg cfg = { .chunk = chunk, .depth = depth };
	struct cs_gpu_cuda_copier *cpo = NULL, *cpi = NULL, *cpr = NULL;
	struct cs_gpu_stage *out = NULL, *in = NULL, *inr = NULL;
	void *so = pinned_shm(chunk * depth), *si = pinned_shm(chunk * depth);
	void *sr = pinned_shm(chunk * depth);
	void *h1 = malloc(len), *h2 = malloc(len), *d1 = NULL, *d2 = NULL;
	int sv[2], err = 0, buf = 4 << 20;
	double wire = 0, staged = 0, reduced = 0;

	if (!so || !si || !sr || !h1 || !h2 ||
	    cudaMalloc(&d1, len) != cudaSuccess ||
	    cudaMalloc(&d2, len) != cudaSuccess ||
	    socketpair(AF_UNIX, SOCK_STREAM, 0, sv) ||
	    cs_gpu_cuda_copier_create(depth, &cpo) ||
	    cs_gpu_cuda_copier_create(depth, &cpi) ||
	    cs_gpu_cuda_copier_create(depth, &cpr) ||
	    cs_gpu_cuda_copier_reduce(cpr, chunk, CS_F32, CS_SUM) ||
	    cs_gpu_stage_create(&cfg, so, &cs_gpu_cuda_copy_ops, cpo, &out) ||
	    cs_gpu_stage_create(&cfg, si, &cs_gpu_cuda_copy_ops, cpi, &in) ||
	    cs_gpu_stage_create(&cfg, sr, &cs_gpu_cuda_copy_ops, cpr, &inr)) {
		printf("pipe: set-up failed\n");
		goto out;
	}
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	memset(h1, 0, len);
	cudaMemset(d1, 0, len);
	cudaMemset(d2, 0, len);
	for (int i = 0; i < 6; i++) { /* the first of each: warm-up */
		double w = pipe_once(sv, NULL, NULL, h1, h2, len, chunk, &err);
		double s = pipe_once(sv, out, in, d1, d2, len, chunk, &err);
		double r = pipe_once(sv, out, inr, d1, d2, len, chunk, &err);

		if (i) {
			wire += w / 5;
			staged += s / 5;
			reduced += r / 5;
		}
	}
	printf("# over a Unix stream socket (a kernel wire on one host), %zu "
	       "bytes, chunk %zu, depth %u, mean of 5\n",
	       len, chunk, depth);
	printf("pipe host->wire->host          %8.2f GB/s\n", wire);
	printf("pipe dev->slots->wire->slots->dev %5.2f GB/s (%.2f of the "
	       "wire alone)%s\n",
	       staged, staged / wire, err ? "  ERROR" : "");
	printf("pipe dev->...->dev, f32 sum where it lands %5.2f GB/s (%.2f "
	       "of the wire alone)%s\n",
	       reduced, reduced / wire, err ? "  ERROR" : "");
	close(sv[0]);
	close(sv[1]);
out:
	cs_gpu_stage_destroy(out);
	cs_gpu_stage_destroy(in);
	cs_gpu_stage_destroy(inr);
	cs_gpu_cuda_copier_destroy(cpo);
	cs_gpu_cuda_copier_destroy(cpi);
	cs_gpu_cuda_copier_destroy(cpr);
	pinned_shm_free(so, chunk * depth);
	pinned_shm_free(si, chunk * depth);
	pinned_shm_free(sr, chunk * depth);
	cudaFree(d1);
	cudaFree(d2);
	free(h1);
	free(h2);
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
	if (argc < 2 || !strcmp(argv[1], "pipe"))
		bench_pipe();
	return 0;
}
