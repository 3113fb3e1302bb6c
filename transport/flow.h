/* SPDX-License-Identifier: MIT */
/*
 * cs_flow: what an engine (a ring collective, an all-to-all, a PS push or
 * pull, a GPU staging pipeline) offers the transport core (transport/tp.h).
 *
 * An engine is a sans-IO state machine over one operation of one group.
 * It speaks in the group's ranks; the core maps ranks to nodes, picks the
 * session (peer node, session channel) of every frame, stamps it, and
 * hands back what the session reports. The engine never sees a session,
 * a sequence number or a clock.
 *
 * The engine's promise about retransmissions is cs_rel's (control/rel.h,
 * "What a retransmission carries"): for every cookie not yet reported
 * acknowledged, rebuild() returns the original bytes, or -ESTALE when the
 * receiver provably holds the frame already (the core then sends a
 * zero-length filler under the same sequence number).
 */
#ifndef CS_TRANSPORT_FLOW_H
#define CS_TRANSPORT_FLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "internal/proto.h"
#include "internal/util.h"

/**
 * struct cs_flow_tx - one frame an engine wants sent
 * @dst: destination rank in the operation's group
 * @hdr: type, channel, step, offset, flags set by the engine; src, group,
 *	epoch, op, seq and the ACK fields are the core's
 * @payload: @len bytes, valid until the cookie is reported acknowledged
 * @len: payload bytes (0 is a valid frame: a barrier token)
 * @cookie: the engine's handle to rebuild it
 */
struct cs_flow_tx {
	uint32_t dst;
	struct cs_pkt_hdr hdr;
	const void *payload;
	uint32_t len;
	uint64_t cookie;
};

/**
 * struct cs_flow_ops - an engine's entry points (all required unless noted)
 * @channels: number of channels the operation sends on
 * @chan_peer: the rank channel @ch sends to, or -1 if it sends nothing
 * @next: up to @max new frames of channel @ch that may leave now
 * @on_data: a new DATA frame of this operation (header src is the
 *	sender's rank); returns >= 0 or a negative error for a frame that
 *	does not belong to the schedule; CS_FLOW_RX_ACK_NOW asks the core
 *	to acknowledge at once (its sender waits for this ACK: the last
 *	frame of a stream, a frame the next ones depend on)
 * @on_acked: a frame the engine handed out was acknowledged
 * @rebuild: rebuild a frame for retransmission (0, -ESTALE, or an error)
 * @status: 0 once complete (results final, every frame acknowledged),
 *	-EINPROGRESS while running, else the error it ended with; @culprit
 *	names the rank to blame (UINT32_MAX: none)
 * @abort: end the operation with @err, blaming @culprit
 * @check_deadline: abort with CS_ERR_TIMEOUT once the deadline passed
 *	(optional); returns true when it did
 * @deadline: when @check_deadline will fire (optional; CS_NS_NEVER)
 * @result_ready: every element of this rank's result is final (optional:
 *	the core then acknowledges the peers' last frames at once)
 * @early_ok: the result is final and every frame the engine may still
 *	rebuild reads memory the engine owns, not the owner's buffers
 *	(optional): the core may then tell the owner the operation is done
 *	(io->ready) before its last frames are acknowledged
 */
/* on_data(): acknowledge this frame at once (no coalescing delay). */
#define CS_FLOW_RX_ACK_NOW 16

struct cs_flow_ops {
	uint32_t (*channels)(const void *f);
	int64_t (*chan_peer)(const void *f, uint32_t ch);
	unsigned (*next)(void *f, cs_ns_t now, uint32_t ch,
			 struct cs_flow_tx *out, unsigned max);
	int (*on_data)(void *f, cs_ns_t now, const struct cs_pkt_hdr *h,
		       const void *payload);
	int (*on_acked)(void *f, uint64_t cookie);
	int (*rebuild)(void *f, uint64_t cookie, struct cs_flow_tx *out);
	int (*status)(const void *f, uint32_t *culprit);
	int (*abort)(void *f, int err, uint32_t culprit);
	bool (*check_deadline)(void *f, cs_ns_t now);
	cs_ns_t (*deadline)(const void *f);
	bool (*result_ready)(const void *f);
	bool (*early_ok)(const void *f);
};

#endif
