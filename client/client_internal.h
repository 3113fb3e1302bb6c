/* SPDX-License-Identifier: MIT */
/* libcollstack internals and test hooks (not exported from the .so). */
#ifndef CS_CLIENT_INTERNAL_H
#define CS_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "collstack/collstack.h"
#include "control/ipc/ipc_proto.h"

/*
 * Spin polls in cs_wait() before arming the eventfd and sleeping; the
 * environment variable overrides it at cs_connect() (0: sleep at once,
 * for machines with more busy processes than cores).
 */
#define CS_CLIENT_SPIN_POLLS 2000
#define CS_CLIENT_SPIN_ENV "COLLSTACK_SPIN_POLLS"
/* ... and at most this long (microseconds): with more runnable threads
 * than cores each sched_yield() may hand a whole time slice away, and a
 * trainer spinning through 2000 of them takes milliseconds of CPU from the
 * sidecar threads it waits for (4 nodes on 2 cores: 4 KiB allreduce
 * 665-770 us spinning vs 420-430 us sleeping at once). */
#define CS_CLIENT_SPIN_US 50
#define CS_CLIENT_SPIN_US_ENV "COLLSTACK_SPIN_US"
/* While spinning, after the first CS_CLIENT_SPIN_FREE polls (an answer
 * that comes at once costs no system call), sched_yield() every
 * CS_CLIENT_SPIN_YIELD polls: when trainers and sidecar threads outnumber
 * the cores, a spinner that never yields holds a core for a whole time
 * slice (milliseconds) that the process it waits for needs. */
#define CS_CLIENT_SPIN_FREE 32
#define CS_CLIENT_SPIN_FREE_ENV "COLLSTACK_SPIN_FREE"
/* A wait longer than this (ns) had an answer that needed other processes
 * to run (the group's other trainers, the sidecar); the free polls then
 * only keep the CPU from them, so the next CS_CLIENT_SLOW_MEMORY waits
 * yield from their first poll (one less per quicker wait). 4 trainers, 8
 * bytes, 2 cores: slowest-rank median 7.0-8.4 us with the free polls,
 * 4.2-5.3 us without. */
#define CS_CLIENT_QUICK_NS 2000
#define CS_CLIENT_SLOW_MEMORY 8
#define CS_CLIENT_SPIN_YIELD 1
#define CS_CLIENT_SPIN_YIELD_ENV "COLLSTACK_SPIN_YIELD"
/*
 * How cs_reduce() is carried, read at cs_connect() (every rank of a group
 * must see the same): "auto" (default, the rule of cs_reduce() in
 * collstack.h), "allreduce" (always an allreduce the root keeps), or
 * "scatter-gather" (the two stages wherever they can run, one node and
 * small sizes included: for tests and comparisons).
 */
#define CS_CLIENT_REDUCE_ENV "COLLSTACK_REDUCE"

/* Control-message replies slower than this mean the sidecar is gone. */
#define CS_CLIENT_RPC_TIMEOUT_S 60
/* Completions reaped from the ring per call. */
#define CS_CLIENT_REAP_BURST 32

/**
 * cs__client_post_raw - post a descriptor as is (test hook)
 * @c: client
 * @d: descriptor; its user_id is replaced by the request id
 * @req: out: the request
 *
 * Returns: 0, -EAGAIN, -ENOTCONN.
 */
int cs__client_post_raw(struct cs_client *c, const struct cs_ipc_sqe *d,
			cs_req_t *req);

/* ---- for client/ps_client.c ---- */

/* Post @d with its buffers located: @send (@slen bytes) and @recv (@rlen
 * bytes; 0: none) must lie in this client's buffers. Returns as post. */
int cs__client_post_bufs(struct cs_group *g, struct cs_ipc_sqe *d,
			 const void *send, size_t slen, const void *recv,
			 size_t rlen, cs_req_t *req);
/* cs__client_post_bufs() with the client's lock held (a stage of
 * cs__comp_stages()). */
int cs__client_post_bufs_locked(struct cs_group *g, struct cs_ipc_sqe *d,
				const void *send, size_t slen, const void *recv,
				size_t rlen, cs_req_t *req);
/* A control message and its reply (the reply's status, or -ENOTCONN). */
int cs__client_rpc(struct cs_client *c, struct cs_ipc_msg *m,
		   struct cs_ipc_msg *r);
__attribute__((format(printf, 2, 3))) void
cs__client_set_err(struct cs_client *c, const char *fmt, ...);
struct cs_client *cs__group_client(const struct cs_group *g);
const char *cs__group_name(const struct cs_group *g);
/* The sidecar's handle of a PS table (test hook). */
struct cs_ps_table;
uint32_t cs__ps_table_handle(const struct cs_ps_table *t);

/* The sidecar's id for @b, and the sidecar's handle for @g (test hooks). */
uint32_t cs__buf_seg(const struct cs_buf *b);
uint32_t cs__group_handle(const struct cs_group *g);

/* How many more waits of @c yield from their first poll (test hook). */
unsigned cs__client_slow_answers(struct cs_client *c);

/* Whether a completion waits in @c's ring, not yet reaped (test hook). */
bool cs__client_answer_ready(struct cs_client *c);

/* The control segment (test hook: lets a test corrupt its own rings). */
struct cs_ipc_ctrl *cs__client_ctrl(struct cs_client *c);

/* Detail (enum cs_ipc_bad) and peer rank of the last failed request. */
void cs__client_last_fail(const struct cs_client *c, unsigned *detail,
			  int *peer);

/*
 * A request that finishes with @sub, and then with @fin(@arg, status of
 * @sub) (run inside cs_test()/cs_wait() once @sub finished; its return,
 * with a message in @err when not 0, is the request's status).
 * client/moe.c.
 */
int cs__comp_wrap(struct cs_client *c, cs_req_t sub,
		  int (*fin)(void *arg, int status, char *err, size_t len),
		  void *arg, cs_req_t *req);

/*
 * A request in stages: @next(@arg, &sub) runs with the client's lock held,
 * now and each time the stage it posted finished well; it posts the next
 * stage with cs__client_post_bufs_locked() into *sub and returns 1, or
 * returns 0 (done) or < 0 (failed, the client's error set). @fin as
 * cs__comp_wrap()'s, once. Returns 0, or the first @next's error (then
 * nothing was posted and @fin is not called). client/ps_client.c.
 */
int cs__comp_stages(struct cs_client *c, int (*next)(void *arg, cs_req_t *sub),
		    int (*fin)(void *arg, int status, char *err, size_t len),
		    void *arg, cs_req_t *req);

/*
 * CS_IPC_OP_ALLTOALLV_DYN (ipc_proto.h): @table (4 x size u64 inside a
 * cs_buf: sendcounts and sdispls filled in; recvcounts and rdispls
 * written back on success), @room elements at @recv; @root: the
 * descriptor's (CS_IPC_DYN_BAD_INPUT: this rank's input was bad, refuse
 * it on every rank; a tag << CS_IPC_DYN_TAG_SHIFT). client/moe.c.
 */
int cs__alltoallv_dyn(struct cs_group *g, const void *send, uint64_t *table,
		      void *recv, size_t room, enum cs_dtype dtype,
		      uint32_t root, cs_req_t *req);
/* The same with the client's lock held (a stage of cs__comp_stages()). */
int cs__alltoallv_dyn_locked(struct cs_group *g, const void *send,
			     uint64_t *table, void *recv, size_t room,
			     enum cs_dtype dtype, uint32_t root, cs_req_t *req);
/* The group's trainers on this node (cs_group_join()'s local_size). */
int cs__group_local_size(const struct cs_group *g);

#endif
