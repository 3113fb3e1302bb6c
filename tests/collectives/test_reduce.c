/* SPDX-License-Identifier: MIT */
/* Reduction kernels against a naive per-element reference, on every path. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "collectives/reduce.h"
#include "internal/util.h"

/*
 * The reference is written independently of the library: f16 and bf16 are
 * decoded with ldexp, computed in double and rounded with rint() (round to
 * nearest even) on an explicit grid. For sum and prod that is the correctly
 * rounded result, which the kernels claim to produce.
 */

static double small_decode(uint16_t h, int mbits, int ebits)
{
	int bias = (1 << (ebits - 1)) - 1;
	int e = (h >> mbits) & ((1 << ebits) - 1);
	int m = h & ((1 << mbits) - 1);
	double v;

	if (e == (1 << ebits) - 1)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexp(m, 1 - bias - mbits);
	else
		v = ldexp(m + (1 << mbits), e - bias - mbits);
	return (h >> (mbits + ebits)) & 1 ? -v : v;
}

static uint16_t small_encode(double x, int mbits, int ebits)
{
	int bias = (1 << (ebits - 1)) - 1;
	int emin = 1 - bias, emax = bias, e;
	uint16_t sign = signbit(x) ? (uint16_t)(1u << (mbits + ebits)) : 0;
	uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
	double r;

	if (isnan(x))
		return inf | (uint16_t)(1u << (mbits - 1));
	x = fabs(x);
	if (isinf(x))
		return sign | inf;
	if (x == 0)
		return sign;
	frexp(x, &e);
	e -= 1; /* x in [2^e, 2^(e+1)) */
	if (e < emin)
		e = emin;
	r = rint(x / ldexp(1, e - mbits));
	if (r >= ldexp(1, mbits + 1)) {
		r /= 2;
		e++;
	}
	if (e > emax)
		return sign | inf;
	if (r < ldexp(1, mbits)) /* subnormal */
		return sign | (uint16_t)r;
	return sign | (uint16_t)((e + bias) << mbits) |
	       (uint16_t)((unsigned)r - (1u << mbits));
}

#define F16_M 10
#define F16_E 5
#define BF16_M 7
#define BF16_E 8

static double ref_fop(enum cs_redop op, double a, double b)
{
	switch (op) {
	case CS_SUM:
		return a + b;
	case CS_PROD:
		return a * b;
	case CS_MIN:
		if (isnan(a) || isnan(b))
			return NAN;
		return a < b ? a : b;
	default:
		if (isnan(a) || isnan(b))
			return NAN;
		return a > b ? a : b;
	}
}

static float ref_fop32(enum cs_redop op, float a, float b)
{
	switch (op) {
	case CS_SUM:
		return a + b;
	case CS_PROD:
		return a * b;
	case CS_MIN:
		if (isnan(a) || isnan(b))
			return NAN;
		return a < b ? a : b;
	default:
		if (isnan(a) || isnan(b))
			return NAN;
		return a > b ? a : b;
	}
}

#define REF_INT(T, UT, op, x, y)                                               \
	((op) == CS_SUM	   ? (T)((UT)(x) + (UT)(y))                            \
	 : (op) == CS_PROD ? (T)((UT)(x) * (UT)(y))                            \
	 : (op) == CS_MIN  ? ((x) < (y) ? (x) : (y))                           \
			   : ((x) > (y) ? (x) : (y)))

/* r = op(x, y) for one element of type t; all pointers may be unaligned. */
static void ref_elem(enum cs_dtype t, enum cs_redop op, const void *x,
		     const void *y, void *r)
{
	switch (t) {
	case CS_F32: {
		float a, b, c;

		memcpy(&a, x, 4);
		memcpy(&b, y, 4);
		c = ref_fop32(op, a, b);
		memcpy(r, &c, 4);
		break;
	}
	case CS_F64: {
		double a, b, c;

		memcpy(&a, x, 8);
		memcpy(&b, y, 8);
		c = ref_fop(op, a, b);
		memcpy(r, &c, 8);
		break;
	}
	case CS_F16:
	case CS_BF16: {
		int mb = t == CS_F16 ? F16_M : BF16_M;
		int eb = t == CS_F16 ? F16_E : BF16_E;
		uint16_t a, b, c;

		memcpy(&a, x, 2);
		memcpy(&b, y, 2);
		c = small_encode(ref_fop(op, small_decode(a, mb, eb),
					 small_decode(b, mb, eb)),
				 mb, eb);
		memcpy(r, &c, 2);
		break;
	}
	case CS_I32: {
		int32_t a, b, c;

		memcpy(&a, x, 4);
		memcpy(&b, y, 4);
		c = REF_INT(int32_t, uint32_t, op, a, b);
		memcpy(r, &c, 4);
		break;
	}
	case CS_I64: {
		int64_t a, b, c;

		memcpy(&a, x, 8);
		memcpy(&b, y, 8);
		c = REF_INT(int64_t, uint64_t, op, a, b);
		memcpy(r, &c, 8);
		break;
	}
	default: {
		uint8_t a = *(const uint8_t *)x, b = *(const uint8_t *)y;

		*(uint8_t *)r = REF_INT(uint8_t, unsigned, op, a, b);
		break;
	}
	}
}

static bool is_nan(enum cs_dtype t, const void *p)
{
	float f;
	double d;
	uint16_t h;

	switch (t) {
	case CS_F32:
		memcpy(&f, p, 4);
		return isnan(f);
	case CS_F64:
		memcpy(&d, p, 8);
		return isnan(d);
	case CS_F16:
		memcpy(&h, p, 2);
		return (h & 0x7fff) > 0x7c00;
	case CS_BF16:
		memcpy(&h, p, 2);
		return (h & 0x7fff) > 0x7f80;
	default:
		return false;
	}
}

/* Bit-identical, or both NaN (which NaN is not specified). */
static bool same_elem(enum cs_dtype t, const void *got, const void *want)
{
	if (is_nan(t, want) || is_nan(t, got))
		return is_nan(t, want) && is_nan(t, got);
	return !memcmp(got, want, cs_dtype_size(t));
}

/*
 * Test data: a quarter random bit patterns (NaNs, infs, subnormals
 * included), half values of similar magnitude (so sums round), a quarter
 * special values.
 */
static void gen_elem(enum cs_dtype t, uint64_t *rng, void *out)
{
	static const uint16_t h_special[] = {
		0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x0001, 0x8001,
		0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3bff, 0x3c01,
	};
	static const uint16_t b_special[] = {
		0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x0001, 0x8001,
		0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f7f, 0x3f81,
	};
	static const double d_special[] = {
		0.0,	-0.0,	INFINITY, -INFINITY, NAN,     1.0, -1.0, 1e-40,
		-1e-45, 3.4e38, -3.4e38,  1e-310,    1.7e308, 0.5, 2.0,	 3.0,
	};
	uint64_t r = cs_rand_next(rng);
	unsigned cls = r & 7, pick = (r >> 3) & 15;
	double v = ((double)((r >> 8) & 0xffff) - 32768.0) / 4096.0;
	size_t sz = cs_dtype_size(t);
	uint64_t bits = cs_rand_next(rng);

	if (t == CS_I32 || t == CS_I64 || t == CS_U8 || cls < 2) {
		/* random bits; for ints, sometimes small values */
		if (t != CS_F32 && t != CS_F64 && t != CS_F16 && t != CS_BF16 &&
		    cls >= 5)
			bits = (uint64_t)(int64_t)(int)(v * 8);
		memcpy(out, &bits, sz);
		return;
	}
	if (cls >= 6) {
		if (t == CS_F16) {
			memcpy(out, &h_special[pick], 2);
		} else if (t == CS_BF16) {
			memcpy(out, &b_special[pick], 2);
		} else if (t == CS_F32) {
			float f = (float)d_special[pick];

			memcpy(out, &f, 4);
		} else {
			memcpy(out, &d_special[pick], 8);
		}
		return;
	}
	/* a value in [-8, 8) with a random low part, stored exactly */
	if (t == CS_F32) {
		float f = (float)v + (float)(bits & 0xfff) * 0x1p-20f;

		memcpy(out, &f, 4);
	} else if (t == CS_F64) {
		double d = v + (double)(bits & 0xffffff) * 0x1p-40;

		memcpy(out, &d, 8);
	} else {
		int mb = t == CS_F16 ? F16_M : BF16_M;
		int eb = t == CS_F16 ? F16_E : BF16_E;
		uint16_t h = small_encode(v, mb, eb);

		memcpy(out, &h, 2);
	}
}

static void gen(enum cs_dtype t, uint64_t *rng, void *buf, size_t n)
{
	size_t sz = cs_dtype_size(t);

	for (size_t i = 0; i < n; i++)
		gen_elem(t, rng, (unsigned char *)buf + i * sz);
}

enum mode {
	M_INPLACE, /* fn(d, d, s) */
	M_DISTINCT, /* fn(d, a, b) */
	M_ALIAS_B, /* fn(d, a, d) */
	M_COUNT
};

#define GUARD 64
#define GUARD_BYTE 0xa5

/*
 * Run one kernel on n elements at byte offsets doff/soff (0..3) from
 * malloc's alignment, and check every element against the reference and
 * the guard bytes around the destination. Returns the number of bad
 * elements (and reports the first).
 */
static size_t check_one(cs_reduce_fn fn, enum cs_dtype t, enum cs_redop op,
			size_t n, unsigned doff, unsigned soff, enum mode m,
			uint64_t seed, const char *what)
{
	size_t sz = cs_dtype_size(t), bytes = n * sz, bad = 0;
	unsigned char *dbuf = malloc(bytes + 2 * GUARD + 4);
	unsigned char *abuf = malloc(bytes + 4);
	unsigned char *bbuf = malloc(bytes + 4);
	unsigned char *want = malloc(bytes + 1);
	unsigned char *d, *a, *b;
	uint64_t rng = seed;

	cr_assert(dbuf && abuf && bbuf && want);
	memset(dbuf, GUARD_BYTE, bytes + 2 * GUARD + 4);
	d = dbuf + GUARD + doff;
	a = abuf + soff;
	b = bbuf + (soff ^ 1);
	gen(t, &rng, a, n);
	gen(t, &rng, b, n);
	for (size_t i = 0; i < n; i++)
		ref_elem(t, op, a + i * sz, b + i * sz, want + i * sz);
	/* fn == NULL: through cs_reduce_into() and cs_reduce3() */
	switch (m) {
	case M_INPLACE:
		memcpy(d, a, bytes);
		if (fn)
			fn(d, d, b, n);
		else
			cr_assert_eq(cs_reduce_into(d, b, n, t, op), 0);
		break;
	case M_DISTINCT:
		if (fn)
			fn(d, a, b, n);
		else
			cr_assert_eq(cs_reduce3(d, a, b, n, t, op), 0);
		break;
	default:
		/* op(a, d) with d holding b: the second operand aliases */
		memcpy(d, b, bytes);
		if (fn)
			fn(d, a, d, n);
		else
			cr_assert_eq(cs_reduce3(d, a, d, n, t, op), 0);
		break;
	}
	for (size_t i = 0; i < n; i++) {
		if (same_elem(t, d + i * sz, want + i * sz))
			continue;
		if (!bad++) {
			uint64_t ga = 0, gb = 0, gg = 0, gw = 0;

			memcpy(&ga, a + i * sz, sz);
			memcpy(&gb, b + i * sz, sz);
			memcpy(&gg, d + i * sz, sz);
			memcpy(&gw, want + i * sz, sz);
			cr_log_error("%s %s %s n=%zu mode=%d i=%zu: "
				     "op(%#llx, %#llx) = %#llx, want %#llx",
				     what, cs_dtype_name(t), cs_redop_name(op),
				     n, (int)m, i, (unsigned long long)ga,
				     (unsigned long long)gb,
				     (unsigned long long)gg,
				     (unsigned long long)gw);
		}
	}
	for (size_t i = 0; i < GUARD + doff; i++)
		bad += dbuf[i] != GUARD_BYTE;
	for (size_t i = GUARD + doff + bytes; i < bytes + 2 * GUARD + 4; i++)
		bad += dbuf[i] != GUARD_BYTE;
	free(want);
	free(bbuf);
	free(abuf);
	free(dbuf);
	return bad;
}

static const char *const isa_name[CS_REDUCE_ISA_COUNT] = { "scalar", "avx2" };

static void all_lengths(enum cs_reduce_isa isa)
{
	size_t bad = 0, runs = 0;

	if (!cs_reduce_get_isa(CS_F32, CS_SUM, isa))
		cr_skip_test("%s path not available (CPU or build)",
			     isa_name[isa]);
	for (int t = 0; t < CS_DTYPE_COUNT; t++) {
		for (int op = 0; op < CS_REDOP_COUNT; op++) {
			cs_reduce_fn fn = cs_reduce_get_isa(t, op, isa);

			cr_assert_not_null(fn);
			for (size_t n = 0; n <= 257; n++) {
				for (int m = 0; m < M_COUNT; m++) {
					unsigned doff = (n + m) & 3;
					unsigned soff = (n / 4 + m) & 3;

					bad += check_one(
						fn, t, op, n, doff, soff, m,
						n * 131 + m + t * 7 + op * 1000,
						isa_name[isa]);
					runs++;
				}
			}
		}
	}
	cr_expect_eq(bad, 0, "%zu bad elements in %zu runs", bad, runs);
}

Test(reduce, lengths_0_257_scalar)
{
	all_lengths(CS_REDUCE_SCALAR);
}

Test(reduce, lengths_0_257_avx2)
{
	all_lengths(CS_REDUCE_AVX2);
}

/* The API entry points, on the default path, with every mode. */
Test(reduce, api_lengths_0_257)
{
	size_t bad = 0;

	for (int t = 0; t < CS_DTYPE_COUNT; t++)
		for (int op = 0; op < CS_REDOP_COUNT; op++)
			for (size_t n = 0; n <= 257; n++)
				for (int m = 0; m < M_COUNT; m++)
					bad += check_one(
						NULL, t, op, n, (n + m + 1) & 3,
						(n / 2 + m) & 3, m,
						n * 17 + m + t * 5 + op * 977,
						cs_reduce_isa());
	cr_expect_eq(bad, 0, "%zu bad elements", bad);
}

#define LARGE ((1u << 20) + 3)

static void large(enum cs_reduce_isa isa)
{
	size_t bad = 0;

	if (!cs_reduce_get_isa(CS_F32, CS_SUM, isa))
		cr_skip_test("%s path not available (CPU or build)",
			     isa_name[isa]);
	for (int t = 0; t < CS_DTYPE_COUNT; t++)
		for (int op = 0; op < CS_REDOP_COUNT; op++)
			bad += check_one(cs_reduce_get_isa(t, op, isa), t, op,
					 LARGE, 3, 1, (t + op) % M_COUNT,
					 42 + t * 4 + op, isa_name[isa]);
	cr_expect_eq(bad, 0, "%zu bad elements", bad);
}

Test(reduce, large_scalar, .timeout = 120)
{
	large(CS_REDUCE_SCALAR);
}

Test(reduce, large_avx2, .timeout = 120)
{
	large(CS_REDUCE_AVX2);
}

/* The two paths agree bit for bit (NaN: both NaN) on random bit patterns. */
Test(reduce, paths_agree_on_random_bits)
{
	enum { N = 4099 };
	uint64_t rng = 7;
	size_t bad = 0;

	if (!cs_reduce_get_isa(CS_F32, CS_SUM, CS_REDUCE_AVX2))
		cr_skip_test("avx2 path not available (CPU or build)");
	for (int t = 0; t < CS_DTYPE_COUNT; t++) {
		size_t sz = cs_dtype_size(t);
		unsigned char *a = malloc(N * sz), *b = malloc(N * sz);
		unsigned char *rs = malloc(N * sz), *rv = malloc(N * sz);

		cr_assert(a && b && rs && rv);
		for (int rep = 0; rep < 16; rep++) {
			for (size_t i = 0; i < N * sz; i += 8) {
				uint64_t x = cs_rand_next(&rng);
				uint64_t y = cs_rand_next(&rng);

				memcpy(a + i, &x, CS_MIN(8, N * sz - i));
				memcpy(b + i, &y, CS_MIN(8, N * sz - i));
			}
			for (int op = 0; op < CS_REDOP_COUNT; op++) {
				cs_reduce_get_isa(t, op, CS_REDUCE_SCALAR)(
					rs, a, b, N);
				cs_reduce_get_isa(t, op, CS_REDUCE_AVX2)(rv, a,
									 b, N);
				for (size_t i = 0; i < N; i++)
					bad += !same_elem(t, rv + i * sz,
							  rs + i * sz);
			}
		}
		free(rv);
		free(rs);
		free(b);
		free(a);
	}
	cr_expect_eq(bad, 0, "%zu elements differ between paths", bad);
}

/* Every f16 and bf16 pattern survives the f32 round trip (max(x, x)). */
Test(reduce, half_round_trip_exhaustive)
{
	uint16_t *x = malloc(65536 * 2), *r = malloc(65536 * 2);

	cr_assert(x && r);
	for (unsigned i = 0; i < 65536; i++)
		x[i] = (uint16_t)i;
	for (int isa = 0; isa < CS_REDUCE_ISA_COUNT; isa++) {
		for (int t = CS_F16; t <= CS_BF16; t++) {
			cs_reduce_fn fn = cs_reduce_get_isa(t, CS_MAX, isa);

			if (!fn)
				continue;
			fn(r, x, x, 65536);
			for (unsigned i = 0; i < 65536; i++) {
				if (is_nan(t, &x[i]))
					cr_assert(is_nan(t, &r[i]), "%s %#x",
						  isa_name[isa], i);
				else
					cr_assert_eq(r[i], x[i], "%s %s %#x",
						     isa_name[isa],
						     cs_dtype_name(t), i);
			}
		}
	}
	free(r);
	free(x);
}

/* Documented NaN and signed-zero behaviour of min and max. */
Test(reduce, min_max_nan_propagates)
{
	for (int isa = 0; isa < CS_REDUCE_ISA_COUNT; isa++) {
		if (!cs_reduce_get_isa(CS_F32, CS_MIN, isa))
			continue;
		for (int op = CS_MIN; op <= CS_MAX; op++) {
			/* 40 elements: vector body and scalar tail */
			float fa[40], fb[40], fr[40];
			double da[40], db[40], dr[40];
			uint16_t ha[40], hb[40], hr[40], ba[40], bb[40], br[40];

			for (int i = 0; i < 40; i++) {
				fa[i] = i % 2 ? NAN : 1.0f;
				fb[i] = i % 2 ? -2.0f : NAN;
				da[i] = i % 2 ? NAN : 1.0;
				db[i] = i % 2 ? -2.0 : NAN;
				ha[i] = i % 2 ? 0x7e00 : 0x3c00;
				hb[i] = i % 2 ? 0xc000 : 0xfe00;
				ba[i] = i % 2 ? 0x7fc0 : 0x3f80;
				bb[i] = i % 2 ? 0xc000 : 0xffc0;
			}
			cs_reduce_get_isa(CS_F32, op, isa)(fr, fa, fb, 40);
			cs_reduce_get_isa(CS_F64, op, isa)(dr, da, db, 40);
			cs_reduce_get_isa(CS_F16, op, isa)(hr, ha, hb, 40);
			cs_reduce_get_isa(CS_BF16, op, isa)(br, ba, bb, 40);
			for (int i = 0; i < 40; i++) {
				cr_assert(isnan(fr[i]), "%s f32 %d",
					  isa_name[isa], i);
				cr_assert(isnan(dr[i]), "%s f64 %d",
					  isa_name[isa], i);
				cr_assert(is_nan(CS_F16, &hr[i]));
				cr_assert(is_nan(CS_BF16, &br[i]));
			}
			/* equal operands (+0, -0): the second one */
			for (int i = 0; i < 40; i++) {
				fa[i] = i % 2 ? 0.0f : -0.0f;
				fb[i] = i % 2 ? -0.0f : 0.0f;
			}
			cs_reduce_get_isa(CS_F32, op, isa)(fr, fa, fb, 40);
			for (int i = 0; i < 40; i++)
				cr_assert_eq(signbit(fr[i]) != 0, i % 2 == 1);
			/* and ordinary values are ordered */
			for (int i = 0; i < 40; i++) {
				fa[i] = (float)i - 20;
				fb[i] = 20 - (float)i;
			}
			cs_reduce_get_isa(CS_F32, op, isa)(fr, fa, fb, 40);
			for (int i = 0; i < 40; i++)
				cr_assert_eq(fr[i], op == CS_MIN
							    ? -fabsf(fa[i])
							    : fabsf(fa[i]));
		}
	}
}

/* A few hand-computed values: wrap-around and rounding. */
Test(reduce, known_values)
{
	int32_t i32a = INT32_MAX, i32b = 1, i32r;
	int64_t i64a = INT64_MIN, i64b = -1, i64r;
	uint8_t u8a[33], u8b[33], u8r[33];
	uint16_t h1 = 0x3c00, h2 = 0x1000, hr; /* 1 + 2^-11: tie, to 1 */
	uint16_t b1 = 0x3f80, b2 = 0x3b80, br; /* 1 + 2^-8: tie, to 1 */

	cr_assert_eq(cs_reduce_into(&i32a, &i32b, 1, CS_I32, CS_SUM), 0);
	cr_assert_eq(i32a, INT32_MIN);
	cr_assert_eq(cs_reduce3(&i64r, &i64a, &i64b, 1, CS_I64, CS_PROD), 0);
	cr_assert_eq(i64r, INT64_MIN);
	i64a = 0x123456789abcdefll;
	i64b = -0x0fedcba987654321ll;
	cr_assert_eq(cs_reduce3(&i64r, &i64a, &i64b, 1, CS_I64, CS_PROD), 0);
	cr_assert_eq((uint64_t)i64r, (uint64_t)i64a * (uint64_t)i64b);
	for (int i = 0; i < 33; i++) {
		u8a[i] = (uint8_t)(200 + i);
		u8b[i] = 100;
	}
	cr_assert_eq(cs_reduce3(u8r, u8a, u8b, 33, CS_U8, CS_SUM), 0);
	for (int i = 0; i < 33; i++)
		cr_assert_eq(u8r[i], (uint8_t)(300 + i));
	cr_assert_eq(cs_reduce3(u8r, u8a, u8b, 33, CS_U8, CS_PROD), 0);
	for (int i = 0; i < 33; i++)
		cr_assert_eq(u8r[i], (uint8_t)((200 + i) * 100));
	i32b = -5;
	i32r = 7;
	cr_assert_eq(cs_reduce_into(&i32r, &i32b, 1, CS_I32, CS_MIN), 0);
	cr_assert_eq(i32r, -5);
	cr_assert_eq(cs_reduce3(&hr, &h1, &h2, 1, CS_F16, CS_SUM), 0);
	cr_assert_eq(hr, 0x3c00);
	h2 = 0x1001; /* just above the tie: rounds up */
	cr_assert_eq(cs_reduce3(&hr, &h1, &h2, 1, CS_F16, CS_SUM), 0);
	cr_assert_eq(hr, 0x3c01);
	h1 = 0x7bff; /* 65504 + 65504 = inf */
	cr_assert_eq(cs_reduce3(&hr, &h1, &h1, 1, CS_F16, CS_SUM), 0);
	cr_assert_eq(hr, 0x7c00);
	cr_assert_eq(cs_reduce3(&br, &b1, &b2, 1, CS_BF16, CS_SUM), 0);
	cr_assert_eq(br, 0x3f80);
	b1 = 0x3f81; /* 1+2^-7 + 2^-8: tie, to even 1+2^-6 */
	cr_assert_eq(cs_reduce3(&br, &b1, &b2, 1, CS_BF16, CS_SUM), 0);
	cr_assert_eq(br, 0x3f82);
}

Test(reduce, bad_arguments)
{
	float x = 1, y = 2;

	cr_assert_eq(cs_reduce_into(&x, &y, 1, CS_DTYPE_COUNT, CS_SUM),
		     -EINVAL);
	cr_assert_eq(cs_reduce_into(&x, &y, 1, CS_F32, CS_REDOP_COUNT),
		     -EINVAL);
	cr_assert_eq(cs_reduce_into(&x, &y, 1, (enum cs_dtype) - 1, CS_SUM),
		     -EINVAL);
	cr_assert_eq(cs_reduce3(&x, NULL, &y, 1, CS_F32, CS_SUM), -EINVAL);
	cr_assert_eq(cs_reduce_into(NULL, NULL, 0, CS_F32, CS_SUM), 0);
	cr_assert_eq(cs_reduce_into(NULL, NULL, 0, CS_U8, 9), -EINVAL);
	cr_assert_null(cs_reduce_get(CS_DTYPE_COUNT, CS_SUM));
	cr_assert_null(cs_reduce_get(CS_F32, CS_REDOP_COUNT));
	cr_assert_null(cs_reduce_get_isa(CS_F32, CS_SUM, CS_REDUCE_ISA_COUNT));
	cr_assert_eq(x, 1);
	cr_assert_eq(cs_reduce_into(&x, &y, 1, CS_F32, CS_SUM), 0);
	cr_assert_eq(x, 3);
}

/* The default path is the best one; CS_REDUCE_ISA=scalar forces scalar.
 * (Criterion runs each test in a fresh process, so the choice is unset.) */
Test(reduce, isa_default)
{
	bool avx2 = cs_reduce_get_isa(CS_F32, CS_SUM, CS_REDUCE_AVX2) != NULL;

	unsetenv("CS_REDUCE_ISA");
	cr_assert_str_eq(cs_reduce_isa(), avx2 ? "avx2" : "scalar");
	cr_assert_eq(
		cs_reduce_get(CS_F16, CS_SUM),
		cs_reduce_get_isa(CS_F16, CS_SUM,
				  avx2 ? CS_REDUCE_AVX2 : CS_REDUCE_SCALAR));
}

Test(reduce, isa_env_forces_scalar)
{
	setenv("CS_REDUCE_ISA", "scalar", 1);
	cr_assert_str_eq(cs_reduce_isa(), "scalar");
	cr_assert_eq(cs_reduce_get(CS_BF16, CS_MAX),
		     cs_reduce_get_isa(CS_BF16, CS_MAX, CS_REDUCE_SCALAR));
}
