/* SPDX-License-Identifier: MIT */
/* Reduction kernels: the scalar path, and picking a path at run time. */
#define CS_LOG_MODULE "reduce"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/reduce_impl.h"
#include "internal/log.h"
#include "internal/util.h"

#if CS_REDUCE_HAVE_AVX2
#include <cpuid.h>

/* AVX2 (CPUID.7.0:EBX[5]) and F16C (CPUID.1:ECX[29]); clang's
 * __builtin_cpu_supports() does not know "f16c", so ask cpuid. */
static bool cpu_has_avx2_f16c(void)
{
	unsigned a, b, c, d;

	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2"))
		return false;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return false;
	return (c & bit_F16C) != 0;
}
#endif

/*
 * The scalar path. Every element goes through memcpy so that unaligned
 * pointers are defined behaviour; the compiler turns it into plain loads.
 * @EXPR computes r from the operands x and y of type T.
 */
#define CS__SCALAR(name, T, EXPR)                                              \
	static void name(void *dst, const void *a, const void *b, size_t n)    \
	{                                                                      \
		unsigned char *d = dst;                                        \
		const unsigned char *pa = a, *pb = b;                          \
                                                                               \
		for (size_t i = 0; i < n; i++) {                               \
			T x, y, r;                                             \
                                                                               \
			memcpy(&x, pa + i * sizeof(T), sizeof(T));             \
			memcpy(&y, pb + i * sizeof(T), sizeof(T));             \
			r = (T)(EXPR);                                         \
			memcpy(d + i * sizeof(T), &r, sizeof(T));              \
		}                                                              \
	}

#define CS__LT(x, y) ((x) < (y) ? (x) : (y))
#define CS__GT(x, y) ((x) > (y) ? (x) : (y))
#define CS__H(v) cs__f16_to_f32(v)
#define CS__B(v) cs__bf16_to_f32(v)

CS__SCALAR(sc_f32_sum, float, x + y)
CS__SCALAR(sc_f32_prod, float, (x * y))
CS__SCALAR(sc_f32_min, float, cs__min_f32(x, y))
CS__SCALAR(sc_f32_max, float, cs__max_f32(x, y))

CS__SCALAR(sc_f64_sum, double, x + y)
CS__SCALAR(sc_f64_prod, double, (x * y))
CS__SCALAR(sc_f64_min, double, cs__min_f64(x, y))
CS__SCALAR(sc_f64_max, double, cs__max_f64(x, y))

CS__SCALAR(sc_f16_sum, uint16_t, cs__f32_to_f16(CS__H(x) + CS__H(y)))
CS__SCALAR(sc_f16_prod, uint16_t, cs__f32_to_f16(CS__H(x) * CS__H(y)))
CS__SCALAR(sc_f16_min, uint16_t,
	   cs__f32_to_f16(cs__min_f32(CS__H(x), CS__H(y))))
CS__SCALAR(sc_f16_max, uint16_t,
	   cs__f32_to_f16(cs__max_f32(CS__H(x), CS__H(y))))

CS__SCALAR(sc_bf16_sum, uint16_t, cs__f32_to_bf16(CS__B(x) + CS__B(y)))
CS__SCALAR(sc_bf16_prod, uint16_t, cs__f32_to_bf16(CS__B(x) * CS__B(y)))
CS__SCALAR(sc_bf16_min, uint16_t,
	   cs__f32_to_bf16(cs__min_f32(CS__B(x), CS__B(y))))
CS__SCALAR(sc_bf16_max, uint16_t,
	   cs__f32_to_bf16(cs__max_f32(CS__B(x), CS__B(y))))

/* Signed sum and prod wrap: done on the unsigned type of the same width. */
CS__SCALAR(sc_i32_sum, uint32_t, x + y)
CS__SCALAR(sc_i32_prod, uint32_t, (x * y))
CS__SCALAR(sc_i32_min, int32_t, CS__LT(x, y))
CS__SCALAR(sc_i32_max, int32_t, CS__GT(x, y))

CS__SCALAR(sc_i64_sum, uint64_t, x + y)
CS__SCALAR(sc_i64_prod, uint64_t, (x * y))
CS__SCALAR(sc_i64_min, int64_t, CS__LT(x, y))
CS__SCALAR(sc_i64_max, int64_t, CS__GT(x, y))

CS__SCALAR(sc_u8_sum, uint8_t, x + y)
CS__SCALAR(sc_u8_prod, uint8_t, ((unsigned)x * y))
CS__SCALAR(sc_u8_min, uint8_t, CS__LT(x, y))
CS__SCALAR(sc_u8_max, uint8_t, CS__GT(x, y))

#define CS__ROW(t)                                                             \
	{                                                                      \
		sc_##t##_sum, sc_##t##_prod, sc_##t##_min, sc_##t##_max        \
	}

const cs__reduce_table_t cs__reduce_scalar = {
	[CS_F32] = CS__ROW(f32), [CS_F64] = CS__ROW(f64),
	[CS_F16] = CS__ROW(f16), [CS_BF16] = CS__ROW(bf16),
	[CS_I32] = CS__ROW(i32), [CS_I64] = CS__ROW(i64),
	[CS_U8] = CS__ROW(u8),
};

static const char *const isa_names[CS_REDUCE_ISA_COUNT] = {
	[CS_REDUCE_SCALAR] = "scalar",
	[CS_REDUCE_AVX2] = "avx2",
};

static bool cpu_has(enum cs_reduce_isa isa)
{
	switch (isa) {
	case CS_REDUCE_SCALAR:
		return true;
	case CS_REDUCE_AVX2:
#if CS_REDUCE_HAVE_AVX2
		return cpu_has_avx2_f16c();
#else
		return false;
#endif
	default:
		return false;
	}
}

/* Every path this build has; cpu_has() says whether this CPU runs it. */
static const cs__reduce_table_t *const tables[CS_REDUCE_ISA_COUNT] = {
	[CS_REDUCE_SCALAR] = &cs__reduce_scalar,
#if CS_REDUCE_HAVE_AVX2
	[CS_REDUCE_AVX2] = &cs__reduce_avx2,
#endif
};

/* The chosen path, set once; racing first callers compute the same one. */
static int active_isa = -1;

static cs_cold enum cs_reduce_isa pick_isa(void)
{
	enum cs_reduce_isa best =
		cpu_has(CS_REDUCE_AVX2) ? CS_REDUCE_AVX2 : CS_REDUCE_SCALAR;
	const char *env = getenv("CS_REDUCE_ISA");

	if (!env || !*env)
		return best;
	for (int i = 0; i < CS_REDUCE_ISA_COUNT; i++) {
		if (strcmp(env, isa_names[i]))
			continue;
		if (tables[i] && cpu_has((enum cs_reduce_isa)i))
			return (enum cs_reduce_isa)i;
		CS_WARN("CS_REDUCE_ISA=%s: not supported here, using %s", env,
			isa_names[best]);
		return best;
	}
	CS_WARN("CS_REDUCE_ISA=%s: unknown (scalar, avx2), using %s", env,
		isa_names[best]);
	return best;
}

static enum cs_reduce_isa get_isa(void)
{
	int isa = __atomic_load_n(&active_isa, __ATOMIC_RELAXED);

	if (unlikely(isa < 0)) {
		isa = (int)pick_isa();
		__atomic_store_n(&active_isa, isa, __ATOMIC_RELAXED);
	}
	return (enum cs_reduce_isa)isa;
}

static bool valid(enum cs_dtype t, enum cs_redop op)
{
	return (unsigned)t < CS_DTYPE_COUNT && (unsigned)op < CS_REDOP_COUNT;
}

cs_reduce_fn cs_reduce_get_isa(enum cs_dtype t, enum cs_redop op,
			       enum cs_reduce_isa isa)
{
	if (!valid(t, op) || (unsigned)isa >= CS_REDUCE_ISA_COUNT ||
	    !tables[isa] || !cpu_has(isa))
		return NULL;
	return (*tables[isa])[t][op];
}

cs_reduce_fn cs_reduce_get(enum cs_dtype t, enum cs_redop op)
{
	if (!valid(t, op))
		return NULL;
	return (*tables[get_isa()])[t][op];
}

const char *cs_reduce_isa(void)
{
	return isa_names[get_isa()];
}

int cs_reduce3(void *dst, const void *a, const void *b, size_t count,
	       enum cs_dtype t, enum cs_redop op)
{
	cs_reduce_fn fn = cs_reduce_get(t, op);

	if (!fn)
		return -EINVAL;
	if (!count)
		return 0;
	if (!dst || !a || !b)
		return -EINVAL;
	fn(dst, a, b, count);
	return 0;
}

int cs_reduce_into(void *dst, const void *src, size_t count, enum cs_dtype t,
		   enum cs_redop op)
{
	return cs_reduce3(dst, dst, src, count, t, op);
}
