/* SPDX-License-Identifier: MIT */
/*
 * Authentication primitives from libsodium and OpenSSL's libcrypto: the
 * token-keyed MAC of the bootstrap handshake and the etcd records (keyed
 * BLAKE2b), the per-epoch packet keys derived from the job token, and
 * packet tags: AES-256-GMAC with a per-frame nonce where the CPU has
 * AES-NI, SipHash-2-4-128 otherwise (docs/auth.md).
 */
#ifndef CS_CONTROL_AUTH_H
#define CS_CONTROL_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sodium.h>

#include "internal/proto.h"

#define CS_MAC_LEN 32 /* a control-plane MAC: BLAKE2b-256 */
#define CS_AUTH_KEY_LEN 32 /* an epoch key: two 128-bit SipHash keys */
#define CS_AUTH_GMAC_KEY_LEN 32 /* an AES-256 key */

/**
 * cs_auth_init - make libsodium ready (idempotent, thread-safe)
 * Returns: 0, or -EIO when libsodium cannot start.
 */
int cs_auth_init(void);

/* The two tag codes (CS_PKT_F_GMAC on the wire says which one). */
enum cs_auth_mac {
	CS_AUTH_SIPHASH, /* SipHash-2-4-128 (libsodium), no nonce */
	CS_AUTH_GMAC, /* AES-256-GMAC (libcrypto), per-frame nonce */
};

/**
 * cs_auth_gmac_fast - this CPU has AES-NI and PCLMULQDQ (libsodium's
 * crypto_aead_aes256gcm_is_available()), so AES-GMAC is the fast tag here
 */
bool cs_auth_gmac_fast(void);

/**
 * cs_auth_mac_auto - the tag code chosen for this CPU: CS_AUTH_GMAC with
 * AES-NI and PCLMULQDQ, else CS_AUTH_SIPHASH
 */
enum cs_auth_mac cs_auth_mac_auto(void);

/**
 * cs_auth_mac_name - a tag code's name in logs and stats:
 * "gmac-aes256-openssl" or "siphash128-libsodium"
 */
const char *cs_auth_mac_name(enum cs_auth_mac m);

/**
 * cs_auth_impl - the name of cs_auth_mac_auto()'s code, for logs
 */
const char *cs_auth_impl(void);

/*
 * A control-plane MAC over pieces: keyed BLAKE2b-256 (libsodium's
 * crypto_generichash) under a key derived from the job token for one
 * purpose (@ctx, 8 bytes: "csjoin01" for the bootstrap's
 * challenge-response, "csetcd01" for the etcd records), so the token
 * itself keys nothing and the purposes' MACs are unrelated.
 */
struct cs_mac {
	crypto_generichash_state st;
};

/**
 * cs_mac_init - start a MAC
 * @m: out
 * @token: the job token
 * @ctx: purpose, exactly 8 characters
 */
void cs_mac_init(struct cs_mac *m, const char *token, const char ctx[8]);
void cs_mac_update(struct cs_mac *m, const void *data, size_t len);
void cs_mac_final(struct cs_mac *m, uint8_t out[CS_MAC_LEN]);

/**
 * cs_auth_equal - constant-time comparison of two byte strings
 * Returns: true when equal.
 */
bool cs_auth_equal(const void *a, const void *b, size_t len);

/**
 * cs_auth_epoch_key - derive the packet key of one group epoch
 * @token: the job token (secret shared by every member)
 * @group: group id
 * @epoch: group epoch; a new epoch gives an unrelated key, so packets of an
 *         older epoch fail authentication as well as the epoch check
 * @key: out, CS_AUTH_KEY_LEN bytes:
 *       crypto_kdf_derive_from_key(id = group << 32 | epoch,
 *       context "csepoch1", master = BLAKE2b-256(token))
 */
void cs_auth_epoch_key(const char *token, uint32_t group, uint32_t epoch,
		       uint8_t key[CS_AUTH_KEY_LEN]);

/**
 * cs_auth_tag - compute a packet's tag
 * @key: epoch key from cs_auth_epoch_key(): k_hdr (first 16 bytes) and
 *       k_pl (last 16)
 * @h: header (h->tag is ignored)
 * @payload: h->len bytes (may be NULL when h->len is 0)
 * @tag: out, CS_PROTO_TAG_LEN (16) bytes:
 *       SipHash-2-4-128(k_hdr, header fields || SipHash-2-4-128(k_pl,
 *       payload)); with no payload only the header fields are hashed
 */
void cs_auth_tag(const uint8_t key[CS_AUTH_KEY_LEN], const struct cs_pkt_hdr *h,
		 const void *payload, uint8_t tag[CS_PROTO_TAG_LEN]);

/**
 * cs_auth_check - verify the tag of a received packet
 * Returns: 0 when it matches, CS_ERR_AUTH when it does not or the packet
 * carries no tag.
 */
int cs_auth_check(const uint8_t key[CS_AUTH_KEY_LEN],
		  const struct cs_pkt_hdr *h, const void *payload);

/*
 * AES-256-GMAC tags (CS_PKT_F_GMAC; docs/auth.md, "The GMAC tag"):
 *
 *   G(epoch)      = crypto_kdf_derive_from_key(32, group << 32 | epoch,
 *                                              "csgmac01", BLAKE2b(token))
 *   K(src, sid)   = BLAKE2b-256(key = G(epoch), be16(src) || sid)
 *   nonce (wire)  = sid (12 random bytes) || be32(ctr)
 *   tag           = AES-256-GCM(K(src, sid), IV = 0^64 || be32(ctr),
 *                               plaintext empty, AAD = fields || payload)
 *
 * Each sender instance (an lcore's sending state for one epoch) draws a
 * fresh random sid and counts ctr up from 0, never past 2^32 - 1: a key
 * never sees one IV twice (the argument: docs/auth.md).
 */

/**
 * cs_auth_gmac_epoch_key - derive G(epoch) of a group epoch
 * @token: the job token
 * @group: group id
 * @epoch: group epoch
 * @key: out, CS_AUTH_GMAC_KEY_LEN bytes
 */
void cs_auth_gmac_epoch_key(const char *token, uint32_t group, uint32_t epoch,
			    uint8_t key[CS_AUTH_GMAC_KEY_LEN]);

/**
 * cs_auth_gmac_sender_key - derive the AES key of one sender instance
 * @ekey: G(epoch) from cs_auth_gmac_epoch_key()
 * @src: the sender's rank (the header's src)
 * @sid: the instance's CS_PROTO_SID_LEN random bytes (the nonce's first)
 * @key: out, CS_AUTH_GMAC_KEY_LEN bytes
 */
void cs_auth_gmac_sender_key(const uint8_t ekey[CS_AUTH_GMAC_KEY_LEN],
			     uint16_t src, const uint8_t *sid,
			     uint8_t key[CS_AUTH_GMAC_KEY_LEN]);

/* An AES-256-GCM context holding one sender key (its key schedule and
 * GHASH tables computed once). Not plain data: cs_gmac_fini() frees it. */
struct cs_gmac {
	void *aes; /* the block cipher: an EVP AES-256-ECB context */
	void *gcm; /* GCM128_CONTEXT (libcrypto's GCM mode) over it */
};

/**
 * cs_gmac_init - allocate a context and load @key
 * Returns: 0, -ENOMEM, or -EIO when libcrypto refuses.
 */
int cs_gmac_init(struct cs_gmac *g, const uint8_t key[CS_AUTH_GMAC_KEY_LEN]);

/**
 * cs_gmac_setkey - load another key into an initialised context (no
 * allocation)
 * Returns: 0 or -EIO.
 */
int cs_gmac_setkey(struct cs_gmac *g, const uint8_t key[CS_AUTH_GMAC_KEY_LEN]);

/**
 * cs_gmac_fini - free the context (and wipe it); idempotent
 */
void cs_gmac_fini(struct cs_gmac *g);

/**
 * cs_gmac_tag - a frame's GMAC tag with counter @ctr
 * @g: the sender instance's key
 * @ctr: the nonce's counter (the IV)
 * @h: header (tag and nonce ignored; flags as sent, CE excluded by caller)
 * @payload: h->len bytes (may be NULL when h->len is 0)
 * @tag: out, CS_PROTO_TAG_LEN bytes
 * Returns: 0 or -EIO.
 */
int cs_gmac_tag(struct cs_gmac *g, uint32_t ctr, const struct cs_pkt_hdr *h,
		const void *payload, uint8_t tag[CS_PROTO_TAG_LEN]);

/**
 * cs_gmac_tag_next - cs_gmac_tag() (the same tag) that meanwhile brings
 * @next, the payload to be tagged after this one, into cache
 * @next: any address, or NULL (prefetches are hints: they never fault)
 * @next_len: bytes of @next to bring in
 *
 * A tag is as fast as the hashing only on a payload in cache; on one that
 * is not, the misses cost as much again (docs/bench-auth.md). A caller
 * that tags a batch of frames passes each one the next frame's payload,
 * so that only the first of the batch waits for memory.
 * Returns: 0 or -EIO.
 */
int cs_gmac_tag_next(struct cs_gmac *g, uint32_t ctr,
		     const struct cs_pkt_hdr *h, const void *payload,
		     const void *next, uint32_t next_len,
		     uint8_t tag[CS_PROTO_TAG_LEN]);

/**
 * cs_auth_nonce_ctr - the counter in a nonce (its last 4 bytes, big-endian)
 */
static inline uint32_t cs_auth_nonce_ctr(const uint8_t *nonce)
{
	const uint8_t *c = nonce + CS_PROTO_SID_LEN;

	return (uint32_t)c[0] << 24 | (uint32_t)c[1] << 16 |
	       (uint32_t)c[2] << 8 | c[3];
}

/**
 * cs_auth_gmac_tag - one-shot GMAC tag of @h as its nonce (h->nonce) says
 * @ekey: G(epoch) of the frame's epoch
 * Returns: 0, or a negative errno from libcrypto's failure.
 */
int cs_auth_gmac_tag(const uint8_t ekey[CS_AUTH_GMAC_KEY_LEN],
		     const struct cs_pkt_hdr *h, const void *payload,
		     uint8_t tag[CS_PROTO_TAG_LEN]);

/**
 * cs_auth_gmac_check - verify a received frame's GMAC tag
 * Returns: 0 when it matches, CS_ERR_AUTH when it does not, or the frame
 * has no GMAC tag (CS_PKT_F_AUTH and CS_PKT_F_GMAC).
 */
int cs_auth_gmac_check(const uint8_t ekey[CS_AUTH_GMAC_KEY_LEN],
		       const struct cs_pkt_hdr *h, const void *payload);

/* A key made ready for many tags. Plain data: copy it, no clean-up. */
struct cs_auth_ctx {
	uint8_t k_hdr[16];
	uint8_t k_pl[16];
};

/**
 * cs_auth_ctx_init - load an epoch key
 * @c: out
 * @key: epoch key from cs_auth_epoch_key()
 */
void cs_auth_ctx_init(struct cs_auth_ctx *c,
		      const uint8_t key[CS_AUTH_KEY_LEN]);

/**
 * cs_auth_ctx_tag - cs_auth_tag() with a loaded key (same result)
 */
void cs_auth_ctx_tag(const struct cs_auth_ctx *c, const struct cs_pkt_hdr *h,
		     const void *payload, uint8_t tag[CS_PROTO_TAG_LEN]);

/**
 * cs_auth_ctx_check - cs_auth_check() with a loaded key
 * Returns: 0 when the tag matches, CS_ERR_AUTH when it does not or the
 * packet carries no tag.
 */
int cs_auth_ctx_check(const struct cs_auth_ctx *c, const struct cs_pkt_hdr *h,
		      const void *payload);

#endif
