/* SPDX-License-Identifier: MIT */
/* Internals of the reduction kernels: scalar element operations shared by
 * the scalar path and the tails of the vector paths, and the kernel tables. */
#ifndef CS_COLLECTIVES_REDUCE_IMPL_H
#define CS_COLLECTIVES_REDUCE_IMPL_H

#include <stdint.h>
#include <string.h>

#include "collectives/reduce.h"

/* A table of kernels for one path, indexed [dtype][op]. */
typedef cs_reduce_fn cs__reduce_table_t[CS_DTYPE_COUNT][CS_REDOP_COUNT];

extern const cs__reduce_table_t cs__reduce_scalar;
/* -DCS_REDUCE_NO_AVX2 builds the scalar path only (to test that build). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(CS_REDUCE_NO_AVX2)
#define CS_REDUCE_HAVE_AVX2 1
extern const cs__reduce_table_t cs__reduce_avx2;
#else
#define CS_REDUCE_HAVE_AVX2 0
#endif

static inline uint32_t cs__f32_bits(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	return x;
}

static inline float cs__bits_f32(uint32_t x)
{
	float f;

	memcpy(&f, &x, sizeof(f));
	return f;
}

/*
 * f16 -> f32, exact. A signalling NaN comes out quiet with its payload,
 * which is what F16C's vcvtph2ps does.
 */
static inline float cs__f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t mant = h & 0x3ff;

	if (exp == 0x1f)
		return cs__bits_f32(sign | 0x7f800000 | (mant << 13) |
				    (mant ? 0x400000 : 0));
	if (exp == 0) {
		/* zero or subnormal: mant * 2^-24, exact in f32 */
		float f = (float)mant * 0x1p-24f;

		return sign ? -f : f;
	}
	return cs__bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/*
 * f32 -> f16 with round to nearest even, like F16C's vcvtps2ph with
 * _MM_FROUND_TO_NEAREST_INT: overflow gives inf, NaN gives a quiet NaN
 * with the top of the payload.
 */
static inline uint16_t cs__f32_to_f16(float f)
{
	uint32_t x = cs__f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000;
	uint32_t ax = x & 0x7fffffff;

	if (ax > 0x7f800000) /* NaN */
		return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
	if (ax >= 0x477ff000) /* >= 65520: inf */
		return (uint16_t)(sign | 0x7c00);
	if (ax >= 0x38800000) { /* normal f16 */
		uint32_t r = ax - 0x38000000; /* rebias 127 -> 15 */

		r += 0xfff + ((r >> 13) & 1);
		return (uint16_t)(sign | (r >> 13));
	}
	if (ax <= 0x33000000) /* <= 2^-25: rounds to 0 */
		return (uint16_t)sign;
	/* subnormal f16: RNE(value * 2^24); value = m * 2^(e - 150) */
	uint32_t e = ax >> 23;
	uint32_t m = (ax & 0x7fffff) | 0x800000;
	uint32_t shift = 126 - e; /* 14..24 */
	uint32_t r = m >> shift;
	uint32_t rem = m & ((1u << shift) - 1);
	uint32_t half = 1u << (shift - 1);

	if (rem > half || (rem == half && (r & 1)))
		r++;
	return (uint16_t)(sign | r);
}

static inline float cs__bf16_to_f32(uint16_t h)
{
	return cs__bits_f32((uint32_t)h << 16);
}

/* f32 -> bf16, round to nearest even; NaN stays NaN (quieted). */
static inline uint16_t cs__f32_to_bf16(float f)
{
	uint32_t x = cs__f32_bits(f);

	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40);
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/*
 * Floating min/max: NaN if either operand is NaN (the NaN of @a when @a is
 * one, else that of @b); @b when the operands compare equal. This is
 * exactly vminps/vmaxps (which return the second operand when either is
 * NaN) with @a's NaN blended back in, so both paths agree bit for bit.
 */
#define CS__DEF_MINMAX(sfx, T)                                                 \
	static inline T cs__min_##sfx(T a, T b)                                \
	{                                                                      \
		return a != a ? a : (a < b ? a : b);                           \
	}                                                                      \
	static inline T cs__max_##sfx(T a, T b)                                \
	{                                                                      \
		return a != a ? a : (a > b ? a : b);                           \
	}
CS__DEF_MINMAX(f32, float)
CS__DEF_MINMAX(f64, double)
#undef CS__DEF_MINMAX

#endif
