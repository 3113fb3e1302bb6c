/* SPDX-License-Identifier: MIT */
/*
 * The collstack packet header in host order: what engines produce and
 * consume. dataplane/wire.c encodes it to and decodes it from the wire
 * (network order, Ethernet/IPv4/UDP underneath); the simulator carries it
 * as is. Engines include this, never dataplane/.
 */
#ifndef CS_INTERNAL_PROTO_H
#define CS_INTERNAL_PROTO_H

#include <stdint.h>

#define CS_PROTO_VERSION 1

enum cs_pkt_type {
	CS_PKT_DATA = 1, /* collective / p2p payload */
	CS_PKT_ACK = 2, /* pure acknowledgement */
	CS_PKT_NACK = 3, /* gap report: resend from ack */
	CS_PKT_CREDIT = 4, /* receiver-granted credit */
	CS_PKT_HEARTBEAT = 5, /* membership liveness */
	CS_PKT_RAW = 6, /* protocol-free blast (benchmarks) */
	CS_PKT_CTRL = 7, /* control message in the dataplane */
	CS_PKT_TYPE_MAX = 7,
};

/* Header flags. */
#define CS_PKT_F_ACK 0x0001 /* ack/sack/ts_echo fields are valid */
#define CS_PKT_F_ECE 0x0002 /* ECN echo: the acked packet was CE-marked */
#define CS_PKT_F_AUTH 0x0004 /* a CS_PROTO_TAG_LEN auth tag follows */
#define CS_PKT_F_RETX 0x0008 /* this is a retransmission */
#define CS_PKT_F_CE 0x0010 /* congestion experienced (switch mark) */
#define CS_PKT_F_LAST 0x0020 /* last packet of a chunk */
/* A zero-length DATA frame that only fills a sequence number: its
 * original's bytes may no longer exist, and the receiver provably had them
 * (control/rel.h, "What a retransmission carries"); never handed to an
 * engine. */
#define CS_PKT_F_FILLER 0x0040
/* With CS_PKT_F_AUTH: the tag is AES-256-GMAC under a per-sender key and
 * a CS_PROTO_NONCE_LEN nonce (sender instance, frame counter) precedes it
 * (docs/auth.md); without it the tag is SipHash-2-4-128. Never alone. */
#define CS_PKT_F_GMAC 0x0080
/* On a CS_PKT_NACK with CS_PKT_F_ACK: the receiver had no room to keep
 * packets of seq .. seq + step - 1 (those of them that did not arrive:
 * the range may span some that did): they belong to an operation not
 * posted there yet and its hold is full. They were not lost: the sender
 * parks them (no loss, no rate cut) until the receiver says
 * CS_PKT_F_RESUME (control/rel.h). */
#define CS_PKT_F_BUSY 0x0100
/* With CS_PKT_F_ACK: the receiver has room again: resend what it
 * reported busy. */
#define CS_PKT_F_RESUME 0x0200

#define CS_PROTO_TAG_LEN 16
#define CS_PROTO_NONCE_LEN 16
/* The sender instance: the first bytes of the nonce; a be32 frame counter
 * ends it. */
#define CS_PROTO_SID_LEN 12

struct cs_pkt_hdr {
	uint8_t version; /* CS_PROTO_VERSION */
	uint8_t type; /* enum cs_pkt_type */
	uint16_t flags; /* CS_PKT_F_* */
	uint16_t src; /* sender's rank (node id) in the group */
	uint16_t channel; /* flow / channel within an operation */
	uint32_t group; /* group id */
	uint32_t epoch; /* group epoch; older epochs are dropped */
	uint32_t op; /* operation id within the group */
	uint32_t step; /* collective step (ring step, phase) */
	uint32_t seq; /* reliability sequence number */
	uint32_t ack; /* cumulative: every seq before this arrived */
	uint64_t sack; /* bit i set: seq ack + 1 + i arrived */
	uint64_t offset; /* payload's byte offset in the op's buffer */
	uint32_t len; /* payload bytes after the header */
	uint32_t credit; /* receiver-granted credit (bytes) */
	uint64_t ts; /* sender's timestamp, ns */
	uint64_t ts_echo; /* ts of the packet this acknowledges */
	uint8_t tag[CS_PROTO_TAG_LEN]; /* when CS_PKT_F_AUTH */
	uint8_t nonce[CS_PROTO_NONCE_LEN]; /* when CS_PKT_F_GMAC */
};

/* Bytes of the encoded collstack header, without the optional tag. */
#define CS_PROTO_HDR_WIRE_LEN 76
/* Ethernet (14) + IPv4 (20) + UDP (8) + collstack header. */
#define CS_PROTO_FRAME_OVERHEAD (14 + 20 + 8 + CS_PROTO_HDR_WIRE_LEN)
/* The most bytes authentication adds after the header: nonce and tag. */
#define CS_PROTO_AUTH_MAX (CS_PROTO_NONCE_LEN + CS_PROTO_TAG_LEN)

/**
 * cs_proto_auth_len - bytes between the header and the payload
 * @flags: the header's flags
 *
 * Returns: 0 without CS_PKT_F_AUTH, CS_PROTO_TAG_LEN with it, plus
 * CS_PROTO_NONCE_LEN with CS_PKT_F_GMAC as well (the nonce, then the tag).
 */
static inline uint32_t cs_proto_auth_len(uint16_t flags)
{
	if (!(flags & CS_PKT_F_AUTH))
		return 0;
	return CS_PROTO_TAG_LEN +
	       ((flags & CS_PKT_F_GMAC) ? CS_PROTO_NONCE_LEN : 0);
}

#endif
