/* SPDX-License-Identifier: MIT */
/*
 * cs_tp: the transport core. One instance per dataplane lcore (or per
 * simulated node) carries every flow of that node: reliable, paced
 * sessions per (peer node, session channel) that outlive operations, and
 * any number of operations of any number of groups in flight over them.
 *
 * Sans-IO like the engines below it: frames and time in (cs_tp_rx(),
 * cs_tp_poll()), frames and completions out (the owner's struct cs_tp_io).
 * It never reads a clock, never does I/O, and allocates only when a group,
 * an operation or a session to a new peer is set up.
 *
 *   owner (collstackd's lcore, the simulator's node)
 *     | cs_tp_rx(src node, header, payload)      ^ io->xmit(node, header,
 * payload) v                                           | io->done(op, status)
 *   session (peer, h->channel % S): seq, ACK/SACK, retransmission, pacing
 *     | new data, in order of arrival
 *     v
 *   route by (epoch, group, op id): the operation's engine (struct
 *   cs_flow_ops), with the sender's node mapped to its rank in the group;
 *   a frame of an operation not posted here yet is held (bounded) and fed
 *   to it when it is posted
 *
 * Operations are matched by (group, op id), never by posting order: two
 * groups may post in any order on different nodes. Scheduling between
 * operations: every operation of at most tp.small_bytes goes first (the
 * latency class); the others share what is left round robin, tp.quantum
 * frames each per turn.
 *
 * Frames carry node ids in their src field (the core's), and the group's
 * ranks never travel: each node maps ranks to nodes with the member list
 * the group was added with (cs_tp_group_add()).
 */
#ifndef CS_TRANSPORT_TP_H
#define CS_TRANSPORT_TP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "control/xport.h"
#include "internal/config.h"
#include "transport/flow.h"

/**
 * struct cs_tp_params - transport-core tunables (config keys "tp.*")
 * @sess_channels: sessions per peer; a frame of engine channel c rides on
 *	session c % @sess_channels (both ends compute the same)
 * @small_bytes: operations of at most this many bytes are latency class
 * @quantum: frames a bulk operation sends per round-robin turn
 * @hold_frames: frames of operations not posted yet that are kept
 * @hold_ttl: a held frame whose operation is not posted within this long
 *	is dropped (counted)
 * @max_ops: operations in flight at once
 * @max_groups: groups known at once
 * @max_nodes: node ids are below this
 * @rx_budget: receiver credit split over the senders (0: off)
 * @rx_active: a sender counts for @rx_budget while its data is this recent
 * @rx_stall: a poll at least this long after the previous one that finds
 *	frames waiting holds the loss timers until the queue is drained
 *	(cs_tp_poll(); 0: off)
 * @away_floor: the owner's own stalls (cs_tp_away()) raise every
 *	session's RTO floor to this many times the stall (0: off)
 */
struct cs_tp_params {
	uint32_t sess_channels;
	uint64_t small_bytes;
	uint32_t quantum;
	uint32_t hold_frames;
	uint64_t hold_ttl;
	uint32_t max_ops;
	uint32_t max_groups;
	uint32_t max_nodes;
	bool early;
	uint64_t rx_budget;
	uint64_t rx_active;
	uint64_t rx_stall;
	uint32_t away_floor;
};

extern const struct cs_cfg_entry cs_tp_cfg[];
extern const size_t cs_tp_cfg_len;

/**
 * struct cs_tp_io - the owner's side
 * @tx_room: frames io->xmit can take now (0 stops the core until the
 *	next cs_tp_poll(): nothing is stamped without a place to go)
 * @xmit: send one frame to @node (the header is final: encode it as is)
 * @done: operation @user ended with @status (0 or a negative error),
 *	blaming group rank @culprit (UINT32_MAX: none); the engine is the
 *	owner's again (free it here or later)
 * @ready: (optional; tp.early) operation @user's result is final and its
 *	engine no longer reads the owner's buffers: the owner may report
 *	success and reuse them now. The core keeps the engine, resending
 *	its frames until they are acknowledged; io->done follows (its
 *	status then only says whether the last frames got through)
 */
struct cs_tp_io {
	unsigned (*tx_room)(void *owner);
	void (*xmit)(void *owner, uint32_t node, const struct cs_pkt_hdr *h,
		     const void *payload, uint32_t len);
	void (*done)(void *owner, void *user, int status, uint32_t culprit);
	void (*ready)(void *owner, void *user);
};

/* Counters (cs_tp_get_stats()). */
struct cs_tp_stats {
	uint64_t rx_frames; /* handed to cs_tp_rx() */
	uint64_t rx_stale_epoch; /* older epoch: dropped */
	uint64_t rx_future_epoch; /* newer epoch: dropped, resent later */
	uint64_t rx_bad_src; /* source node unknown or self */
	uint64_t rx_not_member; /* sender is not in the op's group */
	uint64_t rx_done_op; /* new data for an op finished here */
	uint64_t rx_proto; /* the engine refused the frame */
	uint64_t bad_acked; /* the engine knew no such frame acknowledged */
	uint64_t bad_rebuild; /* the engine could not rebuild a frame */
	uint64_t rx_held, rx_replayed, rx_hold_full, rx_hold_expired;
	uint64_t rx_hold_reclaimed; /* held frames of ops failed here, let go
				     * to make room (told again) */
	uint64_t tx_frames, tx_data, tx_retx, tx_fillers, tx_acks;
	uint64_t ops_posted, ops_done, ops_failed;
	uint64_t sessions; /* sessions set up */
	uint64_t sess_failed; /* gave up on their peer's ops (revived) */
	uint64_t peak_ops; /* most operations in flight at once */
	/* tp.early: ops reported ready before their last ACKs, frames
	 * resent after that, and such ops ended by the reuse of their id
	 * before every frame was acknowledged */
	uint64_t ops_early, tx_retx_early, early_dropped;
	/* tp.rx_budget: grant changes, and the most sessions it was split
	 * over at once */
	uint64_t grants_set, peak_senders;
	/* an op that failed here is announced to the group's other
	 * members (and a peer's announcement ends ours the same way) */
	uint64_t tx_aborts, rx_aborts;
	/* summed over every session (reliability) */
	uint64_t rel_retx, rel_timeouts, rel_dup_rcvd;
	uint64_t rel_fast_retx, rel_tlp, rel_spurious;
	uint64_t rel_stale_rcvd; /* outside the receive window: dropped */
	/* session timer runs whose loss timers (RTO, probe, RACK) waited
	 * for the receive queue to drain (cs_tp_poll()) */
	uint64_t timers_held;
	/* the hold was full: frames refused (rx_hold_full) are reported to
	 * their senders, who park them; tx_resumes: sessions told to
	 * resend them (room again); rel_parked: frames of ours a peer
	 * refused; rel_resumes: resumes that found frames parked;
	 * rel_park_probes: parked frames resent by the RTO (a lost resume) */
	uint64_t tx_resumes;
	uint64_t peak_held; /* most frames held at once (tp.hold_frames) */
	uint64_t rel_parked, rel_resumes, rel_park_probes;
	/* sessions that sent with no RTT estimate and took one later from
	 * the peer's other sessions or the core (cs_tp_poll()) */
	uint64_t rtt_seeded_late;
	/* the owner's own stalls raised every session's RTO floor
	 * (cs_tp_away()), and the longest stall it reported, ns */
	uint64_t away_raised, away_max;
};

struct cs_tp;
struct cs_tp_op;

/**
 * cs_tp_params_default - fill @p from the table's defaults
 * Returns: 0 or -EINVAL.
 */
int cs_tp_params_default(struct cs_tp_params *p);

/**
 * cs_tp_create - a transport core for node @self
 * @p: core tunables (copied)
 * @xp: session tunables (rel.*, pacer.*, cc.*; copied)
 * @io: the owner's callbacks (kept by pointer)
 * @owner: passed to @io
 * @self: this node's id (< p->max_nodes)
 * @epoch: the membership epoch every frame carries; frames of other
 *	epochs are dropped
 * @out: the core
 * Returns: 0, -EINVAL, -ENOMEM.
 */
int cs_tp_create(const struct cs_tp_params *p, const struct cs_xport_params *xp,
		 const struct cs_tp_io *io, void *owner, uint32_t self,
		 uint32_t epoch, struct cs_tp **out);

/**
 * cs_tp_destroy - free the core; operations still in flight are dropped
 * without a completion (NULL is fine)
 */
void cs_tp_destroy(struct cs_tp *tp);

/**
 * cs_tp_group_add - make group @id known: @nodes[r] is rank r's node
 * @tp: the core
 * @id: group id (nonzero; the same on every member)
 * @nodes: member nodes in rank order; this node must be one, no repeats
 * @n: members (>= 1)
 * @rank: out: this node's rank in the group (may be NULL)
 * Returns: 0, -EEXIST (id in use), -EINVAL (bad members), -ENOSPC,
 *	-ENOMEM.
 */
int cs_tp_group_add(struct cs_tp *tp, uint32_t id, const uint32_t *nodes,
		    uint32_t n, uint32_t *rank);

/**
 * cs_tp_group_remove - forget group @id (no operation of it in flight)
 * Returns: 0, -ENOENT, -EBUSY.
 */
int cs_tp_group_remove(struct cs_tp *tp, uint32_t id);

/**
 * cs_tp_post - start an operation
 * @tp: the core
 * @group: its group (cs_tp_group_add())
 * @op_id: its id within the group, the same on every member; an id in
 *	flight or among the last 1024 finished ones of the group is refused
 * @ops: the engine's entry points
 * @flow: the engine (owned by the caller; must outlive the operation)
 * @bytes: payload size, for the scheduling class
 * @user: handed back in io->done
 * @now: current time
 * Held frames of the operation are fed to it at once.
 * Returns: 0, -ENOENT (unknown group), -EEXIST (op id reused),
 *	-ENOSPC (tp.max_ops in flight), -ENOMEM.
 */
int cs_tp_post(struct cs_tp *tp, uint32_t group, uint32_t op_id,
	       const struct cs_flow_ops *ops, void *flow, uint64_t bytes,
	       void *user, cs_ns_t now);

/**
 * cs_tp_group_reuse_ids - op ids of group @id may be posted again once
 * finished: for owners whose ids restart when a group of the same name is
 * formed again (collstackd's trainer groups). A frame for a finished id is
 * then held for the next operation with that id instead of dropped (a
 * retransmission of the finished one is a duplicate at its session and
 * never gets that far).
 * Returns: 0 or -ENOENT.
 */
int cs_tp_group_reuse_ids(struct cs_tp *tp, uint32_t id);

/**
 * cs_tp_cancel - abort operation (@group, @op_id) with @err; its io->done
 * follows from the next cs_tp_poll()
 * Returns: 0 or -ENOENT.
 */
int cs_tp_cancel(struct cs_tp *tp, uint32_t group, uint32_t op_id, int err);

/**
 * cs_tp_away - the owner was away from its port for @away before this
 * poll: descheduled, or busy with other work. Frames waited that long in
 * its receive queue, and its ACKs were that late. A peer whose CPUs are
 * shared the same way (sidecars sharing a host, a loaded machine) is as
 * late now and then, and a peer's stall is what times out a clean
 * session: every session's RTO floor (the one rel.rto_learn keeps,
 * halving every rel.rto_learn) is raised to tp.away_floor (3) times the
 * longest recent stall, new sessions start from it, and an armed RTO is
 * put off to match (cs_rel_raise_floor()). A floor that would stay under
 * rel.rto_min changes no RTO and is not set. On dedicated CPUs the
 * owner is never away long and nothing changes. The simulator models no
 * scheduling and does not call it.
 * @tp: the core
 * @away: how long, ns (0: not at all)
 * @now: current time, ns
 */
void cs_tp_away(struct cs_tp *tp, cs_ns_t away, cs_ns_t now);

/**
 * cs_tp_keep_on_stall - operation (@group, @op_id) outlives a session that
 * gives up on a peer (rel.max_timeouts without progress: the peer may be
 * slow or descheduled), which ends every other operation with that peer:
 * for a service's long-lived flow (point-to-point), which has deadlines of
 * its own per transfer and could not be posted again under its id in this
 * view. A lost peer (cs_tp_peer_lost()) still ends it.
 * Returns: 0 or -ENOENT.
 */
int cs_tp_keep_on_stall(struct cs_tp *tp, uint32_t group, uint32_t op_id);

/*
 * cs_tp_drop - cs_tp_cancel() without telling the other members: for an
 * op abandoned because the node view moved on, which every peer learns
 * from its own view (an abort told first would reach a peer that has not
 * seen the new view yet as a bare cancellation instead of the lost node).
 */
int cs_tp_drop(struct cs_tp *tp, uint32_t group, uint32_t op_id, int err);

/**
 * cs_tp_refuse - this node will not run operation (@group, @op_id) (its
 * descriptor was refused here with @err, e.g. CS_ERR_BAD_DESC): every
 * other member is told, and its part ends with @err blaming this node
 * (at once, or at its post; a frame of it that still arrives is answered
 * the same way); frames of it held here are dropped
 * Returns: 0, -ENOENT (unknown group), -EEXIST (posted here), -EINVAL
 *	(@err is not a CS_ERR_* code).
 */
int cs_tp_refuse(struct cs_tp *tp, uint32_t group, uint32_t op_id, int err);

/**
 * cs_tp_peer_lost - membership declared @node lost: every operation of a
 * group that holds it ends with CS_ERR_PEER_LOST naming its rank, and so
 * does every later one, until the core is replaced for a new epoch. (A
 * session that gives up after rel.max_timeouts ends the ops in flight to
 * its peer the same way, but not the later ones: the session goes on.)
 * Returns: 0 or -EINVAL.
 */
int cs_tp_peer_lost(struct cs_tp *tp, uint32_t node);

/**
 * cs_tp_peer_rtt - the RTT estimate of the sessions to @node (what a new
 * session to it starts from)
 * @tp: the core
 * @node: the peer
 * @srtt: out: smoothed RTT, ns
 * @rttvar: out: its variation, ns
 * Returns: 0, or -ENOENT when no session to @node has one.
 */
int cs_tp_peer_rtt(const struct cs_tp *tp, uint32_t node, cs_ns_t *srtt,
		   cs_ns_t *rttvar);

/**
 * cs_tp_seed_rtt - sessions to @node set up from now on start from this
 * RTT estimate when no other session to it has measured one: an owner that
 * replaces its core (a new epoch) carries the old core's estimates over
 * (cs_tp_peer_rtt()), so that a loss early on a new session is recovered
 * after an RTT-based timeout or a tail loss probe, not after rel.rto_init.
 * Sessions to a peer always seed each other (they share its path).
 * @tp: the core
 * @node: the peer
 * @srtt: smoothed RTT, ns (> 0)
 * @rttvar: its variation, ns
 * Returns: 0, -EINVAL, -ENOMEM.
 */
int cs_tp_seed_rtt(struct cs_tp *tp, uint32_t node, cs_ns_t srtt,
		   cs_ns_t rttvar);

/**
 * cs_tp_rx - a frame from node @src arrived
 * @tp: the core
 * @src: sending node (as the port or the simulator knows it)
 * @h: its header (decoded, validated for lengths)
 * @payload: h->len bytes (may be NULL when 0)
 * @now: current time
 */
void cs_tp_rx(struct cs_tp *tp, uint32_t src, const struct cs_pkt_hdr *h,
	      const void *payload, cs_ns_t now);

/**
 * cs_tp_poll - run timers, deadlines, ACKs, retransmissions, new data and
 * completions. ACKs go first: they are small, and a core whose port is
 * kept full by its own data must still tell its senders what arrived
 * (sent after the data, they waited for a poll whose data ran out, and
 * their senders timed out). Loss timers (RTO, tail loss probe, RACK) that came
 * due while frames were still being handed in wait for a poll with no frame
 * since the previous one (the owner's receive queue is drained), at most
 * as long as the gap before the poll that found the queue busy: an owner
 * descheduled for a while reads the ACKs already waiting for it before
 * it judges anything lost (counter timers_held).
 * Returns: frames sent plus operations completed (0: nothing to do).
 */
unsigned cs_tp_poll(struct cs_tp *tp, cs_ns_t now);

/**
 * cs_tp_next_deadline - when cs_tp_poll() next has timed work (a
 * retransmission, a delayed ACK, a paced frame, a deadline, an expiry);
 * CS_NS_NEVER if none. Data that arrives earlier needs a poll anyway.
 */
cs_ns_t cs_tp_next_deadline(const struct cs_tp *tp, cs_ns_t now);

/**
 * cs_tp_epoch - the membership epoch of every frame; an engine posted to
 * the core is set up with it (its own epoch check then passes)
 */
uint32_t cs_tp_epoch(const struct cs_tp *tp);

/**
 * cs_tp_in_flight - operations posted and not yet completed
 */
uint32_t cs_tp_in_flight(const struct cs_tp *tp);

/**
 * cs_tp_get_stats - copy the counters
 */
void cs_tp_get_stats(const struct cs_tp *tp, struct cs_tp_stats *st);

/**
 * cs_tp_stats_print - one "name=value" line of @st
 */
void cs_tp_stats_print(const struct cs_tp_stats *st, FILE *out);

/**
 * cs_tp_sess_at - session @i of the core (0 up to the number set up)
 * @node: receives its peer node
 * Returns: its reliability state (read only: observe/ publishes its
 * counters), or NULL past the last session.
 */
const struct cs_rel *cs_tp_sess_at(const struct cs_tp *tp, uint32_t i,
				   uint32_t *node);

#endif
