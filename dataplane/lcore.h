/* SPDX-License-Identifier: MIT */
/*
 * Polling lcores: one thread per port queue calling a work function in a
 * loop with the current time. A busy lcore is pinned to a CPU of the
 * port's NUMA node; an adaptive one keeps the process's CPU set, because it
 * shares CPUs with other sidecars and must be free to move.
 *
 * Poll modes: busy (spin forever: lowest latency, one core per queue) and
 * adaptive (spin while there is work; after lcore.spin idle polls, poll
 * with sched_yield() until lcore.yield has passed since the last work,
 * then wait up to lcore.sleep on the port — io_uring wait on the udp
 * port, a sleep on others — so several sidecars can share a core).
 */
#ifndef CS_DATAPLANE_LCORE_H
#define CS_DATAPLANE_LCORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "dataplane/port.h"
#include "internal/config.h"
#include "internal/util.h"

enum cs_poll_mode {
	CS_POLL_BUSY = 0,
	CS_POLL_ADAPTIVE = 1,
};

struct cs_lcore_conf {
	char poll[CS_CFG_STR_MAX]; /* "busy", "adaptive" or "auto" */
	char cpus[CS_CFG_STR_MAX]; /* "" (auto) or a list "2,3" */
	char pin[CS_CFG_STR_MAX]; /* "auto" (busy only), "on" or "off" */
	uint32_t spin; /* idle polls before waiting */
	uint32_t spin_wake; /* the same where the wait ends on receive */
	cs_ns_t yield_ns; /* then poll and yield this long since work */
	cs_ns_t sleep_ns; /* longest wait when idle */
	cs_ns_t quiet_after; /* no work this long: ... */
	cs_ns_t quiet_sleep_ns; /* ... wait up to this long instead */
};

extern const struct cs_cfg_entry cs_lcore_cfg[];
extern const size_t cs_lcore_cfg_len;

/*
 * The work function: poll queue @q once at time @now (ns, CLOCK_MONOTONIC).
 * Returns: how much it did (frames moved); 0 means idle.
 */
typedef unsigned (*cs_lcore_fn)(void *arg, unsigned q, cs_ns_t now);

/*
 * Second work run on the lcore thread (ipc.on_lcore: the trainer
 * service), after the work function each round. @prepare, if set, is
 * called before an adaptive lcore waits: it returns an fd to wait on
 * instead of the kick eventfd (one that also becomes readable on a kick,
 * e.g. an epoll set holding it), or a negative value: work came in, do
 * not wait. @done follows every such wait.
 */
struct cs_lcore_side {
	cs_lcore_fn fn;
	int (*prepare)(void *arg);
	void (*done)(void *arg);
	void *arg;
};

struct cs_lcore {
	pthread_t thread;
	struct cs_port *port;
	unsigned q;
	cs_lcore_fn fn;
	void *arg;
	enum cs_poll_mode mode;
	uint32_t spin;
	cs_ns_t yield_ns, sleep_ns;
	cs_ns_t quiet_after, quiet_sleep_ns;
	int cpu; /* the chosen CPU, -1: none */
	bool pin; /* pinned to @cpu */
	atomic_bool stop;
	atomic_bool running;
	int init_err;
	int kick_fd; /* eventfd: cs_lcore_kick() wakes a waiting lcore */
	atomic_bool waiting;
	/* cs_lcore_set_side() */
	_Atomic(const struct cs_lcore_side *) side;
	atomic_uint_fast64_t rounds; /* rounds begun */
	atomic_bool exited; /* out of its loop */
	/* written by the lcore only */
	uint64_t loops, idle_waits;
};

/* A cheap monotonic clock: clock_gettime() through the vDSO. */
static inline cs_ns_t cs_lcore_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * CS_NS_PER_S + (cs_ns_t)ts.tv_nsec;
}

/**
 * cs_lcore_will_pin - is an lcore of @mode pinned to its CPU (lcore.pin)?
 */
bool cs_lcore_will_pin(const struct cs_lcore_conf *conf,
		       enum cs_poll_mode mode);

/**
 * cs_lcore_conf_check - are lcore.poll and lcore.pin among their values?
 * @conf: lcore settings
 * @err: room for a message naming the key
 * @len: its size
 *
 * Returns: 0 or -EINVAL.
 */
int cs_lcore_conf_check(const struct cs_lcore_conf *conf, char *err,
			size_t len);

/**
 * cs_lcore_pick_cpu - choose the CPU for the @index-th lcore
 * @conf: lcore settings (an explicit lcore.cpus list wins)
 * @numa: the port's NUMA node, -1 when unknown
 * @index: lcore number in this process
 * @salt: spreads several processes over the CPUs (e.g. the node rank)
 * @why: receives a sentence saying why this CPU
 *
 * Returns: a CPU number, or -1 to leave the thread unpinned.
 */
int cs_lcore_pick_cpu(const struct cs_lcore_conf *conf, int numa,
		      unsigned index, unsigned salt, char *why, size_t len);

/**
 * cs_lcore_poll_mode - resolve "auto": busy on a PCI NIC, adaptive else
 */
enum cs_poll_mode cs_lcore_poll_mode(const struct cs_lcore_conf *conf,
				     const struct cs_port *port);

/**
 * cs_lcore_away - on an lcore thread, how long it was away from its port
 * before the current round: the time since the previous round began,
 * less the wait it asked for when idle (lcore.sleep), i.e. the previous
 * round's work, its yields and any time it was descheduled. 0 before the
 * second round and on any other thread.
 * Returns: ns
 */
cs_ns_t cs_lcore_away(void);

/**
 * cs_lcore_start - start polling queue @q of @port on a new thread
 * @lc: caller-owned state (must stay put until cs_lcore_stop)
 * Returns: 0, or a negative errno (thread creation, port thread init).
 */
int cs_lcore_start(struct cs_lcore *lc, struct cs_port *port, unsigned q,
		   enum cs_poll_mode mode, const struct cs_lcore_conf *conf,
		   int cpu, cs_lcore_fn fn, void *arg);

/**
 * cs_lcore_kick - wake the lcore if it waits (adaptive polling), e.g.
 * because another thread handed it new work; costs a system call only
 * then. Safe from any thread once cs_lcore_start() returned.
 * @lc: the lcore
 */
void cs_lcore_kick(struct cs_lcore *lc);

/**
 * cs_lcore_set_side - run @side on the lcore every round from now on
 * (NULL: no more). @side must stay put until it is taken off; once this
 * returns with NULL, the lcore no longer runs the old one. Not from the
 * lcore itself.
 */
void cs_lcore_set_side(struct cs_lcore *lc, const struct cs_lcore_side *side);

/**
 * cs_lcore_is_self - is the calling thread this lcore?
 */
bool cs_lcore_is_self(const struct cs_lcore *lc);

/**
 * cs_lcore_stop - ask the lcore to stop and join it (again: nothing)
 */
void cs_lcore_stop(struct cs_lcore *lc);

#endif
