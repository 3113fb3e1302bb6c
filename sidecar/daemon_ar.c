/* SPDX-License-Identifier: MIT */
/*
 * collstackd's collective service: real allreduces across the cluster over
 * the port, with the sans-IO engines — collectives/ring.h for the schedule
 * and the reduction, control/rel.h for reliability (one session per
 * (peer, channel), per peer for a direct exchange (sess_ch()), one
 * pacer/controller path per peer).
 *
 * The control thread builds an operation (buffers, engine, sessions: all
 * allocation happens here) on "ar_prepare", publishes it to the lcore with
 * one atomic pointer, lets it send on "ar_start", and on "ar_wait" waits
 * for it to finish and checks every element of the result against the
 * closed formula of tests/coll_sim/coll_data.h. Preparing every rank
 * before starting any means no packet ever arrives for an operation its
 * receiver does not know yet.
 *
 * The lcore (queue 0) runs the engines: frames of the current operation
 * go to the session of (src, channel) and, when delivered, into the
 * engine, which reduces the payload straight from the frame into the
 * buffer; frames of any other operation are dropped and counted before
 * they touch a session. Sending copies each payload once into the frame
 * (the ports that copy anyway — af_packet, af_xdp in copy mode, udp — gain
 * nothing from attaching), and a frame is stamped by its session only once
 * a buffer for it is in hand, so nothing stamped is ever lost locally.
 * The previous operation stays installed (still acknowledging
 * retransmissions) until the next one replaces it.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define CS_LOG_MODULE "ar"
#include "internal/log.h"
#include "collectives/ring.h"
#include "control/auth.h"
#include "control/rel.h"
#include "dataplane/wire.h"
#include "tests/coll_sim/coll_data.h"
#include "tests/sim/scen.h"
#include "daemon.h"
#include "daemon_ipc.h"
#include "svc_core.h"

#define AR_MAX_CH 16
#define AR_TXQ CS_PORT_BURST
/* Frames of a trainer operation this node has not started yet are held
 * (up to AR_HOLD of at most AR_HOLD_BYTES of payload) and fed to it once
 * it is installed, instead of waiting for the sender's RTO. */
#define AR_HOLD 256
#define AR_HOLD_BYTES 9000 /* a jumbo frame's payload */
#define AR_EXT_BIT 0x80000000u /* op ids of trainer operations */
/* Replaced trainer ops not freed yet (install_fast()); only when all are
 * still in the lcore's hands does an install wait for it. */
#define AR_RETIRED 8

struct ar_held {
	struct cs_pkt_hdr hdr;
	uint8_t data[AR_HOLD_BYTES];
};

struct svc_conf {
	struct cs_xport_params xp;
	struct cs_coll_cfg coll;
	bool auth; /* auth.enable */
	bool direct_early; /* coll.direct_early */
	bool burst_set; /* pacer.burst_bytes given: else AR_BURST_FRAMES */
	bool core; /* svc.core */
};

/* The pacer's burst unless pacer.burst_bytes is set: this many frames of
 * the port (cs_daemon_init()). */
#define AR_BURST_FRAMES 16u

/* Packet authentication (docs/auth.md). */
static const struct cs_cfg_entry auth_cfg[] = {
	{ "auth.enable", CS_CFG_BOOL, offsetof(struct svc_conf, auth), "0", 0,
	  1,
	  "tag every frame with SipHash-2-4-128 under a per-epoch key derived "
	  "from the job token (boot.token, boot.token_file, else "
	  "$COLLSTACK_JOB_TOKEN; needed with static peers too) and drop "
	  "frames without a valid tag (ar_stats rx_auth_fail)" },
};

/* Trainer operations. */
static const struct cs_cfg_entry early_cfg[] = {
	{ "coll.direct_early", CS_CFG_BOOL,
	  offsetof(struct svc_conf, direct_early), "1", 0, 1,
	  "a trainer's direct exchange (allreduce up to coll.direct_max) "
	  "completes once its result is in, without waiting for the peers' "
	  "ACKs of its own frames: it keeps resending them until the peers "
	  "acknowledge them or send data of their next operation, which "
	  "they start only once they hold all of this one's; its ACKs wait "
	  "up to max(rel.ack_delay, rel.rto_min / 2) to ride on that data" },
};

/* The service itself: this file's, or the transport core's. */
static const struct cs_cfg_entry core_cfg[] = {
	{ "svc.core", CS_CFG_BOOL, offsetof(struct svc_conf, core), "0", 0, 1,
	  "run every cross-node operation (collstack run's and trainers') "
	  "on the transport core (sidecar/svc_core.c, docs/transport-core.md):"
	  " sessions per peer that outlive operations; without zero copy, "
	  "packet authentication or early small ops yet" },
};

/* An epoch's packet key, ready for tags. */
struct ar_key {
	bool valid;
	uint32_t epoch;
	struct cs_auth_ctx ctx;
};

static_assert(sizeof(struct svc_conf) <=
		      sizeof(((struct cs_daemon_conf *)0)->svc),
	      "collective settings do not fit the daemon's config area");

struct ar_sess {
	struct cs_rel rel;
	uint32_t peer, ch;
};

enum { AR_PREPARED = 0, AR_DONE = 1, AR_FAILED = 2 };

/* Buffers of collstack run from this size are registered for zero copy. */
#define AR_ZC_MIN (1u << 20)

struct ar_op {
	uint32_t op_id, n, rank;
	uint32_t epoch; /* ctlplane: the group view it runs in */
	enum cs_dtype dtype;
	uint64_t seed;
	size_t count, bytes;
	uint8_t *buf;
	size_t buf_len; /* allocated (whole pages) */
	bool direct; /* a direct exchange: one frame per peer, ACKed at once */
	/* a trainer's direct exchange done at result-ready (coll.direct_early):
	 * it keeps resending its frames from the engine's copy (as cur, then
	 * as prev) until they are acknowledged, or implied (implied_ack()) */
	bool early;
	atomic_bool settled; /* early: every frame acknowledged, or failed */
	struct cs_port *zc_port; /* @buf registered with it (zero copy) */
	struct cs_coll *coll;
	/* one per peer: ring 2, direct exchange up to AR_MAX_CH */
	struct cs_path path[AR_MAX_CH];
	uint32_t path_peer[AR_MAX_CH], npaths;
	/* two per channel at most (op_build()): allocated to size, so that
	 * a small op does not clear room for 2 * AR_MAX_CH of them */
	struct ar_sess *sess;
	uint32_t sess_cap;
	uint32_t nsess, nch;
	struct ar_sess *snext[AR_MAX_CH];
	struct cs_coll_tx pend[AR_MAX_CH];
	bool has_pend[AR_MAX_CH];
	atomic_bool started;
	atomic_int state;
	bool ready;
	/* written by the lcore, read after state != AR_PREPARED */
	cs_ns_t t_start, t_ready, t_done;
	uint64_t frames, pure_acks, fillers, proto_err, failed_peer;
	/* trainer ops (cs_ar_svc_start_coll): the caller owns the buffer
	 * and learns the outcome through *notify (daemon_ipc.c) */
	atomic_int *notify;
	bool notified;
	bool replayed; /* lcore: held frames were fed */
};

/* Totals over freed ops (ar_stats), in its order: op_count(). */
enum {
	AR_TOT_OPS,
	AR_TOT_DATA_SENT,
	AR_TOT_RETX,
	AR_TOT_FAST_RETX,
	AR_TOT_TLP,
	AR_TOT_TIMEOUTS,
	AR_TOT_SPURIOUS,
	AR_TOT_DUP_RCVD,
	AR_TOT_N
};

struct cs_ar_svc {
	struct cs_daemon *d;
	struct svc_conf *cf;
	_Atomic(struct ar_op *) cur;
	/* the trainer op cur replaced: still acknowledges the peers'
	 * retransmissions (its last ACK may have been lost) */
	_Atomic(struct ar_op *) prev;
	/* an early op that stopped being prev with frames not yet
	 * acknowledged: it goes on resending (one at a time; a second one
	 * pushes it out, counted in early_dropped) */
	_Atomic(struct ar_op *) linger;
	struct ar_op *linger_ctl; /* what linger points to */
	atomic_uint_fast64_t early_dropped;
	/* the sessions of every freed op, summed (ar_stats): op_free() */
	atomic_uint_fast64_t tot[AR_TOT_N];
	atomic_uint_fast64_t gen; /* lcore polls, for retiring ops */
	int done_fd; /* eventfd the lcore writes when a control op ends */
	atomic_int notify_fd; /* eventfd the lcore writes after a trainer op's
			       * verdict (-1: none), so the IPC thread need not
			       * nap */
	struct ar_op *old; /* control thread's */
	pthread_mutex_t install_lock; /* control vs. IPC thread */
	/* ctlplane: applying a view (the peer table) and building an op on
	 * it, control vs. IPC thread */
	pthread_mutex_t view_lock;
	struct ar_op *prev_ctl; /* what prev points to */
	/* were prev, oldest first; each freed once the lcore has polled
	 * twice since it was replaced (gen), at a later install */
	struct {
		struct ar_op *op;
		uint_fast64_t gen;
	} retired[AR_RETIRED];
	unsigned nretired;
	/* lcore-only */
	struct cs_pbuf stash[AR_TXQ];
	unsigned nstash;
	struct cs_pbuf txq[AR_TXQ];
	unsigned ntxq;
	uint64_t rx_other_op, rx_no_sess, tx_retry;
	uint32_t view_epoch; /* ctlplane: view the peer table was built for */
	struct ar_held *hold;
	unsigned nhold;
	uint64_t rx_held, rx_replayed, rx_prev;
	/* early ops (coll.direct_early): done at result-ready, frames
	 * taken as delivered by implied_ack(), resent as prev or linger */
	uint64_t early_ops, tx_implied, prev_resent;
	/* RTT to each peer as the last finished operation measured it
	 * (written by the lcore, read when the next op's sessions start) */
	_Atomic cs_ns_t rtt_srtt[CS_DRV_MAX_PEERS];
	_Atomic cs_ns_t rtt_var[CS_DRV_MAX_PEERS];
	/* packet authentication (auth.enable): set before the lcores
	 * start, then lcore-only. key[0] follows the view's epoch, key[1]
	 * holds the last other epoch a frame carried. */
	bool auth;
	struct cs_core_svc *core; /* svc.core: everything goes there */
	char token[CS_CFG_STR_MAX];
	struct ar_key key[2];
	uint64_t rx_auth_fail, rx_auth_notag, auth_rekey;
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
	/* pacer.burst_bytes: AR_BURST_FRAMES frames of the port, set in
	 * cs_daemon_init() once the port is open, unless given. */
	sc->burst_set = false;
	ret = cs_cfg_defaults(cs_coll_cfg_table, cs_coll_cfg_table_len,
			      &sc->coll);
	if (ret)
		return ret;
	ret = cs_cfg_defaults(early_cfg, CS_ARRAY_SIZE(early_cfg), sc);
	if (ret)
		return ret;
	ret = cs_cfg_defaults(core_cfg, CS_ARRAY_SIZE(core_cfg), sc);
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
	ret = cs_cfg_set(early_cfg, CS_ARRAY_SIZE(early_cfg), sc, key, val, err,
			 errlen);
	if (ret != -ENOENT)
		return ret;
	ret = cs_cfg_set(core_cfg, CS_ARRAY_SIZE(core_cfg), sc, key, val, err,
			 errlen);
	if (ret != -ENOENT)
		return ret;
	return cs_cfg_set(auth_cfg, CS_ARRAY_SIZE(auth_cfg), sc, key, val, err,
			  errlen);
}

void cs_daemon_help_config(FILE *out)
{
	fprintf(out, "\ntransport (reliability, pacing, congestion control; "
		     "collstackd sets cc.enable=0, and pacer.burst_bytes to 16 "
		     "frames of the port, e.g. 144K at MTU 9000):\n");
	cs_xport_params_help(out);
	fprintf(out, "\nring collectives (coll.mtu_payload is capped by the "
		     "port's frames):\n");
	cs_cfg_help(cs_coll_cfg_table, cs_coll_cfg_table_len, out);
	cs_cfg_help(early_cfg, CS_ARRAY_SIZE(early_cfg), out);
	cs_cfg_help(core_cfg, CS_ARRAY_SIZE(core_cfg), out);
	fprintf(out, "\npacket authentication (docs/auth.md):\n");
	cs_cfg_help(auth_cfg, CS_ARRAY_SIZE(auth_cfg), out);
}

/* ---- lcore side --------------------------------------------------------- */

/*
 * The session of channel @ch's frames to or from @peer. A direct exchange
 * talks to each peer on one channel each way, but not the same one (rank
 * r sends to r+c+1 on channel c, and hears from it on channel n-2-c): one
 * session per peer for both, so that the ACK of a peer's frame rides on
 * this rank's own frame to it when that leaves later, instead of a frame
 * of its own through the kernel and the bridge.
 */
static uint32_t sess_ch(const struct ar_op *op, uint32_t ch)
{
	return op->direct ? 0 : ch;
}

static struct ar_sess *find_sess(struct ar_op *op, uint32_t peer, uint32_t ch)
{
	ch = sess_ch(op, ch);
	for (uint32_t i = 0; i < op->nsess; i++)
		if (op->sess[i].peer == peer && op->sess[i].ch == ch)
			return &op->sess[i];
	return NULL;
}

/* The ops before the current one: 0 prev, 1 linger (lcore). */
static struct ar_op *earlier(struct cs_ar_svc *s, unsigned b)
{
	return atomic_load_explicit(b ? &s->linger : &s->prev,
				    memory_order_acquire);
}

/*
 * Data of the current operation came from @peer: it started this op, so it
 * finished the one before, and a finished op holds everything its peers
 * sent it (its result is in; an early op is done no sooner). What prev
 * still has in flight to @peer has arrived: stop resending it.
 */
static void implied_ack(struct cs_ar_svc *s, uint32_t peer)
{
	for (unsigned b = 0; b < 2; b++) {
		struct ar_op *pv = earlier(s, b);

		/* only an early op finishes with frames in flight: this runs
		 * for every data frame, a 64 MiB op's too */
		if (!pv || !pv->early ||
		    atomic_load_explicit(&pv->settled, memory_order_relaxed))
			continue;
		for (uint32_t i = 0; i < pv->nsess; i++)
			if (pv->sess[i].peer == peer &&
			    cs_rel_in_flight(&pv->sess[i].rel))
				s->tx_implied +=
					cs_rel_ack_all(&pv->sess[i].rel);
	}
}

/* This node sends @peer data of the current op: that tells the peer what
 * an ACK of an early prev's frames would (implied_ack() there), so none is
 * owed. (A peer that is not early waits for the ACK itself.) */
static void ack_implied(struct cs_ar_svc *s, uint32_t peer)
{
	for (unsigned b = 0; b < 2; b++) {
		struct ar_op *pv = earlier(s, b);

		for (uint32_t i = 0; pv && pv->early && i < pv->nsess; i++)
			if (pv->sess[i].peer == peer &&
			    pv->sess[i].rel.ack_pending)
				cs_rel_ack_drop(&pv->sess[i].rel);
	}
}

/* Keep a frame of a trainer operation that may be about to start. */
static void hold(struct cs_ar_svc *s, const struct cs_pkt_hdr *h,
		 const uint8_t *payload)
{
	struct ar_held *k;

	if (!s->hold || s->nhold == AR_HOLD || !(h->op & AR_EXT_BIT) ||
	    h->group || h->len > AR_HOLD_BYTES ||
	    (h->type != CS_PKT_DATA && h->type != CS_PKT_ACK))
		return;
	k = &s->hold[s->nhold++];
	k->hdr = *h;
	if (h->len)
		memcpy(k->data, payload, h->len);
	s->rx_held++;
}

/* Feed the held frames of @op to it (once per op); drop the rest. */
static void replay(struct cs_ar_svc *s, struct ar_op *op, cs_ns_t now)
{
	if (op->replayed)
		return;
	op->replayed = true;
	for (unsigned i = 0; i < s->nhold; i++) {
		const struct cs_pkt_hdr *h = &s->hold[i].hdr;
		struct ar_sess *ss;
		int m;

		/* ctlplane: an op id of an older view's group is not ours */
		if (h->op != op->op_id || h->epoch != op->epoch)
			continue;
		ss = find_sess(op, h->src, h->channel);
		if (!ss)
			continue;
		m = cs_rel_on_packet(&ss->rel, h, now);
		if ((m & CS_REL_DELIVER) && h->type == CS_PKT_DATA && h->len &&
		    cs_coll_on_data(op->coll, now, h, s->hold[i].data) < 0)
			op->proto_err++;
		if (h->type == CS_PKT_DATA)
			implied_ack(s, h->src);
		s->rx_replayed++;
	}
	s->nhold = 0;
}

/*
 * A frame of the previous trainer op: let its session see it, so that a
 * retransmission is acknowledged again; never hand data to the engine
 * (its buffer may already hold the next op). Returns true if it was one.
 */
static bool ack_prev(struct cs_ar_svc *s, const struct cs_pkt_hdr *h,
		     cs_ns_t now)
{
	struct ar_op *pv = earlier(s, 0);
	struct ar_sess *ss;

	if (pv && h->op != pv->op_id)
		pv = earlier(s, 1);
	if (!pv || h->op != pv->op_id || h->group ||
	    (h->type != CS_PKT_DATA && h->type != CS_PKT_ACK))
		return false;
	ss = find_sess(pv, h->src, h->channel);
	if (ss)
		cs_rel_on_packet(&ss->rel, h, now);
	s->rx_prev++;
	return true;
}

/*
 * The packet key of @epoch (lcore only). Derived again only when the view
 * moves to a new epoch or a frame carries another one than the last:
 * never on the steady path, and never with a syscall or an allocation.
 */
static const struct cs_auth_ctx *auth_key(struct cs_ar_svc *s, uint32_t epoch)
{
	uint32_t cur =
		atomic_load_explicit(&s->d->view.epoch, memory_order_relaxed);
	struct ar_key *k = &s->key[epoch == cur ? 0 : 1];
	uint8_t key[CS_AUTH_KEY_LEN];

	if (unlikely(!k->valid || k->epoch != epoch)) {
		cs_auth_epoch_key(s->token, 0, epoch, key);
		cs_auth_ctx_init(&k->ctx, key);
		memset(key, 0, sizeof(key));
		k->epoch = epoch;
		k->valid = true;
		s->auth_rekey++;
	}
	return &k->ctx;
}

/*
 * The header as the tag covers it: CE is left out, since a switch may set
 * it on the way (the codec reports the IP header's CE mark in the flags).
 */
static const struct cs_pkt_hdr *auth_hdr(const struct cs_pkt_hdr *h,
					 struct cs_pkt_hdr *tmp)
{
	if (likely(!(h->flags & CS_PKT_F_CE)))
		return h;
	*tmp = *h;
	tmp->flags &= (uint16_t)~CS_PKT_F_CE;
	return tmp;
}

/* A received frame's tag is right (counts the ones that are not). */
static bool auth_ok(struct cs_ar_svc *s, const struct cs_pkt_hdr *h,
		    const void *payload)
{
	struct cs_pkt_hdr tmp;

	if (unlikely(!(h->flags & CS_PKT_F_AUTH))) {
		s->rx_auth_notag++;
		s->rx_auth_fail++;
		return false;
	}
	if (unlikely(cs_auth_ctx_check(auth_key(s, h->epoch), auth_hdr(h, &tmp),
				       payload))) {
		s->rx_auth_fail++;
		return false;
	}
	return true;
}

static void ar_rx(void *arg, unsigned q, struct cs_pbuf *v,
		  struct cs_wire_pkt *pk, unsigned n, cs_ns_t now)
{
	struct cs_ar_svc *s = arg;
	struct ar_op *op = atomic_load_explicit(&s->cur, memory_order_acquire);

	(void)v;
	if (q != 0) { /* sessions belong to queue 0's lcore */
		s->rx_other_op += n;
		return;
	}
	for (unsigned i = 0; i < n; i++) {
		const struct cs_pkt_hdr *h = &pk[i].hdr;
		struct ar_sess *ss;
		int m;

		/* ctlplane: frames of an older group epoch are dropped */
		if (unlikely((int32_t)(h->epoch -
				       atomic_load_explicit(
					       &s->d->view.epoch,
					       memory_order_relaxed)) < 0)) {
			atomic_store_explicit(
				&s->d->view.rx_stale_epoch,
				atomic_load_explicit(&s->d->view.rx_stale_epoch,
						     memory_order_relaxed) +
					1,
				memory_order_relaxed);
			continue;
		}
		/* auth.enable: nothing unauthenticated reaches a session,
		 * the hold or the engine */
		if (s->auth && !auth_ok(s, h, pk[i].payload))
			continue;
		if (!op || h->op != op->op_id || h->group ||
		    (h->type != CS_PKT_DATA && h->type != CS_PKT_ACK)) {
			if (ack_prev(s, h, now))
				continue;
			hold(s, h, pk[i].payload);
			s->rx_other_op++;
			continue;
		}
		ss = find_sess(op, h->src, h->channel);
		if (!ss) {
			s->rx_no_sess++;
			continue;
		}
		m = cs_rel_on_packet(&ss->rel, h, now);
		/* A finished or failed op never writes its buffer again: it
		 * may be a trainer's, released once the verdict is out
		 * (daemon_ipc.c). Done means every byte came in already. */
		if ((m & CS_REL_DELIVER) && h->type == CS_PKT_DATA && h->len &&
		    atomic_load_explicit(&op->state, memory_order_relaxed) ==
			    AR_PREPARED &&
		    cs_coll_on_data(op->coll, now, h, pk[i].payload) < 0)
			op->proto_err++;
		if (h->type == CS_PKT_DATA)
			implied_ack(s, h->src);
		/* the sender waits for this ACK to finish (an early op does
		 * not: the delayed ACK, or our next op's data, will do) */
		if (op->direct && !op->early)
			cs_rel_ack_at_once(&ss->rel);
	}
}

/* Send what is queued; returns true when everything went. */
static bool flush(struct cs_ar_svc *s)
{
	struct cs_port *p = s->d->port;
	unsigned sent;

	if (!s->ntxq)
		return true;
	sent = cs_port_tx_burst(p, 0, s->txq, s->ntxq);
	if (sent < s->ntxq) {
		memmove(s->txq, s->txq + sent,
			(s->ntxq - sent) * sizeof(s->txq[0]));
		s->tx_retry++;
	}
	s->ntxq -= sent;
	return s->ntxq == 0;
}

/* A buffer for the next frame, or NULL (then stop producing). */
static struct cs_pbuf *frame_buf(struct cs_ar_svc *s)
{
	if (s->ntxq == AR_TXQ && !flush(s))
		return NULL;
	if (!s->nstash) {
		s->nstash = cs_port_tx_alloc(s->d->port, 0, s->stash, AR_TXQ);
		if (!s->nstash)
			return NULL;
	}
	return &s->stash[s->nstash - 1];
}

/* Encode the frame in the buffer frame_buf() gave and queue it. */
static void frame_send(struct cs_ar_svc *s, struct ar_op *op, uint32_t peer,
		       struct cs_pkt_hdr *h, const void *payload, uint32_t len)
{
	struct cs_pbuf *b = &s->stash[s->nstash - 1];
	uint32_t off = CS_PROTO_FRAME_OVERHEAD;
	int flen;

	if (s->auth) { /* the tag goes between header and payload */
		off += CS_PROTO_TAG_LEN;
		h->flags |= CS_PKT_F_AUTH;
	}
	if (unlikely(off + len > b->cap)) {
		op->proto_err++;
		return;
	}
	h->len = len;
	flen = cs_drv_frame_hdr(&s->d->drv, b->data, b->cap, h, peer,
				s->d->port->udp_port);
	if (flen < 0) {
		op->proto_err++;
		return; /* the buffer stays in the stash */
	}
	/* The payload: referenced where the port can send registered
	 * memory as is (dpdk, port.zero_copy: a chained external mbuf the
	 * PMD reads at transmission), else copied after the header. */
	b->len = off;
	if (len && cs_port_attach(s->d->port, 0, b, (void *)payload, len)) {
		op->proto_err++;
		return;
	}
	if (s->auth) {
		struct cs_pkt_hdr tmp;

		/* over the header as sent (src, version set by the driver)
		 * and the payload; UDP carries no checksum, so the tag is
		 * written in place */
		cs_auth_ctx_tag(auth_key(s, h->epoch), auth_hdr(h, &tmp),
				payload, b->data + CS_PROTO_FRAME_OVERHEAD);
	}
	s->txq[s->ntxq++] = *b;
	s->nstash--;
	op->frames++;
}

/* The pure ACK @ss owes, if one is due and a buffer is in hand; true if
 * it was queued. It carries the op's view epoch, or the peer drops it as
 * stale. */
static bool pure_ack(struct cs_ar_svc *s, struct ar_op *op, struct ar_sess *ss,
		     cs_ns_t now)
{
	struct cs_pkt_hdr h;

	if (!cs_rel_ack_due(&ss->rel, now) || !frame_buf(s))
		return false;
	memset(&h, 0, sizeof(h));
	h.version = CS_PROTO_VERSION;
	h.channel = (uint16_t)ss->ch;
	h.op = op->op_id;
	h.epoch = op->epoch; /* ctlplane */
	cs_rel_build_ack(&ss->rel, &h, now);
	frame_send(s, op, ss->peer, &h, NULL, 0);
	return true;
}

/* Retransmissions @op's sessions want now, rebuilt from cookies. */
static unsigned resend(struct cs_ar_svc *s, struct ar_op *op, cs_ns_t now)
{
	struct cs_coll_tx tx;
	struct cs_pkt_hdr h;
	uint32_t seq, len;
	uint64_t cookie;
	unsigned work = 0;
	int ret;

	for (uint32_t i = 0; i < op->nsess; i++) {
		struct ar_sess *ss = &op->sess[i];

		while (!cs_rel_next_retx(&ss->rel, &seq, &cookie, &len)) {
			const void *pl;

			if (cs_rel_retx_time(&ss->rel, len, now) > now ||
			    !frame_buf(s))
				break;
			ret = cs_coll_rebuild(op->coll, cookie, &tx);
			if (ret == -ESTALE) {
				/* the receiver provably holds it: a
				 * zero-length filler keeps the seq */
				h = tx.hdr;
				pl = NULL;
				len = 0;
				op->fillers++;
			} else if (ret) {
				op->proto_err++;
				atomic_store(&op->state, AR_FAILED);
				return work;
			} else {
				h = tx.hdr;
				pl = tx.payload;
				len = tx.len;
			}
			h.len = len;
			if (cs_rel_stamp_retx(&ss->rel, &h, seq, now))
				continue;
			frame_send(s, op, ss->peer, &h, pl, len);
			work++;
		}
	}
	return work;
}

/* May @op still resend? A finished or failed op reads its buffer no more
 * (see ar_rx), except an early op (finished, not yet acknowledged): it
 * resends from the engine's own copy of its input. */
static bool may_resend(const struct ar_op *op)
{
	int st = atomic_load_explicit(&op->state, memory_order_relaxed);

	return st == AR_PREPARED || (op->early && st == AR_DONE);
}

static unsigned service(struct cs_ar_svc *s, struct ar_op *op, cs_ns_t now)
{
	struct cs_pkt_hdr h;
	unsigned work = 0;
	/* A finished or failed op sends no new data (see may_resend()). */
	bool live = atomic_load_explicit(&op->state, memory_order_relaxed) ==
		    AR_PREPARED;

	/* 1. retransmissions */
	if (may_resend(op))
		work += resend(s, op, now);
	/* 2. new data, per channel, once started */
	for (uint32_t c = 0;
	     live && atomic_load_explicit(&op->started, memory_order_relaxed) &&
	     c < op->nch;
	     c++) {
		struct ar_sess *ss = op->snext[c];
		struct cs_coll_tx *p = &op->pend[c];

		if (!ss)
			continue;
		for (;;) {
			if (!op->has_pend[c]) {
				if (!cs_coll_next_on(op->coll, now, c, p, 1))
					break;
				op->has_pend[c] = true;
			}
			if (cs_rel_tx_time(&ss->rel, p->len, now) > now ||
			    !frame_buf(s))
				break;
			h = p->hdr;
			if (cs_rel_stamp(&ss->rel, &h, p->cookie, p->len, now))
				break;
			frame_send(s, op, ss->peer, &h, p->payload, p->len);
			op->has_pend[c] = false;
			ack_implied(s, ss->peer);
			work++;
		}
	}
	/* 3. pure ACKs owed */
	for (uint32_t i = 0; i < op->nsess; i++) {
		struct ar_sess *ss = &op->sess[i];

		if (pure_ack(s, op, ss, now)) {
			op->pure_acks++;
			work++;
		}
		if (cs_rel_failed(&ss->rel) &&
		    atomic_load(&op->state) == AR_PREPARED) {
			op->failed_peer = ss->peer;
			atomic_store(&op->state, AR_FAILED);
		}
	}
	return work;
}

/* Done only once the peers' last packets are acknowledged too: the next
 * operation replaces this one, and frames of a replaced operation are no
 * longer acknowledged. */
static bool acks_owed(const struct ar_op *op)
{
	for (uint32_t i = 0; i < op->nsess; i++)
		if (op->sess[i].rel.ack_pending || op->sess[i].rel.ack_now)
			return true;
	return false;
}

/* Keep what @op learnt of the RTT to its peers for the next op. */
static void remember_rtt(struct cs_ar_svc *s, const struct ar_op *op)
{
	for (uint32_t i = 0; i < op->nsess; i++) {
		const struct cs_rel *r = &op->sess[i].rel;

		if (!cs_rel_stats(r)->rtt_samples ||
		    op->sess[i].peer >= CS_DRV_MAX_PEERS)
			continue;
		atomic_store_explicit(&s->rtt_srtt[op->sess[i].peer], r->srtt,
				      memory_order_relaxed);
		atomic_store_explicit(&s->rtt_var[op->sess[i].peer], r->rttvar,
				      memory_order_relaxed);
	}
}

/* A done early op whose frames are all acknowledged has nothing left to
 * resend: it need not linger (install_fast()), nor be kept
 * (cs_ar_svc_ext_unsettled()). Neither need one that failed, or that was
 * replaced (@replaced) before it was done (abandoned: cancelled). */
static void settle(struct ar_op *op, bool replaced)
{
	int st = atomic_load_explicit(&op->state, memory_order_relaxed);
	bool idle = true;

	if (!op->early ||
	    atomic_load_explicit(&op->settled, memory_order_relaxed) ||
	    (st == AR_PREPARED && !replaced))
		return;
	for (uint32_t i = 0; st == AR_DONE && idle && i < op->nsess; i++)
		idle = cs_rel_idle(&op->sess[i].rel);
	if (idle)
		atomic_store_explicit(&op->settled, true, memory_order_release);
}

/* The trainer ops before the current one (prev, linger): the pure ACKs
 * they owe, and (early ops) their timers and retransmissions. */
static unsigned prev_service(struct cs_ar_svc *s, cs_ns_t now)
{
	unsigned work = 0;

	for (unsigned b = 0; b < 2; b++) {
		struct ar_op *pv = earlier(s, b);
		unsigned n;

		if (!pv)
			continue;
		/* only a done early op: one replaced while running was
		 * abandoned, and its buffer may be gone */
		if (pv->early &&
		    atomic_load_explicit(&pv->state, memory_order_relaxed) ==
			    AR_DONE) {
			for (uint32_t i = 0; i < pv->nsess; i++)
				if (now >=
				    cs_rel_next_deadline(&pv->sess[i].rel))
					cs_rel_on_timer(&pv->sess[i].rel, now);
			n = resend(s, pv, now);
			s->prev_resent += n;
			work += n;
		}
		for (uint32_t i = 0; i < pv->nsess; i++)
			work += pure_ack(s, pv, &pv->sess[i], now);
		settle(pv, true);
	}
	return work;
}

/* Is @op complete? Its result is final and every frame was sent; and
 * acknowledged, unless it is early (then prev_service() resends). The
 * peers' last frames must be acknowledged too unless it is early: the next
 * op replaces this one, and a replaced op acknowledges only as prev. */
static bool op_complete(const struct ar_op *op)
{
	if (op->early)
		return op->ready && cs_coll_all_sent(op->coll);
	return cs_coll_done(op->coll) && !acks_owed(op);
}

static unsigned ar_tx(void *arg, unsigned q, cs_ns_t now)
{
	struct cs_ar_svc *s = arg;
	struct ar_op *op;
	unsigned work = 0;

	atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
	if (q != 0)
		return 0;
	op = atomic_load_explicit(&s->cur, memory_order_acquire);
	if (!flush(s) || !op)
		return s->ntxq;
	replay(s, op, now);
	for (uint32_t i = 0; i < op->nsess; i++)
		if (now >= cs_rel_next_deadline(&op->sess[i].rel))
			cs_rel_on_timer(&op->sess[i].rel, now);
	if (!op->t_start &&
	    atomic_load_explicit(&op->started, memory_order_acquire))
		op->t_start = now;
	work = service(s, op, now);
	work += prev_service(s, now);
	flush(s);
	if (!op->ready && cs_coll_result_ready(op->coll)) {
		op->ready = true;
		op->t_ready = now;
		/* Nothing more comes in: the peers' last frames need not wait
		 * for rel.ack_delay or rel.ack_every (their senders are not
		 * done before these ACKs are in). */
		for (uint32_t i = 0; !op->early && i < op->nsess; i++)
			cs_rel_ack_at_once(&op->sess[i].rel);
	}
	if (atomic_load_explicit(&op->state, memory_order_relaxed) ==
		    AR_PREPARED &&
	    op->t_start && op_complete(op)) {
		op->t_done = now;
		s->early_ops += op->early;
		remember_rtt(s, op);
		atomic_store_explicit(&op->state, AR_DONE,
				      memory_order_release);
	}
	if (!op->notify && !op->notified && s->done_fd >= 0 &&
	    atomic_load_explicit(&op->state, memory_order_relaxed) !=
		    AR_PREPARED) {
		uint64_t one = 1;

		/* the control thread sleeps in wait_op() until this */
		op->notified = true;
		(void)!write(s->done_fd, &one, sizeof(one));
	}
	if (op->notify && !op->notified &&
	    atomic_load_explicit(&op->state, memory_order_relaxed) !=
		    AR_PREPARED) {
		op->notified = true;
		/* failed: a session gave up on its peer, or a protocol
		 * error (failed_peer left at UINT64_MAX) */
		atomic_store_explicit(op->notify,
				      atomic_load(&op->state) == AR_DONE ? 1
				      : op->failed_peer != UINT64_MAX
					      ? CS_ERR_PEER_LOST
					      : CS_ERR_PROTO,
				      memory_order_release);
		int nfd = atomic_load_explicit(&s->notify_fd,
					       memory_order_relaxed);

		if (nfd >= 0) {
			uint64_t one = 1;

			/* EAGAIN: the counter is full, it is awake */
			(void)!write(nfd, &one, sizeof(one));
		}
	}
	settle(op, false);
	/* No made-up work while waiting: an adaptive lcore then sleeps
	 * (lcore.sleep, far below any RTO) and leaves the CPU to the other
	 * sidecars that share it. */
	return work;
}

/* ---- control side ------------------------------------------------------ */

static void sleep_us(unsigned us)
{
	struct timespec ts = { 0, (long)us * 1000 };

	nanosleep(&ts, NULL);
}

/* Adds @op's transport counters to the service's totals (ar_stats). */
static void op_count(struct cs_ar_svc *s, const struct ar_op *op)
{
	uint64_t add[AR_TOT_N] = { [AR_TOT_OPS] = 1 };

	for (uint32_t i = 0; i < op->nsess; i++) {
		const struct cs_rel_stats *rs = cs_rel_stats(&op->sess[i].rel);

		add[AR_TOT_DATA_SENT] += rs->data_sent;
		add[AR_TOT_RETX] += rs->retx;
		add[AR_TOT_FAST_RETX] += rs->fast_retx;
		add[AR_TOT_TLP] += rs->tlp;
		add[AR_TOT_TIMEOUTS] += rs->timeouts;
		add[AR_TOT_SPURIOUS] += rs->spurious_rto;
		add[AR_TOT_DUP_RCVD] += rs->dup_rcvd;
	}
	for (unsigned k = 0; k < AR_TOT_N; k++)
		atomic_fetch_add_explicit(&s->tot[k], add[k],
					  memory_order_relaxed);
}

/* Frees @op, whose sessions the lcore no longer runs, and counts them. */
static void op_free(struct cs_ar_svc *s, struct ar_op *op)
{
	if (!op)
		return;
	op_count(s, op);
	for (uint32_t i = 0; i < op->nsess; i++)
		cs_rel_fini(&op->sess[i].rel);
	free(op->sess);
	cs_coll_free(op->coll);
	/* Frames still queued may point into a registered buffer: the
	 * lcore flushes them on its next rounds. Never free it under them
	 * (after a second, leak it: the process is stuck anyway). */
	if (op->zc_port &&
	    cs_port_unreg_mem_wait(op->zc_port, op->buf, op->buf_len,
				   CS_NS_PER_S) == -EBUSY) {
		CS_WARN("op %#x: frames still point into its buffer; leaving "
			"%zu bytes allocated",
			op->op_id, op->buf_len);
		free(op);
		return;
	}
	free(op->buf);
	free(op);
}

/*
 * Take @m (view_lock, install_lock); returns whether the caller is lcore 0
 * itself (ipc.on_lcore). There, between two of its calls into ar_rx/ar_tx
 * (which load the ops afresh each time), nothing can hold an old op, so
 * nothing need wait for it to go round; and it never blocks on @m: the
 * control thread may hold it while it waits for the lcore to go round
 * (install()) or fills a buffer, so until it lets go the lcore counts
 * rounds as if it went round.
 */
static bool svc_lock(struct cs_ar_svc *s, pthread_mutex_t *m)
{
	if (!cs_lcore_is_self(&s->d->lcores[0])) {
		pthread_mutex_lock(m);
		return false;
	}
	while (pthread_mutex_trylock(m)) {
		atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
		sched_yield();
	}
	return true;
}

/* Swap the lcore's operation; free the old one once it is surely unused. */
static void install(struct cs_ar_svc *s, struct ar_op *op)
{
	uint_fast64_t g;
	bool self = svc_lock(s, &s->install_lock);

	if (self) /* no frame may point into a buffer about to go */
		flush(s);
	atomic_store_explicit(&s->cur, NULL, memory_order_release);
	atomic_store_explicit(&s->prev, NULL, memory_order_release);
	atomic_store_explicit(&s->linger, NULL, memory_order_release);
	g = atomic_load(&s->gen);
	cs_lcore_kick(&s->d->lcores[0]);
	/* Two polls later the lcore cannot hold the old pointer any more.
	 * Never free it before: if a stop signal comes first, leave it
	 * (the process is going away). */
	for (unsigned i = 0; !self && atomic_load(&s->gen) < g + 2; i++) {
		if (i % 1000 == 999 && cs_daemon_signalled(s->d)) {
			s->old = NULL;
			s->prev_ctl = NULL;
			s->linger_ctl = NULL;
			s->nretired = 0;
			break;
		}
		sleep_us(10);
		cs_lcore_kick(&s->d->lcores[0]);
	}
	op_free(s, s->prev_ctl);
	s->prev_ctl = NULL;
	op_free(s, s->linger_ctl);
	s->linger_ctl = NULL;
	op_free(s, s->old);
	for (unsigned i = 0; i < s->nretired; i++)
		op_free(s, s->retired[i].op);
	s->nretired = 0;
	s->old = op;
	atomic_store_explicit(&s->cur, op, memory_order_release);
	cs_lcore_kick(&s->d->lcores[0]);
	pthread_mutex_unlock(&s->install_lock);
}

/* Free the oldest retired op (install_fast()); with @wait, once the lcore
 * can no longer hold it, else only if it already cannot; @self: called on
 * the lcore (svc_lock()), which holds none. */
static bool free_retired(struct cs_ar_svc *s, bool wait, bool self)
{
	uint_fast64_t g = self ? 0 : s->retired[0].gen + 2;

	for (unsigned i = 0; wait && atomic_load(&s->gen) < g; i++) {
		if (i % 1000 == 999 && cs_daemon_signalled(s->d))
			break;
		cs_lcore_kick(&s->d->lcores[0]);
		sleep_us(10);
	}
	if (atomic_load(&s->gen) < g) {
		if (!wait)
			return false;
		s->retired[0].op = NULL; /* stopping: leave it */
	}
	op_free(s, s->retired[0].op);
	s->nretired--;
	memmove(&s->retired[0], &s->retired[1],
		s->nretired * sizeof(s->retired[0]));
	return true;
}

/* Hand @op to the retired list: freed once the lcore cannot hold it. */
static void retire(struct cs_ar_svc *s, struct ar_op *op)
{
	s->retired[s->nretired].op = op;
	s->retired[s->nretired].gen = atomic_load(&s->gen);
	s->nretired++;
}

/*
 * install() without the wait (trainer ops, one after the other): the op
 * that stops being prev is retired and freed at a later install, once the
 * lcore has gone round twice since (each lcore call loads the op once).
 * An install waits for the lcore only when AR_RETIRED ops are all still
 * that young: waiting for an idle lcore to wake and poll twice had cost
 * every small trainer op 25-90 us here.
 */
static void install_fast(struct cs_ar_svc *s, struct ar_op *op)
{
	bool self = svc_lock(s, &s->install_lock);
	struct ar_op *go = s->prev_ctl;

	if (self)
		flush(s);
	/* room for two: the op that stops being prev, and one lingering */
	while (s->nretired &&
	       free_retired(s, s->nretired > AR_RETIRED - 2, self))
		;
	/* The one that stops being prev goes, unless it is an early op
	 * with frames not yet acknowledged: the op that replaces it may not
	 * prove them delivered (a broadcast involves not every peer), so it
	 * lingers until they are, or until the next such op pushes it out
	 * (early_dropped). */
	if (s->linger_ctl &&
	    (atomic_load(&s->linger_ctl->settled) ||
	     (go && go->early && !atomic_load(&go->settled)))) {
		if (!atomic_load(&s->linger_ctl->settled))
			atomic_fetch_add(&s->early_dropped, 1);
		retire(s, s->linger_ctl);
		s->linger_ctl = NULL;
		atomic_store_explicit(&s->linger, NULL, memory_order_release);
	}
	if (go && go->early && !atomic_load(&go->settled) && !s->linger_ctl) {
		s->linger_ctl = go;
		atomic_store_explicit(&s->linger, go, memory_order_release);
		go = NULL;
	}
	/* the replaced op keeps acknowledging (and an early one resending) */
	atomic_store_explicit(&s->prev, s->old, memory_order_release);
	atomic_store_explicit(&s->cur, op, memory_order_release);
	if (go)
		retire(s, go);
	s->prev_ctl = s->old;
	s->old = op;
	cs_lcore_kick(&s->d->lcores[0]);
	pthread_mutex_unlock(&s->install_lock);
}

static void ar_acked(void *owner, uint64_t cookie, uint32_t len)
{
	struct ar_op *op = owner;

	(void)len;
	if (cs_coll_on_acked(op->coll, cookie))
		op->proto_err++;
}

static const struct cs_rel_ops ar_rel_ops = { .acked = ar_acked };

static uint32_t isn(uint32_t op_id, uint32_t from, uint32_t to, uint32_t ch)
{
	return (uint32_t)cs_td_hash(op_id, (uint64_t)from << 16 | to, ch);
}

/*
 * The window of a direct exchange's sessions: each carries one rank's
 * input to one peer, at most @op->bytes, so it never has more frames in
 * flight than that many bytes make at AR_MIN_PAYLOAD a frame. Both ends
 * derive the same power of two from the operation alone (it must match,
 * like rel.window), at least 64 (the SACK bitmap) and at most @cfg.
 * Small operations then allocate and clear a few KiB per session instead
 * of rel.window's metadata (24 KiB at 512): per operation, on the lcore
 * that launches it.
 */
#define AR_MIN_PAYLOAD 256
static uint32_t direct_window(const struct ar_op *op, uint32_t cfg)
{
	uint64_t frames = (op->bytes + AR_MIN_PAYLOAD - 1) / AR_MIN_PAYLOAD;
	uint32_t w = 64;

	while (w < cfg && w < frames)
		w *= 2;
	return w;
}

static int add_sess(struct cs_ar_svc *s, struct ar_op *op, uint32_t peer,
		    uint32_t ch, struct ar_sess **out)
{
	struct cs_path *path = NULL;
	struct cs_rel_params rp;
	struct ar_sess *ss;
	int ret;

	ch = sess_ch(op, ch); /* both ends seed the sequence numbers alike */
	ss = find_sess(op, peer, ch);

	if (!ss) {
		for (uint32_t i = 0; i < op->npaths; i++)
			if (op->path_peer[i] == peer)
				path = &op->path[i];
		if (!path) {
			if (op->npaths == AR_MAX_CH)
				return -EINVAL;
			path = &op->path[op->npaths];
			ret = cs_path_init(path, &s->cf->xp.pacer,
					   &s->cf->xp.cc);
			if (ret)
				return ret;
			op->path_peer[op->npaths++] = peer;
		}
		if (op->nsess == op->sess_cap)
			return -EINVAL;
		ss = &op->sess[op->nsess];
		rp = s->cf->xp.rel;
		/* An early op's peers do not wait for its ACKs: they may wait
		 * up to half the lowest RTO for the next op's data to carry
		 * them (ack_implied()), so that a loop of small ops sends no
		 * pure ACK at all. Both ends derive the same delay, which the
		 * sender's probe timer allows for. */
		if (op->early && rp.ack_delay < rp.rto_min / 2)
			rp.ack_delay = rp.rto_min / 2;
		if (op->direct)
			rp.window = direct_window(op, rp.window);
		ret = cs_rel_init(&ss->rel, &rp, path, &ar_rel_ops, op,
				  isn(op->op_id, op->rank, peer, ch),
				  isn(op->op_id, peer, op->rank, ch));
		if (ret)
			return ret;
		if (peer < CS_DRV_MAX_PEERS)
			cs_rel_seed_rtt(
				&ss->rel,
				atomic_load_explicit(&s->rtt_srtt[peer],
						     memory_order_relaxed),
				atomic_load_explicit(&s->rtt_var[peer],
						     memory_order_relaxed));
		ss->peer = peer;
		ss->ch = ch;
		op->nsess++;
	}
	if (out)
		*out = ss;
	return 0;
}

/*
 * The engine and the reliable sessions of @op (after its parameters are
 * set): clamps the payload to the port's frames and the channels to
 * AR_MAX_CH. On failure @msg says why; op_free() undoes what was done.
 */
static int op_build(struct cs_ar_svc *s, struct ar_op *op,
		    struct cs_coll_params *p, uint32_t frame_max, char *msg,
		    size_t mlen)
{
	int ret;

	if (s->auth) /* auth.enable: room for the tag */
		frame_max -= CS_PROTO_TAG_LEN;
	if (p->mtu_payload > frame_max - CS_PROTO_FRAME_OVERHEAD)
		p->mtu_payload = frame_max - CS_PROTO_FRAME_OVERHEAD;
	if (p->channels > AR_MAX_CH)
		p->channels = AR_MAX_CH;
	p->max_direct_peers = AR_MAX_CH; /* a channel per peer */
	op->direct = cs_coll_is_direct(p);
	op->early = op->direct && op->notify && s->cf->direct_early;
	ret = cs_coll_init(p, &op->coll);
	if (ret) {
		snprintf(msg, mlen, "engine refused the operation: %s",
			 cs_strerror(ret));
		return ret;
	}
	op->nch = cs_coll_channels(op->coll);
	op->sess_cap = 2 * op->nch;
	op->sess = calloc(op->sess_cap, sizeof(*op->sess));
	if (!op->sess) {
		snprintf(msg, mlen, "no memory for %u sessions", op->sess_cap);
		return -ENOMEM;
	}
	for (uint32_t c = 0; c < op->nch; c++) {
		int64_t nx, pv;

		cs_coll_chan_peers(op->coll, c, &nx, &pv);
		if (nx >= 0)
			ret = add_sess(s, op, (uint32_t)nx, c, &op->snext[c]);
		if (!ret && pv >= 0)
			ret = add_sess(s, op, (uint32_t)pv, c, NULL);
		if (ret) {
			snprintf(msg, mlen, "session set-up failed: %s",
				 cs_strerror(ret));
			return ret;
		}
	}
	return 0;
}

/*
 * ctlplane: rebuild the ring from the alive members of the current view
 * if it moved since the peer table was built (the lcore is quiesced
 * first: it reads the peer table). view_lock held.
 */
static int apply_view(struct cs_ar_svc *s, char *msg, size_t mlen)
{
	struct cs_daemon *d = s->d;
	int ret;

	if (!d->boot || atomic_load(&d->view.epoch) == s->view_epoch)
		return 0;
	if (s->core)
		cs_core_svc_pause(s->core);
	else
		install(s, NULL);
	ret = cs_daemon_boot_apply_view(d, &s->view_epoch, msg, mlen);
	if (s->core)
		cs_core_svc_resume(s->core);
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

static int prepare_locked(struct cs_ar_svc *s, uint32_t op_id, size_t bytes,
			  enum cs_dtype dt, uint64_t seed, char *msg,
			  size_t mlen)
{
	struct cs_daemon *d = s->d;
	size_t esz = cs_dtype_size(dt);
	struct cs_coll_params p;
	struct ar_op *op;
	int ret;

	ret = apply_view(s, msg, mlen);
	if (ret)
		return ret;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->op_id = op_id;
	op->n = d->drv.npeers;
	op->rank = d->drv.rank; /* ctlplane: ring index (= node.rank static) */
	op->epoch = atomic_load(&d->view.epoch);
	op->dtype = dt;
	op->seed = seed;
	op->bytes = bytes;
	op->count = bytes / esz;
	atomic_init(&op->started, false);
	atomic_init(&op->state, AR_PREPARED);
	op->buf_len = (bytes + 4095) / 4096 * 4096 + 4096;
	op->buf = aligned_alloc(4096, op->buf_len);
	if (!op->buf) {
		free(op);
		return -ENOMEM;
	}
	for (size_t i = 0; i < op->count; i++)
		cs_td_store(dt, op->buf, i,
			    cs_td_value(dt, CS_SUM, op->n, seed, op->rank, i));
	/* zero copy where the port can (its memory map changes: not for
	 * the small ops, whose copy costs less) */
	if (bytes >= AR_ZC_MIN &&
	    cs_port_reg_mem(d->port, op->buf, op->buf_len) == 0)
		op->zc_port = d->port;
	cs_coll_params_default(&p, &s->cf->coll);
	p.kind = CS_COLL_ALLREDUCE;
	p.nranks = op->n;
	p.rank = op->rank;
	p.sendbuf = op->buf;
	p.recvbuf = op->buf;
	p.count = op->count;
	p.dtype = dt;
	p.op = CS_SUM;
	p.op_id = op_id;
	p.epoch = op->epoch; /* ctlplane */
	ret = op_build(s, op, &p, d->port->frame_max, msg, mlen);
	if (ret)
		goto out_free;
	install(s, op);
	snprintf(msg, mlen,
		 "ok op=%u rank=%u n=%u count=%zu channels=%u "
		 "payload=%u",
		 op_id, op->rank, op->n, op->count, op->nch, p.mtu_payload);
	return 0;
out_free:
	op_free(s, op);
	return ret;
}

static int prepare(struct cs_ar_svc *s, uint32_t op_id, size_t bytes,
		   enum cs_dtype dt, uint64_t seed, char *msg, size_t mlen)
{
	struct cs_daemon *d = s->d;
	size_t esz = cs_dtype_size(dt);
	int ret;

	if (!esz || bytes % esz || d->drv.npeers < 2) {
		snprintf(msg, mlen,
			 "bytes must be a multiple of %zu and the "
			 "peer table must list 2+ nodes",
			 esz);
		return -EINVAL;
	}
	pthread_mutex_lock(&s->view_lock);
	ret = prepare_locked(s, op_id, bytes, dt, seed, msg, mlen);
	pthread_mutex_unlock(&s->view_lock);
	return ret;
}

static uint64_t verify(const struct ar_op *op, char *first, size_t flen)
{
	uint64_t wrong = 0;

	first[0] = 0;
	for (size_t i = 0; i < op->count; i++) {
		double want =
			cs_td_expect(op->dtype, CS_SUM, op->n, op->seed, i);
		double got = cs_td_load(op->dtype, op->buf, i);

		if (got != want && !wrong++)
			snprintf(first, flen, " first_wrong=%zu got=%g want=%g",
				 i, got, want);
	}
	return wrong;
}

/*
 * Sleep until the lcore reports an operation's end (done_fd), for at most
 * 10 ms so that a lost peer (view epoch) and a stop signal are still seen.
 * Polling the state every 100 us instead woke each sidecar's control
 * thread 10,000 times a second, on the CPUs the lcores needed.
 */
static void wait_done(struct cs_ar_svc *s, cs_ns_t deadline)
{
	cs_ns_t now = cs_lcore_now();
	struct pollfd p = { .fd = s->done_fd, .events = POLLIN };
	int ms = 10;
	uint64_t v;

	if (s->done_fd < 0) {
		sleep_us(100);
		return;
	}
	if (deadline > now && deadline - now < 10 * CS_NS_PER_MS)
		ms = (int)((deadline - now) / CS_NS_PER_MS) + 1;
	if (poll(&p, 1, ms) > 0)
		(void)!read(s->done_fd, &v, sizeof(v));
}

/* "ar_check OP": check every element of a finished operation. */
static void check_op(struct cs_ar_svc *s, uint32_t op_id, char *out, size_t len)
{
	struct ar_op *op = s->old;
	char first[128];
	uint64_t wrong;

	if (!op || op->op_id != op_id ||
	    atomic_load_explicit(&op->state, memory_order_acquire) != AR_DONE) {
		snprintf(out, len, "err no finished operation %u", op_id);
		return;
	}
	wrong = verify(op, first, sizeof(first));
	snprintf(out, len, "ok op=%u wrong=%llu%s", op_id,
		 (unsigned long long)wrong, first);
}

/* @check false ("ar_wait OP MS nocheck"): the reply has no wrong=; the
 * caller asks "ar_check OP" once every sidecar is done, so that no check
 * runs while another sidecar's operation still does. */
static void wait_op(struct cs_ar_svc *s, uint32_t op_id, unsigned ms,
		    bool check, char *out, size_t len)
{
	struct ar_op *op = s->old;
	char first[128];
	uint64_t wrong;
	int st = AR_PREPARED;

	if (!op || op->op_id != op_id) {
		snprintf(out, len, "err no operation %u", op_id);
		return;
	}
	/* A deadline on the clock: on a loaded machine each short sleep
	 * takes far longer than asked. */
	cs_ns_t deadline = cs_lcore_now() + (cs_ns_t)ms * CS_NS_PER_MS;

	for (unsigned t = 0;; t++) {
		st = atomic_load_explicit(&op->state, memory_order_acquire);
		if (st != AR_PREPARED || cs_lcore_now() >= deadline ||
		    (t % 100 == 0 && cs_daemon_signalled(s->d)))
			break;
		/* ctlplane: a peer was lost (the view moved on): fail now */
		if (atomic_load_explicit(&s->d->view.epoch,
					 memory_order_acquire) != op->epoch) {
			snprintf(out, len,
				 "err peer_lost rank=%d epoch=%u "
				 "op=%u (CS_ERR_PEER_LOST)",
				 atomic_load(&s->d->view.lost_rank),
				 atomic_load(&s->d->view.epoch), op_id);
			atomic_store(&op->state, AR_FAILED);
			return;
		}
		wait_done(s, deadline);
	}
	if (st == AR_PREPARED) {
		snprintf(out, len,
			 "err op %u timed out after %u ms "
			 "(ready=%d frames=%llu)",
			 op_id, ms, op->ready, (unsigned long long)op->frames);
		return;
	}
	if (st == AR_FAILED) {
		snprintf(out, len,
			 "err op %u failed: session to rank %llu "
			 "gave up (or a protocol error: %llu)",
			 op_id, (unsigned long long)op->failed_peer,
			 (unsigned long long)op->proto_err);
		return;
	}
	first[0] = 0;
	wrong = check ? verify(op, first, sizeof(first)) : 0;
	{
		struct cs_rel_stats tot = { 0 };
		/* 0: every peer's data was in before this node started (a
		 * prepared op receives) */
		cs_ns_t ready = op->t_ready > op->t_start
					? op->t_ready - op->t_start
					: 0;

		for (uint32_t i = 0; i < op->nsess; i++) {
			const struct cs_rel_stats *rs =
				cs_rel_stats(&op->sess[i].rel);

			tot.retx += rs->retx;
			tot.timeouts += rs->timeouts;
			tot.spurious_rto += rs->spurious_rto;
			tot.dup_rcvd += rs->dup_rcvd;
		}
		char w[40] = "";

		if (check)
			snprintf(w, sizeof(w), " wrong=%llu",
				 (unsigned long long)wrong);
		snprintf(out, len,
			 "ok op=%u ns=%llu ready_ns=%llu%s "
			 "frames=%llu retx=%llu timeouts=%llu spurious=%llu "
			 "dup=%llu fillers=%llu proto_err=%llu%s",
			 op_id, (unsigned long long)(op->t_done - op->t_start),
			 (unsigned long long)ready, w,
			 (unsigned long long)op->frames,
			 (unsigned long long)tot.retx,
			 (unsigned long long)tot.timeouts,
			 (unsigned long long)tot.spurious_rto,
			 (unsigned long long)tot.dup_rcvd,
			 (unsigned long long)op->fillers,
			 (unsigned long long)op->proto_err, first);
	}
}

int cs_daemon_init(struct cs_daemon *d)
{
	struct cs_ar_svc *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	s->d = d;
	s->cf = svc_conf(&d->conf);
	if (s->cf->auth) {
		/* the same token as the bootstrap's, static peers too */
		ret = cs_daemon_boot_load_token(&d->conf.boot, s->token,
						sizeof(s->token));
		if (ret) {
			CS_ERR("auth.enable=1 needs the job token (boot.token, "
			       "boot.token_file or $COLLSTACK_JOB_TOKEN)");
			free(s);
			return ret;
		}
		s->auth = true;
		CS_INFO("packet authentication on: tags under per-epoch keys "
			"from the job token (%s)",
			cs_auth_impl());
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
	atomic_init(&s->cur, NULL);
	atomic_init(&s->prev, NULL);
	atomic_init(&s->linger, NULL);
	atomic_init(&s->early_dropped, 0);
	for (unsigned k = 0; k < AR_TOT_N; k++)
		atomic_init(&s->tot[k], 0);
	atomic_init(&s->gen, 0);
	pthread_mutex_init(&s->install_lock, NULL);
	atomic_init(&s->notify_fd, -1);
	s->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->done_fd < 0)
		CS_WARN("no eventfd for ar_wait (%s): it polls every 100 us",
			strerror(errno));
	pthread_mutex_init(&s->view_lock, NULL);
	s->hold = calloc(AR_HOLD, sizeof(*s->hold)); /* NULL: no hold */
	d->svc = s;
	if (s->cf->core) {
		if (s->auth) {
			CS_ERR("svc.core=1 does not authenticate frames yet: "
			       "leave auth.enable off with it");
			d->svc = NULL;
			free(s->hold);
			free(s);
			return -EINVAL;
		}
		/* sets the driver's rx/tx to its own */
		return cs_core_svc_init(d, &s->cf->xp, &s->cf->coll, &s->core);
	}
	d->drv.rx_fn = ar_rx;
	d->drv.tx_fn = ar_tx;
	d->drv.fn_arg = s;
	return 0;
}

void cs_daemon_fini(struct cs_daemon *d)
{
	struct cs_ar_svc *s = d->svc;

	if (!s)
		return;
	/* the lcores are stopped: return what they held */
	cs_core_svc_fini(s->core);
	cs_port_release(d->port, 0, s->txq, s->ntxq);
	cs_port_release(d->port, 0, s->stash, s->nstash);
	op_free(s, s->old);
	for (unsigned i = 0; i < s->nretired; i++)
		op_free(s, s->retired[i].op);
	op_free(s, s->prev_ctl);
	op_free(s, s->linger_ctl);
	pthread_mutex_destroy(&s->install_lock);
	pthread_mutex_destroy(&s->view_lock);
	if (s->done_fd >= 0)
		close(s->done_fd);
	free(s->hold);
	explicit_bzero(s->token, sizeof(s->token));
	explicit_bzero(s->key, sizeof(s->key));
	free(s);
	d->svc = NULL;
}

/* Appends " ops_freed=.. data_sent=.. ... dup_rcvd=..": the totals over
 * freed ops (op_count()). */
static void ar_stats_totals(struct cs_ar_svc *s, char *out, size_t len)
{
	static const char *const names[AR_TOT_N] = {
		[AR_TOT_OPS] = "ops_freed",
		[AR_TOT_DATA_SENT] = "data_sent",
		[AR_TOT_RETX] = "retx",
		[AR_TOT_FAST_RETX] = "fast_retx",
		[AR_TOT_TLP] = "tlp",
		[AR_TOT_TIMEOUTS] = "timeouts",
		[AR_TOT_SPURIOUS] = "spurious",
		[AR_TOT_DUP_RCVD] = "dup_rcvd",
	};

	for (unsigned k = 0; k < AR_TOT_N; k++) {
		size_t l = strlen(out);

		if (l >= len)
			return;
		snprintf(out + l, len - l, " %s=%llu", names[k],
			 (unsigned long long)atomic_load(&s->tot[k]));
	}
}

/* Appends " auth=0|1 rx_auth_fail=.. rx_auth_notag=.. auth_rekey=..
 * last_op=.." (last_op: the operation installed last, -1 none). */
static void ar_stats_auth(struct cs_ar_svc *s, char *out, size_t len)
{
	size_t l = strlen(out);
	long long last = -1;

	if (l >= len)
		return;
	pthread_mutex_lock(&s->install_lock);
	if (s->old)
		last = s->old->op_id;
	pthread_mutex_unlock(&s->install_lock);
	snprintf(out + l, len - l,
		 " auth=%d rx_auth_fail=%llu rx_auth_notag=%llu "
		 "auth_rekey=%llu last_op=%lld auth_mac=%s",
		 s->auth, (unsigned long long)s->rx_auth_fail,
		 (unsigned long long)s->rx_auth_notag,
		 (unsigned long long)s->auth_rekey, last, cs_auth_impl());
}

int cs_daemon_ctl(struct cs_daemon *d, const char *req, const char *args,
		  char *out, size_t len)
{
	struct cs_ar_svc *s = d->svc;
	unsigned op_id, ms;
	unsigned long long bytes, seed;
	char dt[16];
	enum cs_dtype dtype;

	if (s->core) {
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
		if (ret != -ENOENT)
			return ret;
	}
	if (!strcmp(req, "ar_prepare")) {
		if (sscanf(args, "%u %llu %15s %llu", &op_id, &bytes, dt,
			   &seed) != 4 ||
		    cs_dtype_parse(dt, &dtype)) {
			snprintf(out, len,
				 "err usage: ar_prepare OP BYTES "
				 "DTYPE SEED");
			return 0;
		}
		if (prepare(s, op_id, (size_t)bytes, dtype, seed, out, len) &&
		    strncmp(out, "err", 3)) {
			char m[256];

			snprintf(m, sizeof(m), "%s", out);
			snprintf(out, len, "err %s", m);
		}
		return 0;
	}
	if (!strcmp(req, "ar_start")) {
		if (sscanf(args, "%u", &op_id) != 1 || !s->old ||
		    s->old->op_id != op_id) {
			snprintf(out, len, "err no prepared operation %s",
				 args);
			return 0;
		}
		atomic_store_explicit(&s->old->started, true,
				      memory_order_release);
		cs_lcore_kick(&d->lcores[0]);
		snprintf(out, len, "ok");
		return 0;
	}
	if (!strcmp(req, "ar_wait")) {
		char flag[16] = "";
		int nf = sscanf(args, "%u %u %15s", &op_id, &ms, flag);

		if (nf < 2 || (nf == 3 && strcmp(flag, "nocheck"))) {
			snprintf(out, len,
				 "err usage: ar_wait OP MS [nocheck]");
			return 0;
		}
		wait_op(s, op_id, ms, nf < 3, out, len);
		return 0;
	}
	if (!strcmp(req, "ar_check")) {
		if (sscanf(args, "%u", &op_id) != 1) {
			snprintf(out, len, "err usage: ar_check OP");
			return 0;
		}
		check_op(s, op_id, out, len);
		return 0;
	}
	if (!strcmp(req, "ar_stats")) {
		snprintf(out, len,
			 "ok rx_other_op=%llu rx_no_sess=%llu "
			 "tx_retry=%llu rx_stale_epoch=%llu rx_held=%llu "
			 "rx_replayed=%llu rx_prev=%llu early_ops=%llu "
			 "tx_implied=%llu prev_resent=%llu early_dropped=%llu",
			 (unsigned long long)s->rx_other_op,
			 (unsigned long long)s->rx_no_sess,
			 (unsigned long long)s->tx_retry,
			 (unsigned long long)atomic_load(
				 &d->view.rx_stale_epoch),
			 (unsigned long long)s->rx_held,
			 (unsigned long long)s->rx_replayed,
			 (unsigned long long)s->rx_prev,
			 (unsigned long long)s->early_ops,
			 (unsigned long long)s->tx_implied,
			 (unsigned long long)s->prev_resent,
			 (unsigned long long)atomic_load(&s->early_dropped));
		ar_stats_totals(s, out, len);
		ar_stats_auth(s, out, len);
		return 0;
	}
	return -ENOENT;
}

void cs_daemon_tick(struct cs_daemon *d)
{
	(void)d;
}

/* ---- trainer operations (sidecar/daemon_ipc.c) --------------------------- */

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

/*
 * Like prepare(), but on the caller's buffers, with the caller's
 * operation id, kind and reduction, started at once and reported through
 * @notify. Kept apart from prepare() (which fills and checks test data)
 * so the two services can change independently. As prepare(), it runs on
 * the ring of the current view (applied first if it moved: the lcore is
 * quiesced for that) and stamps the view's epoch on the engine and on
 * every ACK.
 */
int cs_ar_svc_start_coll(struct cs_ar_svc *s, const struct cs_ar_coll *c,
			 char *msg, size_t mlen)
{
	struct cs_daemon *d = s->d;
	struct cs_coll_params p;
	struct ar_op *op;
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
	if (c->kind != CS_COLL_ALLREDUCE && c->rank != d->drv.rank) {
		snprintf(msg, mlen,
			 "buffers laid out for ring index %u, this node "
			 "is %u",
			 c->rank, d->drv.rank);
		ret = -EINVAL;
		goto out_unlock;
	}
	if (s->core) {
		ret = cs_core_svc_start(s->core, c, d->drv.npeers, d->drv.rank,
					msg, mlen);
		goto out_unlock;
	}
	op = calloc(1, sizeof(*op));
	if (!op) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	op->op_id = c->op_id;
	op->n = d->drv.npeers;
	op->rank = d->drv.rank; /* ctlplane: ring index (= node.rank static) */
	op->epoch = c->epoch; /* 0: static peers */
	op->dtype = c->dtype;
	op->count = c->count;
	op->bytes = c->count * cs_dtype_size(c->dtype);
	op->notify = c->notify;
	op->failed_peer = UINT64_MAX; /* none: set when a session gives up */
	atomic_init(&op->started, true);
	atomic_init(&op->state, AR_PREPARED);
	cs_coll_params_default(&p, &s->cf->coll);
	p.kind = c->kind;
	p.nranks = op->n;
	p.rank = op->rank;
	p.root = c->root;
	p.sendbuf = c->sendbuf ? c->sendbuf : c->recvbuf;
	p.recvbuf = c->recvbuf;
	p.count = c->count;
	p.dtype = c->dtype;
	p.op = c->redop;
	p.op_id = c->op_id;
	p.epoch = op->epoch; /* ctlplane */
	ret = op_build(s, op, &p, d->port->frame_max, msg, mlen);
	if (ret)
		goto out_free;
	install_fast(s, op);
	pthread_mutex_unlock(&s->view_lock);
	return 0;
out_free:
	op_free(s, op);
out_unlock:
	pthread_mutex_unlock(&s->view_lock);
	return ret;
}

int cs_ar_svc_ext_failed_node(struct cs_ar_svc *s)
{
	struct ar_op *op = s->old;
	int64_t peer;
	unsigned r;

	if (s->core)
		peer = cs_core_svc_failed_peer(s->core);
	else if (!op || !op->notify || atomic_load(&op->state) != AR_FAILED)
		return -1;
	else
		peer = (int64_t)op->failed_peer;
	if (peer < 0 || peer >= s->d->drv.npeers)
		return -1;
	if (!s->d->boot) /* static peers: ring index = node.rank */
		return (int)peer;
	if (sscanf(s->d->drv.peers[peer].name, "rank%u", &r) != 1)
		return -1;
	return (int)r;
}

int cs_ar_svc_ext_times(struct cs_ar_svc *s, cs_ns_t *picked, cs_ns_t *ready,
			cs_ns_t *done)
{
	struct ar_op *op = s->old;

	if (s->core)
		return cs_core_svc_times(s->core, picked, ready, done);
	/* written by the lcore before it stored the verdict, which the
	 * caller has seen */
	if (!op || !op->notify)
		return -ENOENT;
	*picked = op->t_start;
	*ready = op->t_ready;
	*done = op->t_done;
	return 0;
}

void cs_ar_svc_set_notify_fd(struct cs_ar_svc *s, int fd)
{
	if (s->core)
		cs_core_svc_set_notify_fd(s->core, fd);
	atomic_store(&s->notify_fd, fd);
}

void cs_ar_svc_flush(struct cs_ar_svc *s)
{
	if (s->core)
		cs_core_svc_flush(s->core);
	else if (cs_lcore_is_self(&s->d->lcores[0]))
		flush(s);
}

bool cs_ar_svc_ext_unsettled(struct cs_ar_svc *s)
{
	const struct ar_op *ops[] = { s->old, s->prev_ctl, s->linger_ctl };

	for (unsigned i = 0; i < CS_ARRAY_SIZE(ops); i++)
		if (ops[i] && ops[i]->early && !atomic_load(&ops[i]->settled))
			return true;
	return false;
}

void cs_ar_svc_stop_ext(struct cs_ar_svc *s)
{
	if (s->core)
		cs_core_svc_stop_ext(s->core);
	else if (s->old && s->old->notify)
		install(s, NULL);
}
