/* SPDX-License-Identifier: MIT */
/* Swift-like delay-based rate control with ECN as an optional second signal. */
#include <errno.h>
#include <math.h>

#include "control/cc.h"

#define GBPS_TO_BPS (1e9 / 8) /* Gb/s -> bytes per second */

const struct cs_cfg_entry cs_cc_cfg[] = {
	{ "cc.enable", CS_CFG_BOOL, offsetof(struct cs_cc_params, enable), "1",
	  CS_CFG_NO_BOUNDS,
	  "delay-based rate control; 0 pins the rate at cc.line_gbps" },
	{ "cc.line_gbps", CS_CFG_DOUBLE,
	  offsetof(struct cs_cc_params, line_gbps), "100", 0.001, 1e5,
	  "local link rate (Gb/s): the highest paced rate" },
	{ "cc.init_frac", CS_CFG_DOUBLE,
	  offsetof(struct cs_cc_params, init_frac), "1.0", 0.001, 1,
	  "starting rate as a fraction of the line rate" },
	{ "cc.min_gbps", CS_CFG_DOUBLE, offsetof(struct cs_cc_params, min_gbps),
	  "0.1", 0.0001, 1e5, "lowest paced rate (Gb/s)" },
	{ "cc.target_qdelay", CS_CFG_NS,
	  offsetof(struct cs_cc_params, target_qdelay), "5us", 0, 1e10,
	  "target queueing delay: RTT (echoed timestamps) minus the "
	  "smallest RTT seen" },
	{ "cc.ai_gbps", CS_CFG_DOUBLE, offsetof(struct cs_cc_params, ai_gbps),
	  "2", 0, 1e5, "additive increase per RTT below the target (Gb/s)" },
	{ "cc.beta", CS_CFG_DOUBLE, offsetof(struct cs_cc_params, beta), "0.8",
	  0, 1,
	  "decrease gain: rate *= 1 - beta * (qdelay - target) / qdelay" },
	{ "cc.max_mdf", CS_CFG_DOUBLE, offsetof(struct cs_cc_params, max_mdf),
	  "0.5", 0, 1, "largest single multiplicative decrease" },
	{ "cc.ecn", CS_CFG_BOOL, offsetof(struct cs_cc_params, ecn), "0",
	  CS_CFG_NO_BOUNDS, "also decrease on ECN echoes" },
	{ "cc.ecn_md", CS_CFG_DOUBLE, offsetof(struct cs_cc_params, ecn_md),
	  "0.2", 0, 1, "decrease on an ECN echo (once per RTT)" },
	{ "cc.rto_md", CS_CFG_DOUBLE, offsetof(struct cs_cc_params, rto_md),
	  "0.5", 0, 1, "decrease on a retransmission timeout" },
	{ "cc.fs_range", CS_CFG_NS, offsetof(struct cs_cc_params, fs_range),
	  "50us", 0, 1e10,
	  "flow scaling: most added to the target for a small window" },
	{ "cc.fs_min_cwnd", CS_CFG_DOUBLE,
	  offsetof(struct cs_cc_params, fs_min_cwnd), "0.1", 0.001, 1e6,
	  "window (packets) at which flow scaling adds all of fs_range" },
	{ "cc.fs_max_cwnd", CS_CFG_DOUBLE,
	  offsetof(struct cs_cc_params, fs_max_cwnd), "100", 0.002, 1e7,
	  "window (packets) above which flow scaling adds nothing" },
	{ "cc.pkt_bytes", CS_CFG_U32, offsetof(struct cs_cc_params, pkt_bytes),
	  "9000", 64, 1 << 20, "packet size for windows counted in packets" },
};
const size_t cs_cc_cfg_len = CS_ARRAY_SIZE(cs_cc_cfg);

int cs_cc_init(struct cs_cc *cc, const struct cs_cc_params *params)
{
	if (!(params->line_gbps > 0) || !(params->min_gbps > 0) ||
	    params->min_gbps > params->line_gbps || !(params->init_frac > 0) ||
	    params->init_frac > 1 || !(params->fs_min_cwnd > 0) ||
	    params->fs_min_cwnd >= params->fs_max_cwnd || !params->pkt_bytes)
		return -EINVAL;
	cc->p = *params;
	cc->line = params->line_gbps * GBPS_TO_BPS;
	cc->min = params->min_gbps * GBPS_TO_BPS;
	cc->rate = cc->p.enable ? cc->line * params->init_frac : cc->line;
	if (cc->rate < cc->min)
		cc->rate = cc->min;
	cc->base_rtt = CS_NS_NEVER;
	cc->last_rtt = 0;
	cc->last_decrease = 0;
	cc->decreases = cc->ecn_decreases = cc->timeouts = 0;
	cc->rate_before_timeout = 0;
	/* Swift: fs(cwnd) = a / sqrt(cwnd) + b; fs(max) = 0, fs(min) = range */
	cc->fs_a = (double)params->fs_range / (1 / sqrt(params->fs_min_cwnd) -
					       1 / sqrt(params->fs_max_cwnd));
	cc->fs_b = -cc->fs_a / sqrt(params->fs_max_cwnd);
	cc->target = params->target_qdelay;
	return 0;
}

static void clamp(struct cs_cc *cc)
{
	if (cc->rate > cc->line)
		cc->rate = cc->line;
	if (cc->rate < cc->min)
		cc->rate = cc->min;
}

/* At most one decrease per RTT: only a signal carried by a packet sent
 * after the last decrease reflects it. */
static bool may_decrease(const struct cs_cc *cc, cs_ns_t rtt, cs_ns_t now)
{
	if (!cc->decreases)
		return true;
	if (!rtt)
		rtt = cc->last_rtt;
	return now - cc->last_decrease > rtt;
}

/* The target: base queueing target plus Swift's flow scaling. */
static cs_ns_t target_of(const struct cs_cc *cc)
{
	double cwnd, fs;

	if (!cc->p.fs_range || cc->base_rtt == CS_NS_NEVER)
		return cc->p.target_qdelay;
	cwnd = cc->rate * ((double)cc->base_rtt * 1e-9) / cc->p.pkt_bytes;
	if (cwnd < cc->p.fs_min_cwnd)
		cwnd = cc->p.fs_min_cwnd;
	fs = cc->fs_a / sqrt(cwnd) + cc->fs_b;
	if (fs < 0)
		fs = 0;
	if (fs > (double)cc->p.fs_range)
		fs = (double)cc->p.fs_range;
	return cc->p.target_qdelay + (cs_ns_t)fs;
}

void cs_cc_on_ack(struct cs_cc *cc, cs_ns_t rtt, uint64_t acked, bool ece,
		  cs_ns_t now)
{
	cs_ns_t qdelay, target;

	/* the path's shortest RTT is kept with the controller off too:
	 * loss detection reads it (cs_rel: a resend's ACK) */
	if (rtt && rtt < cc->base_rtt)
		cc->base_rtt = rtt;
	if (!cc->p.enable)
		return;
	if (ece && cc->p.ecn && may_decrease(cc, rtt, now)) {
		cc->rate *= 1 - cc->p.ecn_md;
		cc->last_decrease = now;
		cc->decreases++;
		cc->ecn_decreases++;
		clamp(cc);
		return;
	}
	if (!rtt)
		return;
	cc->last_rtt = rtt;
	qdelay = rtt - cc->base_rtt;
	target = target_of(cc);
	cc->target = target;
	if (qdelay <= target) {
		/* Additive increase of ai per RTT: a window's worth of bytes
		 * (rate * rtt) is acknowledged per RTT. */
		double win = cc->rate * ((double)rtt * 1e-9);

		if (win < 1)
			win = 1;
		cc->rate += cc->p.ai_gbps * GBPS_TO_BPS * (double)acked / win;
	} else if (may_decrease(cc, rtt, now)) {
		double f = 1 - cc->p.beta * (double)(qdelay - target) /
				       (double)qdelay;

		if (f < 1 - cc->p.max_mdf)
			f = 1 - cc->p.max_mdf;
		cc->rate *= f;
		cc->last_decrease = now;
		cc->decreases++;
	}
	clamp(cc);
}

void cs_cc_on_timeout(struct cs_cc *cc, cs_ns_t now)
{
	cc->timeouts++;
	if (!cc->p.enable)
		return;
	if (!cc->rate_before_timeout) /* the first of a run of timeouts */
		cc->rate_before_timeout = cc->rate;
	cc->rate *= 1 - cc->p.rto_md;
	cc->last_decrease = now;
	cc->decreases++;
	clamp(cc);
}

void cs_cc_on_spurious(struct cs_cc *cc, cs_ns_t now)
{
	(void)now;
	if (cc->p.enable && cc->rate_before_timeout > cc->rate)
		cc->rate = cc->rate_before_timeout;
	cc->rate_before_timeout = 0;
	clamp(cc);
}

int cs_path_init(struct cs_path *path, const struct cs_pacer_params *pp,
		 const struct cs_cc_params *cp)
{
	int ret = cs_cc_init(&path->cc, cp);

	if (ret)
		return ret;
	return cs_pacer_init(&path->pacer, pp, path->cc.rate);
}

void cs_path_on_ack(struct cs_path *path, cs_ns_t rtt, uint64_t acked, bool ece,
		    cs_ns_t now)
{
	cs_cc_on_ack(&path->cc, rtt, acked, ece, now);
	if (path->cc.rate != path->pacer.rate)
		cs_pacer_set_rate(&path->pacer, path->cc.rate, now);
}

void cs_path_on_timeout(struct cs_path *path, cs_ns_t now)
{
	cs_cc_on_timeout(&path->cc, now);
	if (path->cc.rate != path->pacer.rate)
		cs_pacer_set_rate(&path->pacer, path->cc.rate, now);
}

void cs_path_on_spurious(struct cs_path *path, cs_ns_t now)
{
	cs_cc_on_spurious(&path->cc, now);
	if (path->cc.rate != path->pacer.rate)
		cs_pacer_set_rate(&path->pacer, path->cc.rate, now);
}
