/* SPDX-License-Identifier: MIT */
/* Shared-memory rings: the slow path (format, attach, memfd segments). */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CS_LOG_MODULE "ring"
#include "collstack/types.h"
#include "internal/log.h"
#include "shm_ring.h"

static bool geometry_ok(unsigned slot_size, unsigned slot_count)
{
	if (slot_size == 0 || slot_size > CS_RING_MAX_SLOT_SIZE ||
	    slot_size % CS_RING_SLOT_ALIGN)
		return false;
	if (slot_count < 2 || slot_count > CS_RING_MAX_SLOTS ||
	    (slot_count & (slot_count - 1)))
		return false;
	return true;
}

size_t cs_ring_region_size(unsigned slot_size, unsigned slot_count)
{
	size_t len;

	if (!geometry_ok(slot_size, slot_count))
		return 0;
	len = sizeof(struct cs_ring_hdr) + (size_t)slot_size * slot_count;
	return CS_DIV_ROUND_UP(len, CS_CACHE_LINE) * CS_CACHE_LINE;
}

int cs_ring_format(void *mem, size_t len, unsigned slot_size,
		   unsigned slot_count)
{
	struct cs_ring_hdr *h = mem;
	size_t need = cs_ring_region_size(slot_size, slot_count);

	if (!need || !mem || (uintptr_t)mem % CS_CACHE_LINE)
		return -EINVAL;
	if (len < need)
		return -ENOSPC;
	memset(h, 0, sizeof(*h));
	h->version = CS_RING_LAYOUT_VERSION;
	h->slot_size = slot_size;
	h->slot_count = slot_count;
	h->slots_off = sizeof(*h);
	h->region_len = need;
	atomic_store_explicit(&h->prod, 0, memory_order_relaxed);
	atomic_store_explicit(&h->cons, 0, memory_order_relaxed);
	/* The magic goes last: a header with the magic is complete. */
	atomic_thread_fence(memory_order_release);
	h->magic = CS_RING_MAGIC;
	return 0;
}

int cs_ring_attach(struct cs_ring *r, void *mem, size_t len,
		   enum cs_ring_role role, unsigned slot_size)
{
	struct cs_ring_hdr *h = mem;
	uint32_t size, count;
	uint64_t off;

	memset(r, 0, sizeof(*r));
	if (!mem || (uintptr_t)mem % CS_CACHE_LINE ||
	    (role != CS_RING_PRODUCER && role != CS_RING_CONSUMER))
		return -EINVAL;
	if (len < sizeof(*h))
		return -ENOSPC;
	/* Read each field once: the peer may change them under us. */
	if (*(volatile uint64_t *)&h->magic != CS_RING_MAGIC ||
	    *(volatile uint32_t *)&h->version != CS_RING_LAYOUT_VERSION)
		return -EPROTO;
	atomic_thread_fence(memory_order_acquire);
	size = *(volatile uint32_t *)&h->slot_size;
	count = *(volatile uint32_t *)&h->slot_count;
	off = *(volatile uint64_t *)&h->slots_off;
	if (!geometry_ok(size, count) || (slot_size && size != slot_size))
		return -EINVAL;
	if (off < sizeof(*h) || off % CS_RING_SLOT_ALIGN)
		return -EINVAL;
	if (off > len || (uint64_t)size * count > len - off)
		return -ENOSPC;

	r->hdr = h;
	r->slots = (uint8_t *)mem + off;
	r->slot_size = size;
	r->capacity = count;
	r->mask = count - 1;
	r->role = role;
	if (role == CS_RING_PRODUCER) {
		r->idx = atomic_load_explicit(&h->prod, memory_order_acquire);
		r->peer_cache =
			atomic_load_explicit(&h->cons, memory_order_acquire);
	} else {
		r->idx = atomic_load_explicit(&h->cons, memory_order_acquire);
		r->peer_cache =
			atomic_load_explicit(&h->prod, memory_order_acquire);
	}
	/* Start from a consistent pair even if the peer scribbled first. */
	if (r->role == CS_RING_PRODUCER ? r->idx - r->peer_cache > count
					: r->peer_cache - r->idx > count)
		return -EPROTO;
	return 0;
}

cs_cold void cs__ring_corrupt(struct cs_ring *r, uint64_t peer)
{
	if (!r->err)
		CS_WARN("%s ring: peer index %llu impossible against own %llu "
			"(capacity %u); ring stopped",
			r->role == CS_RING_PRODUCER ? "producer" : "consumer",
			(unsigned long long)peer, (unsigned long long)r->idx,
			r->capacity);
	r->err = CS_ERR_PROTO;
}

int cs_shm_create(const char *name, size_t len, int *fd, void **mem)
{
	long page = sysconf(_SC_PAGESIZE);
	void *m;
	int f, ret;

	if (!len || !fd || !mem)
		return -EINVAL;
	len = CS_DIV_ROUND_UP(len, (size_t)page) * (size_t)page;
	f = memfd_create(name ? name : "collstack",
			 MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f < 0)
		return -errno;
	if (ftruncate(f, (off_t)len) < 0) {
		ret = -errno;
		goto out_close;
	}
	if (fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		ret = -errno;
		goto out_close;
	}
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	if (m == MAP_FAILED) {
		ret = -errno;
		goto out_close;
	}
	*fd = f;
	*mem = m;
	return 0;

out_close:
	close(f);
	return ret;
}

int cs_shm_map(int fd, size_t *len, void **mem)
{
	struct stat st;
	void *m;
	int seals;

	if (fd < 0 || !len || !mem)
		return -EINVAL;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		/* EINVAL: not a memfd, so it cannot be sealed */
		return errno == EINVAL ? -EPERM : -errno;
	if (!(seals & F_SEAL_SHRINK))
		return -EPERM;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size <= 0 || (size_t)st.st_size < *len)
		return -ENOSPC;
	m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	*len = (size_t)st.st_size;
	*mem = m;
	return 0;
}

void cs_shm_unmap(void *mem, size_t len)
{
	if (mem && len)
		munmap(mem, len);
}
