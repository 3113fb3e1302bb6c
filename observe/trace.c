/* SPDX-License-Identifier: MIT */
/* The timeline recorder's rings (observe/trace.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "observe/metrics.h"
#include "observe/trace.h"

atomic_bool cs__trace_on;
_Thread_local struct cs_trace_ring *cs__trace_tls;
_Thread_local cs_ns_t cs__trace_now;
_Thread_local cs_ns_t cs__trace_rx_ts;

static struct cs_trace_ring rings[CS_TRACE_MAX_RINGS];
static unsigned nrings_max;
static atomic_uint nrings_taken;
/* a ring's name and tid are readable once this many are published */
static atomic_uint nrings_ready;

struct cs_trace_ring *cs__trace_attach(void)
{
	unsigned i = atomic_fetch_add(&nrings_taken, 1);
	struct cs_trace_ring *r;

	if (i >= nrings_max)
		return NULL; /* counted past the end: stays NULL for good */
	r = &rings[i];
	cs_obs_thread_label(r->name, sizeof(r->name), i);
	r->tid = (int)gettid();
	cs__trace_tls = r;
	/* publish in order: the reader walks 0 .. ready - 1 */
	while (atomic_load(&nrings_ready) != i)
		;
	atomic_store(&nrings_ready, i + 1);
	return r;
}

int cs_trace_init(unsigned n, uint64_t events, bool on)
{
	uint64_t size = 1;

	if (!n || n > CS_TRACE_MAX_RINGS || events < 2 || events > 1ull << 26)
		return -EINVAL;
	while (size < events)
		size <<= 1;
	for (unsigned i = 0; i < n; i++) {
		rings[i].ev = calloc(size, sizeof(struct cs_trace_ev));
		if (!rings[i].ev) {
			while (i--)
				free(rings[i].ev);
			return -ENOMEM;
		}
		rings[i].mask = size - 1;
		atomic_init(&rings[i].head, 0);
	}
	nrings_max = n;
	atomic_store(&nrings_taken, 0);
	atomic_store(&nrings_ready, 0);
	atomic_store(&cs__trace_on, on);
	return 0;
}

void cs_trace_fini(void)
{
	atomic_store(&cs__trace_on, false);
	for (unsigned i = 0; i < nrings_max; i++) {
		free(rings[i].ev);
		rings[i].ev = NULL;
	}
	nrings_max = 0;
}

void cs_trace_set(bool on)
{
	atomic_store(&cs__trace_on, on && nrings_max);
}

unsigned cs_trace_nrings(void)
{
	return atomic_load(&nrings_ready);
}

int cs_trace_ring_info(unsigned i, char *name, size_t len, int *tid)
{
	if (i >= cs_trace_nrings())
		return -ENOENT;
	snprintf(name, len, "%s", rings[i].name);
	*tid = rings[i].tid;
	return 0;
}

long cs_trace_copy(unsigned i, struct cs_trace_ev *out, size_t max,
		   uint64_t *lost)
{
	const struct cs_trace_ring *r;
	uint64_t h1, h2, from, size, n = 0;

	if (i >= cs_trace_nrings())
		return -ENOENT;
	r = &rings[i];
	size = r->mask + 1;
	h1 = atomic_load_explicit(&r->head, memory_order_acquire);
	from = h1 > size ? h1 - size : 0;
	if (h1 - from > max)
		from = h1 - max;
	for (uint64_t k = from; k < h1; k++)
		out[n++] = r->ev[k & r->mask];
	atomic_thread_fence(memory_order_acquire);
	h2 = atomic_load_explicit(&r->head, memory_order_relaxed);
	/* the writer may be filling slot h2 (= event h2 - size) now */
	if (h2 + 1 > from + size) {
		uint64_t cut = h2 + 1 - size - from;

		if (cut > n)
			cut = n;
		memmove(out, out + cut, (n - cut) * sizeof(*out));
		n -= cut;
		from += cut;
	}
	if (lost)
		*lost = from;
	return (long)n;
}

const char *cs_trace_kind_name(unsigned kind)
{
	static const char *const names[CS_TR_KINDS] = {
		[CS_TR_OP_POST] = "op_post", [CS_TR_OP_DONE] = "op_done",
		[CS_TR_TX] = "tx",	     [CS_TR_RX] = "rx",
		[CS_TR_RETX] = "retx",	     [CS_TR_STALL] = "stall",
		[CS_TR_T_POST] = "post",     [CS_TR_T_DONE] = "complete",
	};

	return kind < CS_TR_KINDS && names[kind] ? names[kind] : "?";
}

const char *cs_trace_retx_name(unsigned cause)
{
	static const char *const n[] = { "rto", "sack", "tlp" };

	return cause < 3 ? n[cause] : "?";
}

const char *cs_trace_stall_name(unsigned cause)
{
	static const char *const n[] = { "window", "credit", "pacing" };

	return cause < 3 ? n[cause] : "?";
}
