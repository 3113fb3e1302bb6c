/* SPDX-License-Identifier: MIT */
/* Element-wise reduction kernels: dst = op(a, b) over typed arrays. */
#ifndef CS_COLLECTIVES_REDUCE_H
#define CS_COLLECTIVES_REDUCE_H

#include <stddef.h>

#include <collstack/types.h>

/*
 * Semantics, the same on every instruction-set path (bit for bit, except
 * that which NaN a NaN result carries is not specified):
 *
 * - f32, f64: IEEE-754 in the current rounding mode (round to nearest even
 *   unless the caller changed MXCSR).
 * - f16, bf16: both operands are widened to f32 (exact), the operation is
 *   done in f32 and the result is rounded to f16/bf16 with round to nearest
 *   even. For sum and prod this is the correctly rounded result (f32 has
 *   more than twice the precision plus two bits, so the double rounding is
 *   harmless). Overflow gives inf; a NaN result stays a (quiet) NaN.
 * - min, max on floating types propagate NaN (like torch.minimum/maximum,
 *   unlike fmin/fmax): if either operand is NaN the result is NaN. When the
 *   operands compare equal (+0 and -0 included) the result is @b.
 * - i32, i64: two's complement wrap-around for sum and prod; signed
 *   min/max. u8: wrap-around modulo 256 for sum and prod, unsigned min/max.
 *
 * Pointers need no alignment at all; @count is in elements. @dst may be
 * the same pointer as @a and/or @b (in-place); other overlaps are not
 * supported.
 */

/**
 * typedef cs_reduce_fn - a resolved kernel: dst[i] = op(a[i], b[i])
 * @dst: destination array
 * @a: first operand array (may equal @dst)
 * @b: second operand array (may equal @dst)
 * @count: number of elements
 *
 * For the in-place form dst = op(dst, src) call fn(dst, dst, src, count).
 */
typedef void (*cs_reduce_fn)(void *dst, const void *a, const void *b,
			     size_t count);

/* Instruction-set paths. */
enum cs_reduce_isa {
	CS_REDUCE_SCALAR = 0,
	CS_REDUCE_AVX2 = 1, /* AVX2 + F16C, x86-64 only */
	CS_REDUCE_ISA_COUNT
};

/**
 * cs_reduce_into - in-place reduction: dst[i] = op(dst[i], src[i])
 * @dst: destination and first operand
 * @src: second operand
 * @count: number of elements (0 is allowed, with any pointers)
 * @t: element type
 * @op: operator
 *
 * Returns: 0, or -EINVAL for a bad @t or @op or a NULL pointer with a
 * non-zero @count.
 */
int cs_reduce_into(void *dst, const void *src, size_t count, enum cs_dtype t,
		   enum cs_redop op);

/**
 * cs_reduce3 - out-of-place reduction: dst[i] = op(a[i], b[i])
 * @dst: destination (may be the same pointer as @a or @b)
 * @a: first operand
 * @b: second operand
 * @count: number of elements
 * @t: element type
 * @op: operator
 *
 * Returns: 0, or -EINVAL for a bad @t or @op or a NULL pointer with a
 * non-zero @count.
 */
int cs_reduce3(void *dst, const void *a, const void *b, size_t count,
	       enum cs_dtype t, enum cs_redop op);

/**
 * cs_reduce_get - the kernel for a type and operator on the best path
 * @t: element type
 * @op: operator
 *
 * The path is picked once per process from cpuid (AVX2 and F16C) and the
 * environment: CS_REDUCE_ISA=scalar forces the scalar path. Resolve once
 * and keep the pointer on hot paths.
 *
 * Returns: the kernel, or NULL for a bad @t or @op.
 */
cs_reduce_fn cs_reduce_get(enum cs_dtype t, enum cs_redop op);

/**
 * cs_reduce_get_isa - the kernel for a type and operator on a given path
 * @t: element type
 * @op: operator
 * @isa: the instruction-set path
 *
 * Meant for tests and benchmarks that compare paths; ignores
 * CS_REDUCE_ISA.
 *
 * Returns: the kernel, or NULL for a bad argument or a path this CPU (or
 * build) does not have.
 */
cs_reduce_fn cs_reduce_get_isa(enum cs_dtype t, enum cs_redop op,
			       enum cs_reduce_isa isa);

/**
 * cs_reduce_isa - name of the path cs_reduce_into() and cs_reduce_get() use
 *
 * Returns: "avx2" or "scalar".
 */
const char *cs_reduce_isa(void);

#endif
