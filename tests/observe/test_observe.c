/* SPDX-License-Identifier: MIT */
/* observe/: rings, clock alignment, JSON, metrics, health, flight. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obs_prom.h"
#include "observe/clock.h"
#include "observe/flight.h"
#include "observe/health.h"
#include "observe/metrics.h"
#include "observe/tdelay.h"
#include "observe/tjson.h"
#include "observe/trace.h"

/* ---- rings --------------------------------------------------------- */

Test(ring, off_records_nothing)
{
	cr_assert_null(cs_trace_ev_put(CS_TR_TX, 1, 0, 0, 0, 0, 0, 0));
	cr_assert_eq(cs_trace_nrings(), 0);
}

Test(ring, wraps_keeping_the_newest)
{
	struct cs_trace_ev out[64];
	uint64_t lost;
	long n;

	cr_assert_eq(cs_trace_init(2, 16, true), 0);
	for (uint32_t i = 0; i < 40; i++)
		cr_assert_not_null(
			cs_trace_ev_put(CS_TR_TX, 1000 + i, 1, i, 2, 3, i, 0));
	cr_assert_eq(cs_trace_nrings(), 1);
	n = cs_trace_copy(0, out, 64, &lost);
	/* 16 slots; the one the writer would fill next is not trusted */
	cr_assert_eq(n, 15);
	cr_assert_eq(lost, 25);
	for (long k = 0; k < n; k++) {
		cr_assert_eq(out[k].op, 25 + k);
		cr_assert_eq(out[k].ts, 1025 + (uint64_t)k);
	}
	cr_assert_eq(cs_trace_copy(1, out, 64, &lost), -ENOENT);
	cs_trace_set(false);
	cr_assert_null(cs_trace_ev_put(CS_TR_TX, 1, 0, 0, 0, 0, 0, 0));
	cs_trace_fini();
}

Test(ring, bad_sizes_refused)
{
	cr_assert_eq(cs_trace_init(0, 16, true), -EINVAL);
	cr_assert_eq(cs_trace_init(CS_TRACE_MAX_RINGS + 1, 16, true), -EINVAL);
	cr_assert_eq(cs_trace_init(1, 1, true), -EINVAL);
}

#define WRITES 200000

static void *writer(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "writer");
	for (uint32_t i = 0; i < WRITES; i++)
		cs_trace_ev_put(CS_TR_RX, i, 7, i, i, i, i, 0);
	return NULL;
}

/* A reader copying while the writer laps the ring only ever sees whole,
 * consecutive events. */
Test(ring, copy_while_written_is_consistent)
{
	static struct cs_trace_ev out[1024];
	pthread_t t;
	char name[CS_TRACE_NAME_MAX];
	int tid;

	cr_assert_eq(cs_trace_init(1, 1024, true), 0);
	cr_assert_eq(pthread_create(&t, NULL, writer, NULL), 0);
	for (int round = 0; round < 2000; round++) {
		uint64_t lost;
		long n = cs_trace_copy(0, out, 1024, &lost);

		for (long k = 0; k < n; k++) {
			cr_assert_eq(out[k].op, lost + (uint64_t)k);
			cr_assert_eq(out[k].a, out[k].op);
			cr_assert_eq(out[k].c, out[k].op);
			cr_assert_eq(out[k].ts, out[k].op);
		}
	}
	pthread_join(t, NULL);
	cr_assert_eq(cs_trace_ring_info(0, name, sizeof(name), &tid), 0);
	cr_assert_str_eq(name, "writer#0");
	cs_trace_fini();
}

/* ---- clock alignment -------------------------------------------------- */

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

/* Offsets injected into a simulated remote clock, with random request
 * and reply delays, are recovered within the bound the estimate gives. */
Test(clock, injected_offsets_recovered_within_bound)
{
	static const int64_t offs[] = {
		0, 5000000000ll, -3000000000ll, 1234567891ll, -17, 999
	};
	uint64_t seed = 42;

	for (unsigned i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		struct cs_clock_sample s[16];
		struct cs_clock_est e;
		cs_ns_t t = 10000000000ull;

		for (unsigned k = 0; k < 16; k++) {
			cs_ns_t up = 1000 + lcg(&seed) % 90000,
				down = 1000 + lcg(&seed) % 90000;

			s[k].t0 = t;
			s[k].remote = (cs_ns_t)((int64_t)(t + up) + offs[i]);
			s[k].t1 = t + up + down;
			t += 1000000;
		}
		cr_assert_eq(cs_clock_estimate(s, 16, &e), 0);
		cr_assert_leq(llabs(e.offset - offs[i]), (long long)e.bound,
			      "offset %lld: got %lld +- %llu",
			      (long long)offs[i], (long long)e.offset,
			      (unsigned long long)e.bound);
		cr_assert_leq(e.bound, 91000);
	}
}

Test(clock, shortest_round_trip_wins_and_bad_samples_refused)
{
	struct cs_clock_sample s[2] = { { 100, 1000, 300 },
					{ 400, 1310, 420 } };
	struct cs_clock_est e;

	cr_assert_eq(cs_clock_estimate(s, 2, &e), 0);
	cr_assert_eq(e.bound, 10);
	cr_assert_eq(e.offset, 900);
	s[1].t1 = 399;
	cr_assert_eq(cs_clock_estimate(s, 2, &e), -EINVAL);
	cr_assert_eq(cs_clock_estimate(s, 0, &e), -EINVAL);
}

/* This process's clock identity: the boot id, a slash, the monotonic
 * offset of its time namespace; the same twice; too small a buffer is
 * refused. */
Test(clock, host_id_names_the_boot_and_namespace)
{
	char a[128], b[128], small[8];
	char *slash;

	cr_assert_eq(cs_clock_host_id(a, sizeof(a)), 0);
	cr_assert_eq(cs_clock_host_id(b, sizeof(b)), 0);
	cr_assert_str_eq(a, b);
	slash = strchr(a, '/');
	cr_assert_not_null(slash);
	cr_assert_eq(slash - a, 36, "a boot id is a UUID: %s", a);
	cr_assert_eq(cs_clock_host_id(small, sizeof(small)), -ENOSPC);
}

/* ---- Trace Event JSON -------------------------------------------------- */

static char *json_of(struct cs_tj_node *nd, unsigned n, cs_ns_t last,
		     struct cs_tj_stats *st)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_not_null(f);
	cr_assert_eq(cs_tj_write(f, nd, n, last, st), 0);
	fclose(f);
	return text;
}

/* Two nodes whose clocks differ by 5 s: after alignment their events
 * interleave, every timestamp goes forward, and pairs become spans. */
Test(tjson, aligned_sorted_and_paired)
{
	struct cs_trace_ev a[] = {
		{ .ts = 1000,
		  .kind = CS_TR_OP_POST,
		  .group = 1,
		  .op = 7,
		  .a = 2,
		  .b = 4096 },
		{ .ts = 1100,
		  .kind = CS_TR_TX,
		  .group = 1,
		  .op = 7,
		  .a = 1,
		  .b = 1400,
		  .c = 1 },
		{ .ts = 1300,
		  .kind = CS_TR_RETX,
		  .group = 1,
		  .op = 7,
		  .a = 1,
		  .b = 1400,
		  .c = 1,
		  .d = CS_TR_RETX_SACK },
		{ .ts = 2000, .kind = CS_TR_OP_DONE, .group = 1, .op = 7 },
	};
	struct cs_trace_ev b[] = {
		{ .ts = 5000001150ull,
		  .kind = CS_TR_RX,
		  .group = 1,
		  .op = 7,
		  .a = 0,
		  .b = 1400,
		  .c = 1 },
		{ .ts = 5000001200ull,
		  .kind = CS_TR_T_POST,
		  .group = 3,
		  .op = 0,
		  .a = 5,
		  .b = 10,
		  .c = 0,
		  .d = 1 },
		{ .ts = 5000001900ull,
		  .kind = CS_TR_T_DONE,
		  .group = 3,
		  .op = 0,
		  .a = 5,
		  .c = 0 },
	};
	struct cs_tj_ring ra = { "cs-lcore#0", 11, a, 4 },
			  rb = { "cs-lcore#0", 22, b, 3 };
	struct cs_tj_node nd[2] = { { "n0", 0, &ra, 1 },
				    { "n1", 5000000000ll, &rb, 1 } };
	struct cs_tj_stats st;
	char *j = json_of(nd, 2, 0, &st), *p;
	double prev = -1;
	int count = 0;

	cr_assert_eq(st.events, 5); /* post+done, tx, retx, rx, trainer */
	cr_assert_eq(st.nodes_with_events, 2);
	cr_assert(strstr(j, "\"name\":\"process_name\",\"args\":{\"name\":"
			    "\"n1\"}"));
	cr_assert(strstr(j, "\"name\":\"rank 5\""));
	cr_assert(strstr(j, "\"name\":\"op g1#7\""));
	cr_assert(strstr(j, "\"dur\":1.000,\"cat\":\"op\""));
	cr_assert(strstr(j, "\"name\":\"retx sack\""));
	cr_assert(strstr(j, "\"name\":\"allreduce #0\""));
	cr_assert(strstr(j, "\"pid\":2,\"tid\":100005,\"ts\":0.200"));
	for (p = strstr(j, "\"ts\":"); p; p = strstr(p + 1, "\"ts\":")) {
		double ts = strtod(p + 5, NULL);

		cr_assert_geq(ts, prev);
		prev = ts;
		count++;
	}
	cr_assert_eq(count, 5);
	free(j);
	/* --last keeps only the newest */
	j = json_of(nd, 2, 150, &st);
	cr_assert_eq(st.events, 3); /* rx (1150), trainer (1200), retx */
	free(j);
}

/* ---- frame delays ------------------------------------------------------ */

/* Node ids 7 and 3 (not their indexes); node 1's clock is 1 s ahead.
 * Each frame handled pairs with its last send before then (a
 * retransmission when there was one), a duplicate is left out, a frame
 * whose send is not in the rings and one handled before its send are
 * counted apart, and --last keeps the newest only. */
Test(tdelay, paired_by_frame_on_aligned_clocks)
{
	const int64_t S = 1000000000;
	struct cs_trace_ev a[] = {
		/* to node id 3: seq 10, 11 (resent), 12; seq 20 of op 8 */
		{ .ts = 1000,
		  .kind = CS_TR_TX,
		  .group = 1,
		  .op = 7,
		  .a = 3,
		  .c = 10 },
		{ .ts = 1000,
		  .kind = CS_TR_TX,
		  .group = 1,
		  .op = 7,
		  .a = 3,
		  .c = 11 },
		{ .ts = 1000,
		  .kind = CS_TR_TX,
		  .group = 1,
		  .op = 7,
		  .a = 3,
		  .c = 12 },
		{ .ts = 1500,
		  .kind = CS_TR_RETX,
		  .group = 1,
		  .op = 7,
		  .a = 3,
		  .c = 11,
		  .d = CS_TR_RETX_TLP },
		{ .ts = 5000,
		  .kind = CS_TR_TX,
		  .group = 1,
		  .op = 8,
		  .a = 3,
		  .c = 20 },
		/* node 1's frame to us, handled here */
		{ .ts = 2400,
		  .kind = CS_TR_RX,
		  .group = 1,
		  .op = 7,
		  .a = 3,
		  .c = 99 },
	};
	struct cs_trace_ev b[] = {
		{ .ts = S + 1100,
		  .kind = CS_TR_RX,
		  .group = 1,
		  .op = 7,
		  .a = 7,
		  .c = 10 },
		{ .ts = S + 1700,
		  .kind = CS_TR_RX,
		  .group = 1,
		  .op = 7,
		  .a = 7,
		  .c = 11 },
		{ .ts = S + 1800,
		  .kind = CS_TR_RX,
		  .group = 1,
		  .op = 7,
		  .a = 7,
		  .c = 11,
		  .d = CS_TR_RX_DUP },
		{ .ts = S + 1400,
		  .kind = CS_TR_RX,
		  .group = 1,
		  .op = 7,
		  .a = 7,
		  .c = 12 },
		/* handled before its send: clock error */
		{ .ts = S + 4000,
		  .kind = CS_TR_RX,
		  .group = 1,
		  .op = 8,
		  .a = 7,
		  .c = 20 },
		{ .ts = S + 2000,
		  .kind = CS_TR_TX,
		  .group = 1,
		  .op = 7,
		  .a = 7,
		  .c = 99 },
		/* from a node id nobody has */
		{ .ts = S + 2100,
		  .kind = CS_TR_RX,
		  .group = 1,
		  .op = 7,
		  .a = 5,
		  .c = 1 },
	};
	struct cs_tj_ring ra = { "cs-lcore#0", 1, a, CS_ARRAY_SIZE(a) },
			  rb = { "cs-lcore#0", 2, b, CS_ARRAY_SIZE(b) };
	struct cs_tj_node nd[2] = { { "n0", 0, &ra, 1 }, { "n1", S, &rb, 1 } };
	uint32_t ids[2] = { 7, 3 };
	struct cs_td_row rows[5];
	struct cs_td_stats st;
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int n = cs_td_compute(nd, ids, 2, 0, rows, 5, &st);

	cr_assert_eq(n, 3); /* 0 -> 1, 1 -> 0, all */
	cr_assert_eq(st.rx, 6);
	cr_assert_eq(st.matched, 4);
	cr_assert_eq(st.early, 1);
	cr_assert_eq(st.unsent, 1);
	cr_assert_eq(rows[0].src, 0);
	cr_assert_eq(rows[0].dst, 1);
	cr_assert_eq(rows[0].n, 3); /* 100, 200 (from the resend), 400 */
	cr_assert_eq(rows[0].min, 100);
	cr_assert_eq(rows[0].p50, 200);
	cr_assert_eq(rows[0].p99, 400);
	cr_assert_eq(rows[0].max, 400);
	cr_assert_eq(rows[1].src, 1);
	cr_assert_eq(rows[1].dst, 0);
	cr_assert_eq(rows[1].n, 1);
	cr_assert_eq(rows[1].p50, 400); /* sent at 2000, handled at 2400 */
	cr_assert_eq(rows[2].src, CS_TD_ALL);
	cr_assert_eq(rows[2].n, 4);
	cr_assert_eq(rows[2].min, 100);
	cr_assert_eq(rows[2].p50, 200);
	cr_assert_eq(rows[2].max, 400);
	f = open_memstream(&text, &len);
	cr_assert_not_null(f);
	cs_td_print(f, nd, rows, (unsigned)n, &st);
	fclose(f);
	cr_assert(
		strstr(text, "n0           n1                   3       0.1"));
	cr_assert(strstr(text, "6 frame(s) handled, 4 paired"));
	free(text);
	/* the newest 700 ns (events up to 5000): frames handled from 4300 */
	n = cs_td_compute(nd, ids, 2, 700, rows, 5, &st);
	cr_assert_eq(n, 0);
	cr_assert_eq(st.rx, 0);
	/* from 1350: 1400 (seq 12), 1700 (seq 11), 2400, 2100 (unknown) */
	n = cs_td_compute(nd, ids, 2, 3650, rows, 5, &st);
	cr_assert_eq(n, 3);
	cr_assert_eq(st.rx, 5); /* and the early one at 4000 */
	cr_assert_eq(rows[0].n, 2);
	cr_assert_eq(rows[0].min, 200);
	cr_assert_eq(rows[0].max, 400);
}

/* ---- metrics, read back ------------------------------------------------ */

Test(metrics, exposition_reads_back)
{
	struct cs_obs_slot *s;
	struct cs_prom p = { 0 };
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	cs_obs_enable(true);
	s = cs_obs_slot_get();
	cr_assert_not_null(s);
	cs_obs_publish_begin(s);
	s->peer[3] = (struct cs_obs_peer_snap){ .tx_frames = 100,
						.retx = 7,
						.fast_retx = 2,
						.tlp = 1,
						.srtt = 250000,
						.sessions = 1 };
	cs_obs_publish_end(s);
	cs_obs_hist_add(&s->rtt[3], 40000); /* 40 us: le 5e-05 */
	cs_obs_hist_add(&s->rtt[3], 3000000000ull); /* 3 s */
	cs_obs_add(&s->stalls[3][CS_TR_STALL_CREDIT], 4);
	cs_obs_add(&s->ops[1][0], 9);
	f = open_memstream(&text, &len);
	cr_assert_eq(cs_obs_write_metrics(f, cs_obs_op_kind), 0);
	fclose(f);
	cr_assert_eq(cs_prom_parse(text, &p), 0);
	cr_assert_eq(cs_prom_sum(&p, "collstack_peer_frames_total",
				 "peer=\"3\"", "direction=\"tx\""),
		     100);
	cr_assert_eq(cs_prom_sum(&p, "collstack_peer_retransmits_total",
				 "peer=\"3\"", "cause=\"rto\""),
		     4);
	cr_assert_eq(cs_prom_sum(&p, "collstack_peer_retransmits_total",
				 "peer=\"3\"", NULL),
		     7);
	cr_assert_eq(cs_prom_sum(&p, "collstack_peer_rtt_seconds_bucket",
				 "peer=\"3\"", "le=\"5e-05\""),
		     1);
	cr_assert_eq(cs_prom_sum(&p, "collstack_peer_rtt_seconds_bucket",
				 "peer=\"3\"", "le=\"2.5\""),
		     1);
	cr_assert_eq(cs_prom_sum(&p, "collstack_peer_rtt_seconds_bucket",
				 "peer=\"3\"", "le=\"5\""),
		     2);
	cr_assert_eq(cs_prom_sum(&p, "collstack_peer_rtt_seconds_count",
				 "peer=\"3\"", NULL),
		     2);
	cr_assert_eq(cs_prom_sum(&p, "collstack_peer_stalls_total",
				 "peer=\"3\"", "cause=\"credit\""),
		     4);
	cr_assert_eq(cs_prom_sum(&p, "collstack_ops_total",
				 "kind=\"allreduce\"", "status=\"ok\""),
		     9);
	cr_assert_eq(cs_prom_sum(&p, "collstack_peer_srtt_seconds",
				 "peer=\"3\"", NULL),
		     0.00025);
	cr_assert_null(strstr(text, "peer=\"4\""));
	cs_prom_free(&p);
	cr_assert_eq(cs_prom_parse("collstack_x{a=\"1\"\n", &p), -EINVAL);
	cr_assert_eq(cs_prom_parse("no_value\n", &p), -EINVAL);
	cs_prom_free(&p);
	free(text);
}

/* ---- health ------------------------------------------------------------- */

Test(health, lone_outliers_flagged)
{
	struct cs_health_path p[7] = {
		{ .p99_s = 100e-6, .loss = 0.001, .frames = 5000 },
		{ .p99_s = 120e-6, .loss = 0.002, .frames = 5000 },
		{ .p99_s = 110e-6, .loss = 0.001, .frames = 5000 },
		{ .p99_s = 2e-3, .loss = 0.0015, .frames = 5000 }, /* slow */
		{ .p99_s = 105e-6, .loss = 0.2, .frames = 5000 }, /* lossy */
		{ .p99_s = -1, .loss = -1 }, /* nothing yet */
		{ .p99_s = 9e-3, .loss = 0.5, .frames = 96 }, /* too few */
	};

	cr_assert_eq(cs_health_judge(p, 7), 2);
	cr_assert_eq(p[3].flags, CS_HEALTH_RTT);
	cr_assert_eq(p[4].flags, CS_HEALTH_LOSS);
	cr_assert_eq(p[5].flags, 0);
	cr_assert_eq(p[6].flags, 0);
	/* uniformly slow: nothing stands out */
	for (int i = 0; i < 5; i++)
		p[i] = (struct cs_health_path){ .p99_s = 5e-3,
						.loss = 0.1,
						.frames = 5000 };
	cr_assert_eq(cs_health_judge(p, 5), 0);
}

Test(health, quantile_like_prometheus)
{
	const double le[3] = { 1, 2, 4 };
	const double cum[4] = { 0, 50, 100, 100 };

	cr_assert_float_eq(cs_health_quantile(le, cum, 3, 0.5), 2, 1e-9);
	cr_assert_float_eq(cs_health_quantile(le, cum, 3, 0.99), 3.96, 1e-9);
	cr_assert_float_eq(cs_health_quantile(le, (double[4]){ 0 }, 3, 0.5), -1,
			   1e-9);
}

/* ---- flight recorder ---------------------------------------------------- */

Test(flight, records_who_posted)
{
	static const int32_t ranks[2] = { 4, 5 };
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	cs_fl_reset();
	cs_obs_ipc_post(100, 3, "train", 8, 2, ranks, 0, 0, 1, 1024);
	cs_obs_ipc_post(110, 3, "train", 8, 2, ranks, 0, 1, 1, 1024);
	cs_obs_ipc_done(500, 3, 0, 0, 0);
	cs_obs_ipc_done(510, 3, 0, 1, 0);
	cs_obs_ipc_post(600, 3, "train", 8, 2, ranks, 1, 1, 1, 1024);
	cs_obs_ipc_post(700, 99, "far", 2, 1, ranks, 0, 0, 1, 1); /* ignored */
	f = open_memstream(&text, &len);
	cr_assert_eq(cs_fl_write(f, 1000), 1);
	fclose(f);
	cr_assert_str_eq(text, "group 3 train 8 2 4,5\n"
			       "op 3 0 1 1024 0x3 0x3 0 900 410\n"
			       "op 3 1 1 0 0x2 0 0 400 -1\n");
	free(text);
	/* the slot reused by another group starts afresh */
	cs_obs_ipc_post(2000, 3, "eval", 2, 1, ranks, 0, 0, 5, 1);
	text = NULL;
	f = open_memstream(&text, &len);
	cs_fl_write(f, 2000);
	fclose(f);
	cr_assert_str_eq(text, "group 3 eval 2 1 4\nop 3 0 5 1 0x1 0 0 0 -1\n");
	free(text);
}
