// SPDX-License-Identifier: MIT
/*
 * A libFuzzer-free driver for the fuzz targets, so the default (gcc,
 * ASan) builds run their properties too: it feeds the target every file
 * named on the command line, then seeded random mutations of them.
 *
 *   replay [-n ITERATIONS] [-s SEED] FILE...
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX 16384

static size_t load(const char *path, uint8_t *buf)
{
	FILE *fp = fopen(path, "rb");
	size_t n;

	if (!fp) {
		perror(path);
		exit(2);
	}
	n = fread(buf, 1, REPLAY_MAX, fp);
	fclose(fp);
	return n;
}

/* One input in a heap block of exactly its size, so ASan sees overreads. */
static void feed(const uint8_t *src, size_t n)
{
	uint8_t *p = malloc(n ? n : 1);

	if (!p)
		exit(2);
	memcpy(p, src, n);
	LLVMFuzzerTestOneInput(p, n);
	free(p);
}

static size_t mutate(uint8_t *b, size_t n, uint64_t *rng)
{
	unsigned int k, edits = 1 + (unsigned int)(cs_rand_next(rng) % 4);
	size_t at;

	for (k = 0; k < edits && n; k++) {
		at = cs_rand_next(rng) % n;
		switch (cs_rand_next(rng) % 5) {
		case 0: /* flip a bit */
			b[at] ^= (uint8_t)(1u << (cs_rand_next(rng) % 8));
			break;
		case 1: /* random byte */
			b[at] = (uint8_t)cs_rand_next(rng);
			break;
		case 2: /* truncate */
			n = at;
			break;
		case 3: /* interesting value */
			b[at] = (cs_rand_next(rng) & 1) ? 0xff : 0x00;
			break;
		default: /* grow by a few bytes */
			if (n + 4 <= REPLAY_MAX) {
				memset(b + n, (int)at, 4);
				n += 4;
			}
			break;
		}
	}
	return n;
}

int main(int argc, char **argv)
{
	static uint8_t seeds[64][REPLAY_MAX];
	static size_t seed_len[64];
	static uint8_t work[REPLAY_MAX];
	unsigned long iters = 100000, i;
	uint64_t rng = 1;
	int nseeds = 0, a;

	for (a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "-n") && a + 1 < argc) {
			iters = strtoul(argv[++a], NULL, 0);
		} else if (!strcmp(argv[a], "-s") && a + 1 < argc) {
			rng = strtoull(argv[++a], NULL, 0);
		} else if (nseeds < 64) {
			seed_len[nseeds] = load(argv[a], seeds[nseeds]);
			feed(seeds[nseeds], seed_len[nseeds]);
			nseeds++;
		}
	}
	if (!nseeds) {
		fprintf(stderr, "replay: no input files\n");
		return 2;
	}
	for (i = 0; i < iters; i++) {
		int s = (int)(cs_rand_next(&rng) % (uint64_t)nseeds);
		size_t n = seed_len[s];

		memcpy(work, seeds[s], n);
		n = mutate(work, n, &rng);
		feed(work, n);
	}
	printf("replay: %d seeds, %lu mutated inputs, no failure\n", nseeds,
	       iters);
	return 0;
}
