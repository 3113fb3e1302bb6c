/* SPDX-License-Identifier: MIT */
/*
 * Per-frame authentication for the sidecar's lcore (auth.enable): the
 * epoch keys derived from the job token, cached so that the steady path
 * never derives one, and the tag check and stamp around the wire codec.
 * The tag sits between the header and the payload (CS_PROTO_TAG_LEN) and
 * covers the header as sent (CE left out: a switch may set it on the way)
 * and the payload. Lcore-only after cs_frame_auth_init().
 */
#ifndef CS_SIDECAR_FRAME_AUTH_H
#define CS_SIDECAR_FRAME_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "control/auth.h"
#include "internal/config.h"

struct cs_frame_auth {
	bool on;
	char token[CS_CFG_STR_MAX];
	/* key[0] follows the view's epoch, key[1] holds the last other
	 * epoch a frame carried */
	struct {
		bool valid;
		uint32_t epoch;
		struct cs_auth_ctx ctx;
	} key[2];
	uint64_t rx_fail, rx_notag, rekey;
};

/**
 * cs_frame_auth_init - turn tags on with @token (the job token)
 */
void cs_frame_auth_init(struct cs_frame_auth *a, const char *token);

/**
 * cs_frame_auth_fini - wipe the token and keys
 */
void cs_frame_auth_fini(struct cs_frame_auth *a);

/**
 * cs_frame_auth_rx_ok - a received frame's tag is right under the key of
 * its epoch (@view_epoch: the epoch the view is at now); counts the ones
 * that are not (no tag: rx_notag and rx_fail)
 */
bool cs_frame_auth_rx_ok(struct cs_frame_auth *a, uint32_t view_epoch,
			 const struct cs_pkt_hdr *h, const void *payload);

/**
 * cs_frame_auth_tag - write @h's tag (the header as sent, flags with
 * CS_PKT_F_AUTH already) into @tag
 */
void cs_frame_auth_tag(struct cs_frame_auth *a, uint32_t view_epoch,
		       const struct cs_pkt_hdr *h, const void *payload,
		       uint8_t tag[CS_PROTO_TAG_LEN]);

#endif
