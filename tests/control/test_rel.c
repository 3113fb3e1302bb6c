/* SPDX-License-Identifier: MIT */
/* Unit tests of the cs_rel state machine, driven by hand-made headers. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "control/rel.h"

#define SEQ0 1000u

struct owner {
	uint64_t acked[4096];
	unsigned nacked;
};

static void on_acked(void *o, uint64_t cookie, uint32_t len)
{
	struct owner *ow = o;

	(void)len;
	if (ow->nacked < 4096)
		ow->acked[ow->nacked++] = cookie;
}

static const struct cs_rel_ops ops = { .acked = on_acked };

static struct cs_rel_params params(void)
{
	struct cs_rel_params p;

	cr_assert_eq(cs_rel_params_default(&p), 0);
	p.window = 64;
	p.ack_every = 2;
	p.ack_delay = 10000;
	p.rto_init = 1000000;
	p.rto_min = 100000;
	p.rto_max = 8000000;
	p.dupthresh = 3;
	p.max_timeouts = 5;
	p.reo_wnd = 2000;
	p.tlp = false; /* tested on its own below */
	p.tlp_min = 10000;
	return p;
}

/* A sender A and a receiver B, unpaced. */
static struct cs_rel a, b;
static struct owner own;

static void pair(uint32_t isn)
{
	struct cs_rel_params p = params();

	memset(&own, 0, sizeof(own));
	cr_assert_eq(cs_rel_init(&a, &p, NULL, &ops, &own, isn, 77), 0);
	cr_assert_eq(cs_rel_init(&b, &p, NULL, NULL, NULL, 77, isn), 0);
}

static void unpair(void)
{
	cs_rel_fini(&a);
	cs_rel_fini(&b);
}

static struct cs_pkt_hdr data(struct cs_rel *r, uint64_t cookie, cs_ns_t now)
{
	struct cs_pkt_hdr h;

	memset(&h, 0, sizeof(h));
	h.version = CS_PROTO_VERSION;
	h.type = CS_PKT_DATA;
	h.offset = cookie * 100;
	cr_assert_eq(cs_rel_stamp(r, &h, cookie, 100, now), 0);
	return h;
}

static struct cs_pkt_hdr ack_of(struct cs_rel *r, cs_ns_t now)
{
	struct cs_pkt_hdr h;

	memset(&h, 0, sizeof(h));
	cs_rel_build_ack(r, &h, now);
	return h;
}

Test(rel, serial_numbers_wrap)
{
	cr_assert(cs_seq_lt(0xfffffff0u, 5));
	cr_assert(!cs_seq_lt(5, 0xfffffff0u));
	cr_assert(cs_seq_le(7, 7));
	cr_assert(cs_seq_lt(0x7fffffffu, 0x80000000u));
}

Test(rel, bad_params)
{
	struct cs_rel_params p = params();
	struct cs_rel r;

	p.window = 100; /* not a power of two */
	cr_assert_eq(cs_rel_init(&r, &p, NULL, NULL, NULL, 0, 0), -EINVAL);
	p = params();
	p.window = 32; /* smaller than the SACK bitmap */
	cr_assert_eq(cs_rel_init(&r, &p, NULL, NULL, NULL, 0, 0), -EINVAL);
	p = params();
	p.rto_min = p.rto_max + 1;
	cr_assert_eq(cs_rel_init(&r, &p, NULL, NULL, NULL, 0, 0), -EINVAL);
}

Test(rel, config_table)
{
	struct cs_rel_params p;
	char err[128];

	cr_assert_eq(cs_rel_params_default(&p), 0);
	cr_assert_eq(p.window, 512);
	cr_assert_eq(p.ack_delay, 20000);
	cr_assert_eq(p.ack_every, 32);
	cr_assert_eq(cs_cfg_set(cs_rel_cfg, cs_rel_cfg_len, &p, "rel.rto_min",
				"50us", err, sizeof(err)),
		     0);
	cr_assert_eq(p.rto_min, 50000);
	cr_assert_eq(cs_cfg_set(cs_rel_cfg, cs_rel_cfg_len, &p, "rel.nope", "1",
				err, sizeof(err)),
		     -ENOENT);
	cr_assert_eq(cs_cfg_set(cs_rel_cfg, cs_rel_cfg_len, &p, "rel.window",
				"1", err, sizeof(err)),
		     -EINVAL);
	cr_assert(strstr(err, "rel.window"));
}

Test(rel, in_order_delivery_and_cumulative_ack)
{
	struct cs_pkt_hdr h, ack;

	pair(SEQ0);
	for (unsigned i = 0; i < 4; i++) {
		h = data(&a, i, 10 * i);
		cr_assert_eq(h.seq, SEQ0 + i);
		cr_assert_eq(cs_rel_on_packet(&b, &h, 100 + i), CS_REL_DELIVER);
	}
	/* ack_every = 2: due after the 2nd and 4th */
	cr_assert(cs_rel_ack_due(&b, 104));
	ack = ack_of(&b, 104);
	cr_assert_eq(ack.type, CS_PKT_ACK);
	cr_assert(ack.flags & CS_PKT_F_ACK);
	cr_assert_eq(ack.ack, SEQ0 + 4);
	cr_assert_eq(ack.sack, 0);
	cr_assert(!cs_rel_ack_due(&b, 104));
	cr_assert_eq(cs_rel_in_flight(&a), 4);
	cr_assert(cs_rel_on_packet(&a, &ack, 200) & CS_REL_ACKED);
	cr_assert(cs_rel_idle(&a));
	cr_assert_eq(own.nacked, 4);
	cr_assert_eq(cs_rel_next_deadline(&a), CS_NS_NEVER);
	unpair();
}

/* The single frame of a small op: its sender waits for the ACK. */
Test(rel, ack_at_once)
{
	struct cs_pkt_hdr h;

	pair(SEQ0);
	cs_rel_ack_at_once(&b); /* nothing received: nothing to say */
	cr_assert(!cs_rel_ack_due(&b, 0));
	h = data(&a, 0, 0);
	cr_assert_eq(cs_rel_on_packet(&b, &h, 100), CS_REL_DELIVER);
	/* ack_every = 2, ack_delay = 10 us: not yet */
	cr_assert(!cs_rel_ack_due(&b, 100));
	cs_rel_ack_at_once(&b);
	cr_assert(cs_rel_ack_due(&b, 100));
	cr_assert_eq(ack_of(&b, 100).ack, SEQ0 + 1);
	cr_assert(!cs_rel_ack_due(&b, 100));
	unpair();
}

Test(rel, duplicates_are_delivered_once)
{
	struct cs_pkt_hdr h0 = { 0 }, h1;

	pair(SEQ0);
	h0 = data(&a, 0, 0);
	h1 = data(&a, 1, 0);
	cr_assert_eq(cs_rel_on_packet(&b, &h1, 1), CS_REL_DELIVER);
	cr_assert_eq(cs_rel_on_packet(&b, &h1, 2), CS_REL_DUP);
	cr_assert_eq(cs_rel_on_packet(&b, &h0, 3), CS_REL_DELIVER);
	cr_assert_eq(cs_rel_on_packet(&b, &h0, 4), CS_REL_DUP);
	cr_assert_eq(cs_rel_on_packet(&b, &h1, 5), CS_REL_DUP);
	cr_assert_eq(b.st.data_rcvd, 2);
	cr_assert_eq(b.st.dup_rcvd, 3);
	/* a duplicate asks for an ACK at once */
	cr_assert(cs_rel_ack_due(&b, 5));
	unpair();
}

Test(rel, beyond_window_is_dropped)
{
	struct cs_pkt_hdr h;

	pair(SEQ0);
	h = data(&a, 0, 0);
	h.seq = SEQ0 + 64; /* window is 64: seqs SEQ0..SEQ0+63 */
	cr_assert_eq(cs_rel_on_packet(&b, &h, 1), CS_REL_STALE);
	h.seq = SEQ0 + 63;
	cr_assert_eq(cs_rel_on_packet(&b, &h, 1), CS_REL_DELIVER);
	unpair();
}

Test(rel, sack_and_fast_retransmit)
{
	struct cs_pkt_hdr h[8], ack;
	uint32_t seq, len;
	uint64_t cookie;
	int m = 0;

	pair(SEQ0);
	for (unsigned i = 0; i < 8; i++)
		h[i] = data(&a, i, i);
	/* seq SEQ0 + 2 is lost */
	for (unsigned i = 0; i < 8; i++)
		if (i != 2)
			cs_rel_on_packet(&b, &h[i], 100 + i);
	ack = ack_of(&b, 110);
	cr_assert_eq(ack.ack, SEQ0 + 2);
	/* bit i: ack + 1 + i -> seqs 3..7 are bits 0..4 */
	cr_assert_eq(ack.sack, 0x1f, "sack %llx", (unsigned long long)ack.sack);
	m = cs_rel_on_packet(&a, &ack, 200);
	cr_assert(m & CS_REL_ACKED);
	cr_assert(m & CS_REL_LOST);
	cr_assert_eq(own.nacked, 7);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0 + 2);
	cr_assert_eq(cookie, 2);
	cr_assert_eq(len, 100);

	struct cs_pkt_hdr r = { 0 };

	r.type = CS_PKT_DATA;
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 210), 0);
	cr_assert(r.flags & CS_PKT_F_RETX);
	cr_assert_eq(r.seq, SEQ0 + 2);
	cr_assert_eq(r.len, 100);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), -ENOENT);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, SEQ0 + 2, 211), -ENOENT);
	cr_assert_eq(cs_rel_on_packet(&b, &r, 300), CS_REL_DELIVER);
	ack = ack_of(&b, 300);
	cr_assert_eq(ack.ack, SEQ0 + 8);
	cs_rel_on_packet(&a, &ack, 400);
	cr_assert(cs_rel_idle(&a));
	cr_assert_eq(own.nacked, 8);
	cr_assert_eq(a.st.fast_retx, 1);
	unpair();
}

Test(rel, too_few_later_acks_is_not_loss)
{
	struct cs_pkt_hdr h[3], ack;
	uint32_t seq, len;
	uint64_t cookie;

	pair(SEQ0);
	for (unsigned i = 0; i < 3; i++)
		h[i] = data(&a, i, i);
	cs_rel_on_packet(&b, &h[1], 10);
	cs_rel_on_packet(&b, &h[2], 11);
	ack = ack_of(&b, 12);
	cr_assert_eq(ack.sack, 0x3);
	/* only 2 later packets acknowledged, dupthresh 3: reordering? */
	cr_assert(!(cs_rel_on_packet(&a, &ack, 20) & CS_REL_LOST));
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), -ENOENT);
	unpair();
}

Test(rel, rto_backoff_karn_and_failure)
{
	struct cs_pkt_hdr h, r = { .type = CS_PKT_DATA }, ack;
	uint32_t seq, len;
	uint64_t cookie;
	cs_ns_t t;

	pair(SEQ0);
	h = data(&a, 0, 0);
	t = cs_rel_next_deadline(&a);
	cr_assert_eq(t, 1000000); /* rto_init */
	cr_assert_eq(cs_rel_on_timer(&a, t - 1), 0);
	cr_assert_eq(cs_rel_on_timer(&a, t), CS_REL_LOST);
	/* doubled */
	cr_assert_eq(cs_rel_next_deadline(&a), t + 2000000);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, t), 0);
	/* the ACK for a retransmitted packet gives no RTT sample (Karn) */
	cs_rel_on_packet(&b, &r, t + 500);
	ack = ack_of(&b, t + 500);
	cs_rel_on_packet(&a, &ack, t + 1000);
	cr_assert_eq(a.st.rtt_samples, 0);
	cr_assert(cs_rel_idle(&a));

	/* a fresh packet does give one, and resets the back-off */
	h = data(&a, 1, t + 2000);
	cs_rel_on_packet(&b, &h, t + 2100);
	ack = ack_of(&b, t + 2100);
	cs_rel_on_packet(&a, &ack, t + 2200);
	cr_assert_eq(a.st.rtt_samples, 1);
	cr_assert_eq(a.backoff, 0);
	cr_assert_eq(a.srtt, 200);
	cr_assert_eq(a.rto, a.p.rto_min);

	/* nobody answers: back-off capped at rto_max, then failure */
	h = data(&a, 2, 10000000);
	t = 10000000;
	for (unsigned i = 0; i < 5; i++) {
		cs_ns_t d = cs_rel_next_deadline(&a);

		cr_assert(d - t <= a.p.rto_max);
		t = d;
		cr_assert_eq(cs_rel_on_timer(&a, t), CS_REL_LOST);
		while (!cs_rel_next_retx(&a, &seq, &cookie, &len))
			cs_rel_stamp_retx(&a, &r, seq, t);
	}
	cr_assert(!cs_rel_failed(&a));
	cs_rel_on_timer(&a, cs_rel_next_deadline(&a));
	cr_assert(cs_rel_failed(&a));
	cr_assert_eq(cs_rel_tx_time(&a, 100, t), CS_NS_NEVER);
	cr_assert_eq(cs_rel_stamp(&a, &r, 3, 100, t), -EPIPE);
	unpair();
}

Test(rel, seeded_rtt_sets_the_first_timeout)
{
	cs_ns_t t;

	pair(SEQ0);
	/* no estimate: nothing changes, the first RTO is rto_init */
	cs_rel_seed_rtt(&a, 0, 0);
	data(&a, 0, 0);
	cr_assert_eq(cs_rel_next_deadline(&a), 1000000);
	unpair();

	/* an earlier session's estimate: RTO = srtt + 4 rttvar, clamped */
	pair(SEQ0);
	cs_rel_seed_rtt(&a, 300000, 100000);
	data(&a, 0, 0);
	cr_assert_eq(cs_rel_next_deadline(&a), 700000);
	cr_assert_eq(a.st.rtt_samples, 0, "a seed is not a sample");
	unpair();

	pair(SEQ0);
	cs_rel_seed_rtt(&a, 10, 1); /* far below rto_min */
	data(&a, 0, 0);
	t = cs_rel_next_deadline(&a);
	cr_assert_eq(t, a.p.rto_min);
	unpair();
}

/* F-RTO: a timeout resends one packet; its ACK decides about the rest. */
Test(rel, timeout_resends_one_then_the_ack_decides)
{
	struct cs_pkt_hdr h[3], r = { .type = CS_PKT_DATA }, ack;
	uint32_t seq, len;
	uint64_t cookie;
	unsigned n;
	cs_ns_t t;

	/* spurious: the originals were only late */
	pair(SEQ0);
	for (unsigned i = 0; i < 3; i++)
		h[i] = data(&a, i, 0);
	t = cs_rel_next_deadline(&a);
	cr_assert_eq(cs_rel_on_timer(&a, t), CS_REL_LOST);
	n = 0;
	while (!cs_rel_next_retx(&a, &seq, &cookie, &len)) {
		cr_assert_eq(seq, SEQ0, "only the oldest is resent");
		cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, t), 0);
		n++;
	}
	cr_assert_eq(n, 1);
	for (unsigned i = 0; i < 3; i++)
		cs_rel_on_packet(&b, &h[i], t + 10);
	cs_rel_on_packet(&b, &r, t + 20); /* the duplicate */
	ack = ack_of(&b, t + 20);
	cs_rel_on_packet(&a, &ack, t + 30);
	cr_assert(cs_rel_idle(&a));
	cr_assert_neq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(a.st.spurious_rto, 1);
	cr_assert_eq(a.st.retx, 1);
	unpair();

	/* real: the window was lost; only the resent packet arrives */
	pair(SEQ0);
	for (unsigned i = 0; i < 3; i++)
		h[i] = data(&a, i, 0);
	t = cs_rel_next_deadline(&a);
	cr_assert_eq(cs_rel_on_timer(&a, t), CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, t), 0);
	cr_assert_neq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cs_rel_on_packet(&b, &r, t + 10);
	ack = ack_of(&b, t + 10);
	cr_assert(cs_rel_on_packet(&a, &ack, t + 20) & CS_REL_LOST,
		  "the ACK of the resent packet alone marks the rest lost");
	n = 0;
	while (!cs_rel_next_retx(&a, &seq, &cookie, &len)) {
		cr_assert_eq(seq, SEQ0 + 1 + n);
		cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, t + 20), 0);
		cs_rel_on_packet(&b, &r, t + 30);
		n++;
	}
	cr_assert_eq(n, 2);
	ack = ack_of(&b, t + 30);
	cs_rel_on_packet(&a, &ack, t + 40);
	cr_assert(cs_rel_idle(&a));
	cr_assert_eq(a.st.spurious_rto, 0);
	unpair();
}

/*
 * A timeout on a loaded machine: the peer was descheduled, the originals
 * arrive late and its ACK covers the oldest packet alone. The echoed send
 * time (the original's, older than the resend) proves the timeout
 * spurious (Eifel), where F-RTO alone would have condemned the rest; the
 * session learns the delay (rel.rto_learn): its next RTO is at least
 * twice it.
 */
static void late_peer(bool learn)
{
	struct cs_pkt_hdr h[3], r = { .type = CS_PKT_DATA }, ack;
	const cs_ns_t t_send = 1000;
	uint32_t seq, len;
	uint64_t cookie;
	cs_ns_t t, t_ack;

	pair(SEQ0);
	if (!learn)
		a.p.rto_learn = 0;
	for (unsigned i = 0; i < 3; i++)
		h[i] = data(&a, i, t_send);
	t = cs_rel_next_deadline(&a);
	cr_assert_eq(cs_rel_on_timer(&a, t), CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, t), 0);
	/* the peer wakes 2 ms later and acknowledges the first original */
	t_ack = t + 2000000;
	cs_rel_on_packet(&b, &h[0], t_ack);
	ack = ack_of(&b, t_ack);
	cr_assert_eq(ack.ack, SEQ0 + 1, "the oldest packet alone");
	cr_assert_eq(ack.sack, 0);
	cr_assert_eq(cs_rel_on_packet(&a, &ack, t_ack) & CS_REL_LOST, 0,
		     "a late original condemns nothing");
	cr_assert_neq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(a.st.spurious_rto, 1);
	if (learn)
		cr_assert_geq(a.rto_deadline, t_ack + 2 * (t_ack - t_send),
			      "the next RTO waits out twice the delay");
	else
		cr_assert_lt(a.rto_deadline, t_ack + 2 * (t_ack - t_send));
	/* the rest arrives; all acknowledged, nothing resent */
	cs_rel_on_packet(&b, &h[1], t_ack + 10);
	cs_rel_on_packet(&b, &h[2], t_ack + 10);
	ack = ack_of(&b, t_ack + 10);
	cs_rel_on_packet(&a, &ack, t_ack + 20);
	cr_assert(cs_rel_idle(&a));
	cr_assert_eq(a.st.retx, 1);
	unpair();
}

Test(rel, late_peer_is_spurious_and_learnt)
{
	late_peer(true);
	late_peer(false);
}

/*
 * Every packet's ACK comes 20 ms late, longer than rel.rto_max (8 ms
 * here): a peer descheduled again and again, or a queue in front of a
 * slow link. The first times out (spurious); the others no more: the
 * learnt floor (twice the 20 ms seen) and the RTT samples may set an RTO
 * beyond rel.rto_max, up to rel.rto_ceil. With the RTO capped at
 * rel.rto_max (rto_ceil = rto_max: the old rule) every packet timed out.
 */
static uint64_t long_stalls(cs_ns_t learn_max)
{
	struct cs_pkt_hdr h, r = { .type = CS_PKT_DATA }, ack;
	const cs_ns_t stall = 20000000;
	cs_ns_t t = 1000, dl;
	uint32_t seq, len;
	uint64_t cookie, timeouts;

	pair(SEQ0);
	a.p.rto_learn = 1000000000;
	a.p.rto_ceil = learn_max;
	/* an RTT sample first: 10 us */
	h = data(&a, 0, t);
	cs_rel_on_packet(&b, &h, t + 5000);
	ack = ack_of(&b, t + 5000);
	cs_rel_on_packet(&a, &ack, t + 10000);
	t += 10000;
	for (unsigned k = 0; k < 10; k++) {
		h = data(&a, k + 1, t);
		dl = cs_rel_next_deadline(&a);
		if (dl < t + stall) { /* it times out before the peer wakes */
			cr_assert_eq(cs_rel_on_timer(&a, dl), CS_REL_LOST);
			cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len),
				     0);
			cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, dl), 0);
		}
		cs_rel_on_packet(&b, &h, t + stall);
		ack = ack_of(&b, t + stall);
		cs_rel_on_packet(&a, &ack, t + stall);
		cr_assert(cs_rel_idle(&a));
		t += stall + 1000;
	}
	timeouts = a.st.timeouts;
	cr_assert_eq(a.st.spurious_rto, timeouts);
	unpair();
	return timeouts;
}

Test(rel, delay_longer_than_rto_max_is_learnt)
{
	cr_assert_eq(long_stalls(100000000), 1, "later stalls timed out");
	cr_assert_eq(long_stalls(8000000), 10);
	cr_assert_eq(long_stalls(0), 10); /* 0: rel.rto_max */
}

/*
 * cs_rel_raise_floor(): the owner found itself away (cs_tp_away())
 * and raised the floor to 20 ms while a packet was in flight, its RTO
 * armed from a 10 us RTT (rto_min 100 us). The armed RTO is put off to
 * the packet's send + 20 ms, and its ACK 5 ms late (the peer was as late)
 * is no timeout. A lower floor changes nothing; the next packet's RTO
 * comes from the floor, which halves every rel.rto_learn; with
 * rel.rto_learn = 0 nothing is raised.
 */
Test(rel, raised_floor_puts_off_the_armed_rto)
{
	struct cs_pkt_hdr h, ack;
	cs_ns_t t = 1000, d;

	pair(SEQ0);
	a.p.rto_learn = 1000000000;
	h = data(&a, 0, t);
	cs_rel_on_packet(&b, &h, t + 5000);
	ack = ack_of(&b, t + 5000);
	cs_rel_on_packet(&a, &ack, t + 10000);
	t += 10000;
	h = data(&a, 1, t);
	cr_assert_eq(a.rto_deadline, t + 100000);
	cs_rel_raise_floor(&a, 20000000, t + 1000);
	cr_assert_eq(a.rto_deadline, t + 20000000);
	cs_rel_raise_floor(&a, 8000000, t + 2000);
	cr_assert_eq(a.rto_deadline, t + 20000000);
	cr_assert_eq(cs_rel_on_timer(&a, t + 5000000), 0);
	cs_rel_on_packet(&b, &h, t + 5000000);
	ack = ack_of(&b, t + 5000000);
	cs_rel_on_packet(&a, &ack, t + 5000000);
	cr_assert(cs_rel_idle(&a));
	cr_assert_eq(a.st.timeouts, 0);
	h = data(&a, 2, t + 6000000);
	cr_assert_eq(a.rto_deadline, t + 6000000 + 20000000);
	cs_rel_on_packet(&b, &h, t + 6010000);
	ack = ack_of(&b, t + 6010000);
	cs_rel_on_packet(&a, &ack, t + 6010000);
	cr_assert(cs_rel_idle(&a));
	/* one rel.rto_learn later: half */
	t += 1000 + 1500000000;
	h = data(&a, 3, t);
	cr_assert_eq(a.rto_deadline, t + 10000000);
	unpair();

	pair(SEQ0);
	a.p.rto_learn = 0;
	h = data(&a, 0, 1000);
	d = a.rto_deadline;
	cs_rel_raise_floor(&a, 20000000, 2000);
	cr_assert_eq(a.rto_deadline, d);
	unpair();
}

/* What one session learnt, another to the same peer takes
 * (cs_rel_take_floor(), shared by the transport core): its RTO waits it
 * out too; a smaller floor changes nothing. */
Test(rel, floor_is_shared)
{
	struct cs_rel_params p = params();
	struct cs_rel c, d;
	struct cs_pkt_hdr h;

	p.rto_learn = 1000000000;
	p.rto_ceil = 100000000;
	cr_assert_eq(cs_rel_init(&c, &p, NULL, NULL, NULL, 5, 6), 0);
	cr_assert_eq(cs_rel_init(&d, &p, NULL, NULL, NULL, 5, 6), 0);
	c.rto_floor = 40000000; /* as a spurious timeout of 20 ms leaves */
	c.rto_floor_at = 1000;
	cs_rel_take_floor(&d, &c, 1000);
	memset(&h, 0, sizeof(h));
	h.version = CS_PROTO_VERSION;
	h.type = CS_PKT_DATA;
	cr_assert_eq(cs_rel_stamp(&d, &h, 0, 100, 2000), 0);
	cr_assert_geq(cs_rel_next_deadline(&d), 2000 + 40000000);
	c.rto_floor = 1000000;
	cs_rel_take_floor(&d, &c, 3000);
	cr_assert_eq(d.rto_floor, 40000000);
	cs_rel_fini(&c);
	cs_rel_fini(&d);
}

Test(rel, delayed_ack_and_piggyback)
{
	struct cs_pkt_hdr h, back;

	pair(SEQ0);
	h = data(&a, 0, 0);
	cs_rel_on_packet(&b, &h, 1000);
	cr_assert(!cs_rel_ack_due(&b, 1000));
	cr_assert_eq(cs_rel_next_deadline(&b), 1000 + 10000);
	cr_assert(!cs_rel_ack_due(&b, 10999));
	cs_rel_on_timer(&b, 11000);
	cr_assert(cs_rel_ack_due(&b, 11000));
	/* data from B carries the ACK and clears it */
	back = data(&b, 9, 11000);
	cr_assert(back.flags & CS_PKT_F_ACK);
	cr_assert_eq(back.ack, SEQ0 + 1);
	cr_assert(!cs_rel_ack_due(&b, 11000));
	cr_assert_eq(b.st.acks_piggy, 1);
	/* the echo includes the 10 us B held the ACK */
	cr_assert_eq(back.ts_echo, h.ts + 10000);
	cr_assert_eq(cs_rel_on_packet(&a, &back, 12000),
		     CS_REL_ACKED | CS_REL_DELIVER);
	cr_assert(cs_rel_idle(&a));
	unpair();
}

Test(rel, window_limits_sending)
{
	struct cs_pkt_hdr h = { 0 };

	pair(SEQ0);
	for (unsigned i = 0; i < 64; i++)
		data(&a, i, 0);
	cr_assert_eq(cs_rel_tx_time(&a, 100, 0), CS_NS_NEVER);
	cr_assert_eq(cs_rel_stamp(&a, &h, 64, 100, 0), -EAGAIN);
	unpair();
}

Test(rel, credit_blocks_until_granted)
{
	struct cs_rel_params p = params();
	struct cs_pkt_hdr h, ack;

	p.credit = true;
	p.credit_init = 250; /* 2.5 packets of 100 bytes */
	cr_assert_eq(cs_rel_init(&a, &p, NULL, NULL, NULL, SEQ0, 5), 0);
	cr_assert_eq(cs_rel_init(&b, &p, NULL, NULL, NULL, 5, SEQ0), 0);
	for (unsigned i = 0; i < 3; i++) {
		h = data(&a, i, i);
		cs_rel_on_packet(&b, &h, 10 + i);
	}
	/* 300 >= 250: blocked (the overshoot is below one packet) */
	cr_assert_eq(cs_rel_tx_time(&a, 100, 20), CS_NS_NEVER);
	cs_rel_set_grant(&b, 500);
	ack = ack_of(&b, 20);
	cr_assert_eq(ack.credit, 300 + 500);
	cs_rel_on_packet(&a, &ack, 30);
	cr_assert_eq(cs_rel_tx_time(&a, 100, 30), 30);
	unpair();
}

Test(rel, sequence_wrap)
{
	struct cs_pkt_hdr h, ack;
	unsigned delivered = 0;

	pair(0xffffffe0u);
	for (unsigned round = 0; round < 4; round++) {
		for (unsigned i = 0; i < 30; i++) {
			h = data(&a, round * 30 + i, 0);
			/* drop every 7th to exercise SACK across the wrap */
			if ((round * 30 + i) % 7 == 3)
				continue;
			if (cs_rel_on_packet(&b, &h, 1) & CS_REL_DELIVER)
				delivered++;
		}
		ack = ack_of(&b, 2);
		cs_rel_on_packet(&a, &ack, 3);
		for (int k = 0; k < 3; k++) {
			uint32_t seq, len;
			uint64_t cookie;
			struct cs_pkt_hdr r = { .type = CS_PKT_DATA };

			cs_rel_on_timer(&a, cs_rel_next_deadline(&a));
			while (!cs_rel_next_retx(&a, &seq, &cookie, &len)) {
				int m;

				cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 4),
					     0);
				m = cs_rel_on_packet(&b, &r, 5);
				if (m & CS_REL_DELIVER)
					delivered++;
			}
			ack = ack_of(&b, 6);
			cs_rel_on_packet(&a, &ack, 7);
		}
		cr_assert(cs_rel_idle(&a), "round %u", round);
	}
	cr_assert_eq(delivered, 120);
	cr_assert_eq(b.st.data_rcvd, 120);
	cr_assert_eq(a.snd_nxt, 0xffffffe0u + 120);
	cr_assert(a.snd_nxt < 100); /* wrapped */
	unpair();
}

/* Packets past the SACK bitmap's reach are unknown, not lost: a late
 * ACK for a retransmission must not condemn them. */
Test(rel, beyond_sack_reach_is_not_lost)
{
	struct cs_rel_params p = params();
	struct cs_pkt_hdr h[200], ack, r = { .type = CS_PKT_DATA };
	uint32_t seq, len;
	uint64_t cookie;

	p.window = 256;
	cr_assert_eq(cs_rel_init(&a, &p, NULL, NULL, NULL, SEQ0, 5), 0);
	cr_assert_eq(cs_rel_init(&b, &p, NULL, NULL, NULL, 5, SEQ0), 0);
	for (unsigned i = 0; i < 200; i++)
		h[i] = data(&a, i, i);
	for (unsigned i = 0; i < 200; i++)
		if (i != 0 && i != 70)
			cs_rel_on_packet(&b, &h[i], 1000 + i);
	ack = ack_of(&b, 1300);
	cr_assert_eq(ack.ack, SEQ0);
	cr_assert_eq(ack.sack, ~0ull); /* seqs 1..64 */
	cr_assert(cs_rel_on_packet(&a, &ack, 1400) & CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 1500), 0);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), -ENOENT);
	cr_assert_eq(cs_rel_on_packet(&b, &r, 1600), CS_REL_DELIVER);
	ack = ack_of(&b, 1600);
	cr_assert_eq(ack.ack, SEQ0 + 70);
	cs_rel_on_packet(&a, &ack, 1700);
	/* 70 is the only hole the sender can know about */
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0 + 70);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 1800), 0);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), -ENOENT,
		     "seq %u condemned", seq);
	cr_assert_eq(cs_rel_on_packet(&b, &r, 1900), CS_REL_DELIVER);
	ack = ack_of(&b, 1900);
	cr_assert_eq(ack.ack, SEQ0 + 200);
	cs_rel_on_packet(&a, &ack, 2000);
	cr_assert(cs_rel_idle(&a));
	cr_assert_eq(b.st.dup_rcvd, 0);
	unpair();
}

/* Two packets in flight, the first lost: too few for dupthresh, but once
 * it has been out srtt + reo_wnd after a later one was acknowledged, it is
 * lost (RACK time rule), at the deadline the engine asked for. */
Test(rel, rack_time_rule_for_small_windows)
{
	struct cs_pkt_hdr h[3], ack;
	uint32_t seq, len;
	uint64_t cookie;
	cs_ns_t d;

	pair(SEQ0);
	/* one round trip first, for an RTT sample: srtt = 10 us */
	h[0] = data(&a, 0, 0);
	cs_rel_on_packet(&b, &h[0], 5000);
	ack = ack_of(&b, 5000);
	cs_rel_on_packet(&a, &ack, 10000);
	cr_assert_eq(a.srtt, 10000);

	h[1] = data(&a, 1, 20000); /* lost */
	h[2] = data(&a, 2, 21000);
	cs_rel_on_packet(&b, &h[2], 26000);
	ack = ack_of(&b, 26000);
	cr_assert_eq(ack.sack, 1);
	cr_assert(!(cs_rel_on_packet(&a, &ack, 31000) & CS_REL_LOST));
	/* wait = srtt + max(2 us, srtt / 4) = 12.5 us after its send */
	d = cs_rel_next_deadline(&a);
	cr_assert_eq(d, 20000 + 12500);
	cr_assert_eq(cs_rel_on_timer(&a, d - 1), 0);
	cr_assert_eq(cs_rel_on_timer(&a, d), CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0 + 1);
	unpair();
}

/* The last packet is lost: no later ACK can reveal it; the probe does,
 * well before the RTO. */
Test(rel, tail_loss_probe)
{
	struct cs_rel_params p = params();
	struct cs_pkt_hdr h, ack, r = { .type = CS_PKT_DATA };
	uint32_t seq, len;
	uint64_t cookie;
	cs_ns_t d;

	p.tlp = true;
	cr_assert_eq(cs_rel_init(&a, &p, NULL, NULL, NULL, SEQ0, 5), 0);
	cr_assert_eq(cs_rel_init(&b, &p, NULL, NULL, NULL, 5, SEQ0), 0);
	h = data(&a, 0, 0);
	cs_rel_on_packet(&b, &h, 5000);
	ack = ack_of(&b, 5000);
	cs_rel_on_packet(&a, &ack, 10000); /* srtt 10 us */
	h = data(&a, 1, 20000); /* lost */
	d = cs_rel_next_deadline(&a);
	/* max(2 srtt, srtt + 4 rttvar) + ack_delay, rttvar = srtt / 2 */
	cr_assert_eq(d, 20000 + 30000 + 10000);
	cr_assert(d < a.rto_deadline);
	cr_assert_eq(cs_rel_on_timer(&a, d), CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0 + 1);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, d), 0);
	cr_assert_eq(a.st.tlp, 1);
	/* one probe only: the next deadline is the RTO */
	cr_assert_eq(cs_rel_next_deadline(&a), a.rto_deadline);
	cr_assert_eq(cs_rel_on_packet(&b, &r, d + 5000), CS_REL_DELIVER);
	ack = ack_of(&b, d + 5000);
	cs_rel_on_packet(&a, &ack, d + 10000);
	cr_assert(cs_rel_idle(&a));
	cr_assert_eq(a.st.timeouts, 0);
	cs_rel_fini(&a);
	cs_rel_fini(&b);
}

/* Arrivals past the ordinary bitmap's reach are reported by extension
 * blocks (type NACK, bitmap from seq), so a second hole far out is
 * found without waiting for the first to be repaired. */
Test(rel, sack_extension_reports_far_holes)
{
	struct cs_rel_params p = params();
	struct cs_pkt_hdr h[200], ack, ext;
	uint32_t seq, len;
	uint64_t cookie;
	unsigned nlost = 0;

	p.window = 256;
	cr_assert_eq(cs_rel_init(&a, &p, NULL, NULL, NULL, SEQ0, 5), 0);
	cr_assert_eq(cs_rel_init(&b, &p, NULL, NULL, NULL, 5, SEQ0), 0);
	for (unsigned i = 0; i < 200; i++)
		h[i] = data(&a, i, i);
	for (unsigned i = 0; i < 200; i++)
		if (i != 0 && i != 150)
			cs_rel_on_packet(&b, &h[i], 1000 + i);
	cr_assert(cs_rel_ack_due(&b, 1300));
	ack = ack_of(&b, 1300);
	cr_assert_eq(ack.type, CS_PKT_ACK);
	cr_assert_eq(ack.ack, SEQ0);
	/* 65..199 lie beyond the reach: an extension is due */
	cr_assert(cs_rel_ack_due(&b, 1300));
	ext = ack_of(&b, 1300);
	cr_assert_eq(ext.type, CS_PKT_NACK);
	cr_assert(ext.flags & CS_PKT_F_ACK);
	cr_assert_eq(ext.seq, SEQ0 + 65);
	cr_assert_eq(ext.ack, SEQ0);
	cr_assert_eq(ext.sack, ~0ull); /* 65..128 all arrived */
	cr_assert(!cs_rel_ack_due(&b, 1300));
	/* the next ACK is followed by the next block, with the hole at 150 */
	b.ack_now = true;
	ack = ack_of(&b, 1301);
	ext = ack_of(&b, 1301);
	cr_assert_eq(ext.seq, SEQ0 + 129);
	cr_assert_eq(ext.sack, ~(1ull << 21), "sack %llx",
		     (unsigned long long)ext.sack);
	b.ack_now = true;
	ack_of(&b, 1302);
	ext = ack_of(&b, 1302);
	cr_assert_eq(ext.seq, SEQ0 + 193);
	cr_assert_eq(ext.sack, 0x7f); /* 193..199 */
	/* ... then it cycles back */
	b.ack_now = true;
	ack = ack_of(&b, 1303);
	ext = ack_of(&b, 1303);
	cr_assert_eq(ext.seq, SEQ0 + 65);

	/* the sender learns both holes and condemns nothing else */
	cs_rel_on_packet(&a, &ack, 1400);
	cs_rel_on_packet(&a, &ext, 1400); /* 65..128 */
	ext.seq = SEQ0 + 129;
	ext.sack = ~(1ull << 21);
	cs_rel_on_packet(&a, &ext, 1400);
	ext.seq = SEQ0 + 193;
	ext.sack = 0x7f;
	cs_rel_on_packet(&a, &ext, 1400);
	cr_assert_eq(a.n_sacked, 198);
	while (!cs_rel_next_retx(&a, &seq, &cookie, &len)) {
		struct cs_pkt_hdr r = { .type = CS_PKT_DATA };

		cr_assert(seq == SEQ0 || seq == SEQ0 + 150, "seq %u", seq);
		cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 1500), 0);
		nlost++;
	}
	cr_assert_eq(nlost, 2);
	cs_rel_fini(&a);
	cs_rel_fini(&b);
}

/* A reordered packet is resent, then its original arrives: that ACK,
 * coming sooner than a round trip after the resend, is for the
 * original, and must not make everything sent before the resend look
 * overtaken (RFC 8985 step 2). */
Test(rel, ack_of_an_original_does_not_condemn_the_rest)
{
	struct cs_pkt_hdr h[10], ack, r = { .type = CS_PKT_DATA };
	uint32_t seq, len;
	uint64_t cookie;

	pair(SEQ0);
	/* an RTT sample first: 10 us */
	h[0] = data(&a, 0, 0);
	cs_rel_on_packet(&b, &h[0], 5000);
	ack = ack_of(&b, 5000);
	cs_rel_on_packet(&a, &ack, 10000);
	for (unsigned i = 1; i < 10; i++)
		h[i] = data(&a, i, 20000 + i);
	/* 1 is held back; 2, 3, 4 overtake it */
	for (unsigned i = 2; i <= 4; i++)
		cs_rel_on_packet(&b, &h[i], 25000 + i);
	ack = ack_of(&b, 25005);
	cr_assert(cs_rel_on_packet(&a, &ack, 30000) & CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0 + 1);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 30000), 0);
	/* the original arrives, then 6 (5 is a little late) */
	cs_rel_on_packet(&b, &h[1], 30001);
	cs_rel_on_packet(&b, &h[6], 30002);
	ack = ack_of(&b, 30002);
	cr_assert_eq(ack.ack, SEQ0 + 5);
	cr_assert_eq(ack.sack, 1);
	cs_rel_on_packet(&a, &ack, 31000); /* 1 us after the resend */
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), -ENOENT,
		     "seq %u condemned", seq);
	unpair();
}

/* The peer proved delivery another way (data of its next operation): all
 * in flight is reported acknowledged once, nothing is resent, no timer is
 * left, and no RTT sample is taken from the late proof. */
Test(rel, ack_all_takes_everything_as_delivered)
{
	struct cs_pkt_hdr h[4], ack;
	uint32_t seq, len;
	uint64_t cookie;
	cs_ns_t t;

	pair(SEQ0);
	for (unsigned i = 0; i < 4; i++)
		h[i] = data(&a, i, 0);
	/* the first two were SACK-free acked the ordinary way */
	cs_rel_on_packet(&b, &h[0], 10);
	cs_rel_on_packet(&b, &h[1], 10);
	ack = ack_of(&b, 10);
	cs_rel_on_packet(&a, &ack, 20);
	cr_assert_eq(own.nacked, 2);
	cr_assert_eq(cs_rel_in_flight(&a), 2);
	/* an RTO marks the rest lost: it must not resend after ack_all */
	t = cs_rel_next_deadline(&a);
	cr_assert_eq(cs_rel_on_timer(&a, t), CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(cs_rel_ack_all(&a), 2);
	cr_assert_eq(own.nacked, 4);
	cr_assert_eq(own.acked[2], 2);
	cr_assert_eq(own.acked[3], 3);
	cr_assert(cs_rel_idle(&a));
	cr_assert_neq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(cs_rel_next_deadline(&a), CS_NS_NEVER);
	cr_assert_eq(a.st.implied_acks, 2);
	cr_assert_eq(a.st.rtt_samples, 1, "only the real ACK gave a sample");
	/* nothing left: a second call reports nothing; the real ACK that
	 * comes late is harmless */
	cr_assert_eq(cs_rel_ack_all(&a), 0);
	cs_rel_on_packet(&b, &h[2], t + 10);
	cs_rel_on_packet(&b, &h[3], t + 10);
	ack = ack_of(&b, t + 10);
	cs_rel_on_packet(&a, &ack, t + 20);
	cr_assert_eq(own.nacked, 4, "no cookie is reported twice");
	cr_assert_eq(a.st.bad_acks, 0);
	/* new data after it is tracked as usual */
	h[0] = data(&a, 9, t + 30);
	cr_assert_eq(cs_rel_in_flight(&a), 1);
	cr_assert_neq(cs_rel_next_deadline(&a), CS_NS_NEVER);
	unpair();
}

Test(rel, ack_drop_forgets_an_owed_ack_not_a_duplicate)
{
	struct cs_pkt_hdr h = { 0 };

	pair(SEQ0);
	h = data(&a, 0, 0);
	cs_rel_on_packet(&b, &h, 5);
	cr_assert(b.ack_pending);
	cr_assert(cs_rel_ack_due(&b, 5 + 10000), "the delayed ACK is due");
	cs_rel_ack_drop(&b);
	cr_assert(!cs_rel_ack_due(&b, 1000000));
	cr_assert_eq(cs_rel_next_deadline(&b), CS_NS_NEVER);
	/* the sender resends anyway (it never learnt): answered at once */
	cr_assert_eq(cs_rel_on_packet(&b, &h, 2000000), CS_REL_DUP);
	cr_assert(cs_rel_ack_due(&b, 2000000));
	unpair();
}

/*
 * A receiver with no room for seqs 1..3 (of 0..5) reports them busy: the
 * sender parks them, resends none of them however many later packets are
 * acknowledged or however long it waits for less than an RTO, counts no
 * loss; the receiver's resume brings all three back at once, and they
 * complete the transfer.
 */
Test(rel, busy_packets_park_until_resumed)
{
	struct cs_pkt_hdr h[6], ack, nack, r = { .type = CS_PKT_DATA };
	uint32_t seq, len, got = 0;
	uint64_t cookie;
	int m;

	pair(SEQ0);
	for (unsigned i = 0; i < 6; i++)
		h[i] = data(&a, i, i);
	for (unsigned i = 0; i < 6; i++) {
		if (i >= 1 && i <= 3)
			cs_rel_busy(&b, &h[i], 10 + i);
		else
			cr_assert_eq(cs_rel_on_packet(&b, &h[i], 10 + i),
				     CS_REL_DELIVER);
	}
	cr_assert(cs_rel_busy_told(&b));
	cr_assert(cs_rel_ack_due(&b, 20));
	cr_assert_eq(cs_rel_next_deadline(&b), 0);
	/* the busy NACK first, then the ordinary ACK */
	nack = ack_of(&b, 20);
	cr_assert_eq(nack.type, CS_PKT_NACK);
	cr_assert_eq(nack.flags, CS_PKT_F_ACK | CS_PKT_F_BUSY);
	cr_assert_eq(nack.seq, SEQ0 + 1);
	cr_assert_eq(nack.step, 3);
	cr_assert_eq(nack.sack, 0);
	cr_assert_eq(nack.ack, SEQ0 + 1);
	ack = ack_of(&b, 21);
	cr_assert_eq(ack.type, CS_PKT_ACK);
	cr_assert_eq(ack.ack, SEQ0 + 1);
	cr_assert_eq(ack.sack, 0xc, "sack %llx", (unsigned long long)ack.sack);
	cr_assert(!(ack.flags & CS_PKT_F_RESUME));

	m = cs_rel_on_packet(&a, &nack, 30);
	cr_assert(!(m & CS_REL_LOST));
	cr_assert_eq(cs_rel_parked(&a), 3);
	m = cs_rel_on_packet(&a, &ack, 31);
	cr_assert(!(m & CS_REL_LOST), "parked packets condemned by SACK");
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), -ENOENT);
	/* long past the reordering window, short of the RTO: nothing */
	cr_assert_eq(cs_rel_on_timer(&a, 50000), 0);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), -ENOENT);
	cr_assert_eq(a.st.retx + a.st.timeouts, 0);

	/* room again: the next ACK says resume */
	cs_rel_resume(&b);
	cr_assert(!cs_rel_busy_told(&b));
	cr_assert(cs_rel_ack_due(&b, 60000));
	ack = ack_of(&b, 60000);
	cr_assert(ack.flags & CS_PKT_F_RESUME);
	cr_assert_eq(b.st.resume_sent, 1);
	cr_assert(cs_rel_on_packet(&a, &ack, 60010) & CS_REL_LOST);
	cr_assert_eq(cs_rel_parked(&a), 0);
	while (!cs_rel_next_retx(&a, &seq, &cookie, &len)) {
		cr_assert_eq(seq, SEQ0 + 1 + got);
		cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 60020), 0);
		cr_assert_eq(cs_rel_on_packet(&b, &r, 60030), CS_REL_DELIVER);
		got++;
	}
	cr_assert_eq(got, 3);
	ack = ack_of(&b, 60040);
	cr_assert_eq(ack.ack, SEQ0 + 6);
	cs_rel_on_packet(&a, &ack, 60050);
	cr_assert(cs_rel_idle(&a));
	cr_assert_eq(own.nacked, 6);
	cr_assert_eq(a.st.parked, 3);
	cr_assert_eq(a.st.resumes, 1);
	cr_assert_eq(a.st.fast_retx + a.st.timeouts + a.st.tlp, 0);
	/* a resume with nothing refused says nothing */
	cs_rel_resume(&b);
	cr_assert(!cs_rel_ack_due(&b, 70000));
	unpair();
}

/*
 * The resume is lost: the RTO resends the oldest parked packet (a park
 * probe, not a timeout), and its ACK resumes the rest. A probe refused
 * again parks again; a peer that answers nothing fails the session after
 * max_timeouts probes, as it would after timeouts.
 */
Test(rel, lost_resume_is_recovered_by_a_park_probe)
{
	struct cs_pkt_hdr h[3], nack, ack, r = { .type = CS_PKT_DATA };
	uint32_t seq, len;
	uint64_t cookie;
	cs_ns_t t;

	pair(SEQ0);
	for (unsigned i = 0; i < 3; i++) {
		h[i] = data(&a, i, i);
		cs_rel_busy(&b, &h[i], 10);
	}
	nack = ack_of(&b, 20);
	cr_assert_eq(nack.seq, SEQ0);
	cr_assert_eq(nack.step, 3);
	cs_rel_on_packet(&a, &nack, 30);
	cr_assert_eq(cs_rel_parked(&a), 3);
	t = cs_rel_next_deadline(&a);
	cr_assert_neq(t, CS_NS_NEVER);
	cr_assert_eq(cs_rel_on_timer(&a, t), CS_REL_LOST);
	cr_assert_eq(a.st.timeouts, 0);
	cr_assert_eq(a.st.park_probes, 1);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, t), 0);
	/* refused again: parked again */
	cs_rel_busy(&b, &r, t + 10);
	nack = ack_of(&b, t + 20);
	cs_rel_on_packet(&a, &nack, t + 30);
	cr_assert_eq(cs_rel_parked(&a), 3);
	/* the next probe gets in: its ACK resumes the other two */
	t = cs_rel_next_deadline(&a);
	cr_assert_eq(cs_rel_on_timer(&a, t), CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, t), 0);
	cr_assert_eq(cs_rel_on_packet(&b, &r, t + 10), CS_REL_DELIVER);
	ack = ack_of(&b, t + 20);
	cr_assert(cs_rel_on_packet(&a, &ack, t + 30) & CS_REL_LOST);
	cr_assert_eq(cs_rel_parked(&a), 0);
	for (unsigned i = 1; i < 3; i++) {
		cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
		cr_assert_eq(seq, SEQ0 + i);
		cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, t + 40), 0);
		cs_rel_on_packet(&b, &r, t + 50);
	}
	ack = ack_of(&b, t + 60);
	cs_rel_on_packet(&a, &ack, t + 70);
	cr_assert(cs_rel_idle(&a));
	cr_assert_eq(a.st.timeouts, 0);

	/* parked, and the peer goes silent: the session fails in the end */
	h[0] = data(&a, 9, t + 100);
	cs_rel_busy(&b, &h[0], t + 110);
	nack = ack_of(&b, t + 120);
	cs_rel_on_packet(&a, &nack, t + 130);
	cr_assert_eq(cs_rel_parked(&a), 1);
	for (unsigned i = 0; i <= a.p.max_timeouts && !cs_rel_failed(&a); i++) {
		t = cs_rel_next_deadline(&a);
		cs_rel_on_timer(&a, t);
		while (!cs_rel_next_retx(&a, &seq, &cookie, &len))
			cs_rel_stamp_retx(&a, &r, seq, t);
	}
	cr_assert(cs_rel_failed(&a));
	unpair();
}

/*
 * A busy report names a range: refusals far apart are reported together,
 * a packet inside it that arrived is not parked (whether its ACK comes
 * before or after the report), and a report of packets acknowledged or
 * never sent changes nothing.
 */
Test(rel, busy_range_parks_only_what_is_out)
{
	struct cs_pkt_hdr h[5], nack, ack, r = { .type = CS_PKT_DATA };
	uint32_t seq, len;
	uint64_t cookie;

	pair(SEQ0);
	for (unsigned i = 0; i < 5; i++)
		h[i] = data(&a, i, i);
	cr_assert_eq(cs_rel_on_packet(&b, &h[0], 10), CS_REL_DELIVER);
	cs_rel_busy(&b, &h[3], 11);
	cr_assert_eq(cs_rel_on_packet(&b, &h[2], 12), CS_REL_DELIVER);
	cs_rel_busy(&b, &h[1], 13);
	nack = ack_of(&b, 20);
	cr_assert_eq(nack.seq, SEQ0 + 1);
	cr_assert_eq(nack.step, 3);
	ack = ack_of(&b, 21);
	cr_assert_eq(ack.ack, SEQ0 + 1);
	cr_assert_eq(ack.sack, 0x1); /* SEQ0 + 2 */
	/* the report first: 1, 2 and 3 parked; the ACK then takes 2 */
	cs_rel_on_packet(&a, &nack, 30);
	cr_assert_eq(cs_rel_parked(&a), 3);
	cs_rel_on_packet(&a, &ack, 31);
	cr_assert_eq(cs_rel_parked(&a), 2);
	cs_rel_resume(&b);
	ack = ack_of(&b, 40);
	cs_rel_on_packet(&a, &ack, 50);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0 + 1);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 60), 0);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0 + 3);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 60), 0);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), -ENOENT);
	cr_assert_eq(a.st.retx, 2);
	unpair();
}

/* A busy report for packets already acknowledged, or not sent, changes
 * nothing; refusals far apart are reported as one range. */
Test(rel, stale_or_far_busy_reports)
{
	struct cs_pkt_hdr h[2], nack;

	pair(SEQ0);
	h[0] = data(&a, 0, 0);
	cs_rel_on_packet(&b, &h[0], 1);
	nack = ack_of(&b, 2);
	cs_rel_on_packet(&a, &nack, 3);
	cr_assert(cs_rel_idle(&a));
	memset(&nack, 0, sizeof(nack));
	nack.type = CS_PKT_NACK;
	nack.flags = CS_PKT_F_ACK | CS_PKT_F_BUSY;
	nack.ack = SEQ0 + 1;
	nack.seq = SEQ0 - 5; /* acknowledged, and never sent */
	nack.step = 0xffffffffu; /* more than the window */
	cs_rel_on_packet(&a, &nack, 4);
	cr_assert_eq(cs_rel_parked(&a), 0);
	cr_assert_eq(a.st.bad_acks, 0);

	h[0].seq = SEQ0 + 1;
	h[1] = h[0];
	h[1].seq = SEQ0 + 1 + 50;
	cs_rel_busy(&b, &h[1], 5);
	cs_rel_busy(&b, &h[0], 5);
	nack = ack_of(&b, 6);
	cr_assert_eq(nack.seq, SEQ0 + 1);
	cr_assert_eq(nack.step, 51);
	cr_assert_eq(b.st.busy_rcvd, 2);
	cr_assert_eq(b.st.busy_sent, 1);
	unpair();
}

/*
 * A session whose RTO grew large (an RTT measured through deep queues, a
 * learnt floor) still probes its parked packets within rel.rto_max: a
 * lost resume must not cost a whole inflated RTO per probe (at the MoE
 * row with 1 MiB switch ports, 100 ms each).
 */
Test(rel, park_probe_waits_at_most_rto_max)
{
	struct cs_pkt_hdr h, nack;
	cs_ns_t t;

	pair(SEQ0);
	cs_rel_seed_rtt(&a, 40000000, 10000000); /* 40 ms */
	cr_assert_gt(a.rto, a.p.rto_max);
	h = data(&a, 0, 1000);
	cs_rel_busy(&b, &h, 2000);
	nack = ack_of(&b, 3000);
	cs_rel_on_packet(&a, &nack, 4000);
	cr_assert_eq(cs_rel_parked(&a), 1);
	t = cs_rel_next_deadline(&a);
	cr_assert_leq(t, 4000 + a.p.rto_max, "first probe %lld ns away",
		      (long long)(t - 4000));
	cr_assert_eq(cs_rel_on_timer(&a, t), CS_REL_LOST);
	cr_assert_eq(a.st.park_probes, 1);
	cr_assert_leq(cs_rel_next_deadline(&a), t + a.p.rto_max);
	unpair();
}

/* A resume rides on every ACK until the peer resends: one lost ACK does
 * not leave the parked packets to a probe. */
Test(rel, resume_repeats_until_the_peer_resends)
{
	struct cs_pkt_hdr h, nack, ack, r = { .type = CS_PKT_DATA };
	uint32_t seq, len;
	uint64_t cookie;

	pair(SEQ0);
	h = data(&a, 0, 0);
	cs_rel_busy(&b, &h, 10);
	nack = ack_of(&b, 20);
	cs_rel_on_packet(&a, &nack, 30);
	cs_rel_resume(&b);
	ack = ack_of(&b, 40); /* lost */
	cr_assert(ack.flags & CS_PKT_F_RESUME);
	ack = ack_of(&b, 50);
	cr_assert(ack.flags & CS_PKT_F_RESUME, "the resume was said once");
	cr_assert(cs_rel_on_packet(&a, &ack, 60) & CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, 70), 0);
	cr_assert_eq(cs_rel_on_packet(&b, &r, 80), CS_REL_DELIVER);
	ack = ack_of(&b, 90);
	cr_assert(!(ack.flags & CS_PKT_F_RESUME));
	unpair();
}

/* The RTO restarts when the cumulative ACK moves, not on a SACK alone:
 * arrivals that each fill a later hole must not put off for ever the
 * timeout that resends the oldest packet. */
Test(rel, sack_alone_does_not_restart_the_rto)
{
	struct cs_pkt_hdr h[4], ack;
	cs_ns_t due;

	pair(SEQ0);
	h[0] = data(&a, 0, 0);
	cs_rel_on_packet(&b, &h[0], 5000);
	ack = ack_of(&b, 5000);
	cs_rel_on_packet(&a, &ack, 10000); /* srtt 10 us, RTO rto_min */
	for (unsigned i = 1; i < 4; i++)
		h[i] = data(&a, i, 20000 + i);
	due = a.rto_deadline;
	cr_assert_eq(due, 20001 + 100000);
	/* 3 arrives, 1 and 2 not yet: the SACK leaves the timer alone */
	cs_rel_on_packet(&b, &h[3], 25000);
	ack = ack_of(&b, 25000);
	cr_assert_eq(ack.sack, 2);
	cr_assert(cs_rel_on_packet(&a, &ack, 30000) & CS_REL_ACKED);
	cr_assert_eq(a.rto_deadline, due);
	/* 1 and 2 arrive: the cumulative ACK restarts it */
	cs_rel_on_packet(&b, &h[1], 31000);
	ack = ack_of(&b, 31000);
	cr_assert_eq(ack.ack, SEQ0 + 2);
	cs_rel_on_packet(&a, &ack, 35000);
	cr_assert_eq(a.rto_deadline, 35000 + 100000);
	unpair();
}

/* A resend's prompt ACK is judged against the path's shortest round trip,
 * not only this session's samples: a session whose every sample was taken
 * behind a queue (100 us) must still see that its tail probe arrived and
 * so that what was sent before it is lost. */
Test(rel, resend_ack_judged_by_the_path_round_trip)
{
	struct cs_rel_params p = params();
	struct cs_pacer_params pp;
	struct cs_cc_params cp;
	struct cs_path path;
	struct cs_pkt_hdr h[8], ack, r = { .type = CS_PKT_DATA };
	uint32_t seq, len;
	uint64_t cookie;
	cs_ns_t d;

	cr_assert_eq(cs_cfg_defaults(cs_pacer_cfg, cs_pacer_cfg_len, &pp), 0);
	cr_assert_eq(cs_cfg_defaults(cs_cc_cfg, cs_cc_cfg_len, &cp), 0);
	cr_assert_eq(cs_path_init(&path, &pp, &cp), 0);
	p.tlp = true;
	p.rto_min = 1000000; /* the probe (~2 srtt) comes first */
	cr_assert_eq(cs_rel_init(&a, &p, &path, NULL, NULL, SEQ0, 5), 0);
	cr_assert_eq(cs_rel_init(&b, &p, NULL, NULL, NULL, 5, SEQ0), 0);
	/* the session's one sample: 100 us behind a queue */
	h[0] = data(&a, 0, 0);
	cs_rel_on_packet(&b, &h[0], 50000);
	ack = ack_of(&b, 50000);
	cs_rel_on_packet(&a, &ack, 100000);
	cr_assert_eq(a.min_rtt, 100000);
	/* another session to the peer saw the path's 5 us */
	path.cc.base_rtt = 5000;
	for (unsigned i = 1; i < 8; i++)
		h[i] = data(&a, i, 200000 + i); /* all lost */
	d = cs_rel_next_deadline(&a);
	cr_assert(d < a.rto_deadline);
	cr_assert_eq(cs_rel_on_timer(&a, d), CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0 + 7); /* the probe: the newest */
	cr_assert_eq(cs_rel_stamp_retx(&a, &r, seq, d), 0);
	cr_assert_eq(cs_rel_on_packet(&b, &r, d + 3000), CS_REL_DELIVER);
	ack = ack_of(&b, d + 3000);
	/* acknowledged 6 us after the resend: the resend's ACK */
	cr_assert(cs_rel_on_packet(&a, &ack, d + 6000) & CS_REL_LOST);
	cr_assert_eq(cs_rel_next_retx(&a, &seq, &cookie, &len), 0);
	cr_assert_eq(seq, SEQ0 + 1);
	cs_rel_fini(&a);
	cs_rel_fini(&b);
}

/* A session that sent before any RTT was known takes an estimate later:
 * its RTO comes from it (not rel.rto_init), never later than it was, and
 * a tail loss probe is armed; a session with an estimate keeps its own. */
Test(rel, late_seed_pulls_the_timers_in)
{
	struct cs_rel_params p = params();
	struct cs_pkt_hdr h;

	p.tlp = true;
	cr_assert_eq(cs_rel_init(&a, &p, NULL, NULL, NULL, SEQ0, 5), 0);
	h = data(&a, 0, 0);
	(void)h;
	cr_assert_eq(a.rto_deadline, 1000000); /* rel.rto_init */
	cr_assert_eq(a.tlp_deadline, CS_NS_NEVER);
	cs_rel_seed_rtt_late(&a, 10000, 5000, 50000);
	/* srtt + 4 rttvar = 30 us, clamped to rto_min 100 us */
	cr_assert_eq(a.rto_deadline, 50000 + 100000);
	/* max(2 srtt, srtt + 4 rttvar) + ack_delay */
	cr_assert_eq(a.tlp_deadline, 50000 + 30000 + 10000);
	/* it has one now: a second seed changes nothing */
	cs_rel_seed_rtt_late(&a, 500000, 1000, 60000);
	cr_assert_eq(a.srtt, 10000);
	cr_assert_eq(a.rto_deadline, 50000 + 100000);
	cs_rel_fini(&a);
}
