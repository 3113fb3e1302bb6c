/* SPDX-License-Identifier: MIT */
/* Frame delays from the merged timeline (tdelay.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "observe/tdelay.h"

/* A send or a handled frame: who to whom, which frame, when (aligned). */
struct td_ev {
	uint32_t src, dst; /* node indexes */
	uint32_t group, op, seq;
	int64_t ts;
};

static int key_cmp(const struct td_ev *x, const struct td_ev *y)
{
#define CMP(f)                                                                 \
	do {                                                                   \
		if (x->f != y->f)                                              \
			return x->f < y->f ? -1 : 1;                           \
	} while (0)
	CMP(src);
	CMP(dst);
	CMP(group);
	CMP(op);
	CMP(seq);
#undef CMP
	return 0;
}

static int by_key_ts(const void *a, const void *b)
{
	const struct td_ev *x = a, *y = b;
	int c = key_cmp(x, y);

	return c ? c : (x->ts > y->ts) - (x->ts < y->ts);
}

static int by_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static int index_of(const uint32_t *id, unsigned n, uint32_t node)
{
	for (unsigned i = 0; i < n; i++)
		if (id[i] == node)
			return (int)i;
	return -1;
}

/* The last send of @r's frame at or before @r->ts: its index in @s
 * (sorted by key, then time), -1 when there is none of that frame, -2
 * when every one is later. */
static long last_send(const struct td_ev *s, size_t ns, const struct td_ev *r)
{
	size_t lo = 0, hi = ns;
	long found = -1;

	while (lo < hi) { /* the first send with key >= r's */
		size_t mid = lo + (hi - lo) / 2;

		if (key_cmp(&s[mid], r) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < ns && !key_cmp(&s[i], r); i++) {
		if (s[i].ts > r->ts)
			return found == -1 ? -2 : found;
		found = (long)i;
	}
	return found;
}

/* Nearest-rank quantile of @v (sorted, @n > 0). */
static int64_t rank_q(const int64_t *v, size_t n, unsigned pct)
{
	size_t k = (n * pct + 99) / 100;

	return v[k ? k - 1 : 0];
}

static void fill_row(struct cs_td_row *row, uint32_t src, uint32_t dst,
		     int64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), by_i64);
	*row = (struct cs_td_row){ .src = src,
				   .dst = dst,
				   .n = n,
				   .min = v[0],
				   .p50 = rank_q(v, n, 50),
				   .p90 = rank_q(v, n, 90),
				   .p99 = rank_q(v, n, 99),
				   .max = v[n - 1] };
}

int cs_td_compute(const struct cs_tj_node *nodes, const uint32_t *id,
		  unsigned n, cs_ns_t last_ns, struct cs_td_row *rows,
		  unsigned max_rows, struct cs_td_stats *st)
{
	size_t cap = 0, ns = 0, nr = 0, nd = 0;
	struct td_ev *s = NULL, *r = NULL;
	int64_t newest = INT64_MIN, *d = NULL;
	unsigned nrows = 0;
	int ret = -ENOMEM;

	memset(st, 0, sizeof(*st));
	for (unsigned i = 0; i < n; i++)
		for (unsigned k = 0; k < nodes[i].nrings; k++)
			cap += nodes[i].rings[k].n;
	s = malloc((cap ? cap : 1) * sizeof(*s));
	r = malloc((cap ? cap : 1) * sizeof(*r));
	d = malloc((cap ? cap : 1) * sizeof(*d));
	if (!s || !r || !d)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		for (unsigned k = 0; k < nodes[i].nrings; k++) {
			const struct cs_tj_ring *g = &nodes[i].rings[k];

			for (size_t j = 0; j < g->n; j++) {
				const struct cs_trace_ev *e = &g->ev[j];
				int64_t ts = (int64_t)e->ts - nodes[i].offset;
				int peer;

				if (ts > newest)
					newest = ts;
				if (e->kind != CS_TR_TX &&
				    e->kind != CS_TR_RETX &&
				    (e->kind != CS_TR_RX ||
				     e->d & CS_TR_RX_DUP))
					continue;
				peer = index_of(id, n, e->a);
				if (e->kind == CS_TR_RX) {
					st->rx++;
					r[nr++] = (struct td_ev){
						.src = peer < 0
							       ? UINT32_MAX
							       : (uint32_t)peer,
						.dst = i,
						.group = e->group,
						.op = e->op,
						.seq = e->c,
						.ts = ts
					};
				} else if (peer >= 0) {
					s[ns++] = (struct td_ev){
						.src = i,
						.dst = (uint32_t)peer,
						.group = e->group,
						.op = e->op,
						.seq = e->c,
						.ts = ts
					};
				}
			}
		}
	}
	qsort(s, ns, sizeof(*s), by_key_ts);
	/* received frames by pair, so each pair's delays lie together */
	qsort(r, nr, sizeof(*r), by_key_ts);
	for (size_t j = 0; j < nr;) {
		uint32_t src = r[j].src, dst = r[j].dst;
		size_t from = nd;

		for (; j < nr && r[j].src == src && r[j].dst == dst; j++) {
			long k;

			if (last_ns && r[j].ts < newest - (int64_t)last_ns)
				continue;
			k = src == UINT32_MAX ? -1 : last_send(s, ns, &r[j]);
			if (k == -1) {
				st->unsent++;
			} else if (k == -2) {
				st->early++;
			} else {
				d[nd++] = r[j].ts - s[k].ts;
				st->matched++;
			}
		}
		if (nd > from && nrows < max_rows)
			fill_row(&rows[nrows++], src, dst, d + from, nd - from);
	}
	if (last_ns) /* the frames handled before the window are not counted */
		st->rx = st->matched + st->unsent + st->early;
	if (nd && nrows < max_rows)
		fill_row(&rows[nrows++], CS_TD_ALL, CS_TD_ALL, d, nd);
	ret = (int)nrows;
out:
	free(s);
	free(r);
	free(d);
	return ret;
}

void cs_td_print(FILE *out, const struct cs_tj_node *nodes,
		 const struct cs_td_row *rows, unsigned nrows,
		 const struct cs_td_stats *st)
{
	fprintf(out,
		"frame delays, us (a data frame's last send by its sender's "
		"core to its\nhandling by the receiver's: sender's burst, "
		"ports, kernel, wire, and the\nwait for the receiver's lcore "
		"to run):\n");
	fprintf(out, "%-12s %-12s %9s %9s %9s %9s %9s %9s\n", "from", "to",
		"frames", "min", "p50", "p90", "p99", "max");
	for (unsigned i = 0; i < nrows; i++) {
		const struct cs_td_row *w = &rows[i];
		bool all = w->src == CS_TD_ALL;

		fprintf(out, "%-12s %-12s %9zu %9.1f %9.1f %9.1f %9.1f %9.1f\n",
			all ? "all" : nodes[w->src].name,
			all ? "" : nodes[w->dst].name, w->n,
			(double)w->min / 1e3, (double)w->p50 / 1e3,
			(double)w->p90 / 1e3, (double)w->p99 / 1e3,
			(double)w->max / 1e3);
	}
	fprintf(out,
		"%zu frame(s) handled, %zu paired with their send, %zu whose "
		"send is not in\nthe rings (older), %zu handled before every "
		"send of them (clock error)\n",
		st->rx, st->matched, st->unsent, st->early);
}
