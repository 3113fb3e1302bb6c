// SPDX-License-Identifier: MIT
/* PS tables: spec checks, row conversion, initializer, optimizers, the
 * worker-side combining of duplicate keys. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/reduce_impl.h"

static const char *const opt_names[CS_PS_OPT_COUNT] = {
	[CS_PS_OPT_SGD] = "sgd",
	[CS_PS_OPT_MOMENTUM] = "momentum",
	[CS_PS_OPT_ADAGRAD] = "adagrad",
	[CS_PS_OPT_ADAM] = "adam",
};

const char *cs_ps_opt_name(enum cs_ps_opt_kind kind)
{
	return (unsigned)kind < CS_PS_OPT_COUNT ? opt_names[kind] : "?";
}

const char *cs_ps_mode_name(enum cs_ps_mode mode)
{
	switch (mode) {
	case CS_PS_SYNC:
		return "sync";
	case CS_PS_ASYNC:
		return "async";
	case CS_PS_SSP:
		return "ssp";
	}
	return "?";
}

int cs_ps_opt_parse(const char *s, enum cs_ps_opt_kind *kind)
{
	for (unsigned i = 0; i < CS_PS_OPT_COUNT; i++) {
		if (!strcmp(s, opt_names[i])) {
			*kind = (enum cs_ps_opt_kind)i;
			return 0;
		}
	}
	return -EINVAL;
}

int cs_ps_mode_parse(const char *s, enum cs_ps_mode *mode, uint32_t *stale)
{
	char *end;
	unsigned long v;

	if (!strcmp(s, "sync")) {
		*mode = CS_PS_SYNC;
		*stale = 0;
		return 0;
	}
	if (!strcmp(s, "async")) {
		*mode = CS_PS_ASYNC;
		*stale = 0;
		return 0;
	}
	if (strncmp(s, "ssp:", 4) || s[4] < '0' || s[4] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s + 4, &end, 10);
	if (errno || *end || v > 1000000)
		return -EINVAL;
	*mode = CS_PS_SSP;
	*stale = (uint32_t)v;
	return 0;
}

void cs_ps_opt_defaults(struct cs_ps_opt *o, enum cs_ps_opt_kind kind)
{
	memset(o, 0, sizeof(*o));
	o->kind = kind;
	o->lr = 0.01f;
	o->momentum = 0.9f;
	o->beta1 = 0.9f;
	o->beta2 = 0.999f;
	o->eps = kind == CS_PS_OPT_ADAGRAD ? 1e-10f : 1e-8f;
	o->initial_acc = 0.0f;
}

static bool finite_in(float v, float lo, float hi)
{
	return isfinite(v) && v >= lo && v <= hi;
}

int cs_ps_spec_check(const struct cs_ps_table_spec *s)
{
	const struct cs_ps_opt *o = &s->opt;

	if (s->id >= CS_PS_TABLES_MAX || s->dim == 0 ||
	    s->dim > CS_PS_DIM_MAX || s->key_max == 0)
		return -EINVAL;
	if (s->dtype != CS_F32 && s->dtype != CS_F64 && s->dtype != CS_F16 &&
	    s->dtype != CS_BF16)
		return -EINVAL;
	if ((unsigned)s->mode > CS_PS_SSP ||
	    (s->mode != CS_PS_SSP && s->staleness))
		return -EINVAL;
	if (s->workers == 0 || s->workers > CS_PS_WORKERS_MAX)
		return -EINVAL;
	if ((unsigned)o->kind >= CS_PS_OPT_COUNT ||
	    !finite_in(o->lr, 0.0f, 1e6f) ||
	    !finite_in(o->momentum, 0.0f, 1.0f) ||
	    !finite_in(o->beta1, 0.0f, 0.999999f) ||
	    !finite_in(o->beta2, 0.0f, 0.999999f) ||
	    !finite_in(o->eps, 0.0f, 1.0f) ||
	    !finite_in(o->initial_acc, 0.0f, 1e6f))
		return -EINVAL;
	if (o->kind == CS_PS_OPT_ADAGRAD && o->eps == 0.0f &&
	    o->initial_acc == 0.0f)
		return -EINVAL; /* 0/0 on the first step */
	if (o->kind == CS_PS_OPT_ADAM && o->eps == 0.0f)
		return -EINVAL;
	if ((unsigned)s->init.kind >= CS_PS_INIT_COUNT ||
	    !finite_in(s->init.scale, -1e6f, 1e6f))
		return -EINVAL;
	return 0;
}

size_t cs_ps_row_bytes(const struct cs_ps_table_spec *s)
{
	return (size_t)s->dim * cs_dtype_size(s->dtype);
}

size_t cs_ps_frame_bytes(const struct cs_ps_table_spec *s)
{
	size_t v = (cs_ps_row_bytes(s) + 7) & ~(size_t)7;

	return v + (((size_t)cs_ps_state_floats(s) * 4 + 7) & ~(size_t)7);
}

int cs_ps_budget_check(const struct cs_ps_table_spec *s, uint64_t budget,
		       char *why, size_t wl)
{
	uint64_t f = cs_ps_frame_bytes(s), rows = budget / f;
	bool few = rows < CS_PS_BUDGET_ROWS_MIN;

	if (!budget)
		return 0;
	if (!few && rows <= UINT32_MAX / 2)
		return 0;
	/* short: it goes back to the trainer in a 96-byte reply */
	if (why && wl)
		snprintf(why, wl,
			 "mem_budget of %llu bytes: %llu rows of %llu bytes, "
			 "%s %llu a shard",
			 (unsigned long long)budget, (unsigned long long)rows,
			 (unsigned long long)f, few ? "at least" : "at most",
			 few ? (unsigned long long)CS_PS_BUDGET_ROWS_MIN
			     : (unsigned long long)(UINT32_MAX / 2));
	return -EINVAL;
}

unsigned cs_ps_state_floats(const struct cs_ps_table_spec *s)
{
	switch (s->opt.kind) {
	case CS_PS_OPT_MOMENTUM:
	case CS_PS_OPT_ADAGRAD:
		return s->dim;
	case CS_PS_OPT_ADAM:
		return 2 * s->dim;
	default:
		return 0;
	}
}

void cs_ps_row_to_f32(enum cs_dtype t, const void *src, float *dst, uint32_t n)
{
	const uint8_t *p = src;

	for (uint32_t i = 0; i < n; i++) {
		switch (t) {
		case CS_F32:
			memcpy(&dst[i], p + 4 * i, 4);
			break;
		case CS_F64: {
			double d;

			memcpy(&d, p + 8 * i, 8);
			dst[i] = (float)d;
			break;
		}
		case CS_F16: {
			uint16_t h;

			memcpy(&h, p + 2 * i, 2);
			dst[i] = cs__f16_to_f32(h);
			break;
		}
		default: {
			uint16_t h;

			memcpy(&h, p + 2 * i, 2);
			dst[i] = cs__bf16_to_f32(h);
			break;
		}
		}
	}
}

void cs_ps_row_from_f32(enum cs_dtype t, const float *src, void *dst,
			uint32_t n)
{
	uint8_t *p = dst;

	for (uint32_t i = 0; i < n; i++) {
		switch (t) {
		case CS_F32:
			memcpy(p + 4 * i, &src[i], 4);
			break;
		case CS_F64: {
			double d = src[i];

			memcpy(p + 8 * i, &d, 8);
			break;
		}
		case CS_F16: {
			uint16_t h = cs__f32_to_f16(src[i]);

			memcpy(p + 2 * i, &h, 2);
			break;
		}
		default: {
			uint16_t h = cs__f32_to_bf16(src[i]);

			memcpy(p + 2 * i, &h, 2);
			break;
		}
		}
	}
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void cs_ps_init_row(const struct cs_ps_table_spec *s, uint64_t key, void *row)
{
	float v[256];
	uint64_t base;
	uint32_t j, k, n;

	if (s->init.kind == CS_PS_INIT_ZERO && s->dtype != CS_F16 &&
	    s->dtype != CS_BF16) {
		memset(row, 0, cs_ps_row_bytes(s));
		return;
	}
	base = mix64(s->init.seed ^ mix64(0x5053ull + s->id)) ^ mix64(~key);
	for (j = 0; j < s->dim; j += n) {
		n = CS_MIN(s->dim - j, 256u);
		for (k = 0; k < n; k++) {
			uint64_t r = mix64(base +
					   0x9e3779b97f4a7c15ull * (j + k + 1));
			double u = (double)(r >> 11) * 0x1p-53;

			switch (s->init.kind) {
			case CS_PS_INIT_CONST:
				v[k] = s->init.scale;
				break;
			case CS_PS_INIT_UNIFORM:
				v[k] = (float)((2.0 * u - 1.0) * s->init.scale);
				break;
			default:
				v[k] = 0.0f;
				break;
			}
		}
		cs_ps_row_from_f32(s->dtype, v,
				   (uint8_t *)row +
					   (size_t)j * cs_dtype_size(s->dtype),
				   n);
	}
}

void cs_ps_opt_state_init(const struct cs_ps_table_spec *s, float *state)
{
	unsigned n = cs_ps_state_floats(s);
	float v = s->opt.kind == CS_PS_OPT_ADAGRAD ? s->opt.initial_acc : 0.0f;

	for (unsigned i = 0; i < n; i++)
		state[i] = v;
}

void cs_ps_opt_apply(const struct cs_ps_table_spec *s, float *w, float *state,
		     uint32_t *step, const float *g)
{
	const struct cs_ps_opt *o = &s->opt;
	uint32_t d = s->dim, j;

	*step += 1;
	switch (o->kind) {
	case CS_PS_OPT_SGD:
		for (j = 0; j < d; j++)
			w[j] -= o->lr * g[j];
		break;
	case CS_PS_OPT_MOMENTUM:
		for (j = 0; j < d; j++) {
			state[j] = o->momentum * state[j] + g[j];
			w[j] -= o->lr * state[j];
		}
		break;
	case CS_PS_OPT_ADAGRAD:
		for (j = 0; j < d; j++) {
			state[j] += g[j] * g[j];
			w[j] -= o->lr * g[j] / (sqrtf(state[j]) + o->eps);
		}
		break;
	case CS_PS_OPT_ADAM: {
		float *m = state, *v = state + d;
		float c1 = 1.0f - powf(o->beta1, (float)*step);
		float c2 = 1.0f - powf(o->beta2, (float)*step);

		for (j = 0; j < d; j++) {
			float mh, vh;

			m[j] = o->beta1 * m[j] + (1.0f - o->beta1) * g[j];
			v[j] = o->beta2 * v[j] +
			       (1.0f - o->beta2) * g[j] * g[j];
			mh = m[j] / c1;
			vh = v[j] / c2;
			w[j] -= o->lr * mh / (sqrtf(vh) + o->eps);
		}
		break;
	}
	default:
		break;
	}
}

#define SORT_INSERTION_MAX 24u

int cs_ps_sort_keys(struct cs_ps_key_idx *v, uint32_t n)
{
	struct cs_ps_key_idx *tmp, *src = v, *dst;
	uint64_t any = 0, all = ~0ull;

	if (n <= SORT_INSERTION_MAX) {
		for (uint32_t i = 1; i < n; i++) {
			struct cs_ps_key_idx x = v[i];
			uint32_t j = i;

			for (; j && v[j - 1].key > x.key; j--)
				v[j] = v[j - 1];
			v[j] = x;
		}
		return 0;
	}
	tmp = malloc(sizeof(*tmp) * n);
	if (!tmp)
		return -ENOMEM;
	dst = tmp;
	for (uint32_t i = 0; i < n; i++) {
		any |= v[i].key;
		all &= v[i].key;
	}
	/* least significant byte first, each pass stable; a byte that every
	 * key shares orders nothing */
	for (unsigned sh = 0; sh < 64; sh += 8) {
		uint32_t cnt[256] = { 0 }, sum = 0;
		struct cs_ps_key_idx *t;

		if (!(((any ^ all) >> sh) & 0xff))
			continue;
		for (uint32_t i = 0; i < n; i++)
			cnt[(src[i].key >> sh) & 0xff]++;
		for (unsigned b = 0; b < 256; b++) {
			uint32_t c = cnt[b];

			cnt[b] = sum;
			sum += c;
		}
		for (uint32_t i = 0; i < n; i++)
			dst[cnt[(src[i].key >> sh) & 0xff]++] = src[i];
		t = src;
		src = dst;
		dst = t;
	}
	if (src != v)
		memcpy(v, src, sizeof(*v) * n);
	free(tmp);
	return 0;
}

int cs_ps_combine(uint64_t *keys, float *rows, uint32_t n, uint32_t dim)
{
	struct cs_ps_key_idx *ki;
	float *tmp;
	uint32_t i, u = 0;

	if (n == 0)
		return 0;
	ki = malloc(sizeof(*ki) * n);
	tmp = malloc(sizeof(float) * dim * (size_t)n);
	if (!ki || !tmp) {
		free(ki);
		free(tmp);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		ki[i] = (struct cs_ps_key_idx){ keys[i], i };
	if (cs_ps_sort_keys(ki, n)) {
		free(ki);
		free(tmp);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		const float *src = rows + (size_t)ki[i].idx * dim;

		if (i && ki[i].key == ki[i - 1].key) {
			float *dst = tmp + (size_t)(u - 1) * dim;

			for (uint32_t j = 0; j < dim; j++)
				dst[j] += src[j];
			continue;
		}
		keys[u] = ki[i].key;
		memcpy(tmp + (size_t)u * dim, src, sizeof(float) * dim);
		u++;
	}
	memcpy(rows, tmp, sizeof(float) * dim * (size_t)u);
	free(ki);
	free(tmp);
	return (int)u;
}
