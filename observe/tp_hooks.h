/* SPDX-License-Identifier: MIT */
/*
 * The transport core's hooks into the timeline and the metrics
 * (transport/tp.c calls these, one line each). Inline, allocation-free,
 * lock-free; each costs one relaxed load and a branch when its recorder
 * is off (the simulator never switches them on).
 */
#ifndef CS_OBSERVE_TP_HOOKS_H
#define CS_OBSERVE_TP_HOOKS_H

#include "control/rel.h"
#include "internal/proto.h"
#include "observe/metrics.h"
#include "observe/trace.h"

struct cs_tp;

/* A stall that resumes within this long after its last sighting is the
 * same stall (one trace event, counted once). */
#define CS_OBS_STALL_GAP_NS (1000 * 1000ull)
#define CS_OBS_STALL_KEYS 8

struct cs_obs_stall {
	uint64_t key;
	cs_ns_t start, end;
	struct cs_trace_ev *e; /* its event, while the ring still holds it */
	uint64_t h; /* the ring's head right after it */
};
extern _Thread_local struct cs_obs_stall cs__obs_stall[CS_OBS_STALL_KEYS];

static inline void cs_obs_tp_post(cs_ns_t now, uint32_t group, uint32_t op,
				  uint32_t n, uint64_t bytes)
{
	cs_trace_now(now);
	cs_trace_ev_put(CS_TR_OP_POST, now, group, op, n, (uint32_t)bytes,
			(uint32_t)(bytes >> 32), 0);
}

static inline void cs_obs_tp_done(uint32_t group, uint32_t op, int status)
{
	cs_trace_ev_put(CS_TR_OP_DONE, cs_trace_last_now(), group, op, 0, 0,
			(uint32_t)status, 0);
}

static inline void cs_obs_tp_tx(cs_ns_t now, uint32_t node,
				const struct cs_pkt_hdr *h, uint32_t len)
{
	cs_trace_ev_put(CS_TR_TX, now, h->group, h->op, node, len, h->seq,
			h->channel);
}

/* A frame from @src went through session @r (@m: cs_rel_on_packet()'s
 * verdict): a data frame is traced, a new RTT sample counted. */
static inline void cs_obs_tp_rx(cs_ns_t now, uint32_t src,
				const struct cs_pkt_hdr *h, struct cs_rel *r,
				int m)
{
	struct cs_obs_slot *s;

	cs_trace_now(now);
	/* a clock read after the frame came (its burst's, or here), not
	 * the round's @now: the round may have started (and the thread been
	 * descheduled) before the frame came, and a receipt stamped before
	 * its sending would mislead */
	if (h->type == CS_PKT_DATA && !(h->flags & CS_PKT_F_FILLER) &&
	    cs_trace_enabled())
		cs_trace_ev_put(
			CS_TR_RX, cs_trace_rx_clock(), h->group, h->op, src,
			h->len, h->seq,
			(uint16_t)(h->channel |
				   (m & CS_REL_DELIVER ? 0 : CS_TR_RX_DUP)));
	if (r->obs_rtt_seen == r->st.rtt_samples || src >= CS_OBS_MAX_PEERS ||
	    !(s = cs_obs_slot_get()))
		return;
	r->obs_rtt_seen = r->st.rtt_samples;
	cs_obs_hist_add(&s->rtt[src], r->last_rtt);
}

/* A retransmission to @node; @fr and @tlp: the session's fast_retx and
 * tlp counts before cs_rel_stamp_retx() (which says why it resent). */
static inline void cs_obs_tp_retx(cs_ns_t now, uint32_t node,
				  const struct cs_pkt_hdr *h, uint32_t len,
				  const struct cs_rel *r, uint64_t fr,
				  uint64_t tlp)
{
	uint16_t cause = r->st.fast_retx != fr ? CS_TR_RETX_SACK
			 : r->st.tlp != tlp    ? CS_TR_RETX_TLP
					       : CS_TR_RETX_RTO;

	cs_trace_ev_put(CS_TR_RETX, now, h->group, h->op, node, len, h->seq,
			cause);
}

void cs__obs_tp_stall(cs_ns_t now, uint32_t node, uint32_t group, uint32_t op,
		      uint16_t cause);

/* Channel of (@group, @op) to @node could not send: session @r says
 * its next slot is @t (CS_NS_NEVER: window or credit closed). */
static inline void cs_obs_tp_stall(cs_ns_t now, uint32_t node, uint32_t group,
				   uint32_t op, const struct cs_rel *r,
				   cs_ns_t t)
{
	uint16_t cause = t != CS_NS_NEVER ? CS_TR_STALL_PACING
			 : r->snd_nxt - r->snd_una >= r->p.window
				 ? CS_TR_STALL_WINDOW
				 : CS_TR_STALL_CREDIT;

	if (!cs_trace_enabled() &&
	    !atomic_load_explicit(&cs__obs_on, memory_order_relaxed))
		return;
	cs__obs_tp_stall(now, node, group, op, cause);
}

/* cs_obs_tp_publish - on the core's thread, about every
 * CS_OBS_PUBLISH_NS: its sessions' counters into the metric snapshot */
void cs_obs_tp_publish(const struct cs_tp *tp, cs_ns_t now);

#endif
