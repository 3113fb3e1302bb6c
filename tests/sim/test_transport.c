/* SPDX-License-Identifier: MIT */
/* cs_rel + cs_path over the simulator: exact delivery under impairments. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/scen.h"

static struct cs_sim_p2p_cfg cfg(uint64_t bytes)
{
	struct cs_sim_p2p_cfg c;

	cr_assert_eq(cs_sim_p2p_defaults(&c), 0);
	c.bytes = bytes;
	return c;
}

static void expect_ok(const struct cs_sim_p2p_cfg *c,
		      struct cs_sim_p2p_result *r)
{
	cr_assert_eq(cs_sim_p2p_run(c, r), 0);
	cr_assert(r->ok, "seed %llu loss %.2f: %s", (unsigned long long)c->seed,
		  c->link.loss, r->why);
	cr_assert_eq(r->bytes_delivered, c->bytes);
	cr_assert_eq(r->delivered_twice, 0);
	cr_assert_eq(r->csum_src, r->csum_dst);
}

Test(p2p, lossless_exact_and_no_retransmissions)
{
	struct cs_sim_p2p_cfg c = cfg(8 << 20);
	struct cs_sim_p2p_result r;

	expect_ok(&c, &r);
	cr_assert_eq(r.retx, 0);
	cr_assert_eq(r.timeouts, 0);
	cr_assert_eq(r.dup_rcvd, 0);
}

/* Loss 1 %, 10 %, 30 % with duplication and reordering on. */
static void lossy(double loss)
{
	struct cs_sim_p2p_cfg c = cfg(4 << 20);
	struct cs_sim_p2p_result r;

	c.link.loss = loss;
	c.link.dup = 0.05;
	c.link.reorder = 0.05;
	c.link.corrupt = 0.01;
	expect_ok(&c, &r);
	cr_assert(r.retx > 0);
	/* duplicates did reach the receiver and were dropped, not delivered */
	cr_assert(r.dup_rcvd > 0);
}

Test(p2p, loss_1pct_dup_reorder)
{
	lossy(0.01);
}
Test(p2p, loss_10pct_dup_reorder)
{
	lossy(0.10);
}
Test(p2p, loss_30pct_dup_reorder)
{
	lossy(0.30);
}

Test(p2p, sequence_wrap)
{
	struct cs_sim_p2p_cfg c = cfg(4 << 20); /* 472 packets */
	struct cs_sim_p2p_result r;

	c.isn = 0xffffffffu - 200;
	c.link.loss = 0.05;
	c.link.reorder = 0.05;
	expect_ok(&c, &r);
}

Test(p2p, recovers_after_100ms_outage)
{
	struct cs_sim_p2p_cfg c = cfg(4 << 20);
	struct cs_sim_p2p_result r;

	c.outage_start = 100000; /* 100 us in */
	c.outage_len = 100 * CS_NS_PER_MS;
	expect_ok(&c, &r);
	cr_assert(r.time_ns > 100 * CS_NS_PER_MS);
	cr_assert(r.timeouts > 0);
	/* back within rto_max (10 ms) of the link returning */
	cr_assert(r.time_ns < c.outage_start + c.outage_len + c.xp.rel.rto_max +
				      CS_NS_PER_MS,
		  "time %llu", (unsigned long long)r.time_ns);
}

Test(p2p, dead_receiver_fails_instead_of_hanging)
{
	struct cs_sim_p2p_cfg c = cfg(16 << 20);
	struct cs_sim_p2p_result r;

	c.fail_at = 200000;
	cr_assert_eq(cs_sim_p2p_run(&c, &r), 0);
	cr_assert(!r.ok);
	cr_assert(strstr(r.why, "session failed"), "%s", r.why);
	cr_assert(r.timeouts > c.xp.rel.max_timeouts);
}

Test(p2p, replays_bit_for_bit)
{
	struct cs_sim_p2p_cfg c = cfg(2 << 20);
	struct cs_sim_p2p_result r1, r2;

	c.link.loss = 0.1;
	c.link.dup = 0.1;
	c.link.reorder = 0.1;
	c.seed = 99;
	expect_ok(&c, &r1);
	expect_ok(&c, &r2);
	cr_assert_eq(memcmp(&r1, &r2, sizeof(r1)), 0);
}

/* Random scenarios: sizes, payloads, impairments, start seqs. */
Test(p2p, property_1000_seeds, .timeout = 240)
{
	for (uint64_t seed = 1; seed <= 1000; seed++) {
		struct cs_sim_p2p_cfg c = cfg(0);
		struct cs_sim_p2p_result r;
		uint64_t s = seed * 0x9e3779b97f4a7c15ull;

		c.seed = seed;
		c.bytes = 1 + cs_rand_next(&s) % (1 << 20);
		c.payload = 64 + cs_rand_next(&s) % (CS_SIM_MTU_PAYLOAD - 63);
		c.isn = (uint32_t)cs_rand_next(&s);
		c.link.loss = cs_rand_unit(&s) * 0.3;
		c.link.dup = cs_rand_unit(&s) * 0.2;
		c.link.reorder = cs_rand_unit(&s) * 0.2;
		c.link.corrupt = cs_rand_unit(&s) * 0.05;
		c.link.delay_ns = 100 + cs_rand_next(&s) % 20000;
		c.link.gbps = 1 + cs_rand_unit(&s) * 399;
		/* and the engine's own knobs */
		c.xp.rel.window = 64u << (cs_rand_next(&s) % 5);
		c.xp.rel.ack_every = 1 + cs_rand_next(&s) % 16;
		c.xp.rel.ack_delay = cs_rand_next(&s) % 20000;
		c.xp.rel.ack_ooo_now = cs_rand_next(&s) & 1;
		c.xp.rel.dupthresh = 1 + cs_rand_next(&s) % 6;
		c.xp.rel.tlp = cs_rand_next(&s) & 1;
		c.xp.cc.enable = (cs_rand_next(&s) % 4) != 0;
		if (seed % 10 == 0) { /* an outage now and then */
			c.outage_start = cs_rand_next(&s) % 200000;
			c.outage_len = cs_rand_next(&s) % (5 * CS_NS_PER_MS);
		}
		expect_ok(&c, &r);
	}
}

Test(incast, sixteen_to_one_under_the_bound)
{
	struct cs_sim_incast_cfg c;
	struct cs_sim_incast_result r;

	cr_assert_eq(cs_sim_incast_defaults(&c), 0);
	c.senders = 16;
	c.bytes = 1 << 20;
	cr_assert_eq(cs_sim_incast_run(&c, &r), 0);
	cr_assert(r.ok, "%s", r.why);
	cr_assert_eq(r.drops, 0);
	/* credit bounds the queue: budget + one frame of overshoot each */
	cr_assert(r.queue_max <= c.credit_budget + c.senders * 9038,
		  "queue %llu", (unsigned long long)r.queue_max);
	cr_assert(r.queue_max <= c.port_buffer);
	cr_assert(r.jain > 0.5);
}

Test(incast, without_credit_the_port_overflows)
{
	struct cs_sim_incast_cfg c;
	struct cs_sim_incast_result r;

	cr_assert_eq(cs_sim_incast_defaults(&c), 0);
	c.senders = 16;
	c.bytes = 1 << 20;
	c.credit_budget = 0;
	c.port_buffer = 256 << 10;
	cr_assert_eq(cs_sim_incast_run(&c, &r), 0);
	/* still exact (retransmissions repair the drops) ... */
	cr_assert(r.ok, "%s", r.why);
	/* ... but the queue hit the port buffer and dropped */
	cr_assert(r.drops > 0);
}

/* More senders than packets in the credit budget: the receiver rotates
 * one-packet grants, so the port never holds more than the budget. */
Test(incast, many_senders_rotating_credit)
{
	struct cs_sim_incast_cfg c;
	struct cs_sim_incast_result r;

	cr_assert_eq(cs_sim_incast_defaults(&c), 0);
	c.senders = 256;
	c.bytes = 256 << 10;
	c.credit_budget = 128 << 10;
	cr_assert_eq(cs_sim_incast_run(&c, &r), 0);
	cr_assert(r.ok, "%s", r.why);
	cr_assert_eq(r.drops, 0);
	cr_assert(r.queue_max <= c.credit_budget, "queue %llu",
		  (unsigned long long)r.queue_max);
}

/* Lost credit ACKs must not strand a sender (credit refresh), and lost
 * one-packet tails must not wait for the RTO (probe). */
Test(incast, rotating_credit_survives_loss)
{
	struct cs_sim_incast_cfg c;
	struct cs_sim_incast_result r;

	cr_assert_eq(cs_sim_incast_defaults(&c), 0);
	c.senders = 128;
	c.bytes = 128 << 10;
	c.credit_budget = 64 << 10;
	c.link.loss = 0.02;
	c.link.dup = 0.02;
	c.link.reorder = 0.02;
	for (c.seed = 1; c.seed <= 5; c.seed++) {
		cr_assert_eq(cs_sim_incast_run(&c, &r), 0);
		cr_assert(r.ok, "seed %llu: %s", (unsigned long long)c.seed,
			  r.why);
	}
}
