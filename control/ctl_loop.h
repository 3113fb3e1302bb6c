/* SPDX-License-Identifier: MIT */
/*
 * The control connections' event loop: kernel TCP driven by io_uring
 * (accept, recv and send are all ring operations), carrying bootstrap
 * messages (control/boot.h). It runs on the sidecar's control thread,
 * never on a dataplane lcore.
 */
#ifndef CS_CONTROL_CTL_LOOP_H
#define CS_CONTROL_CTL_LOOP_H

#include <stdint.h>

#include "control/boot.h"

struct cs_ctl_loop;

struct cs_ctl_handler {
	void (*on_open)(void *ctx, uint32_t conn); /* accepted */
	void (*on_msg)(void *ctx, uint32_t conn, const struct cs_boot_msg *m);
	void (*on_close)(void *ctx, uint32_t conn); /* peer gone */
	void *ctx;
};

/**
 * cs_ctl_loop_init - create a loop with room for @max_conns connections
 * Returns: 0 or a negative errno.
 */
int cs_ctl_loop_init(struct cs_ctl_loop **out, uint32_t max_conns,
		     const struct cs_ctl_handler *h);
void cs_ctl_loop_fini(struct cs_ctl_loop *l);

/**
 * cs_ctl_listen - accept connections on @ip:@port (ip "0.0.0.0" for any)
 * @port: 0 picks a free port; the chosen one is written back
 */
int cs_ctl_listen(struct cs_ctl_loop *l, const char *ip, uint16_t *port);

/**
 * cs_ctl_loop_connect - connect to @ip:@port, waiting at most @timeout_ms
 * @conn: out, the connection id
 * Returns: 0, -ETIMEDOUT, -ECONNREFUSED, ...
 */
int cs_ctl_loop_connect(struct cs_ctl_loop *l, const char *ip, uint16_t port,
			int timeout_ms, uint32_t *conn);

/* Queue a message; -ENOBUFS when the connection's send buffer is full. */
int cs_ctl_loop_send(struct cs_ctl_loop *l, uint32_t conn,
		     const struct cs_boot_msg *m);
void cs_ctl_close(struct cs_ctl_loop *l, uint32_t conn);

/**
 * cs_ctl_run - process events for at most @timeout_ms (0: only what is
 * ready). Handlers are called from here.
 * Returns: events processed, or a negative errno.
 */
int cs_ctl_run(struct cs_ctl_loop *l, int timeout_ms);

#endif
