/* SPDX-License-Identifier: MIT */
/* Heartbeat failure detector and group epochs (sans-IO). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <collstack/types.h>

#include "member.h"

const struct cs_cfg_entry cs_member_cfg[] = {
	{ "member.hb_interval", CS_CFG_NS,
	  offsetof(struct cs_member_params, hb_interval), "100ms", 1e5, 6e10,
	  "interval between heartbeats to the coordinator" },
	{ "member.fail_timeout", CS_CFG_NS,
	  offsetof(struct cs_member_params, fail_timeout), "1s", 1e6, 3.6e12,
	  "silence after which a member (or the coordinator) is declared lost; "
	  "in-flight operations fail within 2x this" },
};
const size_t cs_member_cfg_len = CS_ARRAY_SIZE(cs_member_cfg);

int cs_coord_fd_init(struct cs_coord_fd *fd, const struct cs_member_params *p,
		     uint32_t n, uint32_t epoch, cs_ns_t now)
{
	if (!n || !p->fail_timeout || !p->hb_interval)
		return -EINVAL;
	memset(fd, 0, sizeof(*fd));
	fd->last_heard = calloc(n, sizeof(*fd->last_heard));
	if (!fd->last_heard)
		return -ENOMEM;
	fd->state = calloc(n, sizeof(*fd->state));
	if (!fd->state)
		goto out_free_heard;
	fd->p = *p;
	fd->n = n;
	fd->alive = n;
	fd->epoch = epoch;
	for (uint32_t i = 0; i < n; i++)
		fd->last_heard[i] = now;
	return 0;

out_free_heard:
	free(fd->last_heard);
	fd->last_heard = NULL;
	return -ENOMEM;
}

void cs_coord_fd_fini(struct cs_coord_fd *fd)
{
	free(fd->last_heard);
	free(fd->state);
	memset(fd, 0, sizeof(*fd));
}

int cs_coord_fd_heard(struct cs_coord_fd *fd, uint32_t rank, cs_ns_t now)
{
	if (rank >= fd->n)
		return -EINVAL;
	if (fd->state[rank] == CS_MEMBER_LOST)
		return CS_ERR_PEER_LOST;
	if (now > fd->last_heard[rank])
		fd->last_heard[rank] = now;
	return 0;
}

unsigned cs_coord_fd_poll(struct cs_coord_fd *fd, cs_ns_t now, uint32_t *lost,
			  unsigned max)
{
	unsigned k = 0;

	for (uint32_t i = 0; i < fd->n && k < max; i++) {
		if (fd->state[i] != CS_MEMBER_ALIVE)
			continue;
		if (now - fd->last_heard[i] < fd->p.fail_timeout)
			continue;
		fd->state[i] = CS_MEMBER_LOST;
		fd->alive--;
		lost[k++] = i;
	}
	if (k)
		fd->epoch++;
	return k;
}

cs_ns_t cs_coord_fd_deadline(const struct cs_coord_fd *fd)
{
	cs_ns_t d = UINT64_MAX;

	for (uint32_t i = 0; i < fd->n; i++)
		if (fd->state[i] == CS_MEMBER_ALIVE &&
		    fd->last_heard[i] + fd->p.fail_timeout < d)
			d = fd->last_heard[i] + fd->p.fail_timeout;
	return d;
}

void cs_member_fd_init(struct cs_member_fd *m, const struct cs_member_params *p,
		       uint32_t epoch, cs_ns_t now)
{
	memset(m, 0, sizeof(*m));
	m->p = *p;
	m->epoch = epoch;
	m->next_hb = now;
	m->coord_heard = now;
}

bool cs_member_fd_on_view(struct cs_member_fd *m, uint32_t epoch, cs_ns_t now)
{
	if (now > m->coord_heard)
		m->coord_heard = now;
	/* Serial comparison so a long-lived group survives epoch wrap. */
	if ((int32_t)(epoch - m->epoch) > 0) {
		m->epoch = epoch;
		return true;
	}
	return false;
}

unsigned cs_member_fd_poll(struct cs_member_fd *m, cs_ns_t now)
{
	unsigned act = CS_MEMBER_NOTHING;

	if (now >= m->next_hb) {
		act |= CS_MEMBER_SEND_HB;
		m->next_hb = now + m->p.hb_interval;
	}
	if (!m->coord_lost && now - m->coord_heard >= m->p.fail_timeout) {
		m->coord_lost = true;
		act |= CS_MEMBER_COORD_LOST;
	}
	return act;
}

cs_ns_t cs_member_fd_deadline(const struct cs_member_fd *m)
{
	cs_ns_t d = m->next_hb;

	if (!m->coord_lost && m->coord_heard + m->p.fail_timeout < d)
		d = m->coord_heard + m->p.fail_timeout;
	return d;
}

int cs_hb_clock_add(struct cs_hb_clock *c, cs_ns_t t1, cs_ns_t t2, cs_ns_t t3,
		    cs_ns_t t4)
{
	unsigned i;

	if (t4 < t1 || t3 < t2 || t3 - t2 > t4 - t1) {
		c->rejected++;
		return -EINVAL;
	}
	i = c->next;
	c->next = (c->next + 1) % CS_HB_CLOCK_WIN;
	if (c->n < CS_HB_CLOCK_WIN)
		c->n++;
	/* halves first: no overflow whatever the offset's size */
	c->s[i].offset = (int64_t)(t2 - t1) / 2 + (int64_t)(t3 - t4) / 2;
	c->s[i].delay = (t4 - t1) - (t3 - t2);
	c->s[i].at = t4;
	c->samples++;
	return 0;
}

int cs_hb_clock_get(const struct cs_hb_clock *c, cs_ns_t now,
		    struct cs_hb_clock_est *e)
{
	unsigned best = 0;

	if (!c->n)
		return -EAGAIN;
	for (unsigned i = 1; i < c->n; i++)
		if (c->s[i].delay < c->s[best].delay)
			best = i;
	e->offset = c->s[best].offset;
	e->delay = c->s[best].delay;
	e->age = now > c->s[best].at ? now - c->s[best].at : 0;
	/* +1: the halving above may round each term down by 1 ns */
	e->bound = e->delay / 2 + 1 + e->age / 1000000 * CS_HB_CLOCK_DRIFT_PPM;
	e->samples = c->samples;
	return 0;
}
