/* SPDX-License-Identifier: MIT */
/* Bootstrap: message codec on hostile bytes, admission, loss announcement. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <collstack/types.h>

#include "control/boot.h"

/* A driver double: records what the coordinator asked for. */
struct rec {
	unsigned sent[8][8]; /* [conn][type] */
	uint32_t last_node[8];
	uint32_t last_epoch[8];
	uint8_t last_proof[8][32];
	int refuse_code[8];
	bool closed[8];
	uint32_t lost_rank[8];
	unsigned nlost;
	uint8_t buf[CS_BOOT_MAX_MSG];
};

static void rec_send(void *ctx, uint32_t conn, const struct cs_boot_msg *m)
{
	struct rec *r = ctx;
	struct cs_addr_tab {
		struct cs_node_addr a[16];
	} tab;
	uint32_t lost[16];
	struct cs_boot_msg d = { .table = tab.a, .lost = lost, .cap = 16 };
	int n = cs_boot_encode(m, r->buf, sizeof(r->buf));

	/* Everything the coordinator sends must survive its own decoder. */
	cr_assert_gt(n, 0);
	cr_assert_eq(cs_boot_decode(r->buf, (size_t)n, &d), n);
	cr_assert_eq(d.type, m->type);
	r->sent[conn][m->type]++;
	if (m->type == CS_BOOT_WELCOME) {
		r->last_node[conn] = d.node;
		memcpy(r->last_proof[conn], d.mac, 32);
	}
	if (m->type == CS_BOOT_TABLE || m->type == CS_BOOT_VIEW)
		r->last_epoch[conn] = d.epoch;
	if (m->type == CS_BOOT_REFUSE)
		r->refuse_code[conn] = d.code;
}

static void rec_close(void *ctx, uint32_t conn)
{
	((struct rec *)ctx)->closed[conn] = true;
}

static void rec_lost(void *ctx, uint32_t rank, uint32_t epoch)
{
	struct rec *r = ctx;

	(void)epoch;
	r->lost_rank[r->nlost++] = rank;
}

static const struct cs_member_params MP = {
	.hb_interval = 100 * CS_NS_PER_MS,
	.fail_timeout = CS_NS_PER_S,
};

static struct cs_boot_msg join_msg(const char *token, const uint8_t *chal,
				   int want, uint8_t tagbyte)
{
	struct cs_boot_msg j = { .type = CS_BOOT_JOIN, .want_rank = want };

	memset(j.nonce, tagbyte, sizeof(j.nonce));
	j.addr.ip = 0x0a4d0000u + tagbyte;
	j.addr.udp_port = 47000;
	j.addr.mac[5] = tagbyte;
	cs_boot_join_mac(token, chal, j.nonce, &j.addr, j.mac);
	return j;
}

/* The challenge the coordinator sent on @conn (re-derived from its state). */
static const uint8_t *chal(struct cs_coord *c, uint32_t conn)
{
	return c->conns[conn].nonce;
}

Test(boot, admission_table_and_wrong_token)
{
	struct rec *r = calloc(1, sizeof(*r));
	struct cs_coord_out o = { rec_send, rec_close, rec_lost, r };
	struct cs_coord c;
	struct cs_boot_msg j;
	uint8_t proof[32];

	cr_assert_eq(cs_coord_init(&c, "s3cret", 4, 8, &MP, 1), 0);
	for (uint32_t conn = 0; conn < 5; conn++) {
		cr_assert_eq(cs_coord_on_open(&c, conn, 0, &o), 0);
		cr_assert_eq(r->sent[conn][CS_BOOT_CHALLENGE], 1);
	}
	/* conn 2 holds the wrong token: refused, group unaffected. */
	j = join_msg("wrong", chal(&c, 2), -1, 2);
	cr_assert_eq(cs_coord_on_msg(&c, 2, &j, 0, &o), CS_ERR_AUTH);
	cr_assert(r->closed[2]);
	cr_assert_eq(r->refuse_code[2], CS_ERR_AUTH);
	cr_assert_eq(c.joined, 0);
	/* A MAC computed over another challenge (replay) is refused too. */
	j = join_msg("s3cret", chal(&c, 1), -1, 9);
	cr_assert_eq(cs_coord_on_msg(&c, 0, &j, 0, &o), CS_ERR_AUTH);
	cr_assert_eq(cs_coord_on_open(&c, 0, 0, &o), 0);

	uint32_t conns[4] = { 0, 1, 3, 4 };
	for (unsigned i = 0; i < 4; i++) {
		uint32_t k = conns[i];

		j = join_msg("s3cret", chal(&c, k), i == 0 ? 3 : -1,
			     (uint8_t)(10 + k));
		cr_assert_eq(cs_coord_on_msg(&c, k, &j, 0, &o), 0);
		cr_assert_eq(r->sent[k][CS_BOOT_WELCOME], 1);
		cs_boot_welcome_proof("s3cret", j.nonce, r->last_node[k],
				      proof);
		cr_assert(!memcmp(proof, r->last_proof[k], 32),
			  "coordinator proves it holds the token");
	}
	cr_assert_eq(r->last_node[0], 3, "requested rank honoured");
	cr_assert(c.complete);
	for (unsigned i = 0; i < 4; i++) {
		cr_assert_eq(r->sent[conns[i]][CS_BOOT_TABLE], 1);
		cr_assert_eq(r->last_epoch[conns[i]], 1);
	}
	cr_assert_eq(c.table[3].udp_port, 47000);
	cr_assert_eq(c.refused, 2);

	/* A fifth valid member is refused: the group is full. */
	cr_assert_eq(cs_coord_on_open(&c, 5, 0, &o), 0);
	j = join_msg("s3cret", chal(&c, 5), -1, 50);
	cr_assert_eq(cs_coord_on_msg(&c, 5, &j, 0, &o), -EBUSY);
	cs_coord_fini(&c);
	free(r);
}

static void form(struct cs_coord *c, struct cs_coord_out *o, uint32_t n)
{
	cr_assert_eq(cs_coord_init(c, "tok", n, n, &MP, 7), 0);
	for (uint32_t k = 0; k < n; k++) {
		struct cs_boot_msg j;

		cs_coord_on_open(c, k, 0, o);
		j = join_msg("tok", chal(c, k), (int)k, (uint8_t)k);
		cr_assert_eq(cs_coord_on_msg(c, k, &j, 0, o), 0);
	}
	cr_assert(c->complete);
}

Test(boot, closed_connection_is_a_loss_at_once)
{
	struct rec *r = calloc(1, sizeof(*r));
	struct cs_coord_out o = { rec_send, rec_close, rec_lost, r };
	struct cs_coord c;

	form(&c, &o, 4);
	cs_coord_on_close(&c, 2, 5 * CS_NS_PER_MS, &o);
	cr_assert_eq(r->nlost, 1);
	cr_assert_eq(r->lost_rank[0], 2);
	for (uint32_t k = 0; k < 4; k++) {
		if (k == 2)
			continue;
		cr_assert_eq(r->sent[k][CS_BOOT_VIEW], 1);
		cr_assert_eq(r->last_epoch[k], 2);
	}
	cr_assert_eq(r->sent[2][CS_BOOT_VIEW], 0);
	cs_coord_fini(&c);
	free(r);
}

Test(boot, silent_member_lost_after_timeout)
{
	struct rec *r = calloc(1, sizeof(*r));
	struct cs_coord_out o = { rec_send, rec_close, rec_lost, r };
	struct cs_coord c;
	cs_ns_t t;

	form(&c, &o, 4);
	/* Rank 1 stops (SIGSTOP): connection open, heartbeats stop. */
	for (t = 0; t <= 3 * CS_NS_PER_S; t += MP.hb_interval) {
		for (uint32_t k = 0; k < 4; k++) {
			struct cs_boot_msg hb = { .type = CS_BOOT_HEARTBEAT,
						  .node = k,
						  .epoch = 1 };

			if (k != 1 && !r->closed[k])
				cr_assert_eq(cs_coord_on_msg(&c, k, &hb, t, &o),
					     0);
		}
		cs_coord_on_timer(&c, t, &o);
		if (r->nlost)
			break;
	}
	cr_assert_eq(r->nlost, 1);
	cr_assert_eq(r->lost_rank[0], 1);
	cr_assert_leq(t, MP.fail_timeout + MP.hb_interval);
	cr_assert(r->closed[1]);
	cs_coord_fini(&c);
	free(r);
}

Test(boot, decoder_survives_hostile_bytes)
{
	struct cs_node_addr tab[4];
	uint32_t lost[4];
	struct cs_boot_msg d = { .table = tab, .lost = lost, .cap = 4 };
	struct cs_boot_msg m = {
		.type = CS_BOOT_TABLE, .epoch = 3, .n = 4, .table = tab
	};
	uint8_t buf[512], junk[512];
	uint64_t rng = 42;
	int n;

	memset(tab, 0x5a, sizeof(tab));
	n = cs_boot_encode(&m, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	/* Every prefix is "need more", never a parse of garbage. */
	for (int i = 0; i < n; i++)
		cr_assert_eq(cs_boot_decode(buf, (size_t)i, &d), 0);
	cr_assert_eq(cs_boot_decode(buf, (size_t)n, &d), n);
	/* Too many entries for the caller's array. */
	d.cap = 2;
	cr_assert_eq(cs_boot_decode(buf, (size_t)n, &d), -ENOSPC);
	d.cap = 4;
	/* A length that disagrees with the entry count. */
	buf[3]--;
	cr_assert_eq(cs_boot_decode(buf, (size_t)n, &d), -EPROTO);
	buf[3]++;
	/* Oversized length prefix. */
	buf[0] = 0x7f;
	cr_assert_eq(cs_boot_decode(buf, (size_t)n, &d), -EMSGSIZE);
	/* Random garbage: never crashes, never reads past the buffer. */
	for (unsigned it = 0; it < 20000; it++) {
		size_t len = cs_rand_next(&rng) % sizeof(junk);

		for (size_t i = 0; i < len; i++)
			junk[i] = (uint8_t)cs_rand_next(&rng);
		if (len >= 4) {
			junk[0] = 0, junk[1] = 0;
			junk[2] = (uint8_t)(len >> 8), junk[3] = (uint8_t)len;
			junk[4] = (uint8_t)(1 + cs_rand_next(&rng) % 8);
		}
		n = cs_boot_decode(junk, len, &d);
		cr_assert(n <= (int)len);
	}
	/* An unknown type is a protocol error. */
	memcpy(buf, (uint8_t[]){ 0, 0, 0, 5, 99 }, 5);
	cr_assert_eq(cs_boot_decode(buf, 5, &d), -EPROTO);
}

/* An in-memory network: every message is encoded, queued and decoded. */
struct net {
	struct cs_coord c;
	struct cs_boot_member m[6];
	int rc[6];
	unsigned views[6];
	uint32_t lost[6][4];
	bool closed[6];
	uint8_t buf[CS_BOOT_MAX_MSG];
};

static void deliver_to_member(struct net *n, uint32_t k,
			      const struct cs_boot_msg *msg);

static void net_send(void *ctx, uint32_t conn, const struct cs_boot_msg *m)
{
	struct net *n = ctx;

	if (!n->closed[conn])
		deliver_to_member(n, conn, m);
}

static void net_close(void *ctx, uint32_t conn)
{
	((struct net *)ctx)->closed[conn] = true;
}

static const struct cs_coord_out net_out = { net_send, net_close, NULL, NULL };

static void deliver_to_member(struct net *n, uint32_t k,
			      const struct cs_boot_msg *msg)
{
	struct cs_node_addr tab[8];
	uint32_t lost[8];
	struct cs_boot_msg d = { .table = tab, .lost = lost, .cap = 8 };
	struct cs_boot_msg reply;
	struct cs_coord_out o = net_out;
	unsigned nl;
	int len = cs_boot_encode(msg, n->buf, sizeof(n->buf));

	cr_assert_eq(cs_boot_decode(n->buf, (size_t)len, &d), len);
	o.ctx = n;
	n->rc[k] = cs_boot_member_on_msg(&n->m[k], &d, 0, &reply, n->lost[k], 4,
					 &nl);
	if (n->rc[k] > 0 && (n->rc[k] & CS_BOOT_M_VIEW))
		n->views[k]++;
	if (n->rc[k] > 0 && (n->rc[k] & CS_BOOT_M_REPLY)) {
		struct cs_boot_msg j = { 0 };
		uint8_t b2[256];

		len = cs_boot_encode(&reply, b2, sizeof(b2));
		cr_assert_eq(cs_boot_decode(b2, (size_t)len, &j), len);
		cs_coord_on_msg(&n->c, k, &j, 0, &o);
	}
}

Test(boot, members_and_coordinator_end_to_end)
{
	struct net *n = calloc(1, sizeof(*n));
	struct cs_coord_out o = net_out;

	o.ctx = n;
	cr_assert_eq(cs_coord_init(&n->c, "job", 4, 6, &MP, 3), 0);
	for (uint32_t k = 0; k < 5; k++) {
		struct cs_node_addr self = { .ip = 0x0a4d0001 + k,
					     .udp_port = 47000 };

		cr_assert_eq(cs_boot_member_init(&n->m[k],
						 k == 4 ? "intruder" : "job",
						 -1, &self, &MP, 100 + k),
			     0);
	}
	/* The intruder connects first: refused, and the group still forms. */
	cs_coord_on_open(&n->c, 4, 0, &o);
	cr_assert_eq(n->rc[4], -ECONNREFUSED);
	cr_assert_eq(n->m[4].state, CS_BOOT_M_FAILED);
	cr_assert(strstr(n->m[4].error, "bad job token"));
	for (uint32_t k = 0; k < 4; k++)
		cs_coord_on_open(&n->c, k, 0, &o);
	for (uint32_t k = 0; k < 4; k++) {
		cr_assert_eq(n->m[k].state, CS_BOOT_M_READY);
		cr_assert_eq(n->m[k].world, 4);
		cr_assert_eq(n->m[k].epoch, 1);
		for (uint32_t r = 0; r < 4; r++)
			cr_assert_eq(n->m[k].table[r].ip, n->c.table[r].ip);
	}
	/* Rank of member 2's sidecar dies: the others see a new view. */
	uint32_t dead = n->m[2].rank;
	n->closed[2] = true;
	cs_coord_on_close(&n->c, 2, 0, &o);
	for (uint32_t k = 0; k < 4; k++) {
		if (k == 2)
			continue;
		cr_assert_eq(n->views[k], 1);
		cr_assert_eq(n->m[k].epoch, 2);
		cr_assert_eq(n->lost[k][0], dead);
		cr_assert_eq(n->m[k].table[dead].state, CS_MEMBER_LOST);
	}
	cs_coord_fini(&n->c);
	free(n);
}

Test(boot, member_refuses_impostor_coordinator)
{
	struct cs_boot_member m;
	struct cs_node_addr self = { .ip = 1 };
	struct cs_boot_msg ch = { .type = CS_BOOT_CHALLENGE }, reply,
			   w = { .type = CS_BOOT_WELCOME,
				 .node = 0,
				 .world = 2 };
	unsigned nl;

	cs_boot_member_init(&m, "job", -1, &self, &MP, 1);
	cr_assert_eq(cs_boot_member_on_msg(&m, &ch, 0, &reply, NULL, 0, &nl),
		     CS_BOOT_M_REPLY);
	/* The impostor cannot compute the welcome proof. */
	memset(w.mac, 0x11, sizeof(w.mac));
	cr_assert_eq(cs_boot_member_on_msg(&m, &w, 0, &reply, NULL, 0, &nl),
		     CS_ERR_AUTH);
	cr_assert_eq(m.state, CS_BOOT_M_FAILED);
}

/*
 * Elastic growth: a member that joins after the group formed waits as
 * CS_MEMBER_JOINING (a WELCOME, no table, not watched by the failure
 * detector) until cs_coord_admit_joining(); then every member, the new
 * one too, gets the table of the grown world in a new epoch. Beyond the
 * spare ranks a join is refused, and so is a join that claims another
 * rank than the next one.
 */
Test(boot, growth_at_the_boundary)
{
	struct net *n = calloc(1, sizeof(*n));
	struct cs_coord_out o = net_out;
	struct cs_boot_msg hb;

	o.ctx = n;
	cr_assert_eq(cs_coord_init(&n->c, "job", 3, 6, &MP, 3), 0);
	cr_assert_eq(cs_coord_allow_growth(&n->c, 1), 0);
	for (uint32_t k = 0; k < 6; k++) {
		struct cs_node_addr self = { .ip = 0x0a4d0001 + k };

		cr_assert_eq(cs_boot_member_init(&n->m[k], "job",
						 k == 4 ? 0 : -1, &self, &MP,
						 100 + k),
			     0);
	}
	for (uint32_t k = 0; k < 3; k++)
		cs_coord_on_open(&n->c, k, 0, &o);
	cr_assert(n->c.complete);
	cr_assert_eq(cs_coord_next_deadline(&n->c), MP.fail_timeout);
	/* late joiner with a taken rank: refused */
	cs_coord_on_open(&n->c, 4, 0, &o);
	cr_assert_eq(n->rc[4], -ECONNREFUSED);
	/* late joiner: welcomed, waits for the boundary */
	cs_coord_on_open(&n->c, 3, 0, &o);
	cr_assert_eq(n->m[3].state, CS_BOOT_M_WAIT_TABLE);
	cr_assert_eq(n->m[3].rank, 3);
	cr_assert_eq(n->c.joining, 1);
	cr_assert_eq(cs_boot_member_poll(&n->m[3], 0, &hb), 0);
	/* no spare rank left: refused */
	cs_coord_on_open(&n->c, 5, 0, &o);
	cr_assert_eq(n->rc[5], -ECONNREFUSED);
	/* the joiner is not watched: silence does not make it lost */
	cs_coord_on_timer(&n->c, MP.fail_timeout / 2, &o);
	cr_assert_eq(n->c.fd.state[3], CS_MEMBER_JOINING);
	cr_assert_eq(cs_coord_admit_joining(&n->c, MP.fail_timeout / 2, &o), 1);
	cr_assert_eq(cs_coord_admit_joining(&n->c, MP.fail_timeout / 2, &o), 0);
	for (uint32_t k = 0; k < 4; k++) {
		cr_assert_eq(n->m[k].state, CS_BOOT_M_READY);
		cr_assert_eq(n->m[k].world, 4, "member %u", k);
		cr_assert_eq(n->m[k].epoch, 2);
		cr_assert_eq(n->m[k].table[3].state, CS_MEMBER_ALIVE);
	}
	/* members' timers: a heartbeat at once, the next one later */
	cr_assert_eq(cs_boot_member_poll(&n->m[3], MP.fail_timeout / 2, &hb),
		     CS_BOOT_M_REPLY);
	cr_assert_eq(hb.type, CS_BOOT_HEARTBEAT);
	cr_assert_eq(hb.node, 3);
	cr_assert_eq(hb.epoch, 2);
	cr_assert_eq(cs_boot_member_deadline(&n->m[3]),
		     MP.fail_timeout / 2 + MP.hb_interval);
	cs_coord_fini(&n->c);
	free(n);
}

/* Growth is set up before anyone joins, within the table's bound. */
Test(boot, growth_refused_when_late_or_too_big)
{
	struct rec *r = calloc(1, sizeof(*r));
	struct cs_coord_out o = { rec_send, rec_close, rec_lost, r };
	struct cs_coord c;

	cr_assert_eq(cs_coord_init(&c, "tok", 2, 8, &MP, 7), 0);
	cr_assert_eq(cs_coord_allow_growth(&c, 7), -EINVAL);
	cr_assert_eq(cs_coord_next_deadline(&c), UINT64_MAX);
	cs_coord_fini(&c);
	form(&c, &o, 2);
	cr_assert_eq(cs_coord_allow_growth(&c, 1), -EBUSY);
	cs_coord_fini(&c);
	free(r);
}

/* Clock stamps: both forms of HEARTBEAT and VIEW, and nothing else. */
Test(boot, heartbeat_stamps_codec)
{
	uint32_t lost[4] = { 3, 1 }, dl[4];
	struct cs_boot_msg hb = { .type = CS_BOOT_HEARTBEAT,
				  .node = 2,
				  .epoch = 7,
				  .stamped = true,
				  .ts_tx = 0x0123456789abcdefull };
	struct cs_boot_msg v = { .type = CS_BOOT_VIEW,
				 .epoch = 9,
				 .n = 2,
				 .lost = lost,
				 .stamped = true,
				 .ts_echo = 11,
				 .ts_rx = 22,
				 .ts_tx = 33 };
	struct cs_boot_msg d = { .lost = dl, .cap = 4 };
	uint8_t buf[128];
	int n;

	n = cs_boot_encode(&hb, buf, sizeof(buf));
	cr_assert_eq(n, 4 + 1 + 16);
	for (int i = 0; i < n; i++)
		cr_assert_eq(cs_boot_decode(buf, (size_t)i, &d), 0);
	cr_assert_eq(cs_boot_decode(buf, (size_t)n, &d), n);
	cr_assert(d.stamped);
	cr_assert_eq(d.ts_tx, hb.ts_tx);
	cr_assert_eq(d.node, 2);
	/* the old form still parses, unstamped */
	hb.stamped = false;
	n = cs_boot_encode(&hb, buf, sizeof(buf));
	cr_assert_eq(n, 4 + 1 + 8);
	cr_assert_eq(cs_boot_decode(buf, (size_t)n, &d), n);
	cr_assert_not(d.stamped);
	/* any other body length is malformed: 4, 12, 20 bytes */
	for (unsigned extra = 4; extra <= 12; extra += 8) {
		memset(buf + n, 0, extra);
		buf[3] = (uint8_t)(n + extra);
		cr_assert_eq(cs_boot_decode(buf, (size_t)n + extra, &d),
			     -EPROTO, "heartbeat with %u extra bytes", extra);
	}
	buf[3] = (uint8_t)(n - 4);
	cr_assert_eq(cs_boot_decode(buf, (size_t)n - 4, &d), -EPROTO);

	n = cs_boot_encode(&v, buf, sizeof(buf));
	cr_assert_eq(n, 4 + 1 + 8 + 8 + 24);
	cr_assert_eq(cs_boot_decode(buf, (size_t)n, &d), n);
	cr_assert(d.stamped);
	cr_assert_eq(d.n, 2);
	cr_assert_eq(d.lost[1], 1);
	cr_assert_eq(d.ts_echo, 11);
	cr_assert_eq(d.ts_rx, 22);
	cr_assert_eq(d.ts_tx, 33);
	/* a VIEW with 8 or 16 trailing bytes (not the 24 of the stamps) */
	for (int cut = 8; cut <= 16; cut += 8) {
		buf[3] = (uint8_t)(n - cut);
		cr_assert_eq(cs_boot_decode(buf, (size_t)(n - cut), &d),
			     -EPROTO, "view %d bytes short", cut);
	}
	v.stamped = false;
	n = cs_boot_encode(&v, buf, sizeof(buf));
	cr_assert_eq(cs_boot_decode(buf, (size_t)n, &d), n);
	cr_assert_not(d.stamped);
}

/* A group of one member, formed. */
static void one_member_group(struct net *n)
{
	struct cs_coord_out o = net_out;

	o.ctx = n;
	cr_assert_eq(cs_coord_init(&n->c, "job", 1, 2, &MP, 3), 0);
	cr_assert_eq(cs_boot_member_init(&n->m[0], "job", -1,
					 &(struct cs_node_addr){ .ip = 1 }, &MP,
					 5),
		     0);
	cs_coord_on_open(&n->c, 0, 0, &o);
}

/* A scripted clock: each read returns the next value the test queued. */
static cs_ns_t script[8];
static unsigned script_n, script_i;

static cs_ns_t script_clock(void)
{
	cr_assert_lt(script_i, script_n, "unexpected clock read");
	return script[script_i++];
}

/* One heartbeat of member @k through the in-memory network: forward
 * delay @fwd, the coordinator's turnaround @turn, the way back @back (true
 * time), the coordinator's clock ahead of the member's by @off. */
static void stamped_beat(struct net *n, uint32_t k, cs_ns_t now, cs_ns_t t,
			 int64_t off, cs_ns_t fwd, cs_ns_t turn, cs_ns_t back)
{
	struct cs_boot_msg hb, d = { 0 };
	struct cs_coord_out o = net_out;
	uint8_t b2[64];
	int len;

	o.ctx = n;
	script_n = 4, script_i = 0;
	script[0] = t; /* t1, member */
	script[1] = t + fwd + (cs_ns_t)off; /* t2, coordinator */
	script[2] = script[1] + turn; /* t3 */
	script[3] = t + fwd + turn + back; /* t4, member */
	cr_assert_eq(cs_boot_member_poll(&n->m[k], now, &hb), CS_BOOT_M_REPLY);
	cr_assert(hb.stamped);
	len = cs_boot_encode(&hb, b2, sizeof(b2));
	cr_assert_eq(cs_boot_decode(b2, (size_t)len, &d), len);
	cr_assert_eq(cs_coord_on_msg(&n->c, k, &d, now, &o), 0);
	cr_assert_eq(script_i, 4, "the reply was not stamped");
}

Test(boot, heartbeat_clock_recovers_offset)
{
	struct net *n = calloc(1, sizeof(*n));
	const int64_t off = -3123456789; /* coordinator minus member */
	const cs_ns_t us = 1000;
	/* forward, turnaround, back: asymmetric, the third the least */
	const cs_ns_t d[4][3] = { { 300 * us, 50 * us, 900 * us },
				  { 2000 * us, 10 * us, 100 * us },
				  { 80 * us, 5 * us, 40 * us },
				  { 700 * us, 30 * us, 700 * us } };
	struct cs_hb_clock_est e;
	cs_ns_t now = 0, t = 5000 * CS_NS_PER_S;

	one_member_group(n);
	cr_assert_eq(n->m[0].state, CS_BOOT_M_READY);
	cs_boot_set_stamp_clock(script_clock);
	script_n = 1, script_i = 0, script[0] = t;
	cr_assert_eq(cs_boot_member_clock(&n->m[0], &e), -EAGAIN);
	for (unsigned i = 0; i < 4; i++) {
		stamped_beat(n, 0, now, t, off, d[i][0], d[i][1], d[i][2]);
		now += MP.hb_interval;
		t += MP.hb_interval;
	}
	cr_assert_eq(n->m[0].clk.samples, 4);
	/* read at t: the best sample (the third) is 200 ms old */
	script_n = 1, script_i = 0, script[0] = t;
	cr_assert_eq(cs_boot_member_clock(&n->m[0], &e), 0);
	cr_assert_eq(e.delay, 120 * us);
	cr_assert_eq(e.samples, 4);
	cr_assert_leq(llabs(e.offset - off), (long long)e.bound);
	cr_assert_eq(e.age, 200 * CS_NS_PER_MS - 125 * us);
	cr_assert_eq(e.bound,
		     60 * us + 1 + e.age / 1000000 * CS_HB_CLOCK_DRIFT_PPM);
	/* (80 - 40) / 2, within the halving's rounding */
	cr_assert_leq(llabs(e.offset - (off + 20 * (int64_t)us)), 1);

	/* a VIEW whose echo is not our last stamp is no sample */
	struct cs_boot_msg forged = { .type = CS_BOOT_VIEW,
				      .epoch = 1,
				      .stamped = true,
				      .ts_echo = 12345,
				      .ts_rx = 1,
				      .ts_tx = 2 };
	struct cs_boot_msg reply;
	unsigned nl = 0;
	script_n = 4, script_i = 0;
	script[0] = t, script[1] = t + us, script[2] = t + 2 * us;
	script[3] = t + 3 * us;
	cs_boot_member_poll(&n->m[0], now, &reply); /* stamps t1 = t */
	cs_boot_member_on_msg(&n->m[0], &forged, now, &reply, n->lost[0], 4,
			      &nl);
	cr_assert_eq(n->m[0].clk.samples, 4);
	/* nor are stamps the coordinator cannot have taken (t3 < t2) */
	forged.ts_echo = t;
	forged.ts_rx = t + 50 * us, forged.ts_tx = t + 10 * us;
	cs_boot_member_on_msg(&n->m[0], &forged, now, &reply, n->lost[0], 4,
			      &nl);
	cr_assert_eq(n->m[0].clk.samples, 4);
	cr_assert_eq(n->m[0].clk.rejected, 1);

	/* a stepped clock (trace_offset) starts the estimate again */
	cs_boot_stamp_clock_stepped();
	now += MP.hb_interval, t += MP.hb_interval;
	stamped_beat(n, 0, now, t, off + 7 * CS_NS_PER_S, 100 * us, 0,
		     100 * us);
	cr_assert_eq(n->m[0].clk.samples, 1);
	script_n = 1, script_i = 0, script[0] = t;
	cr_assert_eq(cs_boot_member_clock(&n->m[0], &e), 0);
	cr_assert_leq(llabs(e.offset - (off + 7 * (int64_t)CS_NS_PER_S)), 1);
	cs_boot_set_stamp_clock(NULL);
	cs_coord_fini(&n->c);
	free(n);
}

/* Without a stamp clock the old, unstamped forms go out. */
Test(boot, no_stamp_clock_old_heartbeat)
{
	struct net *n = calloc(1, sizeof(*n));
	struct cs_boot_msg hb;
	struct cs_hb_clock_est e;

	one_member_group(n);
	cr_assert_eq(cs_boot_member_poll(&n->m[0], 0, &hb), CS_BOOT_M_REPLY);
	cr_assert_not(hb.stamped);
	cr_assert_eq(cs_boot_encode(&hb, n->buf, sizeof(n->buf)), 13);
	cr_assert_eq(cs_boot_member_clock(&n->m[0], &e), -EAGAIN);
	cs_coord_fini(&n->c);
	free(n);
}

/* DUMP: codec, relayed by the coordinator to every member, only from a
 * member speaking for itself, only to a coordinator that stamps. */
Test(boot, dump_relayed_to_every_member)
{
	struct net *n = calloc(1, sizeof(*n));
	struct cs_coord_out o = net_out;
	struct cs_boot_msg m, d = { 0 }, hb;
	uint8_t buf[64];
	int len;

	/* codec: 12-byte body exactly */
	m = (struct cs_boot_msg){ .type = CS_BOOT_DUMP,
				  .node = 3,
				  .dump_id = 0xfeedfacecafebeefull };
	len = cs_boot_encode(&m, buf, sizeof(buf));
	cr_assert_eq(len, 4 + 1 + 12);
	for (int i = 0; i < len; i++)
		cr_assert_eq(cs_boot_decode(buf, (size_t)i, &d), 0);
	cr_assert_eq(cs_boot_decode(buf, (size_t)len, &d), len);
	cr_assert_eq(d.node, 3);
	cr_assert_eq(d.dump_id, m.dump_id);
	buf[3] = (uint8_t)(len - 4);
	cr_assert_eq(cs_boot_decode(buf, (size_t)len - 4, &d), -EPROTO);
	buf[3] = (uint8_t)(len + 4);
	memset(buf + len, 0, 4);
	cr_assert_eq(cs_boot_decode(buf, (size_t)len + 4, &d), -EPROTO);

	o.ctx = n;
	cr_assert_eq(cs_coord_init(&n->c, "job", 3, 4, &MP, 3), 0);
	for (uint32_t k = 0; k < 3; k++) {
		cr_assert_eq(cs_boot_member_init(
				     &n->m[k], "job", (int32_t)k,
				     &(struct cs_node_addr){ .ip = 1 + k }, &MP,
				     5 + k),
			     0);
		cs_coord_on_open(&n->c, k, 0, &o);
	}
	/* no stamped VIEW seen yet: the coordinator may be an old one */
	cr_assert_eq(cs_boot_member_dump(&n->m[1], 77, &m), -ENOTSUP);
	cs_boot_set_stamp_clock(script_clock);
	for (uint32_t k = 0; k < 3; k++) {
		script_n = 4, script_i = 0;
		script[0] = 10, script[1] = 20, script[2] = 30, script[3] = 40;
		cr_assert_eq(cs_boot_member_poll(&n->m[k], 0, &hb),
			     CS_BOOT_M_REPLY);
		cr_assert_eq(cs_coord_on_msg(&n->c, k, &hb, 0, &o), 0);
		cr_assert(n->m[k].coord_new);
	}
	cs_boot_set_stamp_clock(NULL);
	cr_assert_eq(cs_boot_member_dump(&n->m[1], 77, &m), 0);
	cr_assert_eq(m.node, n->m[1].rank);
	cr_assert_eq(cs_coord_on_msg(&n->c, 1, &m, 0, &o), 0);
	for (uint32_t k = 0; k < 3; k++) {
		cr_assert_gt(n->rc[k], 0);
		cr_assert(n->rc[k] & CS_BOOT_M_DUMP, "member %u", k);
		cr_assert_eq(n->m[k].dump_id, 77);
		cr_assert_eq(n->m[k].dump_origin, n->m[1].rank);
	}
	/* a DUMP naming no member of the group is ignored by a member */
	d = (struct cs_boot_msg){ .type = CS_BOOT_DUMP,
				  .node = 9,
				  .dump_id = 5 };
	cr_assert_eq(cs_boot_member_on_msg(&n->m[0], &d, 0, &hb, NULL, 0,
					   &(unsigned){ 0 }),
		     0);
	cr_assert_eq(n->m[0].dump_id, 77);
	/* a member speaking for another: refused, its connection closed */
	m.node = n->m[2].rank;
	cr_assert_eq(cs_coord_on_msg(&n->c, 0, &m, 0, &o), -EPROTO);
	cr_assert(n->closed[0]);
	cs_coord_fini(&n->c);
	free(n);
}
