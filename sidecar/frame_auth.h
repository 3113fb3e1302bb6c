/* SPDX-License-Identifier: MIT */
/*
 * Per-frame authentication for the sidecar's lcores (auth.enable): the
 * keys derived from the job token, cached so that the steady path never
 * derives one, and the tag stamp and check around the wire codec.
 *
 * Two tag codes (control/auth.h): AES-256-GMAC, where this CPU has AES-NI
 * (auth.mac=auto), with a 16-byte nonce before the tag; SipHash-2-4-128
 * otherwise. Frames say which one they carry (CS_PKT_F_GMAC), and a
 * receiver checks either, so sidecars with and without AES-NI work
 * together. The nonce and tag sit between the header and the payload
 * (cs_frame_auth_room()) and cover the header as sent (CE left out: a
 * switch may set it on the way) and the payload.
 *
 * Every lane (lcore) has its own state, touched by that lcore only after
 * cs_frame_auth_init(): its keys, its sending instances (a GMAC nonce's
 * counter must never be shared by two threads) and its counters.
 */
#ifndef CS_SIDECAR_FRAME_AUTH_H
#define CS_SIDECAR_FRAME_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "control/auth.h"
#include "dataplane/port.h"
#include "internal/config.h"

/* Receiving GMAC keys per lane: CS_FA_RX_SETS sets by source rank, two
 * ways each (the view's epoch, and another one). */
#define CS_FA_RX_SETS 256u

/* The key of one epoch, by code (slot 0: the view's epoch, slot 1: the
 * last other epoch a frame carried). */
struct cs_fa_epoch {
	bool valid;
	uint32_t epoch;
	union {
		struct cs_auth_ctx sip; /* SipHash */
		uint8_t g[CS_AUTH_GMAC_KEY_LEN]; /* GMAC: G(epoch) */
	};
};

/* A GMAC sending instance: one epoch's nonces on one lane. */
struct cs_fa_tx {
	bool valid;
	uint32_t epoch;
	uint16_t src; /* the rank its key was derived for */
	uint8_t sid[CS_PROTO_SID_LEN]; /* random, drawn for this instance */
	uint32_t ctr; /* the next frame's counter */
	bool spent; /* ctr went past 2^32 - 1: draw a new instance */
	struct cs_gmac g;
};

/* A peer's GMAC sending instance, its key verified by one frame. */
struct cs_fa_rx {
	bool valid;
	uint32_t epoch;
	uint16_t src;
	uint8_t sid[CS_PROTO_SID_LEN];
	struct cs_gmac g;
};

struct cs_fa_counts {
	uint64_t rx_fail; /* frames dropped by the tag check */
	uint64_t rx_notag; /* of those, frames without CS_PKT_F_AUTH */
	uint64_t rekey; /* epoch keys derived (either code) */
	uint64_t skeys; /* GMAC sender keys derived: own instances, peers' */
	uint64_t tx_fail; /* frames libcrypto could not tag (sent with a
			   * zero tag: the receiver drops them) */
};

struct cs_fa_lane {
	struct cs_fa_epoch sip[2], gep[2];
	struct cs_fa_tx tx[2]; /* by slot, as the epoch keys */
	struct cs_fa_rx *rx; /* CS_FA_RX_SETS x 2, on the first GMAC frame */
	struct cs_gmac spare; /* a new instance's key is tried here */
	struct cs_fa_counts n;
};

struct cs_frame_auth {
	bool on;
	enum cs_auth_mac mac; /* what this sidecar sends */
	char token[CS_CFG_STR_MAX];
	struct cs_fa_lane lane[CS_PORT_MAX_QUEUES];
};

/**
 * cs_frame_auth_parse_mac - auth.mac's value
 * @v: "auto", "gmac" or "siphash"
 * @out: the code it selects on this CPU (auto: GMAC with AES-NI)
 * Returns: 0, or -EINVAL for another value.
 */
int cs_frame_auth_parse_mac(const char *v, enum cs_auth_mac *out);

/**
 * cs_frame_auth_init - turn tags on with @token (the job token), sending
 * @mac's tags
 */
void cs_frame_auth_init(struct cs_frame_auth *a, const char *token,
			enum cs_auth_mac mac);

/**
 * cs_frame_auth_fini - free the GMAC contexts, wipe the token and keys
 */
void cs_frame_auth_fini(struct cs_frame_auth *a);

/**
 * cs_frame_auth_room - bytes a sent frame carries between header and
 * payload: 0 with @a NULL (off), 32 with GMAC (nonce, tag), 16 with SipHash
 */
static inline uint32_t cs_frame_auth_room(const struct cs_frame_auth *a)
{
	if (!a)
		return 0;
	return a->mac == CS_AUTH_GMAC ? CS_PROTO_NONCE_LEN + CS_PROTO_TAG_LEN
				      : CS_PROTO_TAG_LEN;
}

/**
 * cs_frame_auth_flags - the header flags a sent frame carries
 */
static inline uint16_t cs_frame_auth_flags(const struct cs_frame_auth *a)
{
	return a->mac == CS_AUTH_GMAC ? CS_PKT_F_AUTH | CS_PKT_F_GMAC
				      : CS_PKT_F_AUTH;
}

/**
 * cs_frame_auth_rx_ok - a received frame's tag is right under the key of
 * its epoch (@view_epoch: the epoch the view is at now), whichever code it
 * carries; counts the ones that are not (no tag: rx_notag and rx_fail)
 * @q: the lane (lcore) that received it
 *
 * (Bringing the burst's next payload into cache meanwhile, as the sending
 * side does, made checks slower: docs/bench-auth.md.)
 */
bool cs_frame_auth_rx_ok(struct cs_frame_auth *a, unsigned q,
			 uint32_t view_epoch, const struct cs_pkt_hdr *h,
			 const void *payload);

/**
 * cs_frame_auth_tag_next - write @h's nonce and tag (cs_frame_auth_room()
 * bytes) at @out
 * @q: the sending lane (lcore)
 * @h: the header as sent, flags with cs_frame_auth_flags() already
 *
 * A GMAC frame takes the next counter of the lane's instance for its
 * epoch; a new instance (a fresh random sid and key) is drawn for a new
 * epoch or rank, and when the counter is spent. A frame sent again
 * (retransmission) is tagged again with a new counter. @next and
 * @next_len: the payload tagged after this one, brought into cache
 * meanwhile (a batch of frames tagged in a row), or NULL;
 * cs_frame_auth_tag() is the same without.
 */
void cs_frame_auth_tag_next(struct cs_frame_auth *a, unsigned q,
			    uint32_t view_epoch, const struct cs_pkt_hdr *h,
			    const void *payload, const void *next,
			    uint32_t next_len, uint8_t *out);

static inline void cs_frame_auth_tag(struct cs_frame_auth *a, unsigned q,
				     uint32_t view_epoch,
				     const struct cs_pkt_hdr *h,
				     const void *payload, uint8_t *out)
{
	cs_frame_auth_tag_next(a, q, view_epoch, h, payload, NULL, 0, out);
}

/**
 * cs_frame_auth_counts - the counters summed over every lane (read from
 * another thread: a snapshot, each counter torn-free on 64-bit machines)
 */
void cs_frame_auth_counts(const struct cs_frame_auth *a,
			  struct cs_fa_counts *out);

#endif
