// SPDX-License-Identifier: MIT
/* PS wire messages: encode and validate (layout in ps_wire.h). */
#include <errno.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"
#include "internal/wire.h"

static bool dtype_ok(unsigned t)
{
	return t == CS_F32 || t == CS_F64 || t == CS_F16 || t == CS_BF16;
}

static bool has_keys(uint8_t type)
{
	return type == CS_PS_MSG_PUSH || type == CS_PS_MSG_PULL;
}

static bool has_rows(uint8_t type, int32_t status)
{
	return type == CS_PS_MSG_PUSH ||
	       (type == CS_PS_MSG_PULL_REPLY && status == 0);
}

size_t cs_ps_wire_len(uint8_t type, uint32_t nkeys, uint32_t dim,
		      enum cs_dtype dtype, int32_t status)
{
	uint64_t n = CS_PS_WIRE_HDR, row;

	if (!dtype_ok((unsigned)dtype) || dim == 0 || dim > CS_PS_DIM_MAX)
		return 0;
	if (type < CS_PS_MSG_PUSH || type > CS_PS_MSG_PULL_REPLY)
		return 0;
	row = (uint64_t)dim * cs_dtype_size(dtype);
	if (has_keys(type))
		n += 8ull * nkeys;
	if (has_rows(type, status))
		n += row * nkeys; /* < 2^32 * 2^19: no overflow */
	if (type == CS_PS_MSG_PUSH_ACK && nkeys)
		return 0;
	return n > CS_PS_MSG_MAX ? 0 : (size_t)n;
}

void cs_ps_wire_put_hdr(uint8_t *b, const struct cs_ps_msg *m)
{
	cs_put_be16(b, CS_PS_WIRE_MAGIC);
	b[2] = CS_PS_WIRE_VERSION;
	b[3] = m->type;
	cs_put_be32(b + 4, m->table);
	cs_put_be32(b + 8, m->worker);
	cs_put_be32(b + 12, (uint32_t)m->status);
	cs_put_be64(b + 16, m->id);
	cs_put_be64(b + 24, m->version);
	cs_put_be16(b + 32, m->part);
	cs_put_be16(b + 34, m->nparts);
	cs_put_be32(b + 36, m->nkeys);
	cs_put_be32(b + 40, m->dim);
	b[44] = (uint8_t)m->dtype;
	b[45] = 0;
	cs_put_be16(b + 46, CS_PS_WIRE_HDR);
}

void cs_ps_wire_put_key(uint8_t *buf, uint32_t i, uint64_t key)
{
	cs_put_be64(buf + CS_PS_WIRE_HDR + 8ull * i, key);
}

static uint8_t *row_at(uint8_t *buf, const struct cs_ps_msg *m, uint32_t i)
{
	size_t rb = (size_t)m->dim * cs_dtype_size(m->dtype);
	size_t off = CS_PS_WIRE_HDR;

	if (m->type == CS_PS_MSG_PUSH)
		off += 8ull * m->nkeys;
	return buf + off + rb * i;
}

void cs_ps_wire_put_row(uint8_t *buf, const struct cs_ps_msg *m, uint32_t i,
			const void *row)
{
	size_t es = cs_dtype_size(m->dtype);
	uint8_t *p = row_at(buf, m, i);
	const uint8_t *s = row;

	for (uint32_t j = 0; j < m->dim; j++, p += es, s += es) {
		if (es == 2) {
			uint16_t v;

			memcpy(&v, s, 2);
			cs_put_be16(p, v);
		} else if (es == 4) {
			uint32_t v;

			memcpy(&v, s, 4);
			cs_put_be32(p, v);
		} else {
			uint64_t v;

			memcpy(&v, s, 8);
			cs_put_be64(p, v);
		}
	}
}

int cs_ps_wire_decode(const void *buf, size_t len, struct cs_ps_msg *m)
{
	const uint8_t *b = buf;
	uint16_t hdr_len;
	size_t want;

	if (len < CS_PS_WIRE_HDR)
		return -CS_PS_WIRE_E_SHORT;
	if (cs_get_be16(b) != CS_PS_WIRE_MAGIC)
		return -CS_PS_WIRE_E_MAGIC;
	if (b[2] != CS_PS_WIRE_VERSION)
		return -CS_PS_WIRE_E_VERSION;
	m->type = b[3];
	if (m->type < CS_PS_MSG_PUSH || m->type > CS_PS_MSG_PULL_REPLY)
		return -CS_PS_WIRE_E_TYPE;
	hdr_len = cs_get_be16(b + 46);
	if (hdr_len < CS_PS_WIRE_HDR || hdr_len > len || (hdr_len & 7))
		return -CS_PS_WIRE_E_HDR_LEN;
	if (b[45] != 0)
		return -CS_PS_WIRE_E_FLAGS;
	m->table = cs_get_be32(b + 4);
	m->worker = cs_get_be32(b + 8);
	m->status = (int32_t)cs_get_be32(b + 12);
	m->id = cs_get_be64(b + 16);
	m->version = cs_get_be64(b + 24);
	m->part = cs_get_be16(b + 32);
	m->nparts = cs_get_be16(b + 34);
	m->nkeys = cs_get_be32(b + 36);
	m->dim = cs_get_be32(b + 40);
	if (!dtype_ok(b[44]))
		return -CS_PS_WIRE_E_DTYPE;
	m->dtype = (enum cs_dtype)b[44];
	if (m->dim == 0 || m->dim > CS_PS_DIM_MAX)
		return -CS_PS_WIRE_E_DIM;
	if (m->type == CS_PS_MSG_PUSH &&
	    (m->nparts == 0 || m->part >= m->nparts))
		return -CS_PS_WIRE_E_PART;
	if (m->type == CS_PS_MSG_PUSH_ACK && m->nkeys)
		return -CS_PS_WIRE_E_NKEYS;
	/* The whole message must fit CS_PS_MSG_MAX: bounds nkeys. */
	want = cs_ps_wire_len(m->type, m->nkeys, m->dim, m->dtype, m->status);
	if (!want)
		return -CS_PS_WIRE_E_NKEYS;
	want += hdr_len - CS_PS_WIRE_HDR;
	if (want != len)
		return -CS_PS_WIRE_E_LEN;
	m->keys = has_keys(m->type) ? b + hdr_len : NULL;
	m->rows = NULL;
	if (has_rows(m->type, m->status))
		m->rows = b + hdr_len +
			  (m->type == CS_PS_MSG_PUSH ? 8ull * m->nkeys : 0);
	return 0;
}

uint64_t cs_ps_wire_key(const struct cs_ps_msg *m, uint32_t i)
{
	return cs_get_be64(m->keys + 8ull * i);
}

void cs_ps_wire_row(const struct cs_ps_msg *m, uint32_t i, void *row)
{
	size_t es = cs_dtype_size(m->dtype);
	const uint8_t *p = m->rows + (size_t)m->dim * es * i;
	uint8_t *d = row;

	for (uint32_t j = 0; j < m->dim; j++, p += es, d += es) {
		if (es == 2) {
			uint16_t v = cs_get_be16(p);

			memcpy(d, &v, 2);
		} else if (es == 4) {
			uint32_t v = cs_get_be32(p);

			memcpy(d, &v, 4);
		} else {
			uint64_t v = cs_get_be64(p);

			memcpy(d, &v, 8);
		}
	}
}

const char *cs_ps_wire_strerror(int rc)
{
	static const char *const msg[] = {
		[1] = "shorter than a header",
		[2] = "bad magic",
		[3] = "unknown version",
		[4] = "unknown message type",
		[5] = "bad header length",
		[6] = "bad dtype",
		[7] = "bad dim",
		[8] = "bad part/nparts",
		[9] = "bad key count",
		[10] = "body length does not match header",
		[11] = "unknown flags",
	};
	int i = -rc - CS_PS_WIRE_E_BASE;

	if (rc == 0)
		return "ok";
	if (i >= 1 && i <= CS_PS_WIRE_E_COUNT)
		return msg[i];
	return "unknown ps wire error";
}
