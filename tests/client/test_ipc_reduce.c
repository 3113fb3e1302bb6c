// SPDX-License-Identifier: MIT
/* The IPC server's local reduction: every dtype and operator, f16/bf16. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "control/ipc/ipc_server.h"

static uint16_t r16(uint16_t a, uint16_t b, enum cs_dtype t, enum cs_redop op)
{
	cs_ipc_reduce(&a, &b, 1, t, op);
	return a;
}

static bool f16_nan(uint16_t h)
{
	return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

static bool bf16_nan(uint16_t h)
{
	return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

Test(ipc_reduce, f16_values)
{
	cr_assert_eq(r16(0x3c00, 0x4000, CS_F16, CS_SUM), 0x4200); /* 1+2 */
	cr_assert_eq(r16(0x3c00, 0xbc00, CS_F16, CS_MIN), 0xbc00);
	cr_assert_eq(r16(0x3c00, 0xbc00, CS_F16, CS_MAX), 0x3c00);
	cr_assert_eq(r16(0x4000, 0x3800, CS_F16, CS_PROD), 0x3c00); /* 2*.5 */
	cr_assert_eq(r16(0x0001, 0x0001, CS_F16, CS_SUM), 0x0002); /* subn. */
	cr_assert_eq(r16(0x7bff, 0x7bff, CS_F16, CS_SUM), 0x7c00); /* inf */
	cr_assert_eq(r16(0x6800, 0x3c00, CS_F16, CS_SUM), 0x6800); /* tie */
	cr_assert_eq(r16(0x6800, 0x4200, CS_F16, CS_SUM), 0x6802); /* 2051 */
	cr_assert_eq(r16(0x0400, 0x8001, CS_F16, CS_SUM), 0x03ff); /* norm-1 */
	cr_assert(f16_nan(r16(0x7c00, 0xfc00, CS_F16, CS_SUM))); /* inf-inf */
}

Test(ipc_reduce, bf16_values)
{
	cr_assert_eq(r16(0x3f80, 0x4000, CS_BF16, CS_SUM), 0x4040);
	cr_assert_eq(r16(0x4380, 0x3f80, CS_BF16, CS_SUM), 0x4380); /* tie */
	cr_assert_eq(r16(0x4380, 0x4040, CS_BF16, CS_SUM), 0x4382); /* 259 */
	cr_assert_eq(r16(0x3f80, 0xbf80, CS_BF16, CS_MIN), 0xbf80);
	cr_assert(bf16_nan(r16(0x7fc0, 0x3f80, CS_BF16, CS_SUM)));
}

/* max(a, a) == a for every 16-bit pattern: the conversions round-trip. */
Test(ipc_reduce, half_round_trip_exhaustive)
{
	for (uint32_t v = 0; v < 65536; v++) {
		uint16_t h = (uint16_t)v;
		uint16_t f = r16(h, h, CS_F16, CS_MAX);
		uint16_t b = r16(h, h, CS_BF16, CS_MAX);

		if (f16_nan(h))
			cr_assert(f16_nan(f), "f16 %04x", v);
		else
			cr_assert_eq(f, h, "f16 %04x -> %04x", v, f);
		if (bf16_nan(h))
			cr_assert(bf16_nan(b), "bf16 %04x", v);
		else
			cr_assert_eq(b, h, "bf16 %04x -> %04x", v, b);
	}
}

Test(ipc_reduce, integers_and_floats)
{
	int32_t i[3] = { INT32_MAX, -5, 7 }, j[3] = { 1, -6, 2 };
	int64_t k[2] = { INT64_MIN, 3 }, l[2] = { -1, 4 };
	uint8_t u[2] = { 250, 3 }, w[2] = { 10, 4 };
	float f[2] = { 1.5f, -2 }, g[2] = { 2.25f, 8 };
	double d[2] = { 1e300, 2 }, e[2] = { 1e300, 0.5 };

	cs_ipc_reduce(i, j, 3, CS_I32, CS_SUM);
	cr_assert_eq(i[0], INT32_MIN, "wraps");
	cr_assert_eq(i[1], -11);
	cr_assert_eq(i[2], 9);
	cs_ipc_reduce(k, l, 2, CS_I64, CS_SUM);
	cr_assert_eq(k[0], INT64_MAX, "wraps");
	cs_ipc_reduce(k, l, 2, CS_I64, CS_MIN);
	cr_assert_eq(k[0], -1);
	cs_ipc_reduce(u, w, 2, CS_U8, CS_SUM);
	cr_assert_eq(u[0], 4);
	cr_assert_eq(u[1], 7);
	cs_ipc_reduce(u, w, 2, CS_U8, CS_PROD);
	cr_assert_eq(u[0], 40);
	cs_ipc_reduce(f, g, 2, CS_F32, CS_MAX);
	cr_assert_eq(f[0], 2.25f);
	cr_assert_eq(f[1], 8);
	cs_ipc_reduce(f, g, 2, CS_F32, CS_PROD);
	cr_assert_eq(f[1], 64);
	cs_ipc_reduce(d, e, 2, CS_F64, CS_SUM);
	cr_assert(isinf(d[0]) == 0 && d[0] == 2e300);
	cr_assert_eq(d[1], 2.5);
	cs_ipc_reduce(d, e, 2, CS_F64, CS_PROD);
	cr_assert(isinf(d[0]));
}

/* reduce_into(d, a, s) gives what reduce(d = a, s) gives, bit for bit,
 * with d apart from a and with d == a, for every type and operator. */
Test(ipc_reduce, into_equals_copy_then_reduce)
{
	static const enum cs_dtype types[] = { CS_F32, CS_F64, CS_I32, CS_I64,
					       CS_U8,  CS_F16, CS_BF16 };
	static const enum cs_redop ops[] = { CS_SUM, CS_PROD, CS_MIN, CS_MAX };
	enum { N = 257 };
	uint8_t a[N * 8], s[N * 8], want[N * 8], got[N * 8 + 1], self[N * 8];
	uint32_t x = 12345;

	for (size_t i = 0; i < sizeof(a); i++) {
		x = x * 1103515245u + 12345u;
		a[i] = (uint8_t)(x >> 16);
		x = x * 1103515245u + 12345u;
		s[i] = (uint8_t)(x >> 16);
	}
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
		for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++) {
			enum cs_dtype t = types[ti];
			enum cs_redop op = ops[oi];

			memcpy(want, a, sizeof(a));
			cs_ipc_reduce(want, s, N, t, op);
			memset(got, 0xa5, sizeof(got)); /* and one byte more */
			cs_ipc_reduce_into(got, a, s, N, t, op);
			memcpy(self, a, sizeof(a));
			cs_ipc_reduce_into(self, self, s, N, t, op);
			/* only the first N elements are the result */
			size_t bytes = N * (t == CS_F64 || t == CS_I64	  ? 8
					    : t == CS_U8		  ? 1
					    : t == CS_F16 || t == CS_BF16 ? 2
									  : 4);

			cr_assert(!memcmp(got, want, bytes),
				  "type %d op %d: into differs", (int)t,
				  (int)op);
			cr_assert(!memcmp(self, want, bytes),
				  "type %d op %d: in place differs", (int)t,
				  (int)op);
			cr_assert(got[bytes] == 0xa5,
				  "type %d op %d: wrote past n (%zu: %#x)",
				  (int)t, (int)op, bytes, got[bytes]);
		}
}
