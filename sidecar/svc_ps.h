/* SPDX-License-Identifier: MIT */
/*
 * collstackd's parameter-server service: a PS job over the sidecars of a
 * cluster, carried by the lane's transport core as one cs_ps_flow
 * (transport/ps_flow.h). Each node is a server (a shard store), a worker
 * (a worker engine training a deterministic sync SGD table), or both, as
 * the job's role list says. The control side creates the job
 * (cs_svc_ps_create(), from `collstack run ps`'s "ps_start" request);
 * svc_core.c posts its flow and calls cs_svc_ps_poll() on the lcore; the
 * control side reads the outcome (cs_svc_ps_result()) once it is final.
 *
 * The gradients are small dyadic numbers, lr a power of two and the
 * initializer a constant, so every node can compute the serial reference
 * itself and the check is exact: a server checks its shard once every
 * version is applied, a worker the rows of its last pull.
 */
#ifndef CS_SIDECAR_SVC_PS_H
#define CS_SIDECAR_SVC_PS_H

#include <stddef.h>
#include <stdint.h>

#include "internal/util.h"
#include "transport/ps_flow.h"

struct cs_svc_ps;

/* The group the PS job's flow runs in (outside run mixed's >= 16 ids). */
#define CS_SVC_PS_GROUP 9u

/**
 * cs_svc_ps_create - a PS job from "ps_start" arguments
 * @args: "ROLES ITERS ROWS DIM KPP N0,N1,..." (ROLES: one of s, w, b per
 *	node, in the node list's order; the node list is the group's ranks)
 * @self: this sidecar's node id in the view
 * @npeers: nodes in the view
 * @mss: largest frame payload the port carries
 * @op_id: the job's op id (names its spill file)
 * @pcfg: the sidecar's ps.* settings (the spill folder of a job with
 *	budget=BYTES); may be NULL (then budget is refused)
 * @nodes: out: a malloc'd copy of the node list, @n of them
 * @out: the job
 * @err: a reason on failure
 * Returns: 0, -EINVAL (bad arguments; @err says which), -ENOMEM.
 */
struct cs_pst_cfg;
int cs_svc_ps_create(const char *args, uint32_t self, uint32_t npeers,
		     uint32_t mss, uint32_t op_id,
		     const struct cs_pst_cfg *pcfg, uint32_t **nodes,
		     uint32_t *n, struct cs_svc_ps **out, char *err,
		     size_t elen);
void cs_svc_ps_free(struct cs_svc_ps *ps);

/* The flow to post (cs_ps_flow_ops). */
struct cs_ps_flow *cs_svc_ps_flow(struct cs_svc_ps *ps);

/* lcore: apply, answer, train; returns work done. */
unsigned cs_svc_ps_poll(struct cs_svc_ps *ps, cs_ns_t now);

struct cs_core_svc;
/**
 * cs_svc_ps_ctl - a "ps_*" control request (collstack run ps):
 *   ps_start OP ROLES ITERS ROWS DIM KPP N0,N1,...   this node's part
 *   ps_go        every node has its part: the workers start
 *   ps_wait MS   this node's verdict ("ok role=... wrong=N ..." or why not)
 *   ps_forget    end this node's part, free it
 * Returns: 0 (the reply in @out), -ENOENT for another request.
 */
int cs_svc_ps_ctl(struct cs_core_svc *s, const char *req, const char *args,
		  char *out, size_t len);

/**
 * cs_svc_ps_result - the job's outcome as "key=value ..." into @out
 * Returns: 1 once final (this node's part finished and checked), 0 while
 * running, or a negative error (its text in @out).
 */
int cs_svc_ps_result(struct cs_svc_ps *ps, char *out, size_t len);

#endif
