/* SPDX-License-Identifier: MIT */
/* Polling lcores: pinned threads, busy and adaptive poll loops. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>

#define CS_LOG_MODULE "lcore"
#include "internal/log.h"
#include "dataplane/lcore.h"

#define LC(f) offsetof(struct cs_lcore_conf, f)

const struct cs_cfg_entry cs_lcore_cfg[] = {
	{ "lcore.poll", CS_CFG_STR, LC(poll), "auto", CS_CFG_NO_BOUNDS,
	  "busy (spin: a core per queue), adaptive (spin, then wait up to "
	  "lcore.sleep when idle: for several sidecars per core), or auto "
	  "(busy on a PCI NIC, adaptive on vdevs and udp)" },
	{ "lcore.cpus", CS_CFG_STR, LC(cpus), "", CS_CFG_NO_BOUNDS,
	  "CPUs for the polling lcores, e.g. \"2,3\"; empty: CPUs of the "
	  "port's NUMA node, spread by node.rank" },
	{ "lcore.pin", CS_CFG_STR, LC(pin), "auto", CS_CFG_NO_BOUNDS,
	  "pin each lcore to its CPU (lcore.cpus, else one of the port's "
	  "NUMA node spread by node.rank): on, off, or auto (busy lcores "
	  "only)" },
	{ "lcore.spin", CS_CFG_U32, LC(spin), "2000", 0, 100000000,
	  "adaptive: idle polls without yielding before lcore.yield, on "
	  "ports whose wait is a plain nap (memif, tap, af_xdp with several "
	  "queues)" },
	{ "lcore.spin_wake", CS_CFG_U32, LC(spin_wake), "0", 0, 100000000,
	  "adaptive: the same on ports whose wait ends when a frame "
	  "arrives (af_packet, af_xdp with one queue, udp): none, since on "
	  "a shared machine an lcore that spins without yielding delays the "
	  "sidecar that has work" },
	{ "lcore.yield", CS_CFG_NS, LC(yield_ns), "200us", 0, 1e9,
	  "adaptive: after the idle polls, keep polling this long since the "
	  "last work, yielding the CPU between polls, before waiting: a "
	  "waiting lcore needs the scheduler to wake it, which on a shared "
	  "machine costs tens of microseconds per hand-off (0: wait at once)" },
	{ "lcore.sleep", CS_CFG_NS, LC(sleep_ns), "50us", 1000, 1e9,
	  "adaptive: longest wait when idle; the wait ends early when a "
	  "frame arrives (af_packet, udp) or new work is handed over" },
	{ "lcore.quiet_after", CS_CFG_NS, LC(quiet_after), "20ms", 0, 1e11,
	  "adaptive: after this long without work ..." },
	{ "lcore.quiet_sleep", CS_CFG_NS, LC(quiet_sleep_ns), "1ms", 1000, 1e9,
	  "... wait up to this long instead of lcore.sleep (an idle "
	  "sidecar then costs almost no CPU; timers may fire this late)" },
};

const size_t cs_lcore_cfg_len = CS_ARRAY_SIZE(cs_lcore_cfg);

bool cs_lcore_will_pin(const struct cs_lcore_conf *conf, enum cs_poll_mode mode)
{
	return !strcmp(conf->pin, "on") ||
	       (!strcmp(conf->pin, "auto") && mode == CS_POLL_BUSY);
}

int cs_lcore_conf_check(const struct cs_lcore_conf *conf, char *err, size_t len)
{
	static const char *const polls[] = { "auto", "busy", "adaptive" };
	static const char *const pins[] = { "auto", "on", "off" };
	bool poll_ok = false, pin_ok = false;

	for (unsigned i = 0; i < CS_ARRAY_SIZE(polls); i++)
		poll_ok |= !strcmp(conf->poll, polls[i]);
	for (unsigned i = 0; i < CS_ARRAY_SIZE(pins); i++)
		pin_ok |= !strcmp(conf->pin, pins[i]);
	if (!poll_ok) {
		snprintf(err, len,
			 "lcore.poll: '%s' is not busy, adaptive or auto",
			 conf->poll);
		return -EINVAL;
	}
	if (!pin_ok) {
		snprintf(err, len, "lcore.pin: '%s' is not on, off or auto",
			 conf->pin);
		return -EINVAL;
	}
	return 0;
}

/* Parse a kernel cpulist ("0-3,8,10-11") into @set. */
static int parse_cpulist(const char *s, cpu_set_t *set)
{
	CPU_ZERO(set);
	while (*s && *s != '\n') {
		char *end;
		long a = strtol(s, &end, 10), b;

		if (end == s || a < 0 || a >= CPU_SETSIZE)
			return -EINVAL;
		b = a;
		s = end;
		if (*s == '-') {
			b = strtol(s + 1, &end, 10);
			if (end == s + 1 || b < a || b >= CPU_SETSIZE)
				return -EINVAL;
			s = end;
		}
		for (long c = a; c <= b; c++)
			CPU_SET((int)c, set);
		if (*s == ',')
			s++;
		else if (*s && *s != '\n')
			return -EINVAL;
	}
	return 0;
}

static int nth_cpu(const cpu_set_t *set, unsigned n)
{
	int count = CPU_COUNT(set), seen = 0;

	if (!count)
		return -1;
	n %= (unsigned)count;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, set) && (unsigned)seen++ == n)
			return c;
	return -1;
}

int cs_lcore_pick_cpu(const struct cs_lcore_conf *conf, int numa,
		      unsigned index, unsigned salt, char *why, size_t len)
{
	cpu_set_t allowed, node, both;
	char path[96], list[1024];
	FILE *f;
	int cpu;

	if (sched_getaffinity(0, sizeof(allowed), &allowed)) {
		snprintf(why, len, "affinity unknown: not pinned");
		return -1;
	}
	if (conf->cpus[0]) {
		cpu_set_t want;
		char *copy = strdup(conf->cpus);

		/* "2,3" is a cpulist; commas between single CPUs. */
		if (!copy || parse_cpulist(copy, &want)) {
			free(copy);
			snprintf(why, len, "bad lcore.cpus '%s': not pinned",
				 conf->cpus);
			return -1;
		}
		free(copy);
		cpu = nth_cpu(&want, index);
		snprintf(why, len, "lcore.cpus %s, lcore %u", conf->cpus,
			 index);
		return cpu;
	}
	if (numa >= 0) {
		snprintf(path, sizeof(path),
			 "/sys/devices/system/node/node%d/cpulist", numa);
		f = fopen(path, "r");
		if (f && fgets(list, sizeof(list), f) &&
		    !parse_cpulist(list, &node)) {
			fclose(f);
			CPU_AND(&both, &node, &allowed);
			if (CPU_COUNT(&both)) {
				cpu = nth_cpu(&both, index + salt);
				snprintf(why, len,
					 "a CPU of NUMA node %d (the port's), "
					 "%d usable there, lcore %u + rank %u",
					 numa, CPU_COUNT(&both), index, salt);
				return cpu;
			}
		} else if (f) {
			fclose(f);
		}
	}
	cpu = nth_cpu(&allowed, index + salt);
	snprintf(why, len,
		 "port NUMA node %s: any of the %d allowed CPUs, lcore %u + "
		 "rank %u",
		 numa < 0 ? "unknown (virtual device)" : "has none",
		 CPU_COUNT(&allowed), index, salt);
	return cpu;
}

enum cs_poll_mode cs_lcore_poll_mode(const struct cs_lcore_conf *conf,
				     const struct cs_port *port)
{
	static const char *const vdevs[] = { "af_packet", "af_xdp", "memif",
					     "tap" };

	if (!strcmp(conf->poll, "busy"))
		return CS_POLL_BUSY;
	if (!strcmp(conf->poll, "adaptive"))
		return CS_POLL_ADAPTIVE;
	if (strcmp(port->conf.type, "dpdk"))
		return CS_POLL_ADAPTIVE;
	for (unsigned i = 0; i < CS_ARRAY_SIZE(vdevs); i++)
		if (!strcmp(port->conf.dev, vdevs[i]))
			return CS_POLL_ADAPTIVE;
	return CS_POLL_BUSY; /* a real NIC */
}

/* This thread's time away from its port before the current round
 * (cs_lcore_away()). */
static _Thread_local cs_ns_t lcore_away;

cs_ns_t cs_lcore_away(void)
{
	return lcore_away;
}

static void *lcore_main(void *arg)
{
	struct cs_lcore *lc = arg;
	uint32_t idle = 0;
	cs_ns_t last_work = cs_lcore_now();
	cs_ns_t prev = 0, waited = 0;

	/* A busy lcore owns its CPU. An adaptive one shares CPUs with other
	 * sidecars, and pinned to one it could not move off a CPU that
	 * something else saturates: unless lcore.pin=on it keeps the
	 * process's CPU set. */
	if (lc->cpu >= 0 && lc->pin) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(lc->cpu, &set);
		if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
			CS_WARN("lcore %u: cannot pin to CPU %d", lc->q,
				lc->cpu);
	}
	lc->init_err = cs_port_thread_init(lc->port);
	atomic_store(&lc->running, true);
	if (lc->init_err)
		return NULL;
	while (!atomic_load_explicit(&lc->stop, memory_order_relaxed)) {
		cs_ns_t now = cs_lcore_now();
		const struct cs_lcore_side *side;
		cs_ns_t ask, t0;
		unsigned did;
		int wfd;

		/* away since the last round began, less the wait it asked
		 * for: its work, yields and any time descheduled */
		lcore_away =
			prev && now - prev > waited ? now - prev - waited : 0;
		prev = now;
		waited = 0;

		/* cs_lcore_set_side(NULL): once this moved on twice, the
		 * old side is not used any more */
		atomic_fetch_add(&lc->rounds, 1);
		side = atomic_load(&lc->side);
		did = lc->fn(lc->arg, lc->q, now);
		if (side)
			did += side->fn(side->arg, lc->q, now);
		lc->loops++;
		if (did || lc->mode == CS_POLL_BUSY) {
			idle = 0;
			last_work = now;
			continue;
		}
		if (++idle < lc->spin)
			continue;
		if (now - last_work < lc->yield_ns) {
			/* whatever else is runnable goes first */
			sched_yield();
			continue;
		}
		wfd = lc->kick_fd;
		if (side && side->prepare) {
			wfd = side->prepare(side->arg);
			if (wfd < 0) { /* new side work: no wait */
				idle = 0;
				last_work = now;
				continue;
			}
		}
		atomic_store(&lc->waiting, true);
		ask = now - last_work >= lc->quiet_after ? lc->quiet_sleep_ns
							 : lc->sleep_ns;
		t0 = cs_lcore_now();
		cs_port_wait(lc->port, lc->q, ask, wfd);
		atomic_store_explicit(&lc->waiting, false,
				      memory_order_relaxed);
		waited = CS_MIN(cs_lcore_now() - t0, ask);
		if (side && side->done)
			side->done(side->arg);
		if (lc->kick_fd >= 0) {
			uint64_t v;

			if (read(lc->kick_fd, &v, sizeof(v)) > 0) {
				idle = 0; /* kicked: new work, poll a while */
				last_work = cs_lcore_now();
			}
		}
		lc->idle_waits++;
	}
	atomic_store(&lc->exited, true);
	return NULL;
}

int cs_lcore_start(struct cs_lcore *lc, struct cs_port *port, unsigned q,
		   enum cs_poll_mode mode, const struct cs_lcore_conf *conf,
		   int cpu, cs_lcore_fn fn, void *arg)
{
	int ret;

	memset(lc, 0, sizeof(*lc));
	lc->port = port;
	lc->q = q;
	lc->fn = fn;
	lc->arg = arg;
	lc->mode = mode;
	lc->spin = cs_port_wakes_on_rx(port, q) ? conf->spin_wake : conf->spin;
	lc->sleep_ns = conf->sleep_ns;
	lc->yield_ns = conf->yield_ns;
	lc->quiet_after = conf->quiet_after;
	lc->quiet_sleep_ns = conf->quiet_sleep_ns;
	lc->cpu = cpu;
	lc->pin = cs_lcore_will_pin(conf, mode);
	atomic_init(&lc->stop, false);
	atomic_init(&lc->running, false);
	atomic_init(&lc->waiting, false);
	atomic_init(&lc->side, NULL);
	atomic_init(&lc->rounds, 0);
	atomic_init(&lc->exited, false);
	/* without it a kick is seen at the end of the nap */
	lc->kick_fd = mode == CS_POLL_ADAPTIVE
			      ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
			      : -1;
	ret = pthread_create(&lc->thread, NULL, lcore_main, lc);
	if (ret) {
		if (lc->kick_fd >= 0)
			close(lc->kick_fd);
		lc->kick_fd = -1;
		return -ret;
	}
	pthread_setname_np(lc->thread, "cs-lcore"); /* top -H, perf */
	while (!atomic_load(&lc->running))
		sched_yield();
	if (lc->init_err) {
		pthread_join(lc->thread, NULL);
		atomic_store(&lc->running, false);
		if (lc->kick_fd >= 0)
			close(lc->kick_fd);
		lc->kick_fd = -1;
		return lc->init_err;
	}
	return 0;
}

void cs_lcore_kick(struct cs_lcore *lc)
{
	uint64_t one = 1;

	if (!atomic_load_explicit(&lc->running, memory_order_acquire) ||
	    lc->kick_fd < 0 || !atomic_load(&lc->waiting))
		return;
	if (write(lc->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		CS_WARN("lcore %u: kick: %s", lc->q, strerror(errno));
}

void cs_lcore_set_side(struct cs_lcore *lc, const struct cs_lcore_side *side)
{
	uint_fast64_t r;

	atomic_store(&lc->side, side);
	if (side) {
		cs_lcore_kick(lc);
		return;
	}
	if (!atomic_load(&lc->running))
		return;
	/* a round that began before the store may still run the old one */
	r = atomic_load(&lc->rounds);
	while (atomic_load(&lc->rounds) < r + 2 && atomic_load(&lc->running) &&
	       !atomic_load(&lc->exited)) {
		cs_lcore_kick(lc);
		usleep(10);
	}
}

bool cs_lcore_is_self(const struct cs_lcore *lc)
{
	return atomic_load(&lc->running) &&
	       pthread_equal(pthread_self(), lc->thread);
}

void cs_lcore_stop(struct cs_lcore *lc)
{
	if (!atomic_load(&lc->running))
		return; /* never started, or stopped already */
	atomic_store(&lc->stop, true);
	cs_lcore_kick(lc);
	pthread_join(lc->thread, NULL);
	atomic_store(&lc->running, false);
	if (lc->kick_fd >= 0)
		close(lc->kick_fd);
	lc->kick_fd = -1;
}
