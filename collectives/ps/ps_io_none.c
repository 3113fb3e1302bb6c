// SPDX-License-Identifier: MIT
/* PS persistence without liburing: nothing to do it with. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "collectives/ps/ps_io.h"

int cs_ps_spill_open(struct cs_ps_uring_spill **out, const char *path,
		     unsigned qdepth, struct cs_ps_spill *spill)
{
	(void)out, (void)path, (void)qdepth, (void)spill;
	return -ENOTSUP;
}

int cs_ps_spill_create(struct cs_ps_uring_spill **out, const char *dir,
		       const char *prefix, unsigned qdepth,
		       struct cs_ps_spill *spill, char *path, size_t plen)
{
	(void)out, (void)dir, (void)prefix, (void)qdepth, (void)spill;
	(void)path, (void)plen;
	return -ENOTSUP;
}

void cs_ps_spill_close(struct cs_ps_uring_spill *s)
{
	(void)s;
}

int cs_ps_ckpt_start(struct cs_ps_ckpt **out, const char *path,
		     struct cs_ps_store *st, uint32_t table, unsigned qdepth,
		     struct cs_ps_snap_sink *sink)
{
	(void)out, (void)path, (void)st, (void)table, (void)qdepth, (void)sink;
	return -ENOTSUP;
}

void cs_ps_ckpt_set_clock(struct cs_ps_ckpt *c, uint64_t clock)
{
	(void)c, (void)clock;
}

size_t cs_ps_ckpt_queued(struct cs_ps_ckpt *c)
{
	(void)c;
	return 0;
}

bool cs_ps_ckpt_done(struct cs_ps_ckpt *c)
{
	(void)c;
	return true;
}

int cs_ps_ckpt_wait(struct cs_ps_ckpt *c)
{
	(void)c;
	return -ENOTSUP;
}

int cs_ps_ckpt_restore(struct cs_ps_store *st, uint32_t table, const char *path)
{
	(void)st, (void)table, (void)path;
	return -ENOTSUP;
}

void cs_ps_ckpt_set_shard(struct cs_ps_ckpt *c, uint32_t shard,
			  uint32_t nshards, uint32_t vnodes, uint64_t tag)
{
	(void)c, (void)shard, (void)nshards, (void)vnodes, (void)tag;
}

uint64_t cs_ps_ckpt_name_tag(const char *name)
{
	(void)name;
	return 0;
}

int cs_ps_restore_start(struct cs_ps_restore **out, struct cs_ps_store *st,
			uint32_t table, const struct cs_ps_restore_src *src)
{
	(void)out, (void)st, (void)table, (void)src;
	return -ENOTSUP;
}

bool cs_ps_restore_ready(struct cs_ps_restore *r)
{
	(void)r;
	return true;
}

int cs_ps_restore_step(struct cs_ps_restore *r, uint32_t max_rows)
{
	(void)r, (void)max_rows;
	return -ENOTSUP;
}

int cs_ps_restore_finish(struct cs_ps_restore *r,
			 struct cs_ps_restore_info *info)
{
	(void)r;
	if (info)
		memset(info, 0, sizeof(*info));
	return -ENOTSUP;
}

int cs_ps_restore_sharded(struct cs_ps_store *st, uint32_t table,
			  const struct cs_ps_restore_src *src,
			  struct cs_ps_restore_info *info)
{
	(void)st, (void)table, (void)src;
	if (info) {
		memset(info, 0, sizeof(*info));
		info->rc = -ENOTSUP;
	}
	return -ENOTSUP;
}
