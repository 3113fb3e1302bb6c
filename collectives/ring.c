/* SPDX-License-Identifier: MIT */
/* Ring collectives: the chunked, pipelined, multi-channel schedule engine. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CS_LOG_MODULE "coll"
#include "internal/log.h"

#include "collectives/reduce.h"
#include "collectives/ring.h"

/*
 * THE SCHEDULE
 *
 * Every operation is a sequence of global steps t = 0 .. T-1 run on C
 * channels. Channel c is a ring over all ranks (forward, or reverse for odd
 * channels with CS_COLL_F_ALT_DIR) or, for broadcast and reduce, a chain.
 * At step t a rank sends one segment to its successor and receives one from
 * its predecessor; each segment is split over the channels, each channel's
 * part into chunks of `ce` elements, each chunk into packets of `pe`
 * elements (one MTU of payload).
 *
 * Ring allreduce over n ranks (positions p along the channel's ring, the
 * segment of rank j is segment j, so that reduce-scatter leaves segment r
 * at rank r):
 *   reduce-scatter, t = 0 .. n-2:  send seg rank_at(p-t-1), receive seg
 *                                  rank_at(p-t-2) and reduce it into place
 *   all-gather, t = n-1 .. 2n-3:   send seg rank_at(p-u) (u = t-n+1),
 *                                  receive seg rank_at(p-u-1), copy it
 * so the segment received at step t is the one sent at step t+1, with the
 * same chunking: chunk k of step t may leave as soon as chunk k of step
 * t-1 is complete. That per-chunk dependency is the pipeline; a window of
 * unacknowledged chunks per channel bounds what sits in the transport.
 *
 * FLOATING POINT: each segment's final value is computed exactly once, by
 * its owner at the last reduce-scatter step, in the ring order of its
 * channel; the all-gather only copies it. Every rank therefore ends with
 * the same bits. The same holds for reduce (one chain order) and, for
 * free, for broadcast and all-gather (copies only).
 *
 * EXACTLY ONCE: per (received step, channel, packet) one bit. A packet
 * whose bit is set is dropped (CS_COLL_RX_DUP): reducing twice would be
 * silent corruption, so the engine never relies on the transport's own
 * duplicate suppression.
 *
 * WHAT A RETRANSMISSION CARRIES (DESIGN.md): the engine keeps no payload
 * copies; cs_coll_rebuild() points at the buffer again. For every send
 * except one class, the source region is never written after the send:
 *   - a reduce-scatter send at t > 0 reads the partial sum that the receive
 *     of step t-1 produced; a send at t = 0 reads the rank's input;
 *   - all-gather, broadcast and reduce sends read final values or inputs.
 * The exception: in allreduce, the region sent at reduce-scatter step t
 * (segment s = rank_at(p-t-1)) is overwritten by the all-gather receive of
 * step n-1+t, which brings segment s's final value. Causality makes that
 * safe: the final value of packet X of segment s is computed by s's owner
 * from a chain of partial sums that starts with OUR packet X arriving at
 * our successor (each hop forwards chunk k only after receiving all of
 * chunk k). So when the all-gather copy of X reaches us, our successor has
 * already reduced our reduce-scatter X; any retransmission of it can only
 * be dropped there as a duplicate. cs_coll_rebuild() enforces the rule
 * rather than trusting it: it refuses (-ESTALE) once the overwrite of that
 * packet's region happened, and the transport then treats the packet as
 * delivered (cs_rel: send a zero-length filler or nothing). The simulator
 * asserts that each refused packet was in fact held by the receiver. The
 * receive side checks the other half: an all-gather packet for a region
 * whose reduce-scatter packet we have not even sent yet breaks causality
 * and is rejected as CS_ERR_PROTO.
 */

/*
 * DIRECT EXCHANGE (small allreduce, coll.direct_max): latency, not
 * bandwidth, decides a small operation, and the ring's 2(n-1) dependent
 * steps each cost a hop. Direct runs one step on n-1 channels: channel c
 * sends this rank's whole input to rank r+c+1 and receives rank r-c-1's,
 * so every rank gets every input at once. Inputs land in per-rank slots
 * of a scratch buffer (this rank's own input is copied there first, so
 * retransmissions read stable bytes even in place); once all have arrived
 * the result is reduced from the slots in rank order 0, 1, ..., n-1, the
 * same order on every rank: identical bits everywhere. Bytes sent per
 * rank: (n-1) x the input, against the ring's 2(n-1)/n x.
 */

enum { RECV_NONE, RECV_REDUCE, RECV_COPY };

struct cs_coll_chan {
	uint32_t pos; /* this rank's position on the ring/chain */
	uint32_t next, prev; /* successor / predecessor rank */
	int dir; /* +1 forward, -1 reverse */
	/* send cursor: next packet is (local step s, chunk k, packet i) */
	uint32_t s, k, i;
	uint32_t inflight; /* chunks started, not fully acknowledged */
	bool finished;
};

struct cs_coll {
	struct cs_coll_params p;
	cs_reduce_fn reduce;
	size_t esz;
	uint32_t n, r, C;
	bool nodata, barrier, chain, inplace;
	bool direct; /* direct exchange (see above) */
	uint32_t T; /* global steps of the operation */
	uint32_t s_lo, s_n; /* this rank sends at steps [s_lo, s_lo+s_n) */
	uint32_t r_lo, r_n; /* ... and receives at [r_lo, r_lo+r_n) */
	size_t seg_base, seg_rem; /* seg j: base + (j < rem) elements */
	size_t ce, pe; /* chunk / packet elements */
	uint32_t ppc; /* packets per full chunk */
	uint32_t maxch, maxpk; /* per (segment, channel) */
	uint8_t *work; /* where received data goes */
	const uint8_t *src; /* this rank's own contribution */
	uint8_t *final_seg; /* out-of-place reduce-scatter: recvbuf */
	void *scratch;
	uint32_t *rx_cnt; /* [r_n][C][maxch] packets received */
	uint32_t *tx_ack; /* [s_n][C][maxch] packets acknowledged */
	uint64_t *rx_bits; /* [r_n][C][maxpk] */
	uint64_t *ack_bits; /* [s_n][C][maxpk] */
	uint64_t rx_left; /* packets still to receive */
	uint64_t ack_left; /* packets still to be acknowledged */
	uint64_t tx_left; /* packets never handed out yet */
	uint64_t ideal_tx; /* payload bytes this rank sends once */
	int err; /* cs_coll_abort(): the error, or 0 */
	uint32_t culprit;
	struct cs_coll_wait abort_wait; /* snapshot at the abort */
	struct cs_coll_stats st;
	struct cs_coll_chan ch[];
};

const struct cs_cfg_entry cs_coll_cfg_table[] = {
	{ "coll.channels", CS_CFG_U32, offsetof(struct cs_coll_cfg, channels),
	  "2", 1, CS_COLL_MAX_CHANNELS, "rings (channels) per collective" },
	{ "coll.chunk", CS_CFG_SIZE, offsetof(struct cs_coll_cfg, chunk), "64K",
	  1, 1ull << 30,
	  "bytes per pipelined chunk (rounded to whole packets)" },
	{ "coll.window", CS_CFG_U32, offsetof(struct cs_coll_cfg, window), "8",
	  1, 65536, "unacknowledged chunks in flight per channel" },
	{ "coll.mtu_payload", CS_CFG_U32,
	  offsetof(struct cs_coll_cfg, mtu_payload), "8896", 8, 65536,
	  "payload bytes per packet (MTU 9000 minus the 118-byte frame)" },
	{ "coll.direct_max", CS_CFG_SIZE,
	  offsetof(struct cs_coll_cfg, direct_max), "16K", 0, 1ull << 30,
	  "allreduce of at most this many bytes: direct exchange (one step: "
	  "every rank sends its input to all others and each reduces them "
	  "in rank order) instead of the ring's 2(n-1) steps; 0: ring only" },
	{ "coll.deadline", CS_CFG_NS, offsetof(struct cs_coll_cfg, deadline),
	  "120s", 0, 3.6e12,
	  "an operation not complete this long after it was posted fails "
	  "with CS_ERR_TIMEOUT naming what it waits for (0: never)" },
};

const size_t cs_coll_cfg_table_len = CS_ARRAY_SIZE(cs_coll_cfg_table);

static const char *const kind_names[CS_COLL_KIND_COUNT] = {
	[CS_COLL_ALLREDUCE] = "allreduce",
	[CS_COLL_REDUCE_SCATTER] = "reduce-scatter",
	[CS_COLL_ALL_GATHER] = "all-gather",
	[CS_COLL_BROADCAST] = "broadcast",
	[CS_COLL_REDUCE] = "reduce",
	[CS_COLL_BARRIER] = "barrier",
};

const char *cs_coll_kind_name(enum cs_coll_kind k)
{
	return (unsigned)k < CS_COLL_KIND_COUNT ? kind_names[k] : "?";
}

void cs_coll_params_default(struct cs_coll_params *p,
			    const struct cs_coll_cfg *cfg)
{
	struct cs_coll_cfg d;

	if (!cfg) {
		cs_cfg_defaults(cs_coll_cfg_table, cs_coll_cfg_table_len, &d);
		cfg = &d;
	}
	memset(p, 0, sizeof(*p));
	p->nranks = 1;
	p->channels = cfg->channels;
	p->chunk = cfg->chunk;
	p->window = cfg->window;
	p->mtu_payload = cfg->mtu_payload;
	p->deadline = cfg->deadline;
	p->direct_max = cfg->direct_max;
}

/* ---- geometry ------------------------------------------------------- */

static inline uint32_t umod(int64_t a, uint32_t n)
{
	int64_t m = a % (int64_t)n;

	return (uint32_t)(m < 0 ? m + n : m);
}

static inline uint32_t rank_at(const struct cs_coll *c,
			       const struct cs_coll_chan *h, int64_t pos)
{
	uint32_t q = umod(pos, c->n);

	return h->dir > 0 ? q : umod(-(int64_t)q, c->n);
}

/* Segment sent at global step t on channel h. */
static uint32_t send_seg(const struct cs_coll *c, const struct cs_coll_chan *h,
			 uint32_t t)
{
	int64_t p = h->pos;

	if (c->direct)
		return 0; /* the whole vector */
	switch (c->p.kind) {
	case CS_COLL_ALLREDUCE:
		if (t < c->n - 1)
			return rank_at(c, h, p - t - 1);
		return rank_at(c, h, p - (t - (c->n - 1)));
	case CS_COLL_REDUCE_SCATTER:
		return rank_at(c, h, p - t - 1);
	case CS_COLL_ALL_GATHER:
	case CS_COLL_BARRIER:
		return rank_at(c, h, p - t);
	default:
		return 0;
	}
}

/* The segment received at step t is the one forwarded at step t+1. */
static uint32_t recv_seg(const struct cs_coll *c, const struct cs_coll_chan *h,
			 uint32_t t)
{
	return c->chain ? 0 : send_seg(c, h, t + 1);
}

static inline size_t seg_count(const struct cs_coll *c, uint32_t j)
{
	return c->seg_base + (j < c->seg_rem);
}

static inline size_t seg_off(const struct cs_coll *c, uint32_t j)
{
	return (size_t)j * c->seg_base + CS_MIN((size_t)j, c->seg_rem);
}

/* Channel ch's part of segment j: [*lo, *lo + return) in elements,
 * relative to the segment. */
static inline size_t sub_part(const struct cs_coll *c, uint32_t j, uint32_t ch,
			      size_t *lo)
{
	size_t cnt = seg_count(c, j), b = cnt / c->C, rm = cnt % c->C;

	if (c->direct) { /* every channel carries all of it */
		*lo = 0;
		return cnt;
	}
	*lo = (size_t)ch * b + CS_MIN((size_t)ch, rm);
	return b + (ch < rm);
}

static inline uint32_t n_chunks(const struct cs_coll *c, size_t len)
{
	if (c->barrier)
		return 1;
	return (uint32_t)CS_DIV_ROUND_UP(len, c->ce);
}

static inline uint32_t n_pkts(const struct cs_coll *c, size_t len)
{
	if (c->barrier)
		return 1;
	return (uint32_t)((len / c->ce) * c->ppc +
			  CS_DIV_ROUND_UP(len % c->ce, c->pe));
}

static inline uint32_t chunk_pkts(const struct cs_coll *c, size_t len,
				  uint32_t k)
{
	size_t start = (size_t)k * c->ce, end = CS_MIN(start + c->ce, len);

	if (c->barrier)
		return 1;
	return (uint32_t)CS_DIV_ROUND_UP(end - start, c->pe);
}

/* Packet idx of a part of len elements: element offset and count. */
static inline void pkt_geom(const struct cs_coll *c, size_t len, uint32_t idx,
			    size_t *off, size_t *cnt)
{
	size_t k = idx / c->ppc, i = idx % c->ppc;
	size_t cend = CS_MIN((k + 1) * c->ce, len);

	if (c->barrier) {
		*off = 0;
		*cnt = 0;
		return;
	}
	*off = k * c->ce + i * c->pe;
	*cnt = CS_MIN(c->pe, cend - *off);
}

static inline size_t slot(const struct cs_coll *c, uint32_t ls, uint32_t ch,
			  uint32_t k)
{
	return ((size_t)ls * c->C + ch) * c->maxch + k;
}

static inline size_t bit(const struct cs_coll *c, uint32_t ls, uint32_t ch,
			 uint32_t idx)
{
	return ((size_t)ls * c->C + ch) * c->maxpk + idx;
}

static inline bool test_bit(const uint64_t *b, size_t i)
{
	return b[i / 64] >> (i % 64) & 1;
}

static inline void set_bit(uint64_t *b, size_t i)
{
	b[i / 64] |= 1ull << (i % 64);
}

/* Pointer to work element g (index in the work layout) of segment j. */
static inline uint8_t *work_ptr(const struct cs_coll *c, uint32_t j, size_t g)
{
	if (c->final_seg && j == c->r)
		return c->final_seg + (g - seg_off(c, j)) * c->esz;
	return c->work + g * c->esz;
}

static inline bool recv_in_range(const struct cs_coll *c, uint32_t t)
{
	return c->r_n && t >= c->r_lo && t < c->r_lo + c->r_n;
}

/* Does the send at global step t read the rank's input (not work)? */
static inline bool send_from_src(const struct cs_coll *c, uint32_t t)
{
	if (c->direct)
		return true;
	if (c->p.kind == CS_COLL_ALL_GATHER || c->barrier)
		return false;
	return !(t > 0 && recv_in_range(c, t - 1));
}

static int recv_mode(const struct cs_coll *c, uint32_t t)
{
	if (c->direct)
		return RECV_COPY; /* into the sender's slot */
	switch (c->p.kind) {
	case CS_COLL_ALLREDUCE:
		return t < c->n - 1 ? RECV_REDUCE : RECV_COPY;
	case CS_COLL_REDUCE_SCATTER:
	case CS_COLL_REDUCE:
		return RECV_REDUCE;
	case CS_COLL_BARRIER:
		return RECV_NONE;
	default:
		return RECV_COPY;
	}
}

/* ---- set-up ----------------------------------------------------------- */

static int setup_schedule(struct cs_coll *c)
{
	const struct cs_coll_params *p = &c->p;
	uint32_t n = c->n, r = c->r, q;

	switch (p->kind) {
	case CS_COLL_ALLREDUCE:
		if (c->direct) {
			c->T = 1;
			c->seg_base = p->count;
			c->seg_rem = 0;
			break;
		}
		c->T = 2 * (n - 1);
		c->seg_base = p->count / n;
		c->seg_rem = p->count % n;
		break;
	case CS_COLL_REDUCE_SCATTER:
	case CS_COLL_ALL_GATHER:
	case CS_COLL_BARRIER:
		c->T = n - 1;
		c->seg_base = p->kind == CS_COLL_BARRIER ? 0 : p->count;
		c->seg_rem = 0;
		break;
	case CS_COLL_BROADCAST:
	case CS_COLL_REDUCE:
		c->chain = true;
		c->T = n - 1;
		c->seg_base = p->count;
		c->seg_rem = 0;
		break;
	default:
		return -EINVAL;
	}
	if (!c->chain) {
		c->s_lo = c->r_lo = 0;
		c->s_n = c->r_n = c->T;
	} else {
		if (p->kind == CS_COLL_BROADCAST)
			q = umod((int64_t)r - p->root, n);
		else
			q = umod((int64_t)r - p->root - 1, n);
		c->s_lo = q;
		c->s_n = q < n - 1 ? 1 : 0;
		c->r_lo = q ? q - 1 : 0;
		c->r_n = q ? 1 : 0;
	}
	for (uint32_t i = 0; i < c->C; i++) {
		struct cs_coll_chan *h = &c->ch[i];

		h->dir = (p->flags & CS_COLL_F_ALT_DIR) && (i & 1) && !c->chain
				 ? -1
				 : 1;
		if (c->direct) {
			h->dir = 1;
			h->pos = r;
			h->next = (r + i + 1) % n;
			h->prev = (r + n - i - 1) % n;
		} else if (c->chain) {
			h->pos = c->s_lo;
			h->next = (r + 1) % n;
			h->prev = (r + n - 1) % n;
		} else {
			h->pos = h->dir > 0 ? r : umod(-(int64_t)r, n);
			h->next = rank_at(c, h, (int64_t)h->pos + 1);
			h->prev = rank_at(c, h, (int64_t)h->pos - 1);
		}
	}
	return 0;
}

static int setup_buffers(struct cs_coll *c)
{
	const struct cs_coll_params *p = &c->p;
	size_t cnt = p->count, esz = c->esz, rs = cnt * esz;
	const uint8_t *sb = p->sendbuf;
	uint8_t *rb = p->recvbuf;

	if (c->nodata || c->barrier)
		return 0;
	switch (p->kind) {
	case CS_COLL_ALLREDUCE:
		if (cnt && (!sb || !rb))
			return CS_ERR_BAD_DESC;
		if (c->direct) {
			/* slot j of scratch: rank j's input; ours first */
			c->scratch = malloc(c->n * rs);
			if (!c->scratch)
				return -ENOMEM;
			memcpy((uint8_t *)c->scratch + c->r * rs, sb, rs);
			c->src = (uint8_t *)c->scratch + c->r * rs;
			c->work = rb;
			break;
		}
		c->src = sb;
		c->work = rb;
		c->inplace = sb == rb;
		if (c->n == 1 && !c->inplace && cnt)
			memcpy(rb, sb, rs);
		break;
	case CS_COLL_REDUCE_SCATTER:
		if (cnt && (!sb || !rb))
			return CS_ERR_BAD_DESC;
		c->src = sb;
		if (rb == sb + c->r * rs) {
			c->inplace = true;
			c->work = (uint8_t *)sb; /* in place: the caller's */
		} else if (c->n == 1) {
			memcpy(rb, sb, rs);
		} else if (cnt) {
			c->scratch = malloc(c->n * rs);
			if (!c->scratch)
				return -ENOMEM;
			c->work = c->scratch;
			c->final_seg = rb;
		}
		break;
	case CS_COLL_ALL_GATHER:
		if (cnt && (!sb || !rb))
			return CS_ERR_BAD_DESC;
		c->work = rb;
		c->src = sb;
		c->inplace = sb == rb + c->r * rs;
		if (!c->inplace && cnt)
			memcpy(rb + c->r * rs, sb, rs);
		break;
	case CS_COLL_BROADCAST:
		if (cnt && p->rank == p->root && !sb)
			return CS_ERR_BAD_DESC;
		if (cnt && p->rank != p->root && !rb)
			return CS_ERR_BAD_DESC;
		c->src = sb;
		c->work = rb;
		if (p->rank == p->root && rb && rb != sb && cnt)
			memcpy(rb, sb, rs);
		break;
	case CS_COLL_REDUCE:
		if (cnt && (!sb || (p->rank == p->root && !rb)))
			return CS_ERR_BAD_DESC;
		c->src = sb;
		c->work = rb;
		if (!rb && cnt && c->r_n) {
			c->scratch = malloc(rs);
			if (!c->scratch)
				return -ENOMEM;
			c->work = c->scratch;
		}
		c->inplace = c->work == sb;
		if (c->n == 1 && !c->inplace && cnt)
			memcpy(rb, sb, rs);
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static void count_work(struct cs_coll *c)
{
	for (uint32_t ch = 0; ch < c->C; ch++) {
		struct cs_coll_chan *h = &c->ch[ch];
		size_t lo;

		for (uint32_t s = 0; s < c->s_n; s++) {
			size_t len = sub_part(c, send_seg(c, h, c->s_lo + s),
					      ch, &lo);

			c->ack_left += n_pkts(c, len);
			c->tx_left += n_pkts(c, len);
			c->ideal_tx += len * c->esz;
		}
		for (uint32_t s = 0; s < c->r_n; s++)
			c->rx_left += n_pkts(
				c, sub_part(c, recv_seg(c, h, c->r_lo + s), ch,
					    &lo));
		h->finished = c->s_n == 0;
	}
}

bool cs_coll_is_direct(const struct cs_coll_params *p)
{
	size_t esz = cs_dtype_size(p->dtype);

	return p->kind == CS_COLL_ALLREDUCE && p->nranks > 1 && p->count &&
	       esz && p->count <= p->direct_max / esz &&
	       p->nranks - 1 <= (p->max_direct_peers ? p->max_direct_peers
						     : CS_COLL_MAX_CHANNELS);
}

int cs_coll_init(const struct cs_coll_params *p, struct cs_coll **out)
{
	struct cs_coll *c;
	size_t lo, maxlen, nslots, nbits;
	uint32_t C = p->channels;
	int ret;

	*out = NULL;
	if ((unsigned)p->kind >= CS_COLL_KIND_COUNT ||
	    (unsigned)p->dtype >= CS_DTYPE_COUNT ||
	    (unsigned)p->op >= CS_REDOP_COUNT)
		return -EINVAL;
	if (!p->nranks || p->nranks > CS_COLL_MAX_RANKS ||
	    p->rank >= p->nranks || p->root >= p->nranks)
		return CS_ERR_BAD_DESC;
	if (!C || C > CS_COLL_MAX_CHANNELS || !p->chunk || !p->window ||
	    p->mtu_payload < cs_dtype_size(p->dtype))
		return -EINVAL;
	if (p->kind == CS_COLL_BARRIER || p->kind == CS_COLL_BROADCAST ||
	    p->kind == CS_COLL_REDUCE)
		C = p->kind == CS_COLL_BARRIER ? 1 : C;
	if (cs_coll_is_direct(p))
		C = p->nranks - 1; /* direct exchange: a channel per peer */

	c = calloc(1, sizeof(*c) + C * sizeof(c->ch[0]));
	if (!c)
		return -ENOMEM;
	c->p = *p;
	c->p.channels = C;
	c->C = C;
	c->n = p->nranks;
	c->r = p->rank;
	c->esz = cs_dtype_size(p->dtype);
	c->nodata = p->flags & CS_COLL_F_NODATA;
	c->barrier = p->kind == CS_COLL_BARRIER;
	c->direct = cs_coll_is_direct(p);
	c->reduce = cs_reduce_get(p->dtype, p->op);
	if (!c->reduce) {
		ret = -EINVAL;
		goto out_free;
	}
	c->pe = CS_MAX(p->mtu_payload / c->esz, 1);
	c->ce = CS_MAX(p->chunk / c->esz, 1);
	if (c->ce < c->pe)
		c->pe = c->ce;
	else
		c->ce = CS_DIV_ROUND_UP(c->ce, c->pe) * c->pe;
	c->ppc = (uint32_t)(c->ce / c->pe);

	ret = setup_schedule(c);
	if (ret)
		goto out_free;
	/* Segment 0, channel 0 is the largest part (remainders go first). */
	maxlen = sub_part(c, 0, 0, &lo);
	if (maxlen / c->ce + 1 > UINT32_MAX / 2 ||
	    (uint64_t)n_pkts(c, maxlen) > UINT32_MAX / 2) {
		ret = -E2BIG;
		goto out_free;
	}
	c->maxch = CS_MAX(n_chunks(c, maxlen), 1);
	c->maxpk = CS_MAX(n_pkts(c, maxlen), 1);

	ret = setup_buffers(c);
	if (ret)
		goto out_free;

	nslots = (size_t)c->C * c->maxch;
	nbits = (size_t)c->C * c->maxpk;
	c->rx_cnt = calloc(CS_MAX(c->r_n * nslots, 1), sizeof(uint32_t));
	c->tx_ack = calloc(CS_MAX(c->s_n * nslots, 1), sizeof(uint32_t));
	c->rx_bits = calloc(CS_DIV_ROUND_UP(c->r_n * nbits, 64) + 1, 8);
	c->ack_bits = calloc(CS_DIV_ROUND_UP(c->s_n * nbits, 64) + 1, 8);
	if (!c->rx_cnt || !c->tx_ack || !c->rx_bits || !c->ack_bits) {
		ret = -ENOMEM;
		goto out_free;
	}
	count_work(c);
	*out = c;
	return 0;

out_free:
	cs_coll_free(c);
	return ret;
}

void cs_coll_free(struct cs_coll *c)
{
	if (!c)
		return;
	free(c->rx_cnt);
	free(c->tx_ack);
	free(c->rx_bits);
	free(c->ack_bits);
	free(c->scratch);
	free(c);
}

/* ---- transmit --------------------------------------------------------- */

/* Fill @tx for packet idx of channel ch at global step t. */
static void fill_tx(const struct cs_coll *c, uint32_t t, uint32_t ch,
		    uint32_t idx, struct cs_coll_tx *tx)
{
	const struct cs_coll_chan *h = &c->ch[ch];
	uint32_t j = send_seg(c, h, t);
	size_t lo, len = sub_part(c, j, ch, &lo), off, cnt;
	size_t g;
	struct cs_pkt_hdr *hd = &tx->hdr;
	uint32_t k = idx / c->ppc;

	pkt_geom(c, len, idx, &off, &cnt);
	g = seg_off(c, j) + lo + off;
	memset(hd, 0, sizeof(*hd));
	hd->version = CS_PROTO_VERSION;
	hd->type = CS_PKT_DATA;
	if (c->barrier || idx % c->ppc + 1 == chunk_pkts(c, len, k))
		hd->flags = CS_PKT_F_LAST;
	hd->src = (uint16_t)c->r;
	hd->channel = (uint16_t)ch;
	hd->group = c->p.group;
	hd->epoch = c->p.epoch;
	hd->op = c->p.op_id;
	hd->step = t;
	hd->offset = (uint64_t)g * c->esz;
	hd->len = (uint32_t)(cnt * c->esz);
	tx->dst = h->next;
	tx->len = hd->len;
	tx->cookie = (uint64_t)idx | (uint64_t)t << 32 | (uint64_t)ch << 48;
	if (c->nodata || c->barrier || !cnt)
		tx->payload = NULL;
	else if (send_from_src(c, t))
		tx->payload = c->src + g * c->esz;
	else
		tx->payload = work_ptr(c, j, g);
}

/* Is chunk k of global send step t on channel ch ready to leave? */
static inline bool chunk_ready(const struct cs_coll *c, uint32_t ch, uint32_t t,
			       uint32_t k, size_t len)
{
	if (!(t > 0 && recv_in_range(c, t - 1)))
		return true;
	return c->rx_cnt[slot(c, t - 1 - c->r_lo, ch, k)] ==
	       chunk_pkts(c, len, k);
}

/* Emit at most one packet on channel ch. Returns 1 if one was written. */
static unsigned chan_next(struct cs_coll *c, uint32_t ch, struct cs_coll_tx *tx)
{
	struct cs_coll_chan *h = &c->ch[ch];
	uint32_t t, j, nck, npk;
	size_t lo, len;

	while (!h->finished) {
		t = c->s_lo + h->s;
		j = send_seg(c, h, t);
		len = sub_part(c, j, ch, &lo);
		nck = (c->barrier || len) ? n_chunks(c, len) : 0;
		if (h->k >= nck) {
			h->k = h->i = 0;
			if (++h->s == c->s_n)
				h->finished = true;
			continue;
		}
		if (h->i == 0) {
			if (h->inflight >= c->p.window)
				return 0;
			if (!chunk_ready(c, ch, t, h->k, len))
				return 0;
			h->inflight++;
		}
		npk = chunk_pkts(c, len, h->k);
		fill_tx(c, t, ch, h->k * c->ppc + h->i, tx);
		c->st.tx_pkts++;
		c->st.tx_bytes += tx->len;
		c->tx_left--;
		if (++h->i == npk) {
			h->i = 0;
			h->k++;
		}
		return 1;
	}
	return 0;
}

unsigned cs_coll_next_on(struct cs_coll *c, cs_ns_t now, uint32_t ch,
			 struct cs_coll_tx *out, unsigned max)
{
	unsigned n = 0;

	(void)now;
	if (ch >= c->C || c->err)
		return 0;
	while (n < max && chan_next(c, ch, &out[n]))
		n++;
	return n;
}

uint32_t cs_coll_channels(const struct cs_coll *c)
{
	return c->C;
}

void cs_coll_chan_peers(const struct cs_coll *c, uint32_t ch, int64_t *next,
			int64_t *prev)
{
	const struct cs_coll_chan *h = &c->ch[ch % c->C];

	*next = c->s_n && c->n > 1 ? (int64_t)h->next : -1;
	*prev = c->r_n && c->n > 1 ? (int64_t)h->prev : -1;
}

unsigned cs_coll_next_packets(struct cs_coll *c, cs_ns_t now,
			      struct cs_coll_tx *out, unsigned max)
{
	unsigned n = 0, got;

	(void)now;
	if (c->err)
		return 0;
	do {
		got = 0;
		for (uint32_t ch = 0; ch < c->C && n < max; ch++) {
			unsigned k = chan_next(c, ch, &out[n]);

			n += k;
			got += k;
		}
	} while (got && n < max);
	return n;
}

/* Decode a cookie; check it names a packet this rank has already sent. */
static int decode_cookie(const struct cs_coll *c, uint64_t cookie, uint32_t *t,
			 uint32_t *ch, uint32_t *idx, size_t *len)
{
	const struct cs_coll_chan *h;
	size_t lo;
	uint32_t ls, k, i;

	*idx = (uint32_t)cookie;
	*t = (uint32_t)(cookie >> 32) & 0xffff;
	*ch = (uint32_t)(cookie >> 48) & 0xff;
	if (*ch >= c->C || *t < c->s_lo || *t >= c->s_lo + c->s_n)
		return -EINVAL;
	h = &c->ch[*ch];
	*len = sub_part(c, send_seg(c, h, *t), *ch, &lo);
	if (*idx >= n_pkts(c, *len) || (!c->barrier && !*len))
		return -EINVAL;
	/* sent already? the cursor is past (s, k, i) */
	ls = *t - c->s_lo;
	k = *idx / c->ppc;
	i = *idx % c->ppc;
	if (!h->finished &&
	    (ls > h->s ||
	     (ls == h->s && (k > h->k || (k == h->k && i >= h->i)))))
		return -EINVAL;
	return 0;
}

int cs_coll_on_acked(struct cs_coll *c, uint64_t cookie)
{
	uint32_t t, ch, idx, ls, k;
	size_t len, b;
	int ret;

	if (c->err)
		return 0;
	ret = decode_cookie(c, cookie, &t, &ch, &idx, &len);
	if (ret)
		return ret;
	ls = t - c->s_lo;
	b = bit(c, ls, ch, idx);
	if (test_bit(c->ack_bits, b))
		return 0;
	set_bit(c->ack_bits, b);
	c->ack_left--;
	k = idx / c->ppc;
	if (++c->tx_ack[slot(c, ls, ch, k)] == chunk_pkts(c, len, k))
		c->ch[ch].inflight--;
	return 0;
}

/*
 * Could the source bytes of send (t, ch, idx) have changed since it was
 * sent? Only allreduce's reduce-scatter sends are ever overwritten, by the
 * all-gather receive of the same segment at step n-1+t (see the top of
 * this file).
 */
static bool send_overwritten(const struct cs_coll *c, uint32_t t, uint32_t ch,
			     uint32_t idx)
{
	if (c->p.kind != CS_COLL_ALLREDUCE || c->direct || t >= c->n - 1)
		return false;
	return test_bit(c->rx_bits, bit(c, c->n - 1 + t - c->r_lo, ch, idx));
}

int cs_coll_rebuild(struct cs_coll *c, uint64_t cookie, struct cs_coll_tx *out)
{
	uint32_t t, ch, idx;
	size_t len;
	int ret;

	if (c->err)
		return -ECANCELED;
	ret = decode_cookie(c, cookie, &t, &ch, &idx, &len);
	if (ret)
		return ret;
	fill_tx(c, t, ch, idx, out);
	out->hdr.flags |= CS_PKT_F_RETX;
	out->cookie = cookie;
	if (send_overwritten(c, t, ch, idx)) {
		/* header only: the bytes are no longer the original's */
		out->payload = NULL;
		c->st.rebuild_stale++;
		return -ESTALE;
	}
	c->st.rebuilds++;
	return 0;
}

/* ---- receive ---------------------------------------------------------- */

/*
 * Map a header to (local step, packet index). Every field is checked
 * against the schedule; anything else is a protocol violation.
 */
static int rx_locate(const struct cs_coll *c, const struct cs_pkt_hdr *hd,
		     uint32_t *ls, uint32_t *idx, uint32_t *j, size_t *len,
		     size_t *g, size_t *cnt)
{
	const struct cs_coll_chan *h;
	size_t lo, rel, off, k, in;

	if (hd->channel >= c->C || !recv_in_range(c, hd->step))
		return CS_ERR_PROTO;
	h = &c->ch[hd->channel];
	if (hd->src != h->prev)
		return CS_ERR_PROTO;
	*ls = hd->step - c->r_lo;
	*j = recv_seg(c, h, hd->step);
	*len = sub_part(c, *j, hd->channel, &lo);
	if (c->barrier) {
		if (hd->offset || hd->len)
			return CS_ERR_PROTO;
		*idx = 0;
		*g = 0;
		*cnt = 0;
		return 0;
	}
	if (hd->offset % c->esz || hd->len % c->esz)
		return CS_ERR_PROTO;
	*g = hd->offset / c->esz;
	off = seg_off(c, *j) + lo;
	if (*g < off || *g >= off + *len)
		return CS_ERR_PROTO;
	rel = *g - off;
	k = rel / c->ce;
	in = rel % c->ce;
	if (in % c->pe)
		return CS_ERR_PROTO;
	*idx = (uint32_t)(k * c->ppc + in / c->pe);
	pkt_geom(c, *len, *idx, &off, cnt);
	if (hd->len != *cnt * c->esz)
		return CS_ERR_PROTO;
	return 0;
}

/* Direct exchange: every input is in its slot; reduce in rank order. */
static void direct_finish(struct cs_coll *c)
{
	size_t cnt = c->p.count, rs = cnt * c->esz;
	const uint8_t *slots = c->scratch;

	memcpy(c->work, slots, rs);
	for (uint32_t j = 1; j < c->n; j++)
		c->reduce(c->work, c->work, slots + j * rs, cnt);
}

int cs_coll_on_data(struct cs_coll *c, cs_ns_t now, const struct cs_pkt_hdr *hd,
		    const void *payload)
{
	uint32_t ls, idx, j, t, k;
	size_t len, g, cnt, b;
	uint8_t *dst;
	int ret, mode;

	(void)now;
	if (hd->epoch != c->p.epoch) {
		/* serial comparison: epochs may wrap in a long-lived group */
		if ((int32_t)(hd->epoch - c->p.epoch) > 0)
			return CS_ERR_EPOCH;
		c->st.rx_stale_epoch++;
		return CS_COLL_RX_STALE;
	}
	if (c->err) {
		c->st.rx_late++;
		return CS_COLL_RX_LATE;
	}
	ret = rx_locate(c, hd, &ls, &idx, &j, &len, &g, &cnt);
	if (ret)
		return ret;
	b = bit(c, ls, hd->channel, idx);
	if (test_bit(c->rx_bits, b)) {
		c->st.rx_dup++;
		return CS_COLL_RX_DUP;
	}
	t = hd->step;
	mode = recv_mode(c, t);
	/* Causality (see the top of this file): an allreduce all-gather
	 * packet implies that our reduce-scatter twin was sent. */
	if (c->p.kind == CS_COLL_ALLREDUCE && t >= c->n - 1) {
		uint64_t twin = (uint64_t)idx |
				(uint64_t)(t - (c->n - 1)) << 32 |
				(uint64_t)hd->channel << 48;
		uint32_t a, b2, i2;
		size_t l2;

		if (t - (c->n - 1) < c->n - 1 &&
		    decode_cookie(c, twin, &a, &b2, &i2, &l2))
			return CS_ERR_PROTO;
	}
	if (!c->nodata && cnt) {
		if (!payload)
			return CS_ERR_PROTO;
		dst = c->direct ? (uint8_t *)c->scratch +
					  ((size_t)hd->src * c->p.count + g) *
						  c->esz
				: work_ptr(c, j, g);
		if (mode == RECV_REDUCE) {
			c->reduce(dst, c->inplace ? dst : c->src + g * c->esz,
				  payload, cnt);
		} else if (mode == RECV_COPY) {
			memcpy(dst, payload, cnt * c->esz);
		}
	}
	set_bit(c->rx_bits, b);
	c->rx_left--;
	c->st.rx_pkts++;
	c->st.rx_bytes += hd->len;
	k = idx / c->ppc;
	c->rx_cnt[slot(c, ls, hd->channel, k)]++;
	if (c->direct && !c->rx_left && !c->nodata)
		direct_finish(c);
	return CS_COLL_RX_NEW;
}

bool cs_coll_rx_has(const struct cs_coll *c, uint32_t step, uint32_t channel,
		    uint64_t offset)
{
	const struct cs_coll_chan *h;
	size_t lo, len, off, g, rel;
	uint32_t idx = 0;

	if (channel >= c->C || !recv_in_range(c, step))
		return false;
	h = &c->ch[channel];
	len = sub_part(c, recv_seg(c, h, step), channel, &lo);
	if (!c->barrier) {
		off = seg_off(c, recv_seg(c, h, step)) + lo;
		if (offset % c->esz)
			return false;
		g = offset / c->esz;
		if (g < off || g >= off + len)
			return false;
		rel = g - off;
		if (rel % c->ce % c->pe)
			return false;
		idx = (uint32_t)(rel / c->ce * c->ppc + rel % c->ce / c->pe);
	}
	return test_bit(c->rx_bits, bit(c, step - c->r_lo, channel, idx));
}

bool cs_coll_result_ready(const struct cs_coll *c)
{
	return !c->err && c->rx_left == 0;
}

bool cs_coll_resends_own_copy(const struct cs_coll *c)
{
	return c->direct && c->scratch;
}

bool cs_coll_all_sent(const struct cs_coll *c)
{
	return c->err || c->tx_left == 0;
}

bool cs_coll_done(const struct cs_coll *c)
{
	return c->err || (c->rx_left == 0 && c->ack_left == 0);
}

void cs_coll_get_stats(const struct cs_coll *c, struct cs_coll_stats *st)
{
	*st = c->st;
	st->ideal_tx_bytes = c->ideal_tx;
}

/* ---- failures ------------------------------------------------------- */

int cs_coll_abort(struct cs_coll *c, int err, uint32_t culprit)
{
	if (err >= 0)
		return -EINVAL;
	if (c->err || (c->rx_left == 0 && c->ack_left == 0))
		return -EALREADY;
	cs_coll_waiting_on(c, &c->abort_wait);
	c->err = err;
	c->culprit = culprit;
	return 0;
}

void cs_coll_abort_wait(const struct cs_coll *c, struct cs_coll_wait *w)
{
	*w = c->abort_wait;
}

cs_ns_t cs_coll_next_deadline(const struct cs_coll *c)
{
	if (!c->p.deadline || c->err || (c->rx_left == 0 && c->ack_left == 0))
		return UINT64_MAX;
	return c->p.start + c->p.deadline;
}

bool cs_coll_check_deadline(struct cs_coll *c, cs_ns_t now)
{
	struct cs_coll_wait w;

	if (now < cs_coll_next_deadline(c))
		return false;
	cs_coll_waiting_on(c, &w);
	return cs_coll_abort(c, CS_ERR_TIMEOUT,
			     w.kind != CS_COLL_WAIT_NONE ? w.peer
							 : UINT32_MAX) == 0;
}

int cs_coll_status(const struct cs_coll *c, uint32_t *culprit)
{
	if (culprit)
		*culprit = c->err ? c->culprit : UINT32_MAX;
	if (c->err)
		return c->err;
	return c->rx_left == 0 && c->ack_left == 0 ? 0 : -EINPROGRESS;
}

/* Oldest chunk of channel ch not fully received: true if there is one. */
static bool oldest_rx_gap(const struct cs_coll *c, uint32_t ch,
			  struct cs_coll_wait *w)
{
	const struct cs_coll_chan *h = &c->ch[ch];
	size_t lo, len;

	for (uint32_t ls = 0; ls < c->r_n; ls++) {
		uint32_t t = c->r_lo + ls;

		len = sub_part(c, recv_seg(c, h, t), ch, &lo);
		if (!len && !c->barrier)
			continue;
		for (uint32_t k = 0; k < n_chunks(c, len); k++) {
			uint32_t want = chunk_pkts(c, len, k);
			uint32_t got = c->rx_cnt[slot(c, ls, ch, k)];

			if (got < want) {
				w->kind = CS_COLL_WAIT_DATA;
				w->peer = h->prev;
				w->step = t;
				w->chunk = k;
				w->pkts_missing = want - got;
				w->pkts_total = want;
				return true;
			}
		}
	}
	return false;
}

/* Oldest chunk of channel ch sent but not fully acknowledged. */
static bool oldest_unacked(const struct cs_coll *c, uint32_t ch,
			   struct cs_coll_wait *w)
{
	const struct cs_coll_chan *h = &c->ch[ch];
	size_t lo, len;

	for (uint32_t ls = 0; ls < c->s_n; ls++) {
		uint32_t t = c->s_lo + ls;

		if (!h->finished && ls > h->s)
			break;
		len = sub_part(c, send_seg(c, h, t), ch, &lo);
		if (!len && !c->barrier)
			continue;
		for (uint32_t k = 0; k < n_chunks(c, len); k++) {
			uint32_t want = chunk_pkts(c, len, k);
			uint32_t got = c->tx_ack[slot(c, ls, ch, k)];

			if (!h->finished && ls == h->s && k >= h->k &&
			    !(k == h->k && h->i))
				break; /* not started yet */
			if (got < want) {
				w->kind = CS_COLL_WAIT_ACK;
				w->peer = h->next;
				w->step = t;
				w->chunk = k;
				w->pkts_missing = want - got;
				w->pkts_total = want;
				return true;
			}
		}
	}
	return false;
}

bool cs_coll_waiting_on(const struct cs_coll *c, struct cs_coll_wait *w)
{
	struct cs_coll_wait tmp;
	bool found = false;

	memset(w, 0, sizeof(*w));
	w->rank = c->r;
	w->op_id = c->p.op_id;
	if (c->err || (c->rx_left == 0 && c->ack_left == 0))
		return false;
	for (uint32_t ch = 0; ch < c->C; ch++) {
		const struct cs_coll_chan *h = &c->ch[ch];
		bool win_full =
			!h->finished && h->i == 0 && h->inflight >= c->p.window;
		bool got;

		memset(&tmp, 0, sizeof(tmp));
		/* a full window blocks on the successor; otherwise the
		 * oldest missing data, then the oldest missing ack */
		if (win_full)
			got = oldest_unacked(c, ch, &tmp) ||
			      oldest_rx_gap(c, ch, &tmp);
		else
			got = oldest_rx_gap(c, ch, &tmp) ||
			      oldest_unacked(c, ch, &tmp);
		if (!got)
			continue;
		w->chans_waiting++;
		if (!found) {
			w->kind = tmp.kind;
			w->peer = tmp.peer;
			w->channel = ch;
			w->step = tmp.step;
			w->chunk = tmp.chunk;
			w->pkts_missing = tmp.pkts_missing;
			w->pkts_total = tmp.pkts_total;
			found = true;
		}
	}
	return found;
}

int cs_coll_wait_format(const struct cs_coll *c, const struct cs_coll_wait *w,
			char *buf, size_t len)
{
	const char *phase = c->chain ? "chain" : "ring";
	uint32_t step = w->step;

	if (w->kind == CS_COLL_WAIT_NONE)
		return snprintf(buf, len,
				"rank %u waits on nothing: %s op %u "
				"%s",
				w->rank, cs_coll_kind_name(c->p.kind), w->op_id,
				c->err ? "aborted" : "complete");
	if (c->direct) {
		phase = "direct exchange";
	} else if (c->p.kind == CS_COLL_ALLREDUCE) {
		phase = step < c->n - 1 ? "reduce-scatter" : "all-gather";
		if (step >= c->n - 1)
			step -= c->n - 1;
	}
	return snprintf(
		buf, len,
		"rank %u waits on rank %u: %s op %u channel "
		"%u %s%s step %u chunk %u (packets %u of %u %s)",
		w->rank, w->peer, cs_coll_kind_name(c->p.kind), w->op_id,
		w->channel, w->kind == CS_COLL_WAIT_ACK ? "acks for " : "",
		phase, step, w->chunk, w->pkts_missing, w->pkts_total,
		w->kind == CS_COLL_WAIT_ACK ? "unacknowledged" : "missing");
}
