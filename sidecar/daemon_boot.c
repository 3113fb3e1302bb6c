/* SPDX-License-Identifier: MIT */
/*
 * collstackd's bootstrap: the coordinator and member services of
 * control/boot_svc.h on a thread of their own (the control thread blocks
 * while it serves long requests; heartbeats must not stop), the address
 * table installed as the driver's peers, and view changes (a lost rank, a
 * new epoch, a lost coordinator) published through struct cs_daemon_view.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cs_config.h"
#define CS_LOG_MODULE "boot"
#include "internal/log.h"
#include "collstack/types.h"
#if CS_HAVE_URING
#include "control/boot_svc.h"
#endif
#include "daemon.h"
#include "daemon_boot.h"

#define BC(f) offsetof(struct cs_boot_conf, f)

static const struct cs_cfg_entry boot_cfg[] = {
	{ "boot.coordinator", CS_CFG_BOOL, BC(coordinator), "0", 0, 1,
	  "this sidecar also runs the bootstrap coordinator (on boot.addr)" },
	{ "boot.addr", CS_CFG_STR, BC(addr), "", CS_CFG_NO_BOUNDS,
	  "coordinator ip:port; set: membership comes from the coordinator "
	  "instead of node.peers (node.rank is the rank asked for). Empty: "
	  "$MASTER_ADDR:$COLLSTACK_BOOT_PORT (default $MASTER_PORT+1) if "
	  "MASTER_ADDR is set, else static peers" },
	{ "boot.world", CS_CFG_U32, BC(world), "0", 0, 1024,
	  "members the coordinator waits for (boot.coordinator=1 only)" },
	{ "boot.token", CS_CFG_STR, BC(token), "", CS_CFG_NO_BOUNDS,
	  "job token (never sent: challenge-response). Empty: "
	  "boot.token_file, else $COLLSTACK_JOB_TOKEN" },
	{ "boot.token_file", CS_CFG_STR, BC(token_file), "", CS_CFG_NO_BOUNDS,
	  "file holding the job token (first line; should be mode 600)" },
	{ "boot.timeout", CS_CFG_NS, BC(timeout), "30s", 1e8, 3.6e12,
	  "how long to wait for the coordinator and the address table" },
	{ "node.rendezvous", CS_CFG_STR, BC(rendezvous), "tcp",
	  CS_CFG_NO_BOUNDS,
	  "where members meet: tcp (the bootstrap coordinator of boot.addr, "
	  "or static peers without one) or etcd://host:port/prefix (an etcd "
	  "v3 store: no coordinator; every sidecar needs boot.world and the "
	  "job token; docs/etcd.md)" },
};

static bool rdzv_etcd(const struct cs_boot_conf *b)
{
	return !strncmp(b->rendezvous, "etcd://", 7);
}

int cs_daemon_boot_conf_defaults(struct cs_boot_conf *b)
{
	int ret = cs_cfg_defaults(boot_cfg, CS_ARRAY_SIZE(boot_cfg), b);

	if (ret)
		return ret;
	return cs_cfg_defaults(cs_member_cfg, cs_member_cfg_len, &b->mp);
}

int cs_daemon_boot_set_key(struct cs_boot_conf *b, const char *key,
			   const char *val, char *err, size_t errlen)
{
	int ret = cs_cfg_set(boot_cfg, CS_ARRAY_SIZE(boot_cfg), b, key, val,
			     err, errlen);

	if (!ret && !strcmp(key, "node.rendezvous") &&
	    strcmp(b->rendezvous, "tcp") && !rdzv_etcd(b)) {
		snprintf(err, errlen,
			 "node.rendezvous: '%s': expected tcp or "
			 "etcd://host:port/prefix",
			 val);
		return -EINVAL;
	}
	if (ret != -ENOENT)
		return ret;
	return cs_cfg_set(cs_member_cfg, cs_member_cfg_len, &b->mp, key, val,
			  err, errlen);
}

void cs_daemon_boot_help(FILE *out)
{
	fprintf(out, "\nbootstrap (membership from the coordinator):\n");
	cs_cfg_help(boot_cfg, CS_ARRAY_SIZE(boot_cfg), out);
	fprintf(out, "\nfailure detection:\n");
	cs_cfg_help(cs_member_cfg, cs_member_cfg_len, out);
}

/* boot.addr, or the torchrun-style environment. */
static bool boot_addr(const struct cs_boot_conf *b, char *ip, size_t iplen,
		      unsigned *port)
{
	char tmp[CS_CFG_STR_MAX], *colon;
	const char *ma = getenv("MASTER_ADDR");

	if (b->addr[0]) {
		snprintf(tmp, sizeof(tmp), "%s", b->addr);
	} else if (ma && *ma) {
		const char *bp = getenv("COLLSTACK_BOOT_PORT");
		const char *mp = getenv("MASTER_PORT");

		/* torch's TCPStore holds MASTER_PORT itself */
		snprintf(tmp, sizeof(tmp), "%s:%u", ma,
			 bp   ? (unsigned)atoi(bp)
			 : mp ? (unsigned)atoi(mp) + 1
			      : 29501u);
	} else {
		return false;
	}
	colon = strrchr(tmp, ':');
	*port = 0;
	if (colon) {
		*colon = 0;
		*port = (unsigned)atoi(colon + 1);
	}
	snprintf(ip, iplen, "%s", tmp);
	return true;
}

bool cs_daemon_boot_enabled(const struct cs_daemon *d)
{
	char ip[CS_CFG_STR_MAX];
	unsigned port;

	return rdzv_etcd(&d->conf.boot) ||
	       boot_addr(&d->conf.boot, ip, sizeof(ip), &port);
}

static int load_token(const struct cs_boot_conf *b, char *tok, size_t len)
{
	const char *env = getenv("COLLSTACK_JOB_TOKEN");

	tok[0] = 0;
	if (b->token[0]) {
		snprintf(tok, len, "%s", b->token);
	} else if (b->token_file[0]) {
		struct stat st;
		FILE *f = fopen(b->token_file, "r");

		if (!f) {
			CS_ERR("boot.token_file %s: %s", b->token_file,
			       strerror(errno));
			return -errno;
		}
		if (!fstat(fileno(f), &st) && (st.st_mode & 077))
			CS_WARN("boot.token_file %s is readable by others "
				"(mode %03o): chmod 600 it",
				b->token_file, (unsigned)(st.st_mode & 0777));
		if (!fgets(tok, (int)len, f))
			tok[0] = 0;
		fclose(f);
		tok[strcspn(tok, "\r\n")] = 0;
	} else if (env) {
		snprintf(tok, len, "%s", env);
	}
	if (!tok[0]) {
		CS_ERR("no job token: set boot.token, boot.token_file or "
		       "COLLSTACK_JOB_TOKEN");
		return -EINVAL;
	}
	return 0;
}

int cs_daemon_boot_load_token(const struct cs_boot_conf *b, char *tok,
			      size_t len)
{
	return load_token(b, tok, len);
}

bool cs_daemon_boot_has_token(const struct cs_boot_conf *b)
{
	const char *env = getenv("COLLSTACK_JOB_TOKEN");

	return b->token[0] || b->token_file[0] || (env && env[0]);
}

#if CS_HAVE_URING

enum { BS_WAIT = 0, BS_READY = 1, BS_FAILED = 2 };

struct cs_boot_state {
	struct cs_daemon *d;
	struct cs_coord_svc co;
	/* the member's side: the TCP coordinator or etcd (control/rdzv.h) */
	const struct cs_rendezvous_ops *ops;
	void *impl;
	bool coord_on, member_on;
	pthread_t thr;
	bool thr_on;
	atomic_bool stop;
	atomic_int state;
	/* the view, guarded by mu: the boot thread writes, prepare reads */
	pthread_mutex_t mu;
	uint32_t rank, world, epoch;
	struct cs_node_addr table[CS_BOOT_MAX_RANKS];
	uint32_t applied_epoch; /* control thread's */
	cs_ns_t t_lost_seen; /* when the last VIEW arrived */
	char error[256]; /* why the join failed */
	/* the heartbeat clock estimate, guarded by mu (boot thread writes) */
	struct cs_hb_clock_est clk;
	int clk_err; /* -EAGAIN: none yet; -ENOTSUP: the back-end has none */
	cs_ns_t clk_taken; /* now_ns() when clk was taken */
	atomic_uint_fast64_t dump_req; /* a DUMP to send (0: none) */
};

static cs_ns_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * CS_NS_PER_S + (cs_ns_t)ts.tv_nsec;
}

/* The trainer IPC thread may sleep (daemon_ipc.c quiet()): a new view
 * must reach its operations now. */
static void wake_ipc(struct cs_daemon_view *v)
{
	int fd = atomic_load(&v->wake_fd);

	if (fd >= 0)
		(void)!write(fd, &(uint64_t){ 1 }, sizeof(uint64_t));
}

static void snapshot(struct cs_boot_state *b, const struct cs_rdzv_view *m)
{
	pthread_mutex_lock(&b->mu);
	b->rank = m->rank;
	b->world = m->world;
	if (m->epoch > b->epoch)
		b->epoch = m->epoch;
	memcpy(b->table, m->table, m->world * sizeof(b->table[0]));
	pthread_mutex_unlock(&b->mu);
}

static void on_events(struct cs_boot_state *b, unsigned ev)
{
	struct cs_daemon_view *v = &b->d->view;
	struct cs_rdzv_view m;

	b->ops->view(b->impl, &m);
	if (ev & CS_MSVC_READY)
		snapshot(b, &m);
	if (ev & CS_MSVC_VIEW) {
		uint32_t was = b->world;

		snapshot(b, &m);
		pthread_mutex_lock(&b->mu);
		/* elastic grow: members joined (their sessions start with
		 * the next operation on the new view) */
		for (uint32_t r = was; r < m.world; r++)
			CS_INFO("peer joined: rank %u (group epoch now %u, %u "
				"members)",
				r, m.epoch, m.world);
		for (unsigned i = 0; i < m.nlost; i++) {
			uint32_t r = m.lost[i];

			if (r < b->world)
				b->table[r].state = CS_MEMBER_LOST;
			CS_ERR("peer lost: rank %u (group epoch now %u); "
			       "in-flight operations fail with "
			       "CS_ERR_PEER_LOST",
			       r, m.epoch);
			atomic_store(&v->lost_rank, (int)r);
			atomic_fetch_add(&v->nlost, 1);
		}
		b->epoch = m.epoch;
		pthread_mutex_unlock(&b->mu);
		atomic_store_explicit(&v->epoch, m.epoch, memory_order_release);
		wake_ipc(v);
	}
	if (ev & CS_MSVC_DUMP) {
		atomic_store(&v->dump_origin, (int)m.dump_origin);
		atomic_store(&v->dump_id, m.dump_id);
	}
	if ((ev & CS_MSVC_COORD_LOST) && !atomic_load(&v->coord_lost)) {
		CS_ERR("%s lost: no membership changes can be detected or "
		       "announced any more; operations between live peers "
		       "continue",
		       m.what);
		atomic_store(&v->coord_lost, true);
	}
	if (ev & CS_MSVC_FAILED) { /* the back-end logged why */
		atomic_store(&b->state, BS_FAILED);
	} else if ((ev & CS_MSVC_READY) && atomic_load(&b->state) == BS_WAIT) {
		atomic_store_explicit(&v->epoch, m.epoch, memory_order_release);
		atomic_store(&b->state, BS_READY);
	}
}

/* Copy the back-end's heartbeat clock estimate for the control thread. */
static void keep_clock(struct cs_boot_state *b)
{
	struct cs_hb_clock_est e = { 0 };
	int err = b->ops->clock ? b->ops->clock(b->impl, &e) : -ENOTSUP;

	pthread_mutex_lock(&b->mu);
	b->clk = e;
	b->clk_err = err;
	b->clk_taken = now_ns();
	pthread_mutex_unlock(&b->mu);
}

static void send_dump(struct cs_boot_state *b)
{
	uint64_t id = atomic_exchange(&b->dump_req, 0);
	int err;

	if (!id)
		return;
	err = b->ops->dump ? b->ops->dump(b->impl, id) : -ENOTSUP;
	if (err)
		CS_WARN("cannot ask the other sidecars for their flight "
			"records (%s): only this one is written",
			err == -ENOTSUP ? "the rendezvous cannot relay it"
					: strerror(-err));
}

int cs_daemon_boot_request_dump(struct cs_daemon *d, uint64_t id)
{
	if (!d->boot)
		return -ENOTSUP;
	atomic_store(&d->boot->dump_req, id);
	return 0;
}

int cs_daemon_boot_clock(struct cs_daemon *d, struct cs_hb_clock_est *e)
{
	struct cs_boot_state *b = d->boot;
	cs_ns_t more;
	int err;

	if (!b)
		return -ENOTSUP;
	pthread_mutex_lock(&b->mu);
	*e = b->clk;
	err = b->clk_err;
	more = now_ns() - b->clk_taken;
	pthread_mutex_unlock(&b->mu);
	if (!b->clk_taken)
		return -EAGAIN;
	e->age += more;
	e->bound += more / 1000000 * CS_HB_CLOCK_DRIFT_PPM;
	return err;
}

static void *boot_main(void *arg)
{
	struct cs_boot_state *b = arg;
	/* Heartbeats must not starve behind busy lcores on shared CPUs:
	 * a higher CFS weight where allowed (never real-time: a bug here
	 * must not be able to take a CPU away from everything else). */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), -10))
		CS_INFO("boot thread: priority unchanged (%s)",
			strerror(errno));

	cs_ns_t last = now_ns(), vnow = last;
	const cs_ns_t step_max = b->d->conf.boot.mp.hb_interval;

	while (!atomic_load(&b->stop)) {
		cs_ns_t now = now_ns();

		/* The coordinator runs on a clock that does not advance by
		 * more than one heartbeat interval per loop: when this thread
		 * itself was off the CPU, members (its own in-process member
		 * first) are not to blame for the silence. */
		vnow += now - last < step_max ? now - last : step_max;
		last = now;
		if (b->coord_on)
			cs_coord_svc_poll(&b->co, vnow, 2);
		if (b->member_on) {
			on_events(b, b->ops->poll(b->impl, now,
						  b->coord_on ? 0 : 5));
			keep_clock(b);
			send_dump(b);
		}
		if (atomic_load(&b->state) == BS_FAILED && !b->coord_on)
			break;
	}
	return NULL;
}

static void self_addr(const struct cs_daemon *d, struct cs_node_addr *a)
{
	memset(a, 0, sizeof(*a));
	memcpy(a->mac, d->port->mac, 6);
	a->numa = (uint8_t)(d->port->numa < 0 ? 0 : d->port->numa);
	a->ip = ntohl(d->port->ip);
	a->udp_port = d->port->udp_port;
	a->queues = (uint16_t)d->drv.nq;
}

/* Join through the back-end until @deadline (it may start after us). */
static int rdzv_join(struct cs_boot_state *b, const char *where,
		     const char *tok, cs_ns_t deadline)
{
	struct cs_daemon *d = b->d;
	const struct cs_boot_conf *c = &d->conf.boot;
	struct cs_node_addr self;
	struct cs_rdzv_view m;
	int ret;

	ret = b->ops->create(&b->impl, where, c->world, &c->mp, b->error,
			     sizeof(b->error));
	if (ret) {
		CS_ERR("node.rendezvous %s: %s", where, b->error);
		return ret;
	}
	self_addr(d, &self);
	for (;;) {
		cs_ns_t now = now_ns();
		int left = (int)((deadline > now ? deadline - now : 0) /
				 CS_NS_PER_MS);

		ret = b->ops->join(b->impl, tok, (int32_t)d->conf.rank, &self,
				   b->ops == &cs_rendezvous_tcp ? 1000 : left);
		if (!ret || ret == CS_ERR_AUTH || ret == -EPERM ||
		    now_ns() >= deadline)
			break;
		struct timespec ts = { 0, 200 * 1000 * 1000 };

		nanosleep(&ts, NULL); /* the coordinator may start later */
	}
	b->ops->view(b->impl, &m);
	if (ret == CS_ERR_AUTH || ret == -EPERM) {
		CS_ERR("bootstrap refused by the %s %s: %s", m.what, where,
		       m.error);
		return ret;
	}
	if (ret) {
		CS_ERR("bootstrap: %s %s unreachable for %llu ms%s%s", m.what,
		       where, (unsigned long long)(c->timeout / CS_NS_PER_MS),
		       m.error[0] ? ": " : "", m.error);
		return -ETIMEDOUT;
	}
	return 0;
}

int cs_daemon_boot_start(struct cs_daemon *d)
{
	const struct cs_boot_conf *c = &d->conf.boot;
	char ip[CS_CFG_STR_MAX], tok[CS_CFG_STR_MAX], where[CS_CFG_STR_MAX + 8];
	struct cs_boot_state *b;
	struct cs_rdzv_view m;
	cs_ns_t deadline;
	unsigned port = 0;
	uint64_t seed;
	int ret;

	if (!rdzv_etcd(c) &&
	    (!boot_addr(c, ip, sizeof(ip), &port) || !port || port > 65535)) {
		CS_ERR("boot.addr '%s': expected ip:port", c->addr);
		return -EINVAL;
	}
	if (rdzv_etcd(c) && c->coordinator) {
		CS_ERR("boot.coordinator=1 and node.rendezvous=%s: with etcd "
		       "there is no coordinator",
		       c->rendezvous);
		return -EINVAL;
	}
	ret = load_token(c, tok, sizeof(tok));
	if (ret)
		return ret;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->d = d;
	b->ops = &cs_rendezvous_tcp;
	if (rdzv_etcd(c)) {
#if CS_HAVE_ETCD
		b->ops = &cs_rendezvous_etcd;
#else
		CS_ERR("node.rendezvous=%s, but collstackd was built without "
		       "the etcd back-end (jansson missing)",
		       c->rendezvous);
		free(b);
		return -ENOTSUP;
#endif
	}
	pthread_mutex_init(&b->mu, NULL);
	atomic_init(&b->stop, false);
	atomic_init(&b->state, BS_WAIT);
	d->boot = b;
	seed = (uint64_t)now_ns() ^ (uint64_t)getpid() << 32;
	deadline = now_ns() + c->timeout;
	if (c->coordinator) {
		if (!c->world) {
			CS_ERR("boot.coordinator=1 needs boot.world (members "
			       "expected)");
			return -EINVAL;
		}
		ret = cs_coord_svc_start(&b->co, ip, (uint16_t)port, tok,
					 c->world, &c->mp, seed + 1);
		if (ret) {
			CS_ERR("coordinator on %s:%u: %s", ip, port,
			       strerror(-ret));
			return ret;
		}
		b->coord_on = true;
	}
	if (rdzv_etcd(c))
		snprintf(where, sizeof(where), "%s", c->rendezvous);
	else
		snprintf(where, sizeof(where), "%s:%u", ip, port);
	ret = rdzv_join(b, where, tok, deadline);
	if (ret)
		return ret;
	b->member_on = true;
	ret = pthread_create(&b->thr, NULL, boot_main, b);
	if (ret)
		return -ret;
	pthread_setname_np(b->thr, "cs-boot");
	b->thr_on = true;
	CS_INFO("bootstrap: joining %s (asking for rank %u)%s", where,
		d->conf.rank, b->coord_on ? ", coordinator here" : "");
	while (atomic_load(&b->state) == BS_WAIT && now_ns() < deadline &&
	       !cs_daemon_signalled(d)) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	switch (atomic_load(&b->state)) {
	case BS_FAILED:
		b->ops->view(b->impl, &m);
		CS_ERR("bootstrap refused: %s", m.error);
		return strstr(m.error, "token") ? CS_ERR_AUTH : -ECONNREFUSED;
	case BS_WAIT:
		if (cs_daemon_signalled(d))
			return -EINTR;
		CS_ERR("bootstrap: no address table from %s within %llu "
		       "ms (is the whole group of boot.world started?)",
		       where, (unsigned long long)(c->timeout / CS_NS_PER_MS));
		return -ETIMEDOUT;
	default:
		break;
	}
	ret = cs_daemon_boot_apply_view(d, &b->applied_epoch, NULL, 0);
	if (ret)
		return ret;
	CS_INFO("bootstrap: rank %u of %u, epoch %u, %u peers from the %s",
		b->rank, b->world, b->epoch, d->drv.npeers,
		rdzv_etcd(c) ? "etcd store" : "coordinator");
	return 0;
}

uint32_t cs_daemon_boot_table_epoch(const struct cs_daemon *d)
{
	return d->boot ? d->boot->applied_epoch : 0;
}

void cs_daemon_boot_stop(struct cs_daemon *d)
{
	struct cs_boot_state *b = d->boot;

	if (!b)
		return;
	atomic_store(&b->stop, true);
	if (b->thr_on)
		pthread_join(b->thr, NULL);
	if (b->impl)
		b->ops->leave(b->impl);
	if (b->coord_on)
		cs_coord_svc_stop(&b->co);
	pthread_mutex_destroy(&b->mu);
	free(b);
	d->boot = NULL;
}

int cs_daemon_boot_apply_view(struct cs_daemon *d, uint32_t *epoch, char *msg,
			      size_t mlen)
{
	struct cs_boot_state *b = d->boot;
	unsigned n = 0;
	uint32_t ep;
	int self = -1;

	if (!b)
		return -EINVAL;
	pthread_mutex_lock(&b->mu);
	for (uint32_t r = 0; r < b->world && n < CS_DRV_MAX_PEERS; r++) {
		const struct cs_node_addr *a = &b->table[r];
		struct cs_peer *p = &d->drv.peers[n];

		if (a->state == CS_MEMBER_LOST)
			continue;
		if (r == b->rank)
			self = (int)n;
		memset(p, 0, sizeof(*p));
		p->ip = htonl(a->ip);
		p->port = a->udp_port;
		memcpy(p->mac, a->mac, 6);
		snprintf(p->name, sizeof(p->name), "rank%u", r);
		n++;
	}
	ep = b->epoch;
	pthread_mutex_unlock(&b->mu);
	/* Not applied: every later caller gets the same refusal (were the
	 * epoch taken, the next would find the view applied and run on the
	 * old peer table: the first caller, not collstack run, may be the
	 * one that met the refusal) */
	if (self < 0) {
		if (msg)
			snprintf(msg, mlen,
				 "err this node (rank %u) is not in "
				 "the group's view (epoch %u): it must rejoin",
				 b->rank, ep);
		return CS_ERR_PEER_LOST;
	}
	*epoch = ep;
	d->drv.npeers = n;
	d->drv.rank = (unsigned)self;
	d->conf.rank = b->rank;
	return 0;
}

#else /* no io_uring: no TCP coordinator */

struct cs_boot_state {
	int unused;
};

int cs_daemon_boot_start(struct cs_daemon *d)
{
	(void)d;
	CS_ERR("boot.addr set, but collstackd was built without io_uring "
	       "(the bootstrap coordinator needs it)");
	return -ENOTSUP;
}

void cs_daemon_boot_stop(struct cs_daemon *d)
{
	(void)d;
}

int cs_daemon_boot_apply_view(struct cs_daemon *d, uint32_t *epoch, char *msg,
			      size_t mlen)
{
	(void)d;
	(void)msg;
	(void)mlen;
	*epoch = 0;
	return -EINVAL;
}

int cs_daemon_boot_clock(struct cs_daemon *d, struct cs_hb_clock_est *e)
{
	(void)d, (void)e;
	return -ENOTSUP;
}

int cs_daemon_boot_request_dump(struct cs_daemon *d, uint64_t id)
{
	(void)d, (void)id;
	return -ENOTSUP;
}

uint32_t cs_daemon_boot_table_epoch(const struct cs_daemon *d)
{
	(void)d;
	return 0;
}

#endif

void cs_daemon_boot_report(struct cs_daemon *d, char *out, size_t len)
{
	size_t l = strlen(out);
	struct cs_daemon_view *v = &d->view;

	if (l >= len)
		return;
	snprintf(out + l, len - l,
		 " boot=%s epoch=%u lost=%d nlost=%u "
		 "coordinator=%s rx_stale_epoch=%llu",
		 !d->boot		    ? "static"
		 : rdzv_etcd(&d->conf.boot) ? "etcd"
					    : "coordinator",
		 atomic_load(&v->epoch), atomic_load(&v->lost_rank),
		 atomic_load(&v->nlost),
		 !d->boot		       ? "none"
		 : atomic_load(&v->coord_lost) ? "lost"
					       : "ok",
		 (unsigned long long)atomic_load(&v->rx_stale_epoch));
}
