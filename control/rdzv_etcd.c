/* SPDX-License-Identifier: MIT */
/*
 * The etcd rendezvous back-end (node.rendezvous=etcd://host:port/prefix):
 * no coordinator process; the members meet in an etcd v3 store.
 *
 * Keys under the prefix P:
 *   P/token          a verifier of the job token, MAC(token,
 *                    "collstack-etcd-token"): the first member writes it,
 *                    every other one compares (the token itself is never
 *                    written, as it never crosses the wire with the TCP
 *                    coordinator); a member with another token is refused.
 *   P/members/RRRR   rank R's dataplane address, attached to the member's
 *                    lease (TTL = member.fail_timeout, kept alive every
 *                    third of it): a member that dies (or is cut off from
 *                    etcd) loses its key when the lease expires. Claimed
 *                    with a create-only transaction, so a rank has one
 *                    holder.
 *   P/view           epoch, world and the lost ranks (a bitmap). Written
 *                    once all boot.world members are in (epoch 1), then by
 *                    any member that finds a member key gone: epoch + 1,
 *                    that rank lost, in a transaction that succeeds only if
 *                    the view is still the one it read (its mod revision).
 *                    Several members noticing the same loss give one new
 *                    view; every member adopts the view it reads.
 * Records and views carry a MAC (cs_mac, keyed BLAKE2b under the token's
 * "csetcd01" subkey) bound to their key,
 * so only holders of the token can add a member or move the view; records
 * that fail it are ignored and counted.
 *
 * Every member watches the prefix (/v3/watch) and reads the store (a range
 * of P/view and of the member keys, keys only once the group formed) when
 * the watch reports a change, and every max(hb_interval, fail_timeout)
 * in any case (every hb_interval while it has no watch). A loss is seen
 * within the lease's TTL plus etcd's expiry scan (<= 0.5 s) plus a round
 * trip; etcd unreachable for member.fail_timeout is reported as the
 * store's loss (CS_MSVC_COORD_LOST).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CS_LOG_MODULE "etcd"
#include "internal/log.h"

#include "collstack/types.h"
#include "control/auth.h"
#include "control/etcd.h"
#include "control/rdzv.h"

enum { R_NEW = 0, R_WAIT, R_READY, R_FAILED };

struct etcd_rdzv {
	struct cs_etcd e;
	char prefix[224];
	char token[128];
	uint32_t world;
	struct cs_member_params mp;
	int64_t lease, ttl; /* ttl in seconds */
	uint32_t rank;
	struct cs_node_addr self;
	int state;
	uint32_t epoch;
	int64_t view_rev; /* mod revision of the view adopted */
	cs_ns_t next_poll, next_ka, last_ok, next_watch;
	struct cs_etcd_watch w; /* changes under the prefix, as they happen */
	bool store_lost, self_expired;
	uint64_t bad_records;
	uint8_t lost_mask[CS_BOOT_MAX_RANKS];
	struct cs_node_addr table[CS_BOOT_MAX_RANKS];
	uint32_t lost[CS_BOOT_MAX_RANKS];
	unsigned nlost;
	char error[1024];
	/* scratch of sync_store() and adopt_view() */
	uint8_t s_live[CS_BOOT_MAX_RANKS], s_lost[CS_BOOT_MAX_RANKS];
	uint8_t s_next[CS_BOOT_MAX_RANKS];
	struct cs_node_addr s_tab[CS_BOOT_MAX_RANKS];
};

static cs_ns_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * CS_NS_PER_S + (cs_ns_t)ts.tv_nsec;
}

static void sleep_ns(cs_ns_t ns)
{
	struct timespec ts = { (time_t)(ns / CS_NS_PER_S),
			       (long)(ns % CS_NS_PER_S) };

	nanosleep(&ts, NULL);
}

static void hexs(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* MAC(token, @label || @key || ' ' || @text) in hex (cs_mac, "csetcd01"). */
static void mac_hex(const struct etcd_rdzv *r, const char *label,
		    const char *key, const char *text, size_t tlen,
		    char out[2 * CS_MAC_LEN + 1])
{
	uint8_t mac[CS_MAC_LEN];
	struct cs_mac h;

	cs_mac_init(&h, r->token, "csetcd01");
	cs_mac_update(&h, label, strlen(label));
	cs_mac_update(&h, key, strlen(key));
	cs_mac_update(&h, " ", 1);
	cs_mac_update(&h, text, tlen);
	cs_mac_final(&h, mac);
	hexs(mac, sizeof(mac), out);
}

/* "TEXT auth=MAC": true when MAC is right; *tlen = length of TEXT. */
static bool mac_ok(const struct etcd_rdzv *r, const char *label,
		   const char *key, const char *val, size_t *tlen)
{
	const char *a = strstr(val, " auth=");
	char want[2 * CS_MAC_LEN + 1];

	if (!a || strlen(a + 6) != 2 * CS_MAC_LEN)
		return false;
	*tlen = (size_t)(a - val);
	mac_hex(r, label, key, val, *tlen, want);
	return cs_auth_equal(want, a + 6, 2 * CS_MAC_LEN);
}

static void key_of(const struct etcd_rdzv *r, char *k, size_t n,
		   const char *what)
{
	snprintf(k, n, "%s/%s", r->prefix, what);
}

/* ---- records ---- */

static int member_record(const struct etcd_rdzv *r, const char *key,
			 const struct cs_node_addr *a, char *out, size_t n)
{
	char mac[2 * CS_MAC_LEN + 1];
	int l;

	l = snprintf(out, n,
		     "v1 ip=%08x port=%u mac=%02x:%02x:%02x:%02x:%02x:%02x "
		     "queues=%u numa=%u qpn=%u",
		     a->ip, a->udp_port, a->mac[0], a->mac[1], a->mac[2],
		     a->mac[3], a->mac[4], a->mac[5], a->queues, a->numa,
		     a->qpn);
	if (l < 0 || (size_t)l + 7 + sizeof(mac) > n)
		return -ENOSPC;
	mac_hex(r, "collstack-etcd-member ", key, out, (size_t)l, mac);
	snprintf(out + l, n - (size_t)l, " auth=%s", mac);
	return 0;
}

static int parse_member(const struct etcd_rdzv *r, const struct cs_etcd_kv *kv,
			uint32_t *rank, struct cs_node_addr *a)
{
	char pre[256], tail[2];
	unsigned ip, port, m[6], q, numa, qpn, rk;
	size_t plen, tlen;
	int used = 0;

	snprintf(pre, sizeof(pre), "%s/members/", r->prefix);
	plen = strlen(pre);
	if (strncmp(kv->key, pre, plen) ||
	    sscanf(kv->key + plen, "%4u%1s", &rk, tail) != 1 ||
	    strlen(kv->key + plen) != 4 || rk >= r->world)
		return -EPROTO;
	if (!mac_ok(r, "collstack-etcd-member ", kv->key, kv->val, &tlen))
		return CS_ERR_AUTH;
	if (sscanf(kv->val,
		   "v1 ip=%8x port=%5u mac=%2x:%2x:%2x:%2x:%2x:%2x queues=%5u "
		   "numa=%3u qpn=%10u%n",
		   &ip, &port, &m[0], &m[1], &m[2], &m[3], &m[4], &m[5], &q,
		   &numa, &qpn, &used) != 11 ||
	    (size_t)used != tlen || port > 65535 || q > 65535 || numa > 255)
		return -EPROTO;
	memset(a, 0, sizeof(*a));
	a->ip = ip;
	a->udp_port = (uint16_t)port;
	for (unsigned i = 0; i < 6; i++)
		a->mac[i] = (uint8_t)m[i];
	a->queues = (uint16_t)q;
	a->numa = (uint8_t)numa;
	a->qpn = qpn;
	*rank = rk;
	return 0;
}

static int view_record(const struct etcd_rdzv *r, uint32_t epoch,
		       const uint8_t *lost, char *out, size_t n)
{
	char mac[2 * CS_MAC_LEN + 1], key[256];
	size_t l;

	key_of(r, key, sizeof(key), "view");
	l = (size_t)snprintf(out, n, "v1 epoch=%u world=%u lost=", epoch,
			     r->world);
	/* one hex digit per 4 ranks, rank 0 in the first digit's low bit */
	for (uint32_t i = 0; i < r->world; i += 4) {
		unsigned d = 0;

		for (unsigned b = 0; b < 4 && i + b < r->world; b++)
			d |= (unsigned)(lost[i + b] != 0) << b;
		if (l + 2 >= n)
			return -ENOSPC;
		out[l++] = "0123456789abcdef"[d];
	}
	out[l] = 0;
	if (l + 7 + sizeof(mac) > n)
		return -ENOSPC;
	mac_hex(r, "collstack-etcd-view ", key, out, l, mac);
	snprintf(out + l, n - l, " auth=%s", mac);
	return 0;
}

/* @world: out, the view's; never fewer than r->world (views only grow) */
static int parse_view(const struct etcd_rdzv *r, const struct cs_etcd_kv *kv,
		      uint32_t *epoch, uint32_t *world, uint8_t *lost)
{
	unsigned e, w;
	size_t tlen;
	int used = 0;

	if (!mac_ok(r, "collstack-etcd-view ", kv->key, kv->val, &tlen))
		return CS_ERR_AUTH;
	if (sscanf(kv->val, "v1 epoch=%10u world=%5u lost=%n", &e, &w, &used) !=
		    2 ||
	    !used || w < r->world || w > CS_BOOT_MAX_RANKS ||
	    tlen - (size_t)used != (w + 3) / 4 || !e)
		return -EPROTO;
	for (uint32_t i = 0; i < w; i++) {
		char c = kv->val[used + i / 4];
		unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
			     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
						    : 16;

		if (d > 15)
			return -EPROTO;
		lost[i] = (d >> (i % 4)) & 1;
	}
	*epoch = e;
	*world = w;
	return 0;
}

/* ---- back-end ---- */

static int etcd_create(void **impl, const char *where, uint32_t world,
		       const struct cs_member_params *mp, char *err,
		       size_t errlen)
{
	char host[128];
	uint16_t port;
	struct etcd_rdzv *r;
	uint64_t to;
	int ret;

	if (!world || world > CS_BOOT_MAX_RANKS) {
		snprintf(err, errlen,
			 "the etcd rendezvous needs boot.world (members "
			 "expected, 1..%u)",
			 CS_BOOT_MAX_RANKS);
		return -EINVAL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	ret = cs_etcd_parse_url(where, host, sizeof(host), &port, r->prefix,
				sizeof(r->prefix), err, errlen);
	if (ret)
		goto out_free;
	/* a request may take a third of the detection time, within limits */
	to = CS_MIN(CS_MAX(mp->fail_timeout / 3, 200 * CS_NS_PER_MS),
		    5 * CS_NS_PER_S);
	ret = cs_etcd_init(&r->e, host, port, to);
	if (ret) {
		snprintf(err, errlen, "%s", r->e.err);
		goto out_free;
	}
	r->world = world;
	r->mp = *mp;
	r->w.fd = -1;
	*impl = r;
	return 0;

out_free:
	free(r);
	return ret;
}

/* The token verifier: written by the first member, compared by others. */
static int check_token(struct etcd_rdzv *r)
{
	char key[256], want[2 * CS_MAC_LEN + 1];
	struct cs_etcd_range rg;
	bool done;
	int ret;

	key_of(r, key, sizeof(key), "token");
	mac_hex(r, "collstack-etcd-token", "", "", 0, want);
	ret = cs_etcd_put_if(&r->e, key, 0, want, strlen(want), 0, &done);
	if (ret || done)
		return ret;
	ret = cs_etcd_range(&r->e, key, false, false, &rg);
	if (ret)
		return ret;
	ret = rg.n == 1 && rg.kvs[0].vlen == strlen(want) &&
			      cs_auth_equal(rg.kvs[0].val, want, strlen(want))
		      ? 0
		      : CS_ERR_AUTH;
	cs_etcd_range_free(&rg);
	if (ret)
		snprintf(r->error, sizeof(r->error),
			 "wrong job token: %s holds another job token's "
			 "verifier",
			 key);
	return ret;
}

/* Claim a rank: a create-only put of our record under our lease. */
static int claim(struct etcd_rdzv *r, uint32_t rank, bool *done)
{
	char key[256], rec[CS_ETCD_MAX_VAL];
	int ret;

	snprintf(key, sizeof(key), "%s/members/%04u", r->prefix, rank);
	ret = member_record(r, key, &r->self, rec, sizeof(rec));
	if (ret)
		return ret;
	return cs_etcd_put_if(&r->e, key, 0, rec, strlen(rec), r->lease, done);
}

/* A lease whose TTL is member.fail_timeout: a member silent that long
 * loses its key. */
static int grant(struct etcd_rdzv *r)
{
	return cs_etcd_lease_grant(
		&r->e,
		(int64_t)CS_DIV_ROUND_UP(r->mp.fail_timeout, CS_NS_PER_S),
		&r->lease, &r->ttl);
}

static void drop_lease(struct etcd_rdzv *r)
{
	cs_etcd_lease_revoke(&r->e, r->lease);
	r->lease = 0;
}

/* A rank is ours: wait for the view (sync_store), keep the lease alive. */
static void wait_view(struct etcd_rdzv *r)
{
	r->state = R_WAIT;
	r->last_ok = r->next_poll = mono_ns();
	r->next_ka = r->last_ok + (cs_ns_t)r->ttl * CS_NS_PER_S / 3;
}

/*
 * The group in the store formed already (@view): join it as its next rank
 * (the view's world; node.rank must be that, or -1). The rank's key is
 * claimed first, then the view is moved on (epoch + 1, world + 1) on the
 * revision read; the members adopt it (read_joined) and their elastic
 * groups grow at their next operation. Returns as etcd_join().
 */
static int join_running(struct etcd_rdzv *r, const struct cs_etcd_kv *view,
			int32_t want_rank, cs_ns_t deadline)
{
	uint8_t *lost = r->s_lost;
	char key[256], rec[CS_ETCD_MAX_VAL];
	struct cs_etcd_range rg;
	uint32_t epoch, world;
	int64_t rev = view->mod_rev;
	bool done = false;
	int ret;

	r->world = 1; /* any view */
	ret = parse_view(r, view, &epoch, &world, lost);
	if (ret || world >= CS_BOOT_MAX_RANKS) {
		snprintf(r->error, sizeof(r->error),
			 "the view in %s is %s: cannot join", r->prefix,
			 ret == CS_ERR_AUTH ? "not ours (wrong MAC)"
					    : "malformed or full");
		return -EPERM;
	}
	if (want_rank >= 0 && (uint32_t)want_rank != world) {
		snprintf(r->error, sizeof(r->error),
			 "the group in %s formed with %u ranks: a node joining "
			 "it takes rank %u, not %d (node.rank)",
			 r->prefix, world, world, want_rank);
		return -EPERM;
	}
	ret = grant(r);
	if (ret)
		goto out_err;
	r->rank = world;
	ret = claim(r, world, &done);
	if (ret || !done) {
		if (!ret)
			snprintf(r->error, sizeof(r->error),
				 "rank %u in %s is being claimed by another "
				 "joining node",
				 world, r->prefix);
		drop_lease(r);
		return ret ? ret : -EAGAIN;
	}
	key_of(r, key, sizeof(key), "view");
	for (;;) {
		r->world = world + 1;
		lost[world] = 0;
		ret = view_record(r, epoch + 1, lost, rec, sizeof(rec));
		if (!ret)
			ret = cs_etcd_put_if(&r->e, key, rev, rec, strlen(rec),
					     0, &done);
		if (ret || done || mono_ns() >= deadline)
			break;
		/* the view moved meanwhile (a loss): on the new one */
		ret = cs_etcd_range(&r->e, key, false, false, &rg);
		if (ret)
			break;
		r->world = 1;
		ret = rg.n ? parse_view(r, &rg.kvs[0], &epoch, &world, lost)
			   : -EPROTO;
		rev = rg.n ? rg.kvs[0].mod_rev : 0;
		cs_etcd_range_free(&rg);
		if (ret || world != r->rank) {
			snprintf(r->error, sizeof(r->error),
				 "the view in %s changed while rank %u "
				 "joined",
				 r->prefix, r->rank);
			ret = -EAGAIN;
			break;
		}
	}
	if (ret || !done) {
		if (!ret)
			snprintf(r->error, sizeof(r->error),
				 "the view in %s kept changing", r->prefix);
		drop_lease(r);
		return ret ? ret : -EAGAIN;
	}
	wait_view(r);
	CS_INFO("etcd %s%s: joined a running group as rank %u (lease %llx): "
		"view epoch %u, %u members",
		r->e.where, r->prefix, r->rank, (unsigned long long)r->lease,
		epoch + 1, r->world);
	return 0;

out_err:
	snprintf(r->error, sizeof(r->error), "%s", r->e.err);
	return ret;
}

static int etcd_join(void *impl, const char *token, int32_t want_rank,
		     const struct cs_node_addr *self, int timeout_ms)
{
	struct etcd_rdzv *r = impl;
	cs_ns_t deadline = mono_ns() + (cs_ns_t)timeout_ms * CS_NS_PER_MS;
	struct cs_etcd_range rg;
	char key[256];
	bool done = false;
	int ret;

	if (strlen(token) >= sizeof(r->token) || !token[0]) {
		snprintf(r->error, sizeof(r->error), "no usable job token");
		return -EINVAL;
	}
	snprintf(r->token, sizeof(r->token), "%s", token);
	r->self = *self;
	/* etcd may come up after us: retry until the deadline */
	while ((ret = check_token(r)) && ret != CS_ERR_AUTH &&
	       mono_ns() < deadline)
		sleep_ns(200 * CS_NS_PER_MS);
	if (ret) {
		if (ret != CS_ERR_AUTH)
			snprintf(r->error, sizeof(r->error), "%s", r->e.err);
		return ret;
	}
	key_of(r, key, sizeof(key), "view");
	ret = cs_etcd_range(&r->e, key, false, false, &rg);
	if (ret)
		goto out_err;
	if (rg.n) { /* formed already: this node grows it */
		ret = join_running(r, &rg.kvs[0], want_rank, deadline);
		cs_etcd_range_free(&rg);
		return ret;
	}
	if (want_rank >= (int32_t)r->world) {
		snprintf(r->error, sizeof(r->error),
			 "rank %d asked for, but boot.world is %u", want_rank,
			 r->world);
		return -EPERM;
	}
	ret = grant(r);
	if (ret)
		goto out_err;
	for (;;) {
		if (want_rank >= 0) {
			ret = claim(r, (uint32_t)want_rank, &done);
			r->rank = (uint32_t)want_rank;
		} else {
			for (uint32_t i = 0; i < r->world && !ret && !done;
			     i++) {
				ret = claim(r, i, &done);
				r->rank = i;
			}
		}
		if (ret || done || mono_ns() >= deadline)
			break;
		/* a former holder's lease may still run out */
		sleep_ns(200 * CS_NS_PER_MS);
	}
	if (ret)
		goto out_err;
	if (!done) {
		if (want_rank >= 0)
			snprintf(r->error, sizeof(r->error),
				 "rank %d is held by another live member "
				 "in %s",
				 want_rank, r->prefix);
		else
			snprintf(r->error, sizeof(r->error),
				 "all %u ranks in %s are taken", r->world,
				 r->prefix);
		drop_lease(r);
		return -EPERM;
	}
	wait_view(r);
	CS_INFO("etcd %s%s: rank %u claimed (lease %llx, TTL %lld s), "
		"waiting for %u members",
		r->e.where, r->prefix, r->rank, (unsigned long long)r->lease,
		(long long)r->ttl, r->world);
	return 0;

out_err:
	snprintf(r->error, sizeof(r->error), "%s", r->e.err);
	return ret;
}

/*
 * The view grew to @world (nodes joined: elastic grow): read the records
 * of the new ranks. They claimed their keys before they wrote the view,
 * so every one is there. Returns 0 or an error (the view is adopted at
 * the next read then).
 */
static int read_joined(struct etcd_rdzv *r, uint32_t world)
{
	uint32_t old = r->world, found = 0;
	struct cs_etcd_range mem;
	char key[256];
	int ret;

	snprintf(key, sizeof(key), "%s/members/", r->prefix);
	ret = cs_etcd_range(&r->e, key, true, false, &mem);
	if (ret)
		return ret;
	r->world = world; /* parse_member takes ranks below it */
	for (unsigned i = 0; i < mem.n; i++) {
		struct cs_node_addr a;
		uint32_t rk;

		if (parse_member(r, &mem.kvs[i], &rk, &a) || rk < old)
			continue;
		a.state = CS_MEMBER_ALIVE;
		r->table[rk] = a;
		found++;
	}
	cs_etcd_range_free(&mem);
	if (found < world - old) {
		r->world = old;
		return -EAGAIN;
	}
	for (uint32_t rk = old; rk < world; rk++)
		CS_INFO("etcd: rank %u joined the group (%u members)", rk,
			world);
	return 0;
}

/* Adopt the view in @kv; the events it brings. */
static unsigned adopt_view(struct etcd_rdzv *r, const struct cs_etcd_kv *kv)
{
	uint8_t *lost = r->s_lost;
	uint32_t epoch, world;
	int ret;

	if (kv->mod_rev == r->view_rev)
		return 0;
	ret = parse_view(r, kv, &epoch, &world, lost);
	if (ret) {
		if (!r->bad_records++)
			CS_ERR("etcd: ignoring %s: %s", kv->key,
			       ret == CS_ERR_AUTH ? "wrong MAC" : "malformed");
		return 0;
	}
	if (r->state == R_READY && epoch <= r->epoch)
		return 0;
	if (world > r->world && r->state == R_READY && read_joined(r, world))
		return 0;
	r->world = world;
	r->nlost = 0;
	for (uint32_t i = 0; i < r->world; i++) {
		if (lost[i] && !r->lost_mask[i] && r->state == R_READY)
			r->lost[r->nlost++] = i;
		r->lost_mask[i] = lost[i];
		if (lost[i])
			r->table[i].state = CS_MEMBER_LOST;
	}
	r->view_rev = kv->mod_rev;
	r->epoch = epoch;
	return r->state == R_READY ? CS_MSVC_VIEW : 0;
}

/* One look at the store: the view and the member keys. */
static unsigned sync_store(struct etcd_rdzv *r, int *err)
{
	struct cs_etcd_range mem, view;
	uint8_t *live = r->s_live, *next = r->s_next;
	struct cs_node_addr *tab = r->s_tab;
	char key[256], rec[CS_ETCD_MAX_VAL];
	unsigned ev = 0, nlive = 0, nmiss = 0;
	bool done;

	snprintf(key, sizeof(key), "%s/members/", r->prefix);
	*err = cs_etcd_range(&r->e, key, true, r->state == R_READY, &mem);
	if (*err)
		return 0;
	key_of(r, key, sizeof(key), "view");
	*err = cs_etcd_range(&r->e, key, false, false, &view);
	if (*err) {
		cs_etcd_range_free(&mem);
		return 0;
	}
	memset(live, 0, r->world);
	for (unsigned i = 0; i < mem.n; i++) {
		struct cs_node_addr a;
		uint32_t rk;
		int ret;

		if (r->state == R_READY) { /* keys only: the rank */
			const struct cs_etcd_kv *kv = &mem.kvs[i];

			/* a member writes its record once, under its
			 * lease: one rewritten or without a lease is not
			 * the member's any more (someone with access to
			 * etcd, not the token) and counts as gone */
			if (!kv->lease || kv->mod_rev != kv->create_rev)
				continue;
			char pre[256], tail[2];
			unsigned x;

			snprintf(pre, sizeof(pre), "%s/members/", r->prefix);
			if (!strncmp(mem.kvs[i].key, pre, strlen(pre)) &&
			    sscanf(mem.kvs[i].key + strlen(pre), "%4u%1s", &x,
				   tail) == 1 &&
			    x < r->world)
				live[x] = 1;
			continue;
		}
		ret = parse_member(r, &mem.kvs[i], &rk, &a);
		if (ret) {
			if (!r->bad_records++)
				CS_ERR("etcd: ignoring %s: %s", mem.kvs[i].key,
				       ret == CS_ERR_AUTH ? "wrong MAC"
							  : "malformed");
			continue;
		}
		a.state = CS_MEMBER_ALIVE;
		tab[rk] = a;
		nlive += !live[rk];
		live[rk] = 1;
	}
	if (r->state == R_WAIT) {
		if (!view.n && nlive == r->world) {
			/* everyone is in: the first view, if nobody wrote it */
			memset(r->lost_mask, 0, r->world);
			if (!view_record(r, 1, r->lost_mask, rec, sizeof(rec)))
				*err = cs_etcd_put_if(&r->e, key, 0, rec,
						      strlen(rec), 0, &done);
			r->next_poll = 0; /* read it back at once */
		} else if (view.n) {
			memcpy(r->table, tab, r->world * sizeof(tab[0]));
			adopt_view(r, &view.kvs[0]);
			if (r->view_rev) {
				bool ok = true;

				for (uint32_t i = 0; i < r->world; i++)
					if (!r->lost_mask[i] && !live[i])
						ok = false;
				if (ok) {
					r->state = R_READY;
					ev |= CS_MSVC_READY;
					CS_INFO("etcd %s%s: rank %u of %u, "
						"epoch %u",
						r->e.where, r->prefix, r->rank,
						r->world, r->epoch);
				} else {
					r->view_rev = 0; /* not all in yet */
				}
			}
		}
	} else if (view.n) {
		ev |= adopt_view(r, &view.kvs[0]);
		/* a member key gone: propose the next view */
		memcpy(next, r->lost_mask, r->world);
		for (uint32_t i = 0; i < r->world; i++)
			if (!r->lost_mask[i] && !live[i]) {
				next[i] = 1;
				nmiss++;
			}
		if (nmiss && !(ev & CS_MSVC_VIEW) &&
		    !view_record(r, r->epoch + 1, next, rec, sizeof(rec))) {
			/* on the view as read: one that failed its MAC (a
			 * forgery) is overwritten, not waited on forever */
			*err = cs_etcd_put_if(&r->e, key, view.kvs[0].mod_rev,
					      rec, strlen(rec), 0, &done);
			if (!*err && done)
				CS_INFO("etcd: %u member key(s) expired: "
					"proposed epoch %u",
					nmiss, r->epoch + 1);
			r->next_poll = 0; /* adopt whichever view won */
		}
	}
	cs_etcd_range_free(&mem);
	cs_etcd_range_free(&view);
	return ev;
}

/*
 * How often the store is read in full: every member.hb_interval without a
 * watch; with one, the watch says when to read and a full read every
 * max(hb_interval, fail_timeout) only covers what a broken stream missed.
 */
static cs_ns_t poll_period(const struct etcd_rdzv *r)
{
	return r->w.fd >= 0 ? CS_MAX(r->mp.hb_interval, r->mp.fail_timeout)
			    : r->mp.hb_interval;
}

/* Keep a watch on the prefix; anything it reports means: read now. */
static void watch(struct etcd_rdzv *r, cs_ns_t now)
{
	char key[256];
	int m;

	if (r->w.fd < 0 && now >= r->next_watch) {
		snprintf(key, sizeof(key), "%s/", r->prefix);
		if (cs_etcd_watch_start(&r->e, &r->w, key, true)) {
			r->next_watch = now + r->mp.hb_interval;
			return;
		}
		r->next_poll = now; /* what changed before it was in place */
	}
	if (r->w.fd < 0)
		return;
	m = cs_etcd_watch_read(&r->w);
	if (m > 0) {
		r->next_poll = now;
	} else if (m < 0) {
		CS_DEBUG("etcd: watch ended (%s): polling until it is back",
			 strerror(-m));
		cs_etcd_watch_stop(&r->w);
		r->next_watch = now + r->mp.hb_interval;
		r->next_poll = now;
	}
}

static unsigned etcd_poll(void *impl, cs_ns_t now, int timeout_ms)
{
	struct etcd_rdzv *r = impl;
	cs_ns_t until = now + (cs_ns_t)timeout_ms * CS_NS_PER_MS;
	unsigned ev = 0;
	bool answered = false; /* a request of this call got an answer */
	int err = 0;

	(void)now; /* the store's pace is real time */
	now = mono_ns();
	if (r->state == R_WAIT || r->state == R_READY)
		watch(r, now);
	if (r->state == R_WAIT || r->state == R_READY) {
		if (now >= r->next_ka) {
			int64_t ttl;

			err = cs_etcd_lease_keepalive(&r->e, r->lease, &ttl);
			r->next_ka =
				now + (err ? 100 * CS_NS_PER_MS
					   : (cs_ns_t)r->ttl * CS_NS_PER_S / 3);
			if (err == -ENOENT && !r->self_expired) {
				r->self_expired = true;
				CS_ERR("etcd: our lease expired (silent for "
				       "longer than %lld s): the others drop "
				       "rank %u from the view; it must rejoin",
				       (long long)r->ttl, r->rank);
			}
			if (!err || err == -ENOENT) {
				r->last_ok = now;
				answered = true;
			}
		}
		if (now >= r->next_poll) {
			ev |= sync_store(r, &err);
			if (r->next_poll)
				r->next_poll = now + poll_period(r);
			else
				r->next_poll = now + r->mp.hb_interval / 8;
			if (!err) {
				r->last_ok = now;
				answered = true;
			}
		}
		if (err && err != -ENOENT)
			CS_DEBUG("etcd: %s", r->e.err);
		if (!r->store_lost && now - r->last_ok >= r->mp.fail_timeout) {
			r->store_lost = true;
			ev |= CS_MSVC_COORD_LOST;
			CS_ERR("etcd %s unreachable for %llu ms (%s): losses "
			       "can no longer be detected or announced",
			       r->e.where,
			       (unsigned long long)((now - r->last_ok) /
						    CS_NS_PER_MS),
			       r->e.err);
		} else if (r->store_lost && answered) {
			r->store_lost = false;
			CS_INFO("etcd %s answers again", r->e.where);
		}
	}
	now = mono_ns();
	if (!ev && timeout_ms > 0) {
		cs_ns_t next = CS_MIN(r->next_ka, r->next_poll);

		next = CS_MIN(next, until);
		if (next > now && r->w.fd >= 0) {
			struct pollfd p = { .fd = r->w.fd, .events = POLLIN };

			poll(&p, 1,
			     (int)CS_DIV_ROUND_UP(next - now, CS_NS_PER_MS));
		} else if (next > now) {
			sleep_ns(next - now);
		}
	}
	return ev;
}

static void etcd_view(void *impl, struct cs_rdzv_view *v)
{
	struct etcd_rdzv *r = impl;

	v->rank = r->rank;
	v->world = r->world;
	v->epoch = r->epoch;
	v->table = r->table;
	v->lost = r->lost;
	v->nlost = r->nlost;
	v->error = r->error;
	v->what = "etcd";
}

static void etcd_leave(void *impl)
{
	struct etcd_rdzv *r = impl;

	/* the others see this member go at once, not after the TTL */
	if (r->lease && cs_etcd_lease_revoke(&r->e, r->lease)) {
		if (r->self_expired) /* etcd dropped it already */
			CS_INFO("etcd: lease %llx had expired already",
				(unsigned long long)r->lease);
		else
			CS_WARN("etcd: could not revoke lease %llx: %s",
				(unsigned long long)r->lease, r->e.err);
	}
	cs_etcd_watch_stop(&r->w);
	cs_etcd_fini(&r->e);
	sodium_memzero(r->token, sizeof(r->token));
	free(r);
}

const struct cs_rendezvous_ops cs_rendezvous_etcd = {
	.name = "etcd",
	.create = etcd_create,
	.join = etcd_join,
	.poll = etcd_poll,
	.view = etcd_view,
	.leave = etcd_leave,
};
