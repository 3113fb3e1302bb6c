/* SPDX-License-Identifier: MIT */
/*
 * collstack sim allreduce | reduce-scatter | all-gather | broadcast: one
 * ring collective on N simulated nodes, each running the transport core
 * collstackd runs (transport/tp.h) with the ring engine plugged in
 * (cs_coll_flow_ops), every element of every rank checked against a
 * closed formula (collectives/coll_data.h).
 *
 * With membership (cfg.member: --fail-rank, --stall-rank, --deadline-us,
 * --grow, --membership) the nodes also run the real bootstrap member
 * (control/boot.h, struct cs_boot_member) and one more node runs the real
 * coordinator (struct cs_coord): join handshake, table, heartbeats,
 * failure detection and views all travel as simulated frames on the same
 * links as the data. sim/coll.c says how.
 */
#ifndef CS_SIM_COLL_H
#define CS_SIM_COLL_H

#include <stdbool.h>
#include <stdint.h>

#include "collectives/ring.h"
#include "control/member.h"
#include "control/xport.h"
#include "transport/tp.h"

/**
 * struct cs_simcoll_cfg - the scenario (the command line's options)
 * @direct_max: -1: coll.direct_max's default
 * @mtu: IP MTU (payload per frame: mtu - 20 - 8 - header)
 * @random_data: full-mantissa floats, checked with a rounding bound
 * @member: ranks on a switch with a coordinator node, heartbeats
 * @fail_rank: node that dies at @fail_at after the group formed (-1: none)
 * @stall_rank: node that stops its data path at @stall_at (-1: none)
 * @deadline: per operation (0: none)
 * @reform: after a loss the survivors run the next allreduce
 * @grow: one more node joins at the operation boundary
 */
struct cs_simcoll_cfg {
	enum cs_coll_kind kind;
	uint32_t ranks;
	uint64_t bytes;
	enum cs_dtype dtype;
	enum cs_redop op;
	uint32_t channels;
	uint64_t chunk;
	uint32_t window;
	int64_t direct_max;
	uint32_t mtu;
	double loss, dup, reorder;
	uint64_t reorder_ns;
	uint64_t seed;
	double gbps;
	double delay_us;
	uint32_t root;
	bool nodata, oop, alt_dir;
	bool random_data;
	double time_limit_ms;
	struct cs_xport_params xp;
	struct cs_tp_params tp;
	bool member;
	int64_t fail_rank;
	int64_t stall_rank;
	cs_ns_t fail_at, stall_at;
	cs_ns_t deadline;
	struct cs_member_params mp;
	bool reform, grow;
	uint32_t show_diag;
};

/* What kind of run cs_simcoll_run() made (which fields of the result). */
enum cs_simcoll_mode {
	CS_SIMCOLL_PLAIN = 0,
	CS_SIMCOLL_PEER_LOST,
	CS_SIMCOLL_DEADLINE,
	CS_SIMCOLL_GROW,
	CS_SIMCOLL_MEMBER,
};

/**
 * struct cs_simcoll_result - what happened (times in ns)
 * @violation: a protocol violation or a stall; @why says which (the run
 *	FAILs whatever the mode)
 * @wrong: wrong elements; @first describes the first
 *
 * Plain: @time_ns (last rank's result final), @max_sent / @max_wire
 * (frame bytes of the busiest rank, without / with CS_SIM_WIRE_EXTRA),
 * @channels, counters summed over every rank.
 *
 * Membership: per op o (1: the first, 2: the one after a view change, 3:
 * after a loss, the one after the join),
 * @finished[o] ranks completed it, @reports[o] ranks reported an error,
 * @op_ns[o] first start to last result; @good/@want survivors that
 * reported as required, @max_report_ns after the failure (or, stalled,
 * after the rank's operation started), @detect_ns failure to the coordinator's
 *view,
 * @named ranks whose "waits on" chain leads to the stalled rank.
 */
struct cs_simcoll_result {
	enum cs_simcoll_mode mode;
	int sim_ret;
	bool violation;
	char why[200];
	uint64_t wrong;
	char first[200];
	uint64_t events;
	cs_ns_t sim_now;
	/* plain */
	bool all_done;
	cs_ns_t time_ns;
	double max_sent, max_wire;
	uint32_t channels;
	uint64_t retx, timeouts, fillers, pure_acks, stale_checked;
	/* membership */
	uint32_t finished[4], reports[4];
	cs_ns_t op_ns[4];
	uint32_t views, epoch, coord_epoch;
	uint32_t view_n; /* members of the second view (0: none) */
	/* a loss, then a join (--fail-rank --reform --grow): members of the
	 * third view; per new view (the loss's, the join's) its epoch, its
	 * members, how many applied it and how long after the coordinator
	 * moved to it the last one did (simulated time) */
	uint32_t join_n;
	uint32_t epochs[2], view_members[2], settled[2];
	cs_ns_t settle_ns[2];
	uint32_t good, want, named, direct, coord_lost;
	cs_ns_t max_report_ns, detect_ns;
	uint64_t stale_dropped, future_dropped, injected;
	uint32_t bad; /* first survivor that did not report as required */
	bool bad_reported;
	int bad_status;
	uint32_t bad_culprit;
	int fail_status; /* --membership: what a failed rank reported */
	char fail_diag[200];
	char (*diag)[200]; /* stalled: the ranks' "waits on" lines */
	uint32_t ndiag;
};

/**
 * cs_simcoll_defaults - f32 sum, MTU 9000, 100 Gb/s, 1 us links, seed 1
 * @c: out (ranks and bytes still to set)
 * Returns: 0 or -EINVAL.
 */
int cs_simcoll_defaults(struct cs_simcoll_cfg *c, enum cs_coll_kind kind);

/**
 * cs_simcoll_check - options that do not fit together
 * Returns: NULL, or why not.
 */
const char *cs_simcoll_check(const struct cs_simcoll_cfg *c);

/**
 * cs_simcoll_run - run the scenario
 * @c: settings (cs_simcoll_check() passed)
 * @res: out; release with cs_simcoll_result_fini()
 * Returns: 0 when it ran (judge @res), or a negative error when it could
 *	not be set up.
 */
int cs_simcoll_run(const struct cs_simcoll_cfg *c,
		   struct cs_simcoll_result *res);

void cs_simcoll_result_fini(struct cs_simcoll_result *res);

/* The alpha-beta helpers the report uses: bytes factor f (ideal bytes per
 * rank f * S, busbw = algbw * f) and hops on the critical path. */
double cs_simcoll_factor(enum cs_coll_kind k, uint32_t n);
double cs_simcoll_hops(enum cs_coll_kind k, uint32_t n);

#endif
