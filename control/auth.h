/* SPDX-License-Identifier: MIT */
/*
 * Authentication primitives from libsodium: the token-keyed MAC of the
 * bootstrap handshake and the etcd records (keyed BLAKE2b), the per-epoch
 * packet key derived from the job token, and packet tags (docs/auth.md).
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

/**
 * cs_auth_init - make libsodium ready (idempotent, thread-safe)
 * Returns: 0, or -EIO when libsodium cannot start.
 */
int cs_auth_init(void);

/**
 * cs_auth_impl - what computes packet tags, for logs and stats
 */
const char *cs_auth_impl(void);

/*
 * cs_sha256_impl - the name sidecar/service.c still asks for (its
 * "sha256=" stats field); same as cs_auth_impl(). Goes with its next edit.
 */
const char *cs_sha256_impl(void);

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
