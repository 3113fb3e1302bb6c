/* SPDX-License-Identifier: MIT */
/*
 * Health metrics of a sidecar, exposed in Prometheus' text format
 * (observe/http.c serves them; the control socket's "metrics" request
 * returns the same text to `collstack top`).
 *
 * Each producing thread (a dataplane lcore, the IPC thread) takes a slot
 * of its own on first use, as it takes a trace ring: counters it alone
 * writes (relaxed atomic adds on its own lines), and a snapshot of its
 * transport core's sessions that it publishes every CS_OBS_PUBLISH_NS
 * under a sequence counter (a seqlock: the writer never waits, a reader
 * retries). The exposition thread reads only these: it never touches the
 * core, and no lock is taken on the packet path.
 */
#ifndef CS_OBSERVE_METRICS_H
#define CS_OBSERVE_METRICS_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "internal/util.h"

#define CS_OBS_MAX_PEERS 64
#define CS_OBS_MAX_SLOTS 16
#define CS_OBS_NBUCKETS 19 /* histogram bounds, then +Inf */
#define CS_OBS_KINDS 8 /* trainer op kinds (CS_IPC_OP_*) */
#define CS_OBS_PUBLISH_NS (100 * 1000 * 1000ull)

/* The histograms' upper bounds, in seconds and in ns. */
extern const double cs_obs_bucket_s[CS_OBS_NBUCKETS];
extern const cs_ns_t cs_obs_bucket_ns[CS_OBS_NBUCKETS];

static inline unsigned cs_obs_bucket(cs_ns_t ns)
{
	unsigned i = 0;

	while (i < CS_OBS_NBUCKETS && ns > cs_obs_bucket_ns[i])
		i++;
	return i; /* CS_OBS_NBUCKETS: +Inf */
}

/* One peer's session counters as the core last published them. */
struct cs_obs_peer_snap {
	uint64_t tx_frames, tx_bytes, rx_frames, rx_bytes;
	uint64_t retx, fast_retx, tlp, timeouts, spurious, dup, stale;
	cs_ns_t srtt, min_rtt;
	uint32_t sessions; /* 0: no session to this peer */
};

struct cs_obs_hist {
	_Atomic uint64_t b[CS_OBS_NBUCKETS + 1]; /* not cumulative */
	_Atomic uint64_t sum_ns;
};

struct cs_obs_slot {
	/* written by the owning thread only */
	alignas(64) struct cs_obs_hist rtt[CS_OBS_MAX_PEERS];
	uint64_t rtt_seen[CS_OBS_MAX_PEERS][4]; /* samples taken, per chan */
	_Atomic uint64_t stalls[CS_OBS_MAX_PEERS][3];
	_Atomic uint64_t ops[CS_OBS_KINDS][2]; /* [kind][ok, failed] */
	struct cs_obs_hist op_lat[CS_OBS_KINDS];
	_Atomic int64_t pending; /* trainer ops posted, not completed */
	cs_ns_t next_pub;
	/* the published snapshot */
	alignas(64) _Atomic uint64_t seq; /* odd while it is written */
	struct cs_obs_peer_snap peer[CS_OBS_MAX_PEERS];
	int tid;
	char name[16];
};

extern atomic_bool cs__obs_on;
extern _Thread_local struct cs_obs_slot *cs__obs_tls;
struct cs_obs_slot *cs__obs_attach(void);

/**
 * cs_obs_slot_get - this thread's slot
 * Returns: it, or NULL when metrics are off or every slot is taken.
 */
static inline struct cs_obs_slot *cs_obs_slot_get(void)
{
	struct cs_obs_slot *s = cs__obs_tls;

	if (likely(s) ||
	    !atomic_load_explicit(&cs__obs_on, memory_order_relaxed))
		return s;
	return cs__obs_attach();
}

static inline void cs_obs_add(_Atomic uint64_t *c, uint64_t v)
{
	/* one writer: a plain load and store, atomic only for the reader */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) +
				      v,
			      memory_order_relaxed);
}

static inline void cs_obs_hist_add(struct cs_obs_hist *h, cs_ns_t ns)
{
	cs_obs_add(&h->b[cs_obs_bucket(ns)], 1);
	cs_obs_add(&h->sum_ns, ns);
}

/* cs_obs_enable - start (or stop) collecting; slots are static */
void cs_obs_enable(bool on);

/* cs_obs_nslots - slots taken so far */
unsigned cs_obs_nslots(void);

/* Publishing: between begin and end the thread fills s->peer[]. */
void cs_obs_publish_begin(struct cs_obs_slot *s);
void cs_obs_publish_end(struct cs_obs_slot *s);

/**
 * cs_obs_read_peers - a consistent copy of slot @i's published snapshot
 * Returns: 0, or -ENOENT.
 */
int cs_obs_read_peers(unsigned i, struct cs_obs_peer_snap *out);

/* cs_obs_slot_at - slot @i for reading its counters (NULL past the end) */
const struct cs_obs_slot *cs_obs_slot_at(unsigned i);

/**
 * cs_obs_write_metrics - the exposition text of every slot, summed over
 * slots per peer: per-peer frames, bytes, retransmissions by cause,
 * timeouts, duplicates, smoothed RTT and the RTT histogram, stalls by
 * cause; trainer operations by kind with their latency histogram
 * @kind_name: names of the trainer op kinds (index: CS_IPC_OP_*)
 * Returns: 0, or a negative errno from the stream.
 */
int cs_obs_write_metrics(FILE *out, const char *const *kind_name);

/* Helpers for the sidecar's own lines: "# HELP/# TYPE" once per name. */
void cs_obs_family(FILE *out, const char *name, const char *type,
		   const char *help);

/* cs_obs_thread_cpu - CPU seconds thread @tid of this process used, or a
 * negative value when /proc does not say */
double cs_obs_thread_cpu(int tid);

/* cs_obs_thread_label - "<pthread name>#<i>" of the calling thread */
void cs_obs_thread_label(char *out, size_t len, unsigned i);

#endif
