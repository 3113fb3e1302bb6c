/* SPDX-License-Identifier: MIT */
/*
 * collstackd's bootstrap: membership from the coordinator (control/boot_svc.h)
 * instead of the static peers file, heartbeats on a thread of their own,
 * and the group view (epoch, lost ranks) published to the allreduce service.
 */
#ifndef CS_TOOLS_DAEMON_BOOT_H
#define CS_TOOLS_DAEMON_BOOT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "control/member.h"
#include "internal/config.h"

struct cs_daemon;
struct cs_daemon_conf;
struct cs_boot_state;

struct cs_boot_conf {
	bool coordinator; /* this sidecar also runs the coordinator */
	char addr[CS_CFG_STR_MAX]; /* coordinator ip:port; empty: static */
	uint32_t world; /* members the coordinator expects */
	char token[CS_CFG_STR_MAX];
	char token_file[CS_CFG_STR_MAX];
	uint64_t timeout; /* ns to wait for the address table */
	char rendezvous[CS_CFG_STR_MAX]; /* node.rendezvous: tcp, etcd://.. */
	struct cs_member_params mp;
};

/*
 * The view the allreduce service reads (the boot thread writes it).
 * epoch 0 means static peers: no view, nothing is ever stale.
 */
struct cs_daemon_view {
	atomic_uint epoch; /* current group epoch */
	atomic_int lost_rank; /* the last rank lost, -1 none */
	atomic_uint nlost; /* ranks lost since the group formed */
	atomic_bool coord_lost; /* the coordinator went silent */
	atomic_uint_fast64_t rx_stale_epoch; /* frames of older epochs */
	atomic_int wake_fd; /* eventfd written when the epoch moves, or -1 */
	/* the last DUMP request from the coordinator (observe/: write the
	 * flight record): origin rank, then the trigger id (0: none) */
	atomic_int dump_origin;
	atomic_uint_fast64_t dump_id;
};

int cs_daemon_boot_conf_defaults(struct cs_boot_conf *b);
/* Returns 0, -ENOENT (not a boot key) or -EINVAL (message in @err). */
int cs_daemon_boot_set_key(struct cs_boot_conf *b, const char *key,
			   const char *val, char *err, size_t errlen);
void cs_daemon_boot_help(FILE *out);

/* boot.addr is set (directly or from MASTER_ADDR): use the coordinator. */
bool cs_daemon_boot_enabled(const struct cs_daemon *d);

/**
 * cs_daemon_boot_start - run the coordinator (if asked), join, wait for the
 * address table (at most boot.timeout) and install it as the driver's
 * peers; heartbeats then continue on the boot thread
 *
 * Call after the port opened and the driver is initialised, before the
 * lcores start. Returns: 0, CS_ERR_AUTH (refused: wrong token),
 * -ETIMEDOUT (no table in time) or another negative errno; the reason is
 * logged.
 */
int cs_daemon_boot_start(struct cs_daemon *d);
void cs_daemon_boot_stop(struct cs_daemon *d);

/**
 * cs_daemon_boot_apply_view - rebuild the driver's peer table (ring order)
 * from the alive members of the current view; control thread only, with
 * no operation installed on the lcore
 * @epoch: out, the view's epoch
 * Returns: 0, or CS_ERR_PEER_LOST when this node itself is out of the
 * view (message in @msg).
 */
int cs_daemon_boot_apply_view(struct cs_daemon *d, uint32_t *epoch, char *msg,
			      size_t mlen);

/**
 * cs_daemon_boot_table_epoch - the epoch of the peer table applied at
 * start-up (0: none, or no bootstrap); later views are applied by the
 * collective service (cs_daemon_boot_apply_view())
 */
uint32_t cs_daemon_boot_table_epoch(const struct cs_daemon *d);

/**
 * cs_daemon_boot_load_token - the job token from boot.token, else
 * boot.token_file (first line), else $COLLSTACK_JOB_TOKEN
 * Returns: 0, or a negative errno when there is none (logged).
 */
int cs_daemon_boot_load_token(const struct cs_boot_conf *b, char *tok,
			      size_t len);

/**
 * cs_daemon_boot_clock - the coordinator's clock minus this sidecar's
 * trace clock, from the stamped heartbeats (control/member.h)
 * Returns: 0, -EAGAIN (no sample yet) or -ENOTSUP (static peers, or a
 * back-end without heartbeats: etcd).
 */
int cs_daemon_boot_clock(struct cs_daemon *d, struct cs_hb_clock_est *e);

/**
 * cs_daemon_boot_request_dump - ask every member, through the
 * coordinator, to write its flight record under @id (sent by the boot
 * thread; failures are logged there)
 * Returns: 0, or -ENOTSUP without a coordinator.
 */
int cs_daemon_boot_request_dump(struct cs_daemon *d, uint64_t id);

/**
 * cs_daemon_boot_has_token - a job token is set (boot.token,
 * boot.token_file or $COLLSTACK_JOB_TOKEN), whether or not it can be read
 */
bool cs_daemon_boot_has_token(const struct cs_boot_conf *b);

/* Appends " epoch=.. lost=.. coordinator=ok|lost rx_stale_epoch=..". */
void cs_daemon_boot_report(struct cs_daemon *d, char *out, size_t len);

#endif
