/* SPDX-License-Identifier: MIT */
/* collstack bench-ring: SPSC shared-memory ring throughput across processes. */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/shm_ring.h"
#include "cmds.h"

#define BENCH_SLOT_SIZE 64
#define BENCH_DEF_ITEMS 50000000ull
#define BENCH_DEF_BATCH 32u
#define BENCH_DEF_SLOTS 1024u
#define BENCH_MAX_BATCH 1024u
/* Spin this many empty polls before yielding the core (shared machines). */
#define BENCH_SPIN_BEFORE_YIELD 64u

/* Written by the consumer into the segment after the ring. */
struct bench_shared {
	_Atomic uint64_t ready;
	uint64_t t_end_ns;
	uint64_t received;
	uint64_t sum;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * CS_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: collstack bench-ring [--items N] [--batch B] "
		"[--slots S]\n"
		"  Moves N 64-byte slots from this process to a forked "
		"consumer through an\n"
		"  SPSC ring in a memfd segment, in bursts of B, and "
		"prints slots/s.\n"
		"  --items N   slots to move (default %llu)\n"
		"  --batch B   burst size, 1..%u (default %u)\n"
		"  --slots S   ring slots, power of two (default %u)\n",
		BENCH_DEF_ITEMS, BENCH_MAX_BATCH, BENCH_DEF_BATCH,
		BENCH_DEF_SLOTS);
}

static void consume(void *m, size_t rlen, uint64_t items, unsigned batch)
{
	struct bench_shared *sh = (void *)((char *)m + rlen);
	uint64_t buf[BENCH_MAX_BATCH * BENCH_SLOT_SIZE / 8];
	uint64_t got = 0, sum = 0;
	unsigned idle = 0;
	struct cs_ring c;

	if (cs_ring_attach(&c, m, rlen, CS_RING_CONSUMER, BENCH_SLOT_SIZE))
		_exit(3);
	atomic_store_explicit(&sh->ready, 1, memory_order_release);
	while (got < items) {
		unsigned n = cs_ring_dequeue_burst(&c, buf, batch);

		if (n == 0) {
			if (cs_ring_error(&c))
				_exit(4);
			if (++idle >= BENCH_SPIN_BEFORE_YIELD) {
				idle = 0;
				sched_yield();
			}
			continue;
		}
		idle = 0;
		/* Touch every slot: the first word is its sequence number. */
		for (unsigned i = 0; i < n; i++)
			sum += buf[i * (BENCH_SLOT_SIZE / 8)];
		got += n;
	}
	sh->t_end_ns = now_ns();
	sh->received = got;
	sh->sum = sum;
	_exit(0);
}

int cs_cmd_bench_ring(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "items", required_argument, NULL, 'n' },
		{ "batch", required_argument, NULL, 'b' },
		{ "slots", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t items = BENCH_DEF_ITEMS, sent = 0, sum = 0, t0;
	uint64_t buf[BENCH_MAX_BATCH * BENCH_SLOT_SIZE / 8];
	unsigned batch = BENCH_DEF_BATCH, slots = BENCH_DEF_SLOTS, idle = 0;
	struct bench_shared *sh;
	struct cs_ring p;
	size_t rlen, seglen;
	int c, fd, status, ret = 1;
	pid_t pid;
	void *m;

	while ((c = getopt_long(argc, argv, "n:b:s:h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			items = strtoull(optarg, NULL, 0);
			break;
		case 'b':
			batch = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 's':
			slots = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	rlen = cs_ring_region_size(BENCH_SLOT_SIZE, slots);
	if (!items || !batch || batch > BENCH_MAX_BATCH || !rlen) {
		fprintf(stderr,
			"bench-ring: bad --items, --batch or --slots\n");
		return 2;
	}
	seglen = rlen + sizeof(*sh);
	ret = cs_shm_create("bench-ring", seglen, &fd, &m);
	if (ret) {
		fprintf(stderr, "bench-ring: memfd: %s\n", strerror(-ret));
		return 1;
	}
	cs_ring_format(m, rlen, BENCH_SLOT_SIZE, slots);
	sh = (void *)((char *)m + rlen);
	memset(buf, 0, sizeof(buf));

	pid = fork();
	if (pid < 0) {
		perror("bench-ring: fork");
		goto out_unmap;
	}
	if (pid == 0)
		consume(m, rlen, items, batch);

	if (cs_ring_attach(&p, m, rlen, CS_RING_PRODUCER, BENCH_SLOT_SIZE))
		goto out_kill;
	while (!atomic_load_explicit(&sh->ready, memory_order_acquire))
		sched_yield();
	t0 = now_ns();
	while (sent < items) {
		unsigned n = (unsigned)CS_MIN((uint64_t)batch, items - sent);

		for (unsigned i = 0; i < n; i++)
			buf[i * (BENCH_SLOT_SIZE / 8)] = sent + i;
		n = cs_ring_enqueue_burst(&p, buf, n);
		if (n == 0) {
			if (++idle >= BENCH_SPIN_BEFORE_YIELD) {
				idle = 0;
				sched_yield();
			}
			continue;
		}
		idle = 0;
		for (unsigned i = 0; i < n; i++)
			sum += sent + i;
		sent += n;
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "bench-ring: consumer failed (status %d)\n",
			status);
		goto out_unmap;
	}
	if (sh->received != items || sh->sum != sum) {
		fprintf(stderr, "bench-ring: data mismatch (%llu items)\n",
			(unsigned long long)sh->received);
		goto out_unmap;
	}
	{
		double s = (double)(sh->t_end_ns - t0) / 1e9;
		double rate = (double)items / s;

		printf("bench-ring: %llu slots of %u B, batch %u, ring %u "
		       "slots, 2 processes: %.3f s, %.2f Mslots/s, %.2f GB/s\n",
		       (unsigned long long)items, BENCH_SLOT_SIZE, batch, slots,
		       s, rate / 1e6, rate * BENCH_SLOT_SIZE / 1e9);
	}
	ret = 0;
	goto out_unmap;

out_kill:
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
out_unmap:
	cs_shm_unmap(m, seglen);
	close(fd);
	return ret;
}
