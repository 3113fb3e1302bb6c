/* SPDX-License-Identifier: MIT */
/*
 * zipf_split.h: the all-to-all-v counts of both sides of
 * scripts/bench-vs-mpi.sh, tools/mpi_bench.c (-o alltoallv, Open MPI's
 * MPI_Alltoallv) and tools/cs_trainer_bench.c (-o alltoallv, collstack's
 * cs_alltoallv), so that for the same size, exponent and seed both move
 * exactly the same count matrix.
 *
 * The rule: every sender splits its @count elements over the @n ranks by
 * Zipf weights w_k = 1 / (k + 1)^skew, k a destination's place in one
 * permutation of the ranks drawn from @seed (splitmix64, Fisher-Yates from
 * the last place down: j = next % (i + 1), swap places i and j). The
 * permutation is the same for every sender, so the rank in place 0 is
 * everybody's hottest destination (a popular MoE expert: with skew 1.1 on
 * 4 ranks it gets 50.4 % of every rank's elements). count(d) =
 * floor(count x w_k / sum of w), the elements the rounding leaves go to
 * the hottest destination, so a sender's counts add up to @count exactly.
 * skew 0: equal blocks (count / n each where n divides count).
 *
 * @keep (NULL: every destination): cs_trainer_bench's --zero empties some
 * blocks of a sender; their weight is 0, the others share the elements and
 * the remainder goes to the hottest destination kept (none kept: all 0).
 */
#ifndef CS_TOOLS_ZIPF_SPLIT_H
#define CS_TOOLS_ZIPF_SPLIT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* splitmix64: the next value of the sequence in *@x */
static inline uint64_t cs_zipf_next(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* @perm[k]: the destination in place k (0: the hottest). */
static inline void cs_zipf_order(int n, uint64_t seed, int *perm)
{
	uint64_t x = seed;

	for (int i = 0; i < n; i++)
		perm[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(cs_zipf_next(&x) % (uint64_t)(i + 1)),
		    t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
}

/*
 * One sender's counts: @cnt[d] elements to rank d (the header's rule).
 * @perm: room for @n ints. @keep: NULL, or @keep[d] 0 empties d's block.
 */
static inline void cs_zipf_split(size_t count, int n, double skew,
				 uint64_t seed, const unsigned char *keep,
				 int *perm, size_t *cnt)
{
	double sum = 0;
	size_t left = count;
	int hot = -1;

	cs_zipf_order(n, seed, perm);
	for (int k = 0; k < n; k++)
		if (!keep || keep[perm[k]])
			sum += 1.0 / pow(k + 1, skew);
	for (int k = 0; k < n; k++) {
		size_t c = 0;

		if (!keep || keep[perm[k]]) {
			c = (size_t)floor((double)count *
					  (1.0 / pow(k + 1, skew)) / sum);
			if (hot < 0)
				hot = perm[k];
		}
		cnt[perm[k]] = c;
		left -= c;
	}
	if (hot >= 0)
		cnt[hot] += left;
}

#endif
