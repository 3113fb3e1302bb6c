/* SPDX-License-Identifier: MIT */
/*
 * The dataplane driver: what each polling lcore runs. It receives a burst,
 * drops and counts every frame that is not a well-formed collstack frame
 * for this node (to another MAC, foreign traffic, bad headers, wrong
 * lengths), hands the
 * rest to the protocol handler, and transmits what the handler and the raw
 * benchmark produce. The control thread talks to it only through atomics
 * (requests carry a sequence number; results are counters).
 */
#ifndef CS_DATAPLANE_DRIVER_H
#define CS_DATAPLANE_DRIVER_H

#include <assert.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "dataplane/port.h"
#include "dataplane/wire.h"
#include "internal/proto.h"
#include "internal/util.h"

#define CS_DRV_MAX_PEERS 256
/* Bytes of the outer headers plus the encoded collstack header. */
#define CS_DRV_HDR_LEN CS_PROTO_FRAME_OVERHEAD

/* One member of the static address table (node.peers). */
struct cs_peer {
	uint32_t ip; /* network order */
	uint16_t port; /* host order */
	uint8_t mac[6];
	char name[32];
};

/* Per-queue state and counters, written by that queue's lcore only. */
struct cs_drv_q {
	alignas(CS_CACHE_LINE) uint64_t raw_seen;
	bool raw_active;
	uint32_t raw_len;
	cs_ns_t raw_until;
	uint8_t raw_tmpl[CS_DRV_HDR_LEN];
	/* counters (read by the control thread with relaxed loads) */
	uint64_t rx_frames;
	uint64_t rx_foreign; /* not IPv4/UDP to our port, bad IP header, or
			      * to another MAC (rx_other_mac) */
	uint64_t rx_other_mac; /* to neither our MAC nor broadcast: a
				* bridge flooded it (also in rx_foreign) */
	uint64_t rx_malformed; /* our port, but not a valid collstack hdr */
	uint64_t rx_unhandled; /* valid, no handler for its type */
	uint64_t rx_raw_pkts, rx_raw_bytes;
	cs_ns_t rx_raw_first, rx_raw_last;
	uint64_t tx_raw_pkts, tx_raw_bytes;
	cs_ns_t tx_raw_start, tx_raw_end;
	uint64_t tx_nobuf;
	struct cs_wire_stats wire; /* decode results by cause */
};

/*
 * The protocol handler for valid non-raw frames (the engines' driver sets
 * it). It owns nothing: the driver releases the frames after the call.
 */
typedef void (*cs_drv_rx_fn)(void *arg, unsigned q, struct cs_pbuf *v,
			     struct cs_wire_pkt *pk, unsigned n, cs_ns_t now);
typedef unsigned (*cs_drv_tx_fn)(void *arg, unsigned q, cs_ns_t now);

struct cs_drv {
	struct cs_port *port;
	unsigned rank, npeers, nq;
	struct cs_peer peers[CS_DRV_MAX_PEERS];
	cs_drv_rx_fn rx_fn;
	cs_drv_tx_fn tx_fn;
	void *fn_arg;
	/* raw benchmark request, written by the control thread */
	atomic_uint_fast64_t raw_req;
	uint32_t raw_dst, raw_len;
	cs_ns_t raw_until;
	struct cs_drv_q q[CS_PORT_MAX_QUEUES];
};

/**
 * cs_drv_init - set up a driver on an open port
 * Returns: 0 or -EINVAL (rank outside the peer table).
 */
int cs_drv_init(struct cs_drv *d, struct cs_port *port, unsigned rank);

/**
 * cs_drv_load_peers - read the static address table
 * @path: lines "rank ip mac udp_port [name]"; '#' starts a comment
 * Returns: 0, -errno opening the file, or -EINVAL naming the line.
 */
int cs_drv_load_peers(struct cs_drv *d, const char *path);

/**
 * cs_drv_poll - the lcore work function (cs_lcore_fn)
 */
unsigned cs_drv_poll(void *arg, unsigned q, cs_ns_t now);

/**
 * cs_drv_raw_start - ask every lcore to blast CS_PKT_RAW frames of
 * @frame_len bytes at peer @dst until @until (CLOCK_MONOTONIC ns)
 * Returns: 0 or -EINVAL.
 */
int cs_drv_raw_start(struct cs_drv *d, unsigned dst, uint32_t frame_len,
		     cs_ns_t until);

/* Totals over the queues, for the control thread. */
struct cs_drv_totals {
	uint64_t rx_frames, rx_foreign, rx_malformed, rx_unhandled;
	uint64_t rx_other_mac; /* a part of rx_foreign */
	uint64_t rx_raw_pkts, rx_raw_bytes, tx_raw_pkts, tx_raw_bytes;
	uint64_t tx_nobuf;
	cs_ns_t rx_raw_ns, tx_raw_ns; /* first..last span */
};

void cs_drv_totals(struct cs_drv *d, struct cs_drv_totals *t);

/**
 * cs_drv_frame_hdr - encode the headers of a frame to peer @dst
 * @f: frame buffer; @h->len payload bytes are already in place after the
 *     headers (or do not matter)
 * @cap: bytes available in @f
 * @h: header; version and src are filled in here
 * @sport: our UDP source port
 *
 * Returns: the frame length, or a negative CS_WIRE_E_* code.
 */
int cs_drv_frame_hdr(const struct cs_drv *d, uint8_t *f, uint32_t cap,
		     struct cs_pkt_hdr *h, unsigned dst, uint16_t sport);

/**
 * cs_drv_frame_hdr_lane - cs_drv_frame_hdr() for lane @lane: from this
 * port's port.udp_port + @lane to the peer's port + @lane (the udp port's
 * queue q listens on port.udp_port + q; lane 0 is cs_drv_frame_hdr()
 * with this port's own UDP port)
 */
int cs_drv_frame_hdr_lane(const struct cs_drv *d, uint8_t *f, uint32_t cap,
			  struct cs_pkt_hdr *h, unsigned dst, unsigned lane);

#endif
