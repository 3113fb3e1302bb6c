/* SPDX-License-Identifier: MIT */
/*
 * Bootstrap services: the coordinator and member state machines of
 * control/boot.h wired to the io_uring TCP loop. collstackd runs one of
 * each on its control thread (the coordinator only with --coordinator).
 *
 * The member service is also the "tcp" back-end of struct
 * cs_rendezvous_ops (control/rdzv.h); "etcd" is the other one.
 */
#ifndef CS_CONTROL_BOOT_SVC_H
#define CS_CONTROL_BOOT_SVC_H

#include "control/boot.h"
#include "control/ctl_loop.h"
#include "control/rdzv.h"

struct cs_coord_svc {
	struct cs_coord c;
	struct cs_ctl_loop *loop;
	uint16_t port;
};

/**
 * cs_coord_svc_start - listen on @ip:@port and admit @world members
 * @port: 0 picks one; the bound port is stored in s->port
 */
int cs_coord_svc_start(struct cs_coord_svc *s, const char *ip, uint16_t port,
		       const char *token, uint32_t world,
		       const struct cs_member_params *mp, uint64_t seed);
/* Serve for at most @timeout_ms; runs the failure detector at @now. */
int cs_coord_svc_poll(struct cs_coord_svc *s, cs_ns_t now, int timeout_ms);
void cs_coord_svc_stop(struct cs_coord_svc *s);

/* A member service reports the CS_MSVC_* events of control/rdzv.h. */

struct cs_member_svc {
	struct cs_boot_member m;
	struct cs_ctl_loop *loop;
	uint32_t conn;
	bool connected;
	unsigned events; /* accumulated by callbacks, cleared by poll */
	uint32_t lost[CS_BOOT_MAX_RANKS];
	unsigned nlost;
	cs_ns_t now;
};

/**
 * cs_member_svc_join - connect to the coordinator and start the handshake
 * Returns: 0, or a negative errno when the coordinator is unreachable
 * within @timeout_ms.
 */
int cs_member_svc_join(struct cs_member_svc *s, const char *ip, uint16_t port,
		       const char *token, int32_t want_rank,
		       const struct cs_node_addr *self,
		       const struct cs_member_params *mp, uint64_t seed,
		       int timeout_ms, cs_ns_t now);
/**
 * cs_member_svc_poll - run for at most @timeout_ms; sends heartbeats
 * Returns: a bit set of CS_MSVC_* events since the last call.
 */
unsigned cs_member_svc_poll(struct cs_member_svc *s, cs_ns_t now,
			    int timeout_ms);
void cs_member_svc_stop(struct cs_member_svc *s);

#endif
