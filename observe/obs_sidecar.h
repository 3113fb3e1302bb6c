/* SPDX-License-Identifier: MIT */
/*
 * collstackd's side of observe/: its config keys (trace.*, metrics.*),
 * start and stop, the Prometheus endpoint's node-level lines, and the
 * control requests that `collstack trace`, `top` and `doctor` send:
 *
 *   clock              ok now=NS          the trace clock (for alignment)
 *   clock_hb           ok offset=NS bound=NS delay=NS age=NS samples=N
 *                      this sidecar's trace clock minus the
 *                      coordinator's, from the stamped heartbeats
 *                      (control/member.h); err when there is none
 *   trace_dump         ok trace rings=R bytes=B now=NS, then B bytes:
 *                      per ring a struct cs_obs_ring_hdr and its events
 *   trace_on 0|1       ok trace=0|1       switch recording
 *   trace_offset S     ok trace_offset=S  skew the trace clock by S
 *                      seconds (tests of the alignment)
 *   metrics            ok metrics bytes=B, then the exposition text
 *   flight             ok flight bytes=B now=NS, then cs_fl_write()'s text
 */
#ifndef CS_OBSERVE_OBS_SIDECAR_H
#define CS_OBSERVE_OBS_SIDECAR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "observe/trace.h"

struct cs_daemon;

/* What trace_dump sends before each ring's events. */
struct cs_obs_ring_hdr {
	char name[CS_TRACE_NAME_MAX];
	int32_t tid;
	uint32_t lost_lo; /* events it no longer holds (low 32 bits) */
	uint64_t n; /* events that follow */
};

int cs_obs_conf_defaults(void);
/* Returns: 0, -ENOENT for a key that is not ours, -EINVAL (named in @err). */
int cs_obs_set_key(const char *key, const char *val, char *err, size_t len);
void cs_obs_help(FILE *out);
int cs_obs_start(struct cs_daemon *d);

/**
 * cs_obs_tick - the control thread's periodic look (about once a second):
 * writes the flight record to flight.dir when an operation of this
 * sidecar passed flight.auto_after (and asks every other sidecar, through
 * the coordinator, to write theirs), when another sidecar asked, and
 * when a peer was lost
 */
void cs_obs_tick(struct cs_daemon *d);

/* The trace clock: the lcores' clock plus trace.clock_offset (tests). */
cs_ns_t cs_obs_trace_clock(void);
void cs_obs_stop(struct cs_daemon *d);

/**
 * cs_obs_ctl - serve one of the requests above on control connection @fd
 * Returns: -ENOENT when @req is not one of them; else 0 with the reply
 * line in @out, or with @out empty when the reply (and its body) went out
 * already.
 */
int cs_obs_ctl(struct cs_daemon *d, int fd, const char *req, const char *args,
	       char *out, size_t len);

/* cs_obs_send_all - write @len bytes to a stream socket */
int cs_obs_send_all(int fd, const void *buf, size_t len);

#endif
