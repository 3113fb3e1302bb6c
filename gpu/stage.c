// SPDX-License-Identifier: MIT
/* The staging pipeline: device <-> pinned host slots <-> wire, sans-IO. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

/*
 * Slot s carries chunks s, s + depth, s + 2 depth, ... in that order, so a
 * slot's next chunk is known (@next) and a chunk is moved exactly once: a
 * duplicate from the wire finds its slot already past it and is refused.
 * Every slot is one of:
 *   FREE    - waiting for chunk @next (out: its copy is started by poll;
 *             in: the wire may write it after cs_gpu_stage_rx_slot)
 *   FILLING - in only: the wire is writing chunk @next into it
 *   COPYING - a copy of chunk @next is in flight (out: device -> slot;
 *             in: slot -> device)
 *   WIRE    - out only: chunk @next is on the wire, until _sent
 */
enum slot_state { FREE, FILLING, COPYING, WIRE };

struct slot {
	enum slot_state state;
	uint64_t next;
};

struct cs_gpu_stage {
	struct cs_gpu_stage_cfg cfg;
	uint8_t *host;
	const struct cs_gpu_copy_ops *ops;
	void *ops_ctx;
	/* the running transfer */
	bool running;
	enum cs_gpu_stage_dir dir;
	uint8_t *dev;
	size_t len;
	uint64_t nchunks;
	uint64_t finished; /* chunks done: sent (out) or copied in (in) */
	cs_gpu_stage_send_fn send;
	void *send_ctx;
	struct slot slot[];
};

int cs_gpu_stage_create(const struct cs_gpu_stage_cfg *cfg, void *slots,
			const struct cs_gpu_copy_ops *ops, void *ops_ctx,
			struct cs_gpu_stage **out)
{
	struct cs_gpu_stage *st;

	if (!cfg || !slots || !ops || !ops->start || !ops->done || !out ||
	    !cfg->chunk || !cfg->depth || cfg->depth > CS_GPU_STAGE_MAX_DEPTH)
		return -EINVAL;
	st = calloc(1, sizeof(*st) + cfg->depth * sizeof(st->slot[0]));
	if (!st)
		return -ENOMEM;
	st->cfg = *cfg;
	st->host = slots;
	st->ops = ops;
	st->ops_ctx = ops_ctx;
	*out = st;
	return 0;
}

void cs_gpu_stage_destroy(struct cs_gpu_stage *st)
{
	free(st);
}

static size_t chunk_len(const struct cs_gpu_stage *st, uint64_t idx)
{
	size_t off = (size_t)idx * st->cfg.chunk;
	size_t left = st->len - off;

	return left < st->cfg.chunk ? left : st->cfg.chunk;
}

static uint8_t *slot_mem(const struct cs_gpu_stage *st, unsigned s)
{
	return st->host + (size_t)s * st->cfg.chunk;
}

int cs_gpu_stage_start(struct cs_gpu_stage *st, enum cs_gpu_stage_dir dir,
		       void *dev, size_t len, cs_gpu_stage_send_fn send,
		       void *send_ctx)
{
	if (st->running)
		return -EBUSY;
	if (!dev || !len || (dir != CS_GPU_STAGE_OUT && dir != CS_GPU_STAGE_IN) ||
	    (dir == CS_GPU_STAGE_OUT && !send))
		return -EINVAL;
	st->dir = dir;
	st->dev = dev;
	st->len = len;
	st->nchunks = (len + st->cfg.chunk - 1) / st->cfg.chunk;
	st->finished = 0;
	st->send = send;
	st->send_ctx = send_ctx;
	for (unsigned s = 0; s < st->cfg.depth; s++) {
		st->slot[s].state = FREE;
		st->slot[s].next = s;
	}
	st->running = true;
	return 0;
}

uint64_t cs_gpu_stage_chunks(const struct cs_gpu_stage *st)
{
	return st->running ? st->nchunks : 0;
}

static struct slot *slot_for(struct cs_gpu_stage *st, uint64_t idx,
			     enum slot_state want)
{
	struct slot *sl;

	if (!st->running || idx >= st->nchunks)
		return NULL;
	sl = &st->slot[idx % st->cfg.depth];
	return sl->next == idx && sl->state == want ? sl : NULL;
}

int cs_gpu_stage_sent(struct cs_gpu_stage *st, uint64_t idx)
{
	struct slot *sl;

	if (st->dir != CS_GPU_STAGE_OUT)
		return -EINVAL;
	sl = slot_for(st, idx, WIRE);
	if (!sl)
		return -EINVAL;
	sl->state = FREE;
	sl->next += st->cfg.depth;
	st->finished++;
	return 0;
}

void *cs_gpu_stage_rx_slot(struct cs_gpu_stage *st, uint64_t idx)
{
	struct slot *sl;

	if (st->dir != CS_GPU_STAGE_IN)
		return NULL;
	sl = slot_for(st, idx, FREE);
	if (!sl)
		sl = slot_for(st, idx, FILLING);
	if (!sl)
		return NULL;
	sl->state = FILLING;
	return slot_mem(st, (unsigned)(idx % st->cfg.depth));
}

int cs_gpu_stage_received(struct cs_gpu_stage *st, uint64_t idx)
{
	struct slot *sl;
	unsigned s;
	int err;

	if (st->dir != CS_GPU_STAGE_IN)
		return -EINVAL;
	sl = slot_for(st, idx, FILLING);
	if (!sl)
		return -EINVAL;
	s = (unsigned)(idx % st->cfg.depth);
	err = st->ops->start(st->ops_ctx, st->dev + idx * st->cfg.chunk,
			     slot_mem(st, s), chunk_len(st, idx),
			     CS_GPU_STAGE_IN, s);
	if (err) {
		st->running = false;
		return err;
	}
	sl->state = COPYING;
	return 0;
}

int cs_gpu_stage_poll(struct cs_gpu_stage *st)
{
	int err = 0;

	if (!st->running)
		return -EINVAL;
	for (unsigned s = 0; s < st->cfg.depth; s++) {
		struct slot *sl = &st->slot[s];
		uint64_t idx = sl->next;
		int r;

		if (sl->state == COPYING) {
			r = st->ops->done(st->ops_ctx, s);
			if (r < 0) {
				err = r;
				break;
			}
			if (!r)
				continue;
			if (st->dir == CS_GPU_STAGE_IN) {
				sl->state = FREE;
				sl->next += st->cfg.depth;
				st->finished++;
				continue;
			}
			sl->state = WIRE;
			st->send(st->send_ctx, idx, idx * st->cfg.chunk,
				 slot_mem(st, s), chunk_len(st, idx));
			/* the wire may have finished with it at once */
		}
		if (st->dir == CS_GPU_STAGE_OUT && sl->state == FREE &&
		    sl->next < st->nchunks) {
			idx = sl->next;
			r = st->ops->start(st->ops_ctx, slot_mem(st, s),
					   st->dev + idx * st->cfg.chunk,
					   chunk_len(st, idx), CS_GPU_STAGE_OUT,
					   s);
			if (r) {
				err = r;
				break;
			}
			sl->state = COPYING;
		}
	}
	if (err) {
		st->running = false;
		return err;
	}
	if (st->finished == st->nchunks) {
		st->running = false;
		return 1;
	}
	return 0;
}
