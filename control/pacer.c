/* SPDX-License-Identifier: MIT */
/* Per-destination pacer: GCRA (virtual-scheduling token bucket) in ps. */
#include <errno.h>
#include <math.h>

#include "control/pacer.h"

#define PS_PER_NS 1000ull

const struct cs_cfg_entry cs_pacer_cfg[] = {
	{ "pacer.burst_bytes", CS_CFG_SIZE,
	  offsetof(struct cs_pacer_params, burst_bytes), "18K", 64, 1 << 30,
	  "bucket depth: bytes a sender may send ahead of its paced rate "
	  "(at least one frame)" },
	{ "pacer.frame_overhead", CS_CFG_U32,
	  offsetof(struct cs_pacer_params, frame_overhead), "142", 0, 4096,
	  "bytes charged per packet besides the payload: headers (118) + "
	  "preamble/IFG/FCS (24)" },
};
const size_t cs_pacer_cfg_len = CS_ARRAY_SIZE(cs_pacer_cfg);

/* Picoseconds to send @bytes at @rate bytes per second. */
static uint64_t cost_ps(double rate, uint64_t bytes)
{
	return (uint64_t)llround((double)bytes * 1e12 / rate);
}

int cs_pacer_init(struct cs_pacer *p, const struct cs_pacer_params *params,
		  double rate)
{
	if (!(rate > 0) || !params->burst_bytes)
		return -EINVAL;
	p->burst_bytes = params->burst_bytes;
	p->frame_overhead = params->frame_overhead;
	p->tat_ps = 0;
	p->sent_bytes = 0;
	p->rate = rate;
	p->burst_ps = cost_ps(rate, p->burst_bytes);
	return 0;
}

void cs_pacer_set_rate(struct cs_pacer *p, double rate, cs_ns_t now)
{
	uint64_t now_ps = now * PS_PER_NS;

	if (!(rate > 0))
		return;
	if (p->tat_ps > now_ps)
		p->tat_ps = now_ps +
			    (uint64_t)llround((double)(p->tat_ps - now_ps) *
					      p->rate / rate);
	p->rate = rate;
	p->burst_ps = cost_ps(rate, p->burst_bytes);
}

cs_ns_t cs_pacer_next(const struct cs_pacer *p, cs_ns_t now)
{
	uint64_t now_ps = now * PS_PER_NS;
	uint64_t ok_ps;

	/* A packet conforms when TAT - burst <= now. */
	if (p->tat_ps <= p->burst_ps)
		return now;
	ok_ps = p->tat_ps - p->burst_ps;
	if (ok_ps <= now_ps)
		return now;
	return CS_DIV_ROUND_UP(ok_ps, PS_PER_NS);
}

void cs_pacer_consume(struct cs_pacer *p, uint32_t len, cs_ns_t now)
{
	uint64_t now_ps = now * PS_PER_NS;
	uint64_t bytes = cs_pacer_frame_bytes(p, len);

	if (p->tat_ps < now_ps)
		p->tat_ps = now_ps;
	p->tat_ps += cost_ps(p->rate, bytes);
	p->sent_bytes += bytes;
}
