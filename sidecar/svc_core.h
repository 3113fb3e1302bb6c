/* SPDX-License-Identifier: MIT */
/*
 * collstackd's collective service on the transport core (transport/tp.h):
 * lcore 0 runs one struct cs_tp over the port, every operation
 * (collstack run's and trainers') is posted to it, and the sessions belong
 * to the peers, not to the operations. sidecar/service.c (configuration,
 * views) calls in here; docs/transport-core.md.
 */
#ifndef CS_TOOLS_SVC_CORE_H
#define CS_TOOLS_SVC_CORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collectives/ring.h"
#include "control/xport.h"
#include "daemon.h"
#include "daemon_ipc.h"

struct cs_core_svc;

/* Set up (before the lcores start); installs its rx/tx on the driver. */
struct cs_frame_auth;
/* @tp: the core's tunables (copied); @auth: frame tags (auth.enable;
 * NULL: off), used by the lcore only. */
struct cs_tp_params;
int cs_core_svc_init(struct cs_daemon *d, const struct cs_xport_params *xp,
		     const struct cs_coll_cfg *coll,
		     const struct cs_tp_params *tp, struct cs_frame_auth *auth,
		     struct cs_core_svc **out);
void cs_core_svc_fini(struct cs_core_svc *s);

/* Stop the lcore's use of the peer table (a new view is applied), and
 * let it go on with a core for the new epoch. */
void cs_core_svc_pause(struct cs_core_svc *s);
/* @epoch: the view the peer table now holds (0: none applied). With
 * the bootstrap, a lane builds a core for a view only once its table is
 * applied (a core built from an older table would acknowledge frames for
 * peers the table no longer names, then be replaced). */
void cs_core_svc_resume(struct cs_core_svc *s, uint32_t epoch);

/* "ar_prepare/ar_start/ar_wait/ar_check/ar_stats" (collstack run);
 * -ENOENT for another request. */
int cs_core_svc_ctl(struct cs_core_svc *s, const char *req, const char *args,
		    char *out, size_t len);

/* A trainer operation across the nodes (cs_ar_svc_start_coll()): @n ring
 * members, this node at @rank, in view @epoch; *@h its handle, many in
 * flight at once. */
int cs_core_svc_start(struct cs_core_svc *s, const struct cs_ar_coll *c,
		      uint32_t n, uint32_t rank, struct cs_ar_ext **h,
		      char *msg, size_t mlen);
/* The ring index trainer op @h failed on, or -1. */
int cs_core_svc_failed_peer(const struct cs_ar_ext *h);
int cs_core_svc_times(const struct cs_ar_ext *h, cs_ns_t *picked,
		      cs_ns_t *ready, cs_ns_t *done);
void cs_core_svc_set_notify_fd(struct cs_core_svc *s, int fd);
void cs_core_svc_flush(struct cs_core_svc *s);
/* Trainer op @h: taken off the lcore (its buffers are free on return),
 * or let go of after its verdict (an early one goes on resending). */
void cs_core_svc_ext_stop(struct cs_core_svc *s, struct cs_ar_ext *h);
void cs_core_svc_ext_put(struct cs_core_svc *s, struct cs_ar_ext *h);
/* Every trainer op, held or let go of, taken off the lcore. */
void cs_core_svc_stop_ext(struct cs_core_svc *s);
/* Trainer op @op_id (of view @epoch) was refused here with @err: the core
 * tells the other nodes, whose part ends with @err naming this node. Of
 * transport group @group over @nodes (@nnodes), or of the trainers' group
 * over every node (@group 0). */
int cs_core_svc_refuse(struct cs_core_svc *s, uint32_t op_id, uint32_t epoch,
		       int err, uint32_t group, const uint32_t *nodes,
		       uint32_t nnodes);
/* A trainer op let go of was reported done early and its last frames
 * are not acknowledged yet (the core still resends them). */
bool cs_core_svc_ext_unsettled(struct cs_core_svc *s);

/* The collective service's core (service.c). */
struct cs_ar_svc;
struct cs_core_svc *cs_ar_svc_core(struct cs_ar_svc *s);

/* collstack run ps (sidecar/svc_ps.c): the job's operation. */
struct cs_svc_ps;
/* Largest frame payload the port carries. */
uint32_t cs_core_svc_frame_payload(const struct cs_core_svc *s);
struct cs_pst_cfg;
/* The sidecar's ps.* settings (ps.spill_dir, ps.spill_async): the
 * trainer tables' and collstack run ps's job's (NULL until set). */
void cs_core_svc_set_ps_cfg(struct cs_core_svc *s, const struct cs_pst_cfg *c);
const struct cs_pst_cfg *cs_core_svc_ps_cfg(const struct cs_core_svc *s);
/* This sidecar's node id and the view's node count. */
void cs_core_svc_view(const struct cs_core_svc *s, uint32_t *self,
		      uint32_t *npeers);
/* The node view's epoch (the same on every node once it settled). */
uint32_t cs_core_svc_epoch(const struct cs_core_svc *s);
/* The sidecar (boot) rank of the last node lost from the view, or -1;
 * @nlost: how many were lost so far (a change says a loss happened). */
int cs_core_svc_lost_node(const struct cs_core_svc *s, uint32_t *nlost);
/* Post @ps's flow as op @op_id of the PS group over @nodes (@n; both
 * taken on success). Returns 0, -EBUSY (a job runs), -ENOMEM. */
int cs_core_svc_ps_post(struct cs_core_svc *s, uint32_t op_id,
			struct cs_svc_ps *ps, uint32_t *nodes, uint32_t n);
/* The job running (NULL: none); @status: its flow's error once it ended
 * with one (else 0), blaming group rank @culprit. */
struct cs_svc_ps *cs_core_svc_ps_job(struct cs_core_svc *s, int *status,
				     uint32_t *culprit);
/* Wake the job's lcore (it may be idle). */
void cs_core_svc_ps_kick(struct cs_core_svc *s);
/* End the job: its flow cancelled, the job freed, the group forgotten.
 * Returns 0, -ENOENT (none), -ENOMEM. */
int cs_core_svc_ps_end(struct cs_core_svc *s);

/* A service's long-lived flow (sidecar/svc_ps_trainer.c): an engine of
 * the transport core that its service polls on the lane's lcore. */
struct cs_flow_ops;
struct cs_core_flow;
struct cs_svc_flow {
	uint32_t group; /* a transport group of its own, over every node */
	uint32_t op_id; /* the same on every node */
	const struct cs_flow_ops *ops;
	void *arg; /* the engine */
	/* every lcore round while it runs */
	unsigned (*poll)(void *poll_arg, cs_ns_t now);
	void *poll_arg;
	/* not ended when a session gives up on a peer (cs_tp_keep_on_stall):
	 * only a new view or a cancel ends it */
	bool keep_on_stall;
};
/* Post @f over @nodes (@n; taken on success); *@h: its handle, freed
 * with cs_core_svc_flow_free() once released. Returns 0 or -ENOMEM. */
int cs_core_svc_flow_post(struct cs_core_svc *s, const struct cs_svc_flow *f,
			  uint32_t *nodes, uint32_t n, struct cs_core_flow **h);
/* 0 while the lcore holds it (it polls @f->poll); once released: 1 when
 * it ended well, else its error (@culprit: the group rank blamed). */
int cs_core_svc_flow_state(const struct cs_core_flow *h, uint32_t *culprit);
/* Wake its lcore (work was queued for it). */
void cs_core_svc_flow_kick(struct cs_core_svc *s, struct cs_core_flow *h);
/* End it (CS_ERR_CANCELLED); released some lcore rounds later. */
void cs_core_svc_flow_cancel(struct cs_core_svc *s, struct cs_core_flow *h);
/* After its release (or with the lcores stopped). */
void cs_core_svc_flow_free(struct cs_core_svc *s, struct cs_core_flow *h);
/* Wake whoever serves the trainers (their completions are in). */
void cs_core_svc_wake_ipc(struct cs_core_svc *s);
/* coll.deadline: how long a trainer operation may take (0: no limit). */
cs_ns_t cs_core_svc_deadline(const struct cs_core_svc *s);

#endif
