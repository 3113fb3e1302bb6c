/* SPDX-License-Identifier: MIT */
/* A minimal sidecar main loop around the IPC server, for tests and examples. */
#ifndef CS_TEST_SIDECAR_LOOP_H
#define CS_TEST_SIDECAR_LOOP_H

#include <signal.h>

#include "control/ipc/ipc_server.h"

/**
 * cs_test_sidecar_loop - serve trainers on @path until *@stop is set
 * @path: Unix socket path
 * @stop: set (e.g. by a signal handler) to return
 * @be: cross-node backend or NULL
 * @tick: called with the server and @be->ctx after every poll, or NULL
 *
 * Polls the server, sleeping briefly when idle so that trainers sharing
 * the cores can run. @tick returns work done (0: idle).
 *
 * Returns: 0, or a negative errno from the server.
 */
int cs_test_sidecar_loop(const char *path, volatile sig_atomic_t *stop,
			 const struct cs_ipc_backend *be,
			 int (*tick)(struct cs_ipc_server *srv, void *ctx));

/**
 * cs_test_sidecar_loop_cfg - cs_test_sidecar_loop() with settings
 * @cfg: the server's settings (socket path included; sock_poll_interval
 *	is the loop's own)
 * @stop: as cs_test_sidecar_loop()
 * @be: as cs_test_sidecar_loop()
 * @tick: as cs_test_sidecar_loop()
 *
 * Returns: 0, or a negative errno from the server.
 */
int cs_test_sidecar_loop_cfg(const struct cs_ipc_cfg *cfg,
			     volatile sig_atomic_t *stop,
			     const struct cs_ipc_backend *be,
			     int (*tick)(struct cs_ipc_server *srv, void *ctx));

#endif
