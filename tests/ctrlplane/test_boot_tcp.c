/* SPDX-License-Identifier: MIT */
/* Bootstrap over real loopback TCP: admission, refusal, loss, coordinator
 * loss. Bounds are generous: this runs on loaded 2-core machines. */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include <collstack/types.h>

#include "control/boot_svc.h"

static cs_ns_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * CS_NS_PER_S + (cs_ns_t)ts.tv_nsec;
}

static const struct cs_member_params MP = {
	.hb_interval = 20 * CS_NS_PER_MS,
	.fail_timeout = 2 * CS_NS_PER_S,
};

#define N 4

struct world {
	struct cs_coord_svc co;
	struct cs_member_svc m[N + 1];
	unsigned ev[N + 1];
	bool live[N + 1];
};

static void pump(struct world *w, bool coord)
{
	cs_ns_t t = now_ns();

	if (coord)
		cs_coord_svc_poll(&w->co, t, 1);
	for (unsigned k = 0; k <= N; k++)
		if (w->live[k])
			w->ev[k] |= cs_member_svc_poll(&w->m[k], t, 0);
}

static bool all_have(struct world *w, unsigned ev, int skip)
{
	for (unsigned k = 0; k < N; k++)
		if ((int)k != skip && !(w->ev[k] & ev))
			return false;
	return true;
}

Test(boot_tcp, form_refuse_lose_and_coordinator_loss, .timeout = 120)
{
	struct world *w = calloc(1, sizeof(*w));
	cs_ns_t deadline;
	int dead = 1;

	cr_assert_eq(
		cs_coord_svc_start(&w->co, "127.0.0.1", 0, "tok", N, &MP, 5),
		0);
	/* An intruder first: refused with a reason, the group unaffected. */
	struct cs_node_addr bad = { .ip = 99 };
	cr_assert_eq(cs_member_svc_join(&w->m[N], "127.0.0.1", w->co.port,
					"not-the-token", -1, &bad, &MP, 9, 5000,
					now_ns()),
		     0);
	w->live[N] = true;
	for (unsigned k = 0; k < N; k++) {
		struct cs_node_addr a = { .ip = 0x7f000001,
					  .udp_port = 47000 + k };

		cr_assert_eq(cs_member_svc_join(&w->m[k], "127.0.0.1",
						w->co.port, "tok", (int)k, &a,
						&MP, k + 1, 5000, now_ns()),
			     0);
		w->live[k] = true;
	}
	deadline = now_ns() + 30 * CS_NS_PER_S;
	while (!(all_have(w, CS_MSVC_READY, -1) &&
		 (w->ev[N] & CS_MSVC_FAILED)) &&
	       now_ns() < deadline)
		pump(w, true);
	cr_assert(w->ev[N] & CS_MSVC_FAILED, "intruder refused");
	cr_assert(strstr(w->m[N].m.error, "bad job token"), "%s",
		  w->m[N].m.error);
	cr_assert(all_have(w, CS_MSVC_READY, -1), "group formed");
	cr_assert_eq(w->co.c.refused, 1);
	for (unsigned k = 0; k < N; k++) {
		cr_assert_eq(w->m[k].m.rank, k);
		cr_assert_eq(w->m[k].m.table[3].udp_port, 47003);
	}

	/* Member 1's sidecar dies (its socket closes, as under kill -9). */
	cs_member_svc_stop(&w->m[dead]);
	w->live[dead] = false;
	deadline = now_ns() + 30 * CS_NS_PER_S;
	while (!all_have(w, CS_MSVC_VIEW, dead) && now_ns() < deadline)
		pump(w, true);
	cr_assert(all_have(w, CS_MSVC_VIEW, dead), "survivors see the loss");
	for (unsigned k = 0; k < N; k++) {
		if ((int)k == dead)
			continue;
		cr_assert_eq(w->m[k].lost[0], (uint32_t)dead);
		cr_assert_eq(w->m[k].m.epoch, 2);
	}

	/* The coordinator goes away: members say so instead of waiting. */
	cs_coord_svc_stop(&w->co);
	deadline = now_ns() + 30 * CS_NS_PER_S;
	while (!all_have(w, CS_MSVC_COORD_LOST, dead) && now_ns() < deadline)
		pump(w, false);
	cr_assert(all_have(w, CS_MSVC_COORD_LOST, dead));
	for (unsigned k = 0; k <= N; k++)
		if (w->live[k])
			cs_member_svc_stop(&w->m[k]);
	free(w);
}
