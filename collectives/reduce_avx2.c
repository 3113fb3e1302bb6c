/* SPDX-License-Identifier: MIT */
/* Reduction kernels for AVX2 + F16C (x86-64), picked at run time. */
#include "collectives/reduce_impl.h"

#if CS_REDUCE_HAVE_AVX2

#include <immintrin.h>

/*
 * Only these functions are compiled for AVX2; the rest of the tree stays
 * baseline x86-64 so the scalar path runs on any CPU. Each vector
 * operation below is a 32-byte -> 32-byte function that loop() applies
 * (f16 has loop_f16() with 16-byte steps); always_inline lets GCC fold the
 * constant operation pointer into the loop body, so each kernel is a flat
 * unrolled loop with no calls (checked with objdump).
 */
#define CS_AVX2 __attribute__((target("avx2,f16c,fma")))
#define CS_AVX2_INLINE static inline __attribute__((always_inline)) CS_AVX2

typedef __m256i (*vop_t)(__m256i x, __m256i y);
typedef __m256 (*psop_t)(__m256 x, __m256 y);

/* Bytes handled per iteration of the main loop: 4 vectors of 32 bytes. */
#define CS_REDUCE_UNROLL 4
#define CS_REDUCE_VEC 32

CS_AVX2_INLINE void loop(void *dst, const void *a, const void *b, size_t n,
			 size_t esz, vop_t op, cs_reduce_fn tail)
{
	unsigned char *d = dst;
	const unsigned char *pa = a, *pb = b;
	size_t bytes = n * esz, i = 0;

	for (; i + CS_REDUCE_UNROLL * CS_REDUCE_VEC <= bytes;
	     i += CS_REDUCE_UNROLL * CS_REDUCE_VEC) {
		__m256i x0 = _mm256_loadu_si256((const void *)(pa + i));
		__m256i x1 = _mm256_loadu_si256((const void *)(pa + i + 32));
		__m256i x2 = _mm256_loadu_si256((const void *)(pa + i + 64));
		__m256i x3 = _mm256_loadu_si256((const void *)(pa + i + 96));
		__m256i y0 = _mm256_loadu_si256((const void *)(pb + i));
		__m256i y1 = _mm256_loadu_si256((const void *)(pb + i + 32));
		__m256i y2 = _mm256_loadu_si256((const void *)(pb + i + 64));
		__m256i y3 = _mm256_loadu_si256((const void *)(pb + i + 96));

		_mm256_storeu_si256((void *)(d + i), op(x0, y0));
		_mm256_storeu_si256((void *)(d + i + 32), op(x1, y1));
		_mm256_storeu_si256((void *)(d + i + 64), op(x2, y2));
		_mm256_storeu_si256((void *)(d + i + 96), op(x3, y3));
	}
	for (; i + CS_REDUCE_VEC <= bytes; i += CS_REDUCE_VEC) {
		__m256i x = _mm256_loadu_si256((const void *)(pa + i));
		__m256i y = _mm256_loadu_si256((const void *)(pb + i));

		_mm256_storeu_si256((void *)(d + i), op(x, y));
	}
	/* The last < 32 bytes: the scalar kernel, which gives the same bits. */
	if (i < bytes)
		tail(d + i, pa + i, pb + i, (bytes - i) / esz);
}

/* ---- f32: the operations f16 and bf16 also use after widening ---- */

CS_AVX2_INLINE __m256 ps_sum(__m256 x, __m256 y)
{
	return _mm256_add_ps(x, y);
}

CS_AVX2_INLINE __m256 ps_prod(__m256 x, __m256 y)
{
	return _mm256_mul_ps(x, y);
}

/* vminps/vmaxps give y when either is NaN; put x back where x is NaN. */
CS_AVX2_INLINE __m256 ps_min(__m256 x, __m256 y)
{
	return _mm256_blendv_ps(_mm256_min_ps(x, y), x,
				_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

CS_AVX2_INLINE __m256 ps_max(__m256 x, __m256 y)
{
	return _mm256_blendv_ps(_mm256_max_ps(x, y), x,
				_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

CS_AVX2_INLINE __m256i f32_apply(__m256i x, __m256i y, psop_t op)
{
	return _mm256_castps_si256(
		op(_mm256_castsi256_ps(x), _mm256_castsi256_ps(y)));
}

/* ---- f64 ---- */

CS_AVX2_INLINE __m256i v_f64_sum(__m256i x, __m256i y)
{
	return _mm256_castpd_si256(
		_mm256_add_pd(_mm256_castsi256_pd(x), _mm256_castsi256_pd(y)));
}

CS_AVX2_INLINE __m256i v_f64_prod(__m256i x, __m256i y)
{
	return _mm256_castpd_si256(
		_mm256_mul_pd(_mm256_castsi256_pd(x), _mm256_castsi256_pd(y)));
}

CS_AVX2_INLINE __m256i v_f64_min(__m256i x, __m256i y)
{
	__m256d a = _mm256_castsi256_pd(x), b = _mm256_castsi256_pd(y);

	return _mm256_castpd_si256(_mm256_blendv_pd(
		_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)));
}

CS_AVX2_INLINE __m256i v_f64_max(__m256i x, __m256i y)
{
	__m256d a = _mm256_castsi256_pd(x), b = _mm256_castsi256_pd(y);

	return _mm256_castpd_si256(_mm256_blendv_pd(
		_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)));
}

/* ---- f16: through f32 with F16C, rounding to nearest even ---- */

/* 8 f16 at pa, pb -> op -> 8 f16 at d, with 16-byte loads and stores. */
CS_AVX2_INLINE void f16_step(unsigned char *d, const unsigned char *pa,
			     const unsigned char *pb, psop_t op)
{
	__m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const void *)pa));
	__m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const void *)pb));

	_mm_storeu_si128((void *)d,
			 _mm256_cvtps_ph(op(x, y), _MM_FROUND_TO_NEAREST_INT));
}

/*
 * f16 has its own loop: vcvtph2ps takes a 16-byte memory operand and
 * vcvtps2ph writes 16 bytes, so 16-byte steps need no lane shuffles.
 */
CS_AVX2_INLINE void loop_f16(void *dst, const void *a, const void *b, size_t n,
			     psop_t op, cs_reduce_fn tail)
{
	unsigned char *d = dst;
	const unsigned char *pa = a, *pb = b;
	size_t bytes = n * 2, i = 0;

	for (; i + CS_REDUCE_UNROLL * CS_REDUCE_VEC <= bytes;
	     i += CS_REDUCE_UNROLL * CS_REDUCE_VEC)
		for (size_t j = 0; j < CS_REDUCE_UNROLL * CS_REDUCE_VEC;
		     j += 16)
			f16_step(d + i + j, pa + i + j, pb + i + j, op);
	for (; i + 16 <= bytes; i += 16)
		f16_step(d + i, pa + i, pb + i, op);
	if (i < bytes)
		tail(d + i, pa + i, pb + i, (bytes - i) / 2);
}

/* ---- bf16: widening is a shift; narrowing rounds to nearest even ---- */

/* f32 -> bf16 in the low half of each 32-bit lane; NaN is quieted. */
CS_AVX2_INLINE __m256i bf16_round(__m256 f)
{
	__m256i x = _mm256_castps_si256(f);
	__m256i hi = _mm256_srli_epi32(x, 16);
	__m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
	__m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
	__m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
	__m256i qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
	__m256 isnan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);

	return _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(isnan));
}

CS_AVX2_INLINE __m256i bf16_apply(__m256i x, __m256i y, psop_t op)
{
	__m256i z = _mm256_setzero_si256();
	/* lanes 0-3 and 8-11 / 4-7 and 12-15; packus puts them back */
	__m256 xl = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x));
	__m256 xh = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x));
	__m256 yl = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, y));
	__m256 yh = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, y));

	return _mm256_packus_epi32(bf16_round(op(xl, yl)),
				   bf16_round(op(xh, yh)));
}

/* ---- i32, i64, u8: wrap-around sum and prod ---- */

CS_AVX2_INLINE __m256i v_i32_sum(__m256i x, __m256i y)
{
	return _mm256_add_epi32(x, y);
}

CS_AVX2_INLINE __m256i v_i32_prod(__m256i x, __m256i y)
{
	return _mm256_mullo_epi32(x, y);
}

CS_AVX2_INLINE __m256i v_i32_min(__m256i x, __m256i y)
{
	return _mm256_min_epi32(x, y);
}

CS_AVX2_INLINE __m256i v_i32_max(__m256i x, __m256i y)
{
	return _mm256_max_epi32(x, y);
}

CS_AVX2_INLINE __m256i v_i64_sum(__m256i x, __m256i y)
{
	return _mm256_add_epi64(x, y);
}

/* No 64-bit mullo before AVX-512: lo*lo + ((hi*lo + lo*hi) << 32). */
CS_AVX2_INLINE __m256i v_i64_prod(__m256i x, __m256i y)
{
	__m256i ll = _mm256_mul_epu32(x, y);
	__m256i hl = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), y);
	__m256i lh = _mm256_mul_epu32(x, _mm256_srli_epi64(y, 32));

	return _mm256_add_epi64(
		ll, _mm256_slli_epi64(_mm256_add_epi64(hl, lh), 32));
}

CS_AVX2_INLINE __m256i v_i64_min(__m256i x, __m256i y)
{
	return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(x, y));
}

CS_AVX2_INLINE __m256i v_i64_max(__m256i x, __m256i y)
{
	return _mm256_blendv_epi8(y, x, _mm256_cmpgt_epi64(x, y));
}

CS_AVX2_INLINE __m256i v_u8_sum(__m256i x, __m256i y)
{
	return _mm256_add_epi8(x, y);
}

/* No 8-bit multiply: even bytes and odd bytes as 16-bit products. */
CS_AVX2_INLINE __m256i v_u8_prod(__m256i x, __m256i y)
{
	__m256i even = _mm256_and_si256(_mm256_mullo_epi16(x, y),
					_mm256_set1_epi16(0xff));
	__m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(x, 8),
					 _mm256_srli_epi16(y, 8));

	return _mm256_or_si256(even, _mm256_slli_epi16(odd, 8));
}

CS_AVX2_INLINE __m256i v_u8_min(__m256i x, __m256i y)
{
	return _mm256_min_epu8(x, y);
}

CS_AVX2_INLINE __m256i v_u8_max(__m256i x, __m256i y)
{
	return _mm256_max_epu8(x, y);
}

/* ---- the 28 kernels ---- */

#define CS__WIDEN(kind, op)                                                    \
	CS_AVX2_INLINE __m256i v_##kind##_##op(__m256i x, __m256i y)           \
	{                                                                      \
		return kind##_apply(x, y, ps_##op);                            \
	}
#define CS__WIDEN_ALL(kind)                                                    \
	CS__WIDEN(kind, sum)                                                   \
	CS__WIDEN(kind, prod) CS__WIDEN(kind, min) CS__WIDEN(kind, max)
CS__WIDEN_ALL(f32)
CS__WIDEN_ALL(bf16)

#define CS__KERNEL(t, op, dt, rop, esz)                                        \
	static CS_AVX2 void avx2_##t##_##op(void *dst, const void *a,          \
					    const void *b, size_t n)           \
	{                                                                      \
		loop(dst, a, b, n, esz, v_##t##_##op,                          \
		     cs__reduce_scalar[dt][rop]);                              \
	}
#define CS__KERNELS(t, dt, esz)                                                \
	CS__KERNEL(t, sum, dt, CS_SUM, esz)                                    \
	CS__KERNEL(t, prod, dt, CS_PROD, esz)                                  \
	CS__KERNEL(t, min, dt, CS_MIN, esz)                                    \
	CS__KERNEL(t, max, dt, CS_MAX, esz)
CS__KERNELS(f32, CS_F32, 4)
CS__KERNELS(f64, CS_F64, 8)
#define CS__KERNEL_F16(op, rop)                                                \
	static CS_AVX2 void avx2_f16_##op(void *dst, const void *a,            \
					  const void *b, size_t n)             \
	{                                                                      \
		loop_f16(dst, a, b, n, ps_##op,                                \
			 cs__reduce_scalar[CS_F16][rop]);                      \
	}
CS__KERNEL_F16(sum, CS_SUM)
CS__KERNEL_F16(prod, CS_PROD)
CS__KERNEL_F16(min, CS_MIN)
CS__KERNEL_F16(max, CS_MAX)
CS__KERNELS(bf16, CS_BF16, 2)
CS__KERNELS(i32, CS_I32, 4)
CS__KERNELS(i64, CS_I64, 8)
CS__KERNELS(u8, CS_U8, 1)

#define CS__ROW(t)                                                             \
	{                                                                      \
		avx2_##t##_sum, avx2_##t##_prod, avx2_##t##_min,               \
			avx2_##t##_max                                         \
	}

const cs__reduce_table_t cs__reduce_avx2 = {
	[CS_F32] = CS__ROW(f32), [CS_F64] = CS__ROW(f64),
	[CS_F16] = CS__ROW(f16), [CS_BF16] = CS__ROW(bf16),
	[CS_I32] = CS__ROW(i32), [CS_I64] = CS__ROW(i64),
	[CS_U8] = CS__ROW(u8),
};

#endif /* CS_REDUCE_HAVE_AVX2 */
