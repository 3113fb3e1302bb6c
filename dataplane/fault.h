/* SPDX-License-Identifier: MIT */
/*
 * The fault shim: a port that wraps another and applies seeded drop,
 * duplicate, reorder, delay and corrupt to every transmitted frame, so loss
 * tests run the real dataplane code path over any back-end.
 *
 * Faults act on transmit (what a lossy link does to what we send); receive
 * passes through. Held frames (reordered, delayed, or refused by a full
 * inner queue) are flushed by every rx_burst and tx_burst call, which the
 * polling lcore makes all the time. The shim never loses a frame it did not
 * mean to drop: it accepts only as many frames as it can hold.
 */
#ifndef CS_DATAPLANE_FAULT_H
#define CS_DATAPLANE_FAULT_H

#include <stdbool.h>

#include "dataplane/port.h"

/* Frames the shim can hold per queue (reordered, delayed, retried). */
#define CS_FAULT_HOLD 1024

/**
 * cs_fault_active - does @fc ask for any fault at all?
 */
bool cs_fault_active(const struct cs_fault_conf *fc);

/**
 * cs_fault_wrap - put the fault shim on top of @inner
 * @inner: an open port; the shim owns it from now on (closing the shim
 *         closes it)
 * @fc: probabilities and seed (copied); queue q uses seed + q
 * @out: the shim port
 *
 * Returns: 0, -EINVAL for a probability outside [0, 1], or -ENOMEM.
 */
int cs_fault_wrap(struct cs_port *inner, const struct cs_fault_conf *fc,
		  struct cs_port **out);

#endif
