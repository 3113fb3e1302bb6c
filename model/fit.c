/* SPDX-License-Identifier: MIT */
/*
 * The fit's regressions: measured runs in, constants of struct cs_model
 * out. Each takes the runs of one kind (model.h: struct cs_model_run) and
 * removes from every time what the constants fitted before it explain, so
 * the order is beta/frame, alpha, direct, ACK turn, all-to-all, PS.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "model/model.h"

#define MAX_RUNS 64

/* Ring terms of one run under @m with the run's own settings. */
struct ring_terms {
	double steps, bytes, frames, sends, t_chunk_bytes, t_chunk_frames;
};

static void run_model(const struct cs_model *m, const struct cs_model_run *r,
		      struct cs_model *out)
{
	*out = *m;
	if (r->mtu_payload)
		out->mtu_payload = r->mtu_payload;
	if (r->window)
		out->window = r->window;
	if (r->chunk)
		out->chunk = r->chunk;
}

static void ring_terms(const struct cs_model *m, const struct cs_model_run *r,
		       struct ring_terms *t)
{
	struct cs_model mm;
	struct cs_model_ring s;

	run_model(m, r, &mm);
	cs_model_ring_shape(&mm, r->ranks, r->bytes, &s);
	t->steps = (double)s.steps;
	t->bytes = (double)s.steps * mm.channels * s.seg;
	t->frames = (double)(s.steps * mm.channels * s.chunks * s.frames);
	t->sends = (double)(s.steps * s.chunks);
	t->t_chunk_bytes = s.chunk;
	t->t_chunk_frames = (double)s.frames;
}

static double t_chunk(const struct cs_model *m, const struct ring_terms *t)
{
	return t->t_chunk_bytes * m->beta_ns + t->t_chunk_frames * m->frame_ns;
}

int cs_model_fit_beta(struct cs_model *m, const struct cs_model_run *r,
		      size_t n)
{
	double x[MAX_RUNS * 3], y[MAX_RUNS], c[3];
	struct ring_terms t;
	bool two_mtus = false;

	if (n < 3 || n > MAX_RUNS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		ring_terms(m, &r[i], &t);
		x[i * 3] = 1;
		x[i * 3 + 1] = t.bytes;
		x[i * 3 + 2] = t.frames;
		y[i] = r[i].ns;
		two_mtus |= r[i].mtu_payload != r[0].mtu_payload;
	}
	if (!two_mtus || cs_model_lsq(x, y, n, 3, c))
		return -EINVAL; /* frames and bytes move together */
	if (!(c[1] > 0))
		return -ERANGE;
	m->beta_ns = c[1];
	m->frame_ns = fmax(c[2], 0);
	return 0;
}

int cs_model_fit_alpha(struct cs_model *m, const struct cs_model_run *r,
		       size_t n)
{
	double x[MAX_RUNS], y[MAX_RUNS], c;
	struct ring_terms t;

	if (!n || n > MAX_RUNS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		ring_terms(m, &r[i], &t);
		x[i] = t.steps;
		y[i] = r[i].ns - t.steps * t_chunk(m, &t);
	}
	if (cs_model_lsq(x, y, n, 1, &c))
		return -EINVAL;
	m->alpha_ns = fmax(c, 0);
	return 0;
}

int cs_model_fit_direct(struct cs_model *m, const struct cs_model_run *r,
			size_t n)
{
	double s = 0;

	if (!n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		double f = ceil((double)r[i].bytes / m->mtu_payload);

		if (r[i].ranks < 2)
			return -EINVAL;
		s += r[i].ns -
		     (r[i].ranks - 1) * ((double)r[i].bytes * m->beta_ns +
					 f * m->frame_ns);
	}
	m->direct_alpha_ns = fmax(s / n, 0);
	return 0;
}

int cs_model_fit_ack(struct cs_model *m, const struct cs_model_run *r, size_t n)
{
	double x[MAX_RUNS], y[MAX_RUNS], c;
	struct ring_terms t;

	if (!n || n > MAX_RUNS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		double w = r[i].window ? r[i].window : m->window, stalls;

		ring_terms(m, &r[i], &t);
		stalls = floor((t.sends - 1) / w);
		x[i] = stalls;
		y[i] = r[i].ns -
		       (t.sends - stalls * w) * (m->alpha_ns + t_chunk(m, &t));
	}
	if (cs_model_lsq(x, y, n, 1, &c))
		return -EINVAL;
	m->ack_turn_ns = fmax(c, 0);
	return 0;
}

int cs_model_fit_a2a(struct cs_model *m, const struct cs_model_run *r, size_t n)
{
	double x[MAX_RUNS * 2], y[MAX_RUNS], c[2];

	if (n < 2 || n > MAX_RUNS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		double blk = (double)r[i].bytes / r[i].ranks;

		x[i * 2] = 1;
		x[i * 2 + 1] = (r[i].ranks - 1) *
			       (blk * m->beta_ns +
				ceil(blk / m->mtu_payload) * m->frame_ns);
		y[i] = r[i].ns;
	}
	if (cs_model_lsq(x, y, n, 2, c))
		return -EINVAL;
	m->a2a_alpha_ns = fmax(c[0], 0);
	m->incast = fmax(c[1] - 1, 0);
	m->have_a2a = true;
	return 0;
}

int cs_model_fit_ps(struct cs_model *m, const struct cs_model_run *r, size_t n)
{
	double x[MAX_RUNS * 3], y[MAX_RUNS], c[3];

	if (n < 3 || n > MAX_RUNS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		double mm = (double)r[i].ranks * r[i].servers;

		if (!r[i].ranks || !r[i].servers)
			return -EINVAL;
		x[i * 3] = 1;
		x[i * 3 + 1] = mm / (mm + 1);
		x[i * 3 + 2] = 2.0 * (double)r[i].bytes;
		y[i] = r[i].ns;
	}
	if (cs_model_lsq(x, y, n, 3, c))
		return -EINVAL;
	m->ps_round_ns = fmax(c[0], 0);
	m->ps_tail_ns = fmax(c[1], 0);
	m->ps_beta_ns = fmax(c[2], 0);
	m->have_ps = true;
	return 0;
}

int cs_model_fit_cluster(struct cs_model *m, const struct cs_model_run *r,
			 size_t n)
{
	double x[MAX_RUNS * 2], y[MAX_RUNS], c[2], sd = 0;
	size_t k = 0, kd = 0;

	if (n > MAX_RUNS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (r[i].ranks < 2)
			return -EINVAL;
		if (r[i].bytes <= m->direct_max)
			continue;
		x[k * 2] = 2.0 * (r[i].ranks - 1);
		x[k * 2 + 1] = 2.0 * (r[i].ranks - 1) / r[i].ranks * r[i].bytes;
		y[k++] = r[i].ns;
	}
	if (k < 2 || cs_model_lsq(x, y, k, 2, c))
		return -EINVAL;
	if (!(c[1] > 0))
		return -ERANGE;
	m->alpha_ns = fmax(c[0], 0);
	m->beta_ns = c[1];
	m->frame_ns = 0; /* one MTU: frames move with bytes, in beta */
	m->ack_turn_ns = 0; /* not measurable through collstack run */
	for (size_t i = 0; i < n; i++)
		if (r[i].bytes <= m->direct_max) {
			sd += r[i].ns - (r[i].ranks - 1) * (double)r[i].bytes *
						m->beta_ns;
			kd++;
		}
	m->direct_alpha_ns = kd ? fmax(sd / kd, 0) : m->alpha_ns;
	return 0;
}
