/* SPDX-License-Identifier: MIT */
/* PS wire messages: round trips in every dtype, network byte order, and
 * one test per rejection. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"

static uint8_t buf[1 << 16];

static size_t push_msg(enum cs_dtype t, uint32_t nkeys, uint32_t dim)
{
	struct cs_ps_msg m = {
		.type = CS_PS_MSG_PUSH,
		.table = 7,
		.worker = 3,
		.id = 99,
		.version = 0x0102030405060708ull,
		.part = 1,
		.nparts = 3,
		.nkeys = nkeys,
		.dim = dim,
		.dtype = t,
	};
	size_t n = cs_ps_wire_len(m.type, nkeys, dim, t, 0);
	uint8_t row[8 * 16];

	cr_assert(n && n <= sizeof(buf));
	cs_ps_wire_put_hdr(buf, &m);
	for (uint32_t i = 0; i < nkeys; i++) {
		cs_ps_wire_put_key(buf, i, 1000 + i);
		for (size_t b = 0; b < dim * cs_dtype_size(t); b++)
			row[b] = (uint8_t)(i * 31 + b);
		cs_ps_wire_put_row(buf, &m, i, row);
	}
	return n;
}

Test(ps_wire, push_round_trip_every_dtype)
{
	enum cs_dtype ts[] = { CS_F32, CS_F64, CS_F16, CS_BF16 };

	for (unsigned k = 0; k < 4; k++) {
		size_t n = push_msg(ts[k], 5, 3), es = cs_dtype_size(ts[k]);
		struct cs_ps_msg m;
		uint8_t row[8 * 16];

		cr_assert_eq(cs_ps_wire_decode(buf, n, &m), 0);
		cr_assert_eq(m.type, CS_PS_MSG_PUSH);
		cr_assert_eq(m.table, 7);
		cr_assert_eq(m.worker, 3);
		cr_assert_eq(m.id, 99);
		cr_assert_eq(m.version, 0x0102030405060708ull);
		cr_assert_eq(m.part, 1);
		cr_assert_eq(m.nparts, 3);
		cr_assert_eq(m.nkeys, 5);
		cr_assert_eq(m.dtype, ts[k]);
		for (uint32_t i = 0; i < 5; i++) {
			cr_assert_eq(cs_ps_wire_key(&m, i), 1000 + i);
			cs_ps_wire_row(&m, i, row);
			for (size_t b = 0; b < 3 * es; b++)
				cr_assert_eq(row[b], (uint8_t)(i * 31 + b));
		}
	}
}

Test(ps_wire, network_byte_order)
{
	push_msg(CS_F32, 1, 1);
	/* magic "PS", version 1, type push, table 7 big-endian */
	cr_assert_eq(buf[0], 0x50);
	cr_assert_eq(buf[1], 0x53);
	cr_assert_eq(buf[2], 1);
	cr_assert_eq(buf[3], CS_PS_MSG_PUSH);
	cr_assert_eq(buf[7], 7);
	cr_assert_eq(buf[24], 0x01);
	cr_assert_eq(buf[31], 0x08);
	/* key 1000 = 0x3e8 */
	cr_assert_eq(buf[CS_PS_WIRE_HDR + 6], 0x03);
	cr_assert_eq(buf[CS_PS_WIRE_HDR + 7], 0xe8);
}

Test(ps_wire, replies_and_pull)
{
	struct cs_ps_msg m = { .type = CS_PS_MSG_PULL_REPLY,
			       .worker = 2,
			       .nkeys = 4,
			       .dim = 2,
			       .dtype = CS_F16,
			       .nparts = 1,
			       .status = -ERANGE };
	struct cs_ps_msg d;
	size_t n = cs_ps_wire_len(m.type, 4, 2, CS_F16, m.status);

	/* an error reply carries no rows */
	cr_assert_eq(n, CS_PS_WIRE_HDR);
	cs_ps_wire_put_hdr(buf, &m);
	cr_assert_eq(cs_ps_wire_decode(buf, n, &d), 0);
	cr_assert_eq(d.status, -ERANGE);
	cr_assert_null(d.rows);
	m.status = 0;
	n = cs_ps_wire_len(m.type, 4, 2, CS_F16, 0);
	cr_assert_eq(n, CS_PS_WIRE_HDR + 4 * 2 * 2);
	cs_ps_wire_put_hdr(buf, &m);
	cr_assert_eq(cs_ps_wire_decode(buf, n, &d), 0);
	cr_assert_null(d.keys);
	cr_assert_eq(d.rows, buf + CS_PS_WIRE_HDR);
	m.type = CS_PS_MSG_PULL;
	n = cs_ps_wire_len(m.type, 4, 2, CS_F16, 0);
	cr_assert_eq(n, CS_PS_WIRE_HDR + 4 * 8);
	/* an ack has no keys */
	cr_assert_eq(cs_ps_wire_len(CS_PS_MSG_PUSH_ACK, 1, 2, CS_F16, 0), 0);
}

static void expect(size_t n, int code)
{
	struct cs_ps_msg m;

	cr_assert_eq(cs_ps_wire_decode(buf, n, &m), -code, "want %d (%s)", code,
		     cs_ps_wire_strerror(-code));
	cr_assert_str_neq(cs_ps_wire_strerror(-code), "unknown ps wire error");
}

Test(ps_wire, every_rejection)
{
	size_t n = push_msg(CS_F32, 2, 2);

	expect(CS_PS_WIRE_HDR - 1, CS_PS_WIRE_E_SHORT);
	expect(n - 1, CS_PS_WIRE_E_LEN);
	buf[0] ^= 1;
	expect(n, CS_PS_WIRE_E_MAGIC);
	buf[0] ^= 1;
	buf[2] = 2;
	expect(n, CS_PS_WIRE_E_VERSION);
	buf[2] = 1;
	buf[3] = 9;
	expect(n, CS_PS_WIRE_E_TYPE);
	buf[3] = CS_PS_MSG_PUSH;
	buf[47] = 40;
	expect(n, CS_PS_WIRE_E_HDR_LEN);
	buf[47] = 48;
	buf[45] = 1;
	expect(n, CS_PS_WIRE_E_FLAGS);
	buf[45] = 0;
	buf[44] = CS_I32;
	expect(n, CS_PS_WIRE_E_DTYPE);
	buf[44] = CS_F32;
	buf[43] = 0; /* dim 0 */
	expect(n, CS_PS_WIRE_E_DIM);
	buf[40] = 0xff; /* dim huge */
	expect(n, CS_PS_WIRE_E_DIM);
	buf[40] = 0;
	buf[43] = 2;
	buf[33] = 3; /* part 3 of 3 */
	expect(n, CS_PS_WIRE_E_PART);
	buf[33] = 1;
	memset(buf + 36, 0xff, 4); /* nkeys 2^32 - 1: would overflow */
	expect(n, CS_PS_WIRE_E_NKEYS);
	buf[36] = buf[37] = buf[38] = 0;
	buf[39] = 3; /* claims 3 keys, carries 2 */
	expect(n, CS_PS_WIRE_E_LEN);
	buf[39] = 2;
	expect(n + 1, CS_PS_WIRE_E_LEN);
	cr_assert_str_eq(cs_ps_wire_strerror(-12345), "unknown ps wire error");
}

/* A longer header (a later version's fields) is skipped. */
Test(ps_wire, longer_header_is_skipped)
{
	static uint8_t big[1024];
	size_t n = push_msg(CS_F32, 1, 2);
	struct cs_ps_msg m;

	memcpy(big, buf, CS_PS_WIRE_HDR);
	memset(big + CS_PS_WIRE_HDR, 0xee, 8);
	memcpy(big + CS_PS_WIRE_HDR + 8, buf + CS_PS_WIRE_HDR,
	       n - CS_PS_WIRE_HDR);
	big[47] = 56;
	cr_assert_eq(cs_ps_wire_decode(big, n + 8, &m), 0);
	cr_assert_eq(cs_ps_wire_key(&m, 0), 1000);
	big[47] = 52; /* not a multiple of 8 */
	cr_assert_eq(cs_ps_wire_decode(big, n + 8, &m), -CS_PS_WIRE_E_HDR_LEN);
}
