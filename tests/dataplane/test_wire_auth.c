// SPDX-License-Identifier: MIT
/* Authenticated frames through the codec: tag placement, checks after decode.
 */
#include <criterion/criterion.h>
#include <string.h>

#include <collstack/types.h>

#include "control/auth.h"
#include "dataplane/wire.h"

static const struct cs_wire_addr addr_a = {
	.mac = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a },
	.ip = 0x0a4d0001, /* 10.77.0.1 */
	.port = 7700,
};

static const struct cs_wire_addr addr_b = {
	.mac = { 0x02, 0x00, 0x00, 0x00, 0x00, 0x0b },
	.ip = 0x0a4d0002,
	.port = 7700,
};

static struct cs_pkt_hdr data_hdr(uint32_t len)
{
	struct cs_pkt_hdr h = {
		.version = CS_PROTO_VERSION,
		.type = CS_PKT_DATA,
		.flags = CS_PKT_F_AUTH | CS_PKT_F_LAST,
		.src = 1,
		.channel = 2,
		.epoch = 5,
		.op = 42,
		.step = 3,
		.seq = 1000,
		.offset = 8192,
		.len = len,
		.ts = 123456789,
	};
	return h;
}

static uint8_t frame[10000], payload[9000];
static uint8_t key[CS_AUTH_KEY_LEN];
static struct cs_auth_ctx ctx;

static void setup(void)
{
	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 13 + 5);
	cs_auth_epoch_key("job-token", 0, 5, key);
	cs_auth_ctx_init(&ctx, key);
}

TestSuite(wire_auth, .init = setup);

/* The tag sits right after the 76-byte header, the payload after it, and
 * the decoded header + payload pass the check. */
Test(wire_auth, layout_and_check)
{
	static const uint32_t lens[] = { 0, 1, 100, 8900 };
	struct cs_wire_pkt pk;

	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		struct cs_pkt_hdr h = data_hdr(lens[i]);
		int n;

		cs_auth_ctx_tag(&ctx, &h, payload, h.tag);
		n = cs_wire_encode(frame, sizeof(frame), &addr_a, &addr_b, &h,
				   payload);
		cr_assert_eq(n, (int)(CS_PROTO_FRAME_OVERHEAD +
				      CS_PROTO_TAG_LEN + lens[i]));
		cr_assert_eq(cs_wire_payload_offset(&h),
			     CS_PROTO_FRAME_OVERHEAD + CS_PROTO_TAG_LEN);
		cr_assert_arr_eq(frame + CS_PROTO_FRAME_OVERHEAD, h.tag,
				 CS_PROTO_TAG_LEN);
		cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
		cr_assert_eq(pk.payload, frame + CS_PROTO_FRAME_OVERHEAD +
						 CS_PROTO_TAG_LEN);
		cr_assert_eq(cs_auth_ctx_check(&ctx, &pk.hdr, pk.payload), 0);
		cr_assert_eq(cs_auth_check(key, &pk.hdr, pk.payload), 0);
	}
}

/* collstackd's way: encode with the payload already in the frame, then
 * write the tag in place over the header as encoded (UDP checksum 0). */
Test(wire_auth, tag_written_in_place)
{
	struct cs_pkt_hdr h = data_hdr(1500);
	uint8_t *pl = frame + CS_PROTO_FRAME_OVERHEAD + CS_PROTO_TAG_LEN;
	struct cs_wire_pkt pk;
	int n;

	memset(frame, 0, sizeof(frame));
	memcpy(pl, payload, h.len);
	memset(h.tag, 0, sizeof(h.tag));
	n = cs_wire_encode(frame, sizeof(frame), &addr_a, &addr_b, &h, NULL);
	cr_assert_gt(n, 0);
	/* before the tag is written: decodes, fails the check */
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	cr_assert_eq(cs_auth_ctx_check(&ctx, &pk.hdr, pk.payload), CS_ERR_AUTH);
	cs_auth_ctx_tag(&ctx, &h, pl, frame + CS_PROTO_FRAME_OVERHEAD);
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	cr_assert_eq(cs_auth_ctx_check(&ctx, &pk.hdr, pk.payload), 0);
}

/* Forgeries that the codec accepts and the tag check refuses. */
Test(wire_auth, forgeries_decode_but_fail)
{
	struct cs_pkt_hdr h = data_hdr(256);
	struct cs_wire_pkt pk;
	uint8_t good[2048];
	int n;

	cs_auth_ctx_tag(&ctx, &h, payload, h.tag);
	n = cs_wire_encode(good, sizeof(good), &addr_a, &addr_b, &h, payload);
	cr_assert_gt(n, 0);

	/* a payload byte changed */
	memcpy(frame, good, (size_t)n);
	frame[n - 1] ^= 0x01;
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	cr_assert_eq(cs_auth_ctx_check(&ctx, &pk.hdr, pk.payload), CS_ERR_AUTH);

	/* a header field changed (op id: bytes 16..19 of the header) */
	memcpy(frame, good, (size_t)n);
	frame[CS_WIRE_L4_END + 19] ^= 0x01;
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	cr_assert_eq(cs_auth_ctx_check(&ctx, &pk.hdr, pk.payload), CS_ERR_AUTH);

	/* a tag byte changed */
	memcpy(frame, good, (size_t)n);
	frame[CS_PROTO_FRAME_OVERHEAD + 7] ^= 0x80;
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	cr_assert_eq(cs_auth_ctx_check(&ctx, &pk.hdr, pk.payload), CS_ERR_AUTH);

	/* the same frame without the flag and the tag: well-formed, untagged */
	h.flags &= (uint16_t)~CS_PKT_F_AUTH;
	n = cs_wire_encode(frame, sizeof(frame), &addr_a, &addr_b, &h, payload);
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	cr_assert_eq(cs_auth_ctx_check(&ctx, &pk.hdr, pk.payload), CS_ERR_AUTH);

	/* the right frame under another epoch's key */
	h = data_hdr(256);
	cs_auth_ctx_tag(&ctx, &h, payload, h.tag);
	n = cs_wire_encode(frame, sizeof(frame), &addr_a, &addr_b, &h, payload);
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	{
		uint8_t k4[CS_AUTH_KEY_LEN];
		struct cs_auth_ctx c4;

		cs_auth_epoch_key("job-token", 0, 4, k4);
		cs_auth_ctx_init(&c4, k4);
		cr_assert_eq(cs_auth_ctx_check(&c4, &pk.hdr, pk.payload),
			     CS_ERR_AUTH);
	}
}

/* A switch's CE mark reaches the decoded flags: the tag must be checked
 * with CE left out (as collstackd does), or a marked frame would fail. */
Test(wire_auth, ce_mark_is_outside_the_tag)
{
	struct cs_pkt_hdr h = data_hdr(64), chk;
	struct cs_wire_tmpl t;
	struct cs_wire_pkt pk;
	int n;

	cs_auth_ctx_tag(&ctx, &h, payload, h.tag);
	cr_assert_eq(cs_wire_tmpl_init(&t, &addr_a, &addr_b,
				       CS_WIRE_TTL_DEFAULT, CS_WIRE_ECN_CE),
		     0);
	n = cs_wire_encode_tmpl(frame, sizeof(frame), &t, &h);
	cr_assert_gt(n, 0);
	memcpy(frame + cs_wire_payload_offset(&h), payload, h.len);
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	cr_assert(pk.hdr.flags & CS_PKT_F_CE);
	cr_assert_eq(cs_auth_ctx_check(&ctx, &pk.hdr, pk.payload), CS_ERR_AUTH);
	chk = pk.hdr;
	chk.flags &= (uint16_t)~CS_PKT_F_CE;
	cr_assert_eq(cs_auth_ctx_check(&ctx, &chk, pk.payload), 0);
}

/*
 * A GMAC frame as collstackd writes it: encoded with the payload in place,
 * then nonce (sid, counter) and tag written after the header; the decoded
 * frame passes the check; a changed nonce, tag or payload byte in the
 * frame decodes but fails it.
 */
Test(wire_auth, gmac_nonce_and_tag_in_place)
{
	struct cs_pkt_hdr h = data_hdr(1500);
	uint8_t *nt = frame + CS_PROTO_FRAME_OVERHEAD, *pl = nt + 32;
	uint8_t gkey[CS_AUTH_GMAC_KEY_LEN];
	static const unsigned flip[] = { 0, 11, 15, 16, 31, 32, 1531 };
	struct cs_wire_pkt pk;
	int n;

	cs_auth_gmac_epoch_key("job-token", 0, 5, gkey);
	h.flags |= CS_PKT_F_GMAC;
	cr_assert_eq(cs_wire_payload_offset(&h), CS_PROTO_FRAME_OVERHEAD + 32);
	memset(frame, 0, sizeof(frame));
	memcpy(pl, payload, h.len);
	n = cs_wire_encode(frame, sizeof(frame), &addr_a, &addr_b, &h, NULL);
	cr_assert_eq(n, (int)(CS_PROTO_FRAME_OVERHEAD + 32 + 1500));
	for (unsigned i = 0; i < CS_PROTO_SID_LEN; i++)
		h.nonce[i] = (uint8_t)(0x40 + i);
	h.nonce[15] = 9; /* counter 9 */
	memcpy(nt, h.nonce, CS_PROTO_NONCE_LEN);
	cr_assert_eq(cs_auth_gmac_tag(gkey, &h, pl, nt + 16), 0);
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	cr_assert_eq(pk.payload, pl);
	cr_assert_arr_eq(pk.hdr.nonce, h.nonce, CS_PROTO_NONCE_LEN);
	cr_assert_eq(cs_auth_gmac_check(gkey, &pk.hdr, pk.payload), 0);
	/* the SipHash check of the same epoch refuses it */
	cr_assert_eq(cs_auth_ctx_check(&ctx, &pk.hdr, pk.payload), CS_ERR_AUTH);
	for (unsigned i = 0; i < sizeof(flip) / sizeof(flip[0]); i++) {
		nt[flip[i]] ^= 0x08;
		cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
		cr_assert_eq(cs_auth_gmac_check(gkey, &pk.hdr, pk.payload),
			     CS_ERR_AUTH, "byte %u after the header", flip[i]);
		nt[flip[i]] ^= 0x08;
	}
	cr_assert_eq(cs_wire_decode(frame, (size_t)n, &pk), 0);
	cr_assert_eq(cs_auth_gmac_check(gkey, &pk.hdr, pk.payload), 0);
}
