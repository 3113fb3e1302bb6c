/* SPDX-License-Identifier: MIT */
/*
 * tools/zipf_split.h, the all-to-all-v counts both sides of
 * scripts/bench-vs-mpi.sh use. Without arguments: checks the rule (every
 * row adds up to the count, the hottest place gets the most and the
 * weights' share to within one element, skew 0 even, the same seed the
 * same permutation, a different seed another hot rank for some seed,
 * --zero's empty blocks stay empty). With arguments
 *   test_zipf_split BYTES N SKEW SEED
 * prints the "# counts" line tools/mpi_bench.c and
 * tools/cs_trainer_bench.c print for that size (f32 elements, count
 * rounded down to a multiple of N), for tests/tools/mpi_bench.sh.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zipf_split.h"

static int fails;

#define CHECK(c, ...)                                                          \
	do {                                                                   \
		if (!(c)) {                                                    \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			fails++;                                               \
		}                                                              \
	} while (0)

static void print_line(size_t bytes, int n, double skew,
		       unsigned long long seed)
{
	size_t count = bytes / 4, c[64];
	int perm[64];

	count -= count % (size_t)n;
	cs_zipf_split(count, n, skew, seed, NULL, perm, c);
	printf("# counts %zu:", count * 4);
	for (int s = 0; s < n; s++)
		for (int d = 0; d < n; d++)
			printf("%s%zu", d ? " " : s ? " / " : " ", c[d]);
	printf("\n");
}

int main(int argc, char **argv)
{
	size_t c[64], sum;
	int perm[64], perm2[64], hot_seen[64] = { 0 };

	if (argc == 5) {
		int n = atoi(argv[2]);

		if (n < 1 || n > 64)
			return 2;
		print_line(strtoull(argv[1], NULL, 0), n, atof(argv[3]),
			   strtoull(argv[4], NULL, 0));
		return 0;
	}
	for (int n = 1; n <= 64; n++)
		for (unsigned long long seed = 0; seed < 20; seed++) {
			size_t count = 262144 - 262144 % (size_t)n;
			double wsum = 0;

			cs_zipf_split(count, n, 1.1, seed, NULL, perm, c);
			cs_zipf_order(n, seed, perm2);
			CHECK(!memcmp(perm, perm2, sizeof(int) * (size_t)n),
			      "n %d seed %llu: order not repeatable", n, seed);
			sum = 0;
			for (int d = 0; d < n; d++)
				sum += c[d];
			CHECK(sum == count, "n %d seed %llu: row adds to %zu",
			      n, seed, sum);
			for (int k = 0; k < n; k++)
				wsum += 1.0 / pow(k + 1, 1.1);
			for (int k = 1; k < n; k++) {
				double want = count / pow(k + 1, 1.1) / wsum;

				CHECK(c[perm[k]] <= c[perm[k - 1]],
				      "n %d seed %llu: place %d above %d", n,
				      seed, k, k - 1);
				CHECK(fabs((double)c[perm[k]] - want) < 1.0,
				      "n %d seed %llu: place %d has %zu, want "
				      "%.1f",
				      n, seed, k, c[perm[k]], want);
			}
			if (n == 4)
				hot_seen[perm[0]] = 1;
			cs_zipf_split(count, n, 0, seed, NULL, perm, c);
			for (int d = 0; d < n; d++)
				CHECK(c[d] == count / (size_t)n,
				      "n %d skew 0: rank %d has %zu", n, d,
				      c[d]);
		}
	/* 4 ranks, 20 seeds: every rank is the hottest for some seed */
	for (int d = 0; d < 4; d++)
		CHECK(hot_seen[d], "4 ranks: rank %d never the hottest", d);
	/* 4 ranks, skew 1.1: the hottest gets 50.4 % */
	cs_zipf_split(1 << 20, 4, 1.1, 1, NULL, perm, c);
	CHECK(c[perm[0]] > 528000 && c[perm[0]] < 530000,
	      "4 ranks: the hottest has %zu of 1048576", c[perm[0]]);
	/* --zero: empty blocks stay empty, the others get everything */
	{
		unsigned char keep[4] = { 1, 0, 1, 0 };

		cs_zipf_split(1000, 4, 1.1, 1, keep, perm, c);
		CHECK(!c[1] && !c[3] && c[0] + c[2] == 1000,
		      "keep 1010: %zu %zu %zu %zu", c[0], c[1], c[2], c[3]);
		memset(keep, 0, sizeof(keep));
		cs_zipf_split(1000, 4, 1.1, 1, keep, perm, c);
		CHECK(!c[0] && !c[1] && !c[2] && !c[3],
		      "keep none: %zu %zu %zu %zu", c[0], c[1], c[2], c[3]);
	}
	if (fails)
		return 1;
	printf("PASS: zipf_split (1..64 ranks, 20 seeds)\n");
	return 0;
}
