/* SPDX-License-Identifier: MIT */
/*
 * The cost model's formulas (see model.h and docs/model.md) and the least
 * squares the fit uses.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "collectives/alltoall.h"
#include "collectives/ring.h"
#include "control/xport.h"
#include "transport/tp.h"
#include "model/model.h"

static const char *const op_names[CS_MODEL_OP_COUNT] = {
	[CS_MODEL_ALLREDUCE] = "allreduce",
	[CS_MODEL_ALLREDUCE_RING] = "allreduce-ring",
	[CS_MODEL_ALLREDUCE_DIRECT] = "allreduce-direct",
	[CS_MODEL_ALLREDUCE_TWO_LEVEL] = "allreduce-two-level",
	[CS_MODEL_ALLTOALL] = "alltoall",
	[CS_MODEL_ALLTOALL_FLAT] = "alltoall-flat",
	[CS_MODEL_ALLTOALL_TWO_LEVEL] = "alltoall-two-level",
	[CS_MODEL_PS] = "ps",
	[CS_MODEL_PS_NET] = "ps-net",
};

const char *cs_model_op_name(enum cs_model_op op)
{
	return (unsigned)op < CS_MODEL_OP_COUNT ? op_names[op] : "?";
}

int cs_model_op_parse(const char *s, enum cs_model_op *op)
{
	for (unsigned i = 0; i < CS_MODEL_OP_COUNT; i++)
		if (!strcmp(s, op_names[i])) {
			*op = (enum cs_model_op)i;
			return 0;
		}
	return -EINVAL;
}

int cs_model_defaults(struct cs_model *m)
{
	struct cs_coll_cfg cc;
	struct cs_xport_params xp;
	struct cs_tp_params tp;

	memset(m, 0, sizeof(*m));
	if (cs_cfg_defaults(cs_coll_cfg_table, cs_coll_cfg_table_len, &cc) ||
	    cs_xport_params_default(&xp) || cs_tp_params_default(&tp))
		return -EINVAL;
	snprintf(m->source, sizeof(m->source), "none");
	m->channels = cc.channels;
	m->chunk = cc.chunk;
	m->window = cc.window;
	m->mtu_payload = cc.mtu_payload;
	m->direct_max = cc.direct_max;
	m->max_direct_peers = CS_COLL_MAX_CHANNELS;
	m->ack_every = xp.rel.ack_every;
	m->small_bytes = tp.small_bytes;
	return 0;
}

static double div_up(double a, double b)
{
	return ceil(a / b - 1e-9);
}

void cs_model_ring_shape(const struct cs_model *m, uint32_t n, uint64_t bytes,
			 struct cs_model_ring *r)
{
	double mtu = m->mtu_payload ? m->mtu_payload : 1;
	double cmax = div_up((double)(m->chunk ? m->chunk : 1), mtu) * mtu;
	double seg = (double)bytes / ((double)(m->channels ? m->channels : 1) *
				      (n ? n : 1));

	r->seg = seg;
	r->chunk = seg < cmax ? seg : cmax;
	r->chunks = r->chunk > 0 ? (uint64_t)div_up(seg, r->chunk) : 0;
	r->frames = r->chunk > 0 ? (uint64_t)div_up(r->chunk, mtu) : 0;
	r->steps = n > 1 ? 2ull * (n - 1) : 0;
}

/*
 * Ring allreduce (collectives/ring.c): C channels, 2(N-1) steps, each step
 * a segment of S / (C N) bytes per channel cut into chunks of whole frames.
 * The time is the largest of three bounds:
 *  - bandwidth: a rank's link carries 2(N-1)/N S bytes and their frames;
 *  - the chain: each step waits for the previous one's chunk (alpha plus
 *    one chunk on the wire);
 *  - the window: a channel has at most W chunks unacknowledged; when W
 *    chunks hold fewer frames than an ACK is sent for (rel.ack_every),
 *    every W chunks wait for a delayed ACK (ack_turn). An operation of
 *    the transport core's latency class (at most tp.small_bytes) has its
 *    frames acknowledged at once: no delayed ACK to wait for.
 */
static double ring_ns(const struct cs_model *m, uint32_t n, uint64_t bytes)
{
	struct cs_model_ring r;
	double t_chunk, bw, chain, win = 0, sends;

	if (n < 2 || !bytes)
		return 0;
	cs_model_ring_shape(m, n, bytes, &r);
	t_chunk = r.chunk * m->beta_ns + (double)r.frames * m->frame_ns;
	bw = (double)r.steps * m->channels *
	     (r.seg * m->beta_ns + (double)(r.chunks * r.frames) * m->frame_ns);
	chain = (double)r.steps * (m->alpha_ns + t_chunk);
	sends = (double)(r.steps * r.chunks);
	if (m->window && (double)m->window * r.frames < m->ack_every &&
	    sends > m->window && bytes > m->small_bytes) {
		double stalls = floor((sends - 1) / m->window);

		win = stalls * m->ack_turn_ns +
		      (sends - stalls * m->window) * (m->alpha_ns + t_chunk);
	}
	return fmax(fmax(bw + m->alpha_ns + t_chunk, chain), win);
}

/* Direct exchange: every rank sends its S bytes to each of N-1 peers. */
static double direct_ns(const struct cs_model *m, uint32_t n, uint64_t bytes)
{
	double frames = div_up((double)bytes, m->mtu_payload);

	if (n < 2)
		return 0;
	return m->direct_alpha_ns +
	       (n - 1) * ((double)bytes * m->beta_ns + frames * m->frame_ns);
}

/*
 * Two-level allreduce (the sidecar's path for L trainers per node): the L
 * local buffers are reduced in shared memory ((L-1) S bytes reduced), the
 * node's sum goes round the ring of N/L nodes, and the result is copied
 * back to the L trainers.
 */
static double two_level_ns(const struct cs_model *m, uint32_t n, uint32_t rpn,
			   uint64_t bytes)
{
	uint32_t nodes = n / rpn;
	double local = (double)(rpn - 1) * bytes * m->reduce_ns +
		       (double)rpn * bytes * m->copy_ns;
	double net = 0;

	if (nodes > 1)
		net = (bytes <= m->direct_max &&
		       nodes - 1 <= m->max_direct_peers)
			      ? direct_ns(m, nodes, bytes)
			      : ring_ns(m, nodes, bytes);
	return local + net;
}

/*
 * All-to-all on a switch (collectives/alltoall.c). Flat: every rank's NIC
 * sends its N-1 remote blocks, one frame boundary per block. Two-level: a
 * node pair carries one stream of L x L blocks, a node's N/L - 1 streams
 * spread over its L NICs, so the busiest NIC carries ceil((M-1)/L) of
 * them. Either way: a fixed cost plus the busiest NIC's bytes and frames,
 * scaled by the fan-in penalty.
 */
static double a2a_ns(const struct cs_model *m, enum cs_a2a_algo algo,
		     uint32_t n, uint32_t rpn, uint64_t bytes)
{
	double blk = (double)bytes / n, mtu = m->mtu_payload, wire;

	if (n < 2)
		return 0;
	if (algo == CS_A2A_TWO_LEVEL) {
		uint32_t nodes = n / rpn;
		double streams = div_up(nodes - 1, rpn);
		double sb = blk * rpn * rpn;

		wire = streams * (sb * m->beta_ns + div_up(sb, mtu) * m->frame_ns);
	} else {
		wire = (n - 1) * (blk * m->beta_ns + div_up(blk, mtu) * m->frame_ns);
	}
	return m->a2a_alpha_ns + (1 + m->incast) * wire;
}

/*
 * PS, synchronous: a pull and a push per step. The fixed part (round trips
 * and the per-step work of the PS runs the constants came from) is
 * ps_round; a worker then waits for the slowest of the M = W x K messages
 * of its round (ps_tail x M/(M+1), the mean of the largest of M uniform
 * delays); the bytes: a worker's B bytes go out and come back, at the PS
 * path's measured cost per byte (ps_beta: message parts, per-row work).
 * With @net the bytes are also put on links: the busiest end (a worker's
 * B, or a shard's W B / K) moves them twice at the network's beta, with
 * the fan-in penalty.
 */
static double ps_ns(const struct cs_model *m, uint32_t n, uint32_t servers,
		    uint64_t bytes, bool net)
{
	double mm = (double)n * servers;
	double busiest = fmax((double)bytes, (double)bytes * n / servers);
	double t = m->ps_round_ns + m->ps_tail_ns * mm / (mm + 1) +
		   2 * (double)bytes * m->ps_beta_ns;

	if (net)
		t += 2 * (1 + m->incast) *
		     (busiest * m->beta_ns +
		      div_up(busiest, m->mtu_payload) * m->frame_ns);
	return t;
}

int cs_model_predict(const struct cs_model *m, const struct cs_model_case *c,
		     double *ns, const char **algo, char *why, size_t whylen)
{
	uint32_t n = c->ranks, rpn = c->rpn ? c->rpn : 1;
	const char *a = cs_model_op_name(c->op);
	enum cs_a2a_algo aa;

	if (why && whylen)
		why[0] = 0;
	if (!n || n % rpn || (unsigned)c->op >= CS_MODEL_OP_COUNT) {
		if (why)
			snprintf(why, whylen,
				 "bad case: ranks %u, ranks per node %u", n,
				 rpn);
		return -EINVAL;
	}
	switch (c->op) {
	case CS_MODEL_ALLREDUCE:
		if (rpn > 1) {
			*ns = two_level_ns(m, n, rpn, c->bytes);
			a = "two-level";
		} else if (c->bytes <= m->direct_max &&
			   n - 1 <= m->max_direct_peers) {
			*ns = direct_ns(m, n, c->bytes);
			a = "direct";
		} else {
			*ns = ring_ns(m, n, c->bytes);
			a = "ring";
		}
		break;
	case CS_MODEL_ALLREDUCE_RING:
		*ns = ring_ns(m, n, c->bytes);
		a = "ring";
		break;
	case CS_MODEL_ALLREDUCE_DIRECT:
		*ns = direct_ns(m, n, c->bytes);
		a = "direct";
		break;
	case CS_MODEL_ALLREDUCE_TWO_LEVEL:
		*ns = two_level_ns(m, n, rpn, c->bytes);
		a = "two-level";
		break;
	case CS_MODEL_ALLTOALL:
	case CS_MODEL_ALLTOALL_FLAT:
	case CS_MODEL_ALLTOALL_TWO_LEVEL:
		if (!m->have_a2a) {
			if (why)
				snprintf(why, whylen,
					 "the model has no all-to-all constants "
					 "(fitted on a %s, where all-to-all "
					 "does not run yet)",
					 m->source);
			return -ENODATA;
		}
		aa = c->op == CS_MODEL_ALLTOALL_FLAT	   ? CS_A2A_FLAT
		     : c->op == CS_MODEL_ALLTOALL_TWO_LEVEL ? CS_A2A_TWO_LEVEL
		     : cs_a2a_choose(n, rpn, c->bytes / n);
		if (aa == CS_A2A_TWO_LEVEL && (rpn < 2 || n / rpn < 2)) {
			if (why)
				snprintf(why, whylen,
					 "two-level all-to-all needs 2 or more "
					 "nodes of 2 or more ranks");
			return -EINVAL;
		}
		*ns = a2a_ns(m, aa, n, rpn, c->bytes);
		a = aa == CS_A2A_TWO_LEVEL ? "two-level" : "flat";
		break;
	case CS_MODEL_PS:
	case CS_MODEL_PS_NET:
		if (!m->have_ps) {
			if (why)
				snprintf(why, whylen,
					 "the model has no PS constants "
					 "(fitted on a %s, where PS push/pull "
					 "does not run yet)",
					 m->source);
			return -ENODATA;
		}
		*ns = ps_ns(m, n, c->servers ? c->servers : n / rpn,
			    c->bytes, c->op == CS_MODEL_PS_NET);
		a = c->op == CS_MODEL_PS_NET ? "sync-net" : "sync";
		break;
	default:
		return -EINVAL;
	}
	if (algo)
		*algo = a;
	return 0;
}

/* ---- least squares -------------------------------------------------------- */

int cs_model_lsq(const double *x, const double *y, size_t n, size_t k,
		 double *coef)
{
	double a[CS_MODEL_LSQ_MAX][CS_MODEL_LSQ_MAX + 1];
	double scale[CS_MODEL_LSQ_MAX];

	if (!k || k > CS_MODEL_LSQ_MAX || n < k)
		return -EINVAL;
	/* columns scaled to unit size: bytes and counts differ by 1e6 */
	for (size_t j = 0; j < k; j++) {
		scale[j] = 0;
		for (size_t i = 0; i < n; i++)
			scale[j] = fmax(scale[j], fabs(x[i * k + j]));
		if (scale[j] == 0)
			return -EINVAL;
	}
	/* normal equations: (X^T X) c = X^T y */
	for (size_t r = 0; r < k; r++) {
		for (size_t j = 0; j < k; j++) {
			double s = 0;

			for (size_t i = 0; i < n; i++)
				s += x[i * k + r] / scale[r] * x[i * k + j] /
				     scale[j];
			a[r][j] = s;
		}
		a[r][k] = 0;
		for (size_t i = 0; i < n; i++)
			a[r][k] += x[i * k + r] / scale[r] * y[i];
	}
	/* Gaussian elimination, partial pivoting */
	for (size_t p = 0; p < k; p++) {
		size_t best = p;

		for (size_t r = p + 1; r < k; r++)
			if (fabs(a[r][p]) > fabs(a[best][p]))
				best = r;
		if (fabs(a[best][p]) < 1e-12 * n)
			return -EINVAL;
		if (best != p)
			for (size_t j = 0; j <= k; j++) {
				double t = a[p][j];

				a[p][j] = a[best][j];
				a[best][j] = t;
			}
		for (size_t r = p + 1; r < k; r++) {
			double f = a[r][p] / a[p][p];

			for (size_t j = p; j <= k; j++)
				a[r][j] -= f * a[p][j];
		}
	}
	for (size_t p = k; p-- > 0;) {
		double s = a[p][k];

		for (size_t j = p + 1; j < k; j++)
			s -= a[p][j] * coef[j];
		coef[p] = s / a[p][p];
	}
	for (size_t j = 0; j < k; j++)
		coef[j] /= scale[j];
	return 0;
}
