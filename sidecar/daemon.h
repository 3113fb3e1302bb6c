/* SPDX-License-Identifier: MIT */
/*
 * collstackd's state, and the hooks through which the collective service
 * (sidecar/service.c: collectives over the port) plugs into the daemon.
 */
#ifndef CS_TOOLS_DAEMON_H
#define CS_TOOLS_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dataplane/driver.h"
#include "dataplane/lcore.h"
#include "dataplane/port.h"
#include "daemon_boot.h"

struct cs_ar_svc;

struct cs_daemon_conf {
	struct cs_port_conf port;
	struct cs_lcore_conf lcore;
	uint32_t rank;
	uint32_t log_level;
	char peers[CS_CFG_STR_MAX];
	/* collective service settings (service.c's table) */
	uint8_t svc[4096];
	struct cs_boot_conf boot; /* daemon_boot.c's table */
	/* trainer IPC settings (daemon_ipc.c's table) */
	uint8_t ipc[1024];
};

struct cs_daemon {
	struct cs_daemon_conf conf;
	struct cs_port *port;
	struct cs_drv drv;
	enum cs_poll_mode mode;
	struct cs_lcore lcores[CS_PORT_MAX_QUEUES];
	struct cs_ar_svc *svc;
	int sfd; /* signalfd of SIGTERM/SIGINT/SIGHUP */
	struct cs_boot_state *boot; /* NULL: static peers */
	struct cs_daemon_view view; /* group epoch, lost ranks */
	struct cs_daemon_ipc *ipc; /* trainer IPC thread (daemon_ipc.c) */
};

/**
 * cs_daemon_signalled - a stop signal is pending (not consumed: the main
 * loop reads it); long control requests poll this and give up early
 */
bool cs_daemon_signalled(const struct cs_daemon *d);

/* Hooks implemented by the collective service. */
int cs_daemon_conf_defaults(struct cs_daemon_conf *c);
int cs_daemon_set_key(struct cs_daemon_conf *c, const char *key,
		      const char *val, char *err, size_t errlen);
void cs_daemon_help_config(FILE *out);
/* Called after the driver is set up and before the lcores start. */
int cs_daemon_init(struct cs_daemon *d);
void cs_daemon_fini(struct cs_daemon *d);
/* A control request the daemon itself does not know; -ENOENT if unknown. */
int cs_daemon_ctl(struct cs_daemon *d, const char *req, const char *args,
		  char *out, size_t len);
/* Called about once a second and after every control request. */
void cs_daemon_tick(struct cs_daemon *d);

#endif
