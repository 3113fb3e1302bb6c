/* SPDX-License-Identifier: MIT */
/*
 * Bootstrap: the coordinator admits members that prove they hold the job
 * token, assigns node ids and distributes the dataplane address table.
 *
 * Handshake (every message: u32 length, u8 type, body; big endian):
 *   coordinator -> member  CHALLENGE  nonce_c[32]
 *   member -> coordinator  JOIN       nonce_m[32], mac[32], want_rank, addr
 *        mac = MAC(token, "cs-join" || nonce_c || nonce_m || addr)
 *   coordinator -> member  WELCOME    node id, world, proof[32]
 *        proof = MAC(token, "cs-welcome" || nonce_m || node id)
 *     MAC: keyed BLAKE2b-256 under the token's subkey for CS_BOOT_MAC_CTX
 *     (control/auth.h cs_mac)
 *     or                   REFUSE     code, reason text
 *   coordinator -> all     TABLE      epoch, n, n x (rank, state, addr)
 *        sent when the group is complete and after every change
 *   member -> coordinator  HEARTBEAT  node id, epoch [, t1]
 *   coordinator -> member  VIEW       epoch, n lost, lost ranks
 *                                     [, echo t1, t2, t3]
 *        the clock stamps (u64 ns each, cs_boot_set_stamp_clock()) are
 *        optional: a HEARTBEAT's body is 8 bytes (unstamped) or 16, a
 *        VIEW's ends after its lost ranks or 24 bytes later; any other
 *        length is malformed. The coordinator stamps its VIEW reply only
 *        to a stamped HEARTBEAT, so a member without stamps keeps working
 *        with it; a stamping member needs a coordinator of this version
 *        (an older one refuses the 16-byte HEARTBEAT). Members estimate
 *        their offset from the coordinator's clock (struct cs_hb_clock).
 *   member -> coordinator  DUMP       origin node id, trigger id
 *   coordinator -> all     DUMP       the same: every member writes its
 *        flight record under that trigger id (an operation of the origin
 *        passed its deadline). A member sends DUMP only to a coordinator
 *        that stamped a VIEW (this version: an older one would refuse it).
 *
 * The token never crosses the wire; both sides prove they hold it, so a
 * member also refuses a coordinator that does not. This file is sans-IO:
 * the driver (boot_tcp.c) moves bytes, these functions decide.
 *
 * The coordinator sits behind struct cs_rendezvous_ops so that a store
 * (etcd, as torchelastic does) can replace it for large clusters.
 */
#ifndef CS_CONTROL_BOOT_H
#define CS_CONTROL_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/member.h"
#include "internal/util.h"

#define CS_BOOT_NONCE_LEN 32
#define CS_BOOT_MAC_CTX "csjoin01" /* cs_mac purpose of the handshake */
#define CS_BOOT_MAX_MSG 65536
#define CS_BOOT_MAX_RANKS 1024

enum cs_boot_msg_type {
	CS_BOOT_CHALLENGE = 1,
	CS_BOOT_JOIN = 2,
	CS_BOOT_WELCOME = 3,
	CS_BOOT_REFUSE = 4,
	CS_BOOT_TABLE = 5,
	CS_BOOT_HEARTBEAT = 6,
	CS_BOOT_VIEW = 7,
	CS_BOOT_DUMP = 8,
};

/* One member's dataplane address, as distributed in the table. */
struct cs_node_addr {
	uint8_t mac[6];
	uint8_t numa; /* NUMA node of its NIC */
	uint8_t state; /* enum cs_member_state (in TABLE) */
	uint32_t ip; /* IPv4, host order */
	uint16_t udp_port;
	uint16_t queues; /* dataplane queues (channels) it serves */
	uint32_t qpn; /* verbs QP number, 0 when unused */
};

#define CS_BOOT_ADDR_WIRE_LEN 20

struct cs_boot_msg {
	uint8_t type;
	uint8_t nonce[CS_BOOT_NONCE_LEN];
	uint8_t mac[32];
	int32_t want_rank; /* JOIN: -1 = any */
	uint32_t node; /* WELCOME, HEARTBEAT, DUMP (origin) */
	uint64_t dump_id; /* DUMP: the trigger */
	uint32_t world; /* WELCOME */
	uint32_t epoch; /* TABLE, HEARTBEAT, VIEW */
	int32_t code; /* REFUSE */
	char reason[128]; /* REFUSE */
	struct cs_node_addr addr; /* JOIN */
	uint32_t n; /* TABLE entries or VIEW lost ranks */
	struct cs_node_addr *table; /* TABLE: caller's array */
	uint32_t *lost; /* VIEW: caller's array */
	uint32_t cap; /* room in table/lost when decoding */
	bool stamped; /* HEARTBEAT, VIEW: the clock stamps are present */
	cs_ns_t ts_tx; /* HEARTBEAT: t1; VIEW: t3 (the sender's clock) */
	cs_ns_t ts_echo; /* VIEW: the t1 it answers */
	cs_ns_t ts_rx; /* VIEW: t2, when the coordinator received t1 */
};

/**
 * cs_boot_set_stamp_clock - the clock heartbeats are stamped with (the
 * process's trace clock in collstackd, so that the offsets apply to the
 * timeline); NULL (the default) sends the unstamped forms. Set it before
 * the coordinator and members start.
 */
void cs_boot_set_stamp_clock(cs_ns_t (*clock)(void));
/* The stamp clock was stepped (tests: trace_offset): members drop their
 * samples and start the estimate again. Any thread. */
void cs_boot_stamp_clock_stepped(void);

/**
 * cs_boot_encode - serialize @m into @buf
 * Returns: bytes written (length prefix included) or -ENOSPC / -EINVAL.
 */
int cs_boot_encode(const struct cs_boot_msg *m, uint8_t *buf, size_t cap);

/**
 * cs_boot_decode - parse one message from untrusted bytes
 * @buf: received bytes, starting at a length prefix
 * @len: bytes available
 * @m: out; m->table / m->lost / m->cap must be set up by the caller when
 *     TABLE or VIEW messages are expected
 *
 * Returns: the message's total length when complete, 0 when more bytes
 * are needed, or -EPROTO (malformed), -EMSGSIZE (too long), -ENOSPC
 * (more entries than m->cap).
 */
int cs_boot_decode(const uint8_t *buf, size_t len, struct cs_boot_msg *m);

void cs_boot_join_mac(const char *token, const uint8_t nonce_c[32],
		      const uint8_t nonce_m[32], const struct cs_node_addr *a,
		      uint8_t mac[32]);
void cs_boot_welcome_proof(const char *token, const uint8_t nonce_m[32],
			   uint32_t node, uint8_t proof[32]);

/* -------- coordinator (sans-IO) -------- */

struct cs_coord_conn {
	bool open;
	bool admitted;
	uint32_t rank;
	uint8_t nonce[CS_BOOT_NONCE_LEN];
};

struct cs_coord {
	char token[128];
	uint32_t world; /* members expected */
	uint32_t joined;
	uint32_t max_conns;
	uint32_t cap; /* ranks the table has room for (world + spare) */
	uint32_t joining; /* admitted after the group formed, not in it yet */
	bool complete; /* every rank admitted, table sent */
	struct cs_coord_conn *conns; /* indexed by the driver's conn id */
	struct cs_node_addr *table; /* indexed by rank */
	uint32_t *rank_conn; /* rank -> conn id */
	struct cs_coord_fd fd;
	struct cs_member_params mp;
	uint64_t rng;
	uint64_t refused; /* joins refused (bad token, full, ...) */
};

/* What the coordinator wants its driver to do. */
struct cs_coord_out {
	void (*send)(void *ctx, uint32_t conn, const struct cs_boot_msg *m);
	void (*close)(void *ctx, uint32_t conn);
	/* a member was lost; the epoch has advanced */
	void (*lost)(void *ctx, uint32_t rank, uint32_t epoch);
	void *ctx;
};

int cs_coord_init(struct cs_coord *c, const char *token, uint32_t world,
		  uint32_t max_conns, const struct cs_member_params *mp,
		  uint64_t seed);
void cs_coord_fini(struct cs_coord *c);

/* A connection was accepted: sends the challenge. */
int cs_coord_on_open(struct cs_coord *c, uint32_t conn, cs_ns_t now,
		     const struct cs_coord_out *o);
/* A message arrived on @conn. Returns 0 or a negative error (the conn is
 * then closed through @o). */
int cs_coord_on_msg(struct cs_coord *c, uint32_t conn,
		    const struct cs_boot_msg *m, cs_ns_t now,
		    const struct cs_coord_out *o);
/* The connection closed (a member's sidecar died: its rank is lost). */
void cs_coord_on_close(struct cs_coord *c, uint32_t conn, cs_ns_t now,
		       const struct cs_coord_out *o);
/* Timers: failure detection. */
void cs_coord_on_timer(struct cs_coord *c, cs_ns_t now,
		       const struct cs_coord_out *o);

/**
 * cs_coord_next_deadline - when cs_coord_on_timer() can next declare a
 * member lost (CS_NS_NEVER before the group formed): a driver with its
 * own clock (the simulator) arms its timer for this instead of polling
 * @c: the coordinator
 */
cs_ns_t cs_coord_next_deadline(const struct cs_coord *c);

/**
 * cs_coord_allow_growth - let up to @spare more members join after the
 * group formed (elastic growth). Such a member is admitted (WELCOME, a
 * rank from world on) but stays CS_MEMBER_JOINING, outside the group and
 * its failure detector, until the driver calls cs_coord_admit_joining()
 * at an operation boundary. Call before the first join.
 * @c: the coordinator
 * @spare: extra ranks (world + @spare <= CS_BOOT_MAX_RANKS)
 * Returns: 0, -EINVAL, -EBUSY (members joined already), -ENOMEM.
 */
int cs_coord_allow_growth(struct cs_coord *c, uint32_t spare);

/**
 * cs_coord_admit_joining - members waiting as CS_MEMBER_JOINING join the
 * group: the world grows, the epoch advances and every member (the new
 * ones too) gets the new TABLE.
 * @c: the coordinator
 * @now: current time (the new members count as heard now)
 * @o: the driver's actions
 * Returns: the number of members that joined (0: none waited).
 */
uint32_t cs_coord_admit_joining(struct cs_coord *c, cs_ns_t now,
				const struct cs_coord_out *o);

/* -------- member (sans-IO) -------- */

enum cs_boot_member_state {
	CS_BOOT_M_WAIT_CHALLENGE = 0,
	CS_BOOT_M_WAIT_WELCOME,
	CS_BOOT_M_WAIT_TABLE,
	CS_BOOT_M_READY,
	CS_BOOT_M_FAILED,
};

struct cs_boot_member {
	char token[128];
	int32_t want_rank;
	struct cs_node_addr self;
	uint8_t nonce[CS_BOOT_NONCE_LEN];
	uint64_t rng;
	enum cs_boot_member_state state;
	uint32_t rank, world, epoch;
	struct cs_node_addr table[CS_BOOT_MAX_RANKS];
	struct cs_member_fd fd;
	struct cs_member_params mp;
	char error[160]; /* why the member failed, for the log */
	cs_ns_t hb_t1; /* stamp of the last HEARTBEAT sent (0: none) */
	uint32_t hb_gen; /* cs_boot_stamp_clock_stepped() count at hb_t1 */
	bool coord_new; /* the coordinator stamped a VIEW: it knows DUMP */
	uint32_t dump_origin; /* the last DUMP received */
	uint64_t dump_id;
	struct cs_hb_clock clk; /* offset of the coordinator's clock */
};

int cs_boot_member_init(struct cs_boot_member *b, const char *token,
			int32_t want_rank, const struct cs_node_addr *self,
			const struct cs_member_params *mp, uint64_t seed);

/* Bits returned by cs_boot_member_on_msg(). */
#define CS_BOOT_M_REPLY 0x1 /* send *reply */
#define CS_BOOT_M_TABLE 0x2 /* a new table: addresses / epoch changed */
#define CS_BOOT_M_VIEW 0x4 /* the epoch advanced: fail in-flight ops */
#define CS_BOOT_M_DUMP 0x10 /* a DUMP arrived: b->dump_origin, dump_id */
#define CS_BOOT_M_COORD_LOST                                                   \
	0x8 /* cs_boot_member_poll(): silent coordinator                       \
	     */

/**
 * cs_boot_member_on_msg - a message from the coordinator
 * @reply: filled when the return has CS_BOOT_M_REPLY
 * @lost: VIEW's lost ranks are copied here (cap @maxlost); @nlost out
 * Returns: a bit set of CS_BOOT_M_*, or a negative error: CS_ERR_AUTH when
 * the coordinator cannot prove it holds the token, -ECONNREFUSED when it
 * refused us (b->error says why), -EPROTO for a message out of order.
 */
int cs_boot_member_on_msg(struct cs_boot_member *b, const struct cs_boot_msg *m,
			  cs_ns_t now, struct cs_boot_msg *reply,
			  uint32_t *lost, unsigned maxlost, unsigned *nlost);

/**
 * cs_boot_member_poll - a member's timers: heartbeats and the
 * coordinator's silence (once the member holds the table)
 * @b: the member
 * @now: current time
 * @hb: filled with the HEARTBEAT to send when the return has
 *	CS_BOOT_M_REPLY
 * Returns: a bit set of CS_BOOT_M_REPLY and CS_BOOT_M_COORD_LOST (the
 *	coordinator was silent for member.fail_timeout; reported once).
 */
unsigned cs_boot_member_poll(struct cs_boot_member *b, cs_ns_t now,
			     struct cs_boot_msg *hb);

/**
 * cs_boot_member_deadline - when cs_boot_member_poll() next has work
 * (CS_NS_NEVER before the member holds the table)
 */
/**
 * cs_boot_member_dump - the DUMP asking every member to write its flight
 * record under @id
 * Returns: 0 (@m filled: send it), -EAGAIN before the group formed,
 * -ENOTSUP when the coordinator has not shown it knows DUMP.
 */
int cs_boot_member_dump(const struct cs_boot_member *b, uint64_t id,
			struct cs_boot_msg *m);

/**
 * cs_boot_member_clock - the coordinator's clock minus this member's, from
 * the stamped heartbeats, at the stamp clock's now
 * Returns: 0, or -EAGAIN (no sample yet, or no stamp clock set).
 */
int cs_boot_member_clock(const struct cs_boot_member *b,
			 struct cs_hb_clock_est *e);

cs_ns_t cs_boot_member_deadline(const struct cs_boot_member *b);

#endif
