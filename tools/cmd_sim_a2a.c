/* SPDX-License-Identifier: MIT */
/* `collstack sim alltoall`: one all-to-all(v) over the transport core in
 * the simulator, flat or two-level (sim/a2a.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "sim/a2a.h"
#include "collectives/moe.h"
#include "sim/moe.h"

static void a2a_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack sim alltoall [--ranks N | --nodes M]\n"
		"       [--ranks-per-node L] [--bytes S] [--uneven]\n"
		"       [--algo flat|two-level|rail|auto] [--no-bucket] [--loss P]\n"
		"       [--seed K] [--credit B] [--link-gbps G] [--delay-us D]\n"
		"       [--port-buffer B] [--mtu B] [--time-limit-ms T]\n"
		"       [--nodata] [--dynamic] [--set key=value]...\n\n"
		"One all-to-all over N ranks (N = M x L with --nodes), each\n"
		"rank with its own link to one switch; ranks of a node share\n"
		"memory (the two-level algorithm's intra-node stage). S is a\n"
		"rank's send buffer (N blocks of S/N; --uneven: skewed sizes,\n"
		"some empty: all-to-all-v). --dynamic: receivers learn their\n"
		"counts in the same operation. Every element is checked. Prints\n"
		"'alltoall ok ...' or 'alltoall FAILED ...' (exit 1).\n"
		"busbw = algbw x (N-1)/N; bound_us: the largest send buffer's\n"
		"network share at the link rate; jain: Jain's fairness index of\n"
		"the senders' rates (bytes / completion time), 1 = all equal.\n"
		"Defaults: 8 ranks, L 1,\n"
		"1 MiB, auto, 100 Gb/s, 1 us per link, 1 MiB port buffers,\n"
		"no credit. --set takes rel.*, pacer.*, cc.* and tp.* keys.\n");
}

static int a2a_set(struct cs_a2a_sim_cfg *c, const char *kv)
{
	char key[128], err[160] = "";
	const char *eq = strchr(kv, '=');
	int ret;

	if (!eq || (size_t)(eq - kv) >= sizeof(key)) {
		fprintf(stderr, "--set wants key=value, got '%s'\n", kv);
		return -EINVAL;
	}
	memcpy(key, kv, eq - kv);
	key[eq - kv] = 0;
	ret = cs_xport_params_set(&c->xp, key, eq + 1, err, sizeof(err));
	if (ret == -ENOENT)
		ret = cs_cfg_set(cs_tp_cfg, cs_tp_cfg_len, &c->tp, key, eq + 1,
				 err, sizeof(err));
	if (ret == -ENOENT)
		fprintf(stderr, "unknown key '%s'\n", key);
	else if (ret)
		fprintf(stderr, "%s\n", err);
	return ret;
}

static const char *algo_name(enum cs_a2a_algo a)
{
	return a == CS_A2A_TWO_LEVEL ? "two-level"
	       : a == CS_A2A_RAIL    ? "rail"
	       : a == CS_A2A_FLAT    ? "flat"
				     : "auto";
}

/*
 * The options both scenarios share (the network and the algorithm).
 * Returns: 0 when @o took @v, 1 when @o is not one of them, -1 for a bad
 * value.
 */
static int net_opt(struct cs_a2a_sim_cfg *c, unsigned long *nodes,
		   const char *o, const char *v)
{
	unsigned long long sz;
	unsigned long u;
	char *end;
	double d;
	int bad = 0;

	if (!strcmp(o, "--ranks")) {
		bad = cs_parse_whole(v, 2, CS_A2A_MAX_RANKS, &u);
		c->ranks = (uint32_t)u;
	} else if (!strcmp(o, "--nodes")) {
		bad = cs_parse_whole(v, 1, CS_A2A_MAX_RANKS, nodes);
	} else if (!strcmp(o, "--ranks-per-node")) {
		bad = cs_parse_whole(v, 1, CS_A2A_MAX_RPN, &u);
		c->rpn = (uint32_t)u;
	} else if (!strcmp(o, "--mtu")) {
		bad = cs_parse_whole(v, 64, 65536, &u);
		c->mtu = (uint32_t)u;
	} else if (!strcmp(o, "--credit") || !strcmp(o, "--port-buffer")) {
		bad = cs_sim_parse_size(v, &sz);
		if (!strcmp(o, "--credit"))
			c->credit = sz;
		else
			c->port_buffer = sz;
	} else if (!strcmp(o, "--algo")) {
		if (!strcmp(v, "flat"))
			c->algo = CS_A2A_FLAT;
		else if (!strcmp(v, "two-level"))
			c->algo = CS_A2A_TWO_LEVEL;
		else if (!strcmp(v, "rail"))
			c->algo = CS_A2A_RAIL;
		else if (!strcmp(v, "auto"))
			c->algo = CS_A2A_AUTO;
		else
			bad = 1;
	} else if (!strcmp(o, "--seed")) {
		c->seed = strtoull(v, &end, 0);
		bad = end == v || *end;
	} else if (!strcmp(o, "--set")) {
		bad = a2a_set(c, v) != 0;
	} else if (!strcmp(o, "--loss") || !strcmp(o, "--link-gbps") ||
		   !strcmp(o, "--delay-us") || !strcmp(o, "--time-limit-ms")) {
		d = strtod(v, &end);
		bad = end == v || *end || d < 0;
		if (!strcmp(o, "--loss"))
			bad |= d >= 1, c->loss = d;
		else if (!strcmp(o, "--link-gbps"))
			bad |= d == 0, c->gbps = d;
		else if (!strcmp(o, "--delay-us"))
			c->delay_ns = (uint64_t)(d * 1e3);
		else
			bad |= d == 0, c->time_limit_ns = (uint64_t)(d * 1e6);
	} else {
		return 1;
	}
	return bad ? -1 : 0;
}

/* After the options: ranks from --nodes, and their consistency. */
static int net_fix(struct cs_a2a_sim_cfg *c, unsigned long nodes,
		   const char *cmd)
{
	if (nodes)
		c->ranks = (uint32_t)(nodes * c->rpn);
	if (c->ranks < 2 || c->ranks % c->rpn ||
	    ((c->algo == CS_A2A_TWO_LEVEL || c->algo == CS_A2A_RAIL) &&
	     c->ranks / c->rpn < 2)) {
		fprintf(stderr,
			"collstack sim %s: --ranks must be a "
			"multiple (two-level: 2 or more) of "
			"--ranks-per-node\n",
			cmd);
		return 2;
	}
	if (c->tp.max_nodes <= c->ranks)
		c->tp.max_nodes = c->ranks + 1;
	return 0;
}

int cs_cmd_sim_alltoall(int argc, char **argv)
{
	struct cs_a2a_sim_result r;
	struct cs_a2a_sim_cfg c;
	unsigned long nodes = 0;
	unsigned long long sz;
	double busbw, bound;
	bool ok;
	int ret;

	if (cs_a2a_sim_cfg_default(&c))
		return 1;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;

		if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
			a2a_usage(stdout);
			return 0;
		} else if (!strcmp(o, "--uneven")) {
			c.uneven = true;
			continue;
		} else if (!strcmp(o, "--no-bucket")) {
			c.no_bucket = true;
			continue;
		} else if (!strcmp(o, "--nodata")) {
			c.nodata = true;
			continue;
		} else if (!strcmp(o, "--dynamic")) {
			c.dynamic = true;
			continue;
		} else if (!v) {
			bad = 1;
		} else if (!strcmp(o, "--bytes")) {
			bad = cs_sim_parse_size(v, &sz);
			c.bytes = sz;
		} else {
			bad = net_opt(&c, &nodes, o, v);
			if (bad == 1) {
				fprintf(stderr,
					"collstack sim alltoall: unknown "
					"option '%s'\n",
					o);
				a2a_usage(stderr);
				return 2;
			}
		}
		if (bad) {
			fprintf(stderr,
				"collstack sim alltoall: bad value for %s\n",
				o);
			return 2;
		}
		i++;
	}
	ret = net_fix(&c, nodes, "alltoall");
	if (ret)
		return ret;
	ret = cs_a2a_sim_run(&c, &r);
	if (ret) {
		fprintf(stderr, "collstack sim alltoall: %s\n",
			ret == -EINVAL ? "bad settings" : strerror(-ret));
		return 1;
	}
	ok = r.done == c.ranks && !r.failed && !r.wrong && !r.proto &&
	     (c.nodata || r.checked == r.total_bytes / 4);
	busbw = r.time_ns ? (double)r.total_bytes / c.ranks * 8 /
				    (double)r.time_ns * (c.ranks - 1) / c.ranks
			  : 0;
	bound = (double)r.max_bytes * (c.ranks - 1) / c.ranks * 8 / c.gbps;
	printf("alltoall %s ranks=%u ranks_per_node=%u algo=%s%s bytes=%" PRIu64
	       "%s%s time_us=%.1f busbw_gbps=%.2f bound_us=%.1f"
	       " jain=%.3f max_queue_bytes=%" PRIu64 " drops=%" PRIu64
	       " frames=%" PRIu64 " retx=%" PRIu64 " staged=%" PRIu64
	       " checked=%" PRIu64 " wrong=%" PRIu64 " loss=%g seed=%" PRIu64
	       "\n",
	       ok ? "ok" : "FAILED", c.ranks, c.rpn, algo_name(r.algo),
	       c.no_bucket ? "(unbucketed)" : "", c.bytes,
	       c.uneven ? " uneven" : "", c.dynamic ? " dynamic" : "",
	       r.time_ns / 1e3, busbw, bound / 1e3, r.jain, r.max_queue,
	       r.drops, r.frames, r.retx, r.staged, r.checked, r.wrong, c.loss,
	       c.seed);
	if (!ok)
		printf("alltoall: %s\n",
		       r.first[0] ? r.first
				  : "not every rank completed in time");
	return ok ? 0 : 1;
}

static void moe_usage(FILE *out)
{
	fprintf(out,
		"usage: collstack sim moe [--ranks N | --nodes M]\n"
		"       [--ranks-per-node L] [--tokens T] [--hidden H]\n"
		"       [--topk K] [--experts E] [--skew Z] [--no-bucket]\n"
		"       [--algo flat|two-level|rail|auto] [--node-rows]\n"
		"       [--node-sum] [--payload full|synth] [--dtype f32|bf16]\n"
		"       [--corrupt dispatch|combine] [--loss P] [--seed S]\n"
		"       [--link-gbps G] [--delay-us D] [--port-buffer B]\n"
		"       [--mtu B] [--time-limit-ms T] [--set key=value]...\n"
		"       [--trace FILE] [--trace-win-us W]\n\n"
		"A MoE layer: every rank has T tokens of H f32 values, each\n"
		"routed to K of E experts (Zipf exponent Z over the experts,\n"
		"1 in 16 slots 'none'), experts spread over the ranks in\n"
		"blocks. Dispatch (counts in the same operation), the experts\n"
		"(affine maps), combine (weighted sum in slot order); every\n"
		"dispatched row and every output value is compared bit for\n"
		"bit with a single-process reference. --algo rail: two-level,\n"
		"node pair (a, b) on all L NICs (local i to local i).\n"
		"--node-rows: a token's row once per node (not per rank),\n"
		"shared by the node's ranks. --node-sum: that, and combine\n"
		"returns one sum per (token, node) (summed in slot order in\n"
		"the node, then in node order: other bits than the slot-order\n"
		"sum; the reference sums the same way). Prints 'moe ok ...' or\n"
		"'moe FAILED ...' (exit 1). Defaults: 8 ranks, T 128, H 256,\n"
		"K 4, E 32, Z 0. bound_us: dispatch and combine each moving\n"
		"the busiest node's bytes (the larger of what it sends and\n"
		"receives, a token's row once per other node it goes to)\n"
		"over its L links at G. link_us: the busiest NIC link's\n"
		"serialization time in dispatch + in combine (link_bytes:\n"
		"the frame bytes it carried).\n"
		"--payload synth: no rank stores values: each is made from\n"
		"(rank, token, value index) when a frame is built and every\n"
		"byte checked on arrival (a position-weighted sum per row,\n"
		"compared with the generator's once the phase is done); the\n"
		"same frames and timing as full, memory for headers only; the\n"
		"owner's final sum over the combine rows is not done (every\n"
		"combine row is checked). --dtype bf16 (synth only): values\n"
		"of 2 bytes (expert outputs rounded to bf16; --node-sum rows\n"
		"summed in f32, rounded once). --corrupt: test only, the first\n"
		"tail byte crossing the network in that phase is checked with\n"
		"a bit flipped (the run must fail).\n"
		"--trace FILE: the run's timeline, for finding where the time\n"
		"went: when each node and rank finished dispatch and combine,\n"
		"the transport counters of each phase (retransmissions,\n"
		"timeouts, frames held, refused, parked and resumed, the\n"
		"most one core held), per W us (default 50) how busy the\n"
		"NIC links were (mean, min, max per direction, the\n"
		"combine's busiest link, the last rank's up and down\n"
		"links), and the sessions that resent 32 frames or more or\n"
		"timed out twice (counters, srtt, rto, path rate).\n");
}

int cs_cmd_sim_moe(int argc, char **argv)
{
	struct cs_moe_sim_result r;
	struct cs_moe_sim_cfg c;
	unsigned long nodes = 0, u;
	const char *trace = NULL;
	double bound;
	char *end;
	bool ok;
	int ret;

	if (cs_moe_sim_cfg_default(&c))
		return 1;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;

		if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
			moe_usage(stdout);
			return 0;
		} else if (!strcmp(o, "--no-bucket")) {
			c.net.no_bucket = true;
			continue;
		} else if (!strcmp(o, "--node-rows")) {
			c.node_rows = true;
			continue;
		} else if (!strcmp(o, "--node-sum")) {
			c.node_rows = c.node_sum = true;
			continue;
		} else if (!v) {
			bad = 1;
		} else if (!strcmp(o, "--tokens") || !strcmp(o, "--hidden") ||
			   !strcmp(o, "--topk") || !strcmp(o, "--experts")) {
			bad = cs_parse_whole(v, 1, 1 << 24, &u);
			if (!strcmp(o, "--tokens"))
				c.tokens = (uint32_t)u;
			else if (!strcmp(o, "--hidden"))
				c.hidden = (uint32_t)u;
			else if (!strcmp(o, "--topk"))
				c.topk = (uint32_t)u;
			else
				c.experts = (uint32_t)u;
		} else if (!strcmp(o, "--payload")) {
			bad = strcmp(v, "full") && strcmp(v, "synth");
			c.synth = !strcmp(v, "synth");
		} else if (!strcmp(o, "--dtype")) {
			bad = strcmp(v, "f32") && strcmp(v, "bf16");
			c.vbytes = strcmp(v, "bf16") ? 4 : 2;
		} else if (!strcmp(o, "--corrupt")) {
			bad = strcmp(v, "dispatch") && strcmp(v, "combine");
			c.corrupt = strcmp(v, "dispatch") ? 2 : 1;
		} else if (!strcmp(o, "--skew")) {
			c.skew = strtod(v, &end);
			bad = end == v || *end || c.skew < 0 || c.skew > 10;
		} else if (!strcmp(o, "--trace")) {
			trace = v;
		} else if (!strcmp(o, "--trace-win-us")) {
			bad = cs_parse_whole(v, 1, 1000000, &u);
			c.trace_win_ns = (uint64_t)u * 1000;
		} else {
			bad = net_opt(&c.net, &nodes, o, v);
			if (bad == 1) {
				fprintf(stderr,
					"collstack sim moe: unknown option "
					"'%s'\n",
					o);
				moe_usage(stderr);
				return 2;
			}
		}
		if (bad) {
			fprintf(stderr, "collstack sim moe: bad value for %s\n",
				o);
			return 2;
		}
		i++;
	}
	ret = net_fix(&c.net, nodes, "moe");
	if (ret)
		return ret;
	if (c.topk > c.experts || c.topk > CS_MOE_MAX_TOPK) {
		fprintf(stderr,
			"collstack sim moe: --topk must be at most "
			"--experts and %d\n",
			CS_MOE_MAX_TOPK);
		return 2;
	}
	if ((c.vbytes != 4 || c.corrupt) && !c.synth) {
		fprintf(stderr, "collstack sim moe: --dtype bf16 and --corrupt "
				"need --payload synth (the engine's rows are "
				"f32)\n");
		return 2;
	}
	if (trace) {
		c.trace = fopen(trace, "w");
		if (!c.trace) {
			fprintf(stderr, "collstack sim moe: %s: %s\n", trace,
				strerror(errno));
			return 1;
		}
	}
	ret = cs_moe_sim_run(&c, &r);
	if (c.trace && fclose(c.trace) && !ret)
		ret = -errno;
	if (ret) {
		fprintf(stderr, "collstack sim moe: %s\n",
			ret == -EINVAL ? "bad settings" : strerror(-ret));
		return 1;
	}
	ok = r.done == c.net.ranks && !r.failed && !r.wrong && r.checked;
	/* dispatch and combine each move the busiest node's bytes over its
	 * L links (r.node_bytes_max) */
	bound = 2.0 * (double)r.node_bytes_max * 8 / (c.net.gbps * c.net.rpn);
	printf("moe %s ranks=%u ranks_per_node=%u algo=%s%s%s tokens=%u "
	       "hidden=%u dtype=%s payload=%s topk=%u experts=%u skew=%g "
	       "dispatch_us=%.1f "
	       "time_us=%.1f bound_us=%.1f time_over_bound=%.3f "
	       "link_us=%.1f+%.1f link_bytes=%" PRIu64 "+%" PRIu64 " "
	       "dispatch_bytes=%" PRIu64 " max_queue_bytes=%" PRIu64
	       " drops=%" PRIu64 " retx=%" PRIu64 " checked=%" PRIu64
	       " wrong=%" PRIu64 " loss=%g seed=%" PRIu64 "\n",
	       ok ? "ok" : "FAILED", c.net.ranks, c.net.rpn, algo_name(r.algo),
	       c.net.no_bucket ? "(unbucketed)" : "",
	       c.node_sum    ? "+node-sum"
	       : c.node_rows ? "+node-rows"
			     : "",
	       c.tokens, c.hidden, c.vbytes == 2 ? "bf16" : "f32",
	       c.synth ? "synth" : "full", c.topk, c.experts, c.skew,
	       r.t_dispatch_ns / 1e3, r.time_ns / 1e3, bound / 1e3,
	       bound > 0 ? r.time_ns / bound : 0, r.link_busy_ps[0] / 1e6,
	       r.link_busy_ps[1] / 1e6, r.link_bytes[0], r.link_bytes[1],
	       r.disp_bytes, r.max_queue, r.drops, r.retx, r.checked, r.wrong,
	       c.net.loss, c.net.seed);
	if (!ok)
		printf("moe: %s\n",
		       r.first[0] ? r.first : "not every rank completed");
	return ok ? 0 : 1;
}
