/* SPDX-License-Identifier: MIT */
/* Local element-wise reduction for the IPC server's intra-node collectives. */
#include <math.h>
#include <string.h>

#include "ipc_server.h"

/*
 * Plain scalar loops. Integers are computed unsigned, so overflow wraps
 * instead of being undefined. The collectives module owns the tuned
 * kernels and the integrator may route this through them; what matters
 * here is that the server reduces in one fixed order, so every local rank
 * gets the same bits.
 */

static float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	if (isnan(f))
		return (uint16_t)((u >> 16) | 0x40); /* stay a quiet NaN */
	u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
	float f;

	if (exp == 0) {
		/* zero or subnormal: man * 2^-24 */
		f = ldexpf((float)man, -24);
		return sign ? -f : f;
	}
	if (exp == 31)
		u = sign | 0x7f800000 | (man << 13);
	else
		u = sign | ((exp + 112) << 23) | (man << 13);
	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint16_t f32_to_f16(float f)
{
	uint32_t u, sign, man;
	int exp;

	memcpy(&u, &f, sizeof(u));
	sign = (u >> 16) & 0x8000;
	if (isnan(f))
		return (uint16_t)(sign | 0x7e00);
	exp = (int)((u >> 23) & 0xff) - 127 + 15;
	man = u & 0x7fffff;
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00); /* inf */
	if (exp <= 0) {
		/* subnormal half: round man|implicit to 10 - (1 - exp) bits */
		if (exp < -10)
			return (uint16_t)sign;
		man |= 0x800000;
		unsigned shift = (unsigned)(14 - exp);
		uint32_t half = 1u << (shift - 1);
		uint32_t r = man >> shift;

		if ((man & ((half << 1) - 1)) > half ||
		    ((man & ((half << 1) - 1)) == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	uint32_t r = ((uint32_t)exp << 10) | (man >> 13);
	uint32_t rest = man & 0x1fff;

	if (rest > 0x1000 || (rest == 0x1000 && (r & 1)))
		r++; /* may carry into the exponent: still correct */
	return (uint16_t)(sign | r);
}

static float apply_f(float a, float b, enum cs_redop op)
{
	switch (op) {
	case CS_SUM:
		return a + b;
	case CS_PROD:
		return a * b;
	case CS_MIN:
		return b < a ? b : a;
	default:
		return b > a ? b : a;
	}
}

/* d[i] = a[i] op s[i]; @d may be @a (in place), never partly over it. */
#define REDUCE_LOOP(T, U, d, a, s, n, op)                                      \
	do {                                                                   \
		T *d_ = (T *)(d);                                              \
		const T *a_ = (const T *)(a);                                  \
		const T *s_ = (const T *)(s);                                  \
		switch (op) {                                                  \
		case CS_SUM:                                                   \
			for (size_t i = 0; i < (n); i++)                       \
				d_[i] = (T)((U)a_[i] + (U)s_[i]);              \
			break;                                                 \
		case CS_PROD:                                                  \
			for (size_t i = 0; i < (n); i++)                       \
				d_[i] = (T)((U)a_[i] * (U)s_[i]);              \
			break;                                                 \
		case CS_MIN:                                                   \
			for (size_t i = 0; i < (n); i++)                       \
				d_[i] = s_[i] < a_[i] ? s_[i] : a_[i];         \
			break;                                                 \
		default:                                                       \
			for (size_t i = 0; i < (n); i++)                       \
				d_[i] = s_[i] > a_[i] ? s_[i] : a_[i];         \
			break;                                                 \
		}                                                              \
	} while (0)

void cs_ipc_reduce_into(void *dst, const void *a, const void *src, size_t n,
			enum cs_dtype t, enum cs_redop op)
{
	uint16_t *d16 = dst;
	const uint16_t *a16 = a, *s16 = src;

	switch (t) {
	case CS_F32:
		REDUCE_LOOP(float, float, dst, a, src, n, op);
		break;
	case CS_F64:
		REDUCE_LOOP(double, double, dst, a, src, n, op);
		break;
	case CS_I32:
		REDUCE_LOOP(int32_t, uint32_t, dst, a, src, n, op);
		break;
	case CS_I64:
		REDUCE_LOOP(int64_t, uint64_t, dst, a, src, n, op);
		break;
	case CS_U8:
		REDUCE_LOOP(uint8_t, unsigned, dst, a, src, n, op);
		break;
	case CS_F16:
		for (size_t i = 0; i < n; i++)
			d16[i] = f32_to_f16(apply_f(f16_to_f32(a16[i]),
						    f16_to_f32(s16[i]), op));
		break;
	case CS_BF16:
		for (size_t i = 0; i < n; i++)
			d16[i] = f32_to_bf16(apply_f(bf16_to_f32(a16[i]),
						     bf16_to_f32(s16[i]), op));
		break;
	default:
		break;
	}
}

void cs_ipc_reduce(void *dst, const void *src, size_t n, enum cs_dtype t,
		   enum cs_redop op)
{
	cs_ipc_reduce_into(dst, dst, src, n, t, op);
}
