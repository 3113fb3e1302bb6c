// SPDX-License-Identifier: MIT
/*
 * Engine-only throughput of a shard store on one core: push rows/s (rx +
 * flush, SGD, async), pull rows/s, and push rows/s while a checkpoint of
 * the whole shard runs (snapshot steps between bursts, the writer's
 * control thread writing with io_uring). No network, no worker engine:
 * what one server core can apply. Run by scripts/bench-ps.sh.
 *
 *   ps_bench [--dim D] [--mb SHARD_MB] [--keys-per-msg K] [--seconds S]
 *            [--ckpt PATH] [--step ROWS] [--share F]
 *
 * --share F: the snapshot paced (struct cs_ps_snap_pace: its steps take
 * at most F of the core's time); without, one step of --step rows after
 * every 4 pushes. The push rate during the checkpoint is compared with the
 * mean of a push window right before it and one right after it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_io.h"
#include "collectives/ps/ps_wire.h"

static uint64_t replies;

static int count_send(void *ctx, uint32_t w, const void *m, size_t n)
{
	(void)ctx, (void)w, (void)m, (void)n;
	replies++;
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put_id(uint8_t *msg, uint64_t id)
{
	for (int i = 0; i < 8; i++)
		msg[16 + i] = (uint8_t)(id >> (56 - 8 * i));
}

#define NMSG 64

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Push messages for @secs: rows per second. */
static double push_window(struct cs_ps_store *st, uint8_t **push,
			  size_t len_push, uint32_t kpm, uint64_t *id,
			  double secs)
{
	uint64_t rows = 0;
	double t0 = now_s(), t;

	do {
		for (int i = 0; i < NMSG; i++) {
			put_id(push[i], (*id)++);
			cs_ps_store_rx(st, push[i], len_push);
			cs_ps_store_flush(st);
			rows += kpm;
		}
		t = now_s() - t0;
	} while (t < secs);
	return (double)rows / t;
}

int main(int argc, char **argv)
{
	uint32_t dim = 16, kpm = 256, step = 4096;
	double secs = 2.0, share = 0, t0, t, base_rate;
	size_t mb = 256, rb, len_push, len_pull;
	const char *ckpt_path = NULL;
	struct cs_ps_table_spec s;
	struct cs_ps_store *st;
	struct cs_ps_store_cfg cfg = { .msg_max = 1 << 20, .parked_max = 1024 };
	struct cs_ps_store_io io = { .send = count_send };
	uint8_t *push[NMSG], *pull[NMSG];
	uint64_t rng = 42, rows, nrows, id = 0, pull_id = 0;
	float *row;
	int rc;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--dim"))
			dim = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--mb"))
			mb = (size_t)atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--keys-per-msg"))
			kpm = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seconds"))
			secs = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--ckpt"))
			ckpt_path = argv[i + 1];
		else if (!strcmp(argv[i], "--step"))
			step = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--share"))
			share = atof(argv[i + 1]);
		else {
			fprintf(stderr, "ps_bench: unknown %s\n", argv[i]);
			return 2;
		}
	}
	memset(&s, 0, sizeof(s));
	s.id = 0;
	s.dim = dim;
	s.dtype = CS_F32;
	s.mode = CS_PS_ASYNC;
	s.workers = 1;
	cs_ps_opt_defaults(&s.opt, CS_PS_OPT_SGD);
	rb = cs_ps_row_bytes(&s);
	nrows = (uint64_t)mb * 1024 * 1024 / rb;
	s.key_max = nrows;
	if (cs_ps_spec_check(&s) || !kpm)
		return 2;
	rc = cs_ps_store_create(&st, &cfg, &io);
	if (!rc)
		rc = cs_ps_store_add_table(st, &s, 0, NULL);
	if (rc) {
		fprintf(stderr, "ps_bench: store: %s\n", strerror(-rc));
		return 1;
	}
	row = calloc(dim, sizeof(float));
	for (uint32_t j = 0; j < dim; j++)
		row[j] = 0.001f * (float)(j + 1);
	len_push = cs_ps_wire_len(CS_PS_MSG_PUSH, kpm, dim, CS_F32, 0);
	len_pull = cs_ps_wire_len(CS_PS_MSG_PULL, kpm, dim, CS_F32, 0);
	if (!len_push || len_push > cfg.msg_max ||
	    kpm * rb + CS_PS_WIRE_HDR > cfg.msg_max)
		return 2;
	for (int i = 0; i < NMSG; i++) {
		struct cs_ps_msg m = { .type = CS_PS_MSG_PUSH,
				       .nparts = 1,
				       .nkeys = kpm,
				       .dim = dim,
				       .dtype = CS_F32 };

		push[i] = malloc(len_push);
		pull[i] = malloc(len_pull);
		cs_ps_wire_put_hdr(push[i], &m);
		for (uint32_t k = 0; k < kpm; k++) {
			cs_ps_wire_put_key(push[i], k,
					   cs_rand_next(&rng) % nrows);
			cs_ps_wire_put_row(push[i], &m, k, row);
		}
		m.type = CS_PS_MSG_PULL;
		cs_ps_wire_put_hdr(pull[i], &m);
		for (uint32_t k = 0; k < kpm; k++)
			cs_ps_wire_put_key(pull[i], k,
					   cs_rand_next(&rng) % nrows);
	}

	/* fill: every row exists (the shard is mb MiB of values) */
	t0 = now_s();
	{
		struct cs_ps_msg m = { .type = CS_PS_MSG_PUSH,
				       .nparts = 1,
				       .nkeys = kpm,
				       .dim = dim,
				       .dtype = CS_F32 };
		uint8_t *b = malloc(len_push);

		for (uint64_t k0 = 0; k0 < nrows; k0 += kpm) {
			uint32_t n =
				(uint32_t)CS_MIN((uint64_t)kpm, nrows - k0);

			m.nkeys = n;
			m.id = id++;
			cs_ps_wire_put_hdr(b, &m);
			for (uint32_t k = 0; k < n; k++) {
				cs_ps_wire_put_key(b, k, k0 + k);
				cs_ps_wire_put_row(b, &m, k, row);
			}
			cs_ps_store_rx(st, b,
				       cs_ps_wire_len(CS_PS_MSG_PUSH, n, dim,
						      CS_F32, 0));
			cs_ps_store_flush(st);
		}
		free(b);
	}
	printf("ps_bench fill rows=%llu row_bytes=%zu shard_mib=%zu "
	       "secs=%.2f\n",
	       (unsigned long long)nrows, rb, mb, now_s() - t0);

	/* push: one message per burst */
	rows = 0;
	t0 = now_s();
	do {
		for (int i = 0; i < NMSG; i++) {
			put_id(push[i], id++);
			cs_ps_store_rx(st, push[i], len_push);
			cs_ps_store_flush(st);
			rows += kpm;
		}
		t = now_s() - t0;
	} while (t < secs);
	base_rate = (double)rows / t;
	printf("ps_bench push row_bytes=%zu keys_per_msg=%u rows_per_s=%.0f "
	       "GB_per_s=%.3f\n",
	       rb, kpm, base_rate, base_rate * (double)rb / 1e9);

	rows = 0;
	t0 = now_s();
	do {
		for (int i = 0; i < NMSG; i++) {
			put_id(pull[i], pull_id++);
			cs_ps_store_rx(st, pull[i], len_pull);
			cs_ps_store_flush(st);
			rows += kpm;
		}
		t = now_s() - t0;
	} while (t < secs);
	printf("ps_bench pull row_bytes=%zu keys_per_msg=%u rows_per_s=%.0f "
	       "GB_per_s=%.3f\n",
	       rb, kpm, (double)rows / t, (double)rows / t * (double)rb / 1e9);

	if (ckpt_path) {
		struct cs_ps_snap_sink sink;
		struct cs_ps_ckpt *c;
		double t_ck;

		rc = cs_ps_ckpt_start(&c, ckpt_path, st, 0, 16, &sink);
		if (rc) {
			printf("ps_bench ckpt skipped: %s\n", strerror(-rc));
			goto out;
		}
		struct cs_ps_snap_pace pace;
		double before, after, during;

		if (share &&
		    cs_ps_snap_pace_init(&pace, share, 200000 /* 200 us */)) {
			fprintf(stderr, "ps_bench: --share in (0, 1]\n");
			return 2;
		}
		before = push_window(st, push, len_push, kpm, &id, secs);
		rc = cs_ps_store_snap_begin(st, 0, &sink, 1 << 20);
		if (rc)
			return 1;
		cs_ps_ckpt_set_clock(c, cs_ps_store_snap_clock(st));
		rows = 0;
		t0 = now_s();
		do {
			/* bursts of pushes, a bounded snapshot step between */
			for (int i = 0; i < 4; i++) {
				int k = (int)(id % NMSG);

				put_id(push[k], id++);
				cs_ps_store_rx(st, push[k], len_push);
				cs_ps_store_flush(st);
				rows += kpm;
			}
			if (!share) {
				rc = cs_ps_store_snap_step(st, step);
			} else if (cs_ps_snap_pace_due(&pace, now_ns())) {
				uint64_t a = now_ns();

				rc = cs_ps_store_snap_step(st, pace.rows);
				cs_ps_snap_pace_done(&pace, a, now_ns(),
						     cs_ps_ckpt_queued(c),
						     64u << 20);
			}
		} while (rc == 1);
		t = now_s() - t0;
		during = (double)rows / t;
		rc = cs_ps_ckpt_wait(c);
		t_ck = now_s() - t0;
		after = push_window(st, push, len_push, kpm, &id, secs);
		if (cs_ps_store_stats(st)->push_early ||
		    cs_ps_store_stats(st)->rejected) {
			fprintf(stderr, "ps_bench: pushes dropped\n");
			return 1;
		}
		printf("ps_bench ckpt rc=%d shard_mib=%zu %s=%g "
		       "snapshot_secs=%.2f written_secs=%.2f "
		       "push_rows_per_s_during=%.0f before=%.0f after=%.0f "
		       "slowdown_pct=%.1f",
		       rc, mb, share ? "share" : "step_rows",
		       share ? share : (double)step, t, t_ck, during, before,
		       after, 100.0 * (1.0 - during / ((before + after) / 2)));
		if (share)
			printf(" steps=%llu last_rows=%u held=%llu",
			       (unsigned long long)pace.steps, pace.rows,
			       (unsigned long long)pace.held);
		printf("\n");
	}
out:
	for (int i = 0; i < NMSG; i++) {
		free(push[i]);
		free(pull[i]);
	}
	free(row);
	cs_ps_store_destroy(st);
	return 0;
}
