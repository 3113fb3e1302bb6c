// SPDX-License-Identifier: MIT
/* The parameter-server benchmark pattern (ps_pattern.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps_pattern.h"

int cs_ps_pat_init(struct cs_ps_pat *p, uint32_t rows, uint32_t kpp,
		   uint32_t workers, uint32_t dim, double skew, bool dense)
{
	double sum = 0;

	memset(p, 0, sizeof(*p));
	if (!rows || !workers || !dim || !(skew >= 0 && skew <= 10) ||
	    (!dense && !kpp))
		return -EINVAL;
	p->rows = rows;
	p->kpp = dense ? rows : kpp;
	p->workers = workers;
	p->dim = dim;
	p->skew = skew;
	p->dense = dense;
	if (dense || skew == 0)
		return 0;
	p->cdf = malloc(sizeof(*p->cdf) * rows);
	if (!p->cdf)
		return -ENOMEM;
	for (uint32_t i = 0; i < rows; i++) {
		sum += 1.0 / pow(i + 1.0, skew);
		p->cdf[i] = sum;
	}
	for (uint32_t i = 0; i < rows; i++)
		p->cdf[i] /= sum;
	return 0;
}

void cs_ps_pat_fini(struct cs_ps_pat *p)
{
	free(p->cdf);
	p->cdf = NULL;
}

void cs_ps_pat_keys(const struct cs_ps_pat *p, uint32_t w, uint64_t t,
		    uint64_t *keys)
{
	uint64_t r = (uint64_t)w * 0x9e3779b97f4a7c15ull ^
		     (t + 1) * 0xd6e8feb86659fd93ull;

	for (uint32_t i = 0; i < p->kpp; i++) {
		uint32_t lo = 0, hi = p->rows - 1;

		if (p->dense) {
			keys[i] = i;
			continue;
		}
		if (!p->cdf) {
			keys[i] = cs_rand_next(&r) % p->rows;
			continue;
		}
		double u = cs_rand_unit(&r);

		while (lo < hi) {
			uint32_t mid = lo + (hi - lo) / 2;

			if (p->cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		/* scatter the ranks so that hot keys are not all small
		 * numbers (nor all on one shard) */
		keys[i] = (uint64_t)lo * 2654435761ull % p->rows;
	}
}

static float pat_grad(uint64_t key, uint32_t j)
{
	return (float)(1 + (key + j) % 4) / 4.0f;
}

void cs_ps_pat_grads(const struct cs_ps_pat *p, const uint64_t *keys,
		     uint32_t n, float *rows)
{
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < p->dim; j++)
			rows[(size_t)i * p->dim + j] = pat_grad(keys[i], j);
}

void cs_ps_pat_row(const struct cs_ps_pat *p, uint64_t key, uint64_t c,
		   float *row)
{
	for (uint32_t j = 0; j < p->dim; j++)
		row[j] = 1.0f - CS_PS_PAT_LR * pat_grad(key, j) * (float)c;
}

int cs_ps_pat_check(const struct cs_ps_pat *p, uint64_t key, const float *row,
		    uint64_t lo, uint64_t hi)
{
	double c = (1.0 - (double)row[0]) /
		   ((double)CS_PS_PAT_LR * pat_grad(key, 0));
	float want;

	if (!(c > (double)lo - 0.5 && c < (double)hi + 0.5))
		return -EBADMSG;
	for (uint32_t j = 0; j < p->dim; j++) {
		want = 1.0f -
		       CS_PS_PAT_LR * pat_grad(key, j) * (float)llround(c);
		if (memcmp(&want, &row[j], sizeof(want)))
			return -EBADMSG;
	}
	return 0;
}

uint64_t cs_ps_pat_lo_version(enum cs_ps_mode mode, uint32_t stale,
			      uint64_t clock)
{
	if (mode == CS_PS_SYNC)
		return clock;
	return mode == CS_PS_SSP && clock > stale ? clock - stale : 0;
}

void cs_ps_pat_bounds(enum cs_ps_mode mode, uint32_t lo_all, uint32_t own,
		      uint32_t tot, uint64_t *lo, uint64_t *hi)
{
	*lo = mode == CS_PS_SYNC ? lo_all : CS_MAX(lo_all, own);
	*hi = mode == CS_PS_SYNC ? lo_all : tot;
}

void cs_ps_pat_count(const struct cs_ps_pat *p, uint64_t from, uint64_t to,
		     uint32_t *cnt)
{
	uint64_t *keys;

	if (p->dense) {
		for (uint32_t k = 0; k < p->rows; k++)
			cnt[k] += (uint32_t)((to - from) * p->workers);
		return;
	}
	keys = malloc(sizeof(*keys) * p->kpp);
	if (!keys)
		abort(); /* a few KiB: nothing sensible to do without them */
	for (uint64_t t = from; t < to; t++)
		for (uint32_t w = 0; w < p->workers; w++) {
			cs_ps_pat_keys(p, w, t, keys);
			for (uint32_t i = 0; i < p->kpp; i++)
				cnt[keys[i]]++;
		}
	free(keys);
}

int cs_ps_pat_grads_of(const struct cs_ps_pat *p, uint64_t to,
		       const struct cs_ps_shardmap *map, uint32_t server,
		       uint64_t *out)
{
	uint64_t *keys = malloc(sizeof(*keys) * p->kpp);
	uint64_t *seen = calloc(p->rows, sizeof(*seen));
	uint64_t n = 0, stamp = 0;

	if (!keys || !seen) {
		free(keys);
		free(seen);
		return -ENOMEM;
	}
	for (uint64_t t = 0; t < to; t++)
		for (uint32_t w = 0; w < p->workers; w++) {
			stamp++;
			cs_ps_pat_keys(p, w, t, keys);
			for (uint32_t i = 0; i < p->kpp; i++) {
				if (seen[keys[i]] == stamp ||
				    cs_ps_shard_of(map, CS_PS_PAT_TABLE,
						   keys[i]) != server)
					continue;
				seen[keys[i]] = stamp;
				n++;
			}
		}
	free(keys);
	free(seen);
	*out = n;
	return 0;
}
