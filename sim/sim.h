/* SPDX-License-Identifier: MIT */
/*
 * cs_sim: a deterministic discrete-event network simulator. One process,
 * many endpoints, links with bandwidth, propagation delay and a finite
 * tail-drop queue (ECN marking above a threshold), output-queued switches,
 * and seeded impairments (loss, duplication, reordering, corruption,
 * outages, node failure). Same seed, same inputs: the run replays bit for
 * bit (no clock, no threads, ties broken by insertion order).
 *
 * Model
 *   - A node is an endpoint (callbacks) or a switch (forwards by
 *     destination). A link is one direction from one node to another: a
 *     FIFO of frames in front of a serializer (frame bytes * 8 / rate)
 *     followed by the propagation delay. A switch port's buffer is the
 *     queue of the link leaving that port, so a switch is output-queued.
 *   - A frame costs CS_PROTO_FRAME_OVERHEAD (118: Ethernet + IPv4 + UDP +
 *     collstack header) + payload + CS_SIM_WIRE_EXTRA (24: preamble 8,
 *     inter-frame gap 12, FCS 4) bytes of link time; the pacer's default
 *     frame_overhead (142) charges the same, so "rate = link rate" fills
 *     the link exactly.
 *   - Time is kept in picoseconds inside (exact serialization at 100 Gb/s:
 *     80 ps per byte); callbacks see nanoseconds (cs_ns_t, rounded down).
 *   - Impairments are drawn per frame, at the far end of the link, from
 *     the simulator's seeded PRNG: loss (dropped), duplication (a second
 *     copy arrives right after), reordering (this frame is held an extra
 *     uniform [0, reorder_ns) so later ones overtake it), corruption (one
 *     payload or header bit flips; the receiving NIC's FCS check drops the
 *     frame and counts it), outages (frames that would arrive inside
 *     [start, end) are lost). A failed node receives, sends and times
 *     nothing after its failure time.
 *   - Routing: a node sends to a destination over its direct link to it if
 *     one exists, else over its default link (a host's uplink to a switch).
 *     A switch forwards over its direct link to the destination.
 *   - Packets come from a pool; payload bytes are copied into a pool
 *     buffer (cs_sim_send() with data) or are synthetic (data NULL: only
 *     the length travels, for large-scale runs that do not check bytes).
 *     The pool grows in chunks to its high-water mark, then is reused.
 *   - The event queue is a binary heap: O(log n) per event.
 */
#ifndef CS_SIM_SIM_H
#define CS_SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal/proto.h"
#include "internal/util.h"

#define CS_SIM_WIRE_EXTRA 24 /* preamble + IFG + FCS, bytes per frame */
#define CS_SIM_NODE_NONE UINT32_MAX
#ifndef CS_NS_NEVER
#define CS_NS_NEVER UINT64_MAX /* no deadline (as control/pacer.h) */
#endif

struct cs_sim;

/**
 * struct cs_sim_params - simulator-wide settings
 * @seed: PRNG seed; every random draw comes from it
 * @max_payload: largest payload a packet may carry (bytes); with the
 *	default MTU 9000 that is 9000 - 20 - 8 - 76 = 8896
 */
struct cs_sim_params {
	uint64_t seed;
	uint32_t max_payload;
};

/**
 * struct cs_sim_link_params - one direction of a link
 * @gbps: rate in Gb/s (1e9 bits per second)
 * @delay_ns: propagation delay
 * @queue_bytes: queue (switch port buffer / NIC ring) in frame bytes;
 *	a frame that does not fit is tail-dropped. 0: unbounded.
 * @ecn_bytes: mark CE (CS_PKT_F_CE) on frames enqueued while the queue
 *	holds more than this; 0: no marking
 * @loss: probability a frame is lost
 * @dup: probability a frame is duplicated
 * @reorder: probability a frame is held back by up to @reorder_ns
 * @reorder_ns: longest extra delay of a reordered frame
 * @corrupt: probability a frame has a bit flipped (dropped by FCS)
 */
struct cs_sim_link_params {
	double gbps;
	uint64_t delay_ns;
	uint64_t queue_bytes;
	uint64_t ecn_bytes;
	double loss;
	double dup;
	double reorder;
	uint64_t reorder_ns;
	double corrupt;
};

/**
 * struct cs_sim_pkt - a packet as an endpoint sees it (read-only; valid
 * only during the rx callback)
 * @hdr: the collstack header (CS_PKT_F_CE set if a queue marked it)
 * @src: sending node
 * @dst: destination node
 * @len: payload bytes (== hdr.len as sent)
 * @data: payload, or NULL for a synthetic payload
 */
struct cs_sim_pkt {
	struct cs_pkt_hdr hdr;
	uint32_t src;
	uint32_t dst;
	uint32_t len;
	const uint8_t *data;
};

/**
 * struct cs_sim_node_ops - an endpoint's callbacks
 * @rx: a packet arrived
 * @timer: the time set with cs_sim_timer() has come
 * Both may send, set the timer and stop the simulation.
 */
struct cs_sim_node_ops {
	void (*rx)(struct cs_sim *sim, void *ctx, const struct cs_sim_pkt *pkt,
		   cs_ns_t now);
	void (*timer)(struct cs_sim *sim, void *ctx, cs_ns_t now);
};

struct cs_sim_link_stats {
	uint64_t frames; /* frames serialized onto the link */
	uint64_t bytes; /* frame bytes serialized, with extra */
	uint64_t payload; /* payload bytes serialized */
	uint64_t delivered; /* frames handed to the far node */
	uint64_t drop_queue; /* tail drops */
	uint64_t drop_loss; /* random loss */
	uint64_t drop_outage;
	uint64_t drop_corrupt; /* corrupted, dropped by the FCS check */
	uint64_t drop_dead; /* to or from a failed node */
	uint64_t dups;
	uint64_t reordered;
	uint64_t ecn_marked;
	uint64_t queue_max; /* largest queue seen, bytes */
	uint64_t busy_ps; /* time spent serializing */
};

/**
 * cs_sim_create - a new, empty simulation
 * @out: the simulator
 * @p: settings (copied)
 * Returns: 0, -EINVAL, -ENOMEM.
 */
int cs_sim_create(struct cs_sim **out, const struct cs_sim_params *p);

/**
 * cs_sim_destroy - free everything
 * @sim: the simulator (NULL is fine)
 */
void cs_sim_destroy(struct cs_sim *sim);

/**
 * cs_sim_node_add - add an endpoint
 * @sim: the simulator
 * @ops: its callbacks (kept by pointer)
 * @ctx: passed to @ops
 * @id: out: its node id (0, 1, 2 ... in order of creation)
 * Returns: 0 or -ENOMEM.
 */
int cs_sim_node_add(struct cs_sim *sim, const struct cs_sim_node_ops *ops,
		    void *ctx, uint32_t *id);

/**
 * cs_sim_switch_add - add an output-queued switch
 * @sim: the simulator
 * @latency_ns: forwarding latency from ingress to the egress queue
 * @id: out: its node id
 * Returns: 0 or -ENOMEM.
 */
int cs_sim_switch_add(struct cs_sim *sim, uint64_t latency_ns, uint32_t *id);

/**
 * cs_sim_link_add - add a one-way link @from -> @to
 * @sim: the simulator
 * @from: sending node
 * @to: receiving node
 * @p: parameters (copied)
 * @id: out: link id (may be NULL)
 * Returns: 0, -EINVAL (bad node or rate), -EEXIST (already linked),
 *	-ENOMEM.
 */
int cs_sim_link_add(struct cs_sim *sim, uint32_t from, uint32_t to,
		    const struct cs_sim_link_params *p, uint32_t *id);

/**
 * cs_sim_link_pair - links both ways with the same parameters
 * @sim: the simulator
 * @a: one node
 * @b: the other
 * @p: parameters of both directions
 * @ab: out: id of a -> b (may be NULL)
 * @ba: out: id of b -> a (may be NULL)
 * Returns: as cs_sim_link_add().
 */
int cs_sim_link_pair(struct cs_sim *sim, uint32_t a, uint32_t b,
		     const struct cs_sim_link_params *p, uint32_t *ab,
		     uint32_t *ba);

/**
 * cs_sim_route_default - where @node sends what has no direct link
 * @sim: the simulator
 * @node: the node
 * @link: one of @node's outgoing links
 * Returns: 0 or -EINVAL.
 */
int cs_sim_route_default(struct cs_sim *sim, uint32_t node, uint32_t link);

/**
 * cs_sim_link_find - the direct link @from -> @to
 * @sim: the simulator
 * @from: sender
 * @to: receiver
 * Returns: the link id, or -ENOENT.
 */
int cs_sim_link_find(const struct cs_sim *sim, uint32_t from, uint32_t to);

/**
 * cs_sim_link_outage - lose every frame arriving in [@start, @end)
 * @sim: the simulator
 * @link: the link
 * @start: ns
 * @end: ns
 * Returns: 0, -EINVAL, -ENOSPC (at most CS_SIM_MAX_OUTAGES per link).
 */
#define CS_SIM_MAX_OUTAGES 4
int cs_sim_link_outage(struct cs_sim *sim, uint32_t link, cs_ns_t start,
		       cs_ns_t end);

/**
 * cs_sim_node_fail_at - @node dies at @t: from then on it receives,
 * sends and times nothing
 * @sim: the simulator
 * @node: the node
 * @t: ns
 * Returns: 0 or -EINVAL.
 */
int cs_sim_node_fail_at(struct cs_sim *sim, uint32_t node, cs_ns_t t);

/**
 * cs_sim_send - hand a packet to @node's NIC
 * @sim: the simulator
 * @node: sender (an endpoint)
 * @dst: destination node
 * @hdr: header (copied; hdr->len is set to @len)
 * @data: payload to copy, or NULL for a synthetic payload of @len bytes
 * @len: payload bytes (<= max_payload)
 * Returns: 0; -EINVAL (bad node, too long), -EHOSTUNREACH (no route),
 *	-ENOBUFS (tail-dropped at the NIC queue: counted, like the wire),
 *	-ENETDOWN (@node has failed). Everything but -EINVAL is a loss the
 *	reliability layer repairs.
 */
int cs_sim_send(struct cs_sim *sim, uint32_t node, uint32_t dst,
		const struct cs_pkt_hdr *hdr, const void *data, uint32_t len);

/**
 * cs_sim_backlog - frame bytes queued on @node's link towards @dst
 * @sim: the simulator
 * @node: sender
 * @dst: destination
 * Returns: bytes waiting (not counting the frame being serialized).
 */
uint64_t cs_sim_backlog(const struct cs_sim *sim, uint32_t node, uint32_t dst);

/**
 * cs_sim_timer - ask for @node's timer callback at @at (ns)
 * @sim: the simulator
 * @node: the endpoint
 * @at: absolute time; one timer per node: the latest call wins (an
 *	earlier pending time is forgotten); CS_NS_NEVER (UINT64_MAX) cancels
 */
void cs_sim_timer(struct cs_sim *sim, uint32_t node, cs_ns_t at);

/**
 * cs_sim_now - current simulated time, ns
 * @sim: the simulator
 */
cs_ns_t cs_sim_now(const struct cs_sim *sim);

/**
 * cs_sim_run - process events in time order
 * @sim: the simulator
 * @until: stop before the first event later than this (ns); UINT64_MAX:
 *	no limit
 * Returns: 0 when the event queue ran empty, 1 when stopped by
 *	cs_sim_stop(), 2 when @until was reached.
 */
int cs_sim_run(struct cs_sim *sim, cs_ns_t until);

/**
 * cs_sim_stop - make cs_sim_run() return after the current event
 * @sim: the simulator
 */
void cs_sim_stop(struct cs_sim *sim);

/**
 * cs_sim_rand - a draw from the simulator's PRNG (for endpoints that need
 * randomness and must replay)
 * @sim: the simulator
 */
uint64_t cs_sim_rand(struct cs_sim *sim);

/**
 * cs_sim_link_stats - counters of one link
 * @sim: the simulator
 * @link: the link
 * Returns: its counters, or NULL for a bad id.
 */
const struct cs_sim_link_stats *cs_sim_link_stats(const struct cs_sim *sim,
						  uint32_t link);

/** cs_sim_events - events processed so far */
uint64_t cs_sim_events(const struct cs_sim *sim);

/** cs_sim_nodes / cs_sim_links - how many exist */
uint32_t cs_sim_nodes(const struct cs_sim *sim);
uint32_t cs_sim_links(const struct cs_sim *sim);

/**
 * cs_sim_star - N hosts around one switch, links both ways
 * @sim: the simulator
 * @hosts: node ids of the endpoints (already added)
 * @n: how many
 * @host_link: host -> switch links (NIC side)
 * @port_link: switch -> host links (the switch port buffers)
 * @sw: out: the switch's node id (may be NULL)
 * Returns: 0 or a negative errno from the calls above. Each host's
 *	default route is its uplink.
 */
int cs_sim_star(struct cs_sim *sim, const uint32_t *hosts, uint32_t n,
		const struct cs_sim_link_params *host_link,
		const struct cs_sim_link_params *port_link, uint32_t *sw);

#endif
