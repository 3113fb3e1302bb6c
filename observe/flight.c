/* SPDX-License-Identifier: MIT */
/* The flight recorder and the trainer IPC hooks (flight.h). */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <string.h>

#include "observe/flight.h"
#include "observe/metrics.h"
#include "observe/trace.h"

static struct cs_fl_group fl[CS_FL_GROUPS];

static void wr_begin(struct cs_fl_group *g)
{
	atomic_fetch_add_explicit(&g->ver, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void wr_end(struct cs_fl_group *g)
{
	atomic_fetch_add_explicit(&g->ver, 1, memory_order_release);
}

static int32_t rank_of(const struct cs_fl_group *g, uint32_t l)
{
	return l < CS_FL_LOCAL ? g->ranks[l] : -1;
}

void cs_obs_ipc_post(cs_ns_t now, uint32_t gid, const char *name,
		     uint32_t size, uint32_t local_size, const int32_t *ranks,
		     uint64_t seq, uint32_t local_rank, unsigned kind,
		     uint64_t count)
{
	struct cs_obs_slot *s = cs_obs_slot_get();
	struct cs_fl_group *g;
	struct cs_fl_op *o;

	cs_trace_ev_put(CS_TR_T_POST, now, gid, (uint32_t)seq,
			local_rank < local_size ? (uint32_t)ranks[local_rank]
						: UINT32_MAX,
			(uint32_t)count, (uint32_t)seq, (uint16_t)kind);
	if (s)
		atomic_fetch_add_explicit(&s->pending, 1, memory_order_relaxed);
	if (gid >= CS_FL_GROUPS || local_rank >= CS_FL_LOCAL)
		return;
	g = &fl[gid];
	wr_begin(g);
	/* a slot reused by another group, or a group formed again */
	if (strncmp(g->name, name, CS_FL_NAME - 1) || g->size != size ||
	    g->local_size != local_size) {
		memset(g->ops, 0, sizeof(g->ops));
		snprintf(g->name, sizeof(g->name), "%s", name);
		g->gid = gid;
		g->size = size;
		g->local_size = local_size;
	}
	for (uint32_t l = 0; l < local_size && l < CS_FL_LOCAL; l++)
		g->ranks[l] = ranks[l];
	o = &g->ops[seq % CS_FL_OPS];
	if (!o->used || o->seq != seq) {
		memset(o, 0, sizeof(*o));
		o->used = 1;
		o->seq = seq;
		o->kind = (uint16_t)kind;
		o->t_post = now;
	}
	if (!local_rank)
		o->count = count;
	o->posted |= 1ull << local_rank;
	wr_end(g);
}

void cs_obs_ipc_done(cs_ns_t now, uint32_t gid, uint64_t seq,
		     uint32_t local_rank, int status)
{
	struct cs_obs_slot *s = cs_obs_slot_get();
	struct cs_fl_group *g;
	struct cs_fl_op *o;
	unsigned kind = 0;

	if (gid < CS_FL_GROUPS && local_rank < CS_FL_LOCAL) {
		g = &fl[gid];
		o = &g->ops[seq % CS_FL_OPS];
		if (o->used && o->seq == seq) {
			wr_begin(g);
			o->done |= 1ull << local_rank;
			o->t_done = now;
			if (status && !o->status)
				o->status = status;
			wr_end(g);
			kind = o->kind;
			if (s && kind < CS_OBS_KINDS) {
				cs_obs_add(&s->ops[kind][status != 0], 1);
				cs_obs_hist_add(&s->op_lat[kind],
						now - o->t_post);
			}
		}
		cs_trace_ev_put(CS_TR_T_DONE, now, gid, (uint32_t)seq,
				(uint32_t)rank_of(g, local_rank), 0,
				(uint32_t)seq, (uint16_t)status);
	}
	if (s)
		atomic_fetch_sub_explicit(&s->pending, 1, memory_order_relaxed);
}

int cs_fl_snapshot(unsigned i, struct cs_fl_group *out)
{
	const struct cs_fl_group *g;
	uint32_t a, b;

	if (i >= CS_FL_GROUPS)
		return -ENOENT;
	g = &fl[i];
	do {
		while ((a = atomic_load_explicit(&g->ver,
						 memory_order_acquire)) & 1)
			sched_yield();
		memcpy((char *)out + sizeof(out->ver),
		       (const char *)g + sizeof(g->ver),
		       sizeof(*g) - sizeof(g->ver));
		atomic_thread_fence(memory_order_acquire);
		b = atomic_load_explicit(&g->ver, memory_order_relaxed);
	} while (a != b);
	atomic_init(&out->ver, a);
	return a ? 0 : -ENOENT;
}

int cs_fl_write(FILE *out, cs_ns_t now)
{
	static struct cs_fl_group g;
	int n = 0;

	for (unsigned i = 0; i < CS_FL_GROUPS; i++) {
		if (cs_fl_snapshot(i, &g))
			continue;
		n++;
		fprintf(out, "group %u %s %u %u ", g.gid, g.name, g.size,
			g.local_size);
		for (uint32_t l = 0; l < g.local_size && l < CS_FL_LOCAL; l++)
			fprintf(out, "%s%d", l ? "," : "", (int)g.ranks[l]);
		fputc('\n', out);
		for (unsigned k = 0; k < CS_FL_OPS; k++) {
			const struct cs_fl_op *o = &g.ops[k];
			uint64_t all = g.local_size >= 64
					       ? UINT64_MAX
					       : (1ull << g.local_size) - 1;

			if (!o->used)
				continue;
			fprintf(out,
				"op %u %" PRIu64 " %u %" PRIu64 " %#" PRIx64
				" %#" PRIx64 " %d %" PRIu64 " %lld\n",
				g.gid, o->seq, o->kind, o->count, o->posted,
				o->done, (int)o->status,
				now > o->t_post ? now - o->t_post : 0,
				(o->done & all) == all && o->posted == o->done
					? (long long)(o->t_done - o->t_post)
					: -1ll);
		}
	}
	return n;
}

void cs_fl_reset(void)
{
	memset(fl, 0, sizeof(fl));
}
