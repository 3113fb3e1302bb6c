/* SPDX-License-Identifier: MIT */
/*
 * The wire codec: Ethernet / IPv4 / UDP / collstack header encode, decode
 * and validation in place on a byte buffer with explicit bounds.
 *
 * Frame layout (no VLAN tag on encode; one 802.1Q tag accepted on decode):
 *
 *   Ethernet 14 | IPv4 20 (+ options on decode) | UDP 8 |
 *   collstack header CS_PROTO_HDR_WIRE_LEN (76) |
 *   nonce 16 if CS_PKT_F_GMAC (only with CS_PKT_F_AUTH) |
 *   tag 16 if CS_PKT_F_AUTH | payload hdr.len bytes
 *
 * The collstack header is struct cs_pkt_hdr's fields in declaration order,
 * network byte order, followed by a 32-bit reserved word that is zero in
 * version 1 (see docs/codec.md for the byte offsets).
 *
 * Decoding never reads outside [buf, buf + len); every malformed frame gets
 * its own negative CS_WIRE_E_* code, which ports count in a
 * struct cs_wire_stats before dropping the frame.
 */
#ifndef CS_DATAPLANE_WIRE_H
#define CS_DATAPLANE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal/proto.h"

#define CS_WIRE_ETH_LEN 14 /* dst MAC, src MAC, ethertype */
#define CS_WIRE_VLAN_LEN 4 /* one 802.1Q tag (decode only) */
#define CS_WIRE_IP_LEN 20 /* IPv4 header without options */
#define CS_WIRE_IP_MAX_LEN 60 /* IHL 15 */
#define CS_WIRE_UDP_LEN 8
/* Ethernet + IPv4 + UDP as the encoder writes them. */
#define CS_WIRE_L4_END (CS_WIRE_ETH_LEN + CS_WIRE_IP_LEN + CS_WIRE_UDP_LEN)
/* Largest IPv4 total length. */
#define CS_WIRE_IP_TOT_MAX 65535u
/* Largest hdr.len that fits an IPv4 datagram with the auth nonce and tag
 * (with the tag only, CS_PROTO_NONCE_LEN more fit; without, another
 * CS_PROTO_TAG_LEN). */
#define CS_WIRE_MAX_PAYLOAD                                                    \
	(CS_WIRE_IP_TOT_MAX - CS_WIRE_IP_LEN - CS_WIRE_UDP_LEN -               \
	 CS_PROTO_HDR_WIRE_LEN - CS_PROTO_AUTH_MAX)

#define CS_WIRE_ETHERTYPE_IPV4 0x0800
#define CS_WIRE_ETHERTYPE_VLAN 0x8100
#define CS_WIRE_IPPROTO_UDP 17

/* Encoder defaults for cs_wire_encode(); cs_wire_tmpl_init() takes both. */
#define CS_WIRE_TTL_DEFAULT 64
#define CS_WIRE_TOS_DEFAULT 0x02 /* DSCP 0, ECN ECT(0): switches may mark */
#define CS_WIRE_ECN_MASK 0x03
#define CS_WIRE_ECN_CE 0x03

/*
 * Error codes: negative, distinct, outside the errno range and the
 * CS_ERR_* range of collstack/types.h. Append only (stats index by code).
 */
enum cs_wire_err {
	CS_WIRE_OK = 0,
	CS_WIRE_E_BASE = 2000,
	CS_WIRE_E_SHORT = -2001, /* frame ends inside a header or the
				  * IPv4 total length */
	CS_WIRE_E_ETHERTYPE = -2002, /* not IPv4 (after one VLAN tag) */
	CS_WIRE_E_IP_VERSION = -2003, /* IP version field is not 4 */
	CS_WIRE_E_IP_IHL = -2004, /* IPv4 header length below 20 */
	CS_WIRE_E_IP_CSUM = -2005, /* bad IPv4 header checksum */
	CS_WIRE_E_IP_LEN = -2006, /* total length < IP header + UDP */
	CS_WIRE_E_IP_FRAG = -2007, /* a fragment (MF or offset set) */
	CS_WIRE_E_PROTO = -2008, /* IP protocol is not UDP */
	CS_WIRE_E_UDP_LEN = -2009, /* UDP length != IPv4 payload length */
	CS_WIRE_E_UDP_CSUM = -2010, /* nonzero UDP checksum is wrong */
	CS_WIRE_E_UDP_PORT = -2011, /* not for the requested UDP port */
	CS_WIRE_E_HDR_LEN = -2012, /* UDP payload shorter than the
				    * collstack header */
	CS_WIRE_E_VERSION = -2013, /* collstack version != ours */
	CS_WIRE_E_TYPE = -2014, /* unknown packet type */
	CS_WIRE_E_FLAGS = -2015, /* unknown flag bits */
	CS_WIRE_E_RESERVED = -2016, /* reserved word is not zero */
	CS_WIRE_E_TAG = -2017, /* F_AUTH but no room for the tag (and the
				* nonce with F_GMAC) */
	CS_WIRE_E_LEN = -2018, /* hdr.len != bytes after the header,
				* or too large to encode */
	CS_WIRE_E_OFFSET = -2019, /* offset + len overflows 64 bits */
	CS_WIRE_E_CAP = -2020, /* encode: buffer too small */
	CS_WIRE_E_INVAL = -2021, /* encode: bad argument (NULL) */
};

/* Number of CS_WIRE_E_* codes; they run from -(BASE + 1) to -(BASE + N). */
#define CS_WIRE_E_COUNT 21

/* Decode flags: checks the NIC already made (DPDK rx offload flags). */
#define CS_WIRE_RX_NO_IP_CSUM 0x1u /* skip the IPv4 header checksum */
#define CS_WIRE_RX_NO_UDP_CSUM 0x2u /* skip the UDP checksum */

/* A dataplane endpoint; ip and port in host order. */
struct cs_wire_addr {
	uint8_t mac[6];
	uint32_t ip;
	uint16_t port;
};

/* A decoded frame. payload points into the decoded buffer (no copy). */
struct cs_wire_pkt {
	struct cs_pkt_hdr hdr; /* tag zeroed unless CS_PKT_F_AUTH, nonce
				* unless CS_PKT_F_GMAC */
	struct cs_wire_addr src;
	struct cs_wire_addr dst;
	const uint8_t *payload; /* hdr.len bytes */
	uint16_t vlan_tci; /* valid when vlan */
	bool vlan; /* the frame had one 802.1Q tag */
	uint8_t tos; /* IPv4 DSCP/ECN byte as received */
	uint16_t l3_off; /* byte offset of the IPv4 header */
	uint16_t l4_off; /* byte offset of the UDP header */
	uint16_t hdr_off; /* byte offset of the collstack header */
	uint32_t frame_len; /* bytes used: l3_off + IPv4 total length */
};

/*
 * Prebuilt Ethernet/IPv4/UDP headers for one (src, dst) pair: the hot path
 * copies them and patches the two lengths and the IPv4 checksum.
 */
struct cs_wire_tmpl {
	uint8_t l2l4[CS_WIRE_L4_END];
	uint32_t ip_sum; /* IPv4 header partial sum, total length 0 */
};

/* Drop counters by code: ports count every decode result here. */
struct cs_wire_stats {
	uint64_t ok; /* frames accepted */
	uint64_t err[CS_WIRE_E_COUNT + 1]; /* [i]: code -(BASE + i);
					    * [0]: unknown code */
};

/**
 * cs_wire_payload_offset - byte offset of the payload in an encoded frame
 * @h: the header to be encoded (only flags matter)
 *
 * Returns: CS_PROTO_FRAME_OVERHEAD, plus cs_proto_auth_len(): the tag with
 * CS_PKT_F_AUTH, and the nonce before it with CS_PKT_F_GMAC.
 */
static inline size_t cs_wire_payload_offset(const struct cs_pkt_hdr *h)
{
	return CS_PROTO_FRAME_OVERHEAD + cs_proto_auth_len(h->flags);
}

/**
 * cs_wire_frame_len - total bytes of the frame cs_wire_encode() writes
 * @h: the header to be encoded
 *
 * Returns: cs_wire_payload_offset(@h) + @h->len.
 */
static inline size_t cs_wire_frame_len(const struct cs_pkt_hdr *h)
{
	return cs_wire_payload_offset(h) + h->len;
}

/**
 * cs_wire_is_ours - cheap filter: an IPv4/UDP frame to @port that starts
 *	with our collstack version byte
 * @buf: frame
 * @len: bytes in @buf
 * @port: UDP destination port in host order; 0 accepts any
 *
 * Looks at a handful of bytes, verifies no checksum and no length; a frame
 * it accepts must still go through cs_wire_decode(). Never reads past @len.
 *
 * Returns: true when the frame looks like ours.
 */
static inline bool cs_wire_is_ours(const void *buf, size_t len, uint16_t port)
{
	const uint8_t *p = buf;
	size_t l3 = CS_WIRE_ETH_LEN;
	unsigned int et, ihl;
	size_t l4;

	if (len < CS_WIRE_ETH_LEN + CS_WIRE_VLAN_LEN + CS_WIRE_IP_LEN)
		return false;
	et = (unsigned int)p[12] << 8 | p[13];
	if (et == CS_WIRE_ETHERTYPE_VLAN) {
		l3 += CS_WIRE_VLAN_LEN;
		et = (unsigned int)p[16] << 8 | p[17];
	}
	if (et != CS_WIRE_ETHERTYPE_IPV4 || (p[l3] >> 4) != 4 ||
	    p[l3 + 9] != CS_WIRE_IPPROTO_UDP)
		return false;
	ihl = (p[l3] & 0x0fu) * 4u;
	l4 = l3 + ihl;
	if (ihl < CS_WIRE_IP_LEN || len < l4 + CS_WIRE_UDP_LEN + 1)
		return false;
	if (port && ((unsigned int)p[l4 + 2] << 8 | p[l4 + 3]) != port)
		return false;
	return p[l4 + CS_WIRE_UDP_LEN] == CS_PROTO_VERSION;
}

/**
 * cs_wire_tmpl_init - prebuild the Ethernet/IPv4/UDP headers for a flow
 * @t: template to fill
 * @src: our MAC, IPv4 address and UDP port
 * @dst: the peer's
 * @ttl: IPv4 time to live
 * @tos: IPv4 DSCP/ECN byte
 *
 * Returns: 0, or CS_WIRE_E_INVAL for a NULL argument.
 */
int cs_wire_tmpl_init(struct cs_wire_tmpl *t, const struct cs_wire_addr *src,
		      const struct cs_wire_addr *dst, uint8_t ttl, uint8_t tos);

/**
 * cs_wire_encode_tmpl - hot path: write all headers in front of a payload
 *	that is already in place
 * @buf: frame buffer; the payload sits at cs_wire_payload_offset(@h)
 * @cap: bytes available in @buf
 * @t: the flow's template (cs_wire_tmpl_init())
 * @h: header to encode; @h->tag is written when CS_PKT_F_AUTH, @h->nonce
 *     before it when CS_PKT_F_GMAC as well
 *
 * Validates @h like the decoder would (version, type, flags, length,
 * offset) so that whatever it encodes decodes. The UDP checksum is left 0
 * ("none", legal in IPv4); see cs_wire_udp_csum_fill().
 *
 * Returns: the frame length, or a negative CS_WIRE_E_* code.
 */
int cs_wire_encode_tmpl(void *buf, size_t cap, const struct cs_wire_tmpl *t,
			const struct cs_pkt_hdr *h);

/**
 * cs_wire_encode - encode a whole frame
 * @buf: frame buffer
 * @cap: bytes available in @buf
 * @src: sender endpoint
 * @dst: receiver endpoint
 * @h: header; @h->len payload bytes follow it
 * @payload: @h->len bytes to copy after the headers (may overlap @buf), or
 *	NULL when the caller already placed them at cs_wire_payload_offset(@h)
 *
 * Uses CS_WIRE_TTL_DEFAULT and CS_WIRE_TOS_DEFAULT; UDP checksum 0.
 *
 * Returns: the frame length, or a negative CS_WIRE_E_* code.
 */
int cs_wire_encode(void *buf, size_t cap, const struct cs_wire_addr *src,
		   const struct cs_wire_addr *dst, const struct cs_pkt_hdr *h,
		   const void *payload);

/**
 * cs_wire_udp_csum_fill - compute and store the UDP checksum of a frame
 *	cs_wire_encode() wrote (for ports without checksum offload)
 * @buf: the frame
 * @len: its length as returned by the encoder
 *
 * Returns: 0, or a negative CS_WIRE_E_* code if @buf is not a valid frame.
 */
int cs_wire_udp_csum_fill(void *buf, size_t len);

/**
 * cs_wire_decode_ex - validate and decode a frame
 * @buf: frame
 * @len: bytes in @buf (trailing Ethernet padding is allowed)
 * @port: accept only this UDP destination port (host order); 0: any
 * @flags: CS_WIRE_RX_* checks to skip
 * @out: decoded header, addresses and payload pointer; only meaningful on
 *	success
 *
 * A CE mark in the IPv4 ECN bits sets CS_PKT_F_CE in @out->hdr.flags. The
 * auth tag is copied out but not verified here (the transport holds the
 * keys). Never reads outside [@buf, @buf + @len).
 *
 * Returns: 0, or a negative CS_WIRE_E_* code naming the first problem.
 */
int cs_wire_decode_ex(const void *buf, size_t len, uint16_t port,
		      unsigned int flags, struct cs_wire_pkt *out);

/**
 * cs_wire_decode - validate and decode a frame, checking every checksum
 * @buf: frame
 * @len: bytes in @buf
 * @out: result
 *
 * Returns: 0, or a negative CS_WIRE_E_* code.
 */
static inline int cs_wire_decode(const void *buf, size_t len,
				 struct cs_wire_pkt *out)
{
	return cs_wire_decode_ex(buf, len, 0, 0, out);
}

/**
 * cs_wire_strerror - text for a CS_WIRE_E_* code
 * @err: a code (0 gives "ok")
 *
 * Returns: a static string; "unknown wire error" for anything else.
 */
const char *cs_wire_strerror(int err);

/**
 * cs_wire_count - count one decode (or encode) result
 * @s: counters
 * @rc: the result: >= 0 counts as ok, a CS_WIRE_E_* code in its slot,
 *	any other negative value in err[0]
 */
static inline void cs_wire_count(struct cs_wire_stats *s, int rc)
{
	int64_t i;

	if (rc >= 0) {
		s->ok++;
		return;
	}
	i = -(int64_t)rc - CS_WIRE_E_BASE;
	if (i < 1 || i > CS_WIRE_E_COUNT)
		i = 0;
	s->err[i]++;
}

/**
 * cs_wire_stats_dropped - total of every error counter
 * @s: counters
 *
 * Returns: frames counted as rejected.
 */
uint64_t cs_wire_stats_dropped(const struct cs_wire_stats *s);

#endif
