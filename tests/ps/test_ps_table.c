/* SPDX-License-Identifier: MIT */
/* PS tables: parsing, spec checks, initializer, optimizers against
 * formulas computed in double, worker-side combining, the shard map. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"

static struct cs_ps_table_spec spec_of(enum cs_ps_opt_kind k, uint32_t dim)
{
	struct cs_ps_table_spec s;

	memset(&s, 0, sizeof(s));
	s.id = 1;
	s.dim = dim;
	s.dtype = CS_F32;
	s.key_max = 1000;
	s.mode = CS_PS_SYNC;
	s.workers = 2;
	cs_ps_opt_defaults(&s.opt, k);
	s.init.kind = CS_PS_INIT_UNIFORM;
	s.init.seed = 7;
	s.init.scale = 0.5f;
	return s;
}

Test(ps_table, parse_mode_and_opt)
{
	enum cs_ps_mode m;
	enum cs_ps_opt_kind k;
	uint32_t s = 99;

	cr_assert_eq(cs_ps_mode_parse("sync", &m, &s), 0);
	cr_assert_eq(m, CS_PS_SYNC);
	cr_assert_eq(s, 0);
	cr_assert_eq(cs_ps_mode_parse("async", &m, &s), 0);
	cr_assert_eq(m, CS_PS_ASYNC);
	cr_assert_eq(cs_ps_mode_parse("ssp:3", &m, &s), 0);
	cr_assert_eq(m, CS_PS_SSP);
	cr_assert_eq(s, 3);
	cr_assert_eq(cs_ps_mode_parse("ssp:", &m, &s), -EINVAL);
	cr_assert_eq(cs_ps_mode_parse("ssp:-1", &m, &s), -EINVAL);
	cr_assert_eq(cs_ps_mode_parse("ssp:3x", &m, &s), -EINVAL);
	cr_assert_eq(cs_ps_mode_parse("ssp:99999999999", &m, &s), -EINVAL);
	cr_assert_eq(cs_ps_mode_parse("Sync", &m, &s), -EINVAL);
	cr_assert_eq(cs_ps_opt_parse("adam", &k), 0);
	cr_assert_eq(k, CS_PS_OPT_ADAM);
	cr_assert_eq(cs_ps_opt_parse("adamw", &k), -EINVAL);
	cr_assert_str_eq(cs_ps_opt_name(CS_PS_OPT_ADAGRAD), "adagrad");
}

/* Frame sizes and the memory budget's bounds, with the reason. */
Test(ps_table, budget_check)
{
	struct cs_ps_table_spec s;
	char why[256];

	memset(&s, 0, sizeof(s));
	s.dim = 4;
	s.dtype = CS_F32;
	s.key_max = 100;
	s.workers = 1;
	cs_ps_opt_defaults(&s.opt, CS_PS_OPT_SGD);
	cr_assert_eq(cs_ps_frame_bytes(&s), 16);
	cr_assert_eq(cs_ps_budget_check(&s, 0, why, sizeof(why)), 0);
	cr_assert_eq(cs_ps_budget_check(&s, 1024, why, sizeof(why)), 0);
	cr_assert_eq(cs_ps_budget_check(&s, 1023, why, sizeof(why)), -EINVAL);
	cr_assert_str_eq(why, "mem_budget of 1023 bytes: 63 rows of 16 bytes, "
			      "at least 64 a shard");
	cr_assert_eq(cs_ps_budget_check(&s, 1ull << 40, why, sizeof(why)),
		     -EINVAL);
	cr_assert_not_null(strstr(why, "at most 2147483647 a shard"));
	cr_assert_eq(cs_ps_budget_check(&s, 1023, NULL, 0), -EINVAL);
	cs_ps_opt_defaults(&s.opt, CS_PS_OPT_ADAM);
	cr_assert_eq(cs_ps_frame_bytes(&s), 16 + 32);
	s.dtype = CS_F16;
	s.dim = 3; /* 6 bytes, padded to 8; 24 of state */
	cr_assert_eq(cs_ps_frame_bytes(&s), 8 + 24);
	cs_ps_opt_defaults(&s.opt, CS_PS_OPT_MOMENTUM);
	cr_assert_eq(cs_ps_frame_bytes(&s), 8 + 16); /* 12 -> 16 */
	cr_assert_eq(cs_ps_budget_check(&s, 64 * 24, why, sizeof(why)), 0);
	cr_assert_eq(cs_ps_budget_check(&s, 64 * 24 - 1, why, sizeof(why)),
		     -EINVAL);
}

Test(ps_table, spec_check_rejects)
{
	struct cs_ps_table_spec s = spec_of(CS_PS_OPT_ADAM, 4), b;

	cr_assert_eq(cs_ps_spec_check(&s), 0);
	b = s, b.id = CS_PS_TABLES_MAX;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.dim = 0;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.dim = CS_PS_DIM_MAX + 1;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.dtype = CS_I32;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.key_max = 0;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.workers = 0;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.staleness = 2; /* staleness without ssp */
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.opt.lr = NAN;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.opt.beta1 = 1.0f;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.opt.eps = 0.0f; /* adam divides by sqrt(v) + eps */
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.opt.kind = CS_PS_OPT_COUNT;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
	b = s, b.init.kind = CS_PS_INIT_COUNT;
	cr_assert_eq(cs_ps_spec_check(&b), -EINVAL);
}

Test(ps_table, init_is_deterministic_and_per_key)
{
	struct cs_ps_table_spec s = spec_of(CS_PS_OPT_SGD, 16);
	float a[16], b[16], c[16];
	int same = 0;

	cs_ps_init_row(&s, 42, a);
	cs_ps_init_row(&s, 42, b);
	cs_ps_init_row(&s, 43, c);
	cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
	for (int j = 0; j < 16; j++) {
		cr_assert(fabsf(a[j]) <= 0.5f);
		same += a[j] == c[j];
	}
	cr_assert_lt(same, 2);
	s.init.seed = 8; /* another seed, another row */
	cs_ps_init_row(&s, 42, b);
	cr_assert_neq(memcmp(a, b, sizeof(a)), 0);
	s.init.kind = CS_PS_INIT_CONST;
	s.init.scale = 1.25f;
	cs_ps_init_row(&s, 9, a);
	for (int j = 0; j < 16; j++)
		cr_assert_eq(a[j], 1.25f);
	s.init.kind = CS_PS_INIT_ZERO;
	s.dtype = CS_BF16;
	{
		uint16_t h[16];

		memset(h, 0xff, sizeof(h));
		cs_ps_init_row(&s, 9, h);
		for (int j = 0; j < 16; j++)
			cr_assert_eq(h[j], 0);
	}
}

Test(ps_table, dtype_round_trip)
{
	float in[4] = { 1.0f, -2.5f, 0.333333f, 65504.0f }, out[4];
	uint16_t h[4];
	double d[4];

	cs_ps_row_from_f32(CS_F16, in, h, 4);
	cs_ps_row_to_f32(CS_F16, h, out, 4);
	cr_assert_eq(out[0], 1.0f);
	cr_assert_eq(out[1], -2.5f);
	cr_assert_float_eq(out[2], 0.333333f, 1e-3);
	cr_assert_eq(out[3], 65504.0f);
	cs_ps_row_from_f32(CS_BF16, in, h, 4);
	cs_ps_row_to_f32(CS_BF16, h, out, 4);
	cr_assert_eq(out[1], -2.5f);
	cr_assert_float_eq(out[2], 0.333333f, 2e-3);
	cs_ps_row_from_f32(CS_F64, in, d, 4);
	cs_ps_row_to_f32(CS_F64, d, out, 4);
	cr_assert_eq(memcmp(in, out, sizeof(in)), 0);
}

/* Two steps of each optimizer against its formula in double. */
Test(ps_table, optimizers_match_formulas)
{
	const float g1[2] = { 0.5f, -1.0f }, g2[2] = { 0.25f, 2.0f };
	const float *gs[2] = { g1, g2 };

	for (int k = 0; k < CS_PS_OPT_COUNT; k++) {
		struct cs_ps_table_spec s = spec_of((enum cs_ps_opt_kind)k, 2);
		float w[2] = { 1.0f, -1.0f }, st[4];
		double rw[2] = { 1.0, -1.0 }, m[2] = { 0 }, v[2] = { 0 };
		uint32_t step = 0;
		const struct cs_ps_opt *o = &s.opt;

		s.opt.lr = 0.1f;
		cs_ps_opt_state_init(&s, st);
		for (int t = 0; t < 2; t++) {
			cs_ps_opt_apply(&s, w, st, &step, gs[t]);
			for (int j = 0; j < 2; j++) {
				double g = gs[t][j];

				switch (k) {
				case CS_PS_OPT_SGD:
					rw[j] -= 0.1 * g;
					break;
				case CS_PS_OPT_MOMENTUM:
					m[j] = o->momentum * m[j] + g;
					rw[j] -= 0.1 * m[j];
					break;
				case CS_PS_OPT_ADAGRAD:
					v[j] += g * g;
					rw[j] -=
						0.1 * g / (sqrt(v[j]) + o->eps);
					break;
				default: {
					double b1 = o->beta1, b2 = o->beta2;
					double mh, vh;

					m[j] = b1 * m[j] + (1 - b1) * g;
					v[j] = b2 * v[j] + (1 - b2) * g * g;
					mh = m[j] / (1 - pow(b1, t + 1));
					vh = v[j] / (1 - pow(b2, t + 1));
					rw[j] -= 0.1 * mh / (sqrt(vh) + o->eps);
				}
				}
			}
		}
		cr_assert_eq(step, 2);
		for (int j = 0; j < 2; j++)
			cr_assert(fabs(w[j] - rw[j]) < 1e-5,
				  "%s: w[%d] = %.8f, formula %.8f",
				  cs_ps_opt_name((enum cs_ps_opt_kind)k), j,
				  (double)w[j], rw[j]);
	}
}

Test(ps_table, combine_sums_duplicates_in_order)
{
	uint64_t keys[6] = { 9, 3, 9, 1, 3, 9 };
	float rows[6][2] = { { 1, 10 }, { 2, 20 }, { 3, 30 },
			     { 4, 40 }, { 5, 50 }, { 1e8f, 0 } };
	int u = cs_ps_combine(keys, &rows[0][0], 6, 2);

	cr_assert_eq(u, 3);
	cr_assert_eq(keys[0], 1);
	cr_assert_eq(keys[1], 3);
	cr_assert_eq(keys[2], 9);
	cr_assert_eq(rows[0][0], 4);
	cr_assert_eq(rows[1][0], 7);
	cr_assert_eq(rows[1][1], 70);
	/* (1 + 3) + 1e8, in the order given */
	cr_assert_eq(rows[2][0], (1.0f + 3.0f) + 1e8f);
	cr_assert_eq(rows[2][1], 40);
	cr_assert_eq(cs_ps_combine(keys, &rows[0][0], 0, 2), 0);
}

static int ki_cmp(const void *a, const void *b)
{
	const struct cs_ps_key_idx *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static uint64_t rnd64(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The radix sort gives what qsort by (key, idx) gives: sizes around the
 * insertion sort's limit and past it, duplicates, keys that differ in a
 * few low bytes only (bytes skipped) or in every byte. */
Test(ps_table, sort_keys_as_qsort_by_key_then_index)
{
	static const uint32_t sizes[] = { 0, 1, 2, 23, 24, 25, 256, 5000 };
	static const uint64_t masks[] = { 0xffull, 0x1ffffull,
					  0xff000000000000f0ull, ~0ull };
	uint64_t seed = 88172645463325252ull;

	for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
		for (size_t b = 0; b < sizeof(masks) / sizeof(masks[0]); b++) {
			uint32_t n = sizes[a];
			struct cs_ps_key_idx *v = malloc(sizeof(*v) * (n + 1)),
					     *w = malloc(sizeof(*w) * (n + 1));

			for (uint32_t i = 0; i < n; i++) {
				v[i].key = rnd64(&seed) & masks[b];
				v[i].idx = i;
			}
			memcpy(w, v, sizeof(*v) * n);
			qsort(w, n, sizeof(*w), ki_cmp);
			cr_assert_eq(cs_ps_sort_keys(v, n), 0);
			for (uint32_t i = 0; i < n; i++)
				cr_assert(v[i].key == w[i].key &&
						  v[i].idx == w[i].idx,
					  "n %u mask %zu: at %u", n, b, i);
			free(v);
			free(w);
		}
	}
}

/* The map's owner, found through its bucket table, against a binary
 * search over its sorted points (the hash as ps_shard.c computes it):
 * maps of 1 to 512 points, so that buckets hold none, one or several, and
 * keys whose hash lies past the last point wrap to the first. */
static uint64_t ref_mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

Test(ps_table, shardmap_lookup_as_binary_search)
{
	static const uint32_t shapes[][2] = {
		{ 1, 1 }, { 2, 1 }, { 3, 7 }, { 4, 128 }, { 16, 32 }
	};
	uint32_t ids[16];

	for (uint32_t i = 0; i < 16; i++)
		ids[i] = 100 + 3 * i;
	for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); c++) {
		struct cs_ps_shardmap m;
		uint32_t wraps = 0;

		cr_assert_eq(cs_ps_shardmap_init(&m, ids, shapes[c][0],
						 shapes[c][1]),
			     0);
		for (uint32_t table = 0; table < 3; table++) {
			for (uint64_t k = 0; k < 20000; k++) {
				uint64_t h = ref_mix64(
					k ^ ref_mix64(0x7461626c65ull + table));
				uint32_t lo = 0, hi = m.npts;

				while (lo < hi) {
					uint32_t mid = lo + (hi - lo) / 2;

					if (m.pts[mid].point < h)
						lo = mid + 1;
					else
						hi = mid;
				}
				wraps += lo == m.npts;
				lo = lo == m.npts ? 0 : lo;
				cr_assert_eq(cs_ps_shard_of(&m, table, k),
					     m.pts[lo].server,
					     "map %zu table %u key %llu", c,
					     table, (unsigned long long)k);
				cr_assert_eq(cs_ps_shard_index_of(&m, table, k),
					     m.pts[lo].idx);
			}
		}
		if (m.npts <= 7)
			cr_assert_gt(wraps, 0, "map %zu: no key wrapped", c);
		cs_ps_shardmap_fini(&m);
	}
}

static void owners(const struct cs_ps_shardmap *m, uint32_t *own, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		own[k] = cs_ps_shard_of(m, 5, k);
}

#define NKEYS 100000u

Test(ps_table, shardmap_balance_and_order_free)
{
	uint32_t a[4] = { 10, 11, 12, 13 }, b[4] = { 13, 11, 10, 12 };
	struct cs_ps_shardmap ma, mb;
	uint32_t *oa = malloc(4 * NKEYS), *ob = malloc(4 * NKEYS);
	uint32_t cnt[4] = { 0 };

	cr_assert_eq(cs_ps_shardmap_init(&ma, a, 4, 128), 0);
	cr_assert_eq(cs_ps_shardmap_init(&mb, b, 4, 128), 0);
	owners(&ma, oa, NKEYS);
	owners(&mb, ob, NKEYS);
	cr_assert_eq(memcmp(oa, ob, 4 * NKEYS), 0,
		     "ownership depends on the member order");
	for (uint32_t k = 0; k < NKEYS; k++) {
		cnt[oa[k] - 10]++;
		cr_assert_eq(ma.servers[cs_ps_shard_index_of(&ma, 5, k)],
			     oa[k]);
	}
	for (int s = 0; s < 4; s++)
		cr_assert(cnt[s] > NKEYS / 4 * 0.75 &&
				  cnt[s] < NKEYS / 4 * 1.25,
			  "server %d holds %u of %u keys", s, cnt[s], NKEYS);
	cs_ps_shardmap_fini(&ma);
	cs_ps_shardmap_fini(&mb);
	free(oa);
	free(ob);
}

/* Membership change: adding a 5th server moves about 1/5 of the keys, all
 * of them to the new server; removing one moves only its own keys. */
Test(ps_table, shardmap_stable_under_membership_change)
{
	uint32_t four[4] = { 1, 2, 3, 4 }, five[5] = { 1, 2, 3, 4, 5 };
	uint32_t three[3] = { 1, 2, 4 };
	struct cs_ps_shardmap m4, m5, m3;
	uint32_t *o4 = malloc(4 * NKEYS), *o5 = malloc(4 * NKEYS),
		 *o3 = malloc(4 * NKEYS);
	uint32_t moved = 0;

	cr_assert_eq(cs_ps_shardmap_init(&m4, four, 4, 128), 0);
	cr_assert_eq(cs_ps_shardmap_init(&m5, five, 5, 128), 0);
	cr_assert_eq(cs_ps_shardmap_init(&m3, three, 3, 128), 0);
	owners(&m4, o4, NKEYS);
	owners(&m5, o5, NKEYS);
	owners(&m3, o3, NKEYS);
	for (uint32_t k = 0; k < NKEYS; k++) {
		if (o4[k] != o5[k]) {
			moved++;
			cr_assert_eq(o5[k], 5,
				     "key %u moved between old servers", k);
		}
	}
	cr_log_info("add a 5th server: %u of %u keys moved (ideal %u)", moved,
		    NKEYS, NKEYS / 5);
	cr_assert(moved > NKEYS / 5 * 0.7 && moved < NKEYS / 5 * 1.3,
		  "%u keys moved", moved);
	moved = 0;
	for (uint32_t k = 0; k < NKEYS; k++) {
		if (o4[k] != o3[k]) {
			moved++;
			cr_assert_eq(o4[k], 3, "key %u of a kept server moved",
				     k);
		}
	}
	cr_assert(moved > NKEYS / 4 * 0.7 && moved < NKEYS / 4 * 1.3);
	cs_ps_shardmap_fini(&m4);
	cs_ps_shardmap_fini(&m5);
	cs_ps_shardmap_fini(&m3);
	free(o4);
	free(o5);
	free(o3);
}

Test(ps_table, shardmap_rejects)
{
	uint32_t dup[3] = { 1, 2, 1 }, one = 1;
	struct cs_ps_shardmap m;

	cr_assert_eq(cs_ps_shardmap_init(&m, dup, 3, 8), -EINVAL);
	cr_assert_eq(cs_ps_shardmap_init(&m, &one, 0, 8), -EINVAL);
	cr_assert_eq(cs_ps_shardmap_init(&m, &one, 1, 0), -EINVAL);
	cr_assert_eq(cs_ps_shardmap_init(&m, &one, 1, CS_PS_VNODES_MAX + 1),
		     -EINVAL);
	cr_assert_eq(cs_ps_shardmap_init(&m, &one, 1, 1), 0);
	cr_assert_eq(cs_ps_shard_of(&m, 0, 12345), 1);
	cr_assert_eq(cs_ps_shardmap_index(&m, 1), 0);
	cr_assert_eq(cs_ps_shardmap_index(&m, 2), -ENOENT);
	cs_ps_shardmap_fini(&m);
}
