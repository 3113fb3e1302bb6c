/* SPDX-License-Identifier: MIT */
/*
 * Parameter-server tables for trainers, the IPC side (ipc_ps.c): the
 * CS_IPC_MSG_PS_CREATE / _DESTROY messages and the CS_IPC_OP_PS_PUSH /
 * _PULL / _CKPT / _RESTORE descriptors of control/ipc/ipc_proto.h (a
 * checkpoint's or restore's directory is copied like keys, its result
 * written back like a pull's rows).
 *
 * A trainer opens a table for its rank of a group; the server validates
 * every descriptor against the table (rows of the table's type and size,
 * keys below its key_max, buffers inside the trainer's segments), copies
 * the keys (and a push's rows) out of the trainer's memory once, and hands
 * the request to the backend (collstackd's sidecar/svc_ps_trainer.c), which
 * runs it on a lcore and marks it done. The server then copies a pull's
 * rows into the trainer's buffer and completes the descriptor. The lcore
 * never touches trainer memory, so a trainer that dies mid-operation only
 * leaves requests the backend frees when it is done with them.
 */
#ifndef CS_IPC_PS_H
#define CS_IPC_PS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collectives/ps/ps.h"
#include "ipc_proto.h"

struct cs_ipc_server;
struct trainer; /* ipc_server.c's */

/* Where a request is (cs_ipc_ps_req.state): the side that moves it out of
 * QUEUED second frees it. */
enum {
	CS_IPC_PS_QUEUED = 0, /* with the backend */
	CS_IPC_PS_DONE = 1, /* the backend finished it: the server's */
	CS_IPC_PS_ORPHAN = 2, /* its trainer is gone: the backend's to free */
};

/* What a request is besides a push or pull (cs_ipc_ps_req.ctl). */
enum {
	CS_IPC_PS_CTL_NONE = 0,
	CS_IPC_PS_CTL_CKPT = 1, /* checkpoint the shard to @path */
	CS_IPC_PS_CTL_RESTORE = 2, /* load the shard from @path */
};

/* One push or pull (or checkpoint, restore), owned as the state says. */
struct cs_ipc_ps_req {
	_Atomic int state;
	bool pull;
	uint8_t ctl; /* CS_IPC_PS_CTL_*: then @path is the directory and
		      * @rows a struct cs_ipc_ps_ctl_result, written by the
		      * backend, copied to @recv like a pull's rows */
	char *path;
	uint32_t wrank; /* the trainer's rank: its worker */
	uint64_t clock; /* push: version; pull: clock */
	uint32_t n; /* keys */
	uint64_t *keys; /* copied from the trainer */
	/* push: the rows copied from the trainer; pull: room for them,
	 * written by the backend (NULL once the backend kept it) */
	void *rows;
	size_t rows_len;
	/* the outcome, set before DONE */
	int status;
	int32_t peer; /* the server node an error is about, or -1 */
	uint16_t detail; /* enum cs_ipc_lost for CS_ERR_PEER_LOST */
	struct cs_ipc_ps_req *next; /* the backend's queue */
	/* the server's */
	struct trainer *t;
	uint32_t group; /* the trainer's group handle */
	uint64_t user_id;
	uint32_t recv_seg;
	uint8_t *recv; /* a pull's destination in the trainer's segment */
	struct cs_ipc_ps_req *srv_next;
};

/* Free a request and its buffers (the side that owns it). */
void cs_ipc_ps_req_free(struct cs_ipc_ps_req *r);

/* What a rank asks for when it opens a table. */
struct cs_ipc_ps_open {
	const char *group; /* the group's name */
	const char *name; /* the table's */
	uint32_t nonce; /* the same on every rank: this incarnation */
	uint32_t rank, size, local_size; /* in the group */
	struct cs_ps_table_spec spec; /* id and workers: the backend's */
	uint64_t mem_budget;
};

/* The backend (collstackd: sidecar/svc_ps_trainer.c). */
struct cs_ipc_ps_ops {
	/* open @o for rank o->rank: *@table is the backend's handle of the
	 * table (one per table, shared by the ranks on this node). Returns
	 * 0 or -errno with @why filled in. */
	int (*open)(void *ctx, const struct cs_ipc_ps_open *o, void **table,
		    char *why, size_t wl);
	/* rank @wrank is done with @table (its requests in flight end) */
	void (*close)(void *ctx, void *table, uint32_t wrank);
	/* run @r on @table: from now on the backend's until DONE. Returns
	 * 0, or an error (then @r is still the caller's). */
	int (*submit)(void *ctx, void *table, struct cs_ipc_ps_req *r);
	/* the server's round: housekeeping on the caller's thread */
	unsigned (*poll)(void *ctx);
};

/**
 * cs_ipc_server_set_ps - let trainers open parameter-server tables
 * @s: server
 * @ops: the backend (NULL: refuse them, -EOPNOTSUPP; the default)
 * @ctx: for @ops
 * Returns: 0 or -ENOMEM.
 */
int cs_ipc_server_set_ps(struct cs_ipc_server *s,
			 const struct cs_ipc_ps_ops *ops, void *ctx);

/* Hooks of ipc_server.c. */
bool cs_ipc_ps_is_op(uint8_t op);
void cs_ipc_ps_take(struct cs_ipc_server *s, struct trainer *t,
		    const struct cs_ipc_sqe *d);
int cs_ipc_ps_msg(struct cs_ipc_server *s, struct trainer *t,
		  const struct cs_ipc_msg *msg, uint32_t *val, char *why,
		  size_t wl);
unsigned cs_ipc_ps_poll(struct cs_ipc_server *s);
void cs_ipc_ps_trainer_gone(struct cs_ipc_server *s, struct trainer *t);
void cs_ipc_ps_fini(struct cs_ipc_server *s);

/* ---- what ipc_server.c lends ipc_ps.c (defined there) ----------------- */

struct cs_ipc_ps;
struct cs_ipc_ps_tr;
/* ipc_ps.c's state in the server, and in a trainer */
struct cs_ipc_ps **cs__ipc_ps_state(struct cs_ipc_server *s);
struct cs_ipc_ps_tr **cs__ipc_trainer_ps(struct trainer *t);

/* A trainer's member of group handle @handle. */
struct cs__ipc_member_info {
	const char *group;
	int32_t rank;
	uint32_t size, local_size;
	int32_t fail_status; /* the group failed: what its ops end with */
	uint16_t fail_detail; /* ... and their detail, peer, aux word */
	int32_t fail_peer;
	uint32_t fail_aux;
};
int cs__ipc_member(struct cs_ipc_server *s, struct trainer *t, uint32_t handle,
		   struct cs__ipc_member_info *mi);

/* [off, off + len) of host segment @seg of @t, held (its refs counted:
 * the trainer cannot unregister it) when @hold; NULL if it is not one. */
uint8_t *cs__ipc_seg(struct cs_ipc_server *s, struct trainer *t, uint32_t seg,
		     uint64_t off, uint64_t len, bool hold);
void cs__ipc_seg_put(struct cs_ipc_server *s, struct trainer *t, uint32_t seg);

/* Complete a taken descriptor (counted as a bad one for CS_ERR_BAD_DESC). */
void cs__ipc_complete(struct cs_ipc_server *s, struct trainer *t,
		      uint64_t user_id, int status, unsigned detail,
		      int32_t peer, uint32_t aux);

#endif
