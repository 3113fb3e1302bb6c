/* SPDX-License-Identifier: MIT */
/* collstack bench-reduce: reduction kernel GB/s next to memcpy's. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cmds.h"
#include "collectives/reduce.h"
#include "collectives/reduce_impl.h"
#include "internal/util.h"

#define BR_MAX_SIZES 8
#define BR_DEF_REPS 5
#define BR_QUICK_REPS 2
/* Work per timed sample: small sizes repeat the call up to this many bytes
 * so one sample lasts milliseconds, far above the clock's resolution. */
#define BR_SAMPLE_BYTES (64ull << 20)
#define BR_BUF_ALIGN (2u << 20)

struct br_opts {
	size_t sizes[BR_MAX_SIZES];
	unsigned nsizes;
	unsigned reps;
	int isa; /* enum cs_reduce_isa, or -1: the default path */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Operand values that keep every dtype x op in its steady state: no
 * subnormals (slow on x86) however often dst = op(dst, src) is repeated.
 * sum/min/max: k/1024 for |k| <= 1000; prod: +-1. Integers: any bits.
 */
static void fill(void *buf, size_t bytes, enum cs_dtype t, enum cs_redop op)
{
	size_t sz = cs_dtype_size(t), n = bytes / sz;
	unsigned char *p = buf;
	uint64_t rng = 12345;

	for (size_t i = 0; i < n; i++) {
		uint64_t r = cs_rand_next(&rng);
		float f = op == CS_PROD
				  ? (r & 1 ? 1.0f : -1.0f)
				  : (float)((int)(r % 2001) - 1000) / 1024.0f;
		double d = f;
		uint16_t h;

		switch (t) {
		case CS_F32:
			memcpy(p + i * sz, &f, 4);
			break;
		case CS_F64:
			memcpy(p + i * sz, &d, 8);
			break;
		case CS_F16:
			h = cs__f32_to_f16(f);
			memcpy(p + i * sz, &h, 2);
			break;
		case CS_BF16:
			h = cs__f32_to_bf16(f);
			memcpy(p + i * sz, &h, 2);
			break;
		default:
			memcpy(p + i * sz, &r, sz);
			break;
		}
	}
}

static void *big_alloc(size_t bytes)
{
	void *p = NULL;

	if (posix_memalign(&p, BR_BUF_ALIGN, bytes))
		return NULL;
	/* Fewer TLB misses for both memcpy and the kernels; optional. */
	(void)madvise(p, bytes, MADV_HUGEPAGE);
	memset(p, 0, bytes); /* fault every page in before timing */
	return p;
}

static void fmt_size(char *buf, size_t len, size_t bytes)
{
	if (bytes >= (1u << 30) && !(bytes % (1u << 30)))
		snprintf(buf, len, "%zuG", bytes >> 30);
	else if (bytes >= (1u << 20) && !(bytes % (1u << 20)))
		snprintf(buf, len, "%zuM", bytes >> 20);
	else if (bytes >= 1024 && !(bytes % 1024))
		snprintf(buf, len, "%zuK", bytes >> 10);
	else
		snprintf(buf, len, "%zu", bytes);
}

/* Keep the compiler from dropping the copies: dst is read after each. */
static volatile unsigned char br_sink;

struct br_row {
	double kernel_gbs, memcpy_gbs;
};

/*
 * One row: reps samples of the kernel and of memcpy, alternating (which
 * goes first alternates too) so that noise from other processes hits
 * both; the best sample of each is kept. A sample repeats the call inner
 * times. memcpy(dst, src) also puts dst back to its starting values.
 */
static struct br_row measure(cs_reduce_fn fn, unsigned char *dst,
			     const unsigned char *src, size_t bytes,
			     size_t count, unsigned reps)
{
	uint64_t inner = CS_MAX(1, BR_SAMPLE_BYTES / bytes);
	double bk = 1e30, bc = 1e30;

	memcpy(dst, src, bytes);
	for (unsigned r = 0; r < 2 * reps; r++) {
		bool kernel = (r & 1) ^ ((r >> 1) & 1);
		double a = now_s(), d;

		for (uint64_t k = 0; k < inner; k++) {
			if (kernel)
				fn(dst, dst, src, count);
			else
				memcpy(dst, src, bytes);
		}
		d = now_s() - a;
		br_sink ^= dst[bytes - 1];
		if (kernel)
			bk = CS_MIN(bk, d);
		else
			bc = CS_MIN(bc, d);
	}
	return (struct br_row){
		.kernel_gbs = (double)bytes * inner / bk / 1e9,
		.memcpy_gbs = (double)bytes * inner / bc / 1e9,
	};
}

static void header(FILE *out, const char *isa, unsigned reps)
{
	fprintf(out,
		"# collstack bench-reduce: isa=%s; per row the best of %u "
		"kernel and %u memcpy\n"
		"# samples, taken alternately. GB/s = bytes of dst (count x "
		"element size)\n"
		"# per second (1e9 B/s) for both the kernel dst = op(dst, src) "
		"(reads dst\n"
		"# and src, writes dst) and memcpy(dst, src) of the same bytes "
		"(reads src,\n# writes dst).\n",
		isa, reps, reps);
	fprintf(out, "%-5s %-5s %6s %9s %12s %6s\n", "dtype", "op", "size",
		"GB/s", "memcpy_GB/s", "ratio");
}

static int run(FILE *out, const struct br_opts *o)
{
	const char *isa = o->isa < 0		     ? cs_reduce_isa()
			  : o->isa == CS_REDUCE_AVX2 ? "avx2"
						     : "scalar";
	double f32_ratio = 0, h_ratio = 1e9, t0 = now_s();
	unsigned char *dst, *src;
	size_t max = 0;

	for (unsigned s = 0; s < o->nsizes; s++)
		max = CS_MAX(max, o->sizes[s]);
	dst = big_alloc(max);
	src = dst ? big_alloc(max) : NULL;
	if (!src) {
		free(dst);
		fprintf(stderr, "bench-reduce: cannot allocate 2 x %zu bytes\n",
			max);
		return -ENOMEM;
	}
	header(out, isa, o->reps);
	for (unsigned s = 0; s < o->nsizes; s++) {
		size_t bytes = o->sizes[s];
		char sz[32];

		fmt_size(sz, sizeof(sz), bytes);
		for (int t = 0; t < CS_DTYPE_COUNT; t++) {
			for (int op = 0; op < CS_REDOP_COUNT; op++) {
				cs_reduce_fn fn =
					o->isa < 0 ? cs_reduce_get(t, op)
						   : cs_reduce_get_isa(t, op,
								       o->isa);
				struct br_row r;
				double ratio;

				if (op != CS_MAX) /* max reuses min's data */
					fill(src, bytes, t, op);
				r = measure(fn, dst, src, bytes,
					    bytes / cs_dtype_size(t), o->reps);
				ratio = r.kernel_gbs / r.memcpy_gbs;
				fprintf(out,
					"%-5s %-5s %6s %9.2f %12.2f %6.2f\n",
					cs_dtype_name(t), cs_redop_name(op), sz,
					r.kernel_gbs, r.memcpy_gbs, ratio);
				fflush(out);
				if (bytes != max || op != CS_SUM)
					continue;
				if (t == CS_F32)
					f32_ratio = ratio;
				if (t == CS_F16 || t == CS_BF16)
					h_ratio = CS_MIN(h_ratio, ratio);
			}
		}
	}
	fprintf(out,
		"# largest size: f32 sum %.2f x memcpy (goal >= 0.6), "
		"f16/bf16 sum >= %.2f x memcpy (goal >= 0.5); %.1f s\n",
		f32_ratio, h_ratio, now_s() - t0);
	free(src);
	free(dst);
	return 0;
}

/**
 * cs_bench_reduce_run - run the reduction benchmark with default settings
 * @out: where the table goes
 * @quick: small sizes (64 KiB, 4 MiB) and 2 samples, for selftest
 *
 * Returns: 0, or a negative errno (-ENOMEM).
 */
int cs_bench_reduce_run(FILE *out, bool quick)
{
	struct br_opts o = {
		.sizes = { 64u << 10, quick ? 4u << 20 : 256u << 20 },
		.nsizes = 2,
		.reps = quick ? BR_QUICK_REPS : BR_DEF_REPS,
		.isa = -1,
	};

	return run(out, &o);
}

/* "64K", "256M", "1G", "4096": a byte count; 0 on error. */
static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return 0;
	switch (*end) {
	case 'k':
	case 'K':
		v <<= 10, end++;
		break;
	case 'm':
	case 'M':
		v <<= 20, end++;
		break;
	case 'g':
	case 'G':
		v <<= 30, end++;
		break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'B')
		end++;
	return *end || v > (64ull << 30) ? 0 : (size_t)v;
}

static int parse_sizes(char *list, struct br_opts *o)
{
	o->nsizes = 0;
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		size_t v = parse_size(tok);

		if (!v || o->nsizes == BR_MAX_SIZES) {
			fprintf(stderr,
				"bench-reduce: bad --sizes entry '%s'"
				" (want e.g. 64K,256M; at most %d)\n",
				tok, BR_MAX_SIZES);
			return -EINVAL;
		}
		/* whole elements of every dtype */
		o->sizes[o->nsizes++] = CS_DIV_ROUND_UP(v, 8) * 8;
	}
	return o->nsizes ? 0 : -EINVAL;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: collstack bench-reduce [--iters N] [--sizes 64K,256M]"
		" [--isa avx2|scalar] [--quick]\n"
		"  GB/s of every dtype x op kernel, dst = op(dst, src), next "
		"to memcpy of the\n  same bytes measured in the same loop.\n"
		"  --iters N     samples per row, best one kept (default %d)\n"
		"  --sizes LIST  buffer sizes in bytes, K/M/G = 1024^n "
		"(default 64K,256M)\n"
		"  --isa NAME    a given path instead of the default one\n"
		"  --quick       64K,4M and 2 samples (what selftest runs)\n",
		BR_DEF_REPS);
}

int cs_cmd_bench_reduce(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "iters", required_argument, NULL, 'n' },
		{ "sizes", required_argument, NULL, 's' },
		{ "isa", required_argument, NULL, 'i' },
		{ "quick", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct br_opts o = {
		.sizes = { 64u << 10, 256u << 20 },
		.nsizes = 2,
		.reps = BR_DEF_REPS,
		.isa = -1,
	};
	bool quick = false, sized = false, repped = false;
	char *end;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "n:s:i:qh", lopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			o.reps = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !o.reps || o.reps > 1000) {
				fprintf(stderr,
					"bench-reduce: bad --iters "
					"'%s' (1..1000)\n",
					optarg);
				return 2;
			}
			repped = true;
			break;
		case 's':
			if (parse_sizes(optarg, &o))
				return 2;
			sized = true;
			break;
		case 'i':
			if (!strcmp(optarg, "avx2")) {
				o.isa = CS_REDUCE_AVX2;
			} else if (!strcmp(optarg, "scalar")) {
				o.isa = CS_REDUCE_SCALAR;
			} else {
				fprintf(stderr,
					"bench-reduce: bad --isa "
					"'%s' (avx2, scalar)\n",
					optarg);
				return 2;
			}
			if (!cs_reduce_get_isa(CS_F32, CS_SUM, o.isa)) {
				fprintf(stderr,
					"bench-reduce: --isa %s: not "
					"supported on this CPU\n",
					optarg);
				return 1;
			}
			break;
		case 'q':
			quick = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "bench-reduce: unexpected '%s'\n",
			argv[optind]);
		usage(stderr);
		return 2;
	}
	if (quick && !sized)
		o.sizes[1] = 4u << 20;
	if (quick && !repped)
		o.reps = BR_QUICK_REPS;
	return run(stdout, &o) ? 1 : 0;
}
