/* SPDX-License-Identifier: MIT */
/* Failure detector and epoch state machines. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>

#include <collstack/types.h>

#include "control/member.h"

static const struct cs_member_params P = {
	.hb_interval = 100 * CS_NS_PER_MS,
	.fail_timeout = 1000 * CS_NS_PER_MS,
};

Test(member, coordinator_declares_silent_member_lost)
{
	struct cs_coord_fd fd;
	uint32_t lost[8];
	cs_ns_t t = 0;

	cr_assert_eq(cs_coord_fd_init(&fd, &P, 4, 1, t), 0);
	/* Ranks 0,1,3 heartbeat every 100 ms; rank 2 dies at t = 250 ms. */
	for (t = 0; t <= 3000 * CS_NS_PER_MS; t += P.hb_interval) {
		for (uint32_t r = 0; r < 4; r++)
			if (r != 2 || t <= 250 * CS_NS_PER_MS)
				cr_assert_eq(cs_coord_fd_heard(&fd, r, t), 0);
		unsigned k = cs_coord_fd_poll(&fd, t, lost, 8);
		if (t < 1200 * CS_NS_PER_MS) {
			cr_assert_eq(k, 0, "lost too early at %llu",
				     (unsigned long long)t);
		} else if (t == 1200 * CS_NS_PER_MS) {
			cr_assert_eq(k, 1);
			cr_assert_eq(lost[0], 2);
			cr_assert_eq(fd.epoch, 2);
		} else {
			cr_assert_eq(k, 0);
		}
	}
	cr_assert_eq(fd.alive, 3);
	/* The lost rank's late messages are refused, not resurrected. */
	cr_assert_eq(cs_coord_fd_heard(&fd, 2, t), CS_ERR_PEER_LOST);
	cr_assert_eq(cs_coord_fd_heard(&fd, 9, t), -EINVAL);
	cs_coord_fd_fini(&fd);
}

Test(member, several_losses_one_epoch_step)
{
	struct cs_coord_fd fd;
	uint32_t lost[8];

	cr_assert_eq(cs_coord_fd_init(&fd, &P, 8, 10, 0), 0);
	for (uint32_t r = 0; r < 8; r++)
		if (r != 1 && r != 5)
			cs_coord_fd_heard(&fd, r, 900 * CS_NS_PER_MS);
	cr_assert_eq(cs_coord_fd_deadline(&fd), P.fail_timeout);
	cr_assert_eq(cs_coord_fd_poll(&fd, P.fail_timeout, lost, 8), 2);
	cr_assert_eq(lost[0], 1);
	cr_assert_eq(lost[1], 5);
	cr_assert_eq(fd.epoch, 11);
	cs_coord_fd_fini(&fd);
}

Test(member, member_heartbeats_and_detects_coordinator_loss)
{
	struct cs_member_fd m;
	unsigned hb = 0, lost_reports = 0;
	cs_ns_t lost_at = 0;

	cs_member_fd_init(&m, &P, 1, 0);
	for (cs_ns_t t = 0; t <= 5000 * CS_NS_PER_MS; t += 10 * CS_NS_PER_MS) {
		if (t <= 2000 * CS_NS_PER_MS && t % (200 * CS_NS_PER_MS) == 0)
			cs_member_fd_on_view(&m, 1, t);
		unsigned a = cs_member_fd_poll(&m, t);
		hb += !!(a & CS_MEMBER_SEND_HB);
		if (a & CS_MEMBER_COORD_LOST) {
			lost_reports++;
			lost_at = t;
		}
	}
	cr_assert_eq(hb, 51, "one heartbeat per interval");
	cr_assert_eq(lost_reports, 1, "coordinator loss reported once");
	cr_assert_eq(lost_at, 3000 * CS_NS_PER_MS);
}

Test(member, epoch_advances_with_wrap)
{
	struct cs_member_fd m;

	cs_member_fd_init(&m, &P, UINT32_MAX, 0);
	cr_assert(!cs_member_fd_on_view(&m, UINT32_MAX, 1));
	cr_assert(cs_member_fd_on_view(&m, 0, 2)); /* wrapped forward */
	cr_assert_eq(m.epoch, 0);
	cr_assert(!cs_member_fd_on_view(&m, UINT32_MAX, 3)); /* stale */
	cr_assert_eq(m.epoch, 0);
}

/* The heartbeat clock filter: the least-delay sample of the window wins;
 * impossible stamps are refused. */
Test(member, hb_clock_min_delay_and_bad_stamps)
{
	struct cs_hb_clock c = { 0 };
	struct cs_hb_clock_est e;
	const int64_t off = 5 * (int64_t)CS_NS_PER_S;
	cs_ns_t t = CS_NS_PER_S;

	cr_assert_eq(cs_hb_clock_get(&c, t, &e), -EAGAIN);
	/* t4 before t1; t3 before t2; turnaround longer than the trip */
	cr_assert_eq(cs_hb_clock_add(&c, t, t + off, t + off + 1, t - 1),
		     -EINVAL);
	cr_assert_eq(cs_hb_clock_add(&c, t, t + off, t + off - 1, t + 10),
		     -EINVAL);
	cr_assert_eq(cs_hb_clock_add(&c, t, t + off, t + off + 20, t + 10),
		     -EINVAL);
	cr_assert_eq(c.rejected, 3);
	cr_assert_eq(cs_hb_clock_get(&c, t, &e), -EAGAIN);
	/* CS_HB_CLOCK_WIN + 4 samples; the tightest (delay 2 us, all of it
	 * on the way out) is pushed out of the window by the last ones */
	for (unsigned i = 0; i < CS_HB_CLOCK_WIN + 4; i++) {
		cs_ns_t fwd = i == 1 ? 2000 : 10000 + i * 1000, back = 50000;

		if (i == 1)
			back = 0;
		cr_assert_eq(cs_hb_clock_add(&c, t, t + fwd + off,
					     t + fwd + off, t + fwd + back),
			     0);
		if (i == 1) {
			cr_assert_eq(cs_hb_clock_get(&c, t + fwd, &e), 0);
			cr_assert_eq(e.delay, 2000);
			cr_assert_leq(llabs(e.offset - off),
				      (long long)e.bound);
			cr_assert_eq(e.offset, off + 1000);
		}
		t += 100 * CS_NS_PER_MS;
	}
	cr_assert_eq(cs_hb_clock_get(&c, t, &e), 0);
	cr_assert_eq(e.samples, CS_HB_CLOCK_WIN + 4);
	/* the window's least delay: sample 4 */
	cr_assert_eq(e.delay, 10000 + 4 * 1000 + 50000);
	cr_assert_leq(llabs(e.offset - off), (long long)e.bound);
}
