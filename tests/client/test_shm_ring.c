// SPDX-License-Identifier: MIT
/* Shared-memory SPSC ring: semantics, hostile headers, two-process stress. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collstack/types.h"
#include "internal/log.h"
#include "shm_ring.h"

/* A region allocated to the exact byte so ASan sees any overrun. */
static void *region(unsigned slot_size, unsigned count, size_t *len)
{
	*len = cs_ring_region_size(slot_size, count);
	cr_assert_neq(*len, 0);
	void *m = aligned_alloc(CS_CACHE_LINE, *len);

	cr_assert_not_null(m);
	cr_assert_eq(cs_ring_format(m, *len, slot_size, count), 0);
	return m;
}

static void pair(void *m, size_t len, struct cs_ring *p, struct cs_ring *c)
{
	cr_assert_eq(cs_ring_attach(p, m, len, CS_RING_PRODUCER, 0), 0);
	cr_assert_eq(cs_ring_attach(c, m, len, CS_RING_CONSUMER, 0), 0);
}

Test(shm_ring, geometry)
{
	void *m = aligned_alloc(CS_CACHE_LINE, 4096);

	cr_assert_eq(cs_ring_region_size(64, 8), 3 * 64 + 8 * 64);
	cr_assert_eq(cs_ring_region_size(64, 6), 0, "count not a power of 2");
	cr_assert_eq(cs_ring_region_size(12, 8), 0, "size not 8-aligned");
	cr_assert_eq(cs_ring_region_size(0, 8), 0);
	cr_assert_eq(cs_ring_region_size(8, 1), 0);
	cr_assert_eq(cs_ring_format(m, 4096, 64, 6), -EINVAL);
	cr_assert_eq(cs_ring_format(m, 4096, 64, 64), -ENOSPC);
	cr_assert_eq(cs_ring_format((char *)m + 8, 4000, 8, 8), -EINVAL);
	free(m);
}

Test(shm_ring, empty_full_wrap)
{
	struct cs_ring p, c;
	size_t len;
	void *m = region(16, 8, &len);
	uint64_t in[2 * 12], out[2 * 12];

	pair(m, len, &p, &c);
	memset(out, 0xa5, sizeof(out));
	for (unsigned i = 0; i < 24; i++)
		in[i] = 1000 + i;
	cr_assert_eq(cs_ring_dequeue_burst(&c, out, 4), 0, "empty");
	cr_assert_eq(cs_ring_enqueue_burst(&p, in, 12), 8, "full at 8");
	cr_assert_eq(cs_ring_count(&p), 8);
	cr_assert_eq(cs_ring_count(&c), 8);
	cr_assert_eq(cs_ring_enqueue_burst(&p, in, 1), 0, "full");
	cr_assert_eq(cs_ring_dequeue_burst(&c, out, 5), 5);
	cr_assert_arr_eq(out, in, 5 * 16);
	/* 4 more wrap around the end of the slot array. */
	cr_assert_eq(cs_ring_enqueue_burst(&p, in + 16, 4), 4);
	cr_assert_eq(cs_ring_dequeue_burst(&c, out, 12), 7, "partial");
	cr_assert_arr_eq(out, in + 10, 3 * 16);
	cr_assert_arr_eq(out + 6, in + 16, 4 * 16);
	cr_assert_eq(cs_ring_dequeue_burst(&c, out, 1), 0, "empty again");
	cr_assert_eq(cs_ring_error(&p), 0);
	cr_assert_eq(cs_ring_error(&c), 0);
	free(m);
}

Test(shm_ring, many_wraps_random_bursts)
{
	struct cs_ring p, c;
	size_t len;
	void *m = region(8, 16, &len);
	uint64_t buf[64], next_in = 0, next_out = 0, rng = 7;

	pair(m, len, &p, &c);
	for (int it = 0; it < 100000; it++) {
		unsigned n = (unsigned)(cs_rand_next(&rng) % 40);

		for (unsigned i = 0; i < n; i++)
			buf[i] = next_in + i;
		next_in += cs_ring_enqueue_burst(&p, buf, n);
		cr_assert_leq(next_in - next_out, 16);
		n = (unsigned)(cs_rand_next(&rng) % 40);
		n = cs_ring_dequeue_burst(&c, buf, n);
		for (unsigned i = 0; i < n; i++)
			cr_assert_eq(buf[i], next_out + i);
		next_out += n;
	}
	cr_assert_gt(next_out, 100000);
	free(m);
}

Test(shm_ring, zero_copy_reserve_peek)
{
	struct cs_ring p, c;
	size_t len;
	void *m = region(8, 8, &len);
	uint64_t *w;
	const uint64_t *rd;

	pair(m, len, &p, &c);
	cr_assert_eq(cs_ring_reserve(&p, 6, (void **)&w), 6);
	for (int i = 0; i < 6; i++)
		w[i] = 10 + i;
	cr_assert_eq(cs_ring_peek(&c, 8, (const void **)&rd), 0, "uncommitted");
	cs_ring_commit(&p, 6);
	cr_assert_eq(cs_ring_peek(&c, 8, (const void **)&rd), 6);
	cr_assert_eq(rd[5], 15);
	cs_ring_release(&c, 6);
	/* index 6: only 2 contiguous slots before the end of the array */
	cr_assert_eq(cs_ring_reserve(&p, 8, (void **)&w), 2);
	w[0] = 1;
	w[1] = 2;
	cs_ring_commit(&p, 2);
	cr_assert_eq(cs_ring_reserve(&p, 8, (void **)&w), 6, "wrapped run");
	cr_assert_eq((void *)w, (void *)c.slots);
	cr_assert_eq(cs_ring_peek(&c, 8, (const void **)&rd), 2);
	cr_assert_eq(rd[1], 2);
	free(m);
}

static void expect_attach(void *m, size_t len, int want, unsigned slot_size)
{
	struct cs_ring r;

	cr_assert_eq(cs_ring_attach(&r, m, len, CS_RING_CONSUMER, slot_size),
		     want);
}

Test(shm_ring, corrupted_header_rejected)
{
	size_t len;
	void *m = region(64, 16, &len);
	struct cs_ring_hdr *h = m, save = *h;

	expect_attach(m, len, 0, 64);
	expect_attach(m, len, -EINVAL, 32); /* unexpected size */
	expect_attach(m, len - 64, -ENOSPC, 0); /* slots past len */
	expect_attach(m, 100, -ENOSPC, 0);
	expect_attach((char *)m + 8, len - 8, -EINVAL, 0); /* misaligned */
	h->magic ^= 1;
	expect_attach(m, len, -EPROTO, 0);
	*h = save;
	h->version = 2;
	expect_attach(m, len, -EPROTO, 0);
	*h = save;
	h->slot_count = 24;
	expect_attach(m, len, -EINVAL, 0);
	*h = save;
	h->slot_count = 32;
	expect_attach(m, len, -ENOSPC, 0);
	*h = save;
	h->slot_count = 1u << 31;
	expect_attach(m, len, -EINVAL, 0);
	*h = save;
	h->slot_size = 60;
	expect_attach(m, len, -EINVAL, 0);
	*h = save;
	h->slots_off = 8; /* slots over the header */
	expect_attach(m, len, -EINVAL, 0);
	*h = save;
	h->slots_off = UINT64_MAX - 7; /* overflow bait */
	expect_attach(m, len, -ENOSPC, 0);
	*h = save;
	atomic_store(&h->prod, 17); /* 17 filled of 16 */
	expect_attach(m, len, -EPROTO, 0);
	*h = save;
	free(m);
}

Test(shm_ring, corrupted_indices_stay_in_bounds)
{
	struct cs_ring p, c;
	size_t len;
	void *m = region(64, 16, &len);
	struct cs_ring_hdr *h = m;
	uint8_t buf[64 * 64];

	pair(m, len, &p, &c);
	cr_assert_eq(cs_ring_enqueue_burst(&p, buf, 3), 3);
	/* The producer claims more than the ring holds. */
	atomic_store(&h->prod, 3 + 16 + 1);
	cr_assert_eq(cs_ring_dequeue_burst(&c, buf, 64), 0);
	cr_assert_eq(cs_ring_error(&c), CS_ERR_PROTO);
	cr_assert_eq(cs_ring_dequeue_burst(&c, buf, 1), 0, "sticky");

	/* The consumer claims to be ahead of the producer. */
	cr_assert_eq(cs_ring_attach(&c, m, len, CS_RING_CONSUMER, 0), -EPROTO);
	atomic_store(&h->prod, 3);
	atomic_store(&h->cons, 1000);
	cr_assert_eq(cs_ring_enqueue_burst(&p, buf, 64), 0);
	cr_assert_eq(cs_ring_error(&p), CS_ERR_PROTO);

	/*
	 * Random hostile indices, including legal-looking ones near 2^64:
	 * every burst is bounded by the capacity and masked, so ASan (the
	 * region is allocated to the byte) never sees an overrun.
	 */
	uint64_t rng = 42;

	cs_log_level = CS_LOG_ERR; /* thousands of expected warnings */

	for (int i = 0; i < 20000; i++) {
		struct cs_ring r;
		uint64_t base = cs_rand_next(&rng);
		uint64_t d = cs_rand_next(&rng) % 40;

		atomic_store(&h->prod, base + (i & 1 ? d : 0));
		atomic_store(&h->cons, base + (i & 1 ? 0 : d));
		if (cs_ring_attach(&r, m, len,
				   i & 2 ? CS_RING_PRODUCER : CS_RING_CONSUMER,
				   64))
			continue;
		atomic_store(&h->prod, base + cs_rand_next(&rng) % 64);
		atomic_store(&h->cons, base + cs_rand_next(&rng) % 64 - 32);
		unsigned n = r.role == CS_RING_PRODUCER
				     ? cs_ring_enqueue_burst(&r, buf, 64)
				     : cs_ring_dequeue_burst(&r, buf, 64);
		cr_assert_leq(n, 16);
	}
	free(m);
}

Test(shm_ring, memfd_segments)
{
	int fd;
	void *m, *m2;
	size_t len = 0;

	cr_assert_eq(cs_shm_create("test", 5000, &fd, &m), 0);
	cr_assert_eq(cs_ring_format(m, 8192, 64, 64), 0);
	cr_assert_eq(ftruncate(fd, 4096), -1, "sealed against shrinking");
	cr_assert_eq(cs_shm_map(fd, &len, &m2), 0);
	cr_assert_eq(len, 8192);
	cr_assert_eq(((struct cs_ring_hdr *)m2)->magic, CS_RING_MAGIC);
	len = 1 << 20;
	cr_assert_eq(cs_shm_map(fd, &len, &m2), -ENOSPC);
	cs_shm_unmap(m, 8192);
	close(fd);

	/* An unsealed memfd could be truncated under us: refused. */
	fd = memfd_create("unsealed", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	len = 0;
	cr_assert_eq(cs_shm_map(fd, &len, &m2), -EPERM);
	close(fd);
	len = 0;
	cr_assert_eq(cs_shm_map(-1, &len, &m2), -EINVAL);
}

/*
 * Two processes: the parent produces N items {seq, value} in random bursts,
 * the child consumes them in random bursts; both keep a running checksum
 * and the child checks the sequence. 10 M items in every build, ASan
 * included (about 1.5 s there on an idle 2-core machine).
 */
#define STRESS_ITEMS 10000000ull

struct stress_result {
	uint64_t sum;
	uint64_t count;
	uint64_t bad_seq;
};

static uint64_t mix(uint64_t sum, uint64_t seq, uint64_t v)
{
	return (sum ^ v) * 0x100000001b3ull + seq;
}

Test(shm_ring, two_process_stress, .timeout = 240)
{
	enum { SLOTS = 1024, BURST = 32 };
	size_t rlen = cs_ring_region_size(16, SLOTS);
	size_t seglen = rlen + 4096;
	struct stress_result *res;
	struct cs_ring p;
	uint64_t buf[2 * BURST], sum = 0, seq = 0, rng = 1;
	void *m;
	int fd, status;
	pid_t pid;

	cr_assert_eq(cs_shm_create("stress", seglen, &fd, &m), 0);
	cr_assert_eq(cs_ring_format(m, rlen, 16, SLOTS), 0);
	res = (struct stress_result *)((char *)m + rlen);

	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct cs_ring c;
		uint64_t cbuf[2 * BURST], csum = 0, next = 0, bad = 0;
		uint64_t crng = 2;
		size_t l = 0;
		void *cm;

		/* Map the segment afresh from the fd, as the sidecar would. */
		if (cs_shm_map(fd, &l, &cm) ||
		    cs_ring_attach(&c, cm, rlen, CS_RING_CONSUMER, 16))
			_exit(3);
		while (next < STRESS_ITEMS) {
			unsigned want = 1 + cs_rand_next(&crng) % BURST;
			unsigned n = cs_ring_dequeue_burst(&c, cbuf, want);

			if (n == 0) {
				if (cs_ring_error(&c))
					_exit(4);
				sched_yield();
				continue;
			}
			for (unsigned i = 0; i < n; i++) {
				if (cbuf[2 * i] != next)
					bad++;
				csum = mix(csum, cbuf[2 * i], cbuf[2 * i + 1]);
				next++;
			}
		}
		res = (struct stress_result *)((char *)cm + rlen);
		res->sum = csum;
		res->count = next;
		res->bad_seq = bad;
		_exit(0);
	}

	cr_assert_eq(cs_ring_attach(&p, m, rlen, CS_RING_PRODUCER, 16), 0);
	while (seq < STRESS_ITEMS) {
		unsigned n = 1 + cs_rand_next(&rng) % BURST, done;

		n = (unsigned)CS_MIN((uint64_t)n, STRESS_ITEMS - seq);
		for (unsigned i = 0; i < n; i++) {
			buf[2 * i] = seq + i;
			buf[2 * i + 1] = cs_rand_next(&rng);
		}
		done = cs_ring_enqueue_burst(&p, buf, n);
		for (unsigned i = 0; i < done; i++)
			sum = mix(sum, buf[2 * i], buf[2 * i + 1]);
		/* Re-offer the rest next round with fresh values. */
		seq += done;
		if (done < n)
			sched_yield();
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "consumer failed, status %d", status);
	cr_assert_eq(res->count, STRESS_ITEMS);
	cr_assert_eq(res->bad_seq, 0);
	cr_assert_eq(res->sum, sum, "checksums differ: %llx vs %llx",
		     (unsigned long long)res->sum, (unsigned long long)sum);
	cr_assert_eq(cs_ring_error(&p), 0);
	cs_shm_unmap(m, seglen);
	close(fd);
}
