/* SPDX-License-Identifier: MIT */
/*
 * Rendezvous back-ends, as a member sees them: something that admits this
 * node under a rank, hands it the group's address table and reports view
 * changes (lost ranks, a new epoch) and its own loss. Two exist: the TCP
 * coordinator (control/boot_svc.h, cs_rendezvous_tcp, the default) and an
 * etcd v3 store (control/rdzv_etcd.c, cs_rendezvous_etcd,
 * node.rendezvous=etcd://host:port/prefix).
 */
#ifndef CS_CONTROL_RDZV_H
#define CS_CONTROL_RDZV_H

#include <stdint.h>

#include "control/boot.h"
#include "control/member.h"

/* Events a back-end's poll() reports (a bit set). */
#define CS_MSVC_READY 0x1 /* the address table arrived (or changed) */
#define CS_MSVC_VIEW 0x2 /* epoch advanced; lost ranks in the view */
#define CS_MSVC_COORD_LOST 0x4 /* the coordinator (or store) is gone */
#define CS_MSVC_FAILED 0x8 /* refused / protocol error: view.error */
#define CS_MSVC_DUMP 0x10 /* write the flight record: view.dump_id */

/* What a member knows, valid until the next poll(). */
struct cs_rdzv_view {
	uint32_t rank, world, epoch;
	const struct cs_node_addr *table; /* world entries, state set */
	const uint32_t *lost; /* ranks lost in the last CS_MSVC_VIEW */
	unsigned nlost;
	const char *error; /* why it failed */
	const char *what; /* "coordinator" or "etcd": for messages */
	uint32_t dump_origin; /* the last CS_MSVC_DUMP: who asked */
	uint64_t dump_id; /* and its trigger id */
};

struct cs_rendezvous_ops {
	const char *name;
	/**
	 * create - a back-end for @where (tcp: "ip:port"; etcd:
	 * "etcd://host:port/prefix"), @world members expected (0: the
	 * coordinator knows), detection after @mp's fail_timeout
	 * Returns: 0 or a negative errno (message in @err).
	 */
	int (*create)(void **impl, const char *where, uint32_t world,
		      const struct cs_member_params *mp, char *err,
		      size_t errlen);
	/* Admit this node: 0, CS_ERR_AUTH (wrong token), -EPERM (refused:
	 * view.error says why) or another negative errno (unreachable: the
	 * caller may try again). */
	int (*join)(void *impl, const char *token, int32_t want_rank,
		    const struct cs_node_addr *self, int timeout_ms);
	/* Run for at most @timeout_ms; a bit set of CS_MSVC_*. */
	unsigned (*poll)(void *impl, cs_ns_t now, int timeout_ms);
	void (*view)(void *impl, struct cs_rdzv_view *v);
	/* The offset of the coordinator's clock from this node's, from the
	 * heartbeat exchange (control/member.h struct cs_hb_clock): 0, or
	 * -EAGAIN (no sample yet). NULL where the back-end exchanges no
	 * stamped heartbeats (etcd). Same thread as poll(). */
	int (*clock)(void *impl, struct cs_hb_clock_est *e);
	/* Ask every member to write its flight record under @id (they see
	 * CS_MSVC_DUMP): 0, or a negative errno (-ENOTSUP: the coordinator
	 * cannot). NULL: not supported (etcd). Same thread as poll(). */
	int (*dump)(void *impl, uint64_t id);
	/* Leave the group (others see this member lost at once where the
	 * back-end can say so) and free @impl. */
	void (*leave)(void *impl);
};

extern const struct cs_rendezvous_ops cs_rendezvous_tcp;
extern const struct cs_rendezvous_ops cs_rendezvous_etcd;

#endif
