/* SPDX-License-Identifier: MIT */
/*
 * Point-to-point send and receive for trainers, the IPC side (ipc_p2p.c):
 * the CS_IPC_OP_SEND / CS_IPC_OP_RECV descriptors of ipc_proto.h.
 *
 * The server validates a descriptor against the trainer's group (a peer
 * rank of the group other than its own, a buffer inside its segments, at
 * most CS_IPC_P2P_MAX bytes), numbers it (the k-th send of rank a to rank
 * b with tag t has sequence number k, and so has the k-th receive of b
 * from a with tag t: that is how the two meet, on whichever node), copies
 * a send's data out of the trainer's memory once and hands the request to
 * the backend (collstackd's sidecar/svc_p2p.c), which carries it on a lcore
 * and marks it done. The server then copies a receive's data into the
 * trainer's buffer and completes the descriptor. The lcore never touches
 * trainer memory, so a trainer that dies mid-transfer only leaves requests
 * the backend frees when it is done with them (and tells their peers).
 */
#ifndef CS_IPC_P2P_H
#define CS_IPC_P2P_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc_proto.h"

struct cs_ipc_server;
struct trainer; /* ipc_server.c's */

/* The largest message, in bytes (the server copies it once). */
#define CS_IPC_P2P_MAX ((uint64_t)1 << 30)

/* Where a request is (cs_ipc_p2p_req.state): the side that moves it out of
 * QUEUED second frees it. */
enum {
	CS_IPC_P2P_QUEUED = 0, /* with the backend */
	CS_IPC_P2P_DONE = 1, /* the backend finished it: the server's */
	CS_IPC_P2P_ORPHAN = 2, /* its trainer is gone: the backend's to free */
};

/* One send or receive, owned as the state says. */
struct cs_ipc_p2p_req {
	_Atomic int state;
	bool recv;
	/* the group, as every node names it: a hash of its name and size */
	uint64_t gkey;
	uint32_t rank, peer; /* this trainer's rank, the other one's */
	uint32_t size, local_size; /* the group's */
	uint32_t tag;
	uint64_t seq; /* the k of the (sender, receiver, tag) pair */
	uint8_t *buf; /* a send's data (copied); a receive's room */
	uint64_t len; /* bytes */
	/* the outcome, set before DONE */
	int status;
	uint16_t detail; /* enum cs_ipc_lost (CS_ERR_PEER_LOST) or _bad */
	int32_t err_peer; /* the rank or node an error is about, or -1 */
	uint32_t aux; /* CS_IPC_BAD_MISMATCH: the other side's bytes */
	struct cs_ipc_p2p_req *next; /* the backend's queue */
	/* the server's */
	struct trainer *t;
	uint32_t group; /* the trainer's group handle */
	uint64_t user_id;
	uint32_t recv_seg;
	uint8_t *into; /* a receive's destination in the trainer's segment */
	struct cs_ipc_p2p_req *srv_next;
};

/* Free a request and its buffer (the side that owns it). */
void cs_ipc_p2p_req_free(struct cs_ipc_p2p_req *r);

/* The backend (collstackd: sidecar/svc_p2p.c). */
struct cs_ipc_p2p_ops {
	/* carry @r: from now on the backend's until DONE. Returns 0, or an
	 * error (then @r is still the caller's; *@detail: an enum
	 * cs_ipc_bad when the error is CS_ERR_BAD_DESC). */
	int (*submit)(void *ctx, struct cs_ipc_p2p_req *r, unsigned *detail);
	/* the server's round: housekeeping on the caller's thread */
	unsigned (*poll)(void *ctx);
	/* rank @rank of group @gkey is gone from this node (its trainer
	 * died or left): the sends waiting for its receives end with
	 * CS_ERR_PEER_LOST */
	void (*gone)(void *ctx, uint64_t gkey, uint32_t rank);
};

/**
 * cs_ipc_server_set_p2p - let trainers send and receive point to point
 * @s: server
 * @ops: the backend (NULL: refuse them, CS_ERR_BAD_DESC CS_IPC_BAD_OP;
 *	the default)
 * @ctx: for @ops
 * Returns: 0 or -ENOMEM.
 */
int cs_ipc_server_set_p2p(struct cs_ipc_server *s,
			  const struct cs_ipc_p2p_ops *ops, void *ctx);

/* The group key every node computes alike for group @name of @size. */
uint64_t cs_ipc_p2p_gkey(const char *name, uint32_t size);

/* Hooks of ipc_server.c. */
bool cs_ipc_p2p_is_op(uint8_t op);
void cs_ipc_p2p_take(struct cs_ipc_server *s, struct trainer *t,
		     const struct cs_ipc_sqe *d);
unsigned cs_ipc_p2p_poll(struct cs_ipc_server *s);
/* @t left group handle @handle: its sequence numbers start over */
void cs_ipc_p2p_leave(struct cs_ipc_server *s, struct trainer *t,
		      uint32_t handle);
void cs_ipc_p2p_trainer_gone(struct cs_ipc_server *s, struct trainer *t);
void cs_ipc_p2p_fini(struct cs_ipc_server *s);

/* ipc_p2p.c's state in the server, and in a trainer (ipc_server.c) */
struct cs_ipc_p2p;
struct cs_ipc_p2p_tr;
struct cs_ipc_p2p **cs__ipc_p2p_state(struct cs_ipc_server *s);
struct cs_ipc_p2p_tr **cs__ipc_trainer_p2p(struct trainer *t);

#endif
