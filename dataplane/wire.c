// SPDX-License-Identifier: MIT
/* Wire codec: Ethernet / IPv4 / UDP / collstack header encode and decode. */
#include <assert.h>
#include <string.h>

#include "internal/util.h"
#include "wire.h"

/*
 * Collstack header byte offsets, relative to its first byte: the fields of
 * struct cs_pkt_hdr in declaration order, network byte order.
 */
enum {
	CS_WIRE_O_VERSION = 0, /* u8 */
	CS_WIRE_O_TYPE = 1, /* u8 */
	CS_WIRE_O_FLAGS = 2, /* u16 */
	CS_WIRE_O_SRC = 4, /* u16 */
	CS_WIRE_O_CHANNEL = 6, /* u16 */
	CS_WIRE_O_GROUP = 8, /* u32 */
	CS_WIRE_O_EPOCH = 12, /* u32 */
	CS_WIRE_O_OP = 16, /* u32 */
	CS_WIRE_O_STEP = 20, /* u32 */
	CS_WIRE_O_SEQ = 24, /* u32 */
	CS_WIRE_O_ACK = 28, /* u32 */
	CS_WIRE_O_SACK = 32, /* u64 */
	CS_WIRE_O_OFFSET = 40, /* u64 */
	CS_WIRE_O_LEN = 48, /* u32 */
	CS_WIRE_O_CREDIT = 52, /* u32 */
	CS_WIRE_O_TS = 56, /* u64 */
	CS_WIRE_O_TS_ECHO = 64, /* u64 */
	CS_WIRE_O_RSVD = 72, /* u32, zero in version 1 */
	CS_WIRE_O_END = CS_WIRE_O_RSVD + 4,
};

#define CS_FSZ(f) sizeof(((struct cs_pkt_hdr *)0)->f)

/* The encoded fields are exactly struct cs_pkt_hdr's (tag apart) + rsvd. */
static_assert(CS_FSZ(version) + CS_FSZ(type) + CS_FSZ(flags) + CS_FSZ(src) +
			      CS_FSZ(channel) + CS_FSZ(group) + CS_FSZ(epoch) +
			      CS_FSZ(op) + CS_FSZ(step) + CS_FSZ(seq) +
			      CS_FSZ(ack) + CS_FSZ(sack) + CS_FSZ(offset) +
			      CS_FSZ(len) + CS_FSZ(credit) + CS_FSZ(ts) +
			      CS_FSZ(ts_echo) + 4 ==
		      CS_PROTO_HDR_WIRE_LEN,
	      "wire header fields do not add up to CS_PROTO_HDR_WIRE_LEN");
static_assert(CS_WIRE_O_END == CS_PROTO_HDR_WIRE_LEN,
	      "wire header offsets do not end at CS_PROTO_HDR_WIRE_LEN");
static_assert(CS_WIRE_O_TS_ECHO + CS_FSZ(ts_echo) == CS_WIRE_O_RSVD,
	      "reserved word must follow ts_echo");
static_assert(CS_PROTO_FRAME_OVERHEAD == CS_WIRE_L4_END + CS_PROTO_HDR_WIRE_LEN,
	      "CS_PROTO_FRAME_OVERHEAD disagrees with the codec");
static_assert(CS_FSZ(tag) == CS_PROTO_TAG_LEN, "tag size");
static_assert(CS_FSZ(nonce) == CS_PROTO_NONCE_LEN, "nonce size");

#define CS_WIRE_KNOWN_FLAGS                                                    \
	(CS_PKT_F_ACK | CS_PKT_F_ECE | CS_PKT_F_AUTH | CS_PKT_F_RETX |         \
	 CS_PKT_F_CE | CS_PKT_F_LAST | CS_PKT_F_FILLER | CS_PKT_F_GMAC |       \
	 CS_PKT_F_BUSY | CS_PKT_F_RESUME)

/* IPv4 header offsets. */
enum {
	CS_IP_O_VIHL = 0,
	CS_IP_O_TOS = 1,
	CS_IP_O_TOT = 2,
	CS_IP_O_ID = 4,
	CS_IP_O_FRAG = 6,
	CS_IP_O_TTL = 8,
	CS_IP_O_PROTO = 9,
	CS_IP_O_CSUM = 10,
	CS_IP_O_SRC = 12,
	CS_IP_O_DST = 16,
};

#define CS_IP_DF 0x4000
#define CS_IP_MF 0x2000
#define CS_IP_FRAG_OFF 0x1fff

/* UDP header offsets. */
enum {
	CS_UDP_O_SPORT = 0,
	CS_UDP_O_DPORT = 2,
	CS_UDP_O_LEN = 4,
	CS_UDP_O_CSUM = 6,
};

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((unsigned int)p[0] << 8 | p[1]);
}

static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) << 32 | get32(p + 4);
}

/*
 * Internet checksum (RFC 1071). The one's complement sum does not depend
 * on byte order, so words are added in native order and the folded result
 * is stored back with memcpy, never swapped. @n must start at an even
 * offset of the checksummed data; an odd last byte is padded with zero.
 */
static uint64_t csum_add(uint64_t sum, const void *data, size_t n)
{
	const uint8_t *p = data;
	uint64_t v;
	uint32_t w;
	uint16_t h;
	uint8_t last[2];

	while (n >= 8) {
		memcpy(&v, p, 8);
		sum += v;
		sum += sum < v; /* end-around carry */
		p += 8;
		n -= 8;
	}
	if (n >= 4) {
		memcpy(&w, p, 4);
		sum += w;
		sum += sum < w;
		p += 4;
		n -= 4;
	}
	if (n >= 2) {
		memcpy(&h, p, 2);
		sum += h;
		sum += sum < h;
		p += 2;
		n -= 2;
	}
	if (n) {
		last[0] = p[0];
		last[1] = 0;
		memcpy(&h, last, 2);
		sum += h;
		sum += sum < h;
	}
	return sum;
}

/* Fold a 64-bit partial sum to 16 bits (native order), not inverted. */
static uint16_t csum_fold(uint64_t sum)
{
	sum = (sum & 0xffffffffu) + (sum >> 32);
	sum = (sum & 0xffffffffu) + (sum >> 32);
	sum = (sum & 0xffffu) + (sum >> 16);
	sum = (sum & 0xffffu) + (sum >> 16);
	return (uint16_t)sum;
}

/* UDP checksum over pseudo-header + UDP header + data, checksum field as
 * found; returns the folded sum (0xffff when a stored checksum is right). */
static uint16_t udp_sum(const uint8_t *ip, const uint8_t *udp, size_t ulen)
{
	uint8_t ph[12];
	uint64_t sum;

	memcpy(ph, ip + CS_IP_O_SRC, 8);
	ph[8] = 0;
	ph[9] = CS_WIRE_IPPROTO_UDP;
	put16(ph + 10, (uint16_t)ulen);
	sum = csum_add(0, ph, sizeof(ph));
	return csum_fold(csum_add(sum, udp, ulen));
}

static int hdr_check(const struct cs_pkt_hdr *h)
{
	if (h->version != CS_PROTO_VERSION)
		return CS_WIRE_E_VERSION;
	if (h->type < CS_PKT_DATA || h->type > CS_PKT_TYPE_MAX)
		return CS_WIRE_E_TYPE;
	if (h->flags & ~CS_WIRE_KNOWN_FLAGS)
		return CS_WIRE_E_FLAGS;
	/* a nonce only comes with a tag */
	if ((h->flags & (CS_PKT_F_GMAC | CS_PKT_F_AUTH)) == CS_PKT_F_GMAC)
		return CS_WIRE_E_FLAGS;
	/* "busy" is a NACK's bitmap; both it and "resume" ride on an ACK */
	if ((h->flags & CS_PKT_F_BUSY) && h->type != CS_PKT_NACK)
		return CS_WIRE_E_FLAGS;
	if ((h->flags & (CS_PKT_F_BUSY | CS_PKT_F_RESUME)) &&
	    !(h->flags & CS_PKT_F_ACK))
		return CS_WIRE_E_FLAGS;
	if (h->offset > UINT64_MAX - h->len)
		return CS_WIRE_E_OFFSET;
	return 0;
}

int cs_wire_tmpl_init(struct cs_wire_tmpl *t, const struct cs_wire_addr *src,
		      const struct cs_wire_addr *dst, uint8_t ttl, uint8_t tos)
{
	uint8_t *eth, *ip, *udp;

	if (!t || !src || !dst)
		return CS_WIRE_E_INVAL;
	memset(t, 0, sizeof(*t));
	eth = t->l2l4;
	ip = eth + CS_WIRE_ETH_LEN;
	udp = ip + CS_WIRE_IP_LEN;

	memcpy(eth, dst->mac, 6);
	memcpy(eth + 6, src->mac, 6);
	put16(eth + 12, CS_WIRE_ETHERTYPE_IPV4);

	ip[CS_IP_O_VIHL] = 0x45;
	ip[CS_IP_O_TOS] = tos;
	/* Total length and checksum are patched per packet. ID 0 with DF:
	 * atomic datagrams need no ID (RFC 6864). */
	put16(ip + CS_IP_O_FRAG, CS_IP_DF);
	ip[CS_IP_O_TTL] = ttl;
	ip[CS_IP_O_PROTO] = CS_WIRE_IPPROTO_UDP;
	put32(ip + CS_IP_O_SRC, src->ip);
	put32(ip + CS_IP_O_DST, dst->ip);
	t->ip_sum = csum_fold(csum_add(0, ip, CS_WIRE_IP_LEN));

	put16(udp + CS_UDP_O_SPORT, src->port);
	put16(udp + CS_UDP_O_DPORT, dst->port);
	return 0;
}

static void hdr_put(uint8_t *p, const struct cs_pkt_hdr *h)
{
	p[CS_WIRE_O_VERSION] = h->version;
	p[CS_WIRE_O_TYPE] = h->type;
	put16(p + CS_WIRE_O_FLAGS, h->flags);
	put16(p + CS_WIRE_O_SRC, h->src);
	put16(p + CS_WIRE_O_CHANNEL, h->channel);
	put32(p + CS_WIRE_O_GROUP, h->group);
	put32(p + CS_WIRE_O_EPOCH, h->epoch);
	put32(p + CS_WIRE_O_OP, h->op);
	put32(p + CS_WIRE_O_STEP, h->step);
	put32(p + CS_WIRE_O_SEQ, h->seq);
	put32(p + CS_WIRE_O_ACK, h->ack);
	put64(p + CS_WIRE_O_SACK, h->sack);
	put64(p + CS_WIRE_O_OFFSET, h->offset);
	put32(p + CS_WIRE_O_LEN, h->len);
	put32(p + CS_WIRE_O_CREDIT, h->credit);
	put64(p + CS_WIRE_O_TS, h->ts);
	put64(p + CS_WIRE_O_TS_ECHO, h->ts_echo);
	put32(p + CS_WIRE_O_RSVD, 0);
	p += CS_WIRE_O_END;
	if ((h->flags & CS_PKT_F_AUTH) && (h->flags & CS_PKT_F_GMAC)) {
		memcpy(p, h->nonce, CS_PROTO_NONCE_LEN);
		p += CS_PROTO_NONCE_LEN;
	}
	if (h->flags & CS_PKT_F_AUTH)
		memcpy(p, h->tag, CS_PROTO_TAG_LEN);
}

static void hdr_get(const uint8_t *p, struct cs_pkt_hdr *h)
{
	h->version = p[CS_WIRE_O_VERSION];
	h->type = p[CS_WIRE_O_TYPE];
	h->flags = get16(p + CS_WIRE_O_FLAGS);
	h->src = get16(p + CS_WIRE_O_SRC);
	h->channel = get16(p + CS_WIRE_O_CHANNEL);
	h->group = get32(p + CS_WIRE_O_GROUP);
	h->epoch = get32(p + CS_WIRE_O_EPOCH);
	h->op = get32(p + CS_WIRE_O_OP);
	h->step = get32(p + CS_WIRE_O_STEP);
	h->seq = get32(p + CS_WIRE_O_SEQ);
	h->ack = get32(p + CS_WIRE_O_ACK);
	h->sack = get64(p + CS_WIRE_O_SACK);
	h->offset = get64(p + CS_WIRE_O_OFFSET);
	h->len = get32(p + CS_WIRE_O_LEN);
	h->credit = get32(p + CS_WIRE_O_CREDIT);
	h->ts = get64(p + CS_WIRE_O_TS);
	h->ts_echo = get64(p + CS_WIRE_O_TS_ECHO);
}

int cs_wire_encode_tmpl(void *buf, size_t cap, const struct cs_wire_tmpl *t,
			const struct cs_pkt_hdr *h)
{
	uint8_t *p = buf, *ip, *udp;
	size_t frame;
	uint32_t ulen;
	uint16_t tot_be, csum;
	int rc;

	if (unlikely(!buf || !t || !h))
		return CS_WIRE_E_INVAL;
	rc = hdr_check(h);
	if (unlikely(rc))
		return rc;
	frame = cs_wire_frame_len(h);
	if (unlikely(h->len > CS_WIRE_IP_TOT_MAX ||
		     frame - CS_WIRE_ETH_LEN > CS_WIRE_IP_TOT_MAX))
		return CS_WIRE_E_LEN;
	if (unlikely(cap < frame))
		return CS_WIRE_E_CAP;

	memcpy(p, t->l2l4, CS_WIRE_L4_END);
	ip = p + CS_WIRE_ETH_LEN;
	udp = ip + CS_WIRE_IP_LEN;
	ulen = (uint32_t)(frame - CS_WIRE_ETH_LEN - CS_WIRE_IP_LEN);

	put16(ip + CS_IP_O_TOT, (uint16_t)(ulen + CS_WIRE_IP_LEN));
	memcpy(&tot_be, ip + CS_IP_O_TOT, 2);
	csum = (uint16_t)~csum_fold((uint64_t)t->ip_sum + tot_be);
	memcpy(ip + CS_IP_O_CSUM, &csum, 2);

	put16(udp + CS_UDP_O_LEN, (uint16_t)ulen);
	hdr_put(udp + CS_WIRE_UDP_LEN, h);
	return (int)frame;
}

int cs_wire_encode(void *buf, size_t cap, const struct cs_wire_addr *src,
		   const struct cs_wire_addr *dst, const struct cs_pkt_hdr *h,
		   const void *payload)
{
	struct cs_wire_tmpl t;
	int rc;

	rc = cs_wire_tmpl_init(&t, src, dst, CS_WIRE_TTL_DEFAULT,
			       CS_WIRE_TOS_DEFAULT);
	if (rc)
		return rc;
	rc = cs_wire_encode_tmpl(buf, cap, &t, h);
	if (rc < 0)
		return rc;
	if (payload && h->len)
		memmove((uint8_t *)buf + cs_wire_payload_offset(h), payload,
			h->len);
	return rc;
}

int cs_wire_udp_csum_fill(void *buf, size_t len)
{
	struct cs_wire_pkt pkt;
	uint8_t *p = buf;
	uint16_t csum;
	size_t ulen;
	int rc;

	rc = cs_wire_decode_ex(buf, len, 0, CS_WIRE_RX_NO_UDP_CSUM, &pkt);
	if (rc)
		return rc;
	ulen = pkt.frame_len - pkt.l4_off;
	memset(p + pkt.l4_off + CS_UDP_O_CSUM, 0, 2);
	csum = (uint16_t)~udp_sum(p + pkt.l3_off, p + pkt.l4_off, ulen);
	if (csum == 0)
		csum = 0xffff; /* 0 means "no checksum" (RFC 768) */
	memcpy(p + pkt.l4_off + CS_UDP_O_CSUM, &csum, 2);
	return 0;
}

int cs_wire_decode_ex(const void *buf, size_t len, uint16_t port,
		      unsigned int flags, struct cs_wire_pkt *out)
{
	const uint8_t *p = buf, *ip, *udp, *ch;
	size_t l3 = CS_WIRE_ETH_LEN, l4, ihl, tot, ulen, rest, need;
	unsigned int et, frag;
	int rc;

	if (unlikely(len < CS_WIRE_ETH_LEN))
		return CS_WIRE_E_SHORT;
	et = get16(p + 12);
	out->vlan = false;
	out->vlan_tci = 0;
	if (et == CS_WIRE_ETHERTYPE_VLAN) {
		if (unlikely(len < CS_WIRE_ETH_LEN + CS_WIRE_VLAN_LEN))
			return CS_WIRE_E_SHORT;
		out->vlan = true;
		out->vlan_tci = get16(p + 14);
		et = get16(p + 16);
		l3 += CS_WIRE_VLAN_LEN;
	}
	if (unlikely(et != CS_WIRE_ETHERTYPE_IPV4))
		return CS_WIRE_E_ETHERTYPE;

	/* IPv4 */
	if (unlikely(len < l3 + 1))
		return CS_WIRE_E_SHORT;
	ip = p + l3;
	if (unlikely((ip[CS_IP_O_VIHL] >> 4) != 4))
		return CS_WIRE_E_IP_VERSION;
	ihl = (ip[CS_IP_O_VIHL] & 0x0fu) * 4u;
	if (unlikely(ihl < CS_WIRE_IP_LEN))
		return CS_WIRE_E_IP_IHL;
	if (unlikely(len - l3 < ihl))
		return CS_WIRE_E_SHORT;
	if (!(flags & CS_WIRE_RX_NO_IP_CSUM) &&
	    unlikely(csum_fold(csum_add(0, ip, ihl)) != 0xffff))
		return CS_WIRE_E_IP_CSUM;
	tot = get16(ip + CS_IP_O_TOT);
	if (unlikely(tot < ihl + CS_WIRE_UDP_LEN))
		return CS_WIRE_E_IP_LEN;
	if (unlikely(len - l3 < tot))
		return CS_WIRE_E_SHORT;
	frag = get16(ip + CS_IP_O_FRAG);
	if (unlikely(frag & (CS_IP_MF | CS_IP_FRAG_OFF)))
		return CS_WIRE_E_IP_FRAG;
	if (unlikely(ip[CS_IP_O_PROTO] != CS_WIRE_IPPROTO_UDP))
		return CS_WIRE_E_PROTO;

	/* UDP: [l4, l3 + tot) is inside the buffer from here on. */
	l4 = l3 + ihl;
	udp = p + l4;
	ulen = get16(udp + CS_UDP_O_LEN);
	if (unlikely(ulen != tot - ihl))
		return CS_WIRE_E_UDP_LEN;
	if (port && unlikely(get16(udp + CS_UDP_O_DPORT) != port))
		return CS_WIRE_E_UDP_PORT;
	if (!(flags & CS_WIRE_RX_NO_UDP_CSUM) &&
	    get16(udp + CS_UDP_O_CSUM) != 0 &&
	    unlikely(udp_sum(ip, udp, ulen) != 0xffff))
		return CS_WIRE_E_UDP_CSUM;

	/* collstack header */
	rest = ulen - CS_WIRE_UDP_LEN;
	if (unlikely(rest < CS_PROTO_HDR_WIRE_LEN))
		return CS_WIRE_E_HDR_LEN;
	ch = udp + CS_WIRE_UDP_LEN;
	hdr_get(ch, &out->hdr);
	rc = hdr_check(&out->hdr);
	/* hdr_check() also tests offset + len; the order of the codes below
	 * is the documented one, so report OFFSET only after LEN. */
	if (unlikely(rc && rc != CS_WIRE_E_OFFSET))
		return rc;
	if (unlikely(get32(ch + CS_WIRE_O_RSVD) != 0))
		return CS_WIRE_E_RESERVED;
	/* (a GMAC flag without AUTH failed hdr_check() above) */
	need = CS_PROTO_HDR_WIRE_LEN + cs_proto_auth_len(out->hdr.flags);
	if (unlikely(rest < need))
		return CS_WIRE_E_TAG;
	if (out->hdr.flags & CS_PKT_F_GMAC)
		memcpy(out->hdr.nonce, ch + CS_PROTO_HDR_WIRE_LEN,
		       CS_PROTO_NONCE_LEN);
	else
		memset(out->hdr.nonce, 0, CS_PROTO_NONCE_LEN);
	if (out->hdr.flags & CS_PKT_F_AUTH)
		memcpy(out->hdr.tag, ch + need - CS_PROTO_TAG_LEN,
		       CS_PROTO_TAG_LEN);
	else
		memset(out->hdr.tag, 0, CS_PROTO_TAG_LEN);
	if (unlikely(out->hdr.len != rest - need))
		return CS_WIRE_E_LEN;
	if (unlikely(rc))
		return rc;

	if ((ip[CS_IP_O_TOS] & CS_WIRE_ECN_MASK) == CS_WIRE_ECN_CE)
		out->hdr.flags |= CS_PKT_F_CE;
	memcpy(out->dst.mac, p, 6);
	memcpy(out->src.mac, p + 6, 6);
	out->src.ip = get32(ip + CS_IP_O_SRC);
	out->dst.ip = get32(ip + CS_IP_O_DST);
	out->src.port = get16(udp + CS_UDP_O_SPORT);
	out->dst.port = get16(udp + CS_UDP_O_DPORT);
	out->tos = ip[CS_IP_O_TOS];
	out->payload = ch + need;
	out->l3_off = (uint16_t)l3;
	out->l4_off = (uint16_t)l4;
	out->hdr_off = (uint16_t)(l4 + CS_WIRE_UDP_LEN);
	out->frame_len = (uint32_t)(l3 + tot);
	return 0;
}

const char *cs_wire_strerror(int err)
{
	switch (err) {
	case CS_WIRE_OK:
		return "ok";
	case CS_WIRE_E_SHORT:
		return "frame truncated";
	case CS_WIRE_E_ETHERTYPE:
		return "ethertype is not IPv4";
	case CS_WIRE_E_IP_VERSION:
		return "IP version is not 4";
	case CS_WIRE_E_IP_IHL:
		return "IPv4 header length below 20";
	case CS_WIRE_E_IP_CSUM:
		return "bad IPv4 header checksum";
	case CS_WIRE_E_IP_LEN:
		return "IPv4 total length too small";
	case CS_WIRE_E_IP_FRAG:
		return "IPv4 fragment";
	case CS_WIRE_E_PROTO:
		return "IP protocol is not UDP";
	case CS_WIRE_E_UDP_LEN:
		return "UDP length disagrees with IPv4 length";
	case CS_WIRE_E_UDP_CSUM:
		return "bad UDP checksum";
	case CS_WIRE_E_UDP_PORT:
		return "wrong UDP destination port";
	case CS_WIRE_E_HDR_LEN:
		return "UDP payload shorter than the collstack header";
	case CS_WIRE_E_VERSION:
		return "unsupported collstack version";
	case CS_WIRE_E_TYPE:
		return "unknown collstack packet type";
	case CS_WIRE_E_FLAGS:
		return "unknown collstack flag bits";
	case CS_WIRE_E_RESERVED:
		return "collstack reserved field not zero";
	case CS_WIRE_E_TAG:
		return "no room for the authentication nonce and tag";
	case CS_WIRE_E_LEN:
		return "payload length disagrees with the packet";
	case CS_WIRE_E_OFFSET:
		return "chunk offset + length overflows";
	case CS_WIRE_E_CAP:
		return "buffer too small for the frame";
	case CS_WIRE_E_INVAL:
		return "invalid argument";
	}
	return "unknown wire error";
}

uint64_t cs_wire_stats_dropped(const struct cs_wire_stats *s)
{
	uint64_t n = 0;
	size_t i;

	for (i = 0; i < CS_ARRAY_SIZE(s->err); i++)
		n += s->err[i];
	return n;
}
