// SPDX-License-Identifier: MIT
/*
 * Shard map: consistent hashing with virtual nodes. A server's points are
 * a pure function of its id, so every node builds the same map from the
 * same member list, and a membership change moves only the keys on the
 * arcs that changed hands.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int vnode_cmp(const void *a, const void *b)
{
	const struct cs_ps_vnode *x = a, *y = b;

	if (x->point != y->point)
		return x->point < y->point ? -1 : 1;
	/* equal points (never seen, but possible): lower server id first */
	return x->server < y->server ? -1 : (x->server > y->server);
}

int cs_ps_shardmap_init(struct cs_ps_shardmap *m, const uint32_t *servers,
			uint32_t n, uint32_t vnodes)
{
	uint32_t i, k;

	memset(m, 0, sizeof(*m));
	if (n == 0 || n > CS_PS_SERVERS_MAX || vnodes == 0 ||
	    vnodes > CS_PS_VNODES_MAX)
		return -EINVAL;
	for (i = 0; i < n; i++)
		for (k = 0; k < i; k++)
			if (servers[i] == servers[k])
				return -EINVAL;
	m->pts = malloc(sizeof(*m->pts) * n * (size_t)vnodes);
	m->servers = malloc(sizeof(*m->servers) * n);
	if (!m->pts || !m->servers) {
		cs_ps_shardmap_fini(m);
		return -ENOMEM;
	}
	memcpy(m->servers, servers, sizeof(*servers) * n);
	m->nservers = n;
	m->vnodes = vnodes;
	for (i = 0; i < n; i++) {
		uint64_t base = mix64(0x7073736861726431ull ^ servers[i]);

		for (k = 0; k < vnodes; k++) {
			struct cs_ps_vnode *v = &m->pts[m->npts++];

			v->point = mix64(base ^ mix64(k));
			v->server = servers[i];
			v->idx = i;
		}
	}
	qsort(m->pts, m->npts, sizeof(*m->pts), vnode_cmp);
	/* about 4 buckets per point: 1 to 2 points to walk past */
	for (m->bits = 4; m->bits < 20 && (1u << m->bits) < 4 * m->npts;)
		m->bits++;
	m->first = malloc(sizeof(*m->first) << m->bits);
	if (!m->first) {
		cs_ps_shardmap_fini(m);
		return -ENOMEM;
	}
	for (uint32_t b = 0, p = 0; b < 1u << m->bits; b++) {
		uint64_t lo = (uint64_t)b << (64 - m->bits);

		while (p < m->npts && m->pts[p].point < lo)
			p++;
		m->first[b] = p;
	}
	return 0;
}

void cs_ps_shardmap_fini(struct cs_ps_shardmap *m)
{
	free(m->pts);
	free(m->servers);
	free(m->first);
	memset(m, 0, sizeof(*m));
}

static const struct cs_ps_vnode *owner(const struct cs_ps_shardmap *m,
				       uint32_t table, uint64_t key)
{
	uint64_t h = mix64(key ^ mix64(0x7461626c65ull + table));
	uint32_t i = m->first[h >> (64 - m->bits)];

	/* first point >= h, from the first of h's bucket; past the last
	 * point wraps to the first */
	while (i < m->npts && m->pts[i].point < h)
		i++;
	return &m->pts[i == m->npts ? 0 : i];
}

uint32_t cs_ps_shard_of(const struct cs_ps_shardmap *m, uint32_t table,
			uint64_t key)
{
	return owner(m, table, key)->server;
}

uint32_t cs_ps_shard_index_of(const struct cs_ps_shardmap *m, uint32_t table,
			      uint64_t key)
{
	return owner(m, table, key)->idx;
}

int cs_ps_shardmap_index(const struct cs_ps_shardmap *m, uint32_t server)
{
	for (uint32_t i = 0; i < m->nservers; i++)
		if (m->servers[i] == server)
			return (int)i;
	return -ENOENT;
}
