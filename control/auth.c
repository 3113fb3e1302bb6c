/* SPDX-License-Identifier: MIT */
/* SHA-256 (FIPS 180-4), HMAC (RFC 2104) and collstack packet tags. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include <collstack/types.h>

#include "auth.h"
#include "internal/util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define CS_SHA_X86 1
#else
#define CS_SHA_X86 0
#endif

static const uint32_t k256[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t h[8], const uint8_t p[64])
{
	uint32_t w[64], a, b, c, d, e, f, g, hh;

	for (unsigned i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (unsigned i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^
			      (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^
			      (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = h[0], b = h[1], c = h[2], d = h[3];
	e = h[4], f = h[5], g = h[6], hh = h[7];
	for (unsigned i = 0; i < 64; i++) {
		uint32_t t1 = hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
			      ((e & f) ^ (~e & g)) + k256[i] + w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
			      ((a & b) ^ (a & c) ^ (b & c));
		hh = g, g = f, f = e, e = d + t1;
		d = c, c = b, b = a, a = t1 + t2;
	}
	h[0] += a, h[1] += b, h[2] += c, h[3] += d;
	h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

#if CS_SHA_X86
/*
 * @n blocks with the x86 SHA extensions (SHA-NI): two rounds per
 * sha256rnds2, the message schedule by sha256msg1/msg2. The state is kept
 * as ABEF / CDGH, the order the instructions want.
 */
/* message words 4i..4i+3 of the block, big-endian */
#define LOADW(i)                                                               \
	_mm_shuffle_epi8(                                                      \
		_mm_loadu_si128(                                               \
			(const __m128i *)(const void *)(p + 16 * (i))),        \
		bswap)
/* four rounds with the message words @w (and k256[4i..4i+3]) */
#define QROUND(i, w)                                                           \
	do {                                                                   \
		msg = _mm_add_epi32(                                           \
			(w), _mm_loadu_si128((                                 \
				     const __m128i                             \
					     *)(const void *)&k256[4 * (i)])); \
		st1 = _mm_sha256rnds2_epu32(st1, st0, msg);                    \
		msg = _mm_shuffle_epi32(msg, 0x0e);                            \
		st0 = _mm_sha256rnds2_epu32(st0, st1, msg);                    \
	} while (0)
/* @a = W(i-4) becomes W(i) from W(i-3) @b, W(i-2) @c, W(i-1) @d */
#define SCHED(a, b, c, d)                                                      \
	((a) = _mm_sha256msg2_epu32(                                           \
		 _mm_add_epi32(_mm_sha256msg1_epu32((a), (b)),                 \
			       _mm_alignr_epi8((d), (c), 4)),                  \
		 (d)))

__attribute__((target("sha,sse4.1,ssse3"))) static void
compress_shani(uint32_t h[8], const uint8_t *p, size_t n)
{
	const __m128i bswap =
		_mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
	__m128i st0, st1, tmp, msg, abef, cdgh, w0, w1, w2, w3;

	tmp = _mm_loadu_si128((const __m128i *)(const void *)&h[0]);
	st1 = _mm_loadu_si128((const __m128i *)(const void *)&h[4]);
	tmp = _mm_shuffle_epi32(tmp, 0xb1); /* CDAB */
	st1 = _mm_shuffle_epi32(st1, 0x1b); /* EFGH */
	st0 = _mm_alignr_epi8(tmp, st1, 8); /* ABEF */
	st1 = _mm_blend_epi16(st1, tmp, 0xf0); /* CDGH */

	for (; n; n--, p += 64) {
		abef = st0;
		cdgh = st1;
		w0 = LOADW(0);
		QROUND(0, w0);
		w1 = LOADW(1);
		QROUND(1, w1);
		w2 = LOADW(2);
		QROUND(2, w2);
		w3 = LOADW(3);
		QROUND(3, w3);
		for (unsigned i = 4; i < 16; i += 4) {
			SCHED(w0, w1, w2, w3);
			QROUND(i, w0);
			SCHED(w1, w2, w3, w0);
			QROUND(i + 1, w1);
			SCHED(w2, w3, w0, w1);
			QROUND(i + 2, w2);
			SCHED(w3, w0, w1, w2);
			QROUND(i + 3, w3);
		}
		st0 = _mm_add_epi32(st0, abef);
		st1 = _mm_add_epi32(st1, cdgh);
	}

	tmp = _mm_shuffle_epi32(st0, 0x1b); /* FEBA */
	st1 = _mm_shuffle_epi32(st1, 0xb1); /* DCHG */
	st0 = _mm_blend_epi16(tmp, st1, 0xf0); /* DCBA */
	st1 = _mm_alignr_epi8(st1, tmp, 8); /* HGFE */
	_mm_storeu_si128((__m128i *)(void *)&h[0], st0);
	_mm_storeu_si128((__m128i *)(void *)&h[4], st1);
}
#undef LOADW
#undef QROUND
#undef SCHED

static bool cpu_has_shani(void)
{
	unsigned a, b, c, d;

	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSSE3) ||
	    !(c & bit_SSE4_1))
		return false;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return false;
	return b & (1u << 29); /* SHA */
}
#endif

/* -1: not looked at yet, 0: portable, 1: SHA-NI. cpuid is slow (a trap
 * under some hypervisors): asked once. Races only ever store the same. */
static atomic_int sha_impl = -1;

static int impl_get(void)
{
	int v = atomic_load_explicit(&sha_impl, memory_order_relaxed);

	if (unlikely(v < 0)) {
#if CS_SHA_X86
		v = cpu_has_shani();
#else
		v = 0;
#endif
		atomic_store_explicit(&sha_impl, v, memory_order_relaxed);
	}
	return v;
}

static void compress_blocks(uint32_t h[8], const uint8_t *p, size_t n)
{
#if CS_SHA_X86
	if (impl_get()) {
		compress_shani(h, p, n);
		return;
	}
#endif
	for (; n; n--, p += 64)
		compress(h, p);
}

const char *cs_sha256_impl(void)
{
	return impl_get() ? "sha-ni" : "portable";
}

int cs_sha256_select(bool hw)
{
#if CS_SHA_X86
	if (hw && !cpu_has_shani())
		return -ENOTSUP;
	atomic_store_explicit(&sha_impl, hw, memory_order_relaxed);
	return 0;
#else
	if (hw)
		return -ENOTSUP;
	atomic_store_explicit(&sha_impl, 0, memory_order_relaxed);
	return 0;
#endif
}

void cs_sha256_init(struct cs_sha256 *s)
{
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};

	memcpy(s->h, iv, sizeof(iv));
	s->total = 0;
	s->fill = 0;
}

void cs_sha256_update(struct cs_sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->total += len;
	if (s->fill) {
		size_t take = 64 - s->fill < len ? 64 - s->fill : len;

		memcpy(s->buf + s->fill, p, take);
		s->fill += take;
		p += take;
		len -= take;
		if (s->fill < 64)
			return;
		compress_blocks(s->h, s->buf, 1);
		s->fill = 0;
	}
	if (len >= 64) {
		compress_blocks(s->h, p, len / 64);
		p += len & ~(size_t)63;
		len &= 63;
	}
	memcpy(s->buf, p, len);
	s->fill = len;
}

void cs_sha256_final(struct cs_sha256 *s, uint8_t out[CS_SHA256_LEN])
{
	uint64_t bits = s->total * 8;

	s->buf[s->fill++] = 0x80;
	if (s->fill > 56) {
		memset(s->buf + s->fill, 0, 64 - s->fill);
		compress_blocks(s->h, s->buf, 1);
		s->fill = 0;
	}
	memset(s->buf + s->fill, 0, 56 - s->fill);
	for (unsigned i = 0; i < 8; i++)
		s->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
	compress_blocks(s->h, s->buf, 1);
	for (unsigned i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->h[i];
	}
}

void cs_hmac_init(struct cs_hmac *m, const void *key, size_t keylen)
{
	uint8_t k[64] = { 0 }, pad[64];

	if (keylen > 64) {
		struct cs_sha256 s;

		cs_sha256_init(&s);
		cs_sha256_update(&s, key, keylen);
		cs_sha256_final(&s, k);
	} else {
		memcpy(k, key, keylen);
	}
	for (unsigned i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	cs_sha256_init(&m->inner);
	cs_sha256_update(&m->inner, pad, 64);
	for (unsigned i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	cs_sha256_init(&m->outer);
	cs_sha256_update(&m->outer, pad, 64);
}

void cs_hmac_update(struct cs_hmac *m, const void *data, size_t len)
{
	cs_sha256_update(&m->inner, data, len);
}

void cs_hmac_final(struct cs_hmac *m, uint8_t out[CS_SHA256_LEN])
{
	uint8_t ih[CS_SHA256_LEN];

	cs_sha256_final(&m->inner, ih);
	cs_sha256_update(&m->outer, ih, sizeof(ih));
	cs_sha256_final(&m->outer, out);
}

void cs_hmac_sha256(const void *key, size_t keylen, const void *data,
		    size_t len, uint8_t out[CS_SHA256_LEN])
{
	struct cs_hmac m;

	cs_hmac_init(&m, key, keylen);
	cs_hmac_update(&m, data, len);
	cs_hmac_final(&m, out);
}

bool cs_auth_equal(const void *a, const void *b, size_t len)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t d = 0;

	for (size_t i = 0; i < len; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

void cs_auth_epoch_key(const char *token, uint32_t group, uint32_t epoch,
		       uint8_t key[CS_AUTH_KEY_LEN])
{
	uint8_t info[24] = "collstack-epoch-key";

	/* HKDF-like: HMAC(token, label || group || epoch). */
	for (unsigned i = 0; i < 4; i++) {
		info[16 + i] = (uint8_t)(group >> (24 - 8 * i));
		info[20 + i] = (uint8_t)(epoch >> (24 - 8 * i));
	}
	cs_hmac_sha256(token, strlen(token), info, sizeof(info), key);
}

/* Serialize the header fields the tag covers, in a fixed order. */
static size_t hdr_bytes(const struct cs_pkt_hdr *h, uint8_t *o)
{
	const uint64_t v[] = {
		h->version, h->type, h->flags,	h->src, h->channel, h->group,
		h->epoch,   h->op,   h->step,	h->seq, h->ack,	    h->sack,
		h->offset,  h->len,  h->credit, h->ts,	h->ts_echo,
	};
	size_t n = 0;

	for (unsigned i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		for (unsigned b = 0; b < 8; b++)
			o[n++] = (uint8_t)(v[i] >> (56 - 8 * b));
	return n;
}

void cs_auth_tag(const uint8_t key[CS_AUTH_KEY_LEN], const struct cs_pkt_hdr *h,
		 const void *payload, uint8_t tag[CS_PROTO_TAG_LEN])
{
	uint8_t buf[17 * 8], mac[CS_SHA256_LEN];
	struct cs_hmac m;

	cs_hmac_init(&m, key, CS_AUTH_KEY_LEN);
	cs_hmac_update(&m, buf, hdr_bytes(h, buf));
	if (h->len && payload)
		cs_hmac_update(&m, payload, h->len);
	cs_hmac_final(&m, mac);
	memcpy(tag, mac, CS_PROTO_TAG_LEN);
}

int cs_auth_check(const uint8_t key[CS_AUTH_KEY_LEN],
		  const struct cs_pkt_hdr *h, const void *payload)
{
	uint8_t tag[CS_PROTO_TAG_LEN];

	if (!(h->flags & CS_PKT_F_AUTH))
		return CS_ERR_AUTH;
	cs_auth_tag(key, h, payload, tag);
	return cs_auth_equal(tag, h->tag, sizeof(tag)) ? 0 : CS_ERR_AUTH;
}

void cs_auth_ctx_init(struct cs_auth_ctx *c, const uint8_t key[CS_AUTH_KEY_LEN])
{
	cs_hmac_init(&c->pre, key, CS_AUTH_KEY_LEN);
}

void cs_auth_ctx_tag(const struct cs_auth_ctx *c, const struct cs_pkt_hdr *h,
		     const void *payload, uint8_t tag[CS_PROTO_TAG_LEN])
{
	uint8_t buf[17 * 8], mac[CS_SHA256_LEN];
	struct cs_hmac m = c->pre;

	cs_hmac_update(&m, buf, hdr_bytes(h, buf));
	if (h->len && payload)
		cs_hmac_update(&m, payload, h->len);
	cs_hmac_final(&m, mac);
	memcpy(tag, mac, CS_PROTO_TAG_LEN);
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
