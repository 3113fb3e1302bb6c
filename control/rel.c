/* SPDX-License-Identifier: MIT */
/* cs_rel: sequence numbers, SACK, RTO, fast retransmit, ACK coalescing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CS_LOG_MODULE "rel"
#include "control/rel.h"
#include "internal/log.h"

enum {
	M_FREE = 0,
	M_INFLIGHT = 1, /* sent, not yet known to have arrived */
	M_SACKED = 2, /* selectively acknowledged */
	M_LOST = 3, /* deemed lost, waiting to be resent */
	M_PARKED = 4, /* the peer had no room for it: wait for its resume */
};

/* meta.why: how the packet was last deemed lost (statistics). */
#define LOST_BY_SACK 1
#define LOST_BY_RTO 2
#define LOST_BY_TLP 3
#define LOST_BY_RESUME 4 /* parked, and the peer said resume */
#define LOST_BY_PROBE 5 /* parked, resent by the RTO (a park probe) */

#define SACK_BITS 64

const struct cs_cfg_entry cs_rel_cfg[] = {
	{ "rel.window", CS_CFG_U32, offsetof(struct cs_rel_params, window),
	  "512", 64, 65536,
	  "packets in flight per session and receive tracking window "
	  "(power of two, same on both ends)" },
	{ "rel.ack_every", CS_CFG_U32,
	  offsetof(struct cs_rel_params, ack_every), "32", 1, 1024,
	  "acknowledge after this many data packets" },
	{ "rel.ack_delay", CS_CFG_NS, offsetof(struct cs_rel_params, ack_delay),
	  "20us", 0, 1e10,
	  "... or this long after the first unacknowledged one" },
	{ "rel.ack_ooo_now", CS_CFG_BOOL,
	  offsetof(struct cs_rel_params, ack_ooo_now), "1", CS_CFG_NO_BOUNDS,
	  "acknowledge at once on an out-of-order or duplicate arrival" },
	{ "rel.rto_init", CS_CFG_NS, offsetof(struct cs_rel_params, rto_init),
	  "1ms", 1000, 1e11, "retransmission timeout before an RTT sample" },
	{ "rel.rto_min", CS_CFG_NS, offsetof(struct cs_rel_params, rto_min),
	  "200us", 1000, 1e11, "lowest retransmission timeout" },
	{ "rel.rto_max", CS_CFG_NS, offsetof(struct cs_rel_params, rto_max),
	  "10ms", 1000, 1e11,
	  "highest retransmission timeout (cap of the exponential back-off)" },
	{ "rel.dupthresh", CS_CFG_U32,
	  offsetof(struct cs_rel_params, dupthresh), "3", 1, 1024,
	  "later-sent packets acknowledged before a packet counts as lost" },
	{ "rel.credit_refresh", CS_CFG_NS,
	  offsetof(struct cs_rel_params, credit_refresh), "20us", 1000, 1e10,
	  "re-send a grown grant after this long (doubling) until the "
	  "peer's data shows it arrived" },
	{ "rel.reo_wnd", CS_CFG_NS, offsetof(struct cs_rel_params, reo_wnd),
	  "2us", 0, 1e10,
	  "least reordering window: a packet is lost once a later one was "
	  "acknowledged and it has been out srtt + max(this, srtt/4)" },
	{ "rel.tlp", CS_CFG_BOOL, offsetof(struct cs_rel_params, tlp), "1",
	  CS_CFG_NO_BOUNDS,
	  "tail loss probe: resend the newest packet after 2 srtt of silence" },
	{ "rel.tlp_min", CS_CFG_NS, offsetof(struct cs_rel_params, tlp_min),
	  "10us", 0, 1e10, "least tail-loss-probe timeout" },
	{ "rel.max_timeouts", CS_CFG_U32,
	  offsetof(struct cs_rel_params, max_timeouts), "64", 1, 1e6,
	  "consecutive timeouts without progress before the session fails" },
	{ "rel.rto_learn", CS_CFG_NS, offsetof(struct cs_rel_params, rto_learn),
	  "1s", 0, 1e12,
	  "a spurious timeout raises the RTO floor to twice the delay it "
	  "saw; the floor halves after this long (0: no learning)" },
	{ "rel.rto_ceil", CS_CFG_NS, offsetof(struct cs_rel_params, rto_ceil),
	  "100ms", 0, 1e11,
	  "highest RTO that measured RTTs and learnt stalls may ask for, "
	  "above rel.rto_max (which caps the back-off): a queue or a peer "
	  "descheduled longer than rel.rto_max, once seen, times out no "
	  "more (0: rel.rto_max)" },
	{ "rel.credit", CS_CFG_BOOL, offsetof(struct cs_rel_params, credit),
	  "0", CS_CFG_NO_BOUNDS,
	  "send new data only within receiver-granted credit (fan-in)" },
	{ "rel.credit_init", CS_CFG_SIZE,
	  offsetof(struct cs_rel_params, credit_init), "256K", 0, 1 << 30,
	  "credit both ends assume before the first ACK (bytes)" },
};
const size_t cs_rel_cfg_len = CS_ARRAY_SIZE(cs_rel_cfg);

int cs_rel_params_default(struct cs_rel_params *p)
{
	memset(p, 0, sizeof(*p));
	return cs_cfg_defaults(cs_rel_cfg, cs_rel_cfg_len, p);
}

int cs_rel_params_check(const struct cs_rel_params *p, char *err, size_t errlen)
{
	const char *key = NULL;

	if (p->window < SACK_BITS || p->window > 65536 ||
	    (p->window & (p->window - 1)))
		key = "rel.window (a power of two in [64, 65536])";
	else if (!p->ack_every)
		key = "rel.ack_every (at least 1)";
	else if (!p->dupthresh)
		key = "rel.dupthresh (at least 1)";
	else if (!p->max_timeouts)
		key = "rel.max_timeouts (at least 1)";
	else if (!p->rto_min || p->rto_min > p->rto_max)
		key = "rel.rto_min (positive, at most rel.rto_max)";
	if (!key)
		return 0;
	if (err)
		snprintf(err, errlen, "config key %s is out of range", key);
	return -EINVAL;
}

static inline struct cs_rel_meta *meta_of(const struct cs_rel *r, uint32_t seq)
{
	return &r->meta[seq & r->mask];
}

static inline bool rcv_bit(const struct cs_rel *r, uint32_t seq)
{
	uint32_t i = seq & r->mask;

	return r->rcv_bits[i / 64] >> (i % 64) & 1;
}

static inline void rcv_bit_set(struct cs_rel *r, uint32_t seq, bool on)
{
	uint32_t i = seq & r->mask;

	if (on)
		r->rcv_bits[i / 64] |= 1ull << (i % 64);
	else
		r->rcv_bits[i / 64] &= ~(1ull << (i % 64));
}

/* The learnt floor (rel.rto_learn) at @now: halved once per period. */
static cs_ns_t rto_floor_now(const struct cs_rel *r, cs_ns_t now)
{
	return cs_rel_floor_at(r->rto_floor, r->rto_floor_at, r->p.rto_learn,
			       now);
}

/* The highest RTO that samples and the learnt floor may set. */
static cs_ns_t rto_ceil(const struct cs_rel_params *p)
{
	return CS_MAX(p->rto_ceil, p->rto_max);
}

/* The current RTO: from the samples (r->rto, at most rto_ceil) or the
 * learnt floor, doubled per timeout without a sample up to rto_max: the
 * back-off stops there, what was measured or learnt may lie beyond it. */
static cs_ns_t rto_now(const struct cs_rel *r, cs_ns_t now)
{
	cs_ns_t base =
		CS_MAX(r->rto, CS_MIN(rto_floor_now(r, now), rto_ceil(&r->p)));
	cs_ns_t rto = base;

	for (uint32_t i = 0; i < r->backoff && rto < r->p.rto_max; i++)
		rto *= 2;
	return CS_MIN(rto, CS_MAX(r->p.rto_max, base));
}

int cs_rel_init(struct cs_rel *r, const struct cs_rel_params *p,
		struct cs_path *path, const struct cs_rel_ops *ops, void *owner,
		uint32_t isn_tx, uint32_t isn_rx)
{
	memset(r, 0, sizeof(*r));
	if (cs_rel_params_check(p, NULL, 0))
		return -EINVAL;
	r->p = *p;
	r->path = path;
	r->ops = ops;
	r->owner = owner;
	r->mask = p->window - 1;
	r->meta = calloc(p->window, sizeof(*r->meta));
	if (!r->meta)
		return -ENOMEM;
	r->rcv_bits = calloc(p->window / 64, sizeof(*r->rcv_bits));
	if (!r->rcv_bits) {
		free(r->meta);
		r->meta = NULL;
		return -ENOMEM;
	}
	r->snd_una = r->snd_nxt = r->retx_hint = isn_tx;
	r->rcv_nxt = isn_rx;
	r->rto = CS_MIN(CS_MAX(p->rto_init, p->rto_min), p->rto_max);
	r->rto_deadline = CS_NS_NEVER;
	r->rack_deadline = CS_NS_NEVER;
	r->tlp_deadline = CS_NS_NEVER;
	r->credit_deadline = CS_NS_NEVER;
	r->min_rtt = CS_NS_NEVER;
	r->ack_deadline = CS_NS_NEVER;
	r->credit_limit = (uint32_t)p->credit_init;
	r->grant = p->credit_init;
	r->credit_adv = (uint32_t)p->credit_init;
	r->xmit_id = 1;
	return 0;
}

void cs_rel_fini(struct cs_rel *r)
{
	free(r->meta);
	free(r->rcv_bits);
	r->meta = NULL;
	r->rcv_bits = NULL;
}

static bool window_open(const struct cs_rel *r)
{
	if (r->failed || r->snd_nxt - r->snd_una >= r->p.window)
		return false;
	/* Byte credit: a sender with any credit left may send one packet,
	 * so the overshoot per sender is below one packet. */
	if (r->p.credit && !cs_seq_lt(r->tx_bytes, r->credit_limit))
		return false;
	return true;
}

cs_ns_t cs_rel_tx_time(const struct cs_rel *r, uint32_t len, cs_ns_t now)
{
	(void)len;
	if (!window_open(r))
		return CS_NS_NEVER;
	return r->path ? cs_pacer_next(&r->path->pacer, now) : now;
}

cs_ns_t cs_rel_retx_time(const struct cs_rel *r, uint32_t len, cs_ns_t now)
{
	(void)len;
	if (r->failed)
		return CS_NS_NEVER;
	return r->path ? cs_pacer_next(&r->path->pacer, now) : now;
}

/* The SACK bitmap: bit i set when rcv_nxt + 1 + i arrived. */
static uint64_t sack_bits(const struct cs_rel *r)
{
	uint64_t bits = 0;

	for (uint32_t i = 0; i < SACK_BITS; i++)
		if (rcv_bit(r, r->rcv_nxt + 1 + i))
			bits |= 1ull << i;
	return bits;
}

/* Fill the acknowledgement fields of an outgoing header. */
static void fill_ack(struct cs_rel *r, struct cs_pkt_hdr *h, cs_ns_t now)
{
	h->flags |= CS_PKT_F_ACK;
	h->flags &= ~CS_PKT_F_ECE;
	if (r->ece_pending)
		h->flags |= CS_PKT_F_ECE;
	h->ack = r->rcv_nxt;
	h->sack = r->rx_ooo ? sack_bits(r) : 0;
	/* The echo includes the time we held it, so the peer's RTT sample
	 * does not count ACK coalescing as network delay. */
	h->ts_echo = r->echo_valid ? r->echo_ts + (now - r->echo_at) : 0;
	h->credit = r->rx_bytes + (uint32_t)r->grant;
	r->credit_adv = h->credit;
	h->flags &= ~CS_PKT_F_RESUME;
	if (r->resume_due || r->resume_sticky) {
		h->flags |= CS_PKT_F_RESUME;
		r->resume_due = false;
		r->st.resume_sent++;
	}
	if (r->credit_unconfirmed && r->credit_deadline == CS_NS_NEVER)
		r->credit_deadline = now + (r->p.credit_refresh << CS_MIN(
						    r->credit_refreshes, 20u));
	r->ack_pending = 0;
	r->ack_now = false;
	r->ece_pending = false;
	r->ack_deadline = CS_NS_NEVER;
}

/* An RTO after the oldest packet's last send (CS_NS_NEVER: nothing in
 * flight, or the oldest is parked): how far a SACK or a raised floor may
 * put the armed RTO off. */
static cs_ns_t oldest_rto_due(const struct cs_rel *r, cs_ns_t now)
{
	const struct cs_rel_meta *m;

	if (r->snd_una == r->snd_nxt)
		return CS_NS_NEVER;
	m = meta_of(r, r->snd_una);
	return m->state == M_PARKED ? CS_NS_NEVER : m->sent + rto_now(r, now);
}

static void arm_rto(struct cs_rel *r, cs_ns_t now)
{
	if (r->rto_deadline == CS_NS_NEVER)
		r->rto_deadline = now + rto_now(r, now);
}

/* The probe timer restarts on every new send and every ACK that makes
 * progress; it needs an RTT estimate (a sample, or a seed from an earlier
 * session to the peer: cs_rel_seed_rtt()). It allows for the peer's
 * delayed ACK and for RTT variance, so that it fires on silence, not on a
 * queue. */
static void arm_tlp(struct cs_rel *r, cs_ns_t now)
{
	cs_ns_t pto;

	r->tlp_deadline = CS_NS_NEVER;
	if (!r->p.tlp || !r->srtt || r->snd_una == r->snd_nxt)
		return;
	pto = CS_MAX(2 * r->srtt, r->srtt + 4 * r->rttvar) + r->p.ack_delay;
	r->tlp_deadline = now + CS_MAX(pto, r->p.tlp_min);
}

int cs_rel_stamp(struct cs_rel *r, struct cs_pkt_hdr *h, uint64_t cookie,
		 uint32_t len, cs_ns_t now)
{
	struct cs_rel_meta *m;
	uint32_t seq;

	if (r->failed)
		return -EPIPE;
	if (!window_open(r))
		return -EAGAIN;
	seq = r->snd_nxt++;
	m = meta_of(r, seq);
	m->cookie = cookie;
	m->xmit_id = r->xmit_id++;
	m->sent = now;
	m->len = len;
	m->xmits = 1;
	m->state = M_INFLIGHT;
	m->why = 0;
	m->miss_xid = 0;

	h->seq = seq;
	h->len = len;
	h->ts = now;
	h->flags &= ~(CS_PKT_F_RETX | CS_PKT_F_CE);
	if (r->ack_pending || r->ack_now)
		r->st.acks_piggy++;
	fill_ack(r, h, now);
	r->tx_bytes += len;
	r->st.data_sent++;
	r->st.bytes_sent += len;
	if (r->path)
		cs_pacer_consume(&r->path->pacer, len, now);
	arm_rto(r, now);
	arm_tlp(r, now);
	return 0;
}

int cs_rel_next_retx(const struct cs_rel *r, uint32_t *seq, uint64_t *cookie,
		     uint32_t *len)
{
	uint32_t s;

	if (!r->n_lost || r->failed)
		return -ENOENT;
	s = cs_seq_lt(r->retx_hint, r->snd_una) ? r->snd_una : r->retx_hint;
	for (; cs_seq_lt(s, r->snd_nxt); s++) {
		const struct cs_rel_meta *m = meta_of(r, s);

		if (m->state == M_LOST) {
			*seq = s;
			*cookie = m->cookie;
			*len = m->len;
			return 0;
		}
	}
	return -ENOENT;
}

int cs_rel_stamp_retx(struct cs_rel *r, struct cs_pkt_hdr *h, uint32_t seq,
		      cs_ns_t now)
{
	struct cs_rel_meta *m;

	if (r->failed)
		return -EPIPE;
	if (cs_seq_lt(seq, r->snd_una) || !cs_seq_lt(seq, r->snd_nxt))
		return -ENOENT;
	m = meta_of(r, seq);
	if (m->state != M_LOST)
		return -ENOENT;
	m->state = M_INFLIGHT;
	m->xmits++;
	m->xmit_id = r->xmit_id++;
	m->sent = now;
	if (r->frto && seq == r->frto_seq)
		r->frto_retx_at = now;
	r->n_lost--;
	if (seq == r->retx_hint)
		r->retx_hint = seq + 1;
	r->st.retx++;
	m->miss_xid = 0; /* reports about the old copy are moot */
	if (m->why == LOST_BY_SACK)
		r->st.fast_retx++;
	else if (m->why == LOST_BY_TLP)
		r->st.tlp++;

	h->seq = seq;
	h->len = m->len;
	h->ts = now;
	h->flags &= ~CS_PKT_F_CE;
	h->flags |= CS_PKT_F_RETX;
	if (r->ack_pending || r->ack_now)
		r->st.acks_piggy++;
	fill_ack(r, h, now);
	if (r->path)
		cs_pacer_consume(&r->path->pacer, m->len, now);
	arm_rto(r, now);
	return 0;
}

static void mark_lost(struct cs_rel *r, uint32_t seq, struct cs_rel_meta *m,
		      uint8_t why)
{
	m->state = M_LOST;
	m->why = why;
	/* Invariant: no packet before retx_hint is lost. */
	if (++r->n_lost == 1 || cs_seq_lt(seq, r->retx_hint))
		r->retx_hint = seq;
}

/*
 * RACK-style detection: a packet still in flight is lost once a packet
 * transmitted after it has been acknowledged and either @dupthresh such
 * transmissions followed it, or it has been out longer than an RTT plus
 * the reordering window (then re-checked at rack_deadline).
 * "Acknowledged" is judged per packet: miss_xid is the newest
 * transmission acknowledged when an ACK last reported this packet
 * missing, so a packet no bitmap covered (arrived or not) is never
 * condemned.
 * First transmissions have xmit ids increasing with seq, and a resent
 * packet's id is newer still, so the scan can stop at the first
 * first-transmission sent after the newest acknowledged one.
 */
static int detect_lost(struct cs_rel *r, cs_ns_t now)
{
	bool timed = r->st.rtt_samples != 0;
	cs_ns_t wait = r->srtt + CS_MAX(r->p.reo_wnd, r->srtt / 4);
	int found = 0;

	r->rack_deadline = CS_NS_NEVER;
	for (uint32_t s = r->snd_una; cs_seq_lt(s, r->snd_nxt); s++) {
		struct cs_rel_meta *m = meta_of(r, s);

		if (m->state != M_INFLIGHT)
			continue;
		if (m->xmit_id >= r->rack_xmit_id) {
			if (m->xmits == 1)
				break;
			continue;
		}
		if (m->miss_xid <= m->xmit_id)
			continue; /* not reported missing since */
		if (m->xmit_id + r->p.dupthresh <= m->miss_xid ||
		    (timed && now >= m->sent + wait)) {
			mark_lost(r, s, m, LOST_BY_SACK);
			found = CS_REL_LOST;
		} else if (timed && m->sent + wait < r->rack_deadline) {
			r->rack_deadline = m->sent + wait;
		}
	}
	return found;
}

/* The shortest round trip seen: the session's Karn samples or, shorter
 * when its controller saw one, the path's (shared by every session to
 * the peer; the peer's ACK delay taken out). */
static cs_ns_t min_round_trip(const struct cs_rel *r)
{
	if (r->path && r->path->cc.base_rtt < r->min_rtt)
		return r->path->cc.base_rtt;
	return r->min_rtt;
}

/* Account one newly acknowledged packet. */
static void acked_one(struct cs_rel *r, struct cs_rel_meta *m, cs_ns_t now,
		      uint64_t *bytes, const struct cs_rel_meta **sample)
{
	*bytes += m->len;
	if (m->state == M_PARKED)
		r->n_parked--;
	/* A resent packet acknowledged sooner than any round trip can be
	 * was acknowledged for its original: it says nothing about what
	 * was sent before the resend (RFC 8985, step 2). The shortest
	 * round trip is the path's (no ACK delay in it), not this
	 * session's Karn samples: a session that started behind a queue
	 * has only long ones, took every resend's prompt ACK for its
	 * original's and saw no loss after a lost window's resends. */
	if (m->xmit_id > r->rack_xmit_id &&
	    (m->xmits == 1 || now - m->sent >= min_round_trip(r)))
		r->rack_xmit_id = m->xmit_id;
	/* Karn: only a packet sent once says which send the ACK is for. */
	if (m->xmits == 1 && (!*sample || m->xmit_id > (*sample)->xmit_id))
		*sample = m;
	if (r->ops && r->ops->acked)
		r->ops->acked(r->owner, m->cookie, m->len);
}

void cs_rel_take_floor(struct cs_rel *r, const struct cs_rel *from, cs_ns_t now)
{
	cs_ns_t f = rto_floor_now(from, now);

	if (!r->p.rto_learn || f <= rto_floor_now(r, now))
		return;
	r->rto_floor = f;
	r->rto_floor_at = now;
}

void cs_rel_raise_floor(struct cs_rel *r, cs_ns_t floor, cs_ns_t now)
{
	cs_ns_t due;

	if (!r->p.rto_learn || floor <= rto_floor_now(r, now))
		return;
	r->rto_floor = floor;
	r->rto_floor_at = now;
	if (r->failed || r->rto_deadline == CS_NS_NEVER)
		return;
	due = oldest_rto_due(r, now);
	if (due != CS_NS_NEVER && due > r->rto_deadline)
		r->rto_deadline = due;
}

void cs_rel_seed_rtt(struct cs_rel *r, cs_ns_t srtt, cs_ns_t rttvar)
{
	if (!srtt)
		return;
	r->srtt = srtt;
	r->rttvar = rttvar;
	r->rto = r->srtt + CS_MAX(4 * r->rttvar, (cs_ns_t)1000);
	r->rto = CS_MIN(CS_MAX(r->rto, r->p.rto_min), rto_ceil(&r->p));
}

void cs_rel_seed_rtt_late(struct cs_rel *r, cs_ns_t srtt, cs_ns_t rttvar,
			  cs_ns_t now)
{
	cs_ns_t due;

	if (r->srtt || !srtt)
		return;
	cs_rel_seed_rtt(r, srtt, rttvar);
	if (r->failed || r->snd_una == r->snd_nxt)
		return;
	due = now + rto_now(r, now);
	if (r->rto_deadline != CS_NS_NEVER && due < r->rto_deadline)
		r->rto_deadline = due;
	if (r->tlp_deadline == CS_NS_NEVER && !r->n_parked)
		arm_tlp(r, now);
}

static void rtt_sample(struct cs_rel *r, cs_ns_t rtt)
{
	cs_ns_t err;

	if (!r->st.rtt_samples) {
		r->srtt = rtt;
		r->rttvar = rtt / 2;
	} else {
		/* RFC 6298: alpha 1/8, beta 1/4. */
		err = rtt > r->srtt ? rtt - r->srtt : r->srtt - rtt;
		r->rttvar = (3 * r->rttvar + err) / 4;
		r->srtt = (7 * r->srtt + rtt) / 8;
	}
	r->st.rtt_samples++;
	r->last_rtt = rtt; /* observe/ */
	if (rtt < r->min_rtt)
		r->min_rtt = rtt;
	r->rto = r->srtt + CS_MAX(4 * r->rttvar, (cs_ns_t)1000);
	r->rto = CS_MIN(CS_MAX(r->rto, r->p.rto_min), rto_ceil(&r->p));
	r->backoff = 0;
}

/*
 * Record that an ACK reported seqs @from .. @from + @n - 1 missing where
 * @clear has the bit set (bit 0 for @from). Returns whether any packet
 * in flight was. Called after the ACK's acknowledgements were counted,
 * so rack_xmit_id is what the receiver had when it made the ACK.
 */
static bool mark_missing(struct cs_rel *r, uint32_t from, uint32_t n,
			 uint64_t clear)
{
	bool any = false;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = from + i;
		struct cs_rel_meta *m;

		if (!(clear >> i & 1) || cs_seq_lt(s, r->snd_una))
			continue;
		if (!cs_seq_lt(s, r->snd_nxt))
			break;
		m = meta_of(r, s);
		if (m->state != M_INFLIGHT)
			continue;
		m->miss_xid = r->rack_xmit_id;
		any = true;
	}
	return any;
}

static bool any_in_flight(const struct cs_rel *r)
{
	for (uint32_t s = r->snd_una; cs_seq_lt(s, r->snd_nxt); s++)
		if (meta_of(r, s)->state == M_INFLIGHT)
			return true;
	return false;
}

/*
 * With nothing in flight but parked packets, the next park probe: the
 * RTO with its back-off, but never more than rel.rto_max away. A learnt
 * floor or an RTT measured through deep queues may have raised the RTO
 * towards rel.rto_ceil (100 ms); a parked session whose resume was lost
 * would then wait that long for each probe.
 */
static void arm_park_probe(struct cs_rel *r, cs_ns_t now)
{
	r->rto_deadline = now + CS_MIN(rto_now(r, now), r->p.rto_max);
}

/*
 * The peer had no room for @from .. @from + @n - 1: park those still out
 * (what it acknowledged is not: a packet that arrived inside the range).
 * The refusal is an answer: the peer is alive and the path works, so the
 * timeout count starts over and a timeout's rate cut whose probe was
 * refused is taken back.
 */
static int park_busy(struct cs_rel *r, uint32_t from, uint32_t n, cs_ns_t now)
{
	uint32_t s = cs_seq_lt(from, r->snd_una) ? r->snd_una : from,
		 end = cs_seq_lt(r->snd_nxt, from + n) ? r->snd_nxt : from + n;
	bool any = false;

	for (; cs_seq_lt(s, end); s++) {
		struct cs_rel_meta *m = meta_of(r, s);

		if (m->state != M_INFLIGHT && m->state != M_LOST)
			continue;
		if (m->state == M_LOST)
			r->n_lost--;
		m->state = M_PARKED;
		r->n_parked++;
		r->st.parked++;
		any = true;
		if (r->frto && s == r->frto_seq) {
			r->frto = false;
			if (r->path)
				cs_path_on_spurious(r->path, now);
		}
	}
	if (!any)
		return 0;
	/* the back-off stays: a receiver that keeps refusing the probes
	 * is probed ever less often, up to rel.rto_max apart */
	r->consecutive_to = 0;
	r->rto_deadline = CS_NS_NEVER;
	if (any_in_flight(r))
		arm_rto(r, now);
	else
		arm_park_probe(r, now);
	return 0;
}

/* Every parked packet is to be resent (the peer said resume). */
static int unpark(struct cs_rel *r)
{
	int res = 0;

	if (!r->n_parked)
		return 0;
	r->st.resumes++;
	for (uint32_t s = r->snd_una; r->n_parked && cs_seq_lt(s, r->snd_nxt);
	     s++) {
		struct cs_rel_meta *m = meta_of(r, s);

		if (m->state != M_PARKED)
			continue;
		r->n_parked--;
		mark_lost(r, s, m, LOST_BY_RESUME);
		res = CS_REL_LOST;
	}
	return res;
}

static int process_ack(struct cs_rel *r, const struct cs_pkt_hdr *h,
		       cs_ns_t now)
{
	const struct cs_rel_meta *sample = NULL;
	uint32_t ack = h->ack, base, una0 = r->snd_una;
	uint64_t bytes = 0, bits;
	bool missing, busy = h->flags & CS_PKT_F_BUSY, probe_acked = false;
	int res = 0;

	if (cs_seq_lt(r->snd_nxt, ack)) {
		r->st.bad_acks++;
		return 0;
	}
	if (r->p.credit && cs_seq_lt(r->credit_limit, h->credit))
		r->credit_limit = h->credit;
	while (cs_seq_lt(r->snd_una, ack)) {
		struct cs_rel_meta *m = meta_of(r, r->snd_una);

		if (m->state == M_SACKED)
			r->n_sacked--;
		else
			acked_one(r, m, now, &bytes, &sample);
		if (m->why == LOST_BY_PROBE && m->state == M_INFLIGHT)
			probe_acked = true;
		if (m->state == M_LOST)
			r->n_lost--;
		m->state = M_FREE;
		m->xmits = 0;
		r->snd_una++;
	}
	/* An extension's bitmap starts at its seq; an ACK's after ack; a
	 * busy NACK's names packets that did NOT arrive (park_busy()). */
	base = h->type == CS_PKT_NACK ? h->seq : ack + 1;
	for (bits = busy ? 0 : h->sack; bits; bits &= bits - 1) {
		uint32_t s = base + (uint32_t)__builtin_ctzll(bits);
		struct cs_rel_meta *m;

		if (cs_seq_lt(s, r->snd_una))
			continue;
		if (!cs_seq_lt(s, r->snd_nxt))
			break;
		m = meta_of(r, s);
		if (m->state != M_INFLIGHT && m->state != M_LOST &&
		    m->state != M_PARKED)
			continue;
		if (m->state == M_LOST)
			r->n_lost--;
		if (m->why == LOST_BY_PROBE && m->state == M_INFLIGHT)
			probe_acked = true;
		acked_one(r, m, now, &bytes, &sample);
		m->state = M_SACKED;
		r->n_sacked++;
	}
	/* What this ACK says has not arrived although something after it
	 * has: the cumulative ack's seq and the clear bits below the
	 * bitmap's highest set bit (above it, packets may be in flight). */
	missing = false;
	if (h->sack && !busy) {
		uint32_t top = 63 - (uint32_t)__builtin_clzll(h->sack);
		uint64_t below = top ? (1ull << top) - 1 : 0;

		missing = mark_missing(r, ack, 1, 1);
		missing |= mark_missing(r, base, top, ~h->sack & below);
	}
	if (bytes || sample) {
		res |= CS_REL_ACKED;
		r->consecutive_to = 0;
		if (sample && now >= sample->sent)
			rtt_sample(r, now - sample->sent);
		/* The RTO restarts when the cumulative ACK moves (RFC 6298,
		 * 5.3). A SACK alone moves it no further than an RTO after
		 * the oldest packet's last transmission: later holes filled
		 * one by one (a tail probe per PTO, after a whole window and
		 * its resends were lost) must not put off for ever the
		 * timeout that resends the oldest, and a fast resend of the
		 * oldest still gets a whole RTO behind a deep queue. */
		if (r->snd_una != una0) {
			r->rto_deadline = CS_NS_NEVER;
			if (r->snd_una != r->snd_nxt)
				arm_rto(r, now);
		} else {
			cs_ns_t due = oldest_rto_due(r, now);

			if (due != CS_NS_NEVER &&
			    (r->rto_deadline == CS_NS_NEVER ||
			     due > r->rto_deadline))
				r->rto_deadline = due;
		}
		arm_tlp(r, now);
		if (r->path) {
			cs_ns_t rtt = h->ts_echo && h->ts_echo <= now
					      ? now - h->ts_echo
					      : 0;

			cs_path_on_ack(r->path, rtt, bytes,
				       h->flags & CS_PKT_F_ECE, now);
		}
	}
	if (missing)
		res |= detect_lost(r, now);
	if (busy)
		res |= park_busy(r, h->seq, CS_MIN(h->step, r->p.window), now);
	/* the peer has room again (or took a probe): resend the parked */
	if ((h->flags & CS_PKT_F_RESUME) || probe_acked)
		res |= unpark(r);
	if (r->frto && cs_seq_lt(r->frto_seq, r->snd_una)) {
		/* the packet a timeout resent is acknowledged */
		r->frto = false;
		/* Eifel (RFC 3522), by the echoed send time: an ACK
		 * made before the resent copy arrived was for the
		 * original, so the timeout was spurious, whatever it
		 * covers. Else F-RTO: an ACK of that packet alone says
		 * the rest was lost. (The echo adds the receiver's hold
		 * time: it can only make a late packet look lost.) */
		bool eifel = h->ts_echo && h->ts_echo < r->frto_retx_at;

		if (r->snd_una == r->frto_seq + 1 && !h->sack && !eifel) {
			/* and nothing sent before the timeout: lost, and
			 * the timeout's rate cut stands */
			if (r->path)
				r->path->cc.rate_before_timeout = 0;
			for (uint32_t s = r->snd_una; cs_seq_lt(s, r->snd_nxt);
			     s++) {
				struct cs_rel_meta *m = meta_of(r, s);

				if (m->state == M_INFLIGHT) {
					mark_lost(r, s, m, LOST_BY_RTO);
					res |= CS_REL_LOST;
				}
			}
		} else {
			/* Only late: learn the delay it had (rel.rto_learn),
			 * and take back the rate cut of the timeout. */
			r->st.spurious_rto++;
			if (r->p.rto_learn && now > r->frto_sent) {
				cs_ns_t f = 2 * (now - r->frto_sent);

				r->rto_floor = CS_MAX(rto_floor_now(r, now), f);
				r->rto_floor_at = now;
				r->backoff = 0;
				r->rto_deadline = CS_NS_NEVER;
				if (r->snd_una != r->snd_nxt)
					arm_rto(r, now);
			}
			if (r->path)
				cs_path_on_spurious(r->path, now);
		}
	}
	return res;
}

void cs_rel_revive(struct cs_rel *r, cs_ns_t now)
{
	if (!r->failed)
		return;
	r->failed = false;
	r->consecutive_to = 0;
	r->backoff = 0;
	r->rto_deadline = CS_NS_NEVER;
	if (r->snd_una != r->snd_nxt)
		arm_rto(r, now);
}

bool cs_rel_rx_new(const struct cs_rel *r, uint32_t seq)
{
	uint32_t off = seq - r->rcv_nxt;

	return (int32_t)off >= 0 && off < r->p.window && !rcv_bit(r, seq);
}

static int process_data(struct cs_rel *r, const struct cs_pkt_hdr *h,
			cs_ns_t now)
{
	uint32_t seq = h->seq, off = seq - r->rcv_nxt;

	/* The peer is sending: it has, or will get, our current credit;
	 * and resending: it had our resume (or probes) */
	r->credit_unconfirmed = false;
	if (h->flags & CS_PKT_F_RETX)
		r->resume_sticky = false;
	r->credit_deadline = CS_NS_NEVER;
	if ((int32_t)off < 0 || (off < r->p.window && rcv_bit(r, seq))) {
		/* Seen before: the peer probably lost our ACK; repeat it. */
		r->st.dup_rcvd++;
		r->ack_now = true;
		return CS_REL_DUP;
	}
	if (off >= r->p.window) {
		r->st.stale_rcvd++;
		r->ack_now = true;
		return CS_REL_STALE;
	}
	rcv_bit_set(r, seq, true);
	r->rx_bytes += h->len;
	r->st.data_rcvd++;
	r->st.bytes_rcvd += h->len;
	if (h->flags & CS_PKT_F_CE)
		r->ece_pending = true;
	/* Echo the newest send time; a late (reordered) packet must not make
	 * the path look slower than it is. */
	if (!r->echo_valid || h->ts >= r->echo_ts) {
		r->echo_ts = h->ts;
		r->echo_at = now;
		r->echo_valid = true;
	}
	if (off == 0) {
		uint32_t n = 0;

		while (rcv_bit(r, r->rcv_nxt) && n++ < r->p.window) {
			rcv_bit_set(r, r->rcv_nxt, false);
			r->rcv_nxt++;
		}
		/* Filled a hole: tell the sender at once. */
		if (r->rx_ooo && n > 1)
			r->ack_now = true;
		if (r->rx_ooo && !cs_seq_lt(r->rcv_nxt, r->rx_max))
			r->rx_ooo = false;
	} else {
		if (!r->rx_ooo || cs_seq_lt(r->rx_max, seq + 1))
			r->rx_max = seq + 1;
		r->rx_ooo = true;
		if (r->p.ack_ooo_now)
			r->ack_now = true;
	}
	if (++r->ack_pending >= r->p.ack_every)
		r->ack_now = true;
	if (r->ack_deadline == CS_NS_NEVER)
		r->ack_deadline = now + r->p.ack_delay;
	return CS_REL_DELIVER;
}

int cs_rel_on_packet(struct cs_rel *r, const struct cs_pkt_hdr *h, cs_ns_t now)
{
	int res = 0;

	if (h->flags & CS_PKT_F_ACK)
		res |= process_ack(r, h, now);
	if (h->type == CS_PKT_DATA)
		res |= process_data(r, h, now);
	return res;
}

bool cs_rel_ack_due(const struct cs_rel *r, cs_ns_t now)
{
	return r->ack_now || r->ext_due || r->busy_n || r->resume_due ||
	       (r->ack_pending && now >= r->ack_deadline);
}

/* Arrivals beyond the ordinary bitmap's reach? */
static bool beyond_reach(const struct cs_rel *r)
{
	return r->rx_ooo && cs_seq_lt(r->rcv_nxt + 1 + SACK_BITS, r->rx_max);
}

/* The next block of 64 beyond the reach, cycling. */
static void build_ext(struct cs_rel *r, struct cs_pkt_hdr *h, cs_ns_t now)
{
	uint32_t lo = r->rcv_nxt + 1 + SACK_BITS, base = r->ext_next;
	uint64_t bits = 0;

	if (cs_seq_lt(base, lo) || !cs_seq_lt(base, r->rx_max))
		base = lo;
	for (uint32_t i = 0; i < SACK_BITS; i++) {
		uint32_t s = base + i;

		if (!cs_seq_lt(s, r->rx_max) || s - r->rcv_nxt >= r->p.window)
			break;
		if (rcv_bit(r, s))
			bits |= 1ull << i;
	}
	r->ext_next = base + SACK_BITS;
	r->ext_due = false;
	h->type = CS_PKT_NACK;
	h->flags = CS_PKT_F_ACK;
	h->seq = base;
	h->ack = r->rcv_nxt;
	h->sack = bits;
	h->len = 0;
	h->ts = now;
	h->ts_echo = 0; /* no RTT sample from an extension */
	h->credit = r->rx_bytes + (uint32_t)r->grant;
	r->credit_adv = h->credit;
	r->st.sack_ext++;
}

uint32_t cs_rel_ack_all(struct cs_rel *r)
{
	uint32_t n = 0;

	while (cs_seq_lt(r->snd_una, r->snd_nxt)) {
		struct cs_rel_meta *m = meta_of(r, r->snd_una);

		if (m->state != M_SACKED) {
			if (r->ops && r->ops->acked)
				r->ops->acked(r->owner, m->cookie, m->len);
			n++;
		}
		m->state = M_FREE;
		m->xmits = 0;
		r->snd_una++;
	}
	r->n_lost = 0;
	r->n_sacked = 0;
	r->n_parked = 0;
	r->retx_hint = r->snd_una;
	r->frto = false;
	r->consecutive_to = 0;
	r->rto_deadline = CS_NS_NEVER;
	r->rack_deadline = CS_NS_NEVER;
	r->tlp_deadline = CS_NS_NEVER;
	r->st.implied_acks += n;
	return n;
}

/* The busy NACK: what this end could not take (cs_rel_busy()). */
static void build_busy(struct cs_rel *r, struct cs_pkt_hdr *h, cs_ns_t now)
{
	h->type = CS_PKT_NACK;
	h->flags = CS_PKT_F_ACK | CS_PKT_F_BUSY;
	h->seq = r->busy_base;
	h->step = r->busy_n; /* the range; no bitmap */
	h->ack = r->rcv_nxt;
	h->sack = 0;
	h->len = 0;
	h->ts = now;
	h->ts_echo = 0; /* no RTT sample from a refusal */
	h->credit = r->rx_bytes + (uint32_t)r->grant;
	r->credit_adv = h->credit;
	r->busy_n = 0;
	r->st.busy_sent++;
}

int cs_rel_busy(struct cs_rel *r, const struct cs_pkt_hdr *h, cs_ns_t now)
{
	int64_t lo, hi, off;
	int res = 0;

	if (h->flags & CS_PKT_F_ACK)
		res = process_ack(r, h, now);
	if (h->type != CS_PKT_DATA)
		return res;
	r->st.busy_rcvd++;
	r->busy_told = true;
	/* a refusal after a resume: its report follows, not the resume */
	r->resume_due = false;
	r->resume_sticky = false;
	/* the range of refusals not reported yet, from rcv_nxt (which may
	 * have passed its start since: packets there arrived, and the
	 * sender parks nothing it knows arrived) */
	off = (int32_t)(h->seq - r->rcv_nxt);
	lo = r->busy_n ? (int32_t)(r->busy_base - r->rcv_nxt) : off;
	hi = r->busy_n ? lo + r->busy_n : off + 1;
	lo = CS_MAX(CS_MIN(lo, off), (int64_t)0);
	hi = CS_MAX(hi, off + 1);
	r->busy_base = r->rcv_nxt + (uint32_t)lo;
	r->busy_n = (uint32_t)CS_MIN(hi - lo, (int64_t)r->p.window);
	return res;
}

void cs_rel_resume(struct cs_rel *r)
{
	if (!r->busy_told)
		return;
	/* a report not sent yet goes first: the peer parks, then resumes.
	 * The flag then rides on every ACK until the peer resends (a lost
	 * ACK must not leave it waiting for a probe) */
	r->busy_told = false;
	r->resume_due = true;
	r->resume_sticky = true;
}

void cs_rel_build_ack(struct cs_rel *r, struct cs_pkt_hdr *h, cs_ns_t now)
{
	if (r->busy_n) {
		build_busy(r, h, now);
		return;
	}
	if (r->ext_due && !r->ack_now && !r->ack_pending) {
		build_ext(r, h, now);
		return;
	}
	h->type = CS_PKT_ACK;
	h->flags = 0;
	h->seq = r->snd_nxt;
	h->len = 0;
	h->ts = now;
	fill_ack(r, h, now);
	r->ext_due = beyond_reach(r);
	r->st.acks_sent++;
}

cs_ns_t cs_rel_next_deadline(const struct cs_rel *r)
{
	cs_ns_t t = CS_MIN(CS_MIN(r->rto_deadline, r->credit_deadline),
			   CS_MIN(r->rack_deadline, r->tlp_deadline));

	if (r->ack_now || r->ext_due || r->busy_n || r->resume_due)
		return 0;
	if (r->ack_pending && r->ack_deadline < t)
		t = r->ack_deadline;
	return t;
}

/* Resend the newest packet in flight, once, unless a loss is pending. */
static int probe_tail(struct cs_rel *r)
{
	if (r->n_lost)
		return 0;
	for (uint32_t s = r->snd_nxt; cs_seq_lt(r->snd_una, s); s--) {
		struct cs_rel_meta *m = meta_of(r, s - 1);

		if (m->state == M_INFLIGHT) {
			mark_lost(r, s - 1, m, LOST_BY_TLP);
			return CS_REL_LOST;
		}
	}
	return 0;
}

/*
 * The RTO with nothing in flight but parked packets: the peer's resume
 * may have been lost. Resend the oldest parked one; its ACK resumes the
 * rest (process_ack()), another refusal parks it again. Not a loss: no
 * rate cut, not counted as a timeout; but a peer that answers nothing
 * still fails the session after max_timeouts of these.
 */
static int probe_parked(struct cs_rel *r, cs_ns_t now)
{
	if (++r->consecutive_to > r->p.max_timeouts) {
		r->failed = true;
		CS_DEBUG("session failed after %u park probes",
			 r->consecutive_to);
		return 0;
	}
	for (uint32_t s = r->snd_una; cs_seq_lt(s, r->snd_nxt); s++) {
		struct cs_rel_meta *m = meta_of(r, s);

		if (m->state != M_PARKED)
			continue;
		r->n_parked--;
		mark_lost(r, s, m, LOST_BY_PROBE);
		r->st.park_probes++;
		break;
	}
	r->backoff++;
	arm_park_probe(r, now);
	return CS_REL_LOST;
}

void cs_rel_on_ack_timers(struct cs_rel *r, cs_ns_t now)
{
	if (r->ack_pending && now >= r->ack_deadline)
		r->ack_now = true;
	if (now >= r->credit_deadline) {
		r->credit_deadline = CS_NS_NEVER;
		if (++r->credit_refreshes <= r->p.max_timeouts)
			r->ack_now = true;
		else
			r->credit_unconfirmed = false;
	}
}

int cs_rel_on_timer(struct cs_rel *r, cs_ns_t now)
{
	int res = 0;

	cs_rel_on_ack_timers(r, now);
	if (r->failed)
		return 0;
	if (now >= r->rack_deadline)
		res |= detect_lost(r, now);
	if (now >= r->tlp_deadline && now < r->rto_deadline) {
		r->tlp_deadline = CS_NS_NEVER;
		res |= probe_tail(r);
	}
	if (now < r->rto_deadline)
		return res;
	r->rto_deadline = CS_NS_NEVER;
	r->tlp_deadline = CS_NS_NEVER;
	r->rack_deadline = CS_NS_NEVER;
	if (r->snd_una == r->snd_nxt)
		return res;
	if (r->n_parked && !any_in_flight(r))
		return res | probe_parked(r, now);
	r->st.timeouts++;
	if (++r->consecutive_to > r->p.max_timeouts) {
		r->failed = true;
		CS_DEBUG("session failed after %u timeouts", r->consecutive_to);
		return 0;
	}
	/*
	 * Resend the oldest packet only (F-RTO, RFC 5682). A timeout on a
	 * machine whose CPUs are shared is usually a descheduled peer, not a
	 * lost window, and resending the whole window would cost a window of
	 * duplicates. The ACK of this one tells: if it covers packets sent
	 * before the timeout too, they were only late; if it covers this
	 * one alone, the window was lost and process_ack() resends the rest.
	 */
	for (uint32_t s = r->snd_una; cs_seq_lt(s, r->snd_nxt); s++) {
		struct cs_rel_meta *m = meta_of(r, s);

		if (m->state == M_INFLIGHT) {
			r->frto_sent = m->sent;
			r->frto_retx_at = CS_NS_NEVER; /* not resent yet */
			mark_lost(r, s, m, LOST_BY_RTO);
			res = CS_REL_LOST;
			r->frto = true;
			r->frto_seq = s;
			break;
		}
	}
	r->backoff++;
	if (r->path)
		cs_path_on_timeout(r->path, now);
	arm_rto(r, now);
	return res;
}

void cs_rel_set_grant(struct cs_rel *r, uint64_t bytes)
{
	/* What the peer may still send of what it was last told. */
	int64_t left = (int32_t)(r->credit_adv - r->rx_bytes);

	/* More credit must reach the peer now when it may be waiting for
	 * it (less than half the new grant left), and again later if that
	 * ACK is lost (credit_refresh). With more left, the peer is still
	 * sending: the ACKs of that data carry the grant, and no ACK of its
	 * own is spent (a receiver whose senders come and go re-splits its
	 * budget often). */
	if (bytes > r->grant && 2 * left < (int64_t)bytes) {
		r->ack_now = true;
		r->credit_unconfirmed = true;
		r->credit_refreshes = 0;
		r->credit_deadline = CS_NS_NEVER;
	}
	r->grant = bytes;
}
