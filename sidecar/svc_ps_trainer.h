/* SPDX-License-Identifier: MIT */
/*
 * collstackd's parameter-server tables for trainers (the trainer API of
 * include/collstack/ps.h): the backend of the IPC server's PS requests
 * (control/ipc/ipc_ps.h).
 *
 * A table is one long-lived cs_ps_flow (transport/ps_flow.h) posted on
 * the transport core by every sidecar that has a rank of the table's group
 * (op id: a hash of group, table name and a nonce the ranks agreed on
 * when they created it, the same on every node). Every such sidecar is a server
 * of the table (its shard store) and runs one worker engine per local rank
 * (worker rank = group rank; every rank pushes every version in sync and
 * ssp). A group on one node shards the table over that node alone.
 *
 * The lcore that runs the flow owns the stores and the worker engines: the
 * IPC side only queues requests under a lock, and the lcore marks them
 * done. Once the flow has ended (cancelled when no rank here holds the
 * table any more, aborted by a peer, a lost session or a new view), the
 * IPC side takes the table over, ends what is left with the flow's error
 * and frees it.
 */
#ifndef CS_SIDECAR_SVC_PS_TRAINER_H
#define CS_SIDECAR_SVC_PS_TRAINER_H

#include "control/ipc/ipc_ps.h"
#include "internal/config.h"

struct cs_core_svc;
struct cs_pst;

/* Transport groups of the tables' flows: over every node of the view, and
 * over this node alone (a group whose ranks are all here). */
#define CS_PST_GROUP 10u
#define CS_PST_GROUP_LOCAL 11u

/* Tunables of trainer tables (config table cs_pst_cfg). */
struct cs_pst_cfg {
	/* share of the lcore's time a checkpoint's snapshot steps may take
	 * (struct cs_ps_snap_pace), in (0, 1] */
	double ckpt_share;
	/* where tables with a memory budget put their spill files (an
	 * absolute path) */
	char spill_dir[CS_CFG_STR_MAX];
	/* a pull's rows on disk are read while the lcore serves on (else
	 * the lcore waits for them) */
	bool spill_async;
};
extern const struct cs_cfg_entry cs_pst_cfg[];
extern const size_t cs_pst_cfg_len;

struct cs_ps_spill;
struct cs_ps_spill_ops;
struct cs_ps_uring_spill;
/*
 * A new spill file "<prefix>.XXXXXX.spill" in @cfg's ps.spill_dir, with
 * @qdepth ring entries, for a store's SSD tier (a trainer table's or the
 * sidecar job's): *@u the file, @path its name (@plen bytes), @sp ready
 * for cs_ps_store_add_table, its ops copied into @ops and read while the
 * lcore serves on unless ps.spill_async=0. Returns 0, or -errno with the
 * reason in words in *@e (not an absolute path, built without liburing,
 * strerror()).
 */
int cs_pst_spill_new(const struct cs_pst_cfg *cfg, const char *prefix,
		     unsigned qdepth, struct cs_ps_uring_spill **u,
		     struct cs_ps_spill_ops *ops, struct cs_ps_spill *sp,
		     char *path, size_t plen, const char **e);

/* The IPC server's backend (ctx: the struct cs_pst). */
extern const struct cs_ipc_ps_ops cs_pst_ipc_ops;

/* For the collective service @svc's core. Returns 0 or -ENOMEM. */
struct cs_ar_svc;
int cs_pst_create(struct cs_ar_svc *svc, struct cs_pst **out);
/* The service's trainer-table settings (service.c). */
const struct cs_pst_cfg *cs_ar_svc_pst_cfg(struct cs_ar_svc *s);
/* After the IPC server is gone: ends every table's flow (waits for its
 * lcore to let go of it) and frees the tables. */
void cs_pst_destroy(struct cs_pst *p);

#endif
