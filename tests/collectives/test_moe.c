/* SPDX-License-Identifier: MIT */
/* MoE dispatch/combine (collectives/moe.h): refusals of bad routing
 * before anything is sent, and the dispatch rows a rank builds. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "collectives/moe.h"
#include "collstack/types.h"

static const uint32_t erank[4] = { 0, 0, 1, 1 };

static struct cs_moe_cfg cfg(void)
{
	return (struct cs_moe_cfg){
		.nranks = 2, .rank = 0, .ranks_per_node = 1,
		.tokens = 2, .max_tokens = 2, .hidden = 3, .topk = 2,
		.experts = 4, .expert_rank = erank, .mtu_payload = 512,
		.group = 1, .epoch = 1, .op_dispatch = 1, .op_combine = 2,
	};
}

static int try(const int32_t *idx)
{
	struct cs_moe_cfg c = cfg();
	float x[6] = { 0 }, w[4] = { 1, 1, 1, 1 };
	struct cs_moe *m = NULL;
	int ret = cs_moe_create(&c, x, idx, w, &m);

	cs_moe_free(m);
	return ret;
}

Test(moe, bad_routing_refused)
{
	const int32_t ok[4] = { 0, 2, -1, 3 };
	const int32_t big[4] = { 0, 4, 1, 2 }; /* expert >= E */
	const int32_t neg[4] = { 0, -2, 1, 2 }; /* negative, not -1 */
	const int32_t dup[4] = { 1, 1, 0, 2 }; /* same expert twice */
	struct cs_moe_cfg c = cfg();
	uint32_t bad_map[4] = { 0, 0, 2, 1 }; /* rank 2 of 2 */
	float x[6] = { 0 }, w[4] = { 0 };
	struct cs_moe *m = NULL;

	cr_assert_eq(try(ok), 0);
	cr_assert_eq(try(big), CS_ERR_BAD_DESC);
	cr_assert_eq(try(neg), CS_ERR_BAD_DESC);
	cr_assert_eq(try(dup), CS_ERR_BAD_DESC);
	c.expert_rank = bad_map;
	cr_assert_eq(cs_moe_create(&c, x, ok, w, &m), CS_ERR_BAD_DESC);
	c = cfg();
	c.topk = CS_MOE_MAX_TOPK + 1;
	cr_assert_eq(cs_moe_create(&c, x, ok, w, &m), -EINVAL);
	c = cfg();
	c.tokens = 3; /* more than max_tokens */
	cr_assert_eq(cs_moe_create(&c, x, ok, w, &m), -EINVAL);
}

Test(moe, a_token_travels_once_per_rank)
{
	/* token 0 -> experts 0 (rank 0) and 2 (rank 1); token 1 -> 3 and
	 * 2 (both rank 1): rank 1 gets two rows, not three */
	const int32_t idx[4] = { 0, 2, 3, 2 };
	struct cs_moe_cfg c = cfg();
	float x[6] = { 1, 2, 3, 4, 5, 6 }, w[4] = { 1, 1, 1, 1 };
	struct cs_moe *m = NULL;
	struct cs_a2a_params p;

	cr_assert_eq(cs_moe_create(&c, x, idx, w, &m), 0);
	cs_moe_dispatch_params(m, &p);
	cr_assert(p.flags & CS_A2A_F_RECV_DYNAMIC);
	cr_assert_eq(p.esz, 4 * (2 + 2 + 3));
	cr_assert_eq(p.sendcounts[0], 1); /* token 0 for expert 0 */
	cr_assert_eq(p.sendcounts[1], 2, "3 slots, 2 rows");
	cr_assert_null(p.recvcounts);
	cs_moe_free(m);
}
