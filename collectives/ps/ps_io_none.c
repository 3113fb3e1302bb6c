// SPDX-License-Identifier: MIT
/* PS persistence without liburing: nothing to do it with. */
#include <errno.h>

#include "collectives/ps/ps_io.h"

int cs_ps_spill_open(struct cs_ps_uring_spill **out, const char *path,
		     unsigned qdepth, struct cs_ps_spill *spill)
{
	(void)out, (void)path, (void)qdepth, (void)spill;
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
