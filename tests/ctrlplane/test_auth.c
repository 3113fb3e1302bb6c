/* SPDX-License-Identifier: MIT */
/* libsodium's primitives, control MAC known answers, epoch keys, tags. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <collstack/types.h>

#include "control/auth.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/*
 * The library's SipHash-2-4-128 gives the reference vectors of the SipHash
 * authors (key 00..0f; messages 00..n-1).
 */
Test(auth, siphash128_reference)
{
	uint8_t key[16], msg[15], out[16];
	char h[33];

	cr_assert_eq(cs_auth_init(), 0);
	for (unsigned i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (unsigned i = 0; i < 15; i++)
		msg[i] = (uint8_t)i;
	crypto_shorthash_siphashx24(out, msg, 0, key);
	hex(out, 16, h);
	cr_assert_str_eq(h, "a3817f04ba25a8e66df67214c7550293");
	crypto_shorthash_siphashx24(out, msg, 15, key);
	hex(out, 16, h);
	cr_assert_str_eq(h, "5493e99933b0a8117e08ec0f97cfc3d9");
}

/* cs_mac over @len bytes of @msg in one piece. */
static void mac1(const char *token, const char *ctx, const void *msg,
		 size_t len, uint8_t out[CS_MAC_LEN])
{
	struct cs_mac m;

	cs_mac_init(&m, token, ctx);
	cs_mac_update(&m, msg, len);
	cs_mac_final(&m, out);
}

/*
 * The control plane's MAC (keyed BLAKE2b-256 under a purpose's subkey of
 * the token) against tests/netns/cs_auth.py's mac(), written from
 * libsodium's documentation with Python's hashlib; pieces and purposes.
 */
Test(auth, control_mac_known_answers)
{
	uint8_t msg[7 + 64], d[CS_MAC_LEN], d2[CS_MAC_LEN];
	struct cs_mac m;
	char h[2 * CS_MAC_LEN + 1];

	memcpy(msg, "cs-join", 7);
	for (unsigned i = 0; i < 64; i++)
		msg[7 + i] = (uint8_t)i;
	mac1("job-token", "csjoin01", msg, sizeof(msg), d);
	hex(d, sizeof(d), h);
	cr_assert_str_eq(h, "4c09d4e1294554556c5434450a708b9d"
			    "12e00bda757353783348ee70ccb8d7c6");
	/* the same bytes in pieces */
	cs_mac_init(&m, "job-token", "csjoin01");
	cs_mac_update(&m, msg, 7);
	cs_mac_update(&m, msg + 7, 30);
	cs_mac_update(&m, msg + 37, sizeof(msg) - 37);
	cs_mac_final(&m, d2);
	cr_assert_arr_eq(d, d2, sizeof(d));
	/* another purpose: an unrelated MAC */
	mac1("job-token", "csetcd01", msg, sizeof(msg), d2);
	hex(d2, sizeof(d2), h);
	cr_assert_str_eq(h, "1f39faeff3c34f9d7f27776387b7dcf6"
			    "4405afbb583e721261d0e423ff9c6481");
	/* another token */
	mac1("job-tokeN", "csjoin01", msg, sizeof(msg), d2);
	cr_assert(!cs_auth_equal(d, d2, sizeof(d)));
}

/* Equal and unequal at the tag's and the MAC's sizes and another size,
 * a difference in the first, a middle and the last byte. */
Test(auth, equal_at_every_size_and_position)
{
	static const size_t lens[] = { 16, 32, 7, 1 };
	uint8_t a[32], b[32];

	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		size_t n = lens[k], step = n > 2 ? n / 2 : 1;

		for (size_t i = 0; i < n; i++)
			a[i] = b[i] = (uint8_t)(0x5a + 7 * i);
		cr_assert(cs_auth_equal(a, b, n), "len %zu", n);
		for (size_t pos = 0; pos < n; pos += step) {
			b[pos] ^= 0x80;
			cr_assert(!cs_auth_equal(a, b, n), "len %zu pos %zu", n,
				  pos);
			b[pos] ^= 0x80;
		}
		b[n - 1] ^= 1;
		cr_assert(!cs_auth_equal(a, b, n), "len %zu last", n);
	}
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

/*
 * The key derivation and the tag as docs/auth.md writes them, checked
 * against an independent implementation (Python: hashlib's BLAKE2b and a
 * SipHash written from the paper; tests/netns/test_failure.sh has it).
 */
Test(auth, tag_known_answers)
{
	uint8_t key[CS_AUTH_KEY_LEN], payload[64], tag[CS_PROTO_TAG_LEN];
	struct cs_pkt_hdr h = sample();
	char x[2 * CS_AUTH_KEY_LEN + 1];

	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)i;
	cs_auth_epoch_key("job-token", 7, 2, key);
	hex(key, sizeof(key), x);
	cr_assert_str_eq(x, "06bb611791938c3a540ba845bb5b737c"
			    "305cddc38e3bb135d5cffec12f0c42a4");
	h.flags |= CS_PKT_F_AUTH;
	cs_auth_tag(key, &h, payload, tag);
	hex(tag, sizeof(tag), x);
	cr_assert_str_eq(x, "f6de29143e9d8b3108a64c9ca833ea7e");
	h.len = 0; /* a pure ACK: header fields only */
	cs_auth_tag(key, &h, NULL, tag);
	hex(tag, sizeof(tag), x);
	cr_assert_str_eq(x, "c5363a679fd5b4cd6d14bc279921efb0");
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

/* ---- AES-256-GMAC tags ------------------------------------------------- */

/* sample() as a GMAC frame: flags AUTH | GMAC, nonce a0..ab || be32(5). */
static struct cs_pkt_hdr gmac_sample(void)
{
	struct cs_pkt_hdr h = sample();

	h.flags |= CS_PKT_F_AUTH | CS_PKT_F_GMAC;
	for (unsigned i = 0; i < CS_PROTO_SID_LEN; i++)
		h.nonce[i] = (uint8_t)(0xa0 + i);
	h.nonce[15] = 5;
	return h;
}

/*
 * G(epoch), the sender key and the tag as docs/auth.md writes them,
 * against tests/netns/cs_auth.py (AES from FIPS 197 and GCM from SP
 * 800-38D in plain Python, checked there against their known answers).
 */
Test(auth, gmac_known_answers)
{
	uint8_t key[CS_AUTH_GMAC_KEY_LEN], payload[64], tag[CS_PROTO_TAG_LEN];
	struct cs_pkt_hdr h = gmac_sample();
	char x[2 * CS_AUTH_GMAC_KEY_LEN + 1];

	cr_assert_eq(cs_auth_init(), 0);
	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)i;
	cs_auth_gmac_epoch_key("job-token", 7, 2, key);
	hex(key, sizeof(key), x);
	cr_assert_str_eq(x, "5ec7362e3e7cf5d0d63c64a28bbbde08"
			    "ee408e37a67711bfddd09d0933ff79ce");
	cr_assert_eq(cs_auth_nonce_ctr(h.nonce), 5);
	cr_assert_eq(cs_auth_gmac_tag(key, &h, payload, tag), 0);
	hex(tag, sizeof(tag), x);
	cr_assert_str_eq(x, "ef11c9d1bd138f0eb8028e750e0e26c9");
	h.len = 0; /* a pure ACK: header fields only */
	cr_assert_eq(cs_auth_gmac_tag(key, &h, NULL, tag), 0);
	hex(tag, sizeof(tag), x);
	cr_assert_str_eq(x, "0e3d2e91d7e547954524b043dd6492d5");
}

Test(auth, gmac_roundtrip_and_forgery)
{
	uint8_t key[CS_AUTH_GMAC_KEY_LEN], key2[CS_AUTH_GMAC_KEY_LEN],
		payload[64];
	struct cs_pkt_hdr h = gmac_sample();

	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)i;
	cs_auth_gmac_epoch_key("job-token", 7, 2, key);
	cr_assert_eq(cs_auth_gmac_tag(key, &h, payload, h.tag), 0);
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), 0);

	/* a flipped payload bit, header field, tag bit, sender instance
	 * byte or counter bit is caught */
	payload[63] ^= 1;
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), CS_ERR_AUTH);
	payload[63] ^= 1;
	h.seq++;
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), CS_ERR_AUTH);
	h.seq--;
	h.src++; /* another sender's key */
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), CS_ERR_AUTH);
	h.src--;
	h.tag[15] ^= 0x80;
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), CS_ERR_AUTH);
	h.tag[15] ^= 0x80;
	h.nonce[0] ^= 1;
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), CS_ERR_AUTH);
	h.nonce[0] ^= 1;
	h.nonce[15] ^= 1;
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), CS_ERR_AUTH);
	h.nonce[15] ^= 1;
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), 0);

	/* the previous epoch's key, another token's, the SipHash key of
	 * the same epoch: all refused */
	cs_auth_gmac_epoch_key("job-token", 7, 1, key2);
	cr_assert_eq(cs_auth_gmac_check(key2, &h, payload), CS_ERR_AUTH);
	cs_auth_gmac_epoch_key("other-token", 7, 2, key2);
	cr_assert_eq(cs_auth_gmac_check(key2, &h, payload), CS_ERR_AUTH);
	cs_auth_epoch_key("job-token", 7, 2, key2);
	cr_assert(!cs_auth_equal(key, key2, sizeof(key)));
	cr_assert_eq(cs_auth_check(key2, &h, payload), CS_ERR_AUTH);

	/* the flags are covered: without GMAC or AUTH it is no GMAC frame,
	 * and the same tag over a SipHash layout does not verify */
	h.flags &= (uint16_t)~CS_PKT_F_GMAC;
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), CS_ERR_AUTH);
	h.flags |= CS_PKT_F_GMAC;
	h.flags &= (uint16_t)~CS_PKT_F_AUTH;
	cr_assert_eq(cs_auth_gmac_check(key, &h, payload), CS_ERR_AUTH);
}

/* A loaded context gives the one-shot tags, frame after frame, and a new
 * key loaded into it (no allocation) gives that key's. */
Test(auth, gmac_ctx_matches_one_shot)
{
	static uint8_t payload[9000];
	static const uint32_t lens[] = { 0, 1, 15, 16, 17, 64, 1000, 9000 };
	uint8_t ekey[CS_AUTH_GMAC_KEY_LEN], skey[CS_AUTH_GMAC_KEY_LEN],
		t1[CS_PROTO_TAG_LEN], t2[CS_PROTO_TAG_LEN];
	struct cs_pkt_hdr h = gmac_sample();
	struct cs_gmac g;

	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7 + 1);
	cs_auth_gmac_epoch_key("job-token", 0, 3, ekey);
	cs_auth_gmac_sender_key(ekey, h.src, h.nonce, skey);
	cr_assert_eq(cs_gmac_init(&g, skey), 0);
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		h.len = lens[i];
		h.nonce[15] = (uint8_t)i;
		cr_assert_eq(cs_auth_gmac_tag(ekey, &h, payload, t1), 0);
		cr_assert_eq(cs_gmac_tag(&g, i, &h, payload, t2), 0);
		cr_assert_arr_eq(t1, t2, sizeof(t1), "len %u", lens[i]);
		/* another counter: another tag */
		cr_assert_eq(cs_gmac_tag(&g, i + 1, &h, payload, t2), 0);
		cr_assert(!cs_auth_equal(t1, t2, sizeof(t1)));
	}
	/* another instance's key, loaded into the same context */
	h.nonce[3] ^= 0x10;
	cs_auth_gmac_sender_key(ekey, h.src, h.nonce, skey);
	cr_assert_eq(cs_gmac_setkey(&g, skey), 0);
	cr_assert_eq(cs_auth_gmac_tag(ekey, &h, payload, t1), 0);
	cr_assert_eq(
		cs_gmac_tag(&g, cs_auth_nonce_ctr(h.nonce), &h, payload, t2),
		0);
	cr_assert_arr_eq(t1, t2, sizeof(t1));
	cs_gmac_fini(&g);
	cs_gmac_fini(&g); /* idempotent */
}

/*
 * cs_gmac_tag_next() hashes the payload in pieces while it prefetches the
 * next one: the same tag as cs_gmac_tag() (one piece) for every length,
 * around the pieces' edges (1,024 bytes after the 8 that complete the
 * header's last block) too, whatever @next points to: nothing, this
 * payload, another, a shorter or longer one, or memory that cannot be
 * read (a prefetch is a hint and never faults). A byte changed in any
 * piece changes the tag.
 */
Test(auth, gmac_tag_next_matches_one_piece)
{
	static uint8_t payload[9100], other[9100];
	static const uint32_t lens[] = { 0,    1,    7,	   8,	 9,    24,
					 1031, 1032, 1033, 2055, 2056, 2057,
					 4000, 8895, 8896, 8897, 9000 };
	uint8_t skey[CS_AUTH_GMAC_KEY_LEN], t1[CS_PROTO_TAG_LEN],
		t2[CS_PROTO_TAG_LEN];
	struct cs_pkt_hdr h = gmac_sample();
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *none = mmap(NULL, (size_t)pg, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct cs_gmac g;

	cr_assert_neq(none, MAP_FAILED);
	for (unsigned i = 0; i < sizeof(payload); i++) {
		payload[i] = (uint8_t)(i * 11 + 3);
		other[i] = (uint8_t)(i * 5 + 9);
	}
	memset(skey, 0x5a, sizeof(skey));
	cr_assert_eq(cs_gmac_init(&g, skey), 0);
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		const void *next[] = { NULL, payload, other, other + 1, none };
		const uint32_t nlen[] = { 0, lens[i], 9000, 17, 9000 };

		h.len = lens[i];
		cr_assert_eq(cs_gmac_tag(&g, 1000 + i, &h, payload, t1), 0);
		for (unsigned j = 0; j < 5; j++) {
			cr_assert_eq(cs_gmac_tag_next(&g, 1000 + i, &h, payload,
						      next[j], nlen[j], t2),
				     0);
			cr_assert_arr_eq(t1, t2, sizeof(t1), "len %u, next %u",
					 lens[i], j);
		}
		/* a byte changed in the last piece, then in the first */
		for (uint32_t at = lens[i]; at-- > 0 && at + 2 > lens[i];) {
			payload[at] ^= 0x01;
			cr_assert_eq(cs_gmac_tag_next(&g, 1000 + i, &h, payload,
						      other, 9000, t2),
				     0);
			cr_assert(!cs_auth_equal(t1, t2, sizeof(t1)),
				  "len %u, byte %u", lens[i], at);
			payload[at] ^= 0x01;
		}
		if (lens[i]) {
			payload[0] ^= 0x80;
			cr_assert_eq(cs_gmac_tag_next(&g, 1000 + i, &h, payload,
						      other, 9000, t2),
				     0);
			cr_assert(!cs_auth_equal(t1, t2, sizeof(t1)));
			payload[0] ^= 0x80;
		}
	}
	/* the known answer of gmac_known_answers, through the pieces */
	{
		uint8_t ekey[CS_AUTH_GMAC_KEY_LEN], pl[64];
		struct cs_pkt_hdr k = gmac_sample();
		struct cs_gmac kg;
		char x[2 * CS_PROTO_TAG_LEN + 1];

		for (unsigned i = 0; i < sizeof(pl); i++)
			pl[i] = (uint8_t)i;
		cs_auth_gmac_epoch_key("job-token", 7, 2, ekey);
		cs_auth_gmac_sender_key(ekey, k.src, k.nonce, skey);
		cr_assert_eq(cs_gmac_init(&kg, skey), 0);
		cr_assert_eq(cs_gmac_tag_next(&kg, cs_auth_nonce_ctr(k.nonce),
					      &k, pl, payload, 9000, t2),
			     0);
		hex(t2, sizeof(t2), x);
		cr_assert_str_eq(x, "ef11c9d1bd138f0eb8028e750e0e26c9");
		cs_gmac_fini(&kg);
	}
	cs_gmac_fini(&g);
	munmap(none, (size_t)pg);
}
