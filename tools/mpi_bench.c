/* SPDX-License-Identifier: MIT */
/*
 * mpi_bench: the Open MPI side of scripts/bench-vs-mpi.sh. Runs the same
 * operations and sizes as `collstack bench` and prints the same
 * nccl-tests-style columns, so both stacks are compared like for like.
 *
 *   mpirun -np 4 build/tools/cs-mpi-bench -o allreduce -b 4K -e 64M -f 4
 *                                         [-m b2b|iter]
 *
 * Timing, -m as in tools/cs_trainer_bench.c: b2b (default; nccl-tests and
 * OSU: a barrier, the timed iterations back to back, time(us) = the
 * slowest rank's total / iterations, p50/p99 over the per-iteration gaps)
 * or iter (each iteration refilled, a barrier, timed alone; the mean of
 * the slowest rank's times). Every warm-up iteration is checked, and in
 * iter mode every timed one (b2b: one at least). cpu(s/GB), b2b only: the
 * ranks' CPU seconds (getrusage) over the timed iterations, summed, over
 * the bytes all ranks sent (cs_bench_moved).
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench_util.h"

enum op { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_BROADCAST };

static const char *const op_names[] = { "allreduce", "reduce_scatter",
					"all_gather", "broadcast" };

/* Value every rank puts at element i: small integers, so float sums are
 * exact and the check can be exact too. */
static float val(int rank, size_t i)
{
	return (float)((rank * 7 + (int)(i % 97)) % 13);
}

/* Run one op; returns the number of wrong elements on this rank. */
static long run_once(enum op op, float *send, float *recv, size_t count,
		     int rank, int n, int inplace)
{
	size_t per = count / (size_t)n;
	long wrong = 0;

	switch (op) {
	case OP_ALLREDUCE:
		if (inplace)
			MPI_Allreduce(MPI_IN_PLACE, recv, (int)count, MPI_FLOAT,
				      MPI_SUM, MPI_COMM_WORLD);
		else
			MPI_Allreduce(send, recv, (int)count, MPI_FLOAT,
				      MPI_SUM, MPI_COMM_WORLD);
		for (size_t i = 0; i < count; i++) {
			float want = 0;

			for (int r = 0; r < n; r++)
				want += val(r, i);
			wrong += recv[i] != want;
		}
		break;
	case OP_REDUCE_SCATTER:
		MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : send, recv,
					 (int)per, MPI_FLOAT, MPI_SUM,
					 MPI_COMM_WORLD);
		for (size_t i = 0; i < per; i++) {
			float want = 0;

			for (int r = 0; r < n; r++)
				want += val(r, (size_t)rank * per + i);
			wrong += recv[i] != want;
		}
		break;
	case OP_ALL_GATHER:
		MPI_Allgather(inplace ? MPI_IN_PLACE : send, (int)per,
			      MPI_FLOAT, recv, (int)per, MPI_FLOAT,
			      MPI_COMM_WORLD);
		for (size_t i = 0; i < per * (size_t)n; i++)
			wrong += recv[i] != val((int)(i / per), i % per);
		break;
	case OP_BROADCAST:
		MPI_Bcast(recv, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
		for (size_t i = 0; i < count; i++)
			wrong += recv[i] != val(0, i);
		break;
	}
	return wrong;
}

/* The collective alone, as timed. */
static void timed_op(enum op op, float *send, float *recv, size_t count,
		     int n, int inplace)
{
	switch (op) {
	case OP_ALLREDUCE:
		MPI_Allreduce(inplace ? MPI_IN_PLACE : send, recv, (int)count,
			      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		break;
	case OP_REDUCE_SCATTER:
		MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : send, recv,
					 (int)(count / (size_t)n), MPI_FLOAT,
					 MPI_SUM, MPI_COMM_WORLD);
		break;
	case OP_ALL_GATHER:
		MPI_Allgather(inplace ? MPI_IN_PLACE : send,
			      (int)(count / (size_t)n), MPI_FLOAT, recv,
			      (int)(count / (size_t)n), MPI_FLOAT,
			      MPI_COMM_WORLD);
		break;
	case OP_BROADCAST:
		MPI_Bcast(recv, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
		break;
	}
}

static void fill(enum op op, float *send, float *recv, size_t count, int rank,
		 int n, int inplace)
{
	size_t per = count / (size_t)n;

	for (size_t i = 0; i < count; i++)
		send[i] = val(rank, i);
	switch (op) {
	case OP_ALLREDUCE:
	case OP_REDUCE_SCATTER:
		memcpy(recv, send, count * sizeof(float));
		break;
	case OP_ALL_GATHER:
		memset(recv, 0, count * sizeof(float));
		for (size_t i = 0; i < per; i++) {
			send[i] = val(rank, i);
			if (inplace)
				recv[(size_t)rank * per + i] = val(rank, i);
		}
		break;
	case OP_BROADCAST:
		if (rank == 0)
			memcpy(recv, send, count * sizeof(float));
		else
			memset(recv, 0, count * sizeof(float));
		break;
	}
}

int main(int argc, char **argv)
{
	size_t minb = 4096, maxb = 64 << 20, factor = 4;
	int iters = 20, warmup = 5, rank, n;
	enum op op = OP_ALLREDUCE;
	enum cs_bench_mode mode = CS_BENCH_B2B;
	int bad_mode = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-b"))
			minb = cs_bench_parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "-e"))
			maxb = cs_bench_parse_size(argv[i + 1]);
		else if (!strcmp(argv[i], "-f"))
			factor = (size_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-n"))
			iters = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-w"))
			warmup = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-m"))
			bad_mode = cs_bench_parse_mode(argv[i + 1], &mode);
		else if (!strcmp(argv[i], "-o")) {
			for (unsigned k = 0; k < 4; k++)
				if (!strcasecmp(argv[i + 1], op_names[k]) ||
				    (k == 1 &&
				     !strcmp(argv[i + 1], "reduce-scatter")) ||
				    (k == 2 &&
				     !strcmp(argv[i + 1], "all-gather")))
					op = (enum op)k;
		}
	}
	if (factor < 2 || !minb || maxb < minb || iters < 1 || bad_mode) {
		if (!rank)
			fprintf(stderr, "mpi_bench: bad arguments\n");
		MPI_Finalize();
		return 2;
	}
	float *send = malloc(maxb), *recv = malloc(maxb);
	double *lat = malloc(sizeof(double) * (size_t)iters);

	if (!send || !recv || !lat) {
		fprintf(stderr, "mpi_bench: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (!rank)
		printf("# op %s ranks %d, timing %s\n#%11s %12s %6s %6s %5s %10s %8s %8s %6s %10s %10s %6s %9s\n",
		       op_names[op], n, mode == CS_BENCH_B2B ? "b2b" : "iter",
		       "size", "count", "type", "redop", "root", "time(us)",
		       "algbw", "busbw", "#wrong", "p50(us)", "p99(us)",
		       "place", "cpu(s/GB)");
	for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
		size_t count = bytes / sizeof(float);

		if (op == OP_REDUCE_SCATTER || op == OP_ALL_GATHER)
			count -= count % (size_t)n;
		for (int inplace = 0; inplace < 2; inplace++) {
			long wrong = 0, total_wrong = 0;
			double sum = 0, cpu = 0;

			if (op == OP_BROADCAST && inplace)
				continue;
			/* Warm-up and check: every element, every time
			 * (b2b: at least once) */
			int checked = mode == CS_BENCH_ITER ? warmup + iters
						: warmup ? warmup
							 : 1;

			for (int it = 0; it < checked; it++) {
				fill(op, send, recv, count, rank, n, inplace);
				MPI_Barrier(MPI_COMM_WORLD);
				wrong = run_once(op, send, recv, count, rank, n,
						 inplace);
				if (it >= warmup || mode == CS_BENCH_B2B)
					total_wrong += wrong;
			}
			if (mode == CS_BENCH_B2B) {
				double t0, prev, c0, tot;

				fill(op, send, recv, count, rank, n, inplace);
				MPI_Barrier(MPI_COMM_WORLD);
				c0 = cs_bench_cpu_self();
				t0 = prev = MPI_Wtime();
				for (int it = 0; it < iters; it++) {
					double now;

					timed_op(op, send, recv, count, n,
						 inplace);
					now = MPI_Wtime();
					lat[it] = (now - prev) * 1e6;
					prev = now;
				}
				tot = prev - t0;
				cpu = cs_bench_cpu_self() - c0;
				MPI_Allreduce(MPI_IN_PLACE, lat, iters,
					      MPI_DOUBLE, MPI_MAX,
					      MPI_COMM_WORLD);
				MPI_Allreduce(&tot, &sum, 1, MPI_DOUBLE,
					      MPI_MAX, MPI_COMM_WORLD);
				MPI_Allreduce(MPI_IN_PLACE, &cpu, 1,
					      MPI_DOUBLE, MPI_SUM,
					      MPI_COMM_WORLD);
			}
			/* iter: collective only, max over ranks */
			for (int it = 0; mode == CS_BENCH_ITER && it < iters;
			     it++) {
				double t0, dt, mx;

				fill(op, send, recv, count, rank, n, inplace);
				MPI_Barrier(MPI_COMM_WORLD);
				t0 = MPI_Wtime();
				timed_op(op, send, recv, count, n, inplace);
				dt = MPI_Wtime() - t0;
				MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX,
					      MPI_COMM_WORLD);
				lat[it] = mx * 1e6;
				sum += mx;
			}
			MPI_Allreduce(MPI_IN_PLACE, &total_wrong, 1, MPI_LONG,
				      MPI_SUM, MPI_COMM_WORLD);
			if (!rank) {
				double t = sum / iters * 1e6;
				double sz = (double)count * sizeof(float);
				double alg = sz / (t * 1e3);
				double bus = alg;

				if (op == OP_ALLREDUCE)
					bus = alg * 2.0 * (n - 1) / n;
				else if (op != OP_BROADCAST)
					bus = alg * (double)(n - 1) / n;
				char cpus[32] = "NA";

				if (mode == CS_BENCH_B2B)
					snprintf(cpus, sizeof(cpus), "%.2f",
						 cpu / (cs_bench_moved(
								op == OP_ALLREDUCE,
								op == OP_BROADCAST,
								sz, n) *
							iters / 1e9));
				qsort(lat, (size_t)iters, sizeof(double),
				      cs_bench_cmp_double);
				printf("%12zu %12zu %6s %6s %5d %10.1f %8.3f %8.3f %6ld %10.1f %10.1f %6s %9s\n",
				       count * sizeof(float), count, "float",
				       op == OP_BROADCAST || op == OP_ALL_GATHER
					       ? "none"
					       : "sum",
				       op == OP_BROADCAST ? 0 : -1, t, alg, bus,
				       total_wrong,
				       lat[(size_t)(iters - 1) / 2],
				       lat[(size_t)ceil(0.99 * iters) - 1],
				       inplace ? "in" : "out", cpus);
				fflush(stdout);
			}
		}
	}
	free(send);
	free(recv);
	free(lat);
	MPI_Finalize();
	return 0;
}
