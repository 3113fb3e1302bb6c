/* SPDX-License-Identifier: MIT */
/* collstackd's wiring of the timeline, metrics and flight recorder. */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define CS_LOG_MODULE "observe"
#include "internal/config.h"
#include "internal/log.h"
#include "observe/clock.h"
#include "observe/flight.h"
#include "observe/http.h"
#include "observe/metrics.h"
#include "observe/obs_sidecar.h"
#include "observe/tjson.h"
#include "sidecar/daemon.h"
#include "sidecar/daemon_boot.h"
#include "control/boot.h"

struct obs_conf {
	bool trace;
	uint64_t events;
	uint32_t rings;
	double clock_offset;
	char listen[CS_CFG_STR_MAX];
	char flight_dir[CS_CFG_STR_MAX];
	uint64_t flight_after;
};

#define OC(f) offsetof(struct obs_conf, f)

static const struct cs_cfg_entry obs_cfg[] = {
	{ "trace.enable", CS_CFG_BOOL, OC(trace), "1", 0, 1,
	  "record the timeline (ops, frames, retransmissions, stalls, "
	  "trainer posts) in per-lcore rings; `collstack trace` collects "
	  "them (cost: BENCHMARKS.md)" },
	{ "trace.events", CS_CFG_U64, OC(events), "262144", 2, 16777216,
	  "events per ring (32 bytes each; rounded up to a power of two)" },
	{ "trace.rings", CS_CFG_U32, OC(rings), "4", 1, CS_TRACE_MAX_RINGS,
	  "rings set up (one per recording thread: lcores, IPC thread)" },
	{ "trace.clock_offset", CS_CFG_DOUBLE, OC(clock_offset), "0", -1e6, 1e6,
	  "seconds added to this sidecar's trace clock (tests of the "
	  "clock alignment)" },
	{ "flight.dir", CS_CFG_STR, OC(flight_dir), "auto", CS_CFG_NO_BOUNDS,
	  "where flight records are written on their own (an operation "
	  "past flight.auto_after here or on another sidecar, a lost "
	  "peer): 'auto' = the run folder's parent/flight (one folder for "
	  "every sidecar of scripts/cluster.sh), 'off' = never; read them "
	  "with `collstack doctor --from DIR`" },
	{ "flight.auto_after", CS_CFG_NS, OC(flight_after), "60s", 1e8, 3.6e12,
	  "an operation pending this long triggers the records (keep it "
	  "below ipc.match_deadline, which ends the operation)" },
	{ "metrics.listen", CS_CFG_STR, OC(listen), "", CS_CFG_NO_BOUNDS,
	  "IPv4:PORT of the Prometheus endpoint (GET /metrics); '*:9464' "
	  "every address; empty: no endpoint (the control socket's "
	  "'metrics' request still answers)" },
};

static struct obs_conf conf;
static struct cs_obs_http *http;

int cs_obs_conf_defaults(void)
{
	return cs_cfg_defaults(obs_cfg, CS_ARRAY_SIZE(obs_cfg), &conf);
}

int cs_obs_set_key(const char *key, const char *val, char *err, size_t len)
{
	int ret = cs_cfg_set(obs_cfg, CS_ARRAY_SIZE(obs_cfg), &conf, key, val,
			     err, len);
	unsigned char ip[4];
	unsigned port;

	if (!ret && !strcmp(key, "metrics.listen") && conf.listen[0] &&
	    cs_obs_parse_addr(conf.listen, ip, &port)) {
		snprintf(err, len,
			 "metrics.listen: '%s' is not IPv4:PORT (or *:PORT)",
			 val);
		return -EINVAL;
	}
	return ret;
}

void cs_obs_help(FILE *out)
{
	fprintf(out, "\ntimeline and metrics (observe/):\n");
	cs_cfg_help(obs_cfg, CS_ARRAY_SIZE(obs_cfg), out);
}

cs_ns_t cs_obs_trace_clock(void)
{
	return cs_lcore_now() + (cs_ns_t)(int64_t)(conf.clock_offset * 1e9);
}

#define U(x) ((unsigned long long)(x))

/* A counter per lcore: the 64-bit field at @off of struct cs_lcore, which
 * the lcore alone writes (read like reply_stats() reads it). */
static void lcore_family(FILE *out, struct cs_daemon *d, const char *name,
			 const char *help, size_t off)
{
	cs_obs_family(out, name, "counter", help);
	for (unsigned q = 0; q < d->drv.nq; q++)
		fprintf(out, "%s{lcore=\"%u\"} %llu\n", name, q,
			U(__atomic_load_n(
				(uint64_t *)((char *)&d->lcores[q] + off),
				__ATOMIC_RELAXED)));
}

static void rx_tx(FILE *out, const char *name, const char *help, uint64_t rx,
		  uint64_t tx)
{
	cs_obs_family(out, name, "counter", help);
	fprintf(out, "%s{direction=\"rx\"} %llu\n%s{direction=\"tx\"} %llu\n",
		name, U(rx), name, U(tx));
}

/* The node's own lines: port, codec, fault shim, lcores. */
static int fill(FILE *out, void *arg)
{
	struct cs_daemon *d = arg;
	struct cs_port_stats st;
	struct cs_drv_totals t;

	cs_port_stats(d->port, &st);
	cs_drv_totals(&d->drv, &t);
	cs_obs_family(out, "collstack_node_info", "gauge",
		      "this sidecar: name, node rank, port type");
	fprintf(out,
		"collstack_node_info{name=\"%s\",rank=\"%u\",port=\"%s\"} "
		"1\n",
		d->conf.port.name, d->conf.rank, d->conf.port.type);
	rx_tx(out, "collstack_port_frames_total", "frames the port moved",
	      st.rx_pkts, st.tx_pkts);
	rx_tx(out, "collstack_port_bytes_total", "bytes the port moved",
	      st.rx_bytes, st.tx_bytes);
	cs_obs_family(out, "collstack_dropped_frames_total", "counter",
		      "frames dropped before the transport, by cause");
	fprintf(out,
		"collstack_dropped_frames_total{cause=\"rx_ring\"} %llu\n"
		"collstack_dropped_frames_total{cause=\"rx_nombuf\"} %llu\n"
		"collstack_dropped_frames_total{cause=\"tx_error\"} %llu\n"
		"collstack_dropped_frames_total{cause=\"tx_nobuf\"} %llu\n"
		"collstack_dropped_frames_total{cause=\"malformed\"} %llu\n"
		"collstack_dropped_frames_total{cause=\"foreign\"} %llu\n"
		"collstack_dropped_frames_total{cause=\"other_mac\"} %llu\n"
		"collstack_dropped_frames_total{cause=\"unhandled\"} %llu\n"
		"collstack_dropped_frames_total{cause=\"fault_shim\"} %llu\n",
		U(st.rx_dropped), U(st.rx_nombuf), U(st.tx_errors),
		U(t.tx_nobuf), U(t.rx_malformed),
		U(t.rx_foreign - t.rx_other_mac), U(t.rx_other_mac),
		U(t.rx_unhandled), U(st.f_dropped));
	cs_obs_family(out, "collstack_fault_injected_total", "counter",
		      "what the fault shim (port.fault_*) did to frames");
	fprintf(out,
		"collstack_fault_injected_total{action=\"drop\"} %llu\n"
		"collstack_fault_injected_total{action=\"duplicate\"} %llu\n"
		"collstack_fault_injected_total{action=\"reorder\"} %llu\n"
		"collstack_fault_injected_total{action=\"delay\"} %llu\n"
		"collstack_fault_injected_total{action=\"corrupt\"} %llu\n",
		U(st.f_dropped), U(st.f_duplicated), U(st.f_reordered),
		U(st.f_delayed), U(st.f_corrupted));
	lcore_family(out, d, "collstack_lcore_loops_total",
		     "polling rounds of each lcore",
		     offsetof(struct cs_lcore, loops));
	lcore_family(out, d, "collstack_lcore_idle_waits_total",
		     "times an idle lcore waited for work",
		     offsetof(struct cs_lcore, idle_waits));
	return cs_obs_write_metrics(out, cs_obs_op_kind);
}

int cs_obs_start(struct cs_daemon *d)
{
	int ret;

	cs_obs_enable(true);
	ret = cs_trace_init(conf.rings, conf.events, conf.trace);
	if (ret) {
		CS_ERR("trace rings (%u x %llu events): %s", conf.rings,
		       U(conf.events), strerror(-ret));
		return ret;
	}
	CS_INFO("timeline %s: %u ring(s) of %llu events; clock offset %.9f s",
		conf.trace ? "on" : "off (trace.enable=0)", conf.rings,
		U(conf.events), conf.clock_offset);
	if (!conf.listen[0])
		return 0;
	ret = cs_obs_http_start(conf.listen, fill, d, &http);
	if (ret) {
		CS_ERR("metrics.listen %s: %s", conf.listen, strerror(-ret));
		cs_trace_fini();
		return ret;
	}
	CS_INFO("Prometheus metrics on http://%s/metrics (port %u)",
		conf.listen, cs_obs_http_port(http));
	return 0;
}

void cs_obs_stop(struct cs_daemon *d)
{
	(void)d;
	cs_obs_http_stop(http);
	http = NULL;
	cs_obs_enable(false);
	cs_trace_set(false);
	/* the rings stay: an lcore may still be between two events */
}

int cs_obs_send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* "ok HEAD bytes=N ...\n" and then the N bytes of @body. */
static int send_body(int fd, const char *head, const char *body, size_t n)
{
	char line[256];
	int k = snprintf(line, sizeof(line), "ok %s bytes=%zu\n", head, n);
	int ret = cs_obs_send_all(fd, line, (size_t)k);

	return ret ? ret : cs_obs_send_all(fd, body, n);
}

static int dump_trace(int fd)
{
	unsigned nr = cs_trace_nrings();
	size_t cap = 0, off = 0;
	char *buf = NULL, head[128];
	int64_t shift = (int64_t)(conf.clock_offset * 1e9);
	struct cs_trace_ev *ev;
	long n;
	int ret;

	for (unsigned i = 0; i < nr; i++) {
		struct cs_obs_ring_hdr h = { 0 };
		uint64_t lost = 0;

		cs_trace_ring_info(i, h.name, sizeof(h.name), &h.tid);
		cap = off + sizeof(h) + (conf.events + 1) * sizeof(*ev) * 2;
		buf = realloc(buf, cap); /* control thread, not the lcore */
		if (!buf)
			return -ENOMEM;
		ev = (struct cs_trace_ev *)(buf + off + sizeof(h));
		n = cs_trace_copy(i, ev, (cap - off - sizeof(h)) / sizeof(*ev),
				  &lost);
		if (n < 0)
			n = 0;
		for (long k = 0; k < n; k++)
			ev[k].ts += (uint64_t)shift;
		h.n = (uint64_t)n;
		h.lost_lo = (uint32_t)lost;
		memcpy(buf + off, &h, sizeof(h));
		off += sizeof(h) + (size_t)n * sizeof(*ev);
	}
	snprintf(head, sizeof(head), "trace rings=%u now=%llu", nr,
		 U(cs_obs_trace_clock()));
	ret = send_body(fd, head, buf ? buf : "", off);
	free(buf);
	return ret;
}

static int dump_text(int fd, struct cs_daemon *d, bool flight)
{
	char *text = NULL, head[96];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int ret;

	if (!f)
		return -ENOMEM;
	if (flight)
		cs_fl_write(f, cs_lcore_now());
	else
		fill(f, d);
	fclose(f);
	snprintf(head, sizeof(head), "%s now=%llu",
		 flight ? "flight" : "metrics", U(cs_lcore_now()));
	ret = send_body(fd, head, text, len);
	free(text);
	return ret;
}

/* ---- flight records written on their own (docs/observe.md) ---- */

static struct {
	uint64_t done_id; /* the last remote trigger written */
	unsigned nlost; /* the view's count at the last look */
	uint64_t seq_fired[CS_FL_GROUPS]; /* op seq + 1 that triggered */
	cs_ns_t last_local; /* when this sidecar last triggered */
} fauto;

static void flight_dir(const struct cs_daemon *d, char *out, size_t len)
{
	const char *rd = d->conf.port.run_dir, *slash;

	if (strcmp(conf.flight_dir, "auto")) {
		snprintf(out, len, "%s", conf.flight_dir);
		return;
	}
	slash = strrchr(rd, '/');
	if (slash && slash > rd)
		snprintf(out, len, "%.*s/flight", (int)(slash - rd), rd);
	else
		snprintf(out, len, "%s/flight", rd);
}

/* <dir>/<trigger>.<node>.flight: a header line, then cs_fl_write()'s. */
static void flight_write(struct cs_daemon *d, const char *trigger,
			 const char *why)
{
	char dir[CS_CFG_STR_MAX + 16], path[3 * CS_CFG_STR_MAX],
		tmp[3 * CS_CFG_STR_MAX + 8];
	cs_ns_t now = cs_lcore_now();
	FILE *f;

	flight_dir(d, dir, sizeof(dir));
	if (mkdir(dir, 0755) && errno != EEXIST) {
		CS_ERR("flight record (%s): cannot make %s: %s", why, dir,
		       strerror(errno));
		return;
	}
	snprintf(path, sizeof(path), "%s/%s.%s.flight", dir, trigger,
		 d->conf.port.name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f) {
		CS_ERR("flight record (%s): %s: %s", why, tmp, strerror(errno));
		return;
	}
	fprintf(f, "# flight record of %s, trigger %s: %s\n", d->conf.port.name,
		trigger, why);
	cs_fl_write(f, now);
	if (fclose(f) || rename(tmp, path)) {
		CS_ERR("flight record (%s): writing %s failed", why, path);
		unlink(tmp);
		return;
	}
	CS_WARN("flight record written (%s): %s", why, path);
}

/* The oldest operation of this sidecar pending past flight.auto_after
 * that has not triggered yet: its group slot and seq, or -1. */
static int overdue(cs_ns_t now, uint64_t *seq, cs_ns_t *age)
{
	static struct cs_fl_group g;

	for (unsigned i = 0; i < CS_FL_GROUPS; i++) {
		uint64_t all;

		if (cs_fl_snapshot(i, &g))
			continue;
		all = g.local_size >= 64 ? UINT64_MAX
					 : (1ull << g.local_size) - 1;
		for (unsigned k = 0; k < CS_FL_OPS; k++) {
			const struct cs_fl_op *o = &g.ops[k];

			if (!o->used ||
			    ((o->done & all) == all && o->posted == o->done))
				continue;
			if (now < o->t_post + conf.flight_after ||
			    o->seq + 1 <= fauto.seq_fired[i])
				continue;
			fauto.seq_fired[i] = o->seq + 1;
			*seq = o->seq;
			*age = now - o->t_post;
			return (int)i;
		}
	}
	return -1;
}

void cs_obs_tick(struct cs_daemon *d)
{
	struct cs_daemon_view *v = &d->view;
	unsigned nlost = atomic_load(&v->nlost);
	uint64_t id = atomic_load(&v->dump_id), seq;
	cs_ns_t now = cs_lcore_now(), age;
	char trig[64], why[160];
	int slot;

	if (!strcmp(conf.flight_dir, "off"))
		return;
	if (id && id != fauto.done_id) { /* another sidecar asked */
		fauto.done_id = id;
		/* one trigger for one stall: this sidecar's own overdue ops
		 * of the next flight.auto_after are the same story */
		fauto.last_local = now;
		snprintf(trig, sizeof(trig), "op-%016llx", U(id));
		snprintf(why, sizeof(why),
			 "asked by rank %d: an operation passed its deadline "
			 "there",
			 atomic_load(&v->dump_origin));
		flight_write(d, trig, why);
	}
	if (nlost != fauto.nlost) {
		fauto.nlost = nlost;
		snprintf(trig, sizeof(trig), "epoch-%u",
			 atomic_load(&v->epoch));
		snprintf(why, sizeof(why), "peer lost: rank %d",
			 atomic_load(&v->lost_rank));
		flight_write(d, trig, why);
	}
	slot = overdue(now, &seq, &age);
	if (slot < 0 || now - fauto.last_local < conf.flight_after)
		return;
	fauto.last_local = now;
	/* the trigger: this clock's time with the rank in the low bits,
	 * the same name on every sidecar */
	id = (now & ~0xfffull) | (d->conf.rank & 0xfff);
	snprintf(trig, sizeof(trig), "op-%016llx", U(id));
	snprintf(why, sizeof(why),
		 "group slot %d op %llu pending for %.1f s (flight.auto_after)",
		 slot, U(seq), (double)age / 1e9);
	fauto.done_id = id; /* the coordinator's echo is this one */
	flight_write(d, trig, why);
	if (cs_daemon_boot_request_dump(d, id) == -ENOTSUP)
		CS_WARN("no coordinator: the other sidecars do not write "
			"their flight records (static peers)");
}

/* This sidecar's trace clock minus the coordinator's, from heartbeats. */
static int clock_hb(struct cs_daemon *d, char *out, size_t len)
{
	struct cs_hb_clock_est e;
	int err = cs_daemon_boot_clock(d, &e);

	if (err == -ENOTSUP)
		snprintf(out, len, "err no heartbeat clock: %s",
			 d->boot ? "the rendezvous back-end exchanges no "
				   "stamped heartbeats (etcd)"
				 : "static peers, no coordinator");
	else if (err)
		snprintf(out, len, "err no heartbeat clock sample yet");
	else
		snprintf(out, len,
			 "ok offset=%lld bound=%llu delay=%llu age=%llu "
			 "samples=%llu",
			 -(long long)e.offset, U(e.bound), U(e.delay), U(e.age),
			 U(e.samples));
	return 0;
}

int cs_obs_ctl(struct cs_daemon *d, int fd, const char *req, const char *args,
	       char *out, size_t len)
{
	if (!strcmp(req, "clock")) {
		char host[128];

		/* host= and skew=: a collector on the same clock takes the
		 * skew (trace_offset) as the offset, exactly; node= names
		 * this sidecar as its frames do (its index in the view) */
		if (cs_clock_host_id(host, sizeof(host)))
			snprintf(host, sizeof(host), "unknown");
		snprintf(out, len, "ok now=%llu host=%s skew=%lld node=%u",
			 U(cs_obs_trace_clock()), host,
			 (long long)(int64_t)(conf.clock_offset * 1e9),
			 d->drv.rank);
		return 0;
	}
	if (!strcmp(req, "clock_hb"))
		return clock_hb(d, out, len);
	if (!strcmp(req, "trace_on")) {
		if (strcmp(args, "0") && strcmp(args, "1")) {
			snprintf(out, len, "err usage: trace_on 0|1");
			return 0;
		}
		cs_trace_set(args[0] == '1');
		snprintf(out, len, "ok trace=%d", cs_trace_enabled());
		return 0;
	}
	if (!strcmp(req, "trace_offset")) { /* tests: a skewed clock */
		char *end;
		double v = strtod(args, &end);

		if (end == args || *end || !(v >= -1e6 && v <= 1e6)) {
			snprintf(out, len,
				 "err usage: trace_offset SECONDS "
				 "(-1e6..1e6)");
			return 0;
		}
		conf.clock_offset = v;
		cs_boot_stamp_clock_stepped();
		snprintf(out, len, "ok trace_offset=%.9f", v);
		return 0;
	}
	if (strcmp(req, "trace_dump") && strcmp(req, "metrics") &&
	    strcmp(req, "flight"))
		return -ENOENT;
	out[0] = 0;
	if (!strcmp(req, "trace_dump"))
		return dump_trace(fd) ? -EIO : 0;
	return dump_text(fd, d, !strcmp(req, "flight")) ? -EIO : 0;
}
