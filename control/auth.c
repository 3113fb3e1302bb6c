/* SPDX-License-Identifier: MIT */
/*
 * collstack's authentication on libsodium and libcrypto: keyed BLAKE2b for
 * the control plane (bootstrap handshake, etcd records), a KDF for
 * per-purpose and per-epoch keys from the job token, and two packet tags.
 *
 * AES-256-GMAC (AES-256-GCM with the frame as additional data and no
 * plaintext: libcrypto's GCM mode, CRYPTO_gcm128_*, whose GHASH uses
 * PCLMULQDQ, over an EVP AES-256-ECB context, AES-NI, for its block
 * cipher) is the fast one: 15.3-15.6 GB/s per core on 8896-byte frames
 * here against 2.8 for SipHash and 4.2 for libsodium's own AES-GCM, which
 * takes the additional data in one piece only (docs/bench-auth.md). The
 * mode is driven directly rather than through EVP's AES-256-GCM because
 * EVP's per-frame calls (a new IV, the tag as an OSSL_PARAM) cost about
 * 100 ns of lookups per frame, as much as GHASH of a 1,472-byte payload
 * (docs/bench-auth.md). It needs an IV that never repeats under
 * a key: every frame carries a nonce (a random sender instance id and a
 * counter) and every sender instance has its own key, derived from the
 * instance id (cs_auth_gmac_sender_key(); the argument: docs/auth.md).
 *
 * SipHash-2-4-128 is the tag where the CPU has no AES-NI (without it
 * libcrypto's AES is slow): among libsodium's MACs that need no nonce it
 * is the fast one (~2.9 GB/s, against 0.35 for HMAC-SHA-256, 0.57 for
 * keyed BLAKE2b). SipHash is a PRF under a 128-bit key; a PRF is a MAC.
 *
 * libsodium's SipHash is one-shot, and a frame's header fields and payload
 * lie in two places (the payload may be the trainer's memory, sent zero
 * copy), so the tag is a cascade of two PRFs, which needs no copy:
 *
 *	tag = SipHash128(k_hdr, hdr_fields || SipHash128(k_pl, payload))
 *
 * A forgery needs either the outer PRF's output for a new input or two
 * payloads with the same inner output under a secret key (a 128-bit PRF
 * collision). A frame without payload hashes only its header fields (their
 * length field says there is none).
 */
#include <assert.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/modes.h>

#include <collstack/types.h>

#include "auth.h"

static_assert(CS_PROTO_TAG_LEN == crypto_shorthash_siphashx24_BYTES,
	      "a tag is one SipHash-128 output");
static_assert(crypto_shorthash_siphashx24_KEYBYTES == 16, "SipHash key");
static_assert(CS_AUTH_KEY_LEN == 2 * crypto_shorthash_siphashx24_KEYBYTES,
	      "an epoch key holds the header and the payload keys");
static_assert(CS_MAC_LEN == crypto_generichash_BYTES, "MAC length");
static_assert(crypto_kdf_KEYBYTES == crypto_generichash_BYTES,
	      "BLAKE2b-256 of the token is the master key");
static_assert(crypto_kdf_CONTEXTBYTES == 8, "an 8-byte purpose");
static_assert(CS_AUTH_GMAC_KEY_LEN == crypto_generichash_BYTES,
	      "a sender key is one BLAKE2b-256 output");
static_assert(CS_PROTO_SID_LEN + 4 == CS_PROTO_NONCE_LEN,
	      "a nonce is the sender instance and a 32-bit counter");

#define HDR_FIELDS 17
#define HDR_BYTES (HDR_FIELDS * 8)

int cs_auth_init(void)
{
	/* 0: started now, 1: already started */
	return sodium_init() < 0 ? -EIO : 0;
}

bool cs_auth_gmac_fast(void)
{
	(void)cs_auth_init();
	return crypto_aead_aes256gcm_is_available() != 0;
}

enum cs_auth_mac cs_auth_mac_auto(void)
{
	return cs_auth_gmac_fast() ? CS_AUTH_GMAC : CS_AUTH_SIPHASH;
}

const char *cs_auth_mac_name(enum cs_auth_mac m)
{
	return m == CS_AUTH_GMAC ? "gmac-aes256-openssl"
				 : "siphash128-libsodium";
}

const char *cs_auth_impl(void)
{
	return cs_auth_mac_name(cs_auth_mac_auto());
}

/* Subkey @id of the job token for purpose @ctx (crypto_kdf: BLAKE2b keyed
 * with BLAKE2b-256(token), @id as salt, @ctx as personalisation). */
static void token_subkey(const char *token, uint64_t id, const char ctx[8],
			 uint8_t *key, size_t len)
{
	uint8_t master[crypto_kdf_KEYBYTES];

	(void)cs_auth_init();
	crypto_generichash(master, sizeof(master), (const uint8_t *)token,
			   strlen(token), NULL, 0);
	crypto_kdf_derive_from_key(key, len, id, ctx, master);
	sodium_memzero(master, sizeof(master));
}

void cs_mac_init(struct cs_mac *m, const char *token, const char ctx[8])
{
	uint8_t key[crypto_generichash_KEYBYTES];

	token_subkey(token, 0, ctx, key, sizeof(key));
	crypto_generichash_init(&m->st, key, sizeof(key), CS_MAC_LEN);
	sodium_memzero(key, sizeof(key));
}

void cs_mac_update(struct cs_mac *m, const void *data, size_t len)
{
	crypto_generichash_update(&m->st, data, len);
}

void cs_mac_final(struct cs_mac *m, uint8_t out[CS_MAC_LEN])
{
	crypto_generichash_final(&m->st, out, CS_MAC_LEN);
	sodium_memzero(&m->st, sizeof(m->st));
}

bool cs_auth_equal(const void *a, const void *b, size_t len)
{
	/* every frame's tag is checked here: libsodium's fixed-size
	 * compares are vectorised (sodium_memcmp goes byte by byte,
	 * 1.2-1.6 % of the sidecars' CPU in docs/frame-cost.md's udp runs);
	 * all three take the same time whatever the bytes */
	if (len == crypto_verify_16_BYTES)
		return crypto_verify_16(a, b) == 0;
	if (len == crypto_verify_32_BYTES)
		return crypto_verify_32(a, b) == 0;
	return sodium_memcmp(a, b, len) == 0;
}

void cs_auth_epoch_key(const char *token, uint32_t group, uint32_t epoch,
		       uint8_t key[CS_AUTH_KEY_LEN])
{
	token_subkey(token, (uint64_t)group << 32 | epoch, "csepoch1", key,
		     CS_AUTH_KEY_LEN);
}

/* The header fields the tag covers, big-endian 64-bit each, in a fixed
 * order, with room after them for the payload's inner hash. (One
 * 8-byte store per field: written byte by byte this was 8 % of a
 * sidecar's CPU at MTU 1500.) */
static size_t hdr_bytes(const struct cs_pkt_hdr *h, uint8_t *o)
{
	const uint64_t v[HDR_FIELDS] = {
		h->version, h->type, h->flags,	h->src, h->channel, h->group,
		h->epoch,   h->op,   h->step,	h->seq, h->ack,	    h->sack,
		h->offset,  h->len,  h->credit, h->ts,	h->ts_echo,
	};

	for (unsigned i = 0; i < HDR_FIELDS; i++) {
		uint64_t be = htobe64(v[i]);

		memcpy(o + 8 * i, &be, sizeof(be));
	}
	return HDR_BYTES;
}

void cs_auth_ctx_init(struct cs_auth_ctx *c, const uint8_t key[CS_AUTH_KEY_LEN])
{
	memcpy(c->k_hdr, key, sizeof(c->k_hdr));
	memcpy(c->k_pl, key + sizeof(c->k_hdr), sizeof(c->k_pl));
}

void cs_auth_ctx_tag(const struct cs_auth_ctx *c, const struct cs_pkt_hdr *h,
		     const void *payload, uint8_t tag[CS_PROTO_TAG_LEN])
{
	uint8_t buf[HDR_BYTES + CS_PROTO_TAG_LEN];
	size_t n = hdr_bytes(h, buf);

	if (h->len && payload) {
		crypto_shorthash_siphashx24(buf + n, payload, h->len, c->k_pl);
		n += CS_PROTO_TAG_LEN;
	}
	crypto_shorthash_siphashx24(tag, buf, n, c->k_hdr);
}

int cs_auth_ctx_check(const struct cs_auth_ctx *c, const struct cs_pkt_hdr *h,
		      const void *payload)
{
	uint8_t tag[CS_PROTO_TAG_LEN];

	if (!(h->flags & CS_PKT_F_AUTH))
		return CS_ERR_AUTH;
	cs_auth_ctx_tag(c, h, payload, tag);
	return cs_auth_equal(tag, h->tag, sizeof(tag)) ? 0 : CS_ERR_AUTH;
}

void cs_auth_tag(const uint8_t key[CS_AUTH_KEY_LEN], const struct cs_pkt_hdr *h,
		 const void *payload, uint8_t tag[CS_PROTO_TAG_LEN])
{
	struct cs_auth_ctx c;

	cs_auth_ctx_init(&c, key);
	cs_auth_ctx_tag(&c, h, payload, tag);
	sodium_memzero(&c, sizeof(c));
}

int cs_auth_check(const uint8_t key[CS_AUTH_KEY_LEN],
		  const struct cs_pkt_hdr *h, const void *payload)
{
	struct cs_auth_ctx c;
	int ret;

	cs_auth_ctx_init(&c, key);
	ret = cs_auth_ctx_check(&c, h, payload);
	sodium_memzero(&c, sizeof(c));
	return ret;
}

/* ---- AES-256-GMAC ------------------------------------------------------ */

void cs_auth_gmac_epoch_key(const char *token, uint32_t group, uint32_t epoch,
			    uint8_t key[CS_AUTH_GMAC_KEY_LEN])
{
	token_subkey(token, (uint64_t)group << 32 | epoch, "csgmac01", key,
		     CS_AUTH_GMAC_KEY_LEN);
}

void cs_auth_gmac_sender_key(const uint8_t ekey[CS_AUTH_GMAC_KEY_LEN],
			     uint16_t src, const uint8_t *sid,
			     uint8_t key[CS_AUTH_GMAC_KEY_LEN])
{
	uint8_t in[2 + CS_PROTO_SID_LEN];

	in[0] = (uint8_t)(src >> 8);
	in[1] = (uint8_t)src;
	memcpy(in + 2, sid, CS_PROTO_SID_LEN);
	crypto_generichash(key, CS_AUTH_GMAC_KEY_LEN, in, sizeof(in), ekey,
			   CS_AUTH_GMAC_KEY_LEN);
}

/* The GCM mode's block cipher: one AES-256 block through the ECB context.
 * A failure (none is expected: a loaded ECB context and 16 bytes) is
 * remembered, and cs_gmac_tag() then refuses the tag. */
struct cs_gmac_aes {
	EVP_CIPHER_CTX *ecb;
	bool failed;
};

static void gmac_block(const unsigned char in[16], unsigned char out[16],
		       const void *key)
{
	struct cs_gmac_aes *a = (struct cs_gmac_aes *)key;
	int outl;

	if (EVP_EncryptUpdate(a->ecb, out, &outl, in, 16) != 1 || outl != 16) {
		memset(out, 0, 16);
		a->failed = true;
	}
}

int cs_gmac_init(struct cs_gmac *g, const uint8_t key[CS_AUTH_GMAC_KEY_LEN])
{
	struct cs_gmac_aes *a = calloc(1, sizeof(*a));

	g->aes = NULL;
	g->gcm = NULL;
	if (!a)
		return -ENOMEM;
	a->ecb = EVP_CIPHER_CTX_new();
	if (!a->ecb) {
		free(a);
		return -ENOMEM;
	}
	if (EVP_EncryptInit_ex(a->ecb, EVP_aes_256_ecb(), NULL, key, NULL) !=
		    1 ||
	    EVP_CIPHER_CTX_set_padding(a->ecb, 0) != 1) {
		EVP_CIPHER_CTX_free(a->ecb);
		free(a);
		return -EIO;
	}
	/* H = AES(K, 0) and the GHASH tables, computed once per key */
	g->gcm = CRYPTO_gcm128_new(a, gmac_block);
	if (!g->gcm || a->failed) {
		int ret = g->gcm ? -EIO : -ENOMEM;

		CRYPTO_gcm128_release(g->gcm);
		g->gcm = NULL;
		EVP_CIPHER_CTX_free(a->ecb);
		free(a);
		return ret;
	}
	g->aes = a;
	return 0;
}

int cs_gmac_setkey(struct cs_gmac *g, const uint8_t key[CS_AUTH_GMAC_KEY_LEN])
{
	struct cs_gmac_aes *a = g->aes;

	a->failed = EVP_EncryptInit_ex(a->ecb, NULL, NULL, key, NULL) != 1;
	if (!a->failed)
		CRYPTO_gcm128_init(g->gcm, a, gmac_block);
	return a->failed ? -EIO : 0;
}

void cs_gmac_fini(struct cs_gmac *g)
{
	struct cs_gmac_aes *a = g->aes;

	/* both cleanse what they free: the GHASH key and the key schedule */
	CRYPTO_gcm128_release(g->gcm);
	g->gcm = NULL;
	if (a) {
		EVP_CIPHER_CTX_free(a->ecb);
		free(a);
	}
	g->aes = NULL;
}

/*
 * The payload as additional data in pieces of GMAC_PIECE bytes, each cut
 * so that GHASH gets whole blocks (the header left @carry bytes of a
 * block; without the cut every piece would hash a partial block apart),
 * and before each piece the same span of @next (the frame tagged after
 * this one) is prefetched: its misses are served while GHASH works on
 * this frame, so the next tag reads a payload that is already in cache
 * (docs/bench-auth.md: a payload not in cache cost as much again as the
 * hashing itself). Prefetches are hints: they never fault, whatever
 * @next points to, and change no result.
 */
#define GMAC_PIECE 1024u

static int gmac_aad_payload(GCM128_CONTEXT *gcm, const uint8_t *p, size_t len,
			    size_t carry, const uint8_t *next, size_t nlen)
{
	size_t off = 0, n = (16 - carry % 16) % 16 + GMAC_PIECE;

	if (!next || !nlen)
		return CRYPTO_gcm128_aad(gcm, p, len);
	while (off < len) {
		if (n > len - off)
			n = len - off;
		for (size_t k = off; k < off + n && k < nlen; k += 64)
			__builtin_prefetch(next + k, 0, 3);
		if (CRYPTO_gcm128_aad(gcm, p + off, n))
			return -1;
		off += n;
		n = GMAC_PIECE;
	}
	/* a next payload longer than this one: the rest of it */
	for (size_t k = len; k < nlen; k += 64)
		__builtin_prefetch(next + k, 0, 3);
	return 0;
}

int cs_gmac_tag_next(struct cs_gmac *g, uint32_t ctr,
		     const struct cs_pkt_hdr *h, const void *payload,
		     const void *next, uint32_t next_len,
		     uint8_t tag[CS_PROTO_TAG_LEN])
{
	struct cs_gmac_aes *a = g->aes;
	uint8_t iv[12] = { 0 }, buf[HDR_BYTES];
	size_t n = hdr_bytes(h, buf);

	iv[8] = (uint8_t)(ctr >> 24);
	iv[9] = (uint8_t)(ctr >> 16);
	iv[10] = (uint8_t)(ctr >> 8);
	iv[11] = (uint8_t)ctr;
	/* a new IV under the loaded key; the additional data in two
	 * pieces (GHASH carries a partial block over), no plaintext:
	 * GCM's tag is then GMAC of fields || payload */
	CRYPTO_gcm128_setiv(g->gcm, iv, sizeof(iv));
	if (CRYPTO_gcm128_aad(g->gcm, buf, n) ||
	    (h->len && payload &&
	     gmac_aad_payload(g->gcm, payload, h->len, n, next, next_len)) ||
	    a->failed)
		return -EIO;
	CRYPTO_gcm128_tag(g->gcm, tag, CS_PROTO_TAG_LEN);
	return 0;
}

int cs_gmac_tag(struct cs_gmac *g, uint32_t ctr, const struct cs_pkt_hdr *h,
		const void *payload, uint8_t tag[CS_PROTO_TAG_LEN])
{
	return cs_gmac_tag_next(g, ctr, h, payload, NULL, 0, tag);
}

int cs_auth_gmac_tag(const uint8_t ekey[CS_AUTH_GMAC_KEY_LEN],
		     const struct cs_pkt_hdr *h, const void *payload,
		     uint8_t tag[CS_PROTO_TAG_LEN])
{
	uint8_t key[CS_AUTH_GMAC_KEY_LEN];
	struct cs_gmac g;
	int ret;

	cs_auth_gmac_sender_key(ekey, h->src, h->nonce, key);
	ret = cs_gmac_init(&g, key);
	sodium_memzero(key, sizeof(key));
	if (ret)
		return ret;
	ret = cs_gmac_tag(&g, cs_auth_nonce_ctr(h->nonce), h, payload, tag);
	cs_gmac_fini(&g);
	return ret;
}

int cs_auth_gmac_check(const uint8_t ekey[CS_AUTH_GMAC_KEY_LEN],
		       const struct cs_pkt_hdr *h, const void *payload)
{
	uint8_t tag[CS_PROTO_TAG_LEN];

	if ((h->flags & (CS_PKT_F_AUTH | CS_PKT_F_GMAC)) !=
	    (CS_PKT_F_AUTH | CS_PKT_F_GMAC))
		return CS_ERR_AUTH;
	if (cs_auth_gmac_tag(ekey, h, payload, tag))
		return CS_ERR_AUTH;
	return cs_auth_equal(tag, h->tag, sizeof(tag)) ? 0 : CS_ERR_AUTH;
}
