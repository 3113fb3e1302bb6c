// SPDX-License-Identifier: MIT
/* Wire codec tests: round trips, byte layout, and every rejection code. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/wire.h"
#include "internal/util.h"

#define HOFF CS_WIRE_L4_END /* collstack header offset, no VLAN/options */
#define IPOFF CS_WIRE_ETH_LEN
#define UDPOFF (CS_WIRE_ETH_LEN + CS_WIRE_IP_LEN)

static const struct cs_wire_addr addr_a = {
	.mac = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a },
	.ip = 0x0a000001, /* 10.0.0.1 */
	.port = 4791,
};

static const struct cs_wire_addr addr_b = {
	.mac = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x0b },
	.ip = 0x0a000102, /* 10.0.1.2 */
	.port = 4792,
};

static void rand_hdr(struct cs_pkt_hdr *h, uint64_t *rng, uint32_t len,
		     uint16_t flags)
{
	size_t i;

	memset(h, 0, sizeof(*h));
	h->version = CS_PROTO_VERSION;
	h->type = (uint8_t)(1 + cs_rand_next(rng) % CS_PKT_TYPE_MAX);
	h->flags = flags;
	h->src = (uint16_t)cs_rand_next(rng);
	h->channel = (uint16_t)cs_rand_next(rng);
	h->group = (uint32_t)cs_rand_next(rng);
	h->epoch = (uint32_t)cs_rand_next(rng);
	h->op = (uint32_t)cs_rand_next(rng);
	h->step = (uint32_t)cs_rand_next(rng);
	h->seq = (uint32_t)cs_rand_next(rng);
	h->ack = (uint32_t)cs_rand_next(rng);
	h->sack = cs_rand_next(rng);
	h->offset = cs_rand_next(rng) >> 8;
	h->len = len;
	h->credit = (uint32_t)cs_rand_next(rng);
	h->ts = cs_rand_next(rng);
	h->ts_echo = cs_rand_next(rng);
	if (flags & CS_PKT_F_AUTH)
		for (i = 0; i < CS_PROTO_TAG_LEN; i++)
			h->tag[i] = (uint8_t)cs_rand_next(rng);
	if (flags & CS_PKT_F_GMAC)
		for (i = 0; i < CS_PROTO_NONCE_LEN; i++)
			h->nonce[i] = (uint8_t)cs_rand_next(rng);
}

static void assert_hdr_eq(const struct cs_pkt_hdr *a,
			  const struct cs_pkt_hdr *b)
{
	cr_assert_eq(a->version, b->version);
	cr_assert_eq(a->type, b->type);
	cr_assert_eq(a->flags, b->flags);
	cr_assert_eq(a->src, b->src);
	cr_assert_eq(a->channel, b->channel);
	cr_assert_eq(a->group, b->group);
	cr_assert_eq(a->epoch, b->epoch);
	cr_assert_eq(a->op, b->op);
	cr_assert_eq(a->step, b->step);
	cr_assert_eq(a->seq, b->seq);
	cr_assert_eq(a->ack, b->ack);
	cr_assert_eq(a->sack, b->sack);
	cr_assert_eq(a->offset, b->offset);
	cr_assert_eq(a->len, b->len);
	cr_assert_eq(a->credit, b->credit);
	cr_assert_eq(a->ts, b->ts);
	cr_assert_eq(a->ts_echo, b->ts_echo);
	if (a->flags & CS_PKT_F_AUTH)
		cr_assert_arr_eq(a->tag, b->tag, CS_PROTO_TAG_LEN);
	if (a->flags & CS_PKT_F_GMAC)
		cr_assert_arr_eq(a->nonce, b->nonce, CS_PROTO_NONCE_LEN);
}

static void assert_addr_eq(const struct cs_wire_addr *a,
			   const struct cs_wire_addr *b)
{
	cr_assert_arr_eq(a->mac, b->mac, 6);
	cr_assert_eq(a->ip, b->ip);
	cr_assert_eq(a->port, b->port);
}

/* Reference checksum, written the textbook way (big-endian words), to
 * cross-check the codec's native-order implementation. */
static uint16_t ref_csum(const uint8_t *p, size_t n, uint32_t sum)
{
	size_t i;

	for (i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)p[i] << 8 | p[i + 1];
	if (n & 1)
		sum += (uint32_t)p[n - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void wr16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void fix_ip_csum(uint8_t *f, size_t l3)
{
	size_t ihl = (f[l3] & 0xf) * 4u;

	wr16(f + l3 + 10, 0);
	wr16(f + l3 + 10, ref_csum(f + l3, ihl, 0));
}

/* Encode a packet with @len payload bytes (pattern) into a fresh buffer of
 * exactly the frame length; returns it and its length. */
static uint8_t *make(uint32_t len, uint16_t flags, uint64_t seed,
		     struct cs_pkt_hdr *h, size_t *flen)
{
	uint64_t rng = seed;
	uint8_t *pay, *buf;
	size_t n;
	uint32_t i;
	int rc;

	rand_hdr(h, &rng, len, flags);
	n = cs_wire_frame_len(h);
	buf = malloc(n);
	pay = malloc(len ? len : 1);
	cr_assert(buf && pay);
	for (i = 0; i < len; i++)
		pay[i] = (uint8_t)(i * 7 + seed);
	rc = cs_wire_encode(buf, n, &addr_a, &addr_b, h, pay);
	cr_assert_eq(rc, (int)n, "encode: %d (%s)", rc, cs_wire_strerror(rc));
	free(pay);
	*flen = n;
	return buf;
}

static int dec(const uint8_t *f, size_t n)
{
	struct cs_wire_pkt pkt;

	return cs_wire_decode(f, n, &pkt);
}

static void check_roundtrip(uint32_t len, uint16_t flags)
{
	struct cs_pkt_hdr h;
	struct cs_wire_pkt pkt;
	uint8_t *f;
	size_t n, i;
	int rc;

	f = make(len, flags, 42 + len, &h, &n);
	cr_assert_eq(
		n, CS_PROTO_FRAME_OVERHEAD + len +
			   ((flags & CS_PKT_F_AUTH) ? CS_PROTO_TAG_LEN : 0) +
			   ((flags & CS_PKT_F_GMAC) ? CS_PROTO_NONCE_LEN : 0));
	rc = cs_wire_decode(f, n, &pkt);
	cr_assert_eq(rc, 0, "len %u flags %#x: %s", len, flags,
		     cs_wire_strerror(rc));
	assert_hdr_eq(&pkt.hdr, &h);
	assert_addr_eq(&pkt.src, &addr_a);
	assert_addr_eq(&pkt.dst, &addr_b);
	cr_assert_eq(pkt.payload, f + cs_wire_payload_offset(&h));
	for (i = 0; i < len; i++)
		cr_assert_eq(pkt.payload[i], (uint8_t)(i * 7 + 42 + len));
	cr_assert_eq(pkt.frame_len, n);
	cr_assert_eq(pkt.l3_off, IPOFF);
	cr_assert_eq(pkt.l4_off, UDPOFF);
	cr_assert_eq(pkt.hdr_off, HOFF);
	cr_assert_not(pkt.vlan);
	cr_assert_eq(pkt.tos, CS_WIRE_TOS_DEFAULT);
	/* the IPv4 checksum verifies with the textbook algorithm */
	cr_assert_eq(ref_csum(f + IPOFF, CS_WIRE_IP_LEN, 0), 0);
	cr_assert(cs_wire_is_ours(f, n, addr_b.port));
	cr_assert(cs_wire_is_ours(f, n, 0));

	/* with a UDP checksum as well */
	cr_assert_eq(cs_wire_udp_csum_fill(f, n), 0);
	cr_assert_neq(rd16(f + UDPOFF + 6), 0);
	rc = cs_wire_decode(f, n, &pkt);
	cr_assert_eq(rc, 0, "%s", cs_wire_strerror(rc));
	assert_hdr_eq(&pkt.hdr, &h);
	free(f);
}

Test(wire, roundtrip_sizes)
{
	static const uint32_t lens[] = { 0,  1,	   7,	 8,    63,
					 64, 1000, 1382, 4096, 8900 };
	size_t i;

	for (i = 0; i < CS_ARRAY_SIZE(lens); i++) {
		check_roundtrip(lens[i], 0);
		check_roundtrip(lens[i], CS_PKT_F_AUTH);
		check_roundtrip(lens[i],
				CS_PKT_F_AUTH | CS_PKT_F_ACK | CS_PKT_F_LAST);
		check_roundtrip(lens[i], CS_PKT_F_AUTH | CS_PKT_F_GMAC);
	}
}

Test(wire, roundtrip_random)
{
	static const uint16_t fl[] = { CS_PKT_F_ACK,  CS_PKT_F_ECE,
				       CS_PKT_F_AUTH, CS_PKT_F_RETX,
				       CS_PKT_F_CE,   CS_PKT_F_LAST,
				       CS_PKT_F_GMAC };
	uint64_t rng = 7;
	struct cs_wire_pkt pkt;
	struct cs_pkt_hdr h;
	static uint8_t buf[4096];
	size_t i, j;
	int n, rc;

	for (i = 0; i < 2000; i++) {
		uint16_t flags = 0;
		uint32_t len = (uint32_t)(cs_rand_next(&rng) % 2000);

		for (j = 0; j < CS_ARRAY_SIZE(fl); j++)
			if (cs_rand_next(&rng) & 1)
				flags |= fl[j];
		if (flags & CS_PKT_F_GMAC) /* never without the tag */
			flags |= CS_PKT_F_AUTH;
		rand_hdr(&h, &rng, len, flags);
		n = cs_wire_encode(buf, sizeof(buf), &addr_b, &addr_a, &h,
				   NULL);
		cr_assert_gt(n, 0, "%s", cs_wire_strerror(n));
		if (i & 1)
			cr_assert_eq(cs_wire_udp_csum_fill(buf, (size_t)n), 0);
		rc = cs_wire_decode_ex(buf, (size_t)n, addr_a.port, 0, &pkt);
		cr_assert_eq(rc, 0, "%s", cs_wire_strerror(rc));
		assert_hdr_eq(&pkt.hdr, &h);
		assert_addr_eq(&pkt.src, &addr_b);
		assert_addr_eq(&pkt.dst, &addr_a);
	}
}

/* The documented byte layout (docs/codec.md), checked byte by byte. */
Test(wire, golden_layout)
{
	struct cs_pkt_hdr h = {
		.version = 1,
		.type = CS_PKT_DATA,
		.flags = CS_PKT_F_AUTH | CS_PKT_F_LAST,
		.src = 0x0102,
		.channel = 0x0304,
		.group = 0x05060708,
		.epoch = 0x090a0b0c,
		.op = 0x0d0e0f10,
		.step = 0x11121314,
		.seq = 0x15161718,
		.ack = 0x191a1b1c,
		.sack = 0x2122232425262728ull,
		.offset = 0x3132333435363738ull,
		.len = 2,
		.credit = 0x41424344,
		.ts = 0x5152535455565758ull,
		.ts_echo = 0x6162636465666768ull,
	};
	/* 8 bytes a row, as the fields fall */
	/* clang-format off */
	static const uint8_t want_hdr[CS_PROTO_HDR_WIRE_LEN] = {
		0x01, 0x01, 0x00, 0x24, 0x01, 0x02, 0x03, 0x04,
		0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c,
		0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14,
		0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c,
		0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
		0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,
		0x00, 0x00, 0x00, 0x02, 0x41, 0x42, 0x43, 0x44,
		0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58,
		0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
		0x00, 0x00, 0x00, 0x00,
	};
	static const uint8_t want_l2l4[CS_WIRE_L4_END] = {
		/* Ethernet: dst, src, type */
		0x02, 0x00, 0x00, 0x00, 0x00, 0x0b,
		0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x08, 0x00,
		/* IPv4: 45, tos ECT(0), tot 8+76+16+2+20=122, id 0, DF,
		 * ttl 64, udp, csum (checked below), 10.0.0.1 > 10.0.1.2 */
		0x45, 0x02, 0x00, 0x7a, 0x00, 0x00, 0x40, 0x00,
		0x40, 0x11, 0xff, 0xff, 0x0a, 0x00, 0x00, 0x01,
		0x0a, 0x00, 0x01, 0x02,
		/* UDP: 4791 > 4792, len 102, csum 0 */
		0x12, 0xb7, 0x12, 0xb8, 0x00, 0x66, 0x00, 0x00,
	};
	/* clang-format on */
	uint8_t buf[256], pay[2] = { 0xaa, 0xbb };
	int n, i;

	for (i = 0; i < CS_PROTO_TAG_LEN; i++)
		h.tag[i] = (uint8_t)(0xe0 + i);
	memset(buf, 0x5a, sizeof(buf));
	n = cs_wire_encode(buf, sizeof(buf), &addr_a, &addr_b, &h, pay);
	cr_assert_eq(n, CS_PROTO_FRAME_OVERHEAD + CS_PROTO_TAG_LEN + 2);
	cr_assert_eq(ref_csum(buf + IPOFF, CS_WIRE_IP_LEN, 0), 0);
	wr16(buf + IPOFF + 10, 0xffff); /* as in want_l2l4 */
	cr_assert_arr_eq(buf, want_l2l4, CS_WIRE_L4_END);
	cr_assert_arr_eq(buf + HOFF, want_hdr, CS_PROTO_HDR_WIRE_LEN);
	for (i = 0; i < CS_PROTO_TAG_LEN; i++)
		cr_assert_eq(buf[HOFF + CS_PROTO_HDR_WIRE_LEN + i], 0xe0 + i);
	cr_assert_eq(buf[n - 2], 0xaa);
	cr_assert_eq(buf[n - 1], 0xbb);
	cr_assert_eq(buf[n], 0x5a, "wrote past the frame");
}

/* With CS_PKT_F_GMAC: header, then the 16-byte nonce, then the tag. */
Test(wire, golden_layout_gmac)
{
	struct cs_pkt_hdr h = {
		.version = 1,
		.type = CS_PKT_ACK,
		.flags = CS_PKT_F_AUTH | CS_PKT_F_GMAC | CS_PKT_F_ACK,
		.len = 1,
	};
	uint8_t buf[256], pay = 0xaa;
	struct cs_wire_pkt pkt;
	int n, i;

	for (i = 0; i < CS_PROTO_TAG_LEN; i++)
		h.tag[i] = (uint8_t)(0xe0 + i);
	for (i = 0; i < CS_PROTO_NONCE_LEN; i++)
		h.nonce[i] = (uint8_t)(0xc0 + i);
	memset(buf, 0x5a, sizeof(buf));
	n = cs_wire_encode(buf, sizeof(buf), &addr_a, &addr_b, &h, &pay);
	cr_assert_eq(n, CS_PROTO_FRAME_OVERHEAD + 32 + 1);
	cr_assert_eq(rd16(buf + HOFF + 2), 0x0085);
	for (i = 0; i < CS_PROTO_NONCE_LEN; i++)
		cr_assert_eq(buf[HOFF + CS_PROTO_HDR_WIRE_LEN + i], 0xc0 + i);
	for (i = 0; i < CS_PROTO_TAG_LEN; i++)
		cr_assert_eq(buf[HOFF + CS_PROTO_HDR_WIRE_LEN + 16 + i],
			     0xe0 + i);
	cr_assert_eq(buf[n - 1], 0xaa);
	cr_assert_eq(buf[n], 0x5a, "wrote past the frame");
	cr_assert_eq(cs_wire_decode(buf, (size_t)n, &pkt), 0);
	cr_assert_arr_eq(pkt.hdr.nonce, h.nonce, CS_PROTO_NONCE_LEN);
	cr_assert_arr_eq(pkt.hdr.tag, h.tag, CS_PROTO_TAG_LEN);
	cr_assert_eq(pkt.payload, buf + n - 1);
}

/* The template hot path writes the same bytes as cs_wire_encode() and
 * leaves a payload already in place untouched. */
Test(wire, tmpl_matches_encode)
{
	struct cs_wire_tmpl t;
	struct cs_pkt_hdr h;
	uint8_t a[2048], b[2048];
	uint64_t rng = 99;
	size_t off, i;
	int na, nb, k;

	cr_assert_eq(cs_wire_tmpl_init(&t, &addr_a, &addr_b,
				       CS_WIRE_TTL_DEFAULT,
				       CS_WIRE_TOS_DEFAULT),
		     0);
	for (k = 0; k < 200; k++) {
		rand_hdr(&h, &rng, (uint32_t)(cs_rand_next(&rng) % 1800),
			 (k & 1) ? CS_PKT_F_AUTH : 0);
		off = cs_wire_payload_offset(&h);
		for (i = 0; i < h.len; i++)
			a[off + i] = b[off + i] = (uint8_t)cs_rand_next(&rng);
		na = cs_wire_encode(a, sizeof(a), &addr_a, &addr_b, &h, NULL);
		nb = cs_wire_encode_tmpl(b, sizeof(b), &t, &h);
		cr_assert_eq(na, nb);
		cr_assert_gt(na, 0);
		cr_assert_arr_eq(a, b, (size_t)na);
		cr_assert_eq(dec(b, (size_t)nb), 0);
	}
	cr_assert_eq(cs_wire_tmpl_init(NULL, &addr_a, &addr_b, 1, 0),
		     CS_WIRE_E_INVAL);
}

Test(wire, max_ip_datagram)
{
	struct cs_pkt_hdr h;
	uint8_t *buf = calloc(1, 70000);
	int n;

	cr_assert(buf);
	memset(&h, 0, sizeof(h));
	h.version = CS_PROTO_VERSION;
	h.type = CS_PKT_DATA;
	h.flags = CS_PKT_F_AUTH | CS_PKT_F_GMAC;
	h.len = CS_WIRE_MAX_PAYLOAD;
	n = cs_wire_encode(buf, 70000, &addr_a, &addr_b, &h, NULL);
	cr_assert_eq(n, CS_WIRE_ETH_LEN + CS_WIRE_IP_TOT_MAX);
	cr_assert_eq(dec(buf, (size_t)n), 0);
	h.len++;
	cr_assert_eq(cs_wire_encode(buf, 70000, &addr_a, &addr_b, &h, NULL),
		     CS_WIRE_E_LEN);
	h.flags = CS_PKT_F_AUTH; /* without the nonce 16 more bytes fit */
	h.len = CS_WIRE_MAX_PAYLOAD + CS_PROTO_NONCE_LEN;
	n = cs_wire_encode(buf, 70000, &addr_a, &addr_b, &h, NULL);
	cr_assert_eq(n, CS_WIRE_ETH_LEN + CS_WIRE_IP_TOT_MAX);
	cr_assert_eq(dec(buf, (size_t)n), 0);
	h.len++;
	cr_assert_eq(cs_wire_encode(buf, 70000, &addr_a, &addr_b, &h, NULL),
		     CS_WIRE_E_LEN);
	h.flags = 0; /* without the tag another 16 fit */
	h.len = CS_WIRE_MAX_PAYLOAD + CS_PROTO_AUTH_MAX;
	n = cs_wire_encode(buf, 70000, &addr_a, &addr_b, &h, NULL);
	cr_assert_eq(n, CS_WIRE_ETH_LEN + CS_WIRE_IP_TOT_MAX);
	cr_assert_eq(dec(buf, (size_t)n), 0);
	h.len = UINT32_MAX;
	cr_assert_eq(cs_wire_encode(buf, 70000, &addr_a, &addr_b, &h, NULL),
		     CS_WIRE_E_LEN);
	free(buf);
}

/* Every proper prefix of a valid frame is rejected as short, read from a
 * buffer of exactly that size (ASan catches any overread). */
static void check_prefixes(const uint8_t *f, size_t n)
{
	struct cs_wire_pkt pkt;
	size_t k;
	int rc;

	cr_assert_eq(cs_wire_decode(f, n, &pkt), 0);
	for (k = 0; k < n; k++) {
		uint8_t *p = malloc(k ? k : 1);

		cr_assert(p);
		memcpy(p, f, k);
		rc = cs_wire_decode(p, k, &pkt);
		cr_assert_eq(rc, CS_WIRE_E_SHORT, "prefix %zu of %zu: %s", k, n,
			     cs_wire_strerror(rc));
		rc = cs_wire_decode_ex(
			p, k, addr_b.port,
			CS_WIRE_RX_NO_IP_CSUM | CS_WIRE_RX_NO_UDP_CSUM, &pkt);
		cr_assert_lt(rc, 0);
		(void)cs_wire_is_ours(p, k, addr_b.port);
		free(p);
	}
}

/* Insert @extra option bytes (NOPs) after the 20-byte IPv4 header. */
static uint8_t *add_ip_options(const uint8_t *f, size_t n, size_t extra,
			       size_t *out_n)
{
	uint8_t *g = malloc(n + extra);
	uint16_t tot;

	cr_assert(g);
	memcpy(g, f, UDPOFF);
	memset(g + UDPOFF, 0x01, extra);
	memcpy(g + UDPOFF + extra, f + UDPOFF, n - UDPOFF);
	g[IPOFF] = (uint8_t)(0x40 | ((CS_WIRE_IP_LEN + extra) / 4));
	tot = rd16(g + IPOFF + 2);
	wr16(g + IPOFF + 2, (uint16_t)(tot + extra));
	fix_ip_csum(g, IPOFF);
	*out_n = n + extra;
	return g;
}

static uint8_t *add_vlan(const uint8_t *f, size_t n, uint16_t tci,
			 size_t *out_n)
{
	uint8_t *g = malloc(n + CS_WIRE_VLAN_LEN);

	cr_assert(g);
	memcpy(g, f, 12);
	wr16(g + 12, CS_WIRE_ETHERTYPE_VLAN);
	wr16(g + 14, tci);
	memcpy(g + 16, f + 12, n - 12);
	*out_n = n + CS_WIRE_VLAN_LEN;
	return g;
}

Test(wire, truncation_every_prefix)
{
	struct cs_pkt_hdr h;
	uint8_t *f, *g;
	size_t n, m;

	f = make(0, 0, 1, &h, &n);
	check_prefixes(f, n);
	free(f);
	f = make(100, CS_PKT_F_AUTH, 2, &h, &n);
	check_prefixes(f, n);
	cr_assert_eq(cs_wire_udp_csum_fill(f, n), 0);
	check_prefixes(f, n);
	g = add_ip_options(f, n, 40, &m);
	check_prefixes(g, m);
	free(g);
	g = add_vlan(f, n, 0x0123, &m);
	check_prefixes(g, m);
	free(g);
	free(f);
	f = make(8900, CS_PKT_F_AUTH, 3, &h, &n);
	check_prefixes(f, n);
	free(f);
}

Test(wire, ip_options)
{
	static const size_t extra[] = { 4, 8, 20, 40 };
	struct cs_wire_pkt pkt;
	struct cs_pkt_hdr h;
	uint8_t *f, *g;
	size_t n, m, i;
	int rc;

	f = make(33, CS_PKT_F_AUTH, 5, &h, &n);
	cr_assert_eq(cs_wire_udp_csum_fill(f, n), 0);
	for (i = 0; i < CS_ARRAY_SIZE(extra); i++) {
		g = add_ip_options(f, n, extra[i], &m);
		rc = cs_wire_decode(g, m, &pkt);
		cr_assert_eq(rc, 0, "ihl +%zu: %s", extra[i],
			     cs_wire_strerror(rc));
		assert_hdr_eq(&pkt.hdr, &h);
		cr_assert_eq(pkt.l4_off, UDPOFF + extra[i]);
		cr_assert_eq(pkt.hdr_off, HOFF + extra[i]);
		cr_assert_eq(pkt.payload,
			     g + cs_wire_payload_offset(&h) + extra[i]);
		cr_assert_arr_eq(pkt.payload, f + cs_wire_payload_offset(&h),
				 h.len);
		cr_assert(cs_wire_is_ours(g, m, addr_b.port));
		free(g);
	}
	free(f);
}

Test(wire, vlan)
{
	struct cs_wire_pkt pkt;
	struct cs_pkt_hdr h;
	uint8_t *f, *g;
	size_t n, m;

	f = make(64, 0, 6, &h, &n);
	g = add_vlan(f, n, 0x2064, &m);
	cr_assert_eq(cs_wire_decode(g, m, &pkt), 0);
	cr_assert(pkt.vlan);
	cr_assert_eq(pkt.vlan_tci, 0x2064);
	cr_assert_eq(pkt.l3_off, IPOFF + CS_WIRE_VLAN_LEN);
	cr_assert_eq(pkt.payload, g + n + CS_WIRE_VLAN_LEN - h.len);
	assert_hdr_eq(&pkt.hdr, &h);
	cr_assert(cs_wire_is_ours(g, m, addr_b.port));
	/* a second (QinQ) tag is not accepted */
	wr16(g + 16, CS_WIRE_ETHERTYPE_VLAN);
	cr_assert_eq(cs_wire_decode(g, m, &pkt), CS_WIRE_E_ETHERTYPE);
	cr_assert_not(cs_wire_is_ours(g, m, addr_b.port));
	free(g);
	free(f);
}

Test(wire, trailing_padding_ignored)
{
	struct cs_wire_pkt pkt;
	struct cs_pkt_hdr h;
	uint8_t *f;
	size_t n;

	f = make(10, 0, 8, &h, &n);
	f = realloc(f, n + 8);
	cr_assert(f);
	memset(f + n, 0xee, 8);
	cr_assert_eq(cs_wire_decode(f, n + 8, &pkt), 0);
	cr_assert_eq(pkt.frame_len, n);
	cr_assert_eq(pkt.hdr.len, 10);
	free(f);
}

Test(wire, ecn_ce_sets_flag)
{
	struct cs_wire_pkt pkt;
	struct cs_pkt_hdr h;
	uint8_t *f;
	size_t n;

	f = make(10, CS_PKT_F_ACK, 9, &h, &n);
	cr_assert_eq(cs_wire_decode(f, n, &pkt), 0);
	cr_assert_eq(pkt.hdr.flags, CS_PKT_F_ACK);
	f[IPOFF + 1] |= CS_WIRE_ECN_CE;
	fix_ip_csum(f, IPOFF);
	cr_assert_eq(cs_wire_decode(f, n, &pkt), 0);
	cr_assert_eq(pkt.hdr.flags, CS_PKT_F_ACK | CS_PKT_F_CE);
	cr_assert_eq(pkt.tos & CS_WIRE_ECN_MASK, CS_WIRE_ECN_CE);
	free(f);
}

Test(wire, is_ours)
{
	struct cs_pkt_hdr h;
	uint8_t *f;
	size_t n;

	f = make(10, 0, 10, &h, &n);
	cr_assert(cs_wire_is_ours(f, n, addr_b.port));
	cr_assert_not(cs_wire_is_ours(f, n, addr_b.port + 1));
	cr_assert_not(cs_wire_is_ours(f, HOFF, addr_b.port));
	cr_assert(cs_wire_is_ours(f, HOFF + 1, addr_b.port));
	f[HOFF] = CS_PROTO_VERSION + 1;
	cr_assert_not(cs_wire_is_ours(f, n, addr_b.port));
	f[HOFF] = CS_PROTO_VERSION;
	f[IPOFF + 9] = 6;
	cr_assert_not(cs_wire_is_ours(f, n, addr_b.port));
	f[IPOFF + 9] = CS_WIRE_IPPROTO_UDP;
	f[12] = 0x86;
	f[13] = 0xdd;
	cr_assert_not(cs_wire_is_ours(f, n, 0));
	free(f);
}

/* ---- one test per rejection code, each from a valid frame ---- */

struct fixture {
	struct cs_pkt_hdr h;
	uint8_t *f;
	size_t n;
};

static void fx_make(struct fixture *x, uint32_t len, uint16_t flags)
{
	x->f = make(len, flags, 1234, &x->h, &x->n);
	cr_assert_eq(dec(x->f, x->n), 0);
}

Test(wire_reject, short_frame)
{
	struct fixture x;

	fx_make(&x, 16, 0);
	cr_assert_eq(dec(x.f, 0), CS_WIRE_E_SHORT);
	cr_assert_eq(dec(x.f, 13), CS_WIRE_E_SHORT);
	cr_assert_eq(dec(x.f, 14), CS_WIRE_E_SHORT);
	cr_assert_eq(dec(x.f, 33), CS_WIRE_E_SHORT);
	cr_assert_eq(dec(x.f, x.n - 1), CS_WIRE_E_SHORT);
	/* IPv4 total length one past the frame */
	wr16(x.f + IPOFF + 2, (uint16_t)(x.n - IPOFF + 1));
	wr16(x.f + UDPOFF + 4, (uint16_t)(x.n - UDPOFF + 1));
	fix_ip_csum(x.f, IPOFF);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_SHORT);
	free(x.f);
}

Test(wire_reject, ethertype)
{
	struct fixture x;

	fx_make(&x, 16, 0);
	wr16(x.f + 12, 0x86dd); /* IPv6 */
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_ETHERTYPE);
	wr16(x.f + 12, 0x0806); /* ARP */
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_ETHERTYPE);
	wr16(x.f + 12, 0x88a8); /* 802.1ad */
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_ETHERTYPE);
	free(x.f);
}

Test(wire_reject, ip_version)
{
	struct fixture x;

	fx_make(&x, 16, 0);
	x.f[IPOFF] = 0x65;
	fix_ip_csum(x.f, IPOFF);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_IP_VERSION);
	free(x.f);
}

Test(wire_reject, ip_ihl)
{
	struct fixture x;
	int ihl;

	fx_make(&x, 16, 0);
	for (ihl = 0; ihl < 5; ihl++) {
		x.f[IPOFF] = (uint8_t)(0x40 | ihl);
		cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_IP_IHL);
	}
	free(x.f);
}

Test(wire_reject, ip_csum)
{
	struct cs_wire_pkt pkt;
	struct fixture x;

	fx_make(&x, 16, 0);
	x.f[IPOFF + 15] ^= 0x01; /* source address */
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_IP_CSUM);
	cr_assert_eq(
		cs_wire_decode_ex(x.f, x.n, 0, CS_WIRE_RX_NO_IP_CSUM, &pkt), 0);
	x.f[IPOFF + 15] ^= 0x01;
	x.f[IPOFF + 11] ^= 0x80; /* the checksum itself */
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_IP_CSUM);
	free(x.f);
}

Test(wire_reject, ip_len)
{
	struct fixture x;
	uint16_t tot;

	fx_make(&x, 16, 0);
	for (tot = 0; tot < CS_WIRE_IP_LEN + CS_WIRE_UDP_LEN; tot++) {
		wr16(x.f + IPOFF + 2, tot);
		fix_ip_csum(x.f, IPOFF);
		cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_IP_LEN, "tot %u", tot);
	}
	free(x.f);
}

Test(wire_reject, ip_frag)
{
	struct fixture x;

	fx_make(&x, 16, 0);
	wr16(x.f + IPOFF + 6, 0x2000); /* MF */
	fix_ip_csum(x.f, IPOFF);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_IP_FRAG);
	wr16(x.f + IPOFF + 6, 0x0001); /* offset 8 */
	fix_ip_csum(x.f, IPOFF);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_IP_FRAG);
	wr16(x.f + IPOFF + 6, 0x0000); /* no DF is fine */
	fix_ip_csum(x.f, IPOFF);
	cr_assert_eq(dec(x.f, x.n), 0);
	free(x.f);
}

Test(wire_reject, proto)
{
	struct fixture x;

	fx_make(&x, 16, 0);
	x.f[IPOFF + 9] = 6; /* TCP */
	fix_ip_csum(x.f, IPOFF);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_PROTO);
	free(x.f);
}

Test(wire_reject, udp_len)
{
	static const int delta[] = { -1, 1, 100 };
	struct fixture x;
	uint16_t ulen;
	size_t i;

	fx_make(&x, 16, 0);
	ulen = rd16(x.f + UDPOFF + 4);
	for (i = 0; i < CS_ARRAY_SIZE(delta); i++) {
		wr16(x.f + UDPOFF + 4, (uint16_t)(ulen + delta[i]));
		cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_UDP_LEN);
	}
	wr16(x.f + UDPOFF + 4, 0);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_UDP_LEN);
	free(x.f);
}

Test(wire_reject, udp_csum)
{
	struct cs_wire_pkt pkt;
	struct fixture x;

	fx_make(&x, 16, 0);
	cr_assert_eq(cs_wire_udp_csum_fill(x.f, x.n), 0);
	cr_assert_eq(ref_csum(x.f + UDPOFF, x.n - UDPOFF,
			      (addr_a.ip >> 16) + (addr_a.ip & 0xffff) +
				      (addr_b.ip >> 16) + (addr_b.ip & 0xffff) +
				      17 + (uint32_t)(x.n - UDPOFF)),
		     0, "UDP checksum differs from the reference");
	x.f[x.n - 1] ^= 0x10; /* payload */
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_UDP_CSUM);
	cr_assert_eq(
		cs_wire_decode_ex(x.f, x.n, 0, CS_WIRE_RX_NO_UDP_CSUM, &pkt),
		0);
	wr16(x.f + UDPOFF + 6, 0); /* 0: no checksum */
	cr_assert_eq(dec(x.f, x.n), 0);
	free(x.f);
}

Test(wire_reject, udp_port)
{
	struct cs_wire_pkt pkt;
	struct fixture x;

	fx_make(&x, 16, 0);
	cr_assert_eq(cs_wire_decode_ex(x.f, x.n, addr_b.port, 0, &pkt), 0);
	cr_assert_eq(cs_wire_decode_ex(x.f, x.n, addr_a.port, 0, &pkt),
		     CS_WIRE_E_UDP_PORT);
	free(x.f);
}

Test(wire_reject, hdr_len)
{
	struct fixture x;
	size_t rest;

	fx_make(&x, 0, 0);
	for (rest = 0; rest < CS_PROTO_HDR_WIRE_LEN; rest++) {
		wr16(x.f + IPOFF + 2,
		     (uint16_t)(CS_WIRE_IP_LEN + CS_WIRE_UDP_LEN + rest));
		wr16(x.f + UDPOFF + 4, (uint16_t)(CS_WIRE_UDP_LEN + rest));
		fix_ip_csum(x.f, IPOFF);
		cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_HDR_LEN, "rest %zu",
			     rest);
	}
	free(x.f);
}

Test(wire_reject, version)
{
	struct fixture x;

	fx_make(&x, 16, 0);
	x.f[HOFF] = 0;
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_VERSION);
	x.f[HOFF] = CS_PROTO_VERSION + 1;
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_VERSION);
	cr_assert_not(cs_wire_is_ours(x.f, x.n, 0));
	free(x.f);
}

Test(wire_reject, type)
{
	static const uint8_t bad[] = { 0, CS_PKT_TYPE_MAX + 1, 0xff };
	struct fixture x;
	size_t i;

	fx_make(&x, 16, 0);
	for (i = 0; i < CS_ARRAY_SIZE(bad); i++) {
		x.f[HOFF + 1] = bad[i];
		cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_TYPE);
	}
	free(x.f);
}

Test(wire_reject, flags)
{
	struct fixture x;
	uint16_t fl;

	fx_make(&x, 16, 0);
	fl = x.h.flags;
	wr16(x.f + HOFF + 2, (uint16_t)(fl | 0x0400));
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_FLAGS);
	/* a nonce without a tag */
	wr16(x.f + HOFF + 2, (uint16_t)((fl & ~CS_PKT_F_AUTH) | CS_PKT_F_GMAC));
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_FLAGS);
	wr16(x.f + HOFF + 2, (uint16_t)(fl | 0x8000));
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_FLAGS);
	free(x.f);
}

/* "busy" (a NACK's bitmap of refused packets) and "resume" ride on ACKs
 * only: anywhere else a peer could mistake them (control/rel.h). */
Test(wire_reject, busy_and_resume_placement)
{
	struct fixture x;
	uint16_t fl;

	fx_make(&x, 16, 0);
	fl = x.h.flags & ~CS_PKT_F_ACK;
	x.f[HOFF + 1] = CS_PKT_DATA;
	wr16(x.f + HOFF + 2, (uint16_t)(fl | CS_PKT_F_ACK | CS_PKT_F_BUSY));
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_FLAGS);
	x.f[HOFF + 1] = CS_PKT_NACK;
	cr_assert_eq(dec(x.f, x.n), 0);
	wr16(x.f + HOFF + 2, (uint16_t)(fl | CS_PKT_F_BUSY));
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_FLAGS);
	x.f[HOFF + 1] = CS_PKT_ACK;
	wr16(x.f + HOFF + 2, (uint16_t)(fl | CS_PKT_F_RESUME));
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_FLAGS);
	wr16(x.f + HOFF + 2, (uint16_t)(fl | CS_PKT_F_ACK | CS_PKT_F_RESUME));
	cr_assert_eq(dec(x.f, x.n), 0);
	x.f[HOFF + 1] = CS_PKT_DATA; /* resume piggybacked on data */
	cr_assert_eq(dec(x.f, x.n), 0);
	free(x.f);
}

Test(wire_reject, reserved)
{
	struct fixture x;

	fx_make(&x, 16, 0);
	x.f[HOFF + CS_PROTO_HDR_WIRE_LEN - 1] = 1;
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_RESERVED);
	free(x.f);
}

Test(wire_reject, tag)
{
	struct fixture x;

	fx_make(&x, 8, 0); /* 8 bytes after the header: no room for 16 */
	wr16(x.f + HOFF + 2, CS_PKT_F_AUTH);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_TAG);
	free(x.f);
	fx_make(&x, 0, 0);
	wr16(x.f + HOFF + 2, CS_PKT_F_AUTH);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_TAG);
	free(x.f);
	/* room for the tag, not for the nonce before it as well */
	fx_make(&x, 24, 0);
	wr16(x.f + HOFF + 2, CS_PKT_F_AUTH | CS_PKT_F_GMAC);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_TAG);
	wr16(x.f + HOFF + 2, CS_PKT_F_AUTH); /* 16 of them a tag: len 8 */
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_LEN);
	free(x.f);
}

static void put_len(uint8_t *f, uint32_t len)
{
	f[HOFF + 48] = (uint8_t)(len >> 24);
	f[HOFF + 49] = (uint8_t)(len >> 16);
	f[HOFF + 50] = (uint8_t)(len >> 8);
	f[HOFF + 51] = (uint8_t)len;
}

static void put_offset(uint8_t *f, uint64_t off)
{
	int i;

	for (i = 0; i < 8; i++)
		f[HOFF + 40 + i] = (uint8_t)(off >> (56 - 8 * i));
}

Test(wire_reject, len)
{
	struct fixture x;

	fx_make(&x, 16, CS_PKT_F_AUTH);
	put_len(x.f, 17);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_LEN);
	put_len(x.f, 15);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_LEN);
	put_len(x.f, UINT32_MAX);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_LEN);
	/* a tag flag dropped: 16 bytes more than len says */
	put_len(x.f, 16);
	wr16(x.f + HOFF + 2, 0);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_LEN);
	free(x.f);
}

Test(wire_reject, offset)
{
	struct fixture x;

	fx_make(&x, 16, 0);
	put_offset(x.f, UINT64_MAX - 16); /* ends exactly at 2^64 - 1 */
	cr_assert_eq(dec(x.f, x.n), 0);
	put_offset(x.f, UINT64_MAX - 15);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_OFFSET);
	put_offset(x.f, UINT64_MAX);
	cr_assert_eq(dec(x.f, x.n), CS_WIRE_E_OFFSET);
	free(x.f);
}

Test(wire_reject, encode_checks)
{
	struct cs_pkt_hdr h, g;
	uint64_t rng = 11;
	uint8_t buf[512];
	size_t n;

	rand_hdr(&h, &rng, 100, CS_PKT_F_AUTH);
	n = cs_wire_frame_len(&h);
	cr_assert_eq(cs_wire_encode(buf, n, &addr_a, &addr_b, &h, NULL),
		     (int)n);
	cr_assert_eq(cs_wire_encode(buf, n - 1, &addr_a, &addr_b, &h, NULL),
		     CS_WIRE_E_CAP);
	cr_assert_eq(cs_wire_encode(NULL, n, &addr_a, &addr_b, &h, NULL),
		     CS_WIRE_E_INVAL);
	cr_assert_eq(cs_wire_encode(buf, n, NULL, &addr_b, &h, NULL),
		     CS_WIRE_E_INVAL);
	cr_assert_eq(cs_wire_encode(buf, n, &addr_a, &addr_b, NULL, NULL),
		     CS_WIRE_E_INVAL);
	g = h;
	g.version = 2;
	cr_assert_eq(cs_wire_encode(buf, n, &addr_a, &addr_b, &g, NULL),
		     CS_WIRE_E_VERSION);
	g = h;
	g.type = 0;
	cr_assert_eq(cs_wire_encode(buf, n, &addr_a, &addr_b, &g, NULL),
		     CS_WIRE_E_TYPE);
	g = h;
	g.flags |= 0x400;
	cr_assert_eq(cs_wire_encode(buf, n, &addr_a, &addr_b, &g, NULL),
		     CS_WIRE_E_FLAGS);
	g = h;
	g.offset = UINT64_MAX - 50;
	cr_assert_eq(cs_wire_encode(buf, n, &addr_a, &addr_b, &g, NULL),
		     CS_WIRE_E_OFFSET);
	cr_assert_eq(cs_wire_udp_csum_fill(buf, 10), CS_WIRE_E_SHORT);
}

/* ---- codes, strings, counters ---- */

static const int all_codes[] = {
	CS_WIRE_E_SHORT,    CS_WIRE_E_ETHERTYPE, CS_WIRE_E_IP_VERSION,
	CS_WIRE_E_IP_IHL,   CS_WIRE_E_IP_CSUM,	 CS_WIRE_E_IP_LEN,
	CS_WIRE_E_IP_FRAG,  CS_WIRE_E_PROTO,	 CS_WIRE_E_UDP_LEN,
	CS_WIRE_E_UDP_CSUM, CS_WIRE_E_UDP_PORT,	 CS_WIRE_E_HDR_LEN,
	CS_WIRE_E_VERSION,  CS_WIRE_E_TYPE,	 CS_WIRE_E_FLAGS,
	CS_WIRE_E_RESERVED, CS_WIRE_E_TAG,	 CS_WIRE_E_LEN,
	CS_WIRE_E_OFFSET,   CS_WIRE_E_CAP,	 CS_WIRE_E_INVAL,
};

Test(wire, codes_distinct_with_text)
{
	size_t i, j;

	cr_assert_eq(CS_ARRAY_SIZE(all_codes), CS_WIRE_E_COUNT);
	for (i = 0; i < CS_ARRAY_SIZE(all_codes); i++) {
		cr_assert_lt(all_codes[i], 0);
		cr_assert_eq(all_codes[i], -(CS_WIRE_E_BASE + 1 + (int)i));
		cr_assert_str_neq(cs_wire_strerror(all_codes[i]),
				  "unknown wire error");
		for (j = 0; j < i; j++)
			cr_assert_str_neq(cs_wire_strerror(all_codes[i]),
					  cs_wire_strerror(all_codes[j]));
	}
	cr_assert_str_eq(cs_wire_strerror(0), "ok");
	cr_assert_str_eq(cs_wire_strerror(-1), "unknown wire error");
	cr_assert_str_eq(cs_wire_strerror(-(CS_WIRE_E_BASE + 22)),
			 "unknown wire error");
}

Test(wire, stats_count)
{
	struct cs_wire_stats s;
	size_t i;

	memset(&s, 0, sizeof(s));
	for (i = 0; i < CS_ARRAY_SIZE(all_codes); i++) {
		cs_wire_count(&s, all_codes[i]);
		cs_wire_count(&s, all_codes[i]);
		cr_assert_eq(s.err[i + 1], 2);
	}
	cs_wire_count(&s, 0);
	cs_wire_count(&s, 118);
	cs_wire_count(&s, -22);
	cs_wire_count(&s, -(CS_WIRE_E_BASE + CS_WIRE_E_COUNT + 1));
	cs_wire_count(&s, INT32_MIN);
	cr_assert_eq(s.ok, 2);
	cr_assert_eq(s.err[0], 3);
	cr_assert_eq(cs_wire_stats_dropped(&s), 2 * CS_WIRE_E_COUNT + 3);
}
