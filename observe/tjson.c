/* SPDX-License-Identifier: MIT */
/* Trace Event JSON from the sidecars' rings (tjson.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "observe/metrics.h"
#include "observe/tjson.h"

const char *const cs_obs_op_kind[CS_OBS_KINDS] = {
	"none", "allreduce", "reduce_scatter", "all_gather", "broadcast",
	"barrier", NULL, NULL,
};

#define TID_RANK 100000 /* trainer rank R is thread TID_RANK + R */

struct oev {
	int64_t ts, dur; /* aligned ns; dur < 0: an instant */
	const struct cs_trace_ev *e, *end; /* end: the closing event */
	unsigned pid;
	int tid;
};

static int by_ts(const void *a, const void *b)
{
	const struct oev *x = a, *y = b;

	return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* The event that closes @e (same ring, later), or NULL. */
static bool closes(const struct cs_trace_ev *e, const struct cs_trace_ev *c)
{
	if (e->kind == CS_TR_OP_POST)
		return c->kind == CS_TR_OP_DONE && c->group == e->group &&
		       c->op == e->op;
	return c->kind == CS_TR_T_DONE && c->group == e->group &&
	       c->op == e->op && c->a == e->a;
}

static const char *kind_of(unsigned k)
{
	return k < CS_OBS_KINDS && cs_obs_op_kind[k] ? cs_obs_op_kind[k] : "op";
}

static void body(FILE *out, const struct oev *o, int64_t base)
{
	const struct cs_trace_ev *e = o->e;
	double ts = (double)(o->ts - base) / 1e3;

	fprintf(out, "{\"pid\":%u,\"tid\":%d,\"ts\":%.3f,", o->pid, o->tid,
		ts);
	switch (e->kind) {
	case CS_TR_OP_POST:
		fprintf(out,
			"\"ph\":\"X\",\"dur\":%.3f,\"cat\":\"op\",\"name\":"
			"\"op g%u#%u\",\"args\":{\"group\":%u,\"op\":%u,"
			"\"ranks\":%u,\"bytes\":%" PRIu64 ",\"status\":%d}}",
			(double)o->dur / 1e3, e->group, e->op, e->group, e->op,
			e->a, (uint64_t)e->c << 32 | e->b,
			o->end ? (int)(int32_t)o->end->c : 1);
		break;
	case CS_TR_T_POST:
		fprintf(out,
			"\"ph\":\"X\",\"dur\":%.3f,\"cat\":\"trainer\","
			"\"name\":\"%s #%u\",\"args\":{\"group\":%u,"
			"\"rank\":%u,\"seq\":%u,\"count\":%u,\"status\":%d}}",
			(double)o->dur / 1e3, kind_of(e->d), e->c, e->group,
			e->a, e->c, e->b,
			o->end ? (int)(int16_t)o->end->d : 1);
		break;
	case CS_TR_STALL:
		fprintf(out,
			"\"ph\":\"X\",\"dur\":%.3f,\"cat\":\"stall\",\"name\":"
			"\"stall %s\",\"args\":{\"peer\":%u,\"group\":%u,"
			"\"op\":%u}}",
			(double)e->b / 1e3, cs_trace_stall_name(e->d), e->a,
			e->group, e->op);
		break;
	case CS_TR_RETX:
		fprintf(out,
			"\"ph\":\"i\",\"s\":\"t\",\"cat\":\"retx\",\"name\":"
			"\"retx %s\",\"args\":{\"peer\":%u,\"seq\":%u,"
			"\"len\":%u,\"group\":%u,\"op\":%u}}",
			cs_trace_retx_name(e->d), e->a, e->c, e->b, e->group,
			e->op);
		break;
	default: /* tx, rx */
		fprintf(out,
			"\"ph\":\"i\",\"s\":\"t\",\"cat\":\"frame\",\"name\":"
			"\"%s%s\",\"args\":{\"peer\":%u,\"seq\":%u,\"len\":%u,"
			"\"channel\":%u,\"group\":%u,\"op\":%u}}",
			cs_trace_kind_name(e->kind),
			e->kind == CS_TR_RX && e->d & CS_TR_RX_DUP ? " dup" : "",
			e->a, e->c, e->b, e->d & 0x7fff, e->group, e->op);
	}
}

/* Collect node @ni's events into @v (aligned, paired). */
static size_t gather(const struct cs_tj_node *nd, unsigned pid, struct oev *v)
{
	size_t k = 0;

	for (unsigned r = 0; r < nd->nrings; r++) {
		const struct cs_tj_ring *rg = &nd->rings[r];

		for (size_t i = 0; i < rg->n; i++) {
			const struct cs_trace_ev *e = &rg->ev[i];
			struct oev *o = &v[k];

			if (e->kind == CS_TR_OP_DONE ||
			    e->kind == CS_TR_T_DONE || !e->kind ||
			    e->kind >= CS_TR_KINDS)
				continue; /* closing events ride on openers */
			*o = (struct oev){ .ts = (int64_t)e->ts - nd->offset,
					   .dur = -1, .e = e, .pid = pid,
					   .tid = rg->tid };
			if (e->kind == CS_TR_T_POST)
				o->tid = TID_RANK + (int)e->a;
			if (e->kind == CS_TR_OP_POST ||
			    e->kind == CS_TR_T_POST) {
				/* the closing event, or open till the end */
				size_t j = i + 1;

				while (j < rg->n && !closes(e, &rg->ev[j]))
					j++;
				o->end = j < rg->n ? &rg->ev[j] : NULL;
				o->dur = o->end ? (int64_t)(o->end->ts - e->ts)
						: (int64_t)(rg->ev[rg->n - 1].ts -
							    e->ts);
			}
			k++;
		}
	}
	return k;
}

static void meta(FILE *out, bool *first, unsigned pid, int tid,
		 const char *what, const char *name)
{
	fprintf(out,
		"%s\n{\"ph\":\"M\",\"pid\":%u,\"tid\":%d,\"name\":\"%s\","
		"\"args\":{\"name\":\"%s\"}}",
		*first ? "" : ",", pid, tid, what, name);
	*first = false;
}

int cs_tj_write(FILE *out, const struct cs_tj_node *nodes, unsigned n,
		cs_ns_t last_ns, struct cs_tj_stats *st)
{
	size_t total = 0, k = 0, from = 0;
	struct oev *v;
	bool first = true;
	int64_t base;

	memset(st, 0, sizeof(*st));
	for (unsigned i = 0; i < n; i++)
		for (unsigned r = 0; r < nodes[i].nrings; r++)
			total += nodes[i].rings[r].n;
	v = calloc(total ? total : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		size_t got = gather(&nodes[i], i + 1, v + k);

		st->nodes_with_events += got != 0;
		k += got;
	}
	qsort(v, k, sizeof(*v), by_ts);
	if (k && last_ns) {
		int64_t cut = v[k - 1].ts - (int64_t)last_ns;

		while (from < k && v[from].ts < cut)
			from++;
	}
	base = from < k ? v[from].ts : 0;
	st->first_ns = base;
	st->last_ns = k ? v[k - 1].ts : 0;
	fprintf(out, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
	for (unsigned i = 0; i < n; i++) {
		char tn[48];
		bool *seen = NULL;

		meta(out, &first, i + 1, 0, "process_name", nodes[i].name);
		for (unsigned r = 0; r < nodes[i].nrings; r++)
			meta(out, &first, i + 1, nodes[i].rings[r].tid,
			     "thread_name", nodes[i].rings[r].name);
		/* a thread per trainer rank that appears */
		seen = calloc(4096, 1);
		for (size_t j = 0; seen && j < k; j++) {
			int tr = v[j].tid - TID_RANK;

			if (v[j].pid != i + 1 || tr < 0 || tr >= 4096 ||
			    seen[tr])
				continue;
			seen[tr] = 1;
			snprintf(tn, sizeof(tn), "rank %d", tr);
			meta(out, &first, i + 1, v[j].tid, "thread_name", tn);
		}
		free(seen);
	}
	for (size_t j = from; j < k; j++) {
		fputs(first ? "\n" : ",\n", out);
		first = false;
		body(out, &v[j], base);
		st->events++;
	}
	fprintf(out, "\n]}\n");
	free(v);
	return ferror(out) ? -EIO : 0;
}
