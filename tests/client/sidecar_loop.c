/* SPDX-License-Identifier: MIT */
/* A minimal sidecar main loop around the IPC server, for tests and examples. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#include "sidecar_loop.h"

/* Idle polls before the loop starts sleeping, and how long it sleeps. */
#define LOOP_IDLE_SPINS 256
#define LOOP_IDLE_SLEEP_NS 50000
#define LOOP_SOCK_POLL_NS 200000
/* Busy mode: idle polls before each further one yields the CPU. */
#define LOOP_BUSY_FREE 4

static cs_ns_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * CS_NS_PER_S + (cs_ns_t)ts.tv_nsec;
}

/*
 * Idle without a backend tick: sleep in poll(2) with no timeout until a
 * trainer acts (cs_ipc_server_sleep_prepare). Nothing else wakes the
 * loop, so a trainer that failed to wake a sleeping sidecar hangs its
 * test (cs_wait times out) instead of being rescued by a timer. SIGTERM
 * and SIGINT stay blocked outside the sleep, which they end (ppoll's
 * mask), so a stop is never lost between the check and the sleep.
 */
static int sleep_on_fds(struct cs_ipc_server *srv, struct pollfd *pfd,
			const sigset_t *open)
{
	int n = cs_ipc_server_sleep_prepare(srv, pfd);
	cs_ns_t at = cs_ipc_server_next_deadline(srv), now;
	struct timespec ts;

	/* ... or until a local match times out (ipc.match_deadline) */
	if (n && at) {
		now = now_ns();
		at = at > now ? at - now : 0;
		ts = (struct timespec){ (time_t)(at / CS_NS_PER_S),
					(long)(at % CS_NS_PER_S) };
	}
	if (n)
		ppoll(pfd, (nfds_t)n, at ? &ts : NULL, open);
	cs_ipc_server_sleep_done(srv);
	return n;
}

int cs_test_sidecar_loop(const char *path, volatile sig_atomic_t *stop,
			 const struct cs_ipc_backend *be,
			 int (*tick)(struct cs_ipc_server *srv, void *ctx))
{
	struct cs_ipc_cfg cfg;
	int ret;

	ret = cs_cfg_defaults(cs_ipc_cfg_table, cs_ipc_cfg_table_len, &cfg);
	if (ret)
		return ret;
	snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s", path);
	return cs_test_sidecar_loop_cfg(&cfg, stop, be, tick);
}

int cs_test_sidecar_loop_cfg(const struct cs_ipc_cfg *base,
			     volatile sig_atomic_t *stop,
			     const struct cs_ipc_backend *be,
			     int (*tick)(struct cs_ipc_server *srv, void *ctx))
{
	struct cs_ipc_server *srv;
	struct cs_ipc_cfg cfg = *base;
	unsigned idle = 0, idle_spins = LOOP_IDLE_SPINS;
	const char *busy = getenv("COLLSTACK_SIDECAR_BUSY");
	struct pollfd *pfd = NULL;
	sigset_t stops, old, open;
	bool yield = false;
	int ret;

	/* Benchmarks of the polling path: never sleep; "yield": never
	 * sleep, but yield the CPU when idle (more pollers than cores). */
	if (busy && (*busy == '1' || !strcmp(busy, "yield")))
		idle_spins = ~0u;
	if (busy && !strcmp(busy, "yield"))
		yield = true;

	cfg.sock_poll_interval = LOOP_SOCK_POLL_NS;
	ret = cs_ipc_server_create(&cfg, be, &srv);
	if (ret)
		return ret;
	if (!busy && !tick) {
		pfd = calloc(1 + (size_t)cfg.max_trainers, sizeof(*pfd));
		if (!pfd) {
			cs_ipc_server_destroy(srv);
			return -ENOMEM;
		}
		sigemptyset(&stops);
		sigaddset(&stops, SIGTERM);
		sigaddset(&stops, SIGINT);
		sigprocmask(SIG_BLOCK, &stops, &old);
		open = old;
		sigdelset(&open, SIGTERM);
		sigdelset(&open, SIGINT);
	}
	while (!*stop) {
		ret = cs_ipc_server_poll(srv, now_ns());
		if (ret < 0)
			break;
		if (tick)
			ret += tick(srv, be ? be->ctx : NULL);
		if (ret > 0) {
			idle = 0;
			continue;
		}
		if (yield) {
			/* after a few idle polls let a runnable trainer
			 * have the CPU */
			if (++idle > LOOP_BUSY_FREE)
				sched_yield();
			continue;
		}
		if (++idle >= idle_spins && pfd) {
			if (sleep_on_fds(srv, pfd, &open))
				idle = 0;
		} else if (idle >= idle_spins) {
			struct timespec ts = { 0, LOOP_IDLE_SLEEP_NS };

			nanosleep(&ts, NULL);
		}
	}
	if (pfd) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		free(pfd);
	}
	cs_ipc_server_destroy(srv);
	return ret < 0 ? ret : 0;
}
