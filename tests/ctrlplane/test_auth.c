/* SPDX-License-Identifier: MIT */
/* SHA-256 / HMAC known answers, epoch keys and packet tags. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <collstack/types.h>

#include "control/auth.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void sha256_known_answers(void);

/* Every compression this machine has gives the known answers. */
Test(auth, sha256_known_answers)
{
	cr_assert_eq(cs_sha256_select(false), 0);
	cr_assert_str_eq(cs_sha256_impl(), "portable");
	sha256_known_answers();
	if (cs_sha256_select(true) == 0) {
		cr_assert_str_eq(cs_sha256_impl(), "sha-ni");
		sha256_known_answers();
	} else {
		cr_log_info("no SHA extensions here: portable code only");
	}
}

/* Both compressions agree on every length up to a few blocks. */
Test(auth, sha256_impls_agree)
{
	static uint8_t msg[1000];
	uint8_t a[32], b[32];
	struct cs_sha256 s;

	if (cs_sha256_select(true)) {
		cr_log_info("no SHA extensions here: nothing to compare");
		return;
	}
	for (unsigned i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 31 + 7);
	for (size_t n = 0; n <= sizeof(msg); n += 1 + n / 16) {
		cs_sha256_select(false);
		cs_sha256_init(&s);
		cs_sha256_update(&s, msg, n);
		cs_sha256_final(&s, a);
		cs_sha256_select(true);
		cs_sha256_init(&s);
		cs_sha256_update(&s, msg, n);
		cs_sha256_final(&s, b);
		cr_assert_arr_eq(a, b, 32, "length %zu", n);
	}
}

static void sha256_known_answers(void)
{
	struct cs_sha256 s;
	uint8_t d[32];
	char h[65];
	static char million[1000000];

	cs_sha256_init(&s);
	cs_sha256_update(&s, "abc", 3);
	cs_sha256_final(&s, d);
	hex(d, 32, h);
	cr_assert_str_eq(
		h,
		"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

	cs_sha256_init(&s);
	cs_sha256_final(&s, d);
	hex(d, 32, h);
	cr_assert_str_eq(
		h,
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

	/* 56-byte message: padding spills into a second block. */
	cs_sha256_init(&s);
	cs_sha256_update(
		&s, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		56);
	cs_sha256_final(&s, d);
	hex(d, 32, h);
	cr_assert_str_eq(
		h,
		"248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");

	/* One million 'a' fed in odd-sized pieces. */
	memset(million, 'a', sizeof(million));
	cs_sha256_init(&s);
	for (size_t off = 0, step = 1; off < sizeof(million);
	     step = step * 3 % 997 + 1) {
		size_t n = sizeof(million) - off < step ? sizeof(million) - off
							: step;

		cs_sha256_update(&s, million + off, n);
		off += n;
	}
	cs_sha256_final(&s, d);
	hex(d, 32, h);
	cr_assert_str_eq(
		h,
		"cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

Test(auth, hmac_rfc4231)
{
	uint8_t key[131], d[32];
	char h[65];

	memset(key, 0x0b, 20);
	cs_hmac_sha256(key, 20, "Hi There", 8, d);
	hex(d, 32, h);
	cr_assert_str_eq(
		h,
		"b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");

	cs_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
	hex(d, 32, h);
	cr_assert_str_eq(
		h,
		"5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");

	memset(key, 0xaa, sizeof(key));
	cs_hmac_sha256(key, sizeof(key),
		       "Test Using Larger Than Block-Size Key - Hash Key First",
		       54, d);
	hex(d, 32, h);
	cr_assert_str_eq(
		h,
		"60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static struct cs_pkt_hdr sample(void)
{
	struct cs_pkt_hdr h = {
		.version = CS_PROTO_VERSION,
		.type = CS_PKT_DATA,
		.src = 3,
		.group = 7,
		.epoch = 2,
		.op = 99,
		.seq = 12345,
		.offset = 4096,
		.len = 64,
		.ts = 1000,
	};
	return h;
}

Test(auth, tag_roundtrip_and_forgery)
{
	uint8_t key[CS_AUTH_KEY_LEN], key2[CS_AUTH_KEY_LEN], payload[64];
	struct cs_pkt_hdr h = sample();

	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)i;
	cs_auth_epoch_key("job-token", 7, 2, key);
	h.flags |= CS_PKT_F_AUTH;
	cs_auth_tag(key, &h, payload, h.tag);
	cr_assert_eq(cs_auth_check(key, &h, payload), 0);

	/* A flipped payload bit, header field or tag bit is caught. */
	payload[17] ^= 1;
	cr_assert_eq(cs_auth_check(key, &h, payload), CS_ERR_AUTH);
	payload[17] ^= 1;
	h.offset += 8;
	cr_assert_eq(cs_auth_check(key, &h, payload), CS_ERR_AUTH);
	h.offset -= 8;
	h.tag[0] ^= 0x80;
	cr_assert_eq(cs_auth_check(key, &h, payload), CS_ERR_AUTH);
	h.tag[0] ^= 0x80;
	cr_assert_eq(cs_auth_check(key, &h, payload), 0);

	/* A packet tagged under the previous epoch's key fails. */
	cs_auth_epoch_key("job-token", 7, 1, key2);
	cr_assert(!cs_auth_equal(key, key2, sizeof(key)));
	cs_auth_tag(key2, &h, payload, h.tag);
	cr_assert_eq(cs_auth_check(key, &h, payload), CS_ERR_AUTH);

	/* Another token gives another key. */
	cs_auth_epoch_key("other-token", 7, 2, key2);
	cr_assert(!cs_auth_equal(key, key2, sizeof(key)));

	/* No tag at all is an authentication failure. */
	h.flags &= ~CS_PKT_F_AUTH;
	cr_assert_eq(cs_auth_check(key, &h, payload), CS_ERR_AUTH);
}

Test(auth, ctx_matches_one_shot)
{
	static uint8_t payload[9000];
	static const uint32_t lens[] = { 0, 1, 55, 56, 64, 1000, 9000 };
	uint8_t key[CS_AUTH_KEY_LEN], t1[CS_PROTO_TAG_LEN],
		t2[CS_PROTO_TAG_LEN];
	struct cs_auth_ctx ctx, other;
	struct cs_pkt_hdr h = sample();

	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7 + 1);
	cs_auth_epoch_key("job-token", 0, 3, key);
	cs_auth_ctx_init(&ctx, key);
	h.flags |= CS_PKT_F_AUTH;
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		h.len = lens[i];
		cs_auth_tag(key, &h, payload, t1);
		cs_auth_ctx_tag(&ctx, &h, payload, t2);
		cr_assert_arr_eq(t1, t2, sizeof(t1), "len %u", lens[i]);
		/* the context is not used up by a tag */
		cs_auth_ctx_tag(&ctx, &h, payload, t2);
		cr_assert_arr_eq(t1, t2, sizeof(t1));
		memcpy(h.tag, t1, sizeof(t1));
		cr_assert_eq(cs_auth_ctx_check(&ctx, &h, payload), 0);
		cr_assert_eq(cs_auth_check(key, &h, payload), 0);
		if (h.len) {
			payload[h.len - 1] ^= 4;
			cr_assert_eq(cs_auth_ctx_check(&ctx, &h, payload),
				     CS_ERR_AUTH);
			payload[h.len - 1] ^= 4;
		}
	}
	/* another epoch's context refuses it; no tag is refused */
	cs_auth_epoch_key("job-token", 0, 4, key);
	cs_auth_ctx_init(&other, key);
	cr_assert_eq(cs_auth_ctx_check(&other, &h, payload), CS_ERR_AUTH);
	h.flags &= (uint16_t)~CS_PKT_F_AUTH;
	cr_assert_eq(cs_auth_ctx_check(&ctx, &h, payload), CS_ERR_AUTH);
}
