/* SPDX-License-Identifier: MIT */
/*
 * The timeline recorder: a fixed-size ring of 32-byte events per producing
 * thread (each dataplane lcore, the IPC thread). A thread takes one of the
 * rings set up by cs_trace_init() the first time it records (no
 * allocation, one atomic increment, once); after that an event is a store
 * into its own ring and a release store of the ring's head. No lock, no
 * allocation; the caller passes the time it already has (a received
 * frame reads the clock: observe/tp_hooks.h says why).
 *
 * The control thread copies a ring while its lcore writes it
 * (cs_trace_copy()): it reads the head, copies, reads the head again and
 * keeps only the events the writer cannot have overwritten meanwhile.
 *
 * With tracing off (the default in every process that never calls
 * cs_trace_init(), e.g. the simulator) each hook is one relaxed load and a
 * branch.
 */
#ifndef CS_OBSERVE_TRACE_H
#define CS_OBSERVE_TRACE_H

#include <assert.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "internal/util.h"

/* What an event records; the fields of struct cs_trace_ev per kind. */
enum cs_trace_kind {
	CS_TR_NONE = 0,
	CS_TR_OP_POST, /* core: op posted; a=group size, b=bytes(low 32) */
	CS_TR_OP_DONE, /* core: op ended; c=status (int32) */
	CS_TR_TX, /* core: data frame; a=peer node, b=len, c=seq, d=chan */
	CS_TR_RX, /* core: data frame in; a=src node, b=len, c=seq,
		   * d=chan | CS_TR_RX_DUP */
	CS_TR_RETX, /* core: retransmission; a=peer, b=len, c=seq,
		     * d=cause (enum cs_trace_retx) */
	CS_TR_STALL, /* core: a channel could not send; a=peer, b=ns it
		      * lasted (coalesced), d=cause (enum cs_trace_stall) */
	CS_TR_T_POST, /* IPC: trainer posted; a=rank, b=count, c=seq,
		       * d=IPC op kind */
	CS_TR_T_DONE, /* IPC: trainer's op completed; a=rank, c=seq,
		       * d=status (int16) */
	CS_TR_KINDS
};

#define CS_TR_RX_DUP 0x8000u

enum cs_trace_retx {
	CS_TR_RETX_RTO = 0, /* timeout */
	CS_TR_RETX_SACK, /* a SACK showed the gap (fast retransmit) */
	CS_TR_RETX_TLP, /* tail loss probe */
};

enum cs_trace_stall {
	CS_TR_STALL_WINDOW = 0, /* send window full */
	CS_TR_STALL_CREDIT, /* receiver-granted credit used up */
	CS_TR_STALL_PACING, /* the pacer's next slot is later */
};

/* One event: 32 bytes, two to a cache line. */
struct cs_trace_ev {
	uint64_t ts; /* ns, the producer's CLOCK_MONOTONIC */
	uint32_t group, op;
	uint32_t a, b, c;
	uint16_t kind, d;
};
static_assert(sizeof(struct cs_trace_ev) == 32, "trace event size");

#define CS_TRACE_MAX_RINGS 16
#define CS_TRACE_NAME_MAX 16

/* One producer's ring: the head on its own line, written by it only. */
struct cs_trace_ring {
	alignas(64) _Atomic uint64_t head; /* events ever written */
	alignas(64) struct cs_trace_ev *ev; /* size a power of two */
	uint64_t mask;
	int tid; /* the producer's thread id */
	char name[CS_TRACE_NAME_MAX]; /* its name (pthread_getname_np) */
};

extern atomic_bool cs__trace_on;
extern _Thread_local struct cs_trace_ring *cs__trace_tls;
extern _Thread_local cs_ns_t cs__trace_now;
extern _Thread_local cs_ns_t cs__trace_rx_ts;

/* Slow path: take a ring for this thread (NULL when all are taken). */
struct cs_trace_ring *cs__trace_attach(void);

static inline bool cs_trace_enabled(void)
{
	return unlikely(
		atomic_load_explicit(&cs__trace_on, memory_order_relaxed));
}

/**
 * cs_trace_ev_put - record one event in this thread's ring
 * Returns: the event written (valid until this thread records again), or
 * NULL when tracing is off or no ring was left for this thread.
 */
static inline struct cs_trace_ev *cs_trace_ev_put(uint16_t kind, cs_ns_t ts,
						  uint32_t group, uint32_t op,
						  uint32_t a, uint32_t b,
						  uint32_t c, uint16_t d)
{
	struct cs_trace_ring *r = cs__trace_tls;
	struct cs_trace_ev *e;
	uint64_t h;

	if (!cs_trace_enabled())
		return NULL;
	if (unlikely(!r) && !(r = cs__trace_attach()))
		return NULL;
	h = atomic_load_explicit(&r->head, memory_order_relaxed);
	e = &r->ev[h & r->mask];
	*e = (struct cs_trace_ev){ .ts = ts,
				   .group = group,
				   .op = op,
				   .a = a,
				   .b = b,
				   .c = c,
				   .kind = kind,
				   .d = d };
	atomic_store_explicit(&r->head, h + 1, memory_order_release);
	return e;
}

/* cs_trace_clock - CLOCK_MONOTONIC in ns (the lcores' clock) */
static inline cs_ns_t cs_trace_clock(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * 1000000000ull + (cs_ns_t)ts.tv_nsec;
}

/* cs_trace_now - remember the time of this thread's current round, for
 * events recorded where no time is at hand */
static inline void cs_trace_now(cs_ns_t now)
{
	cs__trace_now = now;
}

static inline cs_ns_t cs_trace_last_now(void)
{
	return cs__trace_now;
}

/* cs_trace_rx_burst - a burst of received frames is about to be handled
 * on this thread (@start) or was (!@start): while it is, received frames
 * are stamped with one clock read taken after the burst came, not one
 * each (a read per frame was 1.5 % of the sidecars' CPU in a udp
 * alltoall). Costs nothing while recording is off. */
static inline void cs_trace_rx_burst(bool start)
{
	cs__trace_rx_ts = start && cs_trace_enabled() ? cs_trace_clock() : 0;
}

/* The stamp of a frame received now: the burst's, else the clock. */
static inline cs_ns_t cs_trace_rx_clock(void)
{
	return cs__trace_rx_ts ? cs__trace_rx_ts : cs_trace_clock();
}

/**
 * cs_trace_init - set up @nrings rings of @events events each (rounded up
 * to a power of two) and switch tracing on when @on
 * Returns: 0, -EINVAL or -ENOMEM.
 */
int cs_trace_init(unsigned nrings, uint64_t events, bool on);

/* cs_trace_fini - switch tracing off and free the rings (no producer may
 * run any more) */
void cs_trace_fini(void);

/* cs_trace_set - switch recording on or off (rings kept) */
void cs_trace_set(bool on);

/* cs_trace_nrings - rings taken by a producer so far */
unsigned cs_trace_nrings(void);

/**
 * cs_trace_ring_info - name and thread id of ring @i
 * Returns: 0, or -ENOENT.
 */
int cs_trace_ring_info(unsigned i, char *name, size_t len, int *tid);

/**
 * cs_trace_copy - copy the newest events of ring @i that no writer can
 * have overwritten while they were copied, oldest first, at most @max
 * @lost: set to the events the ring no longer holds (overwritten)
 * Returns: the number copied, or -ENOENT.
 */
long cs_trace_copy(unsigned i, struct cs_trace_ev *out, size_t max,
		   uint64_t *lost);

/* cs_trace_kind_name - "tx", "retx", ...; "?" for an unknown kind */
const char *cs_trace_kind_name(unsigned kind);
const char *cs_trace_retx_name(unsigned cause);
const char *cs_trace_stall_name(unsigned cause);

#endif
