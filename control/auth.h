/* SPDX-License-Identifier: MIT */
/*
 * Authentication primitives: SHA-256, HMAC-SHA-256, the per-epoch packet
 * key derived from the job token, and packet tags.
 */
#ifndef CS_CONTROL_AUTH_H
#define CS_CONTROL_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal/proto.h"

#define CS_SHA256_LEN 32
#define CS_AUTH_KEY_LEN 32

struct cs_sha256 {
	uint32_t h[8];
	uint64_t total; /* bytes hashed so far */
	uint8_t buf[64];
	unsigned fill;
};

void cs_sha256_init(struct cs_sha256 *s);
void cs_sha256_update(struct cs_sha256 *s, const void *data, size_t len);
void cs_sha256_final(struct cs_sha256 *s, uint8_t out[CS_SHA256_LEN]);

/**
 * cs_sha256_impl - the compression in use: "sha-ni" (x86 SHA extensions,
 * picked when the CPU has them) or "portable"
 */
const char *cs_sha256_impl(void);

/**
 * cs_sha256_select - force the portable code (@hw false) or the SHA
 * extensions (@hw true); for tests and benchmarks
 * Returns: 0, or -ENOTSUP when @hw and the CPU lacks them.
 */
int cs_sha256_select(bool hw);

struct cs_hmac {
	struct cs_sha256 inner, outer;
};

void cs_hmac_init(struct cs_hmac *m, const void *key, size_t keylen);
void cs_hmac_update(struct cs_hmac *m, const void *data, size_t len);
void cs_hmac_final(struct cs_hmac *m, uint8_t out[CS_SHA256_LEN]);

/**
 * cs_hmac_sha256 - one-shot HMAC-SHA-256
 */
void cs_hmac_sha256(const void *key, size_t keylen, const void *data,
		    size_t len, uint8_t out[CS_SHA256_LEN]);

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
 * @key: out, CS_AUTH_KEY_LEN bytes
 */
void cs_auth_epoch_key(const char *token, uint32_t group, uint32_t epoch,
		       uint8_t key[CS_AUTH_KEY_LEN]);

/**
 * cs_auth_tag - compute a packet's tag: the first CS_PROTO_TAG_LEN bytes of
 * HMAC-SHA-256(key, header fields except the tag || payload)
 * @key: epoch key from cs_auth_epoch_key()
 * @h: header (h->tag is ignored)
 * @payload: h->len bytes (may be NULL when h->len is 0)
 * @tag: out
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
 * A key made ready for many tags: the HMAC state after the key blocks, so
 * that a tag costs two SHA-256 compressions less (what matters for ACKs
 * and small frames). Plain data: copy it, no clean-up.
 */
struct cs_auth_ctx {
	struct cs_hmac pre;
};

/**
 * cs_auth_ctx_init - precompute the HMAC state of an epoch key
 * @c: out
 * @key: epoch key from cs_auth_epoch_key()
 */
void cs_auth_ctx_init(struct cs_auth_ctx *c,
		      const uint8_t key[CS_AUTH_KEY_LEN]);

/**
 * cs_auth_ctx_tag - cs_auth_tag() with a precomputed key (same result)
 */
void cs_auth_ctx_tag(const struct cs_auth_ctx *c, const struct cs_pkt_hdr *h,
		     const void *payload, uint8_t tag[CS_PROTO_TAG_LEN]);

/**
 * cs_auth_ctx_check - cs_auth_check() with a precomputed key
 * Returns: 0 when the tag matches, CS_ERR_AUTH when it does not or the
 * packet carries no tag.
 */
int cs_auth_ctx_check(const struct cs_auth_ctx *c, const struct cs_pkt_hdr *h,
		      const void *payload);

#endif
