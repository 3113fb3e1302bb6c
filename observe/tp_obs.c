/* SPDX-License-Identifier: MIT */
/* The out-of-line halves of the transport core's hooks (tp_hooks.h). */
#include <string.h>

#include "observe/tp_hooks.h"
#include "transport/tp.h"

_Thread_local struct cs_obs_stall cs__obs_stall[CS_OBS_STALL_KEYS];

void cs__obs_tp_stall(cs_ns_t now, uint32_t node, uint32_t group,
		      uint32_t op, uint16_t cause)
{
	uint64_t key = ((uint64_t)group << 40) ^ ((uint64_t)op << 12) ^
		       ((uint64_t)node << 2) ^ cause;
	struct cs_obs_stall *st = &cs__obs_stall[(key ^ key >> 13 ^ key >> 29) %
						 CS_OBS_STALL_KEYS];
	struct cs_trace_ring *r = cs__trace_tls;
	struct cs_obs_slot *s;

	if (st->key == key && st->start && now >= st->end &&
	    now - st->end < CS_OBS_STALL_GAP_NS) {
		st->end = now;
		/* still in the ring: stretch its duration */
		if (st->e && r &&
		    atomic_load_explicit(&r->head, memory_order_relaxed) -
				    st->h <
			    r->mask)
			st->e->b = (uint32_t)CS_MIN(now - st->start,
						    (cs_ns_t)UINT32_MAX);
		return;
	}
	st->key = key;
	st->start = st->end = now;
	st->e = cs_trace_ev_put(CS_TR_STALL, now, group, op, node, 0, 0,
				cause);
	r = cs__trace_tls;
	st->h = r ? atomic_load_explicit(&r->head, memory_order_relaxed) : 0;
	if (node < CS_OBS_MAX_PEERS && (s = cs_obs_slot_get()))
		cs_obs_add(&s->stalls[node][cause], 1);
}

void cs_obs_tp_publish(const struct cs_tp *tp, cs_ns_t now)
{
	struct cs_obs_slot *s = cs_obs_slot_get();
	const struct cs_rel *rel;
	uint32_t node;

	if (!s || now < s->next_pub)
		return;
	s->next_pub = now + CS_OBS_PUBLISH_NS;
	cs_obs_publish_begin(s);
	memset(s->peer, 0, sizeof(s->peer));
	for (uint32_t i = 0; (rel = cs_tp_sess_at(tp, i, &node)); i++) {
		struct cs_obs_peer_snap *p;

		if (node >= CS_OBS_MAX_PEERS)
			continue;
		p = &s->peer[node];
		p->tx_frames += rel->st.data_sent;
		p->tx_bytes += rel->st.bytes_sent;
		p->rx_frames += rel->st.data_rcvd;
		p->rx_bytes += rel->st.bytes_rcvd;
		p->retx += rel->st.retx;
		p->fast_retx += rel->st.fast_retx;
		p->tlp += rel->st.tlp;
		p->timeouts += rel->st.timeouts;
		p->spurious += rel->st.spurious_rto;
		p->dup += rel->st.dup_rcvd;
		p->stale += rel->st.stale_rcvd;
		p->srtt = CS_MAX(p->srtt, rel->srtt);
		if (rel->st.rtt_samples &&
		    (!p->min_rtt || rel->min_rtt < p->min_rtt))
			p->min_rtt = rel->min_rtt;
		p->sessions++;
	}
	cs_obs_publish_end(s);
}
