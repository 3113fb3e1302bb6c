/* SPDX-License-Identifier: MIT */
/* Per-thread metric slots and their Prometheus exposition (metrics.h). */
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "observe/metrics.h"

const double cs_obs_bucket_s[CS_OBS_NBUCKETS] = {
	1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
	2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
const cs_ns_t cs_obs_bucket_ns[CS_OBS_NBUCKETS] = {
	10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000,
	5000000, 10000000, 25000000, 50000000, 100000000, 250000000,
	500000000, 1000000000, 2500000000ull, 5000000000ull, 10000000000ull,
};

atomic_bool cs__obs_on;
_Thread_local struct cs_obs_slot *cs__obs_tls;
static struct cs_obs_slot slots[CS_OBS_MAX_SLOTS];
static atomic_uint slots_taken, slots_ready;

void cs_obs_thread_label(char *out, size_t len, unsigned i)
{
	char name[16] = "thread";

	pthread_getname_np(pthread_self(), name, sizeof(name));
	snprintf(out, len, "%.11s#%u", name, i);
}

struct cs_obs_slot *cs__obs_attach(void)
{
	unsigned i = atomic_fetch_add(&slots_taken, 1);
	struct cs_obs_slot *s;

	if (i >= CS_OBS_MAX_SLOTS)
		return NULL;
	s = &slots[i];
	cs_obs_thread_label(s->name, sizeof(s->name), i);
	s->tid = (int)gettid();
	cs__obs_tls = s;
	while (atomic_load(&slots_ready) != i)
		;
	atomic_store(&slots_ready, i + 1);
	return s;
}

void cs_obs_enable(bool on)
{
	atomic_store(&cs__obs_on, on);
}

unsigned cs_obs_nslots(void)
{
	return atomic_load(&slots_ready);
}

const struct cs_obs_slot *cs_obs_slot_at(unsigned i)
{
	return i < cs_obs_nslots() ? &slots[i] : NULL;
}

void cs_obs_publish_begin(struct cs_obs_slot *s)
{
	atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

void cs_obs_publish_end(struct cs_obs_slot *s)
{
	atomic_fetch_add_explicit(&s->seq, 1, memory_order_release);
}

int cs_obs_read_peers(unsigned i, struct cs_obs_peer_snap *out)
{
	const struct cs_obs_slot *s = cs_obs_slot_at(i);
	uint64_t a, b;

	if (!s)
		return -ENOENT;
	do {
		while ((a = atomic_load_explicit(&s->seq,
						 memory_order_acquire)) & 1)
			sched_yield();
		memcpy(out, s->peer, sizeof(s->peer));
		atomic_thread_fence(memory_order_acquire);
		b = atomic_load_explicit(&s->seq, memory_order_relaxed);
	} while (a != b);
	return 0;
}

static uint64_t ld(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

void cs_obs_family(FILE *out, const char *name, const char *type,
		   const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram series: cumulative buckets, _sum, _count. */
static void hist_lines(FILE *out, const char *name, const char *labels,
		       const uint64_t *b, uint64_t sum_ns)
{
	uint64_t cum = 0;

	for (unsigned k = 0; k < CS_OBS_NBUCKETS; k++) {
		cum += b[k];
		fprintf(out, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels,
			cs_obs_bucket_s[k], (unsigned long long)cum);
	}
	cum += b[CS_OBS_NBUCKETS];
	fprintf(out, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels,
		(unsigned long long)cum);
	fprintf(out, "%s_sum{%s} %.9f\n%s_count{%s} %llu\n", name, labels,
		(double)sum_ns / 1e9, name, labels, (unsigned long long)cum);
}

struct peer_sum {
	struct cs_obs_peer_snap s;
	uint64_t rtt[CS_OBS_NBUCKETS + 1], rtt_sum, stalls[3];
	bool rtt_any;
};

static void sum_peers(struct peer_sum *ps)
{
	static struct cs_obs_peer_snap snap[CS_OBS_MAX_PEERS];
	unsigned n = cs_obs_nslots();

	memset(ps, 0, sizeof(*ps) * CS_OBS_MAX_PEERS);
	for (unsigned i = 0; i < n; i++) {
		const struct cs_obs_slot *sl = cs_obs_slot_at(i);

		cs_obs_read_peers(i, snap);
		for (unsigned p = 0; p < CS_OBS_MAX_PEERS; p++) {
			struct peer_sum *q = &ps[p];
			const struct cs_obs_peer_snap *a = &snap[p];

			if (a->sessions) {
				q->s.tx_frames += a->tx_frames;
				q->s.tx_bytes += a->tx_bytes;
				q->s.rx_frames += a->rx_frames;
				q->s.rx_bytes += a->rx_bytes;
				q->s.retx += a->retx;
				q->s.fast_retx += a->fast_retx;
				q->s.tlp += a->tlp;
				q->s.timeouts += a->timeouts;
				q->s.spurious += a->spurious;
				q->s.dup += a->dup;
				q->s.stale += a->stale;
				q->s.sessions += a->sessions;
				if (!q->s.srtt || a->srtt > q->s.srtt)
					q->s.srtt = a->srtt;
				if (!q->s.min_rtt ||
				    (a->min_rtt && a->min_rtt < q->s.min_rtt))
					q->s.min_rtt = a->min_rtt;
			}
			for (unsigned k = 0; k <= CS_OBS_NBUCKETS; k++) {
				uint64_t v = ld(&sl->rtt[p].b[k]);

				q->rtt[k] += v;
				q->rtt_any |= v != 0;
			}
			q->rtt_sum += ld(&sl->rtt[p].sum_ns);
			for (unsigned c = 0; c < 3; c++)
				q->stalls[c] += ld(&sl->stalls[p][c]);
		}
	}
}

/* A counter family by peer and direction: the snapshot fields at @tx and
 * @rx (offsets into struct cs_obs_peer_snap). */
static void dir_family(FILE *out, const struct peer_sum *ps, const char *name,
		       const char *help, size_t tx, size_t rx)
{
	static const char *const dir[2] = { "tx", "rx" };

	cs_obs_family(out, name, "counter", help);
	for (unsigned p = 0; p < CS_OBS_MAX_PEERS; p++)
		for (unsigned d = 0; ps[p].s.sessions && d < 2; d++)
			fprintf(out, "%s{peer=\"%u\",direction=\"%s\"} %llu\n",
				name, p, dir[d],
				*(const unsigned long long *)((const char *)&ps[p].s +
							      (d ? rx : tx)));
}

/* A counter family over every peer with a session: @expr picks it. */
#define PEER_FAMILY(name, help, expr)                                        \
	do {                                                                 \
		cs_obs_family(out, name, "counter", help);                   \
		for (unsigned p = 0; p < CS_OBS_MAX_PEERS; p++)              \
			if (ps[p].s.sessions)                                \
				fprintf(out, "%s{peer=\"%u\"} %llu\n", name, \
					p, (unsigned long long)(expr));      \
	} while (0)

int cs_obs_write_metrics(FILE *out, const char *const *kind_name)
{
	static struct peer_sum ps[CS_OBS_MAX_PEERS];
	static const char *const cause[3] = { "rto", "sack", "tlp" };
	static const char *const stall[3] = { "window", "credit", "pacing" };
	unsigned n = cs_obs_nslots();
	char lab[96];
	int64_t pending = 0;

	sum_peers(ps);
	dir_family(out, ps, "collstack_peer_frames_total",
		   "data frames exchanged with a peer node (first "
		   "transmissions; rx: new data delivered)",
		   offsetof(struct cs_obs_peer_snap, tx_frames),
		   offsetof(struct cs_obs_peer_snap, rx_frames));
	dir_family(out, ps, "collstack_peer_bytes_total",
		   "payload bytes exchanged with a peer node",
		   offsetof(struct cs_obs_peer_snap, tx_bytes),
		   offsetof(struct cs_obs_peer_snap, rx_bytes));
	cs_obs_family(out, "collstack_peer_retransmits_total", "counter",
		      "frames resent to a peer, by what found them lost");
	for (unsigned p = 0; p < CS_OBS_MAX_PEERS; p++) {
		const struct cs_obs_peer_snap *a = &ps[p].s;
		uint64_t v[3] = { a->retx - a->fast_retx - a->tlp, a->fast_retx,
				  a->tlp };

		for (unsigned c = 0; a->sessions && c < 3; c++)
			fprintf(out,
				"collstack_peer_retransmits_total{peer=\"%u\","
				"cause=\"%s\"} %llu\n",
				p, cause[c], (unsigned long long)v[c]);
	}
	PEER_FAMILY("collstack_peer_timeouts_total",
		    "retransmission timeouts towards a peer", ps[p].s.timeouts);
	PEER_FAMILY("collstack_peer_spurious_timeouts_total",
		    "timeouts the next ACK proved spurious", ps[p].s.spurious);
	PEER_FAMILY("collstack_peer_duplicates_total",
		    "duplicate frames received from a peer (dropped)",
		    ps[p].s.dup);
	PEER_FAMILY("collstack_peer_out_of_window_total",
		    "frames from a peer outside the receive window (dropped)",
		    ps[p].s.stale);
	cs_obs_family(out, "collstack_peer_srtt_seconds", "gauge",
		      "smoothed round-trip time to a peer (largest over its "
		      "sessions)");
	for (unsigned p = 0; p < CS_OBS_MAX_PEERS; p++)
		if (ps[p].s.sessions)
			fprintf(out,
				"collstack_peer_srtt_seconds{peer=\"%u\"} "
				"%.9f\n",
				p, (double)ps[p].s.srtt / 1e9);
	cs_obs_family(out, "collstack_peer_rtt_seconds", "histogram",
		      "round-trip time samples to a peer (Karn: first "
		      "transmissions only)");
	for (unsigned p = 0; p < CS_OBS_MAX_PEERS; p++) {
		if (!ps[p].s.sessions && !ps[p].rtt_any)
			continue;
		snprintf(lab, sizeof(lab), "peer=\"%u\"", p);
		hist_lines(out, "collstack_peer_rtt_seconds", lab, ps[p].rtt,
			   ps[p].rtt_sum);
	}
	cs_obs_family(out, "collstack_peer_stalls_total", "counter",
		      "times a channel to a peer had a frame ready but could "
		      "not send it, by cause");
	for (unsigned p = 0; p < CS_OBS_MAX_PEERS; p++)
		for (unsigned c = 0; ps[p].s.sessions && c < 3; c++)
			fprintf(out,
				"collstack_peer_stalls_total{peer=\"%u\","
				"cause=\"%s\"} %llu\n",
				p, stall[c],
				(unsigned long long)ps[p].stalls[c]);

	cs_obs_family(out, "collstack_ops_total", "counter",
		      "trainer operations completed, by kind and outcome");
	for (unsigned k = 1; k < CS_OBS_KINDS && kind_name[k]; k++) {
		uint64_t v[2] = { 0, 0 };

		for (unsigned i = 0; i < n; i++)
			for (unsigned o = 0; o < 2; o++)
				v[o] += ld(&slots[i].ops[k][o]);
		fprintf(out,
			"collstack_ops_total{kind=\"%s\",status=\"ok\"} "
			"%llu\ncollstack_ops_total{kind=\"%s\","
			"status=\"error\"} %llu\n",
			kind_name[k], (unsigned long long)v[0], kind_name[k],
			(unsigned long long)v[1]);
	}
	cs_obs_family(out, "collstack_op_duration_seconds", "histogram",
		      "trainer operations from post to completion, per rank");
	for (unsigned k = 1; k < CS_OBS_KINDS && kind_name[k]; k++) {
		uint64_t b[CS_OBS_NBUCKETS + 1] = { 0 }, sum = 0;

		for (unsigned i = 0; i < n; i++) {
			for (unsigned j = 0; j <= CS_OBS_NBUCKETS; j++)
				b[j] += ld(&slots[i].op_lat[k].b[j]);
			sum += ld(&slots[i].op_lat[k].sum_ns);
		}
		snprintf(lab, sizeof(lab), "kind=\"%s\"", kind_name[k]);
		hist_lines(out, "collstack_op_duration_seconds", lab, b, sum);
	}
	for (unsigned i = 0; i < n; i++)
		pending += atomic_load_explicit(&slots[i].pending,
						memory_order_relaxed);
	cs_obs_family(out, "collstack_ipc_pending_ops", "gauge",
		      "trainer operations posted and not completed yet");
	fprintf(out, "collstack_ipc_pending_ops %lld\n",
		(long long)(pending > 0 ? pending : 0));
	cs_obs_family(out, "collstack_thread_cpu_seconds_total", "counter",
		      "CPU time of each recording thread (an lcore's busy "
		      "fraction is its rate)");
	for (unsigned i = 0; i < n; i++) {
		double cpu = cs_obs_thread_cpu(slots[i].tid);

		if (cpu >= 0)
			fprintf(out,
				"collstack_thread_cpu_seconds_total{thread="
				"\"%s\"} %.3f\n",
				slots[i].name, cpu);
	}
	return ferror(out) ? -EIO : 0;
}

double cs_obs_thread_cpu(int tid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')'); /* the name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			 "%llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}
