// SPDX-License-Identifier: MIT
/* cs-gpu-allreduce: one trainer of a node; allreduces of a device buffer
 * (cudaMalloc, shared with the sidecar by a CUDA IPC handle) and of a host
 * cs_buf, side by side, each verified element by element. Started once
 * per node by scripts/gpu-check.sh; rank 0 prints nccl-tests-style rows.
 *
 *	cs-gpu-allreduce RANK SIZE [ITERS_SCALE]
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "collstack/collstack.h"

#define MAX_BYTES (64u << 20)
#define WAIT_NS 120000000000ll

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run(struct cs_client *c, cs_req_t r, const char *what)
{
	int err = cs_wait(c, r, WAIT_NS);

	if (err)
		fprintf(stderr, "%s: %s (%s)\n", what, cs_strerror(err),
			cs_errmsg(c));
	return err;
}

/* one verified allreduce, then @iters timed back to back; returns the mean
 * seconds per op, or <0 */
static double one_size(struct cs_client *c, struct cs_group *g, float *buf,
		       bool dev, float *host, size_t n, int rank, int size,
		       int iters, size_t *wrong)
{
	cs_req_t r;
	double t;

	for (size_t i = 0; i < n; i++)
		host[i] = (float)((rank + 1) * (int)(i % 13 + 1));
	if (dev)
		cudaMemcpy(buf, host, n * 4, cudaMemcpyHostToDevice);
	else
		memcpy(buf, host, n * 4);
	if (cs_allreduce(g, buf, buf, n, CS_F32, CS_SUM, &r) ||
	    run(c, r, "allreduce"))
		return -1;
	if (dev)
		cudaMemcpy(host, buf, n * 4, cudaMemcpyDeviceToHost);
	else
		memcpy(host, buf, n * 4);
	*wrong = 0;
	for (size_t i = 0; i < n; i++)
		if (host[i] !=
		    (float)(size * (size + 1) / 2 * (int)(i % 13 + 1)))
			(*wrong)++;
	if (cs_barrier(g, &r) || run(c, r, "barrier"))
		return -1;
	t = now_s();
	for (int k = 0; k < iters; k++)
		if (cs_allreduce(g, buf, buf, n, CS_F32, CS_SUM, &r) ||
		    run(c, r, "allreduce"))
			return -1;
	return (now_s() - t) / iters;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 4096, 1u << 20, 16u << 20, 64u << 20 };
	static const int iters[] = { 50, 10, 4, 3 };
	struct cudaDeviceProp prop;
	struct cs_client *c = NULL;
	struct cs_group *g = NULL;
	struct cs_buf *db = NULL, *hb = NULL;
	struct cs_dev_mem m = { .kind = CS_DEV_CUDA_IPC, .fd = -1 };
	float *host = malloc(MAX_BYTES);
	void *d = NULL;
	int rank, size, err, scale = 1, fails = 0;
	bool have_dev = true;

	if (argc < 3) {
		fprintf(stderr, "usage: cs-gpu-allreduce RANK SIZE [SCALE]\n");
		return 2;
	}
	rank = atoi(argv[1]);
	size = atoi(argv[2]);
	if (argc > 3)
		scale = atoi(argv[3]) > 0 ? atoi(argv[3]) : 1;
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess ||
	    cudaMalloc(&d, MAX_BYTES) != cudaSuccess ||
	    cudaIpcGetMemHandle((cudaIpcMemHandle_t *)m.handle, d) !=
		    cudaSuccess) {
		/* CS_GPU_HOST_ONLY: the host rows only (checks the harness
		 * on a machine without a GPU) */
		fprintf(stderr, "rank %d: no CUDA device: %s\n", rank,
			cudaGetErrorString(cudaGetLastError()));
		if (!getenv("CS_GPU_HOST_ONLY"))
			return 77;
		have_dev = false;
	}
	memcpy(m.uuid, prop.uuid.bytes, sizeof(m.uuid));
	m.base = d;
	m.alloc_len = MAX_BYTES;
	err = cs_connect(NULL, &c);
	if (!err)
		err = cs_group_join(c, "gpu-check", rank, size, 0, 1, &g);
	if (!err && have_dev)
		err = cs_buf_register_dev(c, &m, 0, MAX_BYTES, &db);
	if (!err)
		err = cs_buf_alloc(c, MAX_BYTES, &hb);
	if (err) {
		fprintf(stderr, "rank %d: %s (%s)\n", rank, cs_strerror(err),
			c ? cs_errmsg(c) : "no sidecar");
		return 1;
	}
	if (!rank)
		printf("# %d nodes, one trainer each; float sum in place; "
		       "busbw = 2(n-1)/n * bytes / time; host: a cs_buf, "
		       "device: cudaMalloc memory (CUDA IPC handle)\n"
		       "%12s %10s %10s %10s %10s %7s %7s %7s\n",
		       size, "bytes", "host-us", "host-bus", "dev-us",
		       "dev-bus", "dev/host", "wr-host", "wr-dev");
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s] / 4, wh = 0, wd = 0;
		double th = one_size(c, g, cs_buf_ptr(hb), false, host, n,
				     rank, size, iters[s] * scale, &wh);
		double td = !have_dev ? 1e9 :
				one_size(c, g, cs_buf_ptr(db), true, host, n,
					 rank, size, iters[s] * scale, &wd);
		double f = 2.0 * (size - 1) / size * (double)sizes[s] / 1e9;

		if (th < 0 || td < 0) {
			fails++;
			break;
		}
		fails += wh || wd;
		if (!rank && !have_dev)
			printf("%12zu %10.1f %10.3f %10s %10s %7s %7zu %7s\n",
			       sizes[s], th * 1e6, f / th, "-", "-", "-", wh,
			       "-");
		else if (!rank)
			printf("%12zu %10.1f %10.3f %10.1f %10.3f %7.2f %7zu "
			       "%7zu\n",
			       sizes[s], th * 1e6, f / th, td * 1e6, f / td,
			       th / td, wh, wd);
	}
	fflush(stdout);
	if (db)
		cs_buf_free(db);
	cs_buf_free(hb);
	cs_group_leave(g);
	cs_disconnect(c);
	cudaFree(d);
	free(host);
	return fails ? 1 : 0;
}
