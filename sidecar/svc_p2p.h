/* SPDX-License-Identifier: MIT */
/*
 * collstackd's point-to-point send and receive for trainers (cs_send /
 * cs_recv of include/collstack/collstack.h): the backend of the IPC
 * server's CS_IPC_OP_SEND / _RECV requests (control/ipc/ipc_p2p.h).
 *
 * Every sidecar that carries one posts one long-lived cs_ps_flow
 * (transport/ps_flow.h: reliable messages, one frame each, over the
 * transport core's sessions) as op CS_P2P_OP_BASE + view epoch of the
 * transport group CS_P2P_GROUP, over every node of the view (a sidecar
 * alone: CS_P2P_GROUP_LOCAL, over itself). A transfer is a rendezvous:
 *
 *   sender's node                       receiver's node
 *   RTS (group, src, dst, tag, k, bytes) ->   held until the k-th receive
 *                                             of dst from src with tag
 *                                             is posted (or waiting)
 *                                        <-   CTS
 *   DATA (offset, bytes) ...             ->   copied into the receive's
 *                                             room, exactly once
 *                                        <-   FIN: the receive is done
 *   the send is done
 *
 * so nothing is buffered that no receive asked for beyond the RTS itself.
 * A size that differs ends both with CS_ERR_BAD_DESC (CS_IPC_BAD_MISMATCH,
 * the other side's bytes in the aux word); a transfer past coll.deadline
 * ends with CS_ERR_TIMEOUT on its side and an ABORT tells the other; a
 * trainer that dies mid-transfer aborts its peer's side with
 * CS_ERR_PEER_LOST naming its rank; a lost node or a new view ends the
 * flow and every transfer on it (CS_ERR_PEER_LOST), and the next
 * request posts a new flow. A message to the node itself never leaves
 * it (the flow's local queue).
 *
 * Ranks map to nodes as for cs_alltoall: node k holds ranks k x L .. k x
 * L + L - 1 of a group of L ranks per node on every node (what torchrun
 * gives); a group on one node needs nothing. Another layout is refused at
 * the request (CS_ERR_BAD_DESC, CS_IPC_BAD_LAYOUT).
 *
 * The lcore that runs the flow owns the transfers: the IPC side only queues
 * requests under a lock and the lcore marks them done. It never touches
 * trainer memory (the IPC side copies a send's data in and a receive's
 * out).
 */
#ifndef CS_SIDECAR_SVC_P2P_H
#define CS_SIDECAR_SVC_P2P_H

#include "control/ipc/ipc_p2p.h"

#define CS_P2P_GROUP 12u
#define CS_P2P_GROUP_LOCAL 13u
#define CS_P2P_OP_BASE 0x50320000u

struct cs_ar_svc;
struct cs_p2p;

/* The IPC server's backend (ctx: the struct cs_p2p). */
extern const struct cs_ipc_p2p_ops cs_p2p_ipc_ops;

/* For the collective service @svc's core. Returns 0 or -ENOMEM. */
int cs_p2p_create(struct cs_ar_svc *svc, struct cs_p2p **out);
/* After the IPC server is gone: ends the flow (waits for its lcore to let
 * go of it) and frees what is left. */
void cs_p2p_destroy(struct cs_p2p *p);

#endif
