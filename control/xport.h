/* SPDX-License-Identifier: MIT */
/* All transport tunables in one struct, set by key (rel.*, pacer.*, cc.*). */
#ifndef CS_CONTROL_XPORT_H
#define CS_CONTROL_XPORT_H

#include <stddef.h>
#include <stdio.h>

#include "control/cc.h"
#include "control/pacer.h"
#include "control/rel.h"

/**
 * struct cs_xport_params - every transport tunable, one struct; set by key
 * ("rel.window", "pacer.burst_bytes", "cc.target_qdelay" ...)
 */
struct cs_xport_params {
	struct cs_rel_params rel;
	struct cs_pacer_params pacer;
	struct cs_cc_params cc;
};

/**
 * cs_xport_params_default - every table's defaults
 * @xp: out
 * Returns: 0 or -EINVAL.
 */
int cs_xport_params_default(struct cs_xport_params *xp);

/**
 * cs_xport_params_set - set "rel.x", "pacer.x" or "cc.x" to @value
 * @xp: parameters
 * @key: the key
 * @value: text
 * @err: message buffer naming the key (may be NULL)
 * @errlen: its size
 * Returns: 0, -ENOENT (unknown key), -EINVAL (bad value).
 */
int cs_xport_params_set(struct cs_xport_params *xp, const char *key,
			const char *value, char *err, size_t errlen);

/**
 * cs_xport_params_help - print every transport key with default and help
 * @out: stream
 */
void cs_xport_params_help(FILE *out);

#endif
