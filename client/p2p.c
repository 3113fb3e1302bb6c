/* SPDX-License-Identifier: MIT */
/*
 * libcollstack: point-to-point send and receive (cs_send, cs_recv). Each is
 * a descriptor on the trainer's submission ring (CS_IPC_OP_SEND / _RECV),
 * carried by the sidecar (sidecar/svc_p2p.c) and waited for like any
 * request.
 */
#include <errno.h>

#include "client_internal.h"
#include "collstack/collstack.h"

static int p2p_post(struct cs_group *g, uint8_t op, const void *buf,
		    size_t count, enum cs_dtype dtype, int peer, unsigned tag,
		    cs_req_t *req)
{
	struct cs_ipc_sqe d = { .op = op,
				.dtype = (uint8_t)dtype,
				.count = count,
				.root = (uint32_t)peer,
				.reserved0 = tag };
	size_t len = count * cs_dtype_size(dtype);

	if (!g || !req || !cs_dtype_size(dtype) || peer < 0 ||
	    tag >= CS_TAG_RESERVED)
		return -EINVAL;
	d.group = cs__group_handle(g);
	if (op == CS_IPC_OP_SEND)
		return cs__client_post_bufs(g, &d, buf, len, NULL, 0, req);
	return cs__client_post_bufs(g, &d, NULL, 0, buf, len, req);
}

cs_export int cs_send(struct cs_group *g, const void *buf, size_t count,
		      enum cs_dtype dtype, int dst, unsigned tag, cs_req_t *req)
{
	return p2p_post(g, CS_IPC_OP_SEND, buf, count, dtype, dst, tag, req);
}

cs_export int cs_recv(struct cs_group *g, void *buf, size_t count,
		      enum cs_dtype dtype, int src, unsigned tag, cs_req_t *req)
{
	return p2p_post(g, CS_IPC_OP_RECV, buf, count, dtype, src, tag, req);
}
