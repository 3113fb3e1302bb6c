/* SPDX-License-Identifier: MIT */
/*
 * cs_rel: the sans-IO reliability engine for one (peer, channel) session.
 *
 * Events in (a packet header, a timer, "may I send?"), actions out (a
 * stamped header, a pure ACK to send, a retransmission to rebuild, a
 * cookie that was acknowledged). No I/O, no clock reads; memory is
 * allocated once in cs_rel_init(), never in steady state.
 *
 * Sender side: sequence numbers are u32 serial numbers (RFC 1982: a before
 * b iff (int32_t)(a - b) < 0), so they wrap. At most @window packets are
 * in flight (snd_nxt - snd_una). Loss is detected by
 *   - SACK: the receiver's ack carries the cumulative @ack (every seq
 *     before it arrived) and a 64-bit bitmap (bit i: seq ack + 1 + i
 *     arrived). A packet is deemed lost ("fast retransmit") once a packet
 *     *transmitted after it* has been acknowledged and either @dupthresh
 *     such packets were, or it has been out for srtt + max(@reo_wnd,
 *     srtt / 4) (RACK, RFC 8985: ordering by transmission, so a lost
 *     retransmission is detected the same way, and small windows recover
 *     without waiting for @dupthresh packets). Only a packet that an
 *     ACK reported missing is judged, against what had been acknowledged
 *     when that ACK was made: what no bitmap covered is unknown, not
 *     lost. The bitmap of an ordinary ACK reaches 64 packets past the
 *     cumulative ack; when arrivals lie further out, the receiver follows
 *     each ACK with one SACK extension (type CS_PKT_NACK, flag
 *     CS_PKT_F_ACK: ack and credit as usual, and bit i of sack set when
 *     seq (the header's seq field) + i arrived), cycling over the blocks
 *     of 64 beyond the reach. Owners must hand CS_PKT_NACK packets to
 *     cs_rel_on_packet() like ACKs; one that drops them only recovers
 *     more slowly;
 *   - tail loss probe: when nothing was acknowledged for
 *     max(2 * srtt, srtt + 4 * rttvar) + @ack_delay (at least @tlp_min)
 *     after the last send or ACK, the newest packet in flight is resent
 *     once, so its ACK reveals a lost tail long before the RTO;
 *   - timeout: RTO = srtt + 4 * rttvar (RFC 6298), clamped to
 *     [rto_min, rto_ceil]; on expiry every un-SACKed packet in flight is
 *     marked lost and the RTO doubles (capped at rto_max) until a fresh
 *     sample. Karn's rule: only packets transmitted exactly once give RTT
 *     samples for the RTO. After @max_timeouts consecutive timeouts
 *     without progress the session fails (cs_rel_failed()).
 *
 * WHAT A RETRANSMISSION CARRIES -- the engine keeps NO payload copies.
 * Per sequence number it keeps metadata (length, send time, transmit
 * count) and an opaque u64 @cookie given by the owner in cs_rel_stamp().
 * When a packet must be resent, cs_rel_next_retx() hands the cookie back
 * and the owner rebuilds the header fields (type, group, op, step, offset,
 * LAST flag ...) and the payload from it; cs_rel_stamp_retx() then fills in
 * seq/ack/ts. The owner guarantees, for every cookie not yet reported by
 * the @acked callback, ONE of:
 *   (a) the bytes behind the cookie are unchanged until acknowledged (p2p:
 *       the source buffer is not written until the transfer completes;
 *       PS pushes and all-to-all: the buffer stays pinned), or
 *   (b) it can prove the receiver already has that sequence number, so any
 *       retransmission is dropped there as a duplicate (ring allreduce: a
 *       region is overwritten by the all-gather result only after the
 *       neighbour received our contribution; DESIGN.md "What a
 *       retransmission carries"). In that case the owner may send the
 *       same seq with len 0 (a filler that the receiver's upper layer
 *       ignores) instead of stale bytes.
 * A retransmission must be byte-identical to the original: same payload,
 * same len, same offset. The receiver delivers each sequence number to
 * the layer above at most once, whatever the network duplicates.
 *
 * Receiver side: arrivals are tracked in a window of @window sequence
 * numbers from rcv_nxt; a new one is delivered at once, in any order (the
 * header's offset places it), a duplicate or one outside the window is
 * dropped (and re-acknowledged). ACKs are coalesced: one per @ack_every
 * data packets or @ack_delay after the first unacknowledged one, at once
 * on an out-of-order arrival when @ack_ooo_now, and piggybacked on any
 * data the session sends. The echoed timestamp is the sender's ts of the
 * newest arrival PLUS the time the receiver held it, so now - ts_echo at
 * the sender is the network RTT without the coalescing delay.
 *
 * Busy (a receiver that cannot keep a packet now): an owner that has no
 * room for a new packet (it belongs to an operation not posted there yet
 * and its hold is full) calls cs_rel_busy() instead of handing it in.
 * The receiver answers with a NACK flagged CS_PKT_F_BUSY that names the
 * range of sequence numbers it refused since its last report (seq to
 * seq + step - 1, at most @window); the sender PARKS those still in
 * flight: not lost, not resent by SACK, probe or RACK, no rate cut (the
 * refusal proves the path and the peer work). The range may span packets
 * that arrived (already acknowledged: nothing to park) and packets lost
 * on the way (parked too, and resent with the rest on the resume). When the
 * owner has room again it calls cs_rel_resume(): the next ACK carries
 * CS_PKT_F_RESUME (and so does every later one, until a resent packet
 * arrives from the peer or the owner refuses again) and the sender resends
 * every parked packet at once, paced. Should those ACKs be lost, the RTO
 * still runs while packets are parked: with nothing else in flight it
 * resends the oldest parked packet (a park probe: no rate cut, not counted
 * as a timeout; the first comes after the RTO but at most @rto_max, and a
 * probe refused again doubles the wait for the next, up to @rto_max), and
 * the ACK of a probe resumes the rest. A peer that stops answering still
 * fails the session after @max_timeouts probes.
 *
 * Credit (receiver-granted, for fan-in): when @credit is on, the sender
 * may send new data only while its cumulative count of new payload bytes
 * stays within the limit the receiver advertised: receiver's count of new
 * payload bytes received + its grant (cs_rel_set_grant(), default
 * @credit_init). Retransmissions are not charged (the bytes were charged
 * once), so a loss never leaks credit. A receiver that splits a budget B
 * over its N senders bounds the bytes queued towards it by B.
 */
#ifndef CS_CONTROL_REL_H
#define CS_CONTROL_REL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/cc.h"
#include "control/pacer.h"
#include "internal/config.h"
#include "internal/proto.h"
#include "internal/util.h"

/**
 * struct cs_rel_params - reliability tunables (config keys "rel.*")
 * @window: packets in flight per session, and the receive tracking
 *	window; a power of two in [64, 65536]. Both ends use the same value.
 * @ack_every: send an ACK after this many new data packets.
 * @ack_delay: ... or this long after the first unacknowledged one.
 * @ack_ooo_now: acknowledge at once when a packet arrives out of order.
 * @rto_init: RTO before the first RTT sample.
 * @rto_min: lower clamp of the RTO.
 * @rto_max: upper clamp, and the cap of the exponential back-off.
 * @dupthresh: later-transmitted packets acknowledged before a packet is
 *	deemed lost.
 * @reo_wnd: least reordering window of the time-based rule.
 * @tlp: send tail loss probes.
 * @tlp_min: least probe timeout.
 * @max_timeouts: consecutive timeouts without progress before failing.
 * @rto_learn: how long a learnt RTO floor takes to halve (0: no
 *	learning). A timeout that the next ACK proves spurious (the packet
 *	was only late: on shared CPUs, a descheduled peer) raises the
 *	session's RTO floor to twice the delay that packet really had, so
 *	the next stall of that size passes without a timeout; the floor then
 *	halves every @rto_learn.
 * @rto_ceil: the highest RTO that RTT samples (srtt + 4 rttvar) and the
 *	learnt floor may set (when below @rto_max: @rto_max); @rto_max
 *	caps only the back-off. On a loaded machine a peer is descheduled
 *	for tens of milliseconds (4 sidecars on 2 shared cores: floors of
 *	26-62 ms learnt), and a queue in front of a slow link holds frames
 *	longer than @rto_max: an RTO capped at @rto_max fired at every such
 *	stall, and on every packet once the RTT itself exceeded it.
 * @credit: honour receiver-granted credit when sending new data.
 * @credit_init: the grant both ends assume before any ACK (bytes).
 * @credit_refresh: a grown grant is re-sent after this long (doubling,
 *	at most @max_timeouts times) until data from the peer shows it
 *	arrived: a lost credit ACK must not leave a sender waiting forever.
 */
struct cs_rel_params {
	uint32_t window;
	uint32_t ack_every;
	uint64_t ack_delay;
	bool ack_ooo_now;
	uint64_t rto_init;
	uint64_t rto_min;
	uint64_t rto_max;
	uint32_t dupthresh;
	uint64_t reo_wnd;
	bool tlp;
	uint64_t tlp_min;
	uint32_t max_timeouts;
	uint64_t rto_learn;
	uint64_t rto_ceil;
	bool credit;
	uint64_t credit_init;
	uint64_t credit_refresh;
};

extern const struct cs_cfg_entry cs_rel_cfg[];
extern const size_t cs_rel_cfg_len;

/**
 * cs_rel_params_default - fill @p from the config table's defaults
 * @p: parameters to fill
 * Returns: 0 (or -EINVAL if a default in the table is broken).
 */
int cs_rel_params_default(struct cs_rel_params *p);

/**
 * cs_rel_params_check - are @p consistent? (what the table cannot say)
 * @p: parameters
 * @err: message naming the key (may be NULL)
 * @errlen: its size
 * Returns: 0 or -EINVAL.
 */
int cs_rel_params_check(const struct cs_rel_params *p, char *err,
			size_t errlen);

/* cs_rel_on_packet() result bits. */
#define CS_REL_DELIVER 0x1 /* new data: hand the payload up (once) */
#define CS_REL_DUP 0x2 /* data seen before: drop it */
#define CS_REL_STALE 0x4 /* data beyond the receive window: drop it */
#define CS_REL_ACKED 0x8 /* acknowledged new data: window may open */
#define CS_REL_LOST 0x10 /* loss detected: retransmissions pending */

/**
 * struct cs_rel_ops - owner callbacks (all optional)
 * @acked: @cookie (sent with @len payload bytes) has been acknowledged,
 *	cumulatively or selectively; it will never be asked for again.
 *	Called from cs_rel_on_packet(); must not call back into @r.
 */
struct cs_rel_ops {
	void (*acked)(void *owner, uint64_t cookie, uint32_t len);
};

struct cs_rel_stats {
	uint64_t data_sent; /* first transmissions */
	uint64_t bytes_sent; /* payload bytes, first transmissions */
	uint64_t retx; /* retransmissions */
	uint64_t fast_retx; /* of which triggered by SACK */
	uint64_t tlp; /* of which tail loss probes */
	uint64_t timeouts;
	uint64_t spurious_rto; /* timeouts the next ACK proved spurious */
	uint64_t acks_sent; /* pure ACKs built */
	uint64_t acks_piggy; /* ACKs carried on data */
	uint64_t sack_ext; /* SACK extension blocks built */
	uint64_t data_rcvd; /* new data delivered */
	uint64_t bytes_rcvd;
	uint64_t dup_rcvd; /* duplicates dropped */
	uint64_t stale_rcvd; /* beyond the window, dropped */
	uint64_t bad_acks; /* ack fields that made no sense, ignored */
	uint64_t rtt_samples;
	uint64_t implied_acks; /* packets cs_rel_ack_all() took as acked */
	uint64_t parked; /* packets the peer reported busy */
	uint64_t resumes; /* CS_PKT_F_RESUME received with packets parked */
	uint64_t park_probes; /* RTOs that resent a parked packet */
	uint64_t busy_rcvd; /* packets this end could not take */
	uint64_t busy_sent; /* busy NACKs built */
	uint64_t resume_sent; /* ACKs that carried CS_PKT_F_RESUME */
};

/* Per-seq sender metadata; the engine's own, not the owner's business. */
struct cs_rel_meta {
	uint64_t cookie;
	uint64_t xmit_id; /* transmission order of the last send */
	cs_ns_t sent; /* time of the last send */
	uint32_t len;
	uint64_t miss_xid; /* newest transmission acknowledged when an
			    * ACK last reported this one missing */
	uint16_t xmits; /* 0: slot free */
	uint8_t state;
	uint8_t why; /* how it was last deemed lost */
};

/**
 * struct cs_rel - one session. Embed it or allocate it; fields are the
 * engine's (read them through the accessors).
 */
struct cs_rel {
	struct cs_rel_params p;
	struct cs_path *path;
	const struct cs_rel_ops *ops;
	void *owner;
	uint32_t mask; /* window - 1 */
	bool failed;

	/* sender */
	uint32_t snd_una, snd_nxt;
	uint32_t retx_hint; /* no lost packet before this seq */
	uint32_t n_lost; /* packets marked lost, not yet resent */
	uint32_t n_sacked; /* SACKed packets above snd_una */
	uint32_t n_parked; /* reported busy by the peer, waiting (see above) */
	struct cs_rel_meta *meta;
	uint64_t xmit_id; /* next transmission's order */
	uint64_t rack_xmit_id; /* newest transmission acknowledged */
	cs_ns_t srtt, rttvar, rto;
	cs_ns_t min_rtt; /* smallest Karn sample */
	cs_ns_t last_rtt; /* newest Karn sample (observe/: RTT histogram) */
	uint64_t obs_rtt_seen; /* samples observe/ has taken (its own) */
	uint32_t backoff; /* RTO doublings since the last sample */
	bool frto; /* after a timeout: was it spurious? (rel.c) */
	uint32_t frto_seq; /* the packet the timeout resent */
	cs_ns_t frto_sent; /* when it had last been sent before that */
	cs_ns_t frto_retx_at; /* when it was resent; CS_NS_NEVER: not yet */
	cs_ns_t rto_floor; /* learnt from spurious timeouts (rto_learn) */
	cs_ns_t rto_floor_at; /* when it was last raised */
	uint32_t consecutive_to;
	cs_ns_t rto_deadline; /* CS_NS_NEVER: not armed */
	cs_ns_t rack_deadline; /* re-run loss detection (time rule) */
	cs_ns_t tlp_deadline; /* tail loss probe */
	uint32_t tx_bytes; /* cumulative new payload bytes (credit) */
	uint32_t credit_limit; /* cumulative bytes the peer allows */

	/* receiver */
	uint32_t rcv_nxt;
	uint64_t *rcv_bits; /* window bits: seq arrived (seq & mask) */
	uint32_t rx_bytes; /* cumulative new payload bytes received */
	uint64_t grant; /* credit granted beyond rx_bytes */
	uint32_t credit_adv; /* cumulative limit last advertised */
	bool credit_unconfirmed; /* grown grant, no data seen since */
	uint32_t credit_refreshes;
	cs_ns_t credit_deadline; /* re-send the grant */
	uint32_t rx_max; /* highest seq received + 1 (when rx_ooo) */
	bool rx_ooo; /* something beyond rcv_nxt arrived */
	bool echo_valid; /* echo_ts holds a data packet's ts */
	bool ext_due; /* a SACK extension block should follow */
	uint32_t busy_base; /* refused, not reported yet: busy_base .. */
	uint32_t busy_n; /* ... busy_base + busy_n - 1 (0: none) */
	bool busy_told; /* a packet was refused, no resume since */
	bool resume_due; /* the next ACK carries CS_PKT_F_RESUME, at once */
	bool resume_sticky; /* ... and every ACK until the peer resends */
	uint32_t ext_next; /* base of the next extension block */
	uint32_t ack_pending; /* data packets since the last ACK */
	bool ack_now;
	bool ece_pending;
	cs_ns_t ack_deadline;
	uint64_t echo_ts; /* ts of the newest arrival */
	cs_ns_t echo_at; /* when it arrived (hold time is added) */

	struct cs_rel_stats st;
};

/**
 * cs_rel_init - set up a session
 * @r: the session
 * @p: tunables (copied; @window must be a power of two)
 * @path: pacer and controller of the destination (shared; may be NULL for
 *	an unpaced session)
 * @ops: owner callbacks (may be NULL)
 * @owner: passed to @ops
 * @isn_tx: first sequence number this end sends
 * @isn_rx: first sequence number the peer sends (agreed at set-up)
 * Returns: 0, -EINVAL for bad parameters, -ENOMEM.
 */
int cs_rel_init(struct cs_rel *r, const struct cs_rel_params *p,
		struct cs_path *path, const struct cs_rel_ops *ops, void *owner,
		uint32_t isn_tx, uint32_t isn_rx);

/**
 * cs_rel_seed_rtt - start @r from an RTT estimate learnt by an earlier
 * session to the same peer, so that a fresh session does not wait a whole
 * rel.rto_init for its first timeout. The first sample of @r replaces the
 * estimate, as it would without this.
 * @r: a session just set up, nothing sent yet
 * @srtt: smoothed RTT, ns (0: no estimate, nothing changes)
 * @rttvar: its variation, ns
 */
void cs_rel_seed_rtt(struct cs_rel *r, cs_ns_t srtt, cs_ns_t rttvar);

/**
 * cs_rel_seed_rtt_late - as cs_rel_seed_rtt(), for a session that has
 * already sent with no estimate at all (its RTO armed from rel.rto_init,
 * no tail loss probe): the estimate is taken, and the RTO and the probe
 * are armed from it, never later than they were. Nothing changes once
 * @r has an estimate (a sample or a seed).
 * @r: the session
 * @srtt: smoothed RTT, ns (0: none)
 * @rttvar: its variation, ns
 * @now: the time
 */
void cs_rel_seed_rtt_late(struct cs_rel *r, cs_ns_t srtt, cs_ns_t rttvar,
			  cs_ns_t now);

/**
 * cs_rel_take_floor - raise @r's learnt RTO floor (rel.rto_learn) to
 * @from's: another session to the same peer saw it that late. Takes
 * effect from @r's next armed RTO.
 * @r: the session
 * @from: the session that learnt it
 * @now: current time, ns
 */
void cs_rel_take_floor(struct cs_rel *r, const struct cs_rel *from,
		       cs_ns_t now);

/**
 * cs_rel_floor_at - a learnt RTO floor at @now: @floor, set at @set_at,
 * halved once per @learn since (rel.rto_learn; 0: no floor). The transport
 * core decays the floor its owner's stalls ask for the same way.
 * Returns: ns
 */
static inline cs_ns_t cs_rel_floor_at(cs_ns_t floor, cs_ns_t set_at,
				      cs_ns_t learn, cs_ns_t now)
{
	cs_ns_t halvings;

	if (!floor || !learn)
		return 0;
	halvings = now > set_at ? (now - set_at) / learn : 0;
	return halvings >= 63 ? 0 : floor >> halvings;
}

/**
 * cs_rel_raise_floor - raise @r's learnt RTO floor (rel.rto_learn) to
 * @floor: the owner learnt from something other than this session's own
 * spurious timeouts how late the peer can be (cs_tp_away(): the owner's
 * own stalls on CPUs it shares with its peers). The floor halves every
 * rel.rto_learn as a learnt one does; an armed RTO is put off to at most
 * an RTO (with the new floor) after the oldest packet's last send, never
 * brought in. Nothing changes with rel.rto_learn = 0 or when @floor is
 * not above the floor @r has.
 * @r: the session
 * @floor: the floor, ns
 * @now: current time, ns
 */
void cs_rel_raise_floor(struct cs_rel *r, cs_ns_t floor, cs_ns_t now);

/**
 * cs_rel_fini - free what cs_rel_init() allocated
 * @r: the session
 */
void cs_rel_fini(struct cs_rel *r);

/**
 * cs_rel_tx_time - when may this session send a NEW @len-byte packet?
 * @r: the session
 * @len: payload bytes
 * @now: current time, ns
 * Returns: @now (send now), a later time (the pacer's), or CS_NS_NEVER
 *	when blocked by the window, by credit or by failure: wait for a
 *	packet (cs_rel_on_packet() returns CS_REL_ACKED) instead.
 */
cs_ns_t cs_rel_tx_time(const struct cs_rel *r, uint32_t len, cs_ns_t now);

/**
 * cs_rel_stamp - send new data: assign the next seq and fill the header
 * @r: the session
 * @h: header; the owner filled version/type/src/channel/group/epoch/op/
 *	step/offset/LAST; the engine sets seq, len, ts, the ack fields (the
 *	piggybacked ACK, CS_PKT_F_ACK), credit, and clears CS_PKT_F_RETX
 * @cookie: the owner's handle to rebuild this packet (see above)
 * @len: payload bytes
 * @now: current time, ns
 *
 * Charges the pacer. The caller checked cs_rel_tx_time() (the pacer is
 * advisory: sending early only makes later packets wait).
 * Returns: 0, -EAGAIN when the window or credit is closed, -EPIPE once the
 *	session failed.
 */
int cs_rel_stamp(struct cs_rel *r, struct cs_pkt_hdr *h, uint64_t cookie,
		 uint32_t len, cs_ns_t now);

/**
 * cs_rel_next_retx - the lowest sequence number that must be resent
 * @r: the session
 * @seq: out: its sequence number
 * @cookie: out: the owner's cookie for it
 * @len: out: its payload length
 * Returns: 0, or -ENOENT when nothing is pending. Retransmissions go
 *	before new data and are paced (cs_rel_retx_time()) but not limited
 *	by window or credit.
 */
int cs_rel_next_retx(const struct cs_rel *r, uint32_t *seq, uint64_t *cookie,
		     uint32_t *len);

/**
 * cs_rel_retx_time - when may a retransmission of @len bytes leave?
 * @r: the session
 * @len: payload bytes
 * @now: current time, ns
 * Returns: @now or the pacer's later time.
 */
cs_ns_t cs_rel_retx_time(const struct cs_rel *r, uint32_t len, cs_ns_t now);

/**
 * cs_rel_stamp_retx - resend @seq: fill the engine's fields of @h
 * @r: the session
 * @h: header rebuilt by the owner from the cookie (same fields and
 *	payload as the original); the engine sets seq, len, ts, ack fields,
 *	credit and CS_PKT_F_RETX
 * @seq: from cs_rel_next_retx()
 * @now: current time, ns
 * Returns: 0, or -ENOENT when @seq needs no retransmission (any more).
 */
int cs_rel_stamp_retx(struct cs_rel *r, struct cs_pkt_hdr *h, uint32_t seq,
		      cs_ns_t now);

/**
 * cs_rel_on_packet - process a packet from the peer (data or pure ACK)
 * @r: the session the owner demultiplexed it to (src, channel)
 * @h: its header (already validated by the codec)
 * @now: current time, ns
 *
 * The ack fields (when CS_PKT_F_ACK) update the sender side: cookies are
 * reported through @ops->acked, RTT/ECN feed the path's controller, losses
 * are marked. A CS_PKT_DATA packet updates the receiver side.
 * Returns: a mask of CS_REL_* bits; the payload is the owner's to consume
 *	only with CS_REL_DELIVER. Afterwards check cs_rel_ack_due().
 */
int cs_rel_on_packet(struct cs_rel *r, const struct cs_pkt_hdr *h, cs_ns_t now);

/**
 * cs_rel_revive - a failed session goes on: its owner gave up on what the
 * session carried (the operations behind it ended), not on the peer. What
 * is in flight stays in flight under the same sequence numbers (the peer
 * still expects them), the back-off starts over.
 * @r: the session
 * @now: current time
 */
void cs_rel_revive(struct cs_rel *r, cs_ns_t now);

/**
 * cs_rel_rx_new - would a DATA packet with sequence number @seq be new
 * here (inside the receive window, not received yet)? Lets an owner that
 * cannot take a packet now (no room to keep it) leave it unacknowledged
 * while still passing duplicates on, so that their ACK is repeated.
 * @r: the session
 * @seq: the packet's sequence number
 */
bool cs_rel_rx_new(const struct cs_rel *r, uint32_t seq);

/**
 * cs_rel_busy - this end cannot take the new DATA packet @h now (its
 * owner has no room for it); call it instead of cs_rel_on_packet(). Its
 * ACK fields are processed as cs_rel_on_packet() would; its data is not
 * received: the peer is told (a busy NACK, cs_rel_ack_due(), naming the
 * range of the refusals since the last report) and parks it until
 * cs_rel_resume().
 * @r: the session
 * @h: the packet (a DATA packet for which cs_rel_rx_new() was true)
 * @now: current time, ns
 * Returns: the CS_REL_* bits of its ACK fields.
 */
int cs_rel_busy(struct cs_rel *r, const struct cs_pkt_hdr *h, cs_ns_t now);

/* True when a packet was refused (cs_rel_busy()) since the last
 * cs_rel_resume(). */
static inline bool cs_rel_busy_told(const struct cs_rel *r)
{
	return r->busy_told;
}

/**
 * cs_rel_resume - this end has room again: the next ACK tells the peer to
 * resend what it parked. Nothing happens when no refusal was reported.
 * @r: the session
 */
void cs_rel_resume(struct cs_rel *r);

/* Packets the peer reported busy that wait for its resume. */
static inline uint32_t cs_rel_parked(const struct cs_rel *r)
{
	return r->n_parked;
}

/**
 * cs_rel_ack_due - must a pure ACK be sent now?
 * @r: the session
 * @now: current time, ns
 * Returns: true when @ack_every packets are unacknowledged, an
 *	out-of-order or duplicate arrival asked for one, the ack delay
 *	expired, or a SACK extension should follow the last ACK. Data sent
 *	by cs_rel_stamp*() carries the ACK and clears it (not the
 *	extension). Call it again after cs_rel_build_ack(): at most two in
 *	a row.
 */
bool cs_rel_ack_due(const struct cs_rel *r, cs_ns_t now);

/**
 * cs_rel_ack_at_once - acknowledge what came in without waiting for
 * @ack_every packets or @ack_delay (the caller knows no more data follows
 * soon: the single frame of a small operation, whose sender waits for this
 * ACK to finish)
 * @r: the session
 */
static inline void cs_rel_ack_at_once(struct cs_rel *r)
{
	if (r->ack_pending)
		r->ack_now = true;
}

/**
 * cs_rel_ack_all - the peer holds everything sent so far: it said so
 * another way than an ACK (it sent data of a later operation, which it
 * starts only once it has all of this one's). Every packet in flight is
 * reported through @ops->acked and nothing is resent; no RTT sample is
 * taken (the proof came late, not the packets) and the path learns
 * nothing.
 * @r: the session
 * Returns: the number of packets newly acknowledged.
 */
uint32_t cs_rel_ack_all(struct cs_rel *r);

/**
 * cs_rel_ack_drop - forget the ACK this end owes: the peer learns that
 * its data arrived another way (see cs_rel_ack_all()). A duplicate that
 * arrives later is still acknowledged.
 * @r: the session
 */
static inline void cs_rel_ack_drop(struct cs_rel *r)
{
	r->ack_pending = 0;
	r->ack_now = false;
	r->ack_deadline = CS_NS_NEVER;
}

/**
 * cs_rel_build_ack - fill a pure ACK (type CS_PKT_ACK, len 0), or the
 * SACK extension that follows one (type CS_PKT_NACK, see above)
 * @r: the session
 * @h: header; the owner filled version/src/channel/group/epoch; the engine
 *	sets type, flags, seq, ack, sack, ts, ts_echo, credit
 * @now: current time, ns
 */
void cs_rel_build_ack(struct cs_rel *r, struct cs_pkt_hdr *h, cs_ns_t now);

/**
 * cs_rel_next_deadline - the next time cs_rel_on_timer() has work
 * @r: the session
 * Returns: the earliest of the RTO, loss-detection, probe and
 *	delayed-ACK deadlines, or CS_NS_NEVER. (The pacer's time comes from
 *	cs_rel_tx_time().)
 */
cs_ns_t cs_rel_next_deadline(const struct cs_rel *r);

/**
 * cs_rel_on_timer - run expired timers
 * @r: the session
 * @now: current time, ns
 * Returns: a mask: CS_REL_LOST when the RTO fired (retransmissions are
 *	pending); then check cs_rel_ack_due() and cs_rel_failed().
 */
int cs_rel_on_timer(struct cs_rel *r, cs_ns_t now);

/**
 * cs_rel_on_ack_timers - run only the receiver's timers (delayed ACK,
 * credit refresh), not loss detection: for an owner that knows ACKs for
 * this session may still wait, unread, in its receive queue (it was
 * descheduled; cs_tp_poll()). The loss timers stay due for the next
 * cs_rel_on_timer().
 * @r: the session
 * @now: current time, ns
 */
void cs_rel_on_ack_timers(struct cs_rel *r, cs_ns_t now);

/**
 * cs_rel_set_grant - credit (bytes) granted to the peer beyond what it
 * has delivered; sent on the next ACK, at once (cs_rel_ack_due()) when it
 * grows and the peer has less than half of it left of what it was last
 * told (it may be waiting). A fan-in receiver divides its budget among
 * its senders with this; with more senders than packets in the budget it grants
 * 1 byte
 * (= one packet) to a rotating subset and 0 to the rest. A grant never
 * takes back credit already advertised.
 * @r: the session
 * @bytes: the grant
 */
void cs_rel_set_grant(struct cs_rel *r, uint64_t bytes);

/* True when everything sent so far has been acknowledged. */
static inline bool cs_rel_idle(const struct cs_rel *r)
{
	return r->snd_una == r->snd_nxt;
}

/* True once @max_timeouts consecutive timeouts passed without progress. */
/**
 * cs_rel_rtt - the session's RTT estimate, measured or seeded
 * (cs_rel_seed_rtt())
 * @r: the session
 * @srtt: out: smoothed RTT, ns
 * @rttvar: out: its variation, ns
 * Returns: false when it has none yet (nothing written).
 */
static inline bool cs_rel_rtt(const struct cs_rel *r, cs_ns_t *srtt,
			      cs_ns_t *rttvar)
{
	if (!r->srtt)
		return false;
	*srtt = r->srtt;
	*rttvar = r->rttvar;
	return true;
}

static inline bool cs_rel_failed(const struct cs_rel *r)
{
	return r->failed;
}

/* Packets in flight (sent, not cumulatively acknowledged). */
static inline uint32_t cs_rel_in_flight(const struct cs_rel *r)
{
	return r->snd_nxt - r->snd_una;
}

static inline const struct cs_rel_stats *cs_rel_stats(const struct cs_rel *r)
{
	return &r->st;
}

/* Serial-number comparison (RFC 1982) of u32 sequence numbers. */
static inline bool cs_seq_lt(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) < 0;
}

static inline bool cs_seq_le(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) <= 0;
}

#endif
