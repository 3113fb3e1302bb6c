/* SPDX-License-Identifier: MIT */
/*
 * The cost model's math: least squares, the fit's regressions on synthetic
 * runs made from known constants (recovered), the formulas' structure,
 * and the model and plan files' error handling.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"

static void near(double got, double want, double rel, const char *what)
{
	cr_assert(fabs(got - want) <= rel * fabs(want),
		  "%s: got %.6g, want %.6g (within %.2g)", what, got, want,
		  rel);
}

/* The "truth" synthetic runs come from. */
static struct cs_model truth(void)
{
	struct cs_model m;

	cr_assert_eq(cs_model_defaults(&m), 0);
	m.alpha_ns = 2300;
	m.direct_alpha_ns = 1700;
	m.beta_ns = 0.16; /* 50 Gb/s */
	m.frame_ns = 25;
	m.ack_turn_ns = 31000;
	m.incast = 0.1;
	m.a2a_alpha_ns = 6000;
	m.ps_round_ns = 15000;
	m.ps_tail_ns = 4000;
	m.ps_beta_ns = 0.02;
	m.have_a2a = m.have_ps = true;
	return m;
}

static double pred(const struct cs_model *m, enum cs_model_op op, uint32_t n,
		   uint32_t rpn, uint64_t bytes, uint32_t servers)
{
	struct cs_model_case c = { op, n, rpn, bytes, servers };
	double ns;

	cr_assert_eq(cs_model_predict(m, &c, &ns, NULL, NULL, 0), 0);
	return ns;
}

Test(lsq, line_exact)
{
	double x[5 * 2], y[5], c[2];

	for (int i = 0; i < 5; i++) {
		double b = 1024.0 * (1 << (3 * i));

		x[i * 2] = 1;
		x[i * 2 + 1] = b;
		y[i] = 1500 + 0.08 * b;
	}
	cr_assert_eq(cs_model_lsq(x, y, 5, 2, c), 0);
	near(c[0], 1500, 1e-6, "alpha");
	near(c[1], 0.08, 1e-9, "beta");
}

Test(lsq, line_noisy)
{
	double x[40 * 2], y[40], c[2];
	uint64_t s = 12345;

	for (int i = 0; i < 40; i++) {
		double b = 4096.0 * (i + 1) * (i + 1), noise;

		s = s * 6364136223846793005ull + 1442695040888963407ull;
		noise = ((double)(s >> 11) / (1ull << 53) - 0.5) * 0.02;
		x[i * 2] = 1;
		x[i * 2 + 1] = b;
		y[i] = (3000 + 0.1 * b) * (1 + noise);
	}
	cr_assert_eq(cs_model_lsq(x, y, 40, 2, c), 0);
	near(c[1], 0.1, 0.02, "beta under 1% noise");
	near(c[0], 3000, 0.5, "alpha under 1% noise");
}

Test(lsq, refuses_dependent_and_short)
{
	double x[3 * 2] = { 1, 2, 2, 4, 3, 6 }, y[3] = { 1, 2, 3 }, c[2];

	cr_assert_eq(cs_model_lsq(x, y, 3, 2, c), -EINVAL); /* col2 = 2 col1 */
	cr_assert_eq(cs_model_lsq(x, y, 1, 2, c), -EINVAL); /* n < k */
	cr_assert_eq(cs_model_lsq(x, y, 3, 0, c), -EINVAL);
	cr_assert_eq(cs_model_lsq(x, y, 3, CS_MODEL_LSQ_MAX + 1, c), -EINVAL);
	for (int i = 0; i < 6; i++)
		x[i] = 0;
	cr_assert_eq(cs_model_lsq(x, y, 3, 2, c), -EINVAL); /* zero column */
}

/*
 * The whole fit on synthetic runs: times made by cs_model_predict() from
 * known constants, at the sizes and settings the real fit uses, must give
 * the constants back.
 */
Test(fit, recovers_known_constants)
{
	struct cs_model t = truth(), m;
	struct cs_model_run r[8];
	size_t k = 0;

	cr_assert_eq(cs_model_defaults(&m), 0);
	/* beta, frame: 4 ranks, 4 and 16 MiB, MTU payloads 8896 and 1396 */
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++) {
			struct cs_model tt = t;
			uint64_t b = (4ull << 20) << (2 * i);

			tt.mtu_payload = j ? 1396 : 8896;
			r[k++] = (struct cs_model_run){
				.ranks = 4, .bytes = b,
				.mtu_payload = tt.mtu_payload,
				.ns = pred(&tt, CS_MODEL_ALLREDUCE_RING, 4, 1,
					   b, 0) };
		}
	cr_assert_eq(cs_model_fit_beta(&m, r, k), 0);
	near(m.beta_ns, t.beta_ns, 0.01, "beta");
	near(m.frame_ns, t.frame_ns, 0.25, "frame");

	for (k = 0; k < 3; k++) {
		uint64_t b = (32u + 16 * k) << 10;

		r[k] = (struct cs_model_run){
			.ranks = 4, .bytes = b,
			.ns = pred(&t, CS_MODEL_ALLREDUCE_RING, 4, 1, b, 0) };
	}
	cr_assert_eq(cs_model_fit_alpha(&m, r, k), 0);
	near(m.alpha_ns, t.alpha_ns, 0.05, "alpha");

	for (k = 0; k < 3; k++) {
		uint64_t b = 4096u << k;

		r[k] = (struct cs_model_run){
			.ranks = 4, .bytes = b,
			.ns = pred(&t, CS_MODEL_ALLREDUCE_DIRECT, 4, 1, b, 0) };
	}
	cr_assert_eq(cs_model_fit_direct(&m, r, k), 0);
	near(m.direct_alpha_ns, t.direct_alpha_ns, 0.05, "direct alpha");

	for (k = 0; k < 2; k++) {
		struct cs_model tt = t;
		uint64_t b = (256u << 10) << k;

		tt.window = 1;
		tt.chunk = tt.mtu_payload;
		r[k] = (struct cs_model_run){
			.ranks = 4, .bytes = b, .window = 1,
			.chunk = tt.mtu_payload,
			.ns = pred(&tt, CS_MODEL_ALLREDUCE_RING, 4, 1, b, 0) };
	}
	cr_assert_eq(cs_model_fit_ack(&m, r, k), 0);
	near(m.ack_turn_ns, t.ack_turn_ns, 0.05, "ACK turn-around");

	for (k = 0; k < 3; k++) {
		uint64_t b = (16u << 10) << (2 * k);

		r[k] = (struct cs_model_run){
			.ranks = 8, .bytes = b,
			.ns = pred(&t, CS_MODEL_ALLTOALL_FLAT, 8, 2, b, 0) };
	}
	cr_assert_eq(cs_model_fit_a2a(&m, r, k), 0);
	near(m.a2a_alpha_ns, t.a2a_alpha_ns, 0.05, "all-to-all alpha");
	near(m.incast, t.incast, 0.1, "incast");

	for (k = 0; k < 8; k++) {
		uint32_t w = k < 2 ? 1 : 4, s = k < 2 ? 1 : 1u << ((k - 2) / 2);
		uint64_t b = k % 2 ? 16384 : 4096;

		r[k] = (struct cs_model_run){
			.ranks = w, .servers = s, .bytes = b,
			.ns = pred(&t, CS_MODEL_PS, w, 1, b, s) };
	}
	cr_assert_eq(cs_model_fit_ps(&m, r, k), 0);
	near(m.ps_round_ns, t.ps_round_ns, 0.01, "PS round");
	near(m.ps_tail_ns, t.ps_tail_ns, 0.01, "PS tail");
	near(m.ps_beta_ns, t.ps_beta_ns, 0.01, "PS per byte");

	/* and the fitted model predicts 256 ranks as the truth does */
	for (uint64_t b = 4096; b <= (16u << 20); b *= 16)
		near(pred(&m, CS_MODEL_ALLREDUCE, 256, 1, b, 0),
		     pred(&t, CS_MODEL_ALLREDUCE, 256, 1, b, 0), 0.05,
		     "allreduce at 256 ranks");
	near(pred(&m, CS_MODEL_ALLTOALL, 256, 8, 65536, 0),
	     pred(&t, CS_MODEL_ALLTOALL, 256, 8, 65536, 0), 0.05,
	     "all-to-all at 256 ranks");
}

Test(fit, cluster_alpha_beta)
{
	struct cs_model m;
	struct cs_model_run r[16];
	size_t k = 0;

	cr_assert_eq(cs_model_defaults(&m), 0);
	for (uint64_t b = 4096; b <= (16u << 20); b *= 2) {
		double ns = b <= m.direct_max
				    ? 9000 + 3 * 0.4 * b
				    : 6 * 5000 + 2 * 3.0 / 4 * b * 0.4;

		r[k++] = (struct cs_model_run){ .ranks = 4, .bytes = b,
						.ns = ns };
	}
	cr_assert_eq(cs_model_fit_cluster(&m, r, k), 0);
	near(m.alpha_ns, 5000, 1e-6, "alpha");
	near(m.beta_ns, 0.4, 1e-9, "beta");
	near(m.direct_alpha_ns, 9000, 1e-6, "direct alpha");
}

Test(fit, refuses_unusable_runs)
{
	struct cs_model m;
	struct cs_model_run r[4] = {
		{ .ranks = 4, .bytes = 4u << 20, .mtu_payload = 8896, .ns = 1e5 },
		{ .ranks = 4, .bytes = 8u << 20, .mtu_payload = 8896, .ns = 2e5 },
		{ .ranks = 4, .bytes = 16u << 20, .mtu_payload = 8896, .ns = 4e5 },
	};

	cr_assert_eq(cs_model_defaults(&m), 0);
	/* one MTU: frames and bytes cannot be told apart */
	cr_assert_eq(cs_model_fit_beta(&m, r, 3), -EINVAL);
	cr_assert_eq(cs_model_fit_beta(&m, r, 2), -EINVAL);
	cr_assert_eq(cs_model_fit_a2a(&m, r, 1), -EINVAL);
	cr_assert_eq(cs_model_fit_ps(&m, r, 3), -EINVAL); /* no servers */
	cr_assert_eq(cs_model_fit_cluster(&m, r, 1), -EINVAL);
	/* time falling with size: no physical beta */
	r[0].ns = 4e5, r[2].ns = 1e5;
	cr_assert_eq(cs_model_fit_cluster(&m, r, 3), -ERANGE);
}

Test(predict, structure)
{
	struct cs_model t = truth();
	struct cs_model_case c = { CS_MODEL_ALLREDUCE, 64, 1, 4096, 0 };
	const char *algo;
	char why[200];
	double a, b;

	/* the engine's choice: direct up to direct_max and 64 peers */
	cr_assert_eq(cs_model_predict(&t, &c, &a, &algo, why, sizeof(why)), 0);
	cr_assert_str_eq(algo, "direct");
	c.ranks = 256;
	cr_assert_eq(cs_model_predict(&t, &c, &a, &algo, why, sizeof(why)), 0);
	cr_assert_str_eq(algo, "ring");
	c.bytes = 1u << 20;
	cr_assert_eq(cs_model_predict(&t, &c, &a, &algo, why, sizeof(why)), 0);
	cr_assert_str_eq(algo, "ring");
	/* latency-bound: window stalls dominate, not the bytes */
	cr_assert_gt(a, (2.0 * 255 / 8 - 1) * t.ack_turn_ns);
	/* the transport core's latency class (<= tp.small_bytes): frames
	 * acknowledged at once, no delayed-ACK stalls, only the chain */
	b = pred(&t, CS_MODEL_ALLREDUCE, 256, 1, t.small_bytes, 0);
	cr_assert_lt(b, 510 * (t.alpha_ns + 1000), "latency class: %g", b);
	b = pred(&t, CS_MODEL_ALLREDUCE, 256, 1, 2 * t.small_bytes, 0);
	cr_assert_gt(b, 60 * t.ack_turn_ns, "bulk: %g", b);
	/* bandwidth-bound: 2 (n-1)/n S beta at least */
	b = pred(&t, CS_MODEL_ALLREDUCE, 256, 1, 64u << 20, 0);
	cr_assert_gt(b, 2.0 * 255 / 256 * (64u << 20) * t.beta_ns);
	cr_assert_lt(b, 1.1 * 2.0 * 255 / 256 * (64u << 20) * t.beta_ns);
	/* more ranks never faster for the ring at a fixed size */
	for (uint32_t n = 4; n < 512; n *= 2)
		cr_assert_leq(pred(&t, CS_MODEL_ALLREDUCE_RING, n, 1, 1u << 20,
				   0),
			      pred(&t, CS_MODEL_ALLREDUCE_RING, 2 * n, 1,
				   1u << 20, 0));
	/* two-level all-to-all: the busiest NIC carries ceil((M-1)/L) streams */
	a = pred(&t, CS_MODEL_ALLTOALL_TWO_LEVEL, 64, 8, 1u << 20, 0);
	b = pred(&t, CS_MODEL_ALLTOALL_TWO_LEVEL, 256, 8, 1u << 20, 0);
	near(b - t.a2a_alpha_ns, a - t.a2a_alpha_ns, 0.05,
	     "two-level: same bytes per NIC at 8 and 32 nodes");
}

Test(predict, refuses)
{
	struct cs_model t = truth();
	struct cs_model_case c = { CS_MODEL_ALLTOALL, 64, 8, 4096, 0 };
	char why[200];
	double ns;

	t.have_a2a = false;
	snprintf(t.source, sizeof(t.source), "cluster");
	cr_assert_eq(cs_model_predict(&t, &c, &ns, NULL, why, sizeof(why)),
		     -ENODATA);
	cr_assert(strstr(why, "all-to-all"), "%s", why);
	t.have_ps = false;
	c.op = CS_MODEL_PS;
	cr_assert_eq(cs_model_predict(&t, &c, &ns, NULL, why, sizeof(why)),
		     -ENODATA);
	cr_assert(strstr(why, "PS"), "%s", why);
	c.op = CS_MODEL_ALLREDUCE;
	c.rpn = 3; /* does not divide 64 */
	cr_assert_eq(cs_model_predict(&t, &c, &ns, NULL, why, sizeof(why)),
		     -EINVAL);
	c.rpn = 1;
	c.ranks = 0;
	cr_assert_eq(cs_model_predict(&t, &c, &ns, NULL, why, sizeof(why)),
		     -EINVAL);
}

static char *tmpfile_with(const char *text)
{
	static char path[64];
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "/tmp/cs_model_XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
	return path;
}

Test(file, round_trip)
{
	struct cs_model t = truth(), m;
	char path[] = "/tmp/cs_model_rt_XXXXXX", err[300];
	int fd = mkstemp(path);
	FILE *f = fdopen(fd, "w");

	snprintf(t.source, sizeof(t.source), "sim");
	t.fit_nodes = 4;
	cr_assert_eq(cs_model_save(&t, f), 0);
	fclose(f);
	cr_assert_eq(cs_model_load(path, &m, err, sizeof(err)), 0, "%s", err);
	unlink(path);
	near(m.alpha_ns, t.alpha_ns, 1e-6, "alpha");
	near(m.beta_ns, t.beta_ns, 1e-5, "beta");
	near(m.ps_beta_ns, t.ps_beta_ns, 1e-4, "ps beta");
	cr_assert_eq(m.window, t.window);
	cr_assert_eq(m.chunk, t.chunk);
	cr_assert(m.have_a2a && m.have_ps);
	cr_assert_str_eq(m.source, "sim");
}

Test(file, bad_input_named)
{
	struct cs_model m;
	char err[300], *p;

	cr_assert_eq(cs_model_load("/nonexistent/model.json", &m, err,
				   sizeof(err)),
		     -ENOENT);
	p = tmpfile_with("{ \"format\": 1, ");
	cr_assert_eq(cs_model_load(p, &m, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, p), "%s", err); /* names the file and place */
	unlink(p);
	p = tmpfile_with("{ \"format\": 2 }");
	cr_assert_eq(cs_model_load(p, &m, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "format"), "%s", err);
	unlink(p);
	p = tmpfile_with("{ \"format\": 1, \"source\": \"sim\", \"fit_nodes\": "
			 "4, \"measured\": { \"alpha_ns\": -1 }, "
			 "\"protocol\": {} }");
	cr_assert_eq(cs_model_load(p, &m, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "measured.alpha_ns"), "%s", err);
	unlink(p);
}

Test(plan, loads_and_refuses)
{
	struct cs_plan p;
	char err[300], *f;

	f = tmpfile_with(
		"{ \"groups\": [ { \"name\": \"a\", \"kind\": \"dense\", "
		"\"params\": 1000 }, { \"name\": \"e\", \"kind\": \"sparse\", "
		"\"rows\": 100, \"dim\": 8, \"rows_per_step\": 10 } ] }");
	cr_assert_eq(cs_plan_load(f, &p, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(p.ngroups, 2);
	cr_assert_eq(p.g[1].kind, CS_PLAN_SPARSE);
	cs_plan_free(&p);
	unlink(f);
	f = tmpfile_with("{ \"groups\": [ { \"name\": \"e\", \"kind\": "
			 "\"sparse\", \"rows\": 10, \"dim\": 8, "
			 "\"rows_per_step\": 11 } ] }");
	cr_assert_eq(cs_plan_load(f, &p, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "groups[0].rows_per_step"), "%s", err);
	unlink(f);
	f = tmpfile_with("{ \"groups\": [ { \"name\": \"x\", \"kind\": "
			 "\"dense\", \"params\": 1 }, { \"name\": \"x\", "
			 "\"kind\": \"dense\", \"params\": 1 } ] }");
	cr_assert_eq(cs_plan_load(f, &p, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "twice"), "%s", err);
	unlink(f);
	f = tmpfile_with("{ \"groups\": [ { \"name\": \"x\", \"kind\": "
			 "\"conv\", \"params\": 1 } ] }");
	cr_assert_eq(cs_plan_load(f, &p, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "groups[0].kind"), "%s", err);
	unlink(f);
	f = tmpfile_with("{ \"groups\": [] }");
	cr_assert_eq(cs_plan_load(f, &p, err, sizeof(err)), -EINVAL);
	unlink(f);
}

Test(plan, picks_the_cheapest_that_applies)
{
	struct cs_model t = truth();
	struct cs_plan_group dense = { "d", CS_PLAN_DENSE, 1 << 20 },
			     sparse = { .name = "s", .kind = CS_PLAN_SPARSE,
					.rows = 1e7, .dim = 64,
					.rows_per_step = 1024,
					.replicated = true };
	double ar, ps, x;

	dense.replicated = true;
	sparse.params = sparse.rows * sparse.dim;
	cr_assert_eq(cs_plan_cost(&t, &dense, 4, CS_PLAN_ALLTOALL, 64, 8, &x,
				  NULL),
		     -ENOTSUP);
	cr_assert_eq(cs_plan_cost(&t, &dense, 4, CS_PLAN_LOCAL, 64, 8, &x,
				  NULL),
		     -ENOTSUP); /* replicated: local only would diverge */
	/* a huge table touched sparsely: PS moves only the rows */
	cr_assert_eq(cs_plan_cost(&t, &sparse, 4, CS_PLAN_ALLREDUCE, 64, 8,
				  &ar, NULL),
		     0);
	cr_assert_eq(cs_plan_cost(&t, &sparse, 4, CS_PLAN_PS, 64, 8, &ps,
				  NULL),
		     0);
	cr_assert_lt(ps * 10, ar);
}
