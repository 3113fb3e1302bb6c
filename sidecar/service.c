/* SPDX-License-Identifier: MIT */
/*
 * collstackd's collective service: its configuration (transport, ring
 * collectives, early completion, packet authentication), the view the
 * peer table is built from, and the entry points the control socket
 * (collstack run) and the trainer IPC thread (daemon_ipc.c) call. Every
 * cross-node operation runs on the transport core (transport/tp.h)
 * through svc_core.c: sessions per peer that outlive operations, many
 * operations in flight; frames are tagged and checked here
 * (frame_auth.c) when auth.enable is on.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CS_LOG_MODULE "svc"
#include "internal/log.h"
#include "collectives/ring.h"
#include "control/auth.h"
#include "daemon.h"
#include "daemon_ipc.h"
#include "daemon_boot.h"
#include "frame_auth.h"
#include "svc_core.h"
#include "svc_ps_trainer.h"
#include "transport/tp.h"

struct svc_conf {
	struct cs_xport_params xp;
	struct cs_coll_cfg coll;
	struct cs_tp_params tp;
	struct cs_pst_cfg pst;
	char auth[CS_CFG_STR_MAX]; /* auth.enable: auto, 1 or 0 */
	char auth_mac[CS_CFG_STR_MAX]; /* auth.mac: auto, gmac or siphash */
	bool direct_early; /* coll.direct_early */
	bool burst_set; /* pacer.burst_bytes given: else AR_BURST_FRAMES */
	bool budget_set; /* tp.rx_budget given: else half the rx ring */
};

/* The pacer's burst unless pacer.burst_bytes is set: this many frames of
 * the port (cs_daemon_init()). */
#define AR_BURST_FRAMES 16u

/* Packet authentication (docs/auth.md). */
static const struct cs_cfg_entry auth_cfg[] = {
	{ "auth.enable", CS_CFG_STR, offsetof(struct svc_conf, auth), "auto",
	  CS_CFG_NO_BOUNDS,
	  "tag every frame (auth.mac) under per-epoch keys derived "
	  "from the job token (boot.token, boot.token_file, else "
	  "$COLLSTACK_JOB_TOKEN) and drop frames without a valid tag "
	  "(ar_stats rx_auth_fail). auto: on whenever a job token is set "
	  "(always with the bootstrap or etcd; scripts/cluster.sh sets one), "
	  "off with a warning when none is; 1: on, refuse to start without a "
	  "token; 0: off. Every sidecar of a job must agree" },
	{ "auth.mac", CS_CFG_STR, offsetof(struct svc_conf, auth_mac), "auto",
	  CS_CFG_NO_BOUNDS,
	  "the tag this sidecar sends: gmac (AES-256-GMAC from libcrypto, a "
	  "16-byte nonce per frame), siphash (SipHash-2-4-128 from "
	  "libsodium), or auto: gmac where the CPU has AES-NI and PCLMULQDQ, "
	  "else siphash. Frames say which they carry; every sidecar checks "
	  "both, so sidecars with other values work together (ar_stats "
	  "auth_mac)" },
};

enum auth_mode { AUTH_BAD = -1, AUTH_OFF, AUTH_ON, AUTH_AUTO };

/* auth.enable's value: auto, or a boolean as CS_CFG_BOOL takes it. */
static enum auth_mode auth_mode(const char *v)
{
	static const char *const on[] = { "1", "true", "yes", "on" };
	static const char *const off[] = { "0", "false", "no", "off" };

	if (!strcmp(v, "auto"))
		return AUTH_AUTO;
	for (size_t i = 0; i < CS_ARRAY_SIZE(on); i++) {
		if (!strcmp(v, on[i]))
			return AUTH_ON;
		if (!strcmp(v, off[i]))
			return AUTH_OFF;
	}
	return AUTH_BAD;
}

/* Trainer operations. */
static const struct cs_cfg_entry early_cfg[] = {
	{ "coll.direct_early", CS_CFG_BOOL,
	  offsetof(struct svc_conf, direct_early), "1", 0, 1,
	  "a direct exchange (allreduce up to coll.direct_max) completes "
	  "once its result is in, without waiting for the peers' ACKs of its "
	  "own frames: the transport core keeps resending them from the "
	  "engine's copy until they are acknowledged (tp.early; ar_stats "
	  "ops_early, tx_retx_early)" },
};

static_assert(sizeof(struct svc_conf) <=
		      sizeof(((struct cs_daemon_conf *)0)->svc),
	      "collective settings do not fit the daemon's config area");

struct cs_ar_svc {
	struct cs_daemon *d;
	struct svc_conf *cf;
	struct cs_core_svc *core;
	/* ctlplane: applying a view (the peer table) and building an op on
	 * it, control vs. IPC thread */
	pthread_mutex_t view_lock;
	uint32_t view_epoch; /* the view the peer table was built for */
	/* packet authentication (auth.enable): set before the lcores
	 * start, then lcore-only */
	bool auth;
	struct cs_frame_auth fa;
};

static struct svc_conf *svc_conf(struct cs_daemon_conf *c)
{
	return (struct svc_conf *)(void *)c->svc;
}

int cs_daemon_conf_defaults(struct cs_daemon_conf *c)
{
	struct svc_conf *sc = svc_conf(c);
	int ret;

	ret = cs_xport_params_default(&sc->xp);
	if (ret)
		return ret;
	/* On veths over shared CPUs queueing delay is scheduling noise, so
	 * the delay-based controller is off by default (cc.enable=1 turns
	 * it on); rel recovers what an overrun port drops. */
	ret = cs_xport_params_set(&sc->xp, "cc.enable", "0", NULL, 0);
	if (ret)
		return ret;
	/* A session gives up on its peer after this many timeouts without
	 * progress: 400 x rel.rto_max (10 ms) = 4 s, not the library's 64
	 * (0.6 s), which a sidecar descheduled on a loaded machine outlasts
	 * (netns udp_4 at load 19: "peer lost"); a dead node is found by
	 * membership (heartbeats) anyway, and a failed op is announced to
	 * the group (docs/transport-core.md). */
	ret = cs_xport_params_set(&sc->xp, "rel.max_timeouts", "400", NULL, 0);
	if (ret)
		return ret;
	/* Receiver credit (incast, docs/transport-core.md): senders keep
	 * within what this node grants; tp.rx_budget is sized from the
	 * port's receive ring in cs_daemon_init() unless given. A session
	 * starts with 32K before its receiver's first grant, so that a
	 * burst of new senders stays within a budget too. */
	ret = cs_xport_params_set(&sc->xp, "rel.credit", "1", NULL, 0);
	if (!ret)
		ret = cs_xport_params_set(&sc->xp, "rel.credit_init", "32K",
					  NULL, 0);
	if (ret)
		return ret;
	sc->budget_set = false;
	/* pacer.burst_bytes: AR_BURST_FRAMES frames of the port, set in
	 * cs_daemon_init() once the port is open, unless given. */
	sc->burst_set = false;
	ret = cs_cfg_defaults(cs_coll_cfg_table, cs_coll_cfg_table_len,
			      &sc->coll);
	if (ret)
		return ret;
	ret = cs_tp_params_default(&sc->tp);
	if (ret)
		return ret;
	/* a whole window of every ring session may arrive before this node
	 * posts its part (collstack run starts the nodes one by one);
	 * buffers are only allocated as the hold fills */
	sc->tp.hold_frames = 4096;
	ret = cs_cfg_defaults(early_cfg, CS_ARRAY_SIZE(early_cfg), sc);
	if (ret)
		return ret;
	ret = cs_cfg_defaults(cs_pst_cfg, cs_pst_cfg_len, &sc->pst);
	if (ret)
		return ret;
	return cs_cfg_defaults(auth_cfg, CS_ARRAY_SIZE(auth_cfg), sc);
}

int cs_daemon_set_key(struct cs_daemon_conf *c, const char *key,
		      const char *val, char *err, size_t errlen)
{
	struct svc_conf *sc = svc_conf(c);
	int ret;

	ret = cs_xport_params_set(&sc->xp, key, val, err, errlen);
	if (!ret && !strcmp(key, "pacer.burst_bytes"))
		sc->burst_set = true;
	if (ret != -ENOENT)
		return ret;
	ret = cs_cfg_set(cs_coll_cfg_table, cs_coll_cfg_table_len, &sc->coll,
			 key, val, err, errlen);
	if (ret != -ENOENT)
		return ret;
	ret = cs_cfg_set(cs_tp_cfg, cs_tp_cfg_len, &sc->tp, key, val, err,
			 errlen);
	if (!ret && !strcmp(key, "tp.rx_budget"))
		sc->budget_set = true;
	if (ret != -ENOENT)
		return ret;
	ret = cs_cfg_set(early_cfg, CS_ARRAY_SIZE(early_cfg), sc, key, val, err,
			 errlen);
	if (ret != -ENOENT)
		return ret;
	if (!strcmp(key, "ps.spill_dir") && val[0] != '/') {
		if (err)
			snprintf(err, errlen,
				 "ps.spill_dir: '%s' is not an absolute path",
				 val);
		return -EINVAL;
	}
	ret = cs_cfg_set(cs_pst_cfg, cs_pst_cfg_len, &sc->pst, key, val, err,
			 errlen);
	if (ret != -ENOENT)
		return ret;
	if (!strcmp(key, "auth.enable") && auth_mode(val) == AUTH_BAD) {
		if (err)
			snprintf(err, errlen,
				 "auth.enable: '%s' is not auto, 1 or 0", val);
		return -EINVAL;
	}
	if (!strcmp(key, "auth.mac") &&
	    cs_frame_auth_parse_mac(val, &(enum cs_auth_mac){ 0 })) {
		if (err)
			snprintf(err, errlen,
				 "auth.mac: '%s' is not auto, gmac or siphash",
				 val);
		return -EINVAL;
	}
	return cs_cfg_set(auth_cfg, CS_ARRAY_SIZE(auth_cfg), sc, key, val, err,
			  errlen);
}

void cs_daemon_help_config(FILE *out)
{
	fprintf(out, "\ntransport (reliability, pacing, congestion control; "
		     "collstackd sets cc.enable=0, rel.max_timeouts=400, "
		     "rel.credit=1, rel.credit_init=32K, and "
		     "pacer.burst_bytes to 16 frames of the port, e.g. 144K at "
		     "MTU 9000):\n");
	cs_xport_params_help(out);
	fprintf(out, "\nring collectives (coll.mtu_payload is capped by the "
		     "port's frames):\n");
	cs_cfg_help(cs_coll_cfg_table, cs_coll_cfg_table_len, out);
	cs_cfg_help(early_cfg, CS_ARRAY_SIZE(early_cfg), out);
	fprintf(out,
		"\ntransport core (collstackd sets tp.hold_frames=4096 and "
		"tp.rx_budget to half the port's receive ring, port.rx_desc / "
		"2 frames, e.g. 378K at MTU 1500):\n");
	cs_cfg_help(cs_tp_cfg, cs_tp_cfg_len, out);
	fprintf(out, "\nparameter-server tables of trainers (docs/ps.md):\n");
	cs_cfg_help(cs_pst_cfg, cs_pst_cfg_len, out);
	fprintf(out, "\npacket authentication (docs/auth.md):\n");
	cs_cfg_help(auth_cfg, CS_ARRAY_SIZE(auth_cfg), out);
}

/* ---- set-up ------------------------------------------------------------ */

int cs_daemon_init(struct cs_daemon *d)
{
	struct cs_ar_svc *s = calloc(1, sizeof(*s));
	enum auth_mode mode;
	int ret;

	if (!s)
		return -ENOMEM;
	s->d = d;
	s->cf = svc_conf(&d->conf);
	mode = auth_mode(s->cf->auth);
	if (mode == AUTH_OFF) {
		CS_INFO("packet authentication off (auth.enable=%s)",
			s->cf->auth);
	} else if (mode == AUTH_AUTO &&
		   !cs_daemon_boot_has_token(&d->conf.boot)) {
		/* static peers and no token: no key to be had */
		CS_WARN("packet authentication off: no job token to derive "
			"its keys from (set boot.token_file, boot.token or "
			"$COLLSTACK_JOB_TOKEN on every sidecar to turn it on; "
			"auth.enable=0 turns it off without this warning)");
		mode = AUTH_OFF;
	}
	if (mode != AUTH_OFF) {
		char token[CS_CFG_STR_MAX];

		/* the same token as the bootstrap's, static peers too */
		ret = cs_daemon_boot_load_token(&d->conf.boot, token,
						sizeof(token));
		if (ret) {
			CS_ERR("auth.enable=%s needs the job token (boot.token, "
			       "boot.token_file or $COLLSTACK_JOB_TOKEN); "
			       "auth.enable=0 turns packet authentication off",
			       s->cf->auth);
			free(s);
			return ret;
		}
		enum cs_auth_mac mac = CS_AUTH_SIPHASH;

		(void)cs_frame_auth_parse_mac(s->cf->auth_mac, &mac);
		cs_frame_auth_init(&s->fa, token, mac);
		explicit_bzero(token, sizeof(token));
		s->auth = true;
		CS_INFO("packet authentication on: tags under per-epoch keys "
			"from the job token (%s: auth.mac=%s, this CPU %s "
			"AES-NI and PCLMULQDQ)",
			cs_auth_mac_name(mac), s->cf->auth_mac,
			cs_auth_gmac_fast() ? "has" : "lacks");
	}
	if (!s->cf->burst_set) {
		/*
		 * The pacer's bucket is also the largest burst handed to
		 * the port at once. A kernel-backed port pays per burst
		 * (af_packet: one sendto()), so not 2 jumbo frames but 16
		 * (2 nodes, 64 MiB, MTU 9000: 0.88-1.02 GB/s with 18K,
		 * 1.15-1.18 with 144K); and no more than 16 frames of any
		 * size, or the receiving kernel drops them (MTU 1500 with
		 * 144K, i.e. 97 frames: 15057 retransmissions in four 64
		 * MiB allreduces, 456 with 24K). The simulator keeps the
		 * table's 18K (switch queues).
		 */
		s->cf->xp.pacer.burst_bytes =
			AR_BURST_FRAMES *
			(uint64_t)(d->port->frame_max +
				   s->cf->xp.pacer.frame_overhead);
		CS_INFO("pacer: bursts of up to %llu bytes (%u frames of "
			"%u bytes; pacer.burst_bytes sets it)",
			(unsigned long long)s->cf->xp.pacer.burst_bytes,
			AR_BURST_FRAMES, d->port->frame_max);
	}
	if (!s->cf->budget_set) {
		/*
		 * Receiver credit: all senders together may have half the
		 * port's receive ring in flight towards this node, so that
		 * an incast cannot overrun the ring (or a queue of that
		 * size in front of it) while this lcore is descheduled.
		 */
		s->cf->tp.rx_budget = (uint64_t)d->port->conf.rx_desc / 2 *
				      d->port->frame_max;
		CS_INFO("receiver credit: tp.rx_budget %llu bytes (%u frames "
			"of %u bytes, half of port.rx_desc; tp.rx_budget sets "
			"it)",
			(unsigned long long)s->cf->tp.rx_budget,
			d->port->conf.rx_desc / 2, d->port->frame_max);
	}
	pthread_mutex_init(&s->view_lock, NULL);
	/* the bootstrap applied the first view's table already */
	s->view_epoch = cs_daemon_boot_table_epoch(d);
	/* sets the driver's rx/tx to its own */
	s->cf->tp.early = s->cf->direct_early;
	ret = cs_core_svc_init(d, &s->cf->xp, &s->cf->coll, &s->cf->tp,
			       s->auth ? &s->fa : NULL, &s->core);
	if (ret) {
		pthread_mutex_destroy(&s->view_lock);
		cs_frame_auth_fini(&s->fa);
		free(s);
		return ret;
	}
	cs_core_svc_set_ps_cfg(s->core, &s->cf->pst);
	d->svc = s;
	return 0;
}

void cs_daemon_fini(struct cs_daemon *d)
{
	struct cs_ar_svc *s = d->svc;

	if (!s)
		return;
	/* the lcores are stopped */
	cs_core_svc_fini(s->core);
	pthread_mutex_destroy(&s->view_lock);
	cs_frame_auth_fini(&s->fa);
	free(s);
	d->svc = NULL;
}

/*
 * Take @m; on lcore 0 itself (ipc.on_lcore) never block on it: the
 * control thread may hold it while it waits for the lcore to go round.
 */
static void svc_lock(struct cs_ar_svc *s, pthread_mutex_t *m)
{
	if (!cs_lcore_is_self(&s->d->lcores[0])) {
		pthread_mutex_lock(m);
		return;
	}
	while (pthread_mutex_trylock(m))
		sched_yield();
}

/*
 * ctlplane: rebuild the ring from the alive members of the current view
 * if it moved since the peer table was built (the lcore stops using the
 * peer table meanwhile). view_lock held.
 */
static int apply_view(struct cs_ar_svc *s, char *msg, size_t mlen)
{
	struct cs_daemon *d = s->d;
	int ret;

	if (!d->boot || atomic_load(&d->view.epoch) == s->view_epoch)
		return 0;
	cs_core_svc_pause(s->core);
	ret = cs_daemon_boot_apply_view(d, &s->view_epoch, msg, mlen);
	cs_core_svc_resume(s->core, ret ? 0 : s->view_epoch);
	if (ret)
		return ret;
	if (d->drv.npeers < 2) {
		snprintf(msg, mlen,
			 "err fewer than 2 alive members "
			 "in the view (epoch %u)",
			 s->view_epoch);
		return -EINVAL;
	}
	return 0;
}

/* ar_stats' authentication fields beyond the core's: the tag code sent,
 * the GMAC sender keys derived and the frames that could not be tagged. */
static void auth_stats(struct cs_ar_svc *s, char *out, size_t len)
{
	struct cs_fa_counts n = { 0 };
	size_t l = strlen(out);

	if (s->auth)
		cs_frame_auth_counts(&s->fa, &n);
	snprintf(out + l, len > l ? len - l : 0,
		 " auth_mac=%s auth_skeys=%" PRIu64 " auth_tx_fail=%" PRIu64,
		 s->auth ? cs_auth_mac_name(s->fa.mac) : "off", n.skeys,
		 n.tx_fail);
}

int cs_daemon_ctl(struct cs_daemon *d, const char *req, const char *args,
		  char *out, size_t len)
{
	struct cs_ar_svc *s = d->svc;
	int ret;

	/* collstack run's prepare applies the view first */
	if (!strcmp(req, "ar_prepare")) {
		pthread_mutex_lock(&s->view_lock);
		ret = apply_view(s, out, len);
		pthread_mutex_unlock(&s->view_lock);
		if (ret)
			return 0;
	}
	ret = cs_core_svc_ctl(s->core, req, args, out, len);
	if (!ret && !strcmp(req, "ar_stats"))
		auth_stats(s, out, len);
	return ret;
}

void cs_daemon_tick(struct cs_daemon *d)
{
	(void)d;
}

/* ---- trainer operations (sidecar/daemon_ipc.c) ------------------------- */

/* The view @epoch applied (view_lock held); 0, -EAGAIN or an error. */
static int view_for(struct cs_ar_svc *s, uint32_t epoch, char *msg, size_t mlen)
{
	struct cs_daemon *d = s->d;
	int ret;

	/* ctlplane: never run an operation of one view on another's ring */
	if (atomic_load_explicit(&d->view.epoch, memory_order_acquire) !=
	    epoch) {
		snprintf(msg, mlen, "the view moved on from epoch %u", epoch);
		return -EAGAIN;
	}
	ret = apply_view(s, msg, mlen);
	if (ret)
		return ret;
	if (d->boot && s->view_epoch != epoch) {
		snprintf(msg, mlen, "the view moved on from epoch %u", epoch);
		return -EAGAIN;
	}
	return 0;
}

int cs_ar_svc_ring_pos(struct cs_ar_svc *s, uint32_t epoch, uint32_t *rank,
		       uint32_t *n, char *msg, size_t mlen)
{
	int ret;

	svc_lock(s, &s->view_lock);
	ret = view_for(s, epoch, msg, mlen);
	*rank = s->d->drv.rank;
	*n = s->d->drv.npeers;
	pthread_mutex_unlock(&s->view_lock);
	return ret;
}

int cs_ar_svc_start_coll(struct cs_ar_svc *s, const struct cs_ar_coll *c,
			 struct cs_ar_ext **h, char *msg, size_t mlen)
{
	struct cs_daemon *d = s->d;
	uint32_t n, rank;
	int ret;

	svc_lock(s, &s->view_lock);
	ret = view_for(s, c->epoch, msg, mlen);
	if (ret)
		goto out_unlock;
	if (!cs_dtype_size(c->dtype) || d->drv.npeers < 2) {
		snprintf(msg, mlen,
			 "bad type, or the peer table lists fewer "
			 "than 2 nodes");
		ret = -EINVAL;
		goto out_unlock;
	}
	n = d->drv.npeers;
	rank = d->drv.rank;
	if (c->nnodes) { /* a group over some nodes: its own ring */
		rank = UINT32_MAX;
		for (uint32_t i = 0; i < c->nnodes; i++) {
			if (c->nodes[i] >= n ||
			    (i && c->nodes[i] <= c->nodes[i - 1]))
				rank = UINT32_MAX - 1;
			else if (c->nodes[i] == d->drv.rank &&
				 rank == UINT32_MAX)
				rank = i;
		}
		if (rank >= c->nnodes || c->nnodes < 2 || !c->group) {
			snprintf(msg, mlen,
				 "bad node list (%u nodes) for a group over "
				 "some of the view's %u nodes",
				 c->nnodes, n);
			ret = -EINVAL;
			goto out_unlock;
		}
		n = c->nnodes;
	}
	if ((c->kind != CS_COLL_ALLREDUCE || c->alltoall) && c->rank != rank) {
		snprintf(msg, mlen,
			 "buffers laid out for ring index %u, this node "
			 "is %u",
			 c->rank, rank);
		ret = -EINVAL;
		goto out_unlock;
	}
	ret = cs_core_svc_start(s->core, c, n, rank, h, msg, mlen);
out_unlock:
	pthread_mutex_unlock(&s->view_lock);
	return ret;
}

int cs_ar_svc_ext_failed_node(struct cs_ar_svc *s, const struct cs_ar_ext *h)
{
	int peer = cs_core_svc_failed_peer(h);
	unsigned r;

	if (peer < 0 || peer >= (int)s->d->drv.npeers)
		return -1;
	if (!s->d->boot) /* static peers: ring index = node.rank */
		return peer;
	if (sscanf(s->d->drv.peers[peer].name, "rank%u", &r) != 1)
		return -1;
	return (int)r;
}

int cs_ar_svc_ext_times(const struct cs_ar_ext *h, cs_ns_t *picked,
			cs_ns_t *ready, cs_ns_t *done)
{
	return cs_core_svc_times(h, picked, ready, done);
}

void cs_ar_svc_set_notify_fd(struct cs_ar_svc *s, int fd)
{
	cs_core_svc_set_notify_fd(s->core, fd);
}

struct cs_core_svc *cs_ar_svc_core(struct cs_ar_svc *s)
{
	return s->core;
}

const struct cs_pst_cfg *cs_ar_svc_pst_cfg(struct cs_ar_svc *s)
{
	return &s->cf->pst;
}

void cs_ar_svc_flush(struct cs_ar_svc *s)
{
	cs_core_svc_flush(s->core);
}

bool cs_ar_svc_ext_unsettled(struct cs_ar_svc *s)
{
	return cs_core_svc_ext_unsettled(s->core);
}

int cs_ar_svc_refuse(struct cs_ar_svc *s, uint32_t op_id, uint32_t epoch,
		     int err)
{
	return cs_core_svc_refuse(s->core, op_id, epoch, err, 0, NULL, 0);
}

int cs_ar_svc_refuse_in(struct cs_ar_svc *s, uint32_t op_id, uint32_t epoch,
			int err, uint32_t group, const uint32_t *nodes,
			uint32_t nnodes)
{
	return cs_core_svc_refuse(s->core, op_id, epoch, err,
				  nnodes ? group : 0, nodes, nnodes);
}

void cs_ar_svc_stop_ext(struct cs_ar_svc *s)
{
	cs_core_svc_stop_ext(s->core);
}

void cs_ar_svc_ext_stop(struct cs_ar_svc *s, struct cs_ar_ext *h)
{
	cs_core_svc_ext_stop(s->core, h);
}

void cs_ar_svc_ext_put(struct cs_ar_svc *s, struct cs_ar_ext *h)
{
	cs_core_svc_ext_put(s->core, h);
}
