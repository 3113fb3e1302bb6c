/* SPDX-License-Identifier: MIT */
/*
 * collstack sim allreduce | reduce-scatter | all-gather | broadcast: the
 * command line and the report; the scenario (one transport core per
 * simulated node, the real coordinator for membership) is sim/coll.c.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "internal/log.h"
#include "collectives/coll_data.h"
#include "sim/coll.h"
#include "sim/sim.h"

/* --set: rel.*, pacer.*, cc.* and tp.* keys. */
static int sc_set(struct cs_simcoll_cfg *c, char *kv, const char *name)
{
	char err[160] = "", *eq = strchr(kv, '=');
	int ret;

	if (!eq) {
		fprintf(stderr, "sim %s: --set wants key=value, got '%s'\n",
			name, kv);
		return -1;
	}
	*eq = 0;
	ret = cs_xport_params_set(&c->xp, kv, eq + 1, err, sizeof(err));
	if (ret == -ENOENT)
		ret = cs_cfg_set(cs_tp_cfg, cs_tp_cfg_len, &c->tp, kv, eq + 1,
				 err, sizeof(err));
	if (ret == -ENOENT)
		fprintf(stderr, "sim %s: unknown key '%s'\n", name, kv);
	else if (ret)
		fprintf(stderr, "sim %s: %s\n", name, err);
	return ret;
}

/* ---- the report -------------------------------------------------------- */

static double sc_us(cs_ns_t t)
{
	return (double)t / 1000;
}

static int sc_report_plain(const struct cs_simcoll_cfg *cfg,
			   const struct cs_simcoll_result *r, bool verbose)
{
	const char *name = cs_coll_kind_name(cfg->kind);
	double f = cs_simcoll_factor(cfg->kind, cfg->ranks), bound_ns, algbw;
	double time_ns = (double)r->time_ns, ideal = f * (double)cfg->bytes;

	if (r->violation) {
		printf("%s FAIL ranks=%u bytes=%" PRIu64 " seed=%" PRIu64
		       ": %s\n",
		       name, cfg->ranks, cfg->bytes, cfg->seed, r->why);
		return 1;
	}
	if (r->wrong) {
		printf("%s FAIL ranks=%u bytes=%" PRIu64 " seed=%" PRIu64
		       " wrong=%" PRIu64 ": %s\n",
		       name, cfg->ranks, cfg->bytes, cfg->seed, r->wrong,
		       r->first);
		return 1;
	}
	/* broadcast: every byte crosses every hop once */
	bound_ns = cs_simcoll_hops(cfg->kind, cfg->ranks) * cfg->delay_us *
			   1000 +
		   f * (double)cfg->bytes * 8 / cfg->gbps;
	if (cfg->ranks < 2)
		bound_ns = 0;
	algbw = time_ns > 0 ? (double)cfg->bytes * 8 / time_ns : 0;
	printf("%s ok ranks=%u bytes=%" PRIu64 " time_us=%.3f algbw_gbps=%.3f"
	       " busbw_gbps=%.3f sent_per_rank_over_ideal=%.4f"
	       " time_over_bound=%.4f\n",
	       name, cfg->ranks, cfg->bytes, time_ns / 1000, algbw,
	       algbw * (cfg->kind == CS_COLL_BROADCAST ? 1.0 : f),
	       ideal > 0 ? r->max_sent / ideal : 0,
	       bound_ns > 0 ? time_ns / bound_ns : 0);
	if (verbose)
		fprintf(stderr,
			"  seed=%" PRIu64 " mtu=%u payload/pkt=%u "
			"channels=%u bound_us=%.3f retx=%" PRIu64
			" timeouts=%" PRIu64 " stale_refused=%" PRIu64
			" stale_checked=%" PRIu64 " pure_acks=%" PRIu64
			" events=%" PRIu64 " max_frame_bytes_per_rank=%.0f"
			" wire_bytes_over_ideal=%.4f (with %d B/frame of"
			" preamble, IFG, FCS) nodata=%d\n",
			cfg->seed, cfg->mtu,
			cfg->mtu - 20 - 8 - CS_PROTO_HDR_WIRE_LEN, r->channels,
			bound_ns / 1000, r->retx, r->timeouts, r->fillers,
			r->stale_checked, r->pure_acks, r->events, r->max_sent,
			ideal > 0 ? r->max_wire / ideal : 0, CS_SIM_WIRE_EXTRA,
			cfg->nodata);
	return 0;
}

/* A loss, then a join: the third operation ran on n - 1 + 1 ranks, and
 * both new views reached every member within 3 heartbeat periods of the
 * coordinator moving to them. */
static int sc_report_join(const struct cs_simcoll_cfg *cfg,
			  const struct cs_simcoll_result *r)
{
	const char *name = cs_coll_kind_name(cfg->kind);
	cs_ns_t bound = 3 * cfg->mp.hb_interval;
	bool ok = r->join_n == cfg->ranks && r->finished[3] == r->join_n &&
		  !r->wrong;

	for (int i = 0; i < 2; i++)
		ok = ok && r->epochs[i] && r->settled[i] == r->view_members[i] &&
		     r->settle_ns[i] <= bound;
	printf("%s join %s ranks=%u->%u->%u finished=%u time_us=%.3f"
	       " wrong=%" PRIu64 " loss_view: epoch=%u applied=%u/%u"
	       " settle_us=%.3f join_view: epoch=%u applied=%u/%u"
	       " settle_us=%.3f bound_us=%.3f (3 heartbeats)%s%s\n",
	       name, ok ? "ok" : "FAIL", cfg->ranks, r->view_n, r->join_n,
	       r->finished[3], sc_us(r->op_ns[3]), r->wrong, r->epochs[0],
	       r->settled[0], r->view_members[0], sc_us(r->settle_ns[0]),
	       r->epochs[1], r->settled[1], r->view_members[1],
	       sc_us(r->settle_ns[1]), sc_us(bound), r->wrong ? ": " : "",
	       r->first);
	return ok ? 0 : 1;
}

static int sc_report_member(const struct cs_simcoll_cfg *cfg,
			    const struct cs_simcoll_result *r, bool verbose)
{
	const char *name = cs_coll_kind_name(cfg->kind);
	double bound_us = 2.0 * cfg->mp.fail_timeout / 1000;
	int rc = 0;

	if (r->violation) {
		printf("%s FAIL ranks=%u seed=%" PRIu64 ": %s\n", name,
		       cfg->ranks, cfg->seed, r->why);
		return 1;
	}
	switch (r->mode) {
	case CS_SIMCOLL_PEER_LOST:
		rc = r->good != r->want;
		printf("%s peer_lost %s ranks=%u lost=%u"
		       " survivors_reported=%u/%u max_report_us=%.3f"
		       " bound_us=%.3f detect_us=%.3f"
		       " epoch=%u stale_dropped=%" PRIu64 " injected=%" PRIu64
		       "\n",
		       name, rc ? "FAIL" : "ok", cfg->ranks,
		       (uint32_t)cfg->fail_rank, r->good, r->want,
		       sc_us(r->max_report_ns), bound_us, sc_us(r->detect_ns),
		       r->epoch, r->stale_dropped, r->injected);
		if (r->bad != CS_SIM_NODE_NONE)
			printf("  first bad survivor: rank %u reported=%d "
			       "status=%s culprit=%d (sim run %d)\n",
			       r->bad, r->bad_reported,
			       cs_strerror(r->bad_status), (int)r->bad_culprit,
			       r->sim_ret);
		if (!cfg->reform)
			break;
		if (!r->view_n || r->finished[2] != r->view_n ||
		    (r->injected && !r->stale_dropped)) {
			printf("%s reform FAIL: %u of %u finished, "
			       "stale_dropped=%" PRIu64 " (sim run %d)\n",
			       name, r->finished[2], r->view_n,
			       r->stale_dropped, r->sim_ret);
			return 1;
		}
		printf("%s reform %s ranks=%u epoch=%u bytes=%" PRIu64
		       " time_us=%.3f wrong=%" PRIu64 " future_dropped=%" PRIu64
		       "%s%s\n",
		       name, r->wrong ? "FAIL" : "ok", r->view_n, r->epoch,
		       cfg->bytes, sc_us(r->op_ns[2]), r->wrong,
		       r->future_dropped, r->wrong ? ": " : "", r->first);
		rc |= r->wrong ? 1 : 0;
		if (cfg->grow)
			rc |= sc_report_join(cfg, r);
		break;
	case CS_SIMCOLL_DEADLINE:
		rc = r->good == r->want && r->named == r->want ? 0 : 1;
		printf("%s deadline %s ranks=%u stalled=%u"
		       " reported_timeout=%u/%u stuck_rank_named=%u/%u"
		       " waits_on_stalled_directly=%u"
		       " deadline_us=%.3f max_report_us=%.3f epoch=%u\n",
		       name, rc ? "FAIL" : "ok", cfg->ranks,
		       (uint32_t)cfg->stall_rank, r->good, r->want, r->named,
		       r->want, r->direct, sc_us(cfg->deadline),
		       sc_us(r->max_report_ns), r->coord_epoch);
		for (uint32_t i = 0; i < r->ndiag; i++)
			printf("  %s\n", r->diag[i]);
		if (r->good > r->ndiag)
			printf("  ... and %u more\n", r->good - r->ndiag);
		break;
	case CS_SIMCOLL_GROW:
		if (!r->view_n || r->finished[2] != r->view_n ||
		    r->finished[1] != cfg->ranks) {
			printf("%s grow FAIL: %u of %u finished the first op, "
			       "%u of %u the second (sim run %d)\n",
			       name, r->finished[1], cfg->ranks, r->finished[2],
			       r->view_n, r->sim_ret);
			return 1;
		}
		rc = r->wrong ? 1 : 0;
		printf("%s grow %s ranks=%u->%u epoch=%u bytes=%" PRIu64
		       " time_us=%.3f,%.3f wrong=%" PRIu64 "%s%s\n",
		       name, rc ? "FAIL" : "ok", cfg->ranks, r->view_n,
		       r->epoch, cfg->bytes, sc_us(r->op_ns[1]),
		       sc_us(r->op_ns[2]), r->wrong, r->wrong ? ": " : "",
		       r->first);
		break;
	default:
		rc = r->wrong || r->finished[1] != cfg->ranks ? 1 : 0;
		printf("%s member %s ranks=%u bytes=%" PRIu64 " time_us=%.3f"
		       " wrong=%" PRIu64 " finished=%u%s%s\n",
		       name, rc ? "FAIL" : "ok", cfg->ranks, cfg->bytes,
		       sc_us(r->op_ns[1]), r->wrong, r->finished[1],
		       r->wrong ? ": " : "", r->first);
		if (r->reports[1])
			printf("  %u ranks failed with %s, first: %s\n",
			       r->reports[1], cs_strerror(r->fail_status),
			       r->fail_diag);
		break;
	}
	if (verbose)
		fprintf(stderr,
			"  seed=%" PRIu64 " events=%" PRIu64
			" hb_interval_us=%.3f fail_timeout_us=%.3f"
			" stale_dropped=%" PRIu64 " future_dropped=%" PRIu64
			" coord_lost_reports=%u views=%u sim_now_us=%.3f\n",
			cfg->seed, r->events, sc_us(cfg->mp.hb_interval),
			sc_us(cfg->mp.fail_timeout), r->stale_dropped,
			r->future_dropped, r->coord_lost, r->views,
			sc_us(r->sim_now));
	return rc;
}

static int sc_run(const struct cs_simcoll_cfg *cfg, bool verbose)
{
	struct cs_simcoll_result r;
	int ret, rc;

	/* the coordinator's and members' log lines (a join per rank) are
	 * the real ones; --verbose shows them */
	if (!verbose && cs_log_level > CS_LOG_ERR)
		cs_log_level = CS_LOG_ERR;
	ret = cs_simcoll_run(cfg, &r);
	if (ret) {
		fprintf(stderr, "sim %s: set-up failed: %s\n",
			cs_coll_kind_name(cfg->kind), cs_strerror(ret));
		return 2;
	}
	rc = cfg->member ? sc_report_member(cfg, &r, verbose)
			 : sc_report_plain(cfg, &r, verbose);
	cs_simcoll_result_fini(&r);
	return rc;
}

/* ---- command line ----------------------------------------------------- */

static void sc_usage(const char *name, FILE *out)
{
	fprintf(out,
		"usage: collstack sim %s --ranks N --bytes S [options]\n"
		"  --ranks N          ranks in the ring (1..%u)\n"
		"  --bytes S          buffer bytes (K/M/G suffixes); for\n"
		"                     reduce-scatter, all-gather: the total,\n"
		"                     N x the per-rank part\n"
		"  --dtype T          f32 f64 f16 bf16 i32 i64 u8 (f32)\n"
		"  --op O             sum prod min max (sum)\n"
		"  --channels C       rings (coll.channels)\n"
		"  --chunk B          bytes per pipelined chunk (coll.chunk)\n"
		"  --window W         unacknowledged chunks per channel\n"
		"  --direct-max B     allreduce up to B bytes as a direct\n"
		"                     exchange on a switch (coll.direct_max;\n"
		"                     0: always the ring of links)\n"
		"  --mtu M            IP MTU (9000: 8896 payload bytes)\n"
		"  --loss P           frame loss probability per link\n"
		"  --dup P            frame duplication probability\n"
		"  --reorder P        probability a frame is held back\n"
		"  --reorder-us D     ... by up to D microseconds (5)\n"
		"  --seed K           PRNG seed for data and impairments (1);\n"
		"                     'random': from the clock (printed)\n"
		"  --data D           exact: small integers, exact in every\n"
		"                     type (default); random: full-mantissa\n"
		"                     floats, checked against a rounding\n"
		"                     bound and for the same bits on every\n"
		"                     rank\n"
		"  --link-gbps G      link rate (100)\n"
		"  --delay-us D       one-hop propagation delay (1)\n"
		"  --root R           broadcast root (0)\n"
		"  --oop              out of place (default: in place)\n"
		"  --alt-dir          odd channels run the ring backwards\n"
		"  --no-data          timing only: payload bytes are neither\n"
		"                     carried nor checked (huge sizes)\n"
		"  --time-limit-ms T  give up after T ms of simulated time\n"
		"  --set KEY=VALUE    transport key (rel.*, pacer.*, cc.*, tp.*)\n"
		"  --verbose          counters on stderr\n"
		"membership and failures (allreduce; ranks on a switch with a\n"
		"node running the coordinator of control/boot.c; its messages\n"
		"and the heartbeats on the same links):\n"
		"  --fail-rank R      node R dies at --fail-at-us: every\n"
		"                     survivor must report CS_ERR_PEER_LOST\n"
		"                     naming R within 2 x fail timeout\n"
		"  --fail-at-us T     when (us after the group formed)\n"
		"  --reform           then the n-1 survivors run the next\n"
		"                     allreduce in the new epoch (verified)\n"
		"  --stall-rank R     node R stops processing collective\n"
		"                     traffic at --stall-at-us (heartbeats go\n"
		"                     on); needs --deadline-us\n"
		"  --stall-at-us T    when (us after the group formed)\n"
		"  --deadline-us D    per-operation deadline: CS_ERR_TIMEOUT\n"
		"                     with a line saying what it waits for\n"
		"  --show-diag K      diagnostic lines printed (8)\n"
		"  --grow             a new node joins at the operation\n"
		"                     boundary; the next allreduce has n+1.\n"
		"                     With --fail-rank --reform: a loss, then\n"
		"                     a join after the re-formed allreduce;\n"
		"                     each new view must reach all its members\n"
		"                     within 3 heartbeat periods\n"
		"  --membership       the star and coordinator, no failure\n"
		"  --hb-interval-ms H member.hb_interval (100)\n"
		"  --fail-timeout-ms F member.fail_timeout (1000)\n",
		name, CS_COLL_MAX_RANKS);
}

static int sc_main(enum cs_coll_kind kind, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "ranks", required_argument, NULL, 'n' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "dtype", required_argument, NULL, 't' },
		{ "op", required_argument, NULL, 'o' },
		{ "channels", required_argument, NULL, 'c' },
		{ "chunk", required_argument, NULL, 'k' },
		{ "window", required_argument, NULL, 'w' },
		{ "direct-max", required_argument, NULL, 1011 },
		{ "mtu", required_argument, NULL, 'm' },
		{ "loss", required_argument, NULL, 'l' },
		{ "dup", required_argument, NULL, 'D' },
		{ "reorder", required_argument, NULL, 'R' },
		{ "reorder-us", required_argument, NULL, 'U' },
		{ "seed", required_argument, NULL, 's' },
		{ "data", required_argument, NULL, 'X' },
		{ "link-gbps", required_argument, NULL, 'g' },
		{ "delay-us", required_argument, NULL, 'd' },
		{ "root", required_argument, NULL, 'r' },
		{ "oop", no_argument, NULL, 'O' },
		{ "alt-dir", no_argument, NULL, 'A' },
		{ "no-data", no_argument, NULL, 'N' },
		{ "time-limit-ms", required_argument, NULL, 'T' },
		{ "set", required_argument, NULL, 'S' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "fail-rank", required_argument, NULL, 1000 },
		{ "fail-at-us", required_argument, NULL, 1001 },
		{ "reform", no_argument, NULL, 1002 },
		{ "stall-rank", required_argument, NULL, 1003 },
		{ "stall-at-us", required_argument, NULL, 1004 },
		{ "deadline-us", required_argument, NULL, 1005 },
		{ "show-diag", required_argument, NULL, 1006 },
		{ "grow", no_argument, NULL, 1007 },
		{ "membership", no_argument, NULL, 1008 },
		{ "hb-interval-ms", required_argument, NULL, 1009 },
		{ "fail-timeout-ms", required_argument, NULL, 1010 },
		{ 0 },
	};
	const char *name = cs_coll_kind_name(kind);
	bool verbose = false;
	struct cs_simcoll_cfg cfg;
	unsigned long long sz;
	const char *why;
	uint64_t v;
	int o;

	if (cs_simcoll_defaults(&cfg, kind))
		return 2;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			cfg.ranks = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			if (cs_sim_parse_size(optarg, &sz))
				goto bad;
			cfg.bytes = sz;
			break;
		case 't':
			if (cs_dtype_parse(optarg, &cfg.dtype))
				goto bad;
			break;
		case 'o':
			if (cs_redop_parse(optarg, &cfg.op))
				goto bad;
			break;
		case 'c':
			cfg.channels = (uint32_t)strtoul(optarg, NULL, 0);
			if (!cfg.channels)
				goto bad;
			break;
		case 'k':
			if (cs_sim_parse_size(optarg, &sz) || !sz)
				goto bad;
			cfg.chunk = sz;
			break;
		case 1011:
			if (cs_sim_parse_size(optarg, &sz) || sz > (1ull << 30))
				goto bad;
			cfg.direct_max = (int64_t)sz;
			break;
		case 'w':
			cfg.window = (uint32_t)strtoul(optarg, NULL, 0);
			if (!cfg.window)
				goto bad;
			break;
		case 'm':
			cfg.mtu = (uint32_t)strtoul(optarg, NULL, 0);
			if (cfg.mtu < 20 + 8 + CS_PROTO_HDR_WIRE_LEN + 8 ||
			    cfg.mtu > 65535)
				goto bad;
			break;
		case 'l':
			cfg.loss = strtod(optarg, NULL);
			break;
		case 'D':
			cfg.dup = strtod(optarg, NULL);
			break;
		case 'R':
			cfg.reorder = strtod(optarg, NULL);
			break;
		case 'U':
			cfg.reorder_ns = (uint64_t)(strtod(optarg, NULL) * 1e3);
			break;
		case 's':
			if (!strcmp(optarg, "random"))
				cfg.seed = (uint64_t)time(NULL) * 1000003u ^
					   (uint64_t)getpid();
			else
				cfg.seed = strtoull(optarg, NULL, 0);
			break;
		case 'X':
			if (!strcmp(optarg, "random"))
				cfg.random_data = true;
			else if (strcmp(optarg, "exact"))
				goto bad;
			break;
		case 'g':
			cfg.gbps = strtod(optarg, NULL);
			if (!(cfg.gbps > 0))
				goto bad;
			break;
		case 'd':
			cfg.delay_us = strtod(optarg, NULL);
			if (cfg.delay_us < 0)
				goto bad;
			break;
		case 'r':
			cfg.root = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 'O':
			cfg.oop = true;
			break;
		case 'A':
			cfg.alt_dir = true;
			break;
		case 'N':
			cfg.nodata = true;
			break;
		case 'T':
			cfg.time_limit_ms = strtod(optarg, NULL);
			break;
		case 'S':
			if (sc_set(&cfg, optarg, name))
				return 2;
			break;
		case 'v':
			verbose = true;
			break;
		case 'h':
			sc_usage(name, stdout);
			return 0;
		case 1000:
			cfg.fail_rank = strtoll(optarg, NULL, 0);
			cfg.member = true;
			break;
		case 1001:
			cfg.fail_at = (cs_ns_t)(strtod(optarg, NULL) * 1e3);
			break;
		case 1002:
			cfg.reform = true;
			break;
		case 1003:
			cfg.stall_rank = strtoll(optarg, NULL, 0);
			cfg.member = true;
			break;
		case 1004:
			cfg.stall_at = (cs_ns_t)(strtod(optarg, NULL) * 1e3);
			break;
		case 1005:
			cfg.deadline = (cs_ns_t)(strtod(optarg, NULL) * 1e3);
			if (!cfg.deadline)
				goto bad;
			cfg.member = true;
			break;
		case 1006:
			cfg.show_diag = (uint32_t)strtoul(optarg, NULL, 0);
			break;
		case 1007:
			cfg.grow = true;
			cfg.member = true;
			break;
		case 1008:
			cfg.member = true;
			break;
		case 1009:
			cfg.mp.hb_interval =
				(uint64_t)(strtod(optarg, NULL) * 1e6);
			break;
		case 1010:
			cfg.mp.fail_timeout =
				(uint64_t)(strtod(optarg, NULL) * 1e6);
			break;
		default:
			goto bad;
		}
	}
	if (!cfg.ranks || cfg.ranks > CS_COLL_MAX_RANKS ||
	    cfg.root >= cfg.ranks || optind != argc)
		goto bad;
	if (!(cfg.loss >= 0 && cfg.loss < 1 && cfg.dup >= 0 && cfg.dup < 1 &&
	      cfg.reorder >= 0 && cfg.reorder <= 1))
		goto bad;
	v = cs_dtype_size(cfg.dtype) *
	    ((kind == CS_COLL_REDUCE_SCATTER || kind == CS_COLL_ALL_GATHER)
		     ? cfg.ranks
		     : 1);
	if (cfg.random_data && !cs_td_eps(cfg.dtype)) {
		fprintf(stderr, "sim %s: --data random needs a floating type\n",
			name);
		return 2;
	}
	if (cfg.bytes % v) {
		fprintf(stderr,
			"sim %s: --bytes must be a multiple of %" PRIu64 "\n",
			name, v);
		return 2;
	}
	why = cs_simcoll_check(&cfg);
	if (why) {
		fprintf(stderr, "sim %s: %s\n", name, why);
		return 2;
	}
	return sc_run(&cfg, verbose);
bad:
	sc_usage(name, stderr);
	return 2;
}

int cs_cmd_sim_allreduce(int argc, char **argv)
{
	return sc_main(CS_COLL_ALLREDUCE, argc, argv);
}

int cs_cmd_sim_reduce_scatter(int argc, char **argv)
{
	return sc_main(CS_COLL_REDUCE_SCATTER, argc, argv);
}

int cs_cmd_sim_all_gather(int argc, char **argv)
{
	return sc_main(CS_COLL_ALL_GATHER, argc, argv);
}

int cs_cmd_sim_broadcast(int argc, char **argv)
{
	return sc_main(CS_COLL_BROADCAST, argc, argv);
}
