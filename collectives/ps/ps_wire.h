/* SPDX-License-Identifier: MIT */
/*
 * PS wire messages: push, push acknowledgement, pull, pull reply. A
 * message is one frame's payload for the transport core, which carries it
 * reliably per session; the PS layer still deduplicates pushes itself
 * (a push id per (table, worker, server)) so that exactly-once holds over
 * any carrier, including the lossy test queue.
 *
 * Layout, every multi-byte field in network order:
 *
 *   off size field
 *     0    2 magic 0x5053 ("PS")
 *     2    1 version (1)
 *     3    1 type (enum cs_ps_msg_type)
 *     4    4 table
 *     8    4 worker (rank)
 *    12    4 status (int32: 0 or -errno / CS_ERR_*, replies only)
 *    16    8 id (push id / pull request id)
 *    24    8 version (push: version; pull: clock; reply: clock served)
 *    32    2 part, 34 2 nparts (push: this message of the version's
 *            messages to this server)
 *    36    4 nkeys
 *    40    4 dim
 *    44    1 dtype
 *    45    1 flags (0)
 *    46    2 hdr_len (48; a longer header is skipped, so fields can be
 *            appended without breaking version 1 readers)
 *   then
 *     push:       nkeys keys (u64), then nkeys rows (dim values of dtype)
 *     push ack:   nothing
 *     pull:       nkeys keys
 *     pull reply: nkeys rows (nothing when status != 0)
 *
 * The decoder checks the magic, version, type, header length, dtype, dim,
 * nkeys, part < nparts and that the body is exactly the size the header
 * implies (overflow-safe) before anything reads it.
 */
#ifndef CS_COLLECTIVES_PS_WIRE_H
#define CS_COLLECTIVES_PS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <collstack/types.h>

#define CS_PS_WIRE_MAGIC 0x5053u
#define CS_PS_WIRE_VERSION 1u
#define CS_PS_WIRE_HDR 48u

enum cs_ps_msg_type {
	CS_PS_MSG_PUSH = 1,
	CS_PS_MSG_PUSH_ACK = 2,
	CS_PS_MSG_PULL = 3,
	CS_PS_MSG_PULL_REPLY = 4,
};

/* Decoder rejections, one code each (returned negated). */
enum cs_ps_wire_err {
	CS_PS_WIRE_E_BASE = 2000,
	CS_PS_WIRE_E_SHORT = 2001, /* shorter than a header */
	CS_PS_WIRE_E_MAGIC = 2002,
	CS_PS_WIRE_E_VERSION = 2003,
	CS_PS_WIRE_E_TYPE = 2004,
	CS_PS_WIRE_E_HDR_LEN = 2005,
	CS_PS_WIRE_E_DTYPE = 2006,
	CS_PS_WIRE_E_DIM = 2007,
	CS_PS_WIRE_E_PART = 2008,
	CS_PS_WIRE_E_NKEYS = 2009,
	CS_PS_WIRE_E_LEN = 2010, /* body size differs from the header's */
	CS_PS_WIRE_E_FLAGS = 2011,
	CS_PS_WIRE_E_COUNT = 11,
};

/* A decoded message. @keys and @rows point into the buffer (network
 * order): read them with the accessors below. */
struct cs_ps_msg {
	uint8_t type;
	uint32_t table;
	uint32_t worker;
	int32_t status;
	uint64_t id;
	uint64_t version;
	uint16_t part, nparts;
	uint32_t nkeys;
	uint32_t dim;
	enum cs_dtype dtype;
	const uint8_t *keys;
	const uint8_t *rows;
};

/* Bytes of a message with these fields, or 0 when it would exceed
 * CS_PS_MSG_MAX or a field is out of range. */
size_t cs_ps_wire_len(uint8_t type, uint32_t nkeys, uint32_t dim,
		      enum cs_dtype dtype, int32_t status);

/* Write the header of @m into @buf (which holds cs_ps_wire_len bytes). */
void cs_ps_wire_put_hdr(uint8_t *buf, const struct cs_ps_msg *m);
void cs_ps_wire_put_key(uint8_t *buf, uint32_t i, uint64_t key);
/* Row @i of a push (after the keys) or a reply, from host-order dtype. */
void cs_ps_wire_put_row(uint8_t *buf, const struct cs_ps_msg *m, uint32_t i,
			const void *row);

/* 0 or -CS_PS_WIRE_E_*. */
int cs_ps_wire_decode(const void *buf, size_t len, struct cs_ps_msg *m);
uint64_t cs_ps_wire_key(const struct cs_ps_msg *m, uint32_t i);
/* Row @i into @row, host-order dtype. */
void cs_ps_wire_row(const struct cs_ps_msg *m, uint32_t i, void *row);
const char *cs_ps_wire_strerror(int rc);

#endif
