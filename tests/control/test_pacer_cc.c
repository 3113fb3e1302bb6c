/* SPDX-License-Identifier: MIT */
/* Unit tests of the pacer (GCRA) and the delay-based controller. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "control/cc.h"
#include "control/pacer.h"
#include "control/xport.h"

static struct cs_pacer_params pp(void)
{
	struct cs_pacer_params p;

	cr_assert_eq(cs_cfg_defaults(cs_pacer_cfg, cs_pacer_cfg_len, &p), 0);
	return p;
}

static struct cs_cc_params cp(void)
{
	struct cs_cc_params p;

	memset(&p, 0, sizeof(p));
	cr_assert_eq(cs_cfg_defaults(cs_cc_cfg, cs_cc_cfg_len, &p), 0);
	return p;
}

Test(pacer, bad_args)
{
	struct cs_pacer_params p = pp();
	struct cs_pacer pc;

	cr_assert_eq(cs_pacer_init(&pc, &p, 0), -EINVAL);
	p.burst_bytes = 0;
	cr_assert_eq(cs_pacer_init(&pc, &p, 1e9), -EINVAL);
}

/* Sending whenever allowed, N frames take N * frame / rate (no drift). */
Test(pacer, long_run_rate_is_exact)
{
	struct cs_pacer_params p = pp();
	struct cs_pacer pc;
	cs_ns_t now = 0;
	unsigned n = 100000;

	p.burst_bytes = 9038;
	cr_assert_eq(cs_pacer_init(&pc, &p, 12.5e9), 0); /* 100 Gb/s */
	cr_assert_eq(cs_pacer_frame_bytes(&pc, 8896), 9038);
	for (unsigned i = 0; i < n; i++) {
		now = cs_pacer_next(&pc, now);
		cs_pacer_consume(&pc, 8896, now);
	}
	/* 9038 bytes at 12.5 GB/s = 723.04 ns; the n-th leaves at (n-1)
	 * periods minus the burst, within a ns of rounding. */
	double expect = (n - 1) * 723.04 - 723.04;

	cr_assert(now >= expect - 1 && now <= expect + 1, "now %llu exp %.1f",
		  (unsigned long long)now, expect);
}

Test(pacer, burst_then_wait)
{
	struct cs_pacer_params p = pp();
	struct cs_pacer pc;

	p.burst_bytes = 2 * 1142;
	cr_assert_eq(cs_pacer_init(&pc, &p, 1e9), 0); /* 1 byte per ns */
	/* a fresh bucket lets a burst go at once */
	cr_assert_eq(cs_pacer_next(&pc, 0), 0);
	cs_pacer_consume(&pc, 1000, 0); /* 1142 bytes */
	cr_assert_eq(cs_pacer_next(&pc, 0), 0);
	cs_pacer_consume(&pc, 1000, 0);
	cr_assert_eq(cs_pacer_next(&pc, 0), 0);
	cs_pacer_consume(&pc, 1000, 0);
	/* 3 * 1142 charged, burst 2284: wait until 3426 - 2284 */
	cr_assert_eq(cs_pacer_next(&pc, 0), 1142);
	cr_assert_eq(cs_pacer_next(&pc, 2000), 2000);
}

Test(pacer, rate_change_rescales_the_wait)
{
	struct cs_pacer_params p = pp();
	struct cs_pacer pc;

	p.burst_bytes = 1142;
	cr_assert_eq(cs_pacer_init(&pc, &p, 1e8), 0); /* 0.1 byte/ns */
	cs_pacer_consume(&pc, 1000, 0);
	cs_pacer_consume(&pc, 1000, 0);
	cr_assert_eq(cs_pacer_next(&pc, 0), 11420);
	cs_pacer_set_rate(&pc, 1e9, 0); /* ten times faster */
	cr_assert_eq(cs_pacer_next(&pc, 0), 1142);
}

Test(cc, bad_params)
{
	struct cs_cc_params p = cp();
	struct cs_cc c;

	p.min_gbps = 200;
	cr_assert_eq(cs_cc_init(&c, &p), -EINVAL);
	p = cp();
	p.fs_min_cwnd = p.fs_max_cwnd;
	cr_assert_eq(cs_cc_init(&c, &p), -EINVAL);
}

Test(cc, additive_increase_below_target)
{
	struct cs_cc_params p = cp();
	struct cs_cc c;
	double r0;

	p.init_frac = 0.5;
	cr_assert_eq(cs_cc_init(&c, &p), 0);
	r0 = c.rate;
	cr_assert_float_eq(r0, 6.25e9, 1);
	/* acknowledging one RTT's worth of bytes at base RTT adds ai_gbps */
	cs_cc_on_ack(&c, 10000, (uint64_t)(r0 * 10e-6), false, 10000);
	cr_assert_float_eq(c.rate, r0 + 2e9 / 8, 1e3, "rate %f", c.rate);
	/* never above the line */
	for (int i = 0; i < 1000; i++)
		cs_cc_on_ack(&c, 10000, 1 << 20, false, 20000 + i);
	cr_assert_float_eq(c.rate, 12.5e9, 1);
}

Test(cc, multiplicative_decrease_scaled_and_once_per_rtt)
{
	struct cs_cc_params p = cp();
	struct cs_cc c;
	double r0, r1;

	p.fs_range = 0; /* plain target: 5 us */
	cr_assert_eq(cs_cc_init(&c, &p), 0);
	cs_cc_on_ack(&c, 10000, 9000, false, 1000); /* base RTT 10 us */
	r0 = c.rate;
	/* RTT 18 us: qdelay 8 us, over the target by 3 us:
	 * rate *= 1 - 0.8 * 3 / 8 */
	cs_cc_on_ack(&c, 18000, 9000, false, 100000);
	r1 = c.rate;
	cr_assert_float_eq(r1, r0 * (1 - 0.8 * 3.0 / 8.0), 1e3);
	/* within an RTT of that decrease: no second one */
	cs_cc_on_ack(&c, 18000, 9000, false, 110000);
	cr_assert_float_eq(c.rate, r1, 1);
	cs_cc_on_ack(&c, 18000, 9000, false, 130000);
	cr_assert(c.rate < r1);
	/* a huge overshoot is capped at max_mdf */
	r1 = c.rate;
	cs_cc_on_ack(&c, 10000000, 9000, false, 20000000);
	cr_assert_float_eq(c.rate, r1 * 0.5, 1e3);
	/* never below the floor */
	for (int i = 0; i < 100; i++)
		cs_cc_on_ack(&c, 10000000, 9000, false, 40000000ull * (i + 1));
	cr_assert_float_eq(c.rate, 0.1e9 / 8, 1);
}

Test(cc, flow_scaling_raises_the_target_for_small_windows)
{
	struct cs_cc_params p = cp();
	struct cs_cc c;
	cs_ns_t t_big, t_small;

	cr_assert_eq(cs_cc_init(&c, &p), 0);
	cs_cc_on_ack(&c, 5000, 9000, false, 1000);
	t_big = c.target; /* 100 Gb/s * 5 us = 6.9 packets */
	c.rate = 0.5e9 / 8; /* 0.5 Gb/s: 0.03 packets */
	cs_cc_on_ack(&c, 5000, 9000, false, 2000);
	t_small = c.target;
	cr_assert(t_big < t_small);
	cr_assert_eq(t_small, p.target_qdelay + p.fs_range);
	cr_assert(t_big > p.target_qdelay);
}

Test(cc, ecn_is_optional)
{
	struct cs_cc_params p = cp();
	struct cs_cc c;

	cr_assert_eq(cs_cc_init(&c, &p), 0);
	cs_cc_on_ack(&c, 5000, 9000, true, 1000);
	cr_assert_float_eq(c.rate, 12.5e9, 1); /* ecn off: ignored */
	p.ecn = true;
	cr_assert_eq(cs_cc_init(&c, &p), 0);
	cs_cc_on_ack(&c, 5000, 9000, true, 1000);
	cr_assert_float_eq(c.rate, 12.5e9 * 0.8, 1);
	cr_assert_eq(c.ecn_decreases, 1);
}

Test(cc, path_moves_the_pacer)
{
	struct cs_pacer_params a = pp();
	struct cs_cc_params b = cp();
	struct cs_path path;

	cr_assert_eq(cs_path_init(&path, &a, &b), 0);
	cr_assert_float_eq(path.pacer.rate, 12.5e9, 1);
	cs_path_on_timeout(&path, 1000);
	cr_assert_float_eq(path.pacer.rate, 6.25e9, 1);
	cr_assert_float_eq(path.cc.rate, 6.25e9, 1);
	/* a spurious timeout takes its cut back (two in a row: both) */
	cs_path_on_timeout(&path, 2000);
	cr_assert_float_eq(path.cc.rate, 3.125e9, 1);
	cs_path_on_spurious(&path, 3000);
	cr_assert_float_eq(path.cc.rate, 12.5e9, 1);
	cr_assert_float_eq(path.pacer.rate, 12.5e9, 1);
	/* nothing to undo twice */
	cs_path_on_timeout(&path, 4000);
	path.cc.rate_before_timeout = 0; /* what a real loss verdict does */
	cs_path_on_spurious(&path, 5000);
	cr_assert_float_eq(path.cc.rate, 6.25e9, 1);
}

Test(xport, keys_go_to_their_table)
{
	struct cs_xport_params xp;
	char err[160];

	cr_assert_eq(cs_xport_params_default(&xp), 0);
	cr_assert_eq(xp.rel.window, 512);
	cr_assert_eq(xp.pacer.frame_overhead, 142);
	cr_assert_float_eq(xp.cc.line_gbps, 100, 1e-9);
	cr_assert_eq(cs_xport_params_set(&xp, "rel.ack_every", "8", err,
					 sizeof(err)),
		     0);
	cr_assert_eq(xp.rel.ack_every, 8);
	cr_assert_eq(cs_xport_params_set(&xp, "pacer.burst_bytes", "64K", err,
					 sizeof(err)),
		     0);
	cr_assert_eq(xp.pacer.burst_bytes, 65536);
	cr_assert_eq(cs_xport_params_set(&xp, "cc.target_qdelay", "7us", err,
					 sizeof(err)),
		     0);
	cr_assert_eq(xp.cc.target_qdelay, 7000);
	cr_assert_eq(cs_xport_params_set(&xp, "cc.beta", "2", err, sizeof(err)),
		     -EINVAL);
	cr_assert(strstr(err, "cc.beta"));
	cr_assert_eq(
		cs_xport_params_set(&xp, "wire.mtu", "1", err, sizeof(err)),
		-ENOENT);
	cr_assert(strstr(err, "wire.mtu"));
}
