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
	  "job token (never sent: HMAC challenge-response). Empty: "
	  "boot.token_file, else $COLLSTACK_JOB_TOKEN" },
	{ "boot.token_file", CS_CFG_STR, BC(token_file), "", CS_CFG_NO_BOUNDS,
	  "file holding the job token (first line; should be mode 600)" },
	{ "boot.timeout", CS_CFG_NS, BC(timeout), "30s", 1e8, 3.6e12,
	  "how long to wait for the coordinator and the address table" },
};

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

	return boot_addr(&d->conf.boot, ip, sizeof(ip), &port);
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

#if CS_HAVE_URING

enum { BS_WAIT = 0, BS_READY = 1, BS_FAILED = 2 };

struct cs_boot_state {
	struct cs_daemon *d;
	struct cs_coord_svc co;
	struct cs_member_svc ms;
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

static void snapshot(struct cs_boot_state *b)
{
	const struct cs_boot_member *m = &b->ms.m;

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

	if (ev & CS_MSVC_READY)
		snapshot(b);
	if (ev & CS_MSVC_VIEW) {
		snapshot(b);
		pthread_mutex_lock(&b->mu);
		for (unsigned i = 0; i < b->ms.nlost; i++) {
			uint32_t r = b->ms.lost[i];

			if (r < b->world)
				b->table[r].state = CS_MEMBER_LOST;
			CS_ERR("peer lost: rank %u (group epoch now %u); "
			       "in-flight operations fail with "
			       "CS_ERR_PEER_LOST",
			       r, b->ms.m.epoch);
			atomic_store(&v->lost_rank, (int)r);
			atomic_fetch_add(&v->nlost, 1);
		}
		b->epoch = b->ms.m.epoch;
		pthread_mutex_unlock(&b->mu);
		atomic_store_explicit(&v->epoch, b->ms.m.epoch,
				      memory_order_release);
		wake_ipc(v);
	}
	if ((ev & CS_MSVC_COORD_LOST) && !atomic_load(&v->coord_lost)) {
		CS_ERR("coordinator lost: no membership changes can be "
		       "detected or announced any more; operations between "
		       "live peers continue");
		atomic_store(&v->coord_lost, true);
	}
	if (ev & CS_MSVC_FAILED) { /* boot_svc.c logged why */
		atomic_store(&b->state, BS_FAILED);
	} else if ((ev & CS_MSVC_READY) && atomic_load(&b->state) == BS_WAIT) {
		atomic_store_explicit(&v->epoch, b->ms.m.epoch,
				      memory_order_release);
		atomic_store(&b->state, BS_READY);
	}
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
		if (b->member_on)
			on_events(b, cs_member_svc_poll(&b->ms, now,
							b->coord_on ? 0 : 5));
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

int cs_daemon_boot_start(struct cs_daemon *d)
{
	const struct cs_boot_conf *c = &d->conf.boot;
	char ip[CS_CFG_STR_MAX], tok[CS_CFG_STR_MAX];
	struct cs_node_addr self;
	struct cs_boot_state *b;
	cs_ns_t deadline;
	unsigned port;
	uint64_t seed;
	int ret;

	if (!boot_addr(c, ip, sizeof(ip), &port) || !port || port > 65535) {
		CS_ERR("boot.addr '%s': expected ip:port", c->addr);
		return -EINVAL;
	}
	ret = load_token(c, tok, sizeof(tok));
	if (ret)
		return ret;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->d = d;
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
	self_addr(d, &self);
	for (;;) {
		ret = cs_member_svc_join(&b->ms, ip, (uint16_t)port, tok,
					 (int32_t)d->conf.rank, &self, &c->mp,
					 seed, 1000, now_ns());
		if (!ret || now_ns() >= deadline)
			break;
		struct timespec ts = { 0, 200 * 1000 * 1000 };

		nanosleep(&ts, NULL); /* the coordinator may start later */
	}
	if (ret) {
		CS_ERR("bootstrap: coordinator %s:%u unreachable for %llu ms",
		       ip, port,
		       (unsigned long long)(c->timeout / CS_NS_PER_MS));
		return -ETIMEDOUT;
	}
	b->member_on = true;
	ret = pthread_create(&b->thr, NULL, boot_main, b);
	if (ret)
		return -ret;
	pthread_setname_np(b->thr, "cs-boot");
	b->thr_on = true;
	CS_INFO("bootstrap: joining %s:%u (asking for rank %u)%s", ip, port,
		d->conf.rank, b->coord_on ? ", coordinator here" : "");
	while (atomic_load(&b->state) == BS_WAIT && now_ns() < deadline &&
	       !cs_daemon_signalled(d)) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	switch (atomic_load(&b->state)) {
	case BS_FAILED:
		CS_ERR("bootstrap refused: %s", b->ms.m.error);
		return strstr(b->ms.m.error, "token") ? CS_ERR_AUTH
						      : -ECONNREFUSED;
	case BS_WAIT:
		if (cs_daemon_signalled(d))
			return -EINTR;
		CS_ERR("bootstrap: no address table from %s:%u within %llu "
		       "ms (is the whole group of boot.world started?)",
		       ip, port,
		       (unsigned long long)(c->timeout / CS_NS_PER_MS));
		return -ETIMEDOUT;
	default:
		break;
	}
	ret = cs_daemon_boot_apply_view(d, &b->applied_epoch, NULL, 0);
	if (ret)
		return ret;
	CS_INFO("bootstrap: rank %u of %u, epoch %u, %u peers from the "
		"coordinator",
		b->rank, b->world, b->epoch, d->drv.npeers);
	return 0;
}

void cs_daemon_boot_stop(struct cs_daemon *d)
{
	struct cs_boot_state *b = d->boot;

	if (!b)
		return;
	atomic_store(&b->stop, true);
	if (b->thr_on)
		pthread_join(b->thr, NULL);
	if (b->member_on)
		cs_member_svc_stop(&b->ms);
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
	*epoch = b->epoch;
	pthread_mutex_unlock(&b->mu);
	if (self < 0) {
		if (msg)
			snprintf(msg, mlen,
				 "err this node (rank %u) is not in "
				 "the group's view (epoch %u): it must rejoin",
				 b->rank, *epoch);
		return CS_ERR_PEER_LOST;
	}
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
		 d->boot ? "coordinator" : "static", atomic_load(&v->epoch),
		 atomic_load(&v->lost_rank), atomic_load(&v->nlost),
		 !d->boot		       ? "none"
		 : atomic_load(&v->coord_lost) ? "lost"
					       : "ok",
		 (unsigned long long)atomic_load(&v->rx_stale_epoch));
}
