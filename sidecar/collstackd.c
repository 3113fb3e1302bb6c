/* SPDX-License-Identifier: MIT */
/*
 * collstackd: the per-node sidecar. Reads its config (a key = value file
 * and --set flags over the runtime config table), opens the port, starts
 * one polling lcore per port queue and serves the local control socket on
 * the main (control) thread until SIGTERM, SIGINT or a "quit" request.
 *
 * Readiness: <run_dir>/pid is written at start, <run_dir>/ready (one line:
 * "name rank ip udp_port mac") once the port and lcores are up and the
 * control socket listens. On shutdown the lcores stop, the port closes
 * (EAL cleans up its runtime folder) and the files are removed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cs_config.h"
#define CS_LOG_MODULE "collstackd"
#include "internal/log.h"
#include "internal/config.h"
#include "dataplane/driver.h"
#include "dataplane/lcore.h"
#include "dataplane/port.h"
#include "ctl.h"
#include "daemon.h"
#include "daemon_ipc.h"
#include "control/boot.h"
#include "observe/obs_sidecar.h" /* observe/ */

#define DC(f) offsetof(struct cs_daemon_conf, f)

static const struct cs_cfg_entry daemon_cfg[] = {
	{ "name", CS_CFG_STR, DC(port.name), "node0", CS_CFG_NO_BOUNDS,
	  "instance name: DPDK file prefix (cs-<name>), pool names, and the "
	  "run folder's last component" },
	{ "run_dir", CS_CFG_STR, DC(port.run_dir), "", CS_CFG_NO_BOUNDS,
	  "folder for ctl.sock, pid, ready (and memif.sock); empty: "
	  "/run/collstack/<name> as root, /tmp/collstack-<uid>/<name> else" },
	{ "node.rank", CS_CFG_U32, DC(rank), "0", 0, CS_DRV_MAX_PEERS - 1,
	  "this node's rank in the static address table" },
	{ "node.peers", CS_CFG_STR, DC(peers), "", CS_CFG_NO_BOUNDS,
	  "static address table: lines 'rank ip mac udp_port [name]' "
	  "(scripts/cluster.sh writes one); empty: no peers" },
	{ "log.level", CS_CFG_U32, DC(log_level), "2", 0, 3,
	  "0 errors, 1 warnings, 2 info, 3 debug" },
};

static void help(FILE *out)
{
	fprintf(out,
		"usage: collstackd [--config FILE] [--set KEY=VALUE]... "
		"[--help-config]\n\n"
		"The collstack sidecar. Settings come from the config table "
		"(defaults), then\nFILE (lines 'key = value', '#' comments), "
		"then each --set in order.\nSIGTERM or SIGINT stops it "
		"cleanly.\n");
}

static void help_config(FILE *out)
{
	fprintf(out, "collstackd configuration keys (file: 'key = value'; "
		     "flag: --set key=value)\n\nsidecar:\n");
	cs_cfg_help(daemon_cfg, CS_ARRAY_SIZE(daemon_cfg), out);
	fprintf(out, "\nport and fault shim (built-in port types: loop%s%s):\n",
		CS_HAVE_URING ? " udp" : "", CS_HAVE_DPDK ? " dpdk" : "");
	cs_cfg_help(cs_port_cfg, cs_port_cfg_len, out);
	fprintf(out, "\npolling lcores:\n");
	cs_cfg_help(cs_lcore_cfg, cs_lcore_cfg_len, out);
	cs_daemon_help_config(out);
	cs_daemon_boot_help(out);
	cs_daemon_ipc_help(out);
	cs_obs_help(out); /* observe/ */
}

/* Apply one key to whichever table has it. */
static int set_key(struct cs_daemon_conf *c, const char *key, const char *val,
		   char *err, size_t errlen)
{
	int ret;

	ret = cs_cfg_set(daemon_cfg, CS_ARRAY_SIZE(daemon_cfg), c, key, val,
			 err, errlen);
	if (ret != -ENOENT)
		return ret;
	ret = cs_cfg_set(cs_port_cfg, cs_port_cfg_len, &c->port, key, val, err,
			 errlen);
	if (!ret)
		ret = cs_port_conf_check(&c->port, err, errlen);
	if (ret != -ENOENT)
		return ret;
	ret = cs_cfg_set(cs_lcore_cfg, cs_lcore_cfg_len, &c->lcore, key, val,
			 err, errlen);
	if (!ret)
		ret = cs_lcore_conf_check(&c->lcore, err, errlen);
	if (ret != -ENOENT)
		return ret;
	ret = cs_daemon_boot_set_key(&c->boot, key, val, err, errlen);
	if (ret != -ENOENT)
		return ret;
	ret = cs_daemon_ipc_set_key(c, key, val, err, errlen);
	if (ret != -ENOENT)
		return ret;
	ret = cs_obs_set_key(key, val, err, errlen); /* observe/ */
	if (ret != -ENOENT)
		return ret;
	return cs_daemon_set_key(c, key, val, err, errlen);
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' ||
			 e[-1] == '\r'))
		*--e = 0;
	return s;
}

static int load_file(struct cs_daemon_conf *c, const char *path)
{
	char line[1024], err[256];
	unsigned lineno = 0;
	FILE *f = fopen(path, "r");

	if (!f) {
		fprintf(stderr, "collstackd: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#'), *eq, *k, *v;

		lineno++;
		if (hash)
			*hash = 0;
		k = trim(line);
		if (!*k)
			continue;
		eq = strchr(k, '=');
		if (!eq) {
			fprintf(stderr,
				"collstackd: %s:%u: expected "
				"'key = value'\n",
				path, lineno);
			fclose(f);
			return -EINVAL;
		}
		*eq = 0;
		v = trim(eq + 1);
		k = trim(k);
		if (set_key(c, k, v, err, sizeof(err))) {
			fprintf(stderr, "collstackd: %s:%u: %s\n", path, lineno,
				err);
			fclose(f);
			return -EINVAL;
		}
	}
	fclose(f);
	return 0;
}

static int parse_args(struct cs_daemon_conf *c, int argc, char **argv)
{
	char err[256];
	int ret;

	/* Pass 1: --config; pass 2: --set, so flags win over the file. */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			help(stdout);
			exit(0);
		}
		if (!strcmp(argv[i], "--help-config")) {
			help_config(stdout);
			exit(0);
		}
		if (!strcmp(argv[i], "--config") && i + 1 < argc) {
			ret = load_file(c, argv[++i]);
			if (ret)
				return ret;
		} else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
			i++;
		} else {
			fprintf(stderr, "collstackd: unknown argument '%s'\n\n",
				argv[i]);
			help(stderr);
			return -EINVAL;
		}
	}
	for (int i = 1; i < argc; i++) {
		char kv[1024], *eq;

		if (strcmp(argv[i], "--set") || i + 1 >= argc)
			continue;
		snprintf(kv, sizeof(kv), "%s", argv[++i]);
		eq = strchr(kv, '=');
		if (!eq) {
			fprintf(stderr,
				"collstackd: --set wants KEY=VALUE, "
				"got '%s'\n",
				kv);
			return -EINVAL;
		}
		*eq = 0;
		if (set_key(c, kv, eq + 1, err, sizeof(err))) {
			fprintf(stderr, "collstackd: --set: %s\n", err);
			return -EINVAL;
		}
	}
	return 0;
}

static int mkdir_p(const char *path)
{
	char tmp[CS_CFG_STR_MAX];

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

static int write_file(const char *dir, const char *name, const char *text)
{
	char path[CS_CFG_STR_MAX + 32], tmp[CS_CFG_STR_MAX + 40];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fputs(text, f);
	if (fclose(f))
		return -errno;
	return rename(tmp, path) ? -errno : 0; /* readers see it whole */
}

static void remove_file(const char *dir, const char *name)
{
	char path[CS_CFG_STR_MAX + 32];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
}

static int listen_ctl(const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, n;

	n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir,
		     CS_CTL_SOCK);
	if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	unlink(sa.sun_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16)) {
		n = -errno;
		close(fd);
		return n;
	}
	chmod(sa.sun_path, 0600);
	return fd;
}

static void reply_stats(struct cs_daemon *d, char *out, size_t len)
{
	struct cs_port_stats st;
	struct cs_drv_totals t;
	uint64_t loops = 0, waits = 0;

	cs_port_stats(d->port, &st);
	cs_drv_totals(&d->drv, &t);
	/* the lcores' own counters, read while they run (no tearing on
	 * an aligned 64-bit word) */
	for (unsigned q = 0; q < d->drv.nq; q++) {
		loops += __atomic_load_n(&d->lcores[q].loops, __ATOMIC_RELAXED);
		waits += __atomic_load_n(&d->lcores[q].idle_waits,
					 __ATOMIC_RELAXED);
	}
	snprintf(
		out, len,
		"ok rx_pkts=%llu rx_bytes=%llu tx_pkts=%llu tx_bytes=%llu "
		"rx_dropped=%llu rx_nombuf=%llu tx_errors=%llu "
		"rx_frames=%llu rx_foreign=%llu rx_malformed=%llu "
		"rx_unhandled=%llu tx_nobuf=%llu tx_zero_copy=%llu tx_gso=%llu "
		"rx_filtered=%llu rx_other_mac=%llu rx_gro=%llu "
		"f_dropped=%llu f_duplicated=%llu f_reordered=%llu "
		"f_delayed=%llu f_corrupted=%llu lcore_loops=%llu "
		"lcore_waits=%llu",
		(unsigned long long)st.rx_pkts, (unsigned long long)st.rx_bytes,
		(unsigned long long)st.tx_pkts, (unsigned long long)st.tx_bytes,
		(unsigned long long)st.rx_dropped,
		(unsigned long long)st.rx_nombuf,
		(unsigned long long)st.tx_errors,
		(unsigned long long)t.rx_frames,
		(unsigned long long)t.rx_foreign,
		(unsigned long long)t.rx_malformed,
		(unsigned long long)t.rx_unhandled,
		(unsigned long long)t.tx_nobuf,
		(unsigned long long)st.tx_zero_copy,
		(unsigned long long)st.tx_gso,
		(unsigned long long)st.rx_filtered,
		(unsigned long long)t.rx_other_mac,
		(unsigned long long)st.rx_gro, (unsigned long long)st.f_dropped,
		(unsigned long long)st.f_duplicated,
		(unsigned long long)st.f_reordered,
		(unsigned long long)st.f_delayed,
		(unsigned long long)st.f_corrupted, (unsigned long long)loops,
		(unsigned long long)waits);
}

bool cs_daemon_signalled(const struct cs_daemon *d)
{
	struct pollfd pfd = { .fd = d->sfd, .events = POLLIN };

	return d->sfd >= 0 && poll(&pfd, 1, 0) > 0;
}

/* Sleep, but return early when a stop signal is pending. */
static void sleep_ns(const struct cs_daemon *d, cs_ns_t ns)
{
	cs_ns_t end = cs_lcore_now() + ns;

	while (!cs_daemon_signalled(d) && cs_lcore_now() < end) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
}

/* "raw DST MS LEN": blast for MS milliseconds, then report. */
static void do_raw(struct cs_daemon *d, const char *args, char *out, size_t len)
{
	unsigned dst, ms, flen;
	struct cs_drv_totals t;
	cs_ns_t until;

	if (sscanf(args, "%u %u %u", &dst, &ms, &flen) != 3 || !ms ||
	    ms > 600000) {
		snprintf(out, len, "err usage: raw DST_RANK MS FRAME_LEN");
		return;
	}
	until = cs_lcore_now() + (cs_ns_t)ms * CS_NS_PER_MS;
	if (cs_drv_raw_start(&d->drv, dst, flen, until)) {
		snprintf(out, len,
			 "err bad peer %u or frame length %u (%u..%u)", dst,
			 flen, (unsigned)CS_DRV_HDR_LEN, d->port->frame_max);
		return;
	}
	/* Let the last frames of the peer's blast arrive too. */
	sleep_ns(d, (cs_ns_t)ms * CS_NS_PER_MS + 300 * CS_NS_PER_MS);
	cs_drv_totals(&d->drv, &t);
	snprintf(out, len,
		 "ok tx_pkts=%llu tx_bytes=%llu tx_ns=%llu rx_pkts=%llu "
		 "rx_bytes=%llu rx_ns=%llu tx_nobuf=%llu",
		 (unsigned long long)t.tx_raw_pkts,
		 (unsigned long long)t.tx_raw_bytes,
		 (unsigned long long)t.tx_raw_ns,
		 (unsigned long long)t.rx_raw_pkts,
		 (unsigned long long)t.rx_raw_bytes,
		 (unsigned long long)t.rx_raw_ns,
		 (unsigned long long)t.tx_nobuf);
}

/* Serve one connection: requests until the peer closes. */
static bool serve(struct cs_daemon *d, int fd)
{
	char req[CS_CTL_LINE], out[CS_CTL_LINE];
	bool quit = false;

	for (;;) {
		struct pollfd pfd[2] = { { .fd = fd, .events = POLLIN },
					 { .fd = d->sfd, .events = POLLIN } };

		/* Between requests, a stop signal ends the session. */
		if (quit || poll(pfd, 2, 10000) <= 0 || pfd[1].revents ||
		    cs_ctl_recv(fd, req, sizeof(req), 10000) < 0)
			break;
		char *args = strchr(req, ' ');

		if (args)
			*args++ = 0;
		else
			args = req + strlen(req);
		if (!strcmp(req, "ping")) {
			snprintf(out, sizeof(out),
				 "ok name=%s rank=%u frame_max=%u port=%s "
				 "peers=%u",
				 d->conf.port.name, d->conf.rank,
				 d->port->frame_max, d->conf.port.type,
				 d->drv.npeers);
			cs_daemon_boot_report(d, out, sizeof(out));
		} else if (!strcmp(req, "stats")) {
			reply_stats(d, out, sizeof(out));
			cs_daemon_boot_report(d, out, sizeof(out));
		} else if (!strcmp(req, "raw")) {
			do_raw(d, args, out, sizeof(out));
		} else if (!strcmp(req, "quit")) {
			snprintf(out, sizeof(out), "ok bye");
			quit = true;
		} else if (cs_obs_ctl(d, fd, req, args, out, sizeof(out)) !=
			   -ENOENT) { /* observe/: trace, metrics, flight */
			if (!out[0])
				continue; /* replied, with a body */
		} else if (cs_daemon_ctl(d, req, args, out, sizeof(out)) ==
			   -ENOENT) {
			snprintf(out, sizeof(out), "err unknown request '%s'",
				 req);
		}
		if (cs_ctl_send(fd, out))
			break;
	}
	return quit;
}

int main(int argc, char **argv)
{
	static struct cs_daemon d = { .sfd = -1 };
	struct cs_daemon_conf *c = &d.conf;
	char text[512], mac[24], why[256], ipbuf[32];
	struct pollfd pfd[2];
	sigset_t sigs;
	int sfd = -1, lfd = -1, ret = 1;
	unsigned nl = 0;

	if (cs_port_conf_defaults(&c->port) ||
	    cs_cfg_defaults(daemon_cfg, CS_ARRAY_SIZE(daemon_cfg), c) ||
	    cs_cfg_defaults(cs_lcore_cfg, cs_lcore_cfg_len, &c->lcore) ||
	    cs_daemon_conf_defaults(c) ||
	    cs_daemon_boot_conf_defaults(&c->boot) ||
	    cs_daemon_ipc_defaults(c) || cs_obs_conf_defaults()) /* observe/ */
		return 1;
	if (parse_args(c, argc, argv))
		return 2;
	cs_log_level = (int)c->log_level;
	if (!c->port.run_dir[0]) {
		char dir[2 * CS_CFG_STR_MAX];
		int n;

		if (geteuid() == 0)
			n = snprintf(dir, sizeof(dir), "/run/collstack/%s",
				     c->port.name);
		else
			n = snprintf(dir, sizeof(dir), "/tmp/collstack-%u/%s",
				     (unsigned)getuid(), c->port.name);
		if (n >= CS_CFG_STR_MAX) {
			CS_ERR("name '%s' is too long", c->port.name);
			return 2;
		}
		memcpy(c->port.run_dir, dir, (size_t)n + 1);
	}
	if (mkdir_p(c->port.run_dir)) {
		CS_ERR("cannot make run folder %s: %s", c->port.run_dir,
		       strerror(errno));
		return 1;
	}
	snprintf(text, sizeof(text), "%d\n", (int)getpid());
	write_file(c->port.run_dir, "pid", text);
	remove_file(c->port.run_dir, "ready");

	/* Every thread inherits the mask: signals reach only signalfd. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
	if (sfd < 0)
		goto out_files;
	d.sfd = sfd;

	if (cs_port_open(&c->port, &d.port))
		goto out_files;
	if (cs_drv_init(&d.drv, d.port, c->rank))
		goto out_port;
	atomic_init(&d.view.lost_rank, -1);
	atomic_init(&d.view.wake_fd, -1);
	if (cs_daemon_boot_enabled(&d)) { /* peers from the coordinator */
		/* heartbeats carry the trace clock: `collstack trace` aligns
		 * the timelines with their offsets (docs/observe.md) */
		cs_boot_set_stamp_clock(cs_obs_trace_clock);
		if (cs_daemon_boot_start(&d)) {
			ret = 3;
			goto out_port;
		}
	} else if (c->peers[0] && (ret = cs_drv_load_peers(&d.drv, c->peers))) {
		CS_ERR("node.peers %s: %s", c->peers, strerror(-ret));
		ret = 1;
		goto out_port;
	}
	ret = 1;
	if (cs_daemon_init(&d))
		goto out_port;
	d.mode = cs_lcore_poll_mode(&c->lcore, d.port);
	for (nl = 0; nl < d.drv.nq; nl++) {
		int cpu = cs_lcore_pick_cpu(&c->lcore, d.port->numa, nl,
					    c->rank, why, sizeof(why));

		if (cs_lcore_will_pin(&c->lcore, d.mode) && cpu >= 0)
			CS_INFO("lcore %u: queue %u, pinned to CPU %d (%s), "
				"%s polling",
				nl, nl, cpu, why,
				d.mode == CS_POLL_BUSY ? "busy" : "adaptive");
		else if (d.mode == CS_POLL_BUSY)
			CS_INFO("lcore %u: queue %u, busy polling, not pinned "
				"(lcore.pin=off; CPU %d: %s)",
				nl, nl, cpu, why);
		else
			CS_INFO("lcore %u: queue %u, adaptive polling, not "
				"pinned: shares the process's CPUs with other "
				"sidecars (lcore.pin=on or busy mode would take "
				"CPU %d: %s)",
				nl, nl, cpu, why);
		if (cs_lcore_start(&d.lcores[nl], d.port, nl, d.mode, &c->lcore,
				   cpu, cs_drv_poll, &d.drv)) {
			CS_ERR("lcore %u did not start", nl);
			goto out_lcores;
		}
	}
	if (cs_daemon_ipc_start(&d))
		goto out_lcores;
	if (cs_obs_start(&d)) /* observe/ */
		goto out_lcores;
	lfd = listen_ctl(c->port.run_dir);
	if (lfd < 0) {
		CS_ERR("control socket in %s: %s", c->port.run_dir,
		       strerror(-lfd));
		goto out_lcores;
	}
	cs_port_format_mac(d.port->mac, mac, sizeof(mac));
	inet_ntop(AF_INET, &d.port->ip, ipbuf, sizeof(ipbuf));
	snprintf(text, sizeof(text), "%s %u %s %u %s\n", c->port.name, c->rank,
		 ipbuf, d.port->udp_port, mac);
	write_file(c->port.run_dir, "ready", text);
	CS_INFO("ready: %s rank %u, %s port on %s:%u (mac %s), %u peer(s), "
		"control socket %s/%s",
		c->port.name, c->rank, c->port.type, ipbuf, d.port->udp_port,
		mac, d.drv.npeers, c->port.run_dir, CS_CTL_SOCK);

	pfd[0] = (struct pollfd){ .fd = sfd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = lfd, .events = POLLIN };
	for (;;) {
		int r = poll(pfd, 2, 1000);

		if (r < 0 && errno != EINTR)
			break;
		if (r > 0 && pfd[0].revents) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) == sizeof(si))
				CS_INFO("signal %u: shutting down",
					si.ssi_signo);
			break;
		}
		if (r > 0 && pfd[1].revents) {
			int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

			if (cfd >= 0) {
				bool quit = serve(&d, cfd);

				close(cfd);
				if (quit) {
					CS_INFO("quit requested");
					break;
				}
			}
		}
		cs_daemon_tick(&d);
		cs_obs_tick(&d); /* observe/: automatic flight records */
	}
	ret = 0;
	close(lfd);
	remove_file(c->port.run_dir, CS_CTL_SOCK);
out_lcores:
	remove_file(c->port.run_dir, "ready");
	cs_obs_stop(&d); /* observe/ */
	cs_daemon_ipc_stop(&d);
	while (nl--)
		cs_lcore_stop(&d.lcores[nl]);
	cs_daemon_fini(&d);
out_port:
	cs_daemon_boot_stop(&d);
	cs_port_close(d.port);
out_files:
	if (sfd >= 0)
		close(sfd);
	remove_file(c->port.run_dir, "pid");
	rmdir(c->port.run_dir); /* only if empty */
	CS_INFO("stopped");
	return ret;
}
