/* SPDX-License-Identifier: MIT */
/*
 * Membership and failure detection, sans-IO.
 *
 * Model: a star. Every member sends a heartbeat to the coordinator each
 * hb_interval; the coordinator answers with its own heartbeat, which
 * carries the current view (epoch). The coordinator declares a member lost
 * when it has not heard from it for fail_timeout, advances the epoch and
 * announces the new view (epoch, lost ranks) to every survivor. A member
 * that has not heard from the coordinator for fail_timeout reports
 * "coordinator lost" (it never waits forever).
 *
 * Bound: a member that dies is declared lost at most fail_timeout +
 * hb_interval after its last heartbeat; survivors learn the new view one
 * network latency later, so every in-flight operation ends within
 * 2 x fail_timeout provided hb_interval + latency <= fail_timeout.
 *
 * Both sides are pure state machines: time in, actions out.
 */
#ifndef CS_CONTROL_MEMBER_H
#define CS_CONTROL_MEMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal/config.h"
#include "internal/util.h"

struct cs_member_params {
	uint64_t hb_interval; /* ns between heartbeats */
	uint64_t fail_timeout; /* ns of silence before a member is lost */
};

extern const struct cs_cfg_entry cs_member_cfg[];
extern const size_t cs_member_cfg_len;

enum cs_member_state {
	CS_MEMBER_ALIVE = 0,
	CS_MEMBER_LOST = 1,
	CS_MEMBER_JOINING = 2, /* admitted; joins at the next op boundary */
};

/* Coordinator's view of the group. */
struct cs_coord_fd {
	struct cs_member_params p;
	uint32_t epoch;
	uint32_t n; /* ranks in the group, including lost ones */
	uint32_t alive;
	cs_ns_t *last_heard; /* per rank */
	uint8_t *state; /* enum cs_member_state per rank */
};

/**
 * cs_coord_fd_init - start tracking @n ranks, all alive as of @now
 * Returns: 0 or -ENOMEM / -EINVAL.
 */
int cs_coord_fd_init(struct cs_coord_fd *fd, const struct cs_member_params *p,
		     uint32_t n, uint32_t epoch, cs_ns_t now);
void cs_coord_fd_fini(struct cs_coord_fd *fd);

/**
 * cs_coord_fd_heard - any message from @rank proves it alive
 * Returns: 0, -EINVAL for a rank outside the group, CS_ERR_PEER_LOST for a
 * rank already declared lost (its messages are ignored: it must rejoin).
 */
int cs_coord_fd_heard(struct cs_coord_fd *fd, uint32_t rank, cs_ns_t now);

/**
 * cs_coord_fd_poll - declare silent members lost
 * @lost: out, ranks newly declared lost in this call
 * @max: room in @lost
 *
 * Every call that finds a lost member advances the epoch once.
 * Returns: the number of ranks written to @lost.
 */
unsigned cs_coord_fd_poll(struct cs_coord_fd *fd, cs_ns_t now, uint32_t *lost,
			  unsigned max);

/**
 * cs_coord_fd_deadline - the next time cs_coord_fd_poll() can find a loss
 */
cs_ns_t cs_coord_fd_deadline(const struct cs_coord_fd *fd);

/* A member's side: heartbeats out, coordinator liveness and the view in. */
struct cs_member_fd {
	struct cs_member_params p;
	uint32_t epoch;
	cs_ns_t next_hb;
	cs_ns_t coord_heard;
	bool coord_lost;
};

void cs_member_fd_init(struct cs_member_fd *m, const struct cs_member_params *p,
		       uint32_t epoch, cs_ns_t now);

/**
 * cs_member_fd_on_view - the coordinator's heartbeat or view announcement
 * @epoch: the view's epoch
 * Returns: true when the epoch advanced (in-flight operations of older
 * epochs must now fail with CS_ERR_PEER_LOST).
 */
bool cs_member_fd_on_view(struct cs_member_fd *m, uint32_t epoch, cs_ns_t now);

enum cs_member_action {
	CS_MEMBER_NOTHING = 0,
	CS_MEMBER_SEND_HB = 1, /* send a heartbeat now */
	CS_MEMBER_COORD_LOST = 2, /* coordinator silent past timeout */
};

/**
 * cs_member_fd_poll - what to do at @now (a bit set of enum
 * cs_member_action); CS_MEMBER_COORD_LOST is reported once.
 */
unsigned cs_member_fd_poll(struct cs_member_fd *m, cs_ns_t now);

cs_ns_t cs_member_fd_deadline(const struct cs_member_fd *m);

/*
 * Clock offset from the heartbeat exchange (NTP's on-wire arithmetic).
 * A member stamps its HEARTBEAT with its clock (t1); the coordinator's
 * VIEW reply echoes t1 and carries the coordinator's clock at receipt
 * (t2) and at sending (t3); the member notes its clock at receipt (t4).
 * Then the coordinator's clock minus the member's is
 *     offset = ((t2 - t1) + (t3 - t4)) / 2
 * within +-delay / 2, delay = (t4 - t1) - (t3 - t2) (the true offset lies
 * in that interval whatever the split of the round trip between the two
 * directions). Of the last CS_HB_CLOCK_WIN samples the one of least delay
 * wins (min-RTT filter), and its bound grows by CS_HB_CLOCK_DRIFT_PPM of
 * its age (the clocks' rates may differ by that much). Pure arithmetic:
 * tested with injected offsets and delays (tests/control/test_member.c).
 */
#define CS_HB_CLOCK_WIN 16
#define CS_HB_CLOCK_DRIFT_PPM 20

struct cs_hb_clock {
	struct {
		int64_t offset;
		cs_ns_t delay;
		cs_ns_t at; /* t4 */
	} s[CS_HB_CLOCK_WIN];
	unsigned n, next;
	uint64_t samples; /* accepted, all time */
	uint64_t rejected; /* stamps that cannot be (t4 < t1, t3 < t2...) */
};

/* peer clock = own clock + offset, within +-bound */
struct cs_hb_clock_est {
	int64_t offset;
	cs_ns_t bound;
	cs_ns_t delay; /* round trip of the sample used */
	cs_ns_t age; /* how old that sample is */
	uint64_t samples;
};

/**
 * cs_hb_clock_add - one exchange: @t1, @t4 on the own clock, @t2, @t3 on
 * the peer's
 * Returns: 0, or -EINVAL (counted in ->rejected) when the stamps cannot
 * come from one exchange: t4 before t1, t3 before t2, or the peer's
 * turnaround longer than the round trip.
 */
int cs_hb_clock_add(struct cs_hb_clock *c, cs_ns_t t1, cs_ns_t t2, cs_ns_t t3,
		    cs_ns_t t4);

/**
 * cs_hb_clock_get - the estimate at @now (own clock)
 * Returns: 0, or -EAGAIN before the first sample.
 */
int cs_hb_clock_get(const struct cs_hb_clock *c, cs_ns_t now,
		    struct cs_hb_clock_est *e);

#endif
