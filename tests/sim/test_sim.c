/* SPDX-License-Identifier: MIT */
/* The simulator itself: timing, queues, impairments, timers, replay. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "sim/sim.h"

struct sink {
	unsigned n;
	cs_ns_t at[64];
	uint32_t flags[64];
	uint8_t first;
	unsigned timers;
	cs_ns_t timer_at[8];
};

static void sink_rx(struct cs_sim *sim, void *ctx, const struct cs_sim_pkt *p,
		    cs_ns_t now)
{
	struct sink *s = ctx;

	(void)sim;
	if (s->n < 64) {
		s->at[s->n] = now;
		s->flags[s->n] = p->hdr.flags;
	}
	if (p->data && !s->n)
		s->first = p->data[0];
	s->n++;
}

static void sink_timer(struct cs_sim *sim, void *ctx, cs_ns_t now)
{
	struct sink *s = ctx;

	(void)sim;
	if (s->timers < 8)
		s->timer_at[s->timers] = now;
	s->timers++;
}

static const struct cs_sim_node_ops sink_ops = { sink_rx, sink_timer };

static struct cs_sim *mk(uint64_t seed)
{
	struct cs_sim_params p = { .seed = seed, .max_payload = 8896 };
	struct cs_sim *sim;

	cr_assert_eq(cs_sim_create(&sim, &p), 0);
	return sim;
}

static const struct cs_pkt_hdr hdr0 = { .version = CS_PROTO_VERSION,
					.type = CS_PKT_DATA };

Test(sim, serialization_and_delay_are_exact)
{
	struct cs_sim *sim = mk(1);
	struct sink a = { 0 }, b = { 0 };
	struct cs_sim_link_params lp = { .gbps = 100, .delay_ns = 1000 };
	uint8_t buf[8896] = { 42 };
	uint32_t na, nb, l;

	cs_sim_node_add(sim, &sink_ops, &a, &na);
	cs_sim_node_add(sim, &sink_ops, &b, &nb);
	cr_assert_eq(cs_sim_link_add(sim, na, nb, &lp, &l), 0);
	cr_assert_eq(cs_sim_link_add(sim, na, nb, &lp, NULL), -EEXIST);
	/* 10 back-to-back frames of 118 + 8896 + 24 = 9038 bytes:
	 * 723.04 ns each at 100 Gb/s */
	for (int i = 0; i < 10; i++)
		cr_assert_eq(cs_sim_send(sim, na, nb, &hdr0, buf, 8896), 0);
	cr_assert_eq(cs_sim_backlog(sim, na, nb), 9 * 9038);
	cr_assert_eq(cs_sim_run(sim, UINT64_MAX), 0);
	cr_assert_eq(b.n, 10);
	cr_assert_eq(b.first, 42);
	cr_assert_eq(b.at[0], 723 + 1000); /* 723.04 ns */
	cr_assert_eq(b.at[9], 7230 + 1000); /* 7230.4 ns */
	cr_assert_eq(cs_sim_link_stats(sim, l)->bytes, 10 * 9038);
	cr_assert_eq(cs_sim_link_stats(sim, l)->busy_ps, 10 * 723040);
	cr_assert_eq(cs_sim_link_stats(sim, l)->queue_max, 10 * 9038);
	cr_assert_eq(cs_sim_send(sim, na, nb, &hdr0, buf, 8897), -EINVAL);
	cs_sim_destroy(sim);
}

Test(sim, tail_drop_and_ecn)
{
	struct cs_sim *sim = mk(1);
	struct sink a = { 0 }, b = { 0 };
	struct cs_sim_link_params lp = { .gbps = 10,
					 .delay_ns = 100,
					 .queue_bytes = 3 * 1142,
					 .ecn_bytes = 1142 };
	uint32_t na, nb, l;
	int drops = 0;

	cs_sim_node_add(sim, &sink_ops, &a, &na);
	cs_sim_node_add(sim, &sink_ops, &b, &nb);
	cs_sim_link_add(sim, na, nb, &lp, &l);
	for (int i = 0; i < 5; i++)
		if (cs_sim_send(sim, na, nb, &hdr0, NULL, 1000) == -ENOBUFS)
			drops++;
	cr_assert_eq(drops, 2);
	cs_sim_run(sim, UINT64_MAX);
	cr_assert_eq(b.n, 3);
	cr_assert_eq(cs_sim_link_stats(sim, l)->drop_queue, 2);
	/* the third found two frames queued (> 1142 bytes): marked */
	cr_assert(!(b.flags[0] & CS_PKT_F_CE));
	cr_assert(!(b.flags[1] & CS_PKT_F_CE));
	cr_assert(b.flags[2] & CS_PKT_F_CE);
	cr_assert_eq(cs_sim_link_stats(sim, l)->queue_max, 3 * 1142);
	cs_sim_destroy(sim);
}

Test(sim, switch_is_output_queued)
{
	struct cs_sim *sim = mk(1);
	struct sink h[4] = { 0 };
	struct cs_sim_link_params lp = { .gbps = 100, .delay_ns = 500 };
	struct cs_sim_link_params port = lp;
	uint32_t ids[4], sw;
	int down;

	port.queue_bytes = 5 * 9038;
	for (int i = 0; i < 4; i++)
		cs_sim_node_add(sim, &sink_ops, &h[i], &ids[i]);
	cr_assert_eq(cs_sim_star(sim, ids, 4, &lp, &port, &sw), 0);
	/* 3 hosts send 3 frames each to host 3 at once: 9 frames for one
	 * port of 5, arriving faster than it drains */
	for (int s = 0; s < 3; s++)
		for (int k = 0; k < 3; k++)
			cr_assert_eq(cs_sim_send(sim, ids[s], ids[3], &hdr0,
						 NULL, 8896),
				     0);
	cs_sim_run(sim, UINT64_MAX);
	down = cs_sim_link_find(sim, sw, ids[3]);
	cr_assert(down >= 0);
	cr_assert_eq(h[3].n + cs_sim_link_stats(sim, down)->drop_queue, 9);
	cr_assert(cs_sim_link_stats(sim, down)->drop_queue > 0);
	cr_assert(cs_sim_link_stats(sim, down)->queue_max <= 5 * 9038);
	cr_assert_eq(h[0].n + h[1].n + h[2].n, 0);
	cs_sim_destroy(sim);
}

static uint64_t impaired_run(uint64_t seed, struct cs_sim_link_stats *out,
			     unsigned *got)
{
	struct cs_sim *sim = mk(seed);
	struct sink a = { 0 }, b = { 0 };
	struct cs_sim_link_params lp = { .gbps = 100,
					 .delay_ns = 1000,
					 .loss = 0.1,
					 .dup = 0.1,
					 .reorder = 0.1,
					 .reorder_ns = 5000,
					 .corrupt = 0.05 };
	uint32_t na, nb, l;
	uint64_t ev;

	cs_sim_node_add(sim, &sink_ops, &a, &na);
	cs_sim_node_add(sim, &sink_ops, &b, &nb);
	cs_sim_link_add(sim, na, nb, &lp, &l);
	for (int i = 0; i < 2000; i++)
		cs_sim_send(sim, na, nb, &hdr0, NULL, 100);
	cs_sim_run(sim, UINT64_MAX);
	*out = *cs_sim_link_stats(sim, l);
	*got = b.n;
	ev = cs_sim_events(sim);
	cs_sim_destroy(sim);
	return ev;
}

Test(sim, impairments_are_seeded_and_replay)
{
	struct cs_sim_link_stats s1, s2, s3;
	unsigned g1, g2, g3;
	uint64_t e1 = impaired_run(7, &s1, &g1);
	uint64_t e2 = impaired_run(7, &s2, &g2);
	uint64_t e3 = impaired_run(8, &s3, &g3);

	(void)e3;

	cr_assert_eq(e1, e2);
	cr_assert_eq(g1, g2);
	cr_assert_eq(memcmp(&s1, &s2, sizeof(s1)), 0);
	cr_assert(memcmp(&s1, &s3, sizeof(s1)) != 0);
	/* roughly the asked-for rates, and the books balance */
	cr_assert(s1.drop_loss > 100 && s1.drop_loss < 300);
	cr_assert(s1.dups > 100 && s1.reordered > 100);
	cr_assert(s1.drop_corrupt > 30);
	cr_assert_eq(g1, s1.delivered);
	cr_assert_eq(2000 + s1.dups,
		     s1.delivered + s1.drop_loss + s1.drop_corrupt);
}

Test(sim, outage_and_node_failure)
{
	struct cs_sim *sim = mk(1);
	struct sink a = { 0 }, b = { 0 };
	struct cs_sim_link_params lp = { .gbps = 1, .delay_ns = 0 };
	uint32_t na, nb, l;

	cs_sim_node_add(sim, &sink_ops, &a, &na);
	cs_sim_node_add(sim, &sink_ops, &b, &nb);
	cs_sim_link_add(sim, na, nb, &lp, &l);
	/* 10 frames of 1142 bytes, 9136 ns each; lose those arriving in
	 * [20 us, 40 us): frames 3 and 4 (27.4 and 36.5 us) */
	cr_assert_eq(cs_sim_link_outage(sim, l, 20000, 40000), 0);
	for (int i = 0; i < 10; i++)
		cs_sim_send(sim, na, nb, &hdr0, NULL, 1000);
	cr_assert_eq(cs_sim_node_fail_at(sim, nb, 80000), 0);
	cs_sim_timer(sim, nb, 90000); /* dead by then: never fires */
	cs_sim_run(sim, UINT64_MAX);
	cr_assert_eq(cs_sim_link_stats(sim, l)->drop_outage, 2);
	/* frames 9 and 10 arrive at 82 and 91 us, after the failure */
	cr_assert_eq(cs_sim_link_stats(sim, l)->drop_dead, 2);
	cr_assert_eq(b.n, 6);
	cr_assert_eq(b.timers, 0);
	cr_assert_eq(cs_sim_send(sim, nb, na, &hdr0, NULL, 10), -ENETDOWN);
	cs_sim_destroy(sim);
}

Test(sim, one_timer_per_node_latest_wins)
{
	struct cs_sim *sim = mk(1);
	struct sink a = { 0 };
	uint32_t na;

	cs_sim_node_add(sim, &sink_ops, &a, &na);
	cs_sim_timer(sim, na, 100);
	cs_sim_timer(sim, na, 500); /* later: replaces 100 */
	cs_sim_run(sim, UINT64_MAX);
	cr_assert_eq(a.timers, 1);
	cr_assert_eq(a.timer_at[0], 500);
	cs_sim_timer(sim, na, 900);
	cs_sim_timer(sim, na, 700); /* earlier: replaces 900 */
	cs_sim_run(sim, UINT64_MAX);
	cr_assert_eq(a.timers, 2);
	cr_assert_eq(a.timer_at[1], 700);
	cs_sim_timer(sim, na, 2000);
	cs_sim_timer(sim, na, CS_NS_NEVER); /* cancelled */
	cr_assert_eq(cs_sim_run(sim, UINT64_MAX), 0);
	cr_assert_eq(a.timers, 2);
	/* run() stops at @until, keeping later events */
	cs_sim_timer(sim, na, 5000);
	cr_assert_eq(cs_sim_run(sim, 4000), 2);
	cr_assert_eq(a.timers, 2);
	cr_assert_eq(cs_sim_run(sim, UINT64_MAX), 0);
	cr_assert_eq(a.timers, 3);
	cs_sim_destroy(sim);
}
