/* SPDX-License-Identifier: MIT */
/*
 * Ring collectives as sans-IO state machines: chunked, pipelined ring
 * allreduce (reduce-scatter then all-gather), reduce-scatter, all-gather,
 * pipelined-chain broadcast and reduce, and a ring barrier.
 *
 * The engine never does I/O, never reads a clock and never allocates after
 * cs_coll_init(). Its caller (a dataplane lcore, or the simulator) feeds it
 * events and drains actions:
 *
 *   cs_coll_next_packets()  packets that may be sent now (burst)
 *   cs_coll_on_data()       a DATA packet for this operation arrived
 *   cs_coll_on_acked()      the transport saw a sent packet acknowledged
 *   cs_coll_rebuild()       the transport wants to retransmit a packet
 *   cs_coll_done()          results final and every packet acknowledged
 *
 * Payload is never copied by the engine on transmit: a descriptor points
 * into the operation's buffers, and a retransmission is rebuilt from a
 * 64-bit cookie rather than from a kept copy (see "What a retransmission
 * carries" in ring.c). On receive the payload is reduced or copied straight
 * into the destination buffer; there is no reassembly buffer.
 */
#ifndef CS_COLLECTIVES_RING_H
#define CS_COLLECTIVES_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collstack/types.h"
#include "internal/config.h"
#include "internal/proto.h"
#include "internal/util.h"
#include "transport/flow.h"

enum cs_coll_kind {
	CS_COLL_ALLREDUCE = 0,
	CS_COLL_REDUCE_SCATTER = 1,
	CS_COLL_ALL_GATHER = 2,
	CS_COLL_BROADCAST = 3,
	CS_COLL_REDUCE = 4,
	CS_COLL_BARRIER = 5,
	CS_COLL_KIND_COUNT
};

/* Flags of struct cs_coll_params. */
/*
 * Timing only: the engine does all of its bookkeeping (schedule, windows,
 * exactly-once bitmaps, causality checks) but never reads or writes the
 * buffers, which may be NULL. For simulating sizes whose buffers would not
 * fit in memory; results are not produced.
 */
#define CS_COLL_F_NODATA 0x1u
/* Odd channels run the ring in the reverse direction (default: all forward). */
#define CS_COLL_F_ALT_DIR 0x2u

/* Hard limits: what the cookie and header fields can encode. */
#define CS_COLL_MAX_CHANNELS 64
#define CS_COLL_MAX_RANKS 16384

/* Tunables of the ring engines (config table cs_coll_cfg_table). */
struct cs_coll_cfg {
	uint32_t channels; /* rings per operation */
	uint64_t chunk; /* bytes per chunk (rounded to packets) */
	uint32_t window; /* chunks in flight per channel */
	uint32_t mtu_payload; /* payload bytes per packet */
	uint64_t deadline; /* ns from post to CS_ERR_TIMEOUT; 0: none */
	uint64_t direct_max; /* allreduce up to this many bytes: direct */
};

extern const struct cs_cfg_entry cs_coll_cfg_table[];
extern const size_t cs_coll_cfg_table_len;

/*
 * One collective operation as posted.
 *
 * Buffer conventions (NCCL's):
 *   allreduce       send/recv: count elements. In place: sendbuf == recvbuf.
 *   reduce-scatter  sendbuf: nranks * count, recvbuf: count. In place:
 *                   recvbuf == sendbuf + rank * count; the other segments
 *                   of sendbuf then hold partial sums afterwards.
 *   all-gather      sendbuf: count, recvbuf: nranks * count. In place:
 *                   sendbuf == recvbuf + rank * count.
 *   broadcast       count elements from root's sendbuf to every recvbuf.
 *   reduce          count elements; root's recvbuf gets the result. A
 *                   non-root recvbuf (if given) holds a partial sum
 *                   afterwards; if NULL the engine uses its own scratch.
 *   barrier         no buffers, count ignored.
 */
struct cs_coll_params {
	enum cs_coll_kind kind;
	uint32_t nranks;
	uint32_t rank;
	uint32_t root; /* broadcast, reduce */
	const void *sendbuf;
	void *recvbuf;
	size_t count; /* elements, see above */
	enum cs_dtype dtype;
	enum cs_redop op;
	uint32_t channels; /* 0: cfg default */
	uint64_t chunk; /* bytes; 0: cfg default */
	uint32_t window; /* chunks per channel; 0: cfg default */
	uint32_t mtu_payload; /* bytes; 0: cfg default */
	uint32_t flags; /* CS_COLL_F_* */
	uint32_t group, epoch, op_id; /* copied into every header */
	cs_ns_t start; /* when posted (for the deadline) */
	uint64_t deadline; /* ns after @start; 0: none (cfg default) */
	/* An allreduce of at most this many bytes runs as a direct exchange
	 * (one step, every rank sends its input to every other; see ring.c)
	 * when nranks - 1 <= max_direct_peers. 0: always the ring. */
	uint64_t direct_max;
	uint32_t max_direct_peers; /* 0: CS_COLL_MAX_CHANNELS */
};

/* One packet to send: header fields set by the engine, seq/ack left to the
 * transport. @payload points into the operation's buffers; @len may be 0
 * (barrier). */
struct cs_coll_tx {
	uint32_t dst; /* destination rank */
	struct cs_pkt_hdr hdr;
	const void *payload;
	uint32_t len;
	uint64_t cookie; /* hand back to cs_coll_rebuild / on_acked */
};

/* Return values of cs_coll_on_data() >= 0. */
#define CS_COLL_RX_NEW 0 /* reduced or copied into the buffer */
#define CS_COLL_RX_DUP 1 /* seen before: dropped, ack it again */
#define CS_COLL_RX_STALE 2 /* older epoch: dropped and counted */
#define CS_COLL_RX_LATE 3 /* the operation was aborted: ignored */

/* Bits of a cookie the caller may use (e.g. to find the operation). */
#define CS_COLL_COOKIE_USER_SHIFT 56
#define CS_COLL_COOKIE_USER_MASK (0xffull << CS_COLL_COOKIE_USER_SHIFT)

struct cs_coll;

/**
 * cs_coll_params_default - fill @p with defaults from @cfg (or built-ins)
 * @p: parameters to initialise; kind, ranks and buffers are left zero
 * @cfg: tunables, or NULL for the table defaults
 */
void cs_coll_params_default(struct cs_coll_params *p,
			    const struct cs_coll_cfg *cfg);

/**
 * cs_coll_params_op - set what the operation moves (the rest of @p, the
 * tunables and the header fields, stays as it is)
 * @p: parameters (cs_coll_params_default() first)
 * @kind: the collective
 * @nranks: ranks in the group
 * @rank: this one
 * @root: broadcast, reduce
 * @sendbuf: input (see the table above)
 * @recvbuf: output
 * @count: elements
 * @dtype: element type
 * @op: reduction operator
 */
static inline void cs_coll_params_op(struct cs_coll_params *p,
				     enum cs_coll_kind kind, uint32_t nranks,
				     uint32_t rank, uint32_t root,
				     const void *sendbuf, void *recvbuf,
				     size_t count, enum cs_dtype dtype,
				     enum cs_redop op)
{
	p->kind = kind;
	p->nranks = nranks;
	p->rank = rank;
	p->root = root;
	p->sendbuf = sendbuf;
	p->recvbuf = recvbuf;
	p->count = count;
	p->dtype = dtype;
	p->op = op;
}

/**
 * cs_coll_is_direct - will cs_coll_init() run @p as a direct exchange
 * (an allreduce of at most @p->direct_max bytes: one step, a channel per
 * peer, so the sender talks to every rank, not just its ring neighbours)?
 */
bool cs_coll_is_direct(const struct cs_coll_params *p);

/**
 * cs_coll_init - validate @p and allocate the state of one operation
 * @p: the operation; buffers must stay valid until cs_coll_done()
 * @out: the new operation
 *
 * All memory the operation will ever need is allocated here. Local work
 * that needs no peer (n = 1, count 0, the out-of-place copy of a rank's own
 * contribution) is also done here.
 *
 * Returns: 0, -EINVAL or CS_ERR_BAD_DESC for bad parameters, -ENOMEM.
 */
int cs_coll_init(const struct cs_coll_params *p, struct cs_coll **out);

/**
 * cs_coll_free - release an operation (NULL is allowed)
 * @c: the operation
 */
void cs_coll_free(struct cs_coll *c);

/**
 * cs_coll_next_packets - packets the engine may send now
 * @c: the operation
 * @now: current time (unused by the ring schedule; kept for pacing hooks)
 * @out: room for @max descriptors
 * @max: burst size
 *
 * A packet is released once its data is final at this rank (its chunk of
 * the previous step fully received) and its channel's window of
 * unacknowledged chunks has room. Channels are served round robin.
 *
 * Returns: the number of descriptors written (0 .. @max).
 */
unsigned cs_coll_next_packets(struct cs_coll *c, cs_ns_t now,
			      struct cs_coll_tx *out, unsigned max);

/**
 * cs_coll_next_on - like cs_coll_next_packets() for channel @ch only
 * @c: the operation
 * @now: current time
 * @ch: channel
 * @out: room for @max descriptors
 * @max: burst size
 *
 * For callers with one transport session per channel, so that a session
 * whose window or pacer is closed does not hold the other channels back.
 *
 * Returns: the number of descriptors written.
 */
unsigned cs_coll_next_on(struct cs_coll *c, cs_ns_t now, uint32_t ch,
			 struct cs_coll_tx *out, unsigned max);

/**
 * cs_coll_channels - number of channels the operation runs on
 * @c: the operation
 */
uint32_t cs_coll_channels(const struct cs_coll *c);

/**
 * cs_coll_chan_peers - the ranks channel @ch sends to and receives from
 * @c: the operation
 * @ch: channel
 * @next: out: successor, or -1 if this rank sends nothing on @ch
 * @prev: out: predecessor, or -1 if this rank receives nothing on @ch
 */
void cs_coll_chan_peers(const struct cs_coll *c, uint32_t ch, int64_t *next,
			int64_t *prev);

/**
 * cs_coll_on_data - a DATA packet of this operation arrived
 * @c: the operation
 * @now: current time
 * @hdr: its header (group/epoch/op already matched by the caller)
 * @payload: hdr->len bytes
 *
 * Every field is checked against the schedule: the source must be this
 * channel's ring predecessor for that step, offset and length must be
 * exactly one packet of the expected segment. A packet already reduced is
 * dropped (exactly-once: a per-packet bitmap, never trusting the
 * transport's own de-duplication).
 *
 * Returns: CS_COLL_RX_NEW, CS_COLL_RX_DUP, or CS_ERR_PROTO for a packet
 * that does not belong to the schedule.
 */
int cs_coll_on_data(struct cs_coll *c, cs_ns_t now,
		    const struct cs_pkt_hdr *hdr, const void *payload);

/**
 * cs_coll_on_acked - the transport reports a sent packet acknowledged
 * @c: the operation
 * @cookie: the packet's cookie (user bits ignored)
 *
 * Opens the channel's window when a whole chunk is acknowledged. A
 * repeated report for the same packet is ignored.
 *
 * Returns: 0, or -EINVAL for a cookie that names no packet of @c.
 */
int cs_coll_on_acked(struct cs_coll *c, uint64_t cookie);

/**
 * cs_coll_rebuild - rebuild a packet for retransmission from its cookie
 * @c: the operation
 * @cookie: as given by cs_coll_next_packets (user bits ignored)
 * @out: the descriptor, identical to the original one (plus
 *       CS_PKT_F_RETX) when 0 is returned
 *
 * Returns: 0; -ESTALE if the source bytes may have been overwritten since
 * the original was sent, in which case the receiver provably holds the
 * packet already (see ring.c) and the transport must treat it as
 * delivered instead of sending different bytes (@out then has the
 * original header, for logging and checks, and a NULL payload); -EINVAL
 * for a bad cookie.
 */
int cs_coll_rebuild(struct cs_coll *c, uint64_t cookie, struct cs_coll_tx *out);

/**
 * cs_coll_result_ready - every element of this rank's result is final
 * @c: the operation
 */
bool cs_coll_result_ready(const struct cs_coll *c);

/**
 * cs_coll_resends_own_copy - every frame @c sends or resends reads the
 * engine's own copy of the input (a direct exchange), never the caller's
 * buffers: once the result is ready the caller may have them back
 */
bool cs_coll_resends_own_copy(const struct cs_coll *c);

/**
 * cs_coll_all_sent - every packet this rank sends has been handed out by
 * cs_coll_next_packets()/cs_coll_next_on() once (acknowledged or not)
 * @c: the operation
 */
bool cs_coll_all_sent(const struct cs_coll *c);

/**
 * cs_coll_done - result final and every packet sent was acknowledged
 * @c: the operation
 *
 * Only then may the buffers be reused or the operation freed: until the
 * last acknowledgement a retransmission may still read them.
 */
bool cs_coll_done(const struct cs_coll *c);

/* Counters of one operation. */
struct cs_coll_stats {
	uint64_t tx_pkts, tx_bytes; /* first transmissions (payload) */
	uint64_t rx_pkts, rx_bytes; /* new packets reduced/copied */
	uint64_t rx_dup; /* duplicates dropped */
	uint64_t rebuilds, rebuild_stale;
	uint64_t ideal_tx_bytes; /* payload this rank must send */
	uint64_t rx_stale_epoch; /* dropped: older epoch */
	uint64_t rx_late; /* ignored: arrived after an abort */
};

/**
 * cs_coll_get_stats - copy the counters of @c into @st
 */
void cs_coll_get_stats(const struct cs_coll *c, struct cs_coll_stats *st);

/**
 * cs_coll_rx_has - whether a packet has been received here
 * @c: the receiving operation
 * @step: global step of the packet
 * @channel: channel
 * @offset: byte offset as in the header
 *
 * For invariant checks in tests (the simulator asserts with it that a
 * refused, stale retransmission was indeed already delivered).
 *
 * Returns: true when that packet has been reduced or copied here.
 */
bool cs_coll_rx_has(const struct cs_coll *c, uint32_t step, uint32_t channel,
		    uint64_t offset);

/**
 * cs_coll_kind_name - "allreduce", "reduce-scatter", ...
 */
const char *cs_coll_kind_name(enum cs_coll_kind k);

/* ---- failures: abort, status, "what is it waiting for" ---------------- */

/**
 * cs_coll_abort - complete an operation with an error
 * @c: the operation
 * @err: CS_ERR_PEER_LOST, CS_ERR_TIMEOUT, CS_ERR_CANCELLED, ...
 * @culprit: the rank to blame (the lost rank, the rank waited on), or
 *	UINT32_MAX for none
 *
 * From now on the operation sends nothing (cs_coll_next_packets() returns
 * 0, cs_coll_rebuild() -ECANCELED), ignores late packets (CS_COLL_RX_LATE)
 * and acknowledgements, and cs_coll_done() is true: the buffers are the
 * caller's again and hold unspecified values. A second abort, or an abort
 * of a completed operation, changes nothing.
 *
 * Returns: 0, -EALREADY if the operation had already completed or been
 * aborted, -EINVAL if @err is not negative.
 */
int cs_coll_abort(struct cs_coll *c, int err, uint32_t culprit);

/**
 * cs_coll_next_deadline - when cs_coll_check_deadline() will fire
 * @c: the operation
 *
 * Returns: start + deadline while the operation runs, else CS_NS_NEVER
 * (UINT64_MAX).
 */
cs_ns_t cs_coll_next_deadline(const struct cs_coll *c);

/**
 * cs_coll_check_deadline - abort with CS_ERR_TIMEOUT if the deadline passed
 * @c: the operation
 * @now: current time
 *
 * The culprit is the rank cs_coll_waiting_on() names at that moment; the
 * snapshot stays available through cs_coll_abort_wait() for the report.
 *
 * Returns: true when this call aborted the operation.
 */
bool cs_coll_check_deadline(struct cs_coll *c, cs_ns_t now);

/**
 * cs_coll_status - how the operation ended
 * @c: the operation
 * @culprit: out (may be NULL): the rank given to cs_coll_abort()
 *
 * Returns: 0 when complete (cs_coll_done()), -EINPROGRESS while running,
 * or the error of cs_coll_abort().
 */
int cs_coll_status(const struct cs_coll *c, uint32_t *culprit);

enum cs_coll_wait_kind {
	CS_COLL_WAIT_NONE = 0, /* complete (or aborted): waits for nothing */
	CS_COLL_WAIT_DATA = 1, /* data from @peer (ring predecessor) */
	CS_COLL_WAIT_ACK = 2, /* acknowledgements from @peer (successor) */
};

/*
 * What an incomplete operation is blocked on: the oldest chunk it still
 * misses (or, when its window is full, the oldest chunk not acknowledged)
 * on the first channel that is not complete.
 */
struct cs_coll_wait {
	enum cs_coll_wait_kind kind;
	uint32_t rank; /* this rank */
	uint32_t peer; /* the rank waited on */
	uint32_t op_id;
	uint32_t channel;
	uint32_t step; /* global step (see cs_coll_wait_format) */
	uint32_t chunk; /* chunk within the step's segment part */
	uint32_t pkts_missing; /* not received / not acknowledged */
	uint32_t pkts_total; /* packets of that chunk */
	uint32_t chans_waiting; /* channels not complete */
};

/**
 * cs_coll_waiting_on - what @c is waiting for right now
 * @c: the operation
 * @w: out
 *
 * Returns: true when the operation is incomplete (then @w->kind is DATA or
 * ACK), false when it is complete or aborted (@w->kind NONE).
 */
bool cs_coll_waiting_on(const struct cs_coll *c, struct cs_coll_wait *w);

/**
 * cs_coll_abort_wait - what the operation waited for when it was aborted
 * @c: the operation
 * @w: out: the snapshot taken by cs_coll_abort() (kind NONE if it was not
 *	waiting or was not aborted)
 */
void cs_coll_abort_wait(const struct cs_coll *c, struct cs_coll_wait *w);

/**
 * cs_coll_wait_format - one line for logs and error reports, e.g.
 * "rank 5 waits on rank 4: allreduce op 12 channel 1 reduce-scatter step 3
 * chunk 7 (packets 2 of 4 missing)"
 * @c: the operation @w was taken from
 * @w: from cs_coll_waiting_on()
 * @buf: output, always NUL-terminated when @len > 0
 * @len: its size
 *
 * Steps are numbered within their phase (allreduce: reduce-scatter 0 ..
 * n-2, then all-gather 0 .. n-2).
 *
 * Returns: the length snprintf() would have written.
 */
int cs_coll_wait_format(const struct cs_coll *c, const struct cs_coll_wait *w,
			char *buf, size_t len);

/**
 * cs_coll_flow_ops - a struct cs_coll as an engine of the transport core
 * (transport/flow.h): the flow pointer is the struct cs_coll itself
 */
extern const struct cs_flow_ops cs_coll_flow_ops;

#endif
