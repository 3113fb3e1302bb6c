/* SPDX-License-Identifier: MIT */
/* Bootstrap coordinator and member services over the io_uring TCP loop. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define CS_LOG_MODULE "boot"
#include "internal/log.h"

#include "control/boot_svc.h"

/* ---- coordinator ---- */

static void co_send(void *ctx, uint32_t conn, const struct cs_boot_msg *m)
{
	struct cs_coord_svc *s = ctx;

	if (cs_ctl_loop_send(s->loop, conn, m))
		cs_ctl_close(s->loop, conn);
}

static void co_close(void *ctx, uint32_t conn)
{
	cs_ctl_close(((struct cs_coord_svc *)ctx)->loop, conn);
}

static struct cs_coord_out co_out(struct cs_coord_svc *s)
{
	struct cs_coord_out o = { co_send, co_close, NULL, s };

	return o;
}

static cs_ns_t co_now; /* time of the current poll, for callbacks */

static void co_on_open(void *ctx, uint32_t conn)
{
	struct cs_coord_svc *s = ctx;
	struct cs_coord_out o = co_out(s);

	cs_coord_on_open(&s->c, conn, co_now, &o);
}

static void co_on_msg(void *ctx, uint32_t conn, const struct cs_boot_msg *m)
{
	struct cs_coord_svc *s = ctx;
	struct cs_coord_out o = co_out(s);

	cs_coord_on_msg(&s->c, conn, m, co_now, &o);
}

static void co_on_close(void *ctx, uint32_t conn)
{
	struct cs_coord_svc *s = ctx;
	struct cs_coord_out o = co_out(s);

	cs_coord_on_close(&s->c, conn, co_now, &o);
}

int cs_coord_svc_start(struct cs_coord_svc *s, const char *ip, uint16_t port,
		       const char *token, uint32_t world,
		       const struct cs_member_params *mp, uint64_t seed)
{
	struct cs_ctl_handler h = { co_on_open, co_on_msg, co_on_close, s };
	int err;

	memset(s, 0, sizeof(*s));
	err = cs_coord_init(&s->c, token, world, world * 2 + 8, mp, seed);
	if (err)
		return err;
	err = cs_ctl_loop_init(&s->loop, world * 2 + 8, &h);
	if (err)
		goto out_coord;
	s->port = port;
	err = cs_ctl_listen(s->loop, ip, &s->port);
	if (err)
		goto out_loop;
	CS_INFO("coordinator listening on %s:%u for %u members", ip, s->port,
		world);
	return 0;

out_loop:
	cs_ctl_loop_fini(s->loop);
out_coord:
	cs_coord_fini(&s->c);
	return err;
}

int cs_coord_svc_poll(struct cs_coord_svc *s, cs_ns_t now, int timeout_ms)
{
	struct cs_coord_out o = co_out(s);
	int n;

	co_now = now;
	n = cs_ctl_run(s->loop, timeout_ms);
	cs_coord_on_timer(&s->c, now, &o);
	return n;
}

void cs_coord_svc_stop(struct cs_coord_svc *s)
{
	cs_ctl_loop_fini(s->loop);
	cs_coord_fini(&s->c);
}

/* ---- member ---- */

static void me_on_msg(void *ctx, uint32_t conn, const struct cs_boot_msg *m)
{
	struct cs_member_svc *s = ctx;
	struct cs_boot_msg reply;
	unsigned nl = 0;
	int r;

	(void)conn;
	r = cs_boot_member_on_msg(&s->m, m, s->now, &reply, s->lost,
				  CS_BOOT_MAX_RANKS, &nl);
	if (r < 0) {
		CS_ERR("bootstrap failed: %s", s->m.error);
		s->events |= CS_MSVC_FAILED;
		cs_ctl_close(s->loop, s->conn);
		return;
	}
	if (r & CS_BOOT_M_REPLY)
		cs_ctl_loop_send(s->loop, s->conn, &reply);
	if (r & CS_BOOT_M_TABLE) {
		CS_INFO("joined as rank %u of %u (epoch %u)", s->m.rank,
			s->m.world, s->m.epoch);
		s->events |= CS_MSVC_READY;
	}
	if (r & CS_BOOT_M_VIEW) {
		s->nlost = nl;
		s->events |= CS_MSVC_VIEW;
	}
	if (r & CS_BOOT_M_DUMP)
		s->events |= CS_MSVC_DUMP;
}

static void me_on_close(void *ctx, uint32_t conn)
{
	struct cs_member_svc *s = ctx;

	(void)conn;
	s->connected = false;
	if (s->m.state == CS_BOOT_M_FAILED)
		return;
	CS_ERR("lost the connection to the coordinator");
	s->events |= CS_MSVC_COORD_LOST;
}

int cs_member_svc_join(struct cs_member_svc *s, const char *ip, uint16_t port,
		       const char *token, int32_t want_rank,
		       const struct cs_node_addr *self,
		       const struct cs_member_params *mp, uint64_t seed,
		       int timeout_ms, cs_ns_t now)
{
	struct cs_ctl_handler h = { NULL, me_on_msg, me_on_close, s };
	int err;

	memset(s, 0, sizeof(*s));
	err = cs_boot_member_init(&s->m, token, want_rank, self, mp, seed);
	if (err)
		return err;
	err = cs_ctl_loop_init(&s->loop, 1, &h);
	if (err)
		return err;
	s->now = now;
	err = cs_ctl_loop_connect(s->loop, ip, port, timeout_ms, &s->conn);
	if (err) {
		CS_ERR("cannot reach the coordinator at %s:%u: %s", ip, port,
		       strerror(-err));
		cs_ctl_loop_fini(s->loop);
		s->loop = NULL;
		return err;
	}
	s->connected = true;
	return 0;
}

unsigned cs_member_svc_poll(struct cs_member_svc *s, cs_ns_t now,
			    int timeout_ms)
{
	unsigned ev;

	s->now = now;
	if (s->loop)
		cs_ctl_run(s->loop, timeout_ms);
	if (s->connected) {
		struct cs_boot_msg hb;
		unsigned a = cs_boot_member_poll(&s->m, now, &hb);

		if (a & CS_BOOT_M_REPLY)
			cs_ctl_loop_send(s->loop, s->conn, &hb);
		if (a & CS_BOOT_M_COORD_LOST) {
			CS_ERR("coordinator silent for %llu ms: treating it as lost",
			       (unsigned long long)(s->m.mp.fail_timeout /
						    CS_NS_PER_MS));
			s->events |= CS_MSVC_COORD_LOST;
		}
	}
	ev = s->events;
	s->events = 0;
	return ev;
}

void cs_member_svc_stop(struct cs_member_svc *s)
{
	cs_ctl_loop_fini(s->loop);
	s->loop = NULL;
}

/* ---- the TCP coordinator as a rendezvous back-end ---- */

struct tcp_rdzv {
	struct cs_member_svc svc;
	char ip[64];
	uint16_t port;
	struct cs_member_params mp;
	bool joined;
};

static int tcp_create(void **impl, const char *where, uint32_t world,
		      const struct cs_member_params *mp, char *err,
		      size_t errlen)
{
	const char *colon = strrchr(where, ':');
	struct tcp_rdzv *t;
	long port;

	(void)world;
	port = colon ? strtol(colon + 1, NULL, 10) : 0;
	if (!colon || colon == where || (size_t)(colon - where) >= 64 ||
	    port <= 0 || port > 65535) {
		snprintf(err, errlen, "'%s': expected ip:port", where);
		return -EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	memcpy(t->ip, where, (size_t)(colon - where));
	t->port = (uint16_t)port;
	t->mp = *mp;
	*impl = t;
	return 0;
}

static int tcp_join(void *impl, const char *token, int32_t want_rank,
		    const struct cs_node_addr *self, int timeout_ms)
{
	struct tcp_rdzv *t = impl;
	uint64_t seed;
	int ret;

	randombytes_buf(&seed, sizeof(seed)); /* the member's nonces */
	ret = cs_member_svc_join(&t->svc, t->ip, t->port, token, want_rank,
				 self, &t->mp, seed, timeout_ms, 0);
	t->joined = !ret;
	return ret;
}

static unsigned tcp_poll(void *impl, cs_ns_t now, int timeout_ms)
{
	return cs_member_svc_poll(&((struct tcp_rdzv *)impl)->svc, now,
				  timeout_ms);
}

static void tcp_view(void *impl, struct cs_rdzv_view *v)
{
	struct cs_member_svc *s = &((struct tcp_rdzv *)impl)->svc;

	v->rank = s->m.rank;
	v->world = s->m.world;
	v->epoch = s->m.epoch;
	v->table = s->m.table;
	v->lost = s->lost;
	v->nlost = s->nlost;
	v->error = s->m.error;
	v->what = "coordinator";
	v->dump_origin = s->m.dump_origin;
	v->dump_id = s->m.dump_id;
}

static void tcp_leave(void *impl)
{
	struct tcp_rdzv *t = impl;

	if (t->joined)
		cs_member_svc_stop(&t->svc);
	free(t);
}

static int tcp_dump(void *impl, uint64_t id)
{
	struct cs_member_svc *s = &((struct tcp_rdzv *)impl)->svc;
	struct cs_boot_msg m;
	int err = s->connected ? cs_boot_member_dump(&s->m, id, &m) : -ENOTCONN;

	return err ? err : cs_ctl_loop_send(s->loop, s->conn, &m);
}

static int tcp_clock(void *impl, struct cs_hb_clock_est *e)
{
	return cs_boot_member_clock(&((struct tcp_rdzv *)impl)->svc.m, e);
}

const struct cs_rendezvous_ops cs_rendezvous_tcp = {
	.name = "tcp",
	.create = tcp_create,
	.join = tcp_join,
	.poll = tcp_poll,
	.view = tcp_view,
	.clock = tcp_clock,
	.dump = tcp_dump,
	.leave = tcp_leave,
};
