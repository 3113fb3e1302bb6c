/* SPDX-License-Identifier: MIT */
/*
 * sidecar/frame_auth.c: frames tagged by one sidecar and checked by
 * another, both tag codes; a GMAC nonce never repeats under a key (frames
 * sent again, a restart, a new epoch, a new rank, a spent counter, two
 * lanes); forged, altered and untagged frames refused and counted; a
 * forged frame never evicts a peer's cached key.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <collstack/types.h>

#include "frame_auth.h"

#define TOKEN "frame-auth-token"

static uint8_t payload[1200];

static struct cs_pkt_hdr hdr(uint32_t epoch, uint16_t src, uint32_t len)
{
	struct cs_pkt_hdr h = {
		.version = CS_PROTO_VERSION,
		.type = CS_PKT_DATA,
		.src = src,
		.epoch = epoch,
		.op = 41,
		.seq = 7,
		.offset = 4096,
		.len = len,
		.ts = 99,
	};

	for (unsigned i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 13 + 5);
	return h;
}

/* Send @h as lane @q of @a would: flags, then nonce and tag written where
 * the wire has them, copied into the header as the decoder would. */
static void stamp(struct cs_frame_auth *a, unsigned q, uint32_t view,
		  struct cs_pkt_hdr *h)
{
	uint8_t out[CS_PROTO_AUTH_MAX];

	memset(out, 0xee, sizeof(out));
	h->flags |= cs_frame_auth_flags(a);
	cs_frame_auth_tag(a, q, view, h, payload, out);
	if (h->flags & CS_PKT_F_GMAC) {
		memcpy(h->nonce, out, CS_PROTO_NONCE_LEN);
		memcpy(h->tag, out + CS_PROTO_NONCE_LEN, CS_PROTO_TAG_LEN);
	} else {
		memcpy(h->tag, out, CS_PROTO_TAG_LEN);
	}
}

static struct cs_fa_counts counts(const struct cs_frame_auth *a)
{
	struct cs_fa_counts n;

	cs_frame_auth_counts(a, &n);
	return n;
}

static struct cs_frame_auth tx, rx;

static void setup(void)
{
	cr_assert_eq(cs_auth_init(), 0);
}

static void teardown(void)
{
	cs_frame_auth_fini(&tx);
	cs_frame_auth_fini(&rx);
}

TestSuite(frame_auth, .init = setup, .fini = teardown);

Test(frame_auth, parse_mac)
{
	enum cs_auth_mac m;

	cr_assert_eq(cs_frame_auth_parse_mac("gmac", &m), 0);
	cr_assert_eq(m, CS_AUTH_GMAC);
	cr_assert_eq(cs_frame_auth_parse_mac("siphash", &m), 0);
	cr_assert_eq(m, CS_AUTH_SIPHASH);
	cr_assert_eq(cs_frame_auth_parse_mac("auto", &m), 0);
	cr_assert_eq(m, cs_auth_gmac_fast() ? CS_AUTH_GMAC : CS_AUTH_SIPHASH);
	cr_assert_eq(cs_frame_auth_parse_mac("sha256", &m), -EINVAL);
	cr_assert_eq(cs_frame_auth_parse_mac("", &m), -EINVAL);
}

/* Either code, sent by one sidecar, is checked by a sidecar sending
 * either: a cluster may mix CPUs with and without AES-NI. */
Test(frame_auth, both_codes_both_ways)
{
	static const enum cs_auth_mac m[2] = { CS_AUTH_GMAC, CS_AUTH_SIPHASH };

	for (unsigned i = 0; i < 4; i++) {
		struct cs_pkt_hdr h = hdr(3, 1, 1000);

		cs_frame_auth_init(&tx, TOKEN, m[i & 1]);
		cs_frame_auth_init(&rx, TOKEN, m[i >> 1]);
		cr_assert_eq(cs_frame_auth_room(&tx),
			     m[i & 1] == CS_AUTH_GMAC ? 32 : 16);
		stamp(&tx, 0, 3, &h);
		cr_assert(cs_frame_auth_rx_ok(&rx, 0, 3, &h, payload));
		/* a pure ACK too */
		h = hdr(3, 1, 0);
		h.type = CS_PKT_ACK;
		stamp(&tx, 0, 3, &h);
		cr_assert(cs_frame_auth_rx_ok(&rx, 0, 3, &h, NULL));
		cr_assert_eq(counts(&rx).rx_fail, 0);
		cs_frame_auth_fini(&tx);
		cs_frame_auth_fini(&rx);
	}
	cr_assert_eq(cs_frame_auth_room(NULL), 0);
}

/* Altered frames fail under either code and are counted; the CE mark a
 * switch may set is not covered. */
Test(frame_auth, forgeries_refused)
{
	static const enum cs_auth_mac m[2] = { CS_AUTH_GMAC, CS_AUTH_SIPHASH };
	struct cs_frame_auth other;

	for (unsigned i = 0; i < 2; i++) {
		struct cs_pkt_hdr h = hdr(3, 1, 600), g;

		cs_frame_auth_init(&tx, TOKEN, m[i]);
		cs_frame_auth_init(&rx, TOKEN, CS_AUTH_GMAC);
		stamp(&tx, 0, 3, &h);
		g = h;
		g.flags |= CS_PKT_F_CE;
		cr_assert(cs_frame_auth_rx_ok(&rx, 0, 3, &g, payload));
		payload[599] ^= 1;
		cr_assert_not(cs_frame_auth_rx_ok(&rx, 0, 3, &h, payload));
		payload[599] ^= 1;
		g = h;
		g.offset += 8;
		cr_assert_not(cs_frame_auth_rx_ok(&rx, 0, 3, &g, payload));
		g = h;
		g.epoch = 4; /* the frame claims the next epoch */
		cr_assert_not(cs_frame_auth_rx_ok(&rx, 0, 3, &g, payload));
		g = h;
		g.tag[3] ^= 0x20;
		cr_assert_not(cs_frame_auth_rx_ok(&rx, 0, 3, &g, payload));
		g = h;
		g.flags ^= CS_PKT_F_GMAC; /* the other code's reading */
		cr_assert_not(cs_frame_auth_rx_ok(&rx, 0, 3, &g, payload));
		g = h;
		g.flags &= (uint16_t) ~(CS_PKT_F_AUTH | CS_PKT_F_GMAC);
		cr_assert_not(cs_frame_auth_rx_ok(&rx, 0, 3, &g, payload));
		cr_assert_eq(counts(&rx).rx_fail, 6);
		cr_assert_eq(counts(&rx).rx_notag, 1);
		/* another job's token */
		cs_frame_auth_init(&other, "another-token", m[i]);
		cr_assert_not(cs_frame_auth_rx_ok(&other, 0, 3, &h, payload));
		cs_frame_auth_fini(&other);
		/* and the original still passes */
		cr_assert(cs_frame_auth_rx_ok(&rx, 0, 3, &h, payload));
		cs_frame_auth_fini(&tx);
		cs_frame_auth_fini(&rx);
	}
}

/* The (sid, counter) pairs seen so far, to check that none repeats. */
static uint8_t seen[4096][CS_PROTO_NONCE_LEN];
static unsigned nseen;

static void must_be_new(const struct cs_pkt_hdr *h)
{
	for (unsigned i = 0; i < nseen; i++)
		cr_assert(memcmp(seen[i], h->nonce, CS_PROTO_NONCE_LEN),
			  "nonce repeated (frame %u)", nseen);
	cr_assert_lt(nseen, 4096);
	memcpy(seen[nseen++], h->nonce, CS_PROTO_NONCE_LEN);
}

/*
 * A frame sent again, byte for byte the same header and payload (a
 * retransmission rebuilt from scratch), gets the next counter and another
 * tag; the counter runs 0, 1, 2 ... under one sender instance.
 */
Test(frame_auth, resent_frames_get_new_nonces)
{
	struct cs_pkt_hdr first;

	nseen = 0;
	cs_frame_auth_init(&tx, TOKEN, CS_AUTH_GMAC);
	cs_frame_auth_init(&rx, TOKEN, CS_AUTH_GMAC);
	for (uint32_t i = 0; i < 1000; i++) {
		struct cs_pkt_hdr h = hdr(3, 1, 100);

		stamp(&tx, 0, 3, &h);
		must_be_new(&h);
		cr_assert_eq(cs_auth_nonce_ctr(h.nonce), i);
		if (!i)
			first = h;
		cr_assert_arr_eq(h.nonce, first.nonce, CS_PROTO_SID_LEN);
		if (i)
			cr_assert(memcmp(h.tag, first.tag, CS_PROTO_TAG_LEN));
		cr_assert(cs_frame_auth_rx_ok(&rx, 0, 3, &h, payload));
	}
	/* one sender key derived on each side */
	cr_assert_eq(counts(&tx).skeys, 1);
	cr_assert_eq(counts(&rx).skeys, 1);
}

/*
 * A restarted sidecar (a new cs_frame_auth, the same token, rank and
 * epoch) counts from 0 again, but under a fresh random sid, hence another
 * key: no (key, IV) pair of the first life comes back.
 */
Test(frame_auth, restart_draws_a_new_instance)
{
	struct cs_pkt_hdr a = hdr(0, 2, 64), b = hdr(0, 2, 64);

	cs_frame_auth_init(&rx, TOKEN, CS_AUTH_GMAC);
	cs_frame_auth_init(&tx, TOKEN, CS_AUTH_GMAC);
	stamp(&tx, 0, 0, &a);
	cs_frame_auth_fini(&tx);
	cs_frame_auth_init(&tx, TOKEN, CS_AUTH_GMAC); /* the restart */
	stamp(&tx, 0, 0, &b);
	cr_assert_eq(cs_auth_nonce_ctr(a.nonce), 0);
	cr_assert_eq(cs_auth_nonce_ctr(b.nonce), 0);
	cr_assert(memcmp(a.nonce, b.nonce, CS_PROTO_SID_LEN),
		  "the same 96-bit sid twice");
	cr_assert(memcmp(a.tag, b.tag, CS_PROTO_TAG_LEN));
	cr_assert(cs_frame_auth_rx_ok(&rx, 0, 0, &a, payload));
	cr_assert(cs_frame_auth_rx_ok(&rx, 0, 0, &b, payload));
	cr_assert_eq(counts(&rx).skeys, 2);
}

/*
 * New epochs, an old epoch's frames again (slot 1 evicted and refilled),
 * another rank, another lane, a spent counter: each starts a new sender
 * instance, and no nonce repeats across all of them.
 */
Test(frame_auth, new_instances_never_repeat_a_nonce)
{
	struct cs_pkt_hdr h;
	uint8_t sid3[CS_PROTO_SID_LEN];

	nseen = 0;
	cs_frame_auth_init(&tx, TOKEN, CS_AUTH_GMAC);
	cs_frame_auth_init(&rx, TOKEN, CS_AUTH_GMAC);
	h = hdr(3, 1, 10);
	stamp(&tx, 0, 3, &h);
	must_be_new(&h);
	memcpy(sid3, h.nonce, sizeof(sid3));
	cr_assert(cs_frame_auth_rx_ok(&rx, 0, 3, &h, payload));
	/* the view moves to epoch 4 (a rekey) */
	h = hdr(4, 1, 10);
	stamp(&tx, 0, 4, &h);
	must_be_new(&h);
	cr_assert_eq(cs_auth_nonce_ctr(h.nonce), 0);
	cr_assert(cs_frame_auth_rx_ok(&rx, 0, 4, &h, payload));
	/* epochs 3, 5, 3 in the other slot: a new instance each time */
	for (unsigned i = 0; i < 3; i++) {
		h = hdr(i == 1 ? 5 : 3, 1, 10);
		stamp(&tx, 0, 4, &h);
		must_be_new(&h);
		cr_assert(memcmp(h.nonce, sid3, CS_PROTO_SID_LEN));
		cr_assert(cs_frame_auth_rx_ok(&rx, 0, 4, &h, payload));
	}
	/* another rank (a new view numbered this node otherwise) */
	h = hdr(4, 2, 10);
	stamp(&tx, 0, 4, &h);
	must_be_new(&h);
	cr_assert_eq(cs_auth_nonce_ctr(h.nonce), 0);
	cr_assert(cs_frame_auth_rx_ok(&rx, 0, 4, &h, payload));
	/* another lane: its own instance */
	h = hdr(4, 2, 10);
	stamp(&tx, 1, 4, &h);
	must_be_new(&h);
	cr_assert_eq(cs_auth_nonce_ctr(h.nonce), 0);
	cr_assert(cs_frame_auth_rx_ok(&rx, 1, 4, &h, payload));
	/* the counter's last values, then a new instance */
	tx.lane[0].tx[0].ctr = UINT32_MAX - 1;
	for (unsigned i = 0; i < 3; i++) {
		h = hdr(4, 2, 10);
		stamp(&tx, 0, 4, &h);
		must_be_new(&h);
		cr_assert_eq(cs_auth_nonce_ctr(h.nonce),
			     i == 2 ? 0 : UINT32_MAX - 1 + i);
		cr_assert(cs_frame_auth_rx_ok(&rx, 0, 4, &h, payload));
	}
	cr_assert_eq(counts(&rx).rx_fail, 0);
	cr_assert_eq(counts(&tx).tx_fail, 0);
	/* 3, 4, 3, 5, 3, rank 2, lane 1, the spent counter's successor */
	cr_assert_eq(counts(&tx).skeys, 8);
}

/*
 * Forged frames that name a new sender instance cost a key derivation
 * each but never take the place of a peer's key: its next frame needs
 * none.
 */
Test(frame_auth, forgery_does_not_evict_a_peer_key)
{
	struct cs_pkt_hdr h = hdr(3, 1, 200), f;
	uint64_t sk;

	cs_frame_auth_init(&tx, TOKEN, CS_AUTH_GMAC);
	cs_frame_auth_init(&rx, TOKEN, CS_AUTH_GMAC);
	stamp(&tx, 0, 3, &h);
	cr_assert(cs_frame_auth_rx_ok(&rx, 0, 3, &h, payload));
	sk = counts(&rx).skeys;
	for (unsigned i = 0; i < 5; i++) {
		f = h;
		f.nonce[0] ^= (uint8_t)(i + 1); /* another instance */
		cr_assert_not(cs_frame_auth_rx_ok(&rx, 0, 3, &f, payload));
	}
	cr_assert_eq(counts(&rx).skeys, sk + 5);
	cr_assert_eq(counts(&rx).rx_fail, 5);
	h = hdr(3, 1, 200);
	stamp(&tx, 0, 3, &h);
	cr_assert(cs_frame_auth_rx_ok(&rx, 0, 3, &h, payload));
	cr_assert_eq(counts(&rx).skeys, sk + 5, "the peer's key was evicted");
}

/*
 * A burst tagged in a row, each frame with the next one's payload to
 * bring into cache (cs_frame_auth_tag_next(), as the lcore's flush does):
 * every frame verifies, under either code, and a byte changed anywhere
 * in a large payload (past the first of GMAC's pieces too) is refused.
 */
Test(frame_auth, burst_with_next_payload)
{
	static const enum cs_auth_mac m[2] = { CS_AUTH_GMAC, CS_AUTH_SIPHASH };
	static uint8_t big[4][8896];
	enum { N = 4 };

	for (unsigned f = 0; f < N; f++)
		for (unsigned i = 0; i < sizeof(big[f]); i++)
			big[f][i] = (uint8_t)(i * 31 + f);
	for (unsigned c = 0; c < 2; c++) {
		struct cs_pkt_hdr h[N];
		uint8_t out[N][CS_PROTO_AUTH_MAX];

		cs_frame_auth_init(&tx, TOKEN, m[c]);
		cs_frame_auth_init(&rx, TOKEN, CS_AUTH_GMAC);
		for (unsigned f = 0; f < N; f++) {
			h[f] = hdr(3, 1, f == 2 ? 0 : 8896 - 100 * f);
			h[f].seq = 7 + f;
			h[f].flags |= cs_frame_auth_flags(&tx);
		}
		for (unsigned f = 0; f < N; f++)
			cs_frame_auth_tag_next(&tx, 0, 3, &h[f], big[f],
					       f + 1 < N ? big[f + 1] : NULL,
					       f + 1 < N ? h[f + 1].len : 0,
					       out[f]);
		for (unsigned f = 0; f < N; f++) {
			if (h[f].flags & CS_PKT_F_GMAC) {
				memcpy(h[f].nonce, out[f], CS_PROTO_NONCE_LEN);
				memcpy(h[f].tag, out[f] + CS_PROTO_NONCE_LEN,
				       CS_PROTO_TAG_LEN);
			} else {
				memcpy(h[f].tag, out[f], CS_PROTO_TAG_LEN);
			}
		}
		for (unsigned f = 0; f < N; f++) {
			cr_assert(cs_frame_auth_rx_ok(&rx, 0, 3, &h[f], big[f]),
				  "code %u frame %u", c, f);
			if (!h[f].len)
				continue;
			for (uint32_t at = 0; at < h[f].len; at += 1999) {
				big[f][at] ^= 0x04;
				cr_assert_not(cs_frame_auth_rx_ok(
						      &rx, 0, 3, &h[f], big[f]),
					      "code %u frame %u byte %u", c, f,
					      at);
				big[f][at] ^= 0x04;
			}
			big[f][h[f].len - 1] ^= 0x40;
			cr_assert_not(
				cs_frame_auth_rx_ok(&rx, 0, 3, &h[f], big[f]));
			big[f][h[f].len - 1] ^= 0x40;
		}
		cr_assert_eq(counts(&tx).tx_fail, 0);
		cs_frame_auth_fini(&tx);
		cs_frame_auth_fini(&rx);
	}
}
