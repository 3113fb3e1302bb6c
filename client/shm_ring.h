/* SPDX-License-Identifier: MIT */
/* Single-producer/single-consumer rings of fixed-size slots in shared memory */
#ifndef CS_CLIENT_SHM_RING_H
#define CS_CLIENT_SHM_RING_H

/*
 * A ring lives in a region of a shared mapping (usually a memfd segment
 * mapped by a trainer and by the sidecar). The region starts with a header:
 *
 *   line 0  magic, layout version, slot size, slot count, slot offset
 *           (written once by cs_ring_format, read-only afterwards)
 *   line 1  the producer index (written by the producer only)
 *   line 2  the consumer index (written by the consumer only)
 *   slots   slot_count * slot_size bytes, from hdr + slots_off
 *
 * Shared memory holds offsets, never pointers. Indices are free-running
 * 64-bit counters; a slot is at (index & mask) * slot_size.
 *
 * Each side keeps its own index in its private struct cs_ring and only
 * *publishes* it to shared memory; it never reads it back. The other side's
 * index is read with acquire semantics and cached locally so that a burst
 * touches the peer's cache line only when the cached value says the ring is
 * full (producer) or empty (consumer), as in Caladan's lrpc and DPDK's
 * rte_ring.
 *
 * The peer is untrusted (a trainer may be buggy or hostile): the geometry is
 * copied out of the header once at attach time and never re-read, every slot
 * index is masked, and a peer index that claims more than the ring can hold
 * is reported as a protocol error (cs_ring_error) instead of being used.
 *
 * Ordering: the producer writes slots, then store-releases its index; the
 * consumer load-acquires that index, reads slots, then store-releases its
 * own index, which the producer load-acquires before reusing those slots.
 *
 * Only SPSC is provided. The trainer IPC gives every trainer its own
 * submission and completion ring pair, so each ring has exactly one writer
 * process; several threads of one trainer serialise in libcollstack before
 * touching the submission ring. An MPSC variant would add a CAS per burst
 * and per-slot sequence numbers for nothing the IPC needs.
 */

#include <assert.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "internal/util.h"

#define CS_RING_MAGIC 0x31474e4952534325ull /* "%CSRING1" little-endian */
#define CS_RING_LAYOUT_VERSION 1u
#define CS_RING_SLOT_ALIGN 8u /* slot sizes are multiples */
#define CS_RING_MAX_SLOTS (1u << 24)
#define CS_RING_MAX_SLOT_SIZE (1u << 16)

/* Shared-memory header. Its layout is part of the IPC ABI. */
struct cs_ring_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t slot_size;
	uint32_t slot_count;
	uint32_t flags; /* reserved, 0 */
	uint64_t slots_off; /* offset of slot 0 from the header start */
	uint64_t region_len; /* header + slots, bytes */

	alignas(CS_CACHE_LINE) _Atomic uint64_t prod; /* next index to fill */
	alignas(CS_CACHE_LINE) _Atomic uint64_t cons; /* next to drain */
};

static_assert(offsetof(struct cs_ring_hdr, prod) == CS_CACHE_LINE,
	      "producer index on its own cache line");
static_assert(offsetof(struct cs_ring_hdr, cons) == 2 * CS_CACHE_LINE,
	      "consumer index on its own cache line");
static_assert(sizeof(struct cs_ring_hdr) == 3 * CS_CACHE_LINE,
	      "ring header is three cache lines");
static_assert(sizeof(_Atomic uint64_t) == 8, "64-bit ring indices");

/* Which side of the ring this process plays. */
enum cs_ring_role {
	CS_RING_PRODUCER = 1,
	CS_RING_CONSUMER = 2,
};

/* Private, per-process view of a ring (never in shared memory). */
struct cs_ring {
	struct cs_ring_hdr *hdr;
	uint8_t *slots;
	uint32_t slot_size;
	uint32_t mask; /* slot_count - 1 */
	uint32_t capacity; /* slot_count */
	enum cs_ring_role role;
	uint64_t idx; /* own index: prod or cons, private copy */
	uint64_t peer_cache; /* last value read of the peer's index */
	int err; /* sticky: CS_ERR_PROTO once the peer lied */
};

/**
 * cs_ring_region_size - bytes needed for a ring of the given geometry
 * @slot_size: bytes per slot (multiple of CS_RING_SLOT_ALIGN)
 * @slot_count: slots (power of two)
 *
 * Returns: the size, a multiple of CS_CACHE_LINE; 0 for a bad geometry.
 */
size_t cs_ring_region_size(unsigned slot_size, unsigned slot_count);

/**
 * cs_ring_format - write an empty ring header into a region
 * @mem: region start, CS_CACHE_LINE aligned
 * @len: region length; at least cs_ring_region_size()
 * @slot_size: bytes per slot (multiple of CS_RING_SLOT_ALIGN, <= 64 KiB)
 * @slot_count: power of two, 2 .. CS_RING_MAX_SLOTS
 *
 * Returns: 0, or -EINVAL for a bad geometry or misaligned region, -ENOSPC
 * if @len is too small.
 */
int cs_ring_format(void *mem, size_t len, unsigned slot_size,
		   unsigned slot_count);

/**
 * cs_ring_attach - validate a ring header and open one side of it
 * @r: the private ring view to fill
 * @mem: region start (CS_CACHE_LINE aligned)
 * @len: bytes of @mem that are mapped and belong to this ring
 * @role: CS_RING_PRODUCER or CS_RING_CONSUMER
 * @slot_size: the slot size the caller expects; 0 accepts any valid size
 *
 * The header is untrusted: magic, layout version, geometry and offsets are
 * checked against @len, and the geometry is copied into @r once.
 *
 * Returns: 0, -EPROTO for a wrong magic or version, -EINVAL for a bad or
 * unexpected geometry or alignment, -ENOSPC if the slots run past @len.
 */
int cs_ring_attach(struct cs_ring *r, void *mem, size_t len,
		   enum cs_ring_role role, unsigned slot_size);

/**
 * cs_shm_create - create, size, seal and map a memfd segment
 * @name: memfd name (shows in /proc/PID/fd)
 * @len: size in bytes (rounded up to the page size)
 * @fd: out: the memfd (close-on-exec)
 * @mem: out: a MAP_SHARED read-write mapping of all of it
 *
 * The segment is sealed against shrinking and growing, so a peer cannot
 * truncate it under the other side's mapping (which would SIGBUS).
 *
 * Returns: 0 or a negative errno.
 */
int cs_shm_create(const char *name, size_t len, int *fd, void **mem);

/**
 * cs_shm_map - map a memfd received from a peer
 * @fd: the memfd
 * @len: in: the minimum size needed (0: any); out: the mapped size
 * @mem: out: a MAP_SHARED read-write mapping of the whole file
 *
 * Refuses a file that is not sealed against shrinking (-EPERM).
 *
 * Returns: 0, -EPERM, -ENOSPC if smaller than *@len, or a negative errno.
 */
int cs_shm_map(int fd, size_t *len, void **mem);

/**
 * cs_shm_unmap - unmap a segment mapped by cs_shm_create or cs_shm_map
 * @mem: the mapping
 * @len: its length
 */
void cs_shm_unmap(void *mem, size_t len);

/* Slow path of the fast paths below: the peer's index is impossible. */
void cs__ring_corrupt(struct cs_ring *r, uint64_t peer);

/**
 * cs_ring_error - whether the peer was caught corrupting the ring
 * @r: ring
 *
 * Returns: 0, or CS_ERR_PROTO (sticky) once the peer's index was impossible;
 * the ring then moves nothing more.
 */
static inline int cs_ring_error(const struct cs_ring *r)
{
	return r->err;
}

/* Slots the producer may fill now, re-reading the consumer if needed. */
static inline unsigned cs__ring_free(struct cs_ring *r, unsigned want)
{
	uint64_t used = r->idx - r->peer_cache;
	uint64_t cons;

	if (r->capacity - used >= want)
		return want;
	cons = atomic_load_explicit(&r->hdr->cons, memory_order_acquire);
	used = r->idx - cons;
	if (unlikely(used > r->capacity)) {
		cs__ring_corrupt(r, cons);
		return 0;
	}
	r->peer_cache = cons;
	return (unsigned)CS_MIN((uint64_t)want, r->capacity - used);
}

/* Slots the consumer may drain now, re-reading the producer if needed. */
static inline unsigned cs__ring_avail(struct cs_ring *r, unsigned want)
{
	uint64_t avail = r->peer_cache - r->idx;
	uint64_t prod;

	if (avail >= want)
		return want;
	prod = atomic_load_explicit(&r->hdr->prod, memory_order_acquire);
	avail = prod - r->idx;
	if (unlikely(avail > r->capacity)) {
		cs__ring_corrupt(r, prod);
		return 0;
	}
	r->peer_cache = prod;
	return (unsigned)CS_MIN((uint64_t)want, avail);
}

/* Copy @n slots between the ring (from index @idx) and @buf. */
static inline void cs__ring_copy(struct cs_ring *r, uint64_t idx, void *buf,
				 unsigned n, bool to_ring)
{
	uint32_t first = (uint32_t)idx & r->mask;
	uint32_t part = CS_MIN(n, r->capacity - first);
	size_t sz = r->slot_size;
	uint8_t *slot = r->slots + (size_t)first * sz;
	uint8_t *b = (uint8_t *)buf;

	if (to_ring) {
		memcpy(slot, b, part * sz);
		if (n > part)
			memcpy(r->slots, b + part * sz, (n - part) * sz);
	} else {
		memcpy(b, slot, part * sz);
		if (n > part)
			memcpy(b + part * sz, r->slots, (n - part) * sz);
	}
}

/**
 * cs_ring_enqueue_burst - copy up to @n slots into the ring
 * @r: a ring attached as CS_RING_PRODUCER
 * @slots: @n * slot_size bytes
 * @n: slots offered
 *
 * Returns: the number of slots enqueued (0 .. @n), 0 also after a
 * protocol error.
 */
static inline unsigned cs_ring_enqueue_burst(struct cs_ring *r,
					     const void *slots, unsigned n)
{
	if (unlikely(r->err))
		return 0;
	n = cs__ring_free(r, n);
	if (n == 0)
		return 0;
	cs__ring_copy(r, r->idx, (void *)slots, n, true);
	r->idx += n;
	atomic_store_explicit(&r->hdr->prod, r->idx, memory_order_release);
	return n;
}

/**
 * cs_ring_dequeue_burst - copy up to @n slots out of the ring
 * @r: a ring attached as CS_RING_CONSUMER
 * @slots: room for @n * slot_size bytes
 * @n: slots wanted
 *
 * Returns: the number of slots dequeued (0 .. @n), 0 also after a
 * protocol error.
 */
static inline unsigned cs_ring_dequeue_burst(struct cs_ring *r, void *slots,
					     unsigned n)
{
	if (unlikely(r->err))
		return 0;
	n = cs__ring_avail(r, n);
	if (n == 0)
		return 0;
	cs__ring_copy(r, r->idx, slots, n, false);
	r->idx += n;
	atomic_store_explicit(&r->hdr->cons, r->idx, memory_order_release);
	return n;
}

/**
 * cs_ring_reserve - zero copy: find up to @n contiguous free slots
 * @r: a ring attached as CS_RING_PRODUCER
 * @n: slots wanted
 * @first: out: the first slot (valid when the return value is > 0)
 *
 * Fill the slots, then publish them with cs_ring_commit(). The run stops at
 * the end of the slot array, so ask again after a short count.
 *
 * Returns: the number of contiguous slots reserved (0 .. @n).
 */
static inline unsigned cs_ring_reserve(struct cs_ring *r, unsigned n,
				       void **first)
{
	uint32_t pos = (uint32_t)r->idx & r->mask;

	if (unlikely(r->err))
		return 0;
	n = cs__ring_free(r, CS_MIN(n, r->capacity - pos));
	*first = r->slots + (size_t)pos * r->slot_size;
	return n;
}

/**
 * cs_ring_commit - publish @n slots filled after cs_ring_reserve()
 * @r: producer ring
 * @n: at most what the last cs_ring_reserve() returned
 */
static inline void cs_ring_commit(struct cs_ring *r, unsigned n)
{
	r->idx += n;
	atomic_store_explicit(&r->hdr->prod, r->idx, memory_order_release);
}

/**
 * cs_ring_peek - zero copy: find up to @n contiguous filled slots
 * @r: a ring attached as CS_RING_CONSUMER
 * @n: slots wanted
 * @first: out: the first slot (valid when the return value is > 0)
 *
 * The slots stay owned by the consumer until cs_ring_release(). Their
 * contents are written by the untrusted peer: copy a descriptor out before
 * validating it, or the peer could change it between check and use.
 *
 * Returns: the number of contiguous filled slots (0 .. @n).
 */
static inline unsigned cs_ring_peek(struct cs_ring *r, unsigned n,
				    const void **first)
{
	uint32_t pos = (uint32_t)r->idx & r->mask;

	if (unlikely(r->err))
		return 0;
	n = cs__ring_avail(r, CS_MIN(n, r->capacity - pos));
	*first = r->slots + (size_t)pos * r->slot_size;
	return n;
}

/**
 * cs_ring_release - hand @n peeked slots back to the producer
 * @r: consumer ring
 * @n: at most what the last cs_ring_peek() returned
 */
static inline void cs_ring_release(struct cs_ring *r, unsigned n)
{
	r->idx += n;
	atomic_store_explicit(&r->hdr->cons, r->idx, memory_order_release);
}

/**
 * cs_ring_count - slots currently filled, as seen from this side
 * @r: ring (either side)
 *
 * Returns: a value in 0 .. capacity (clamped if the peer's index is bad).
 */
static inline unsigned cs_ring_count(const struct cs_ring *r)
{
	uint64_t p, c;

	if (r->role == CS_RING_PRODUCER) {
		p = r->idx;
		c = atomic_load_explicit(&r->hdr->cons, memory_order_acquire);
	} else {
		p = atomic_load_explicit(&r->hdr->prod, memory_order_acquire);
		c = r->idx;
	}
	return (unsigned)CS_MIN(p - c, (uint64_t)r->capacity);
}

#endif
