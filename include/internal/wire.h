/* SPDX-License-Identifier: MIT */
/* Big-endian (network order) fields of the project's message formats. */
#ifndef CS_INTERNAL_WIRE_H
#define CS_INTERNAL_WIRE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline void cs_put_be16(uint8_t *p, uint16_t v)
{
	v = htobe16(v);
	memcpy(p, &v, 2);
}

static inline void cs_put_be32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static inline void cs_put_be64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

static inline uint16_t cs_get_be16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return be16toh(v);
}

static inline uint32_t cs_get_be32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return be32toh(v);
}

static inline uint64_t cs_get_be64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return be64toh(v);
}

#endif
