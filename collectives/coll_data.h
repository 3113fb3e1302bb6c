/* SPDX-License-Identifier: MIT */
/*
 * Test data for collectives from a closed formula: rank r's element i is a
 * small integer drawn from a hash, chosen per type and operator so that
 * every partial result is exact (no rounding in f16/bf16/f32, wrap-around
 * only where the type defines it). The expected result is then the same
 * whatever the reduction order, and large runs need no reference copy.
 * Shared by the ring unit tests and `collstack sim`.
 */
#ifndef CS_COLLECTIVES_COLL_DATA_H
#define CS_COLLECTIVES_COLL_DATA_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "collstack/types.h"

static inline uint64_t cs_td_hash(uint64_t seed, uint64_t r, uint64_t i)
{
	uint64_t z = seed ^ (r * 0x9e3779b97f4a7c15ull) ^
		     (i * 0xd1b54a32d192ed03ull);

	z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
	return z ^ (z >> 32);
}

/* Largest integer magnitude every value and partial sum must stay below
 * for the type to hold it exactly. */
static inline double cs_td_exact_lim(enum cs_dtype t)
{
	switch (t) {
	case CS_F16:
		return 2048;
	case CS_BF16:
		return 256;
	default:
		return 1 << 24;
	}
}

/**
 * cs_td_value - rank @r's element @i
 */
static inline double cs_td_value(enum cs_dtype t, enum cs_redop op,
				 uint32_t nranks, uint64_t seed, uint32_t r,
				 uint64_t i)
{
	uint64_t h = cs_td_hash(seed, r, i);
	double a;

	if (t == CS_U8)
		return op == CS_PROD ? ((h & 1) ? 1 : 255) : (double)(h & 255);
	switch (op) {
	case CS_SUM:
		a = floor(cs_td_exact_lim(t) / nranks);
		a = a > 3 ? 3 : (a < 1 ? 1 : a);
		return (double)(int64_t)(h % (uint64_t)(2 * a + 1)) - a;
	case CS_PROD:
		return (h & 1) ? 1 : -1;
	default:
		return (double)(int64_t)(h % 201) - 100;
	}
}

/**
 * cs_td_random - rank @r's element @i for rounding tests: a float with
 * full mantissa bits, in [-1, 1) for sum/min/max and [0.5, 1.5) for prod
 */
static inline double cs_td_random(enum cs_redop op, uint64_t seed, uint32_t r,
				  uint64_t i)
{
	double u = (double)(cs_td_hash(seed, r, i) >> 11) *
		   (1.0 / 9007199254740992.0);

	return op == CS_PROD ? 0.5 + u : 2 * u - 1;
}

/* Unit roundoff of a floating type (0 for integer types). */
static inline double cs_td_eps(enum cs_dtype t)
{
	switch (t) {
	case CS_F32:
		return ldexp(1, -24);
	case CS_F64:
		return ldexp(1, -53);
	case CS_F16:
		return ldexp(1, -11);
	case CS_BF16:
		return ldexp(1, -8);
	default:
		return 0;
	}
}

/**
 * cs_td_red - @acc reduced with @v by @op, in double (the reference)
 */
static inline double cs_td_red(enum cs_redop op, double acc, double v)
{
	switch (op) {
	case CS_SUM:
		return acc + v;
	case CS_PROD:
		return acc * v;
	case CS_MIN:
		return v < acc ? v : acc;
	default:
		return v > acc ? v : acc;
	}
}

/**
 * cs_td_expect - the reduction of element @i over all ranks
 */
static inline double cs_td_expect(enum cs_dtype t, enum cs_redop op,
				  uint32_t nranks, uint64_t seed, uint64_t i)
{
	double acc = cs_td_value(t, op, nranks, seed, 0, i);

	for (uint32_t r = 1; r < nranks; r++) {
		acc = cs_td_red(op, acc,
				cs_td_value(t, op, nranks, seed, r, i));
		if (t == CS_U8)
			acc = fmod(acc, 256);
	}
	return acc;
}

static inline uint16_t cs_td_to_f16(float f)
{
	/* truncating; values below 2^-14 become zero, no overflow check:
	 * enough for cs_td_value's integers and cs_td_random's floats */
	uint32_t x;
	uint16_t s;
	int e;

	memcpy(&x, &f, 4);
	s = (uint16_t)((x >> 16) & 0x8000);
	if ((x & 0x7fffffff) < 0x38800000) /* below f16's normal range */
		return s;
	e = (int)((x >> 23) & 0xff) - 127 + 15;
	return (uint16_t)(s | (uint16_t)(e << 10) |
			  (uint16_t)((x >> 13) & 0x3ff));
}

static inline float cs_td_from_f16(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f;
	uint32_t m = h & 0x3ff, x;
	float f;

	if (e == 0) {
		f = ldexpf((float)m, -24);
		return s ? -f : f;
	}
	if (e == 31)
		x = s | 0x7f800000 | (m << 13);
	else
		x = s | ((e - 15 + 127) << 23) | (m << 13);
	memcpy(&f, &x, 4);
	return f;
}

static inline void cs_td_store(enum cs_dtype t, void *buf, uint64_t i, double v)
{
	uint8_t *b = buf;
	float f = (float)v;
	uint32_t x;
	uint16_t h;
	int32_t i32 = (int32_t)v;
	int64_t i64 = (int64_t)v;
	double d = v;

	switch (t) {
	case CS_F32:
		memcpy(b + i * 4, &f, 4);
		break;
	case CS_F64:
		memcpy(b + i * 8, &d, 8);
		break;
	case CS_F16:
		h = cs_td_to_f16(f);
		memcpy(b + i * 2, &h, 2);
		break;
	case CS_BF16:
		memcpy(&x, &f, 4);
		h = (uint16_t)(x >> 16);
		memcpy(b + i * 2, &h, 2);
		break;
	case CS_I32:
		memcpy(b + i * 4, &i32, 4);
		break;
	case CS_I64:
		memcpy(b + i * 8, &i64, 8);
		break;
	default:
		b[i] = (uint8_t)(int64_t)v;
		break;
	}
}

static inline double cs_td_load(enum cs_dtype t, const void *buf, uint64_t i)
{
	const uint8_t *b = buf;
	float f;
	double d;
	uint32_t x;
	uint16_t h;
	int32_t i32;
	int64_t i64;

	switch (t) {
	case CS_F32:
		memcpy(&f, b + i * 4, 4);
		return f;
	case CS_F64:
		memcpy(&d, b + i * 8, 8);
		return d;
	case CS_F16:
		memcpy(&h, b + i * 2, 2);
		return cs_td_from_f16(h);
	case CS_BF16:
		memcpy(&h, b + i * 2, 2);
		x = (uint32_t)h << 16;
		memcpy(&f, &x, 4);
		return f;
	case CS_I32:
		memcpy(&i32, b + i * 4, 4);
		return i32;
	case CS_I64:
		memcpy(&i64, b + i * 8, 8);
		return (double)i64;
	default:
		return b[i];
	}
}

#endif
