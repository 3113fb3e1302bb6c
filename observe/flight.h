/* SPDX-License-Identifier: MIT */
/*
 * The flight recorder: for each trainer group of this sidecar, the last
 * CS_FL_OPS operations with their state (which local ranks posted, which
 * completed, with what, and when), kept by the IPC server's thread as it
 * takes and completes descriptors (the hooks below), read by the control
 * thread under a per-group sequence counter. `collstack doctor` gathers
 * every sidecar's record and names the ranks that did not post.
 */
#ifndef CS_OBSERVE_FLIGHT_H
#define CS_OBSERVE_FLIGHT_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "internal/util.h"

#define CS_FL_GROUPS 32
#define CS_FL_OPS 64
#define CS_FL_LOCAL 64 /* local ranks per group (CS_IPC_MAX_LOCAL) */
#define CS_FL_NAME 64

struct cs_fl_op {
	uint64_t seq; /* the group's op index */
	uint64_t count; /* elements (local rank 0's descriptor) */
	uint64_t posted, done; /* local ranks, bit per local rank */
	cs_ns_t t_post, t_done; /* first post, last completion */
	int32_t status; /* first non-zero status, or 0 */
	uint16_t kind; /* CS_IPC_OP_* */
	uint16_t used;
};

struct cs_fl_group {
	_Atomic uint32_t ver; /* odd while written */
	uint32_t gid; /* the IPC server's group slot */
	char name[CS_FL_NAME];
	uint32_t size, local_size;
	int32_t ranks[CS_FL_LOCAL]; /* global rank by local rank */
	struct cs_fl_op ops[CS_FL_OPS]; /* by seq % CS_FL_OPS */
};

/* The IPC server's hooks (control/ipc/ipc_server.c, one line each). */
void cs_obs_ipc_post(cs_ns_t now, uint32_t gid, const char *name,
		     uint32_t size, uint32_t local_size, const int32_t *ranks,
		     uint64_t seq, uint32_t local_rank, unsigned kind,
		     uint64_t count);
void cs_obs_ipc_done(cs_ns_t now, uint32_t gid, uint64_t seq,
		     uint32_t local_rank, int status);

/**
 * cs_fl_snapshot - a consistent copy of group slot @i
 * Returns: 0, or -ENOENT when the slot was never used.
 */
int cs_fl_snapshot(unsigned i, struct cs_fl_group *out);

/**
 * cs_fl_write - the record as text lines, for the control socket:
 *   group GID NAME SIZE LOCAL_SIZE r0,r1,...
 *   op GID SEQ KIND COUNT POSTED_MASK DONE_MASK STATUS AGE_NS DUR_NS
 * (AGE_NS: since the first post, at @now; DUR_NS: to the last completion,
 * or -1 while it is not complete)
 * Returns: the number of groups written.
 */
int cs_fl_write(FILE *out, cs_ns_t now);

/* cs_fl_reset - forget every record (tests) */
void cs_fl_reset(void);

#endif
