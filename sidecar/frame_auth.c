/* SPDX-License-Identifier: MIT */
/* Per-frame authentication on the lcores: frame_auth.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "internal/log.h"
#include "internal/util.h"
#include "frame_auth.h"

int cs_frame_auth_parse_mac(const char *v, enum cs_auth_mac *out)
{
	if (!strcmp(v, "auto"))
		*out = cs_auth_mac_auto();
	else if (!strcmp(v, "gmac"))
		*out = CS_AUTH_GMAC;
	else if (!strcmp(v, "siphash"))
		*out = CS_AUTH_SIPHASH;
	else
		return -EINVAL;
	return 0;
}

void cs_frame_auth_init(struct cs_frame_auth *a, const char *token,
			enum cs_auth_mac mac)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->token, sizeof(a->token), "%s", token);
	a->mac = mac;
	a->on = true;
}

void cs_frame_auth_fini(struct cs_frame_auth *a)
{
	for (unsigned q = 0; q < CS_PORT_MAX_QUEUES; q++) {
		struct cs_fa_lane *l = &a->lane[q];

		for (unsigned i = 0; i < 2; i++)
			cs_gmac_fini(&l->tx[i].g);
		if (l->rx)
			for (unsigned i = 0; i < 2 * CS_FA_RX_SETS; i++)
				cs_gmac_fini(&l->rx[i].g);
		free(l->rx);
		cs_gmac_fini(&l->spare);
	}
	explicit_bzero(a, sizeof(*a));
}

void cs_frame_auth_counts(const struct cs_frame_auth *a,
			  struct cs_fa_counts *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned q = 0; q < CS_PORT_MAX_QUEUES; q++) {
		const struct cs_fa_counts *n = &a->lane[q].n;

		out->rx_fail += n->rx_fail;
		out->rx_notag += n->rx_notag;
		out->rekey += n->rekey;
		out->skeys += n->skeys;
		out->tx_fail += n->tx_fail;
	}
}

/*
 * The key of @epoch for tag code @m. Derived again only when the view
 * moves to a new epoch or a frame carries another one than the last:
 * never on the steady path, and never with a syscall or an allocation.
 */
static const struct cs_fa_epoch *epoch_key(struct cs_frame_auth *a,
					   struct cs_fa_lane *l,
					   enum cs_auth_mac m,
					   uint32_t view_epoch, uint32_t epoch)
{
	unsigned i = epoch == view_epoch ? 0 : 1;
	struct cs_fa_epoch *k = m == CS_AUTH_GMAC ? &l->gep[i] : &l->sip[i];
	uint8_t key[CS_AUTH_KEY_LEN];

	if (likely(k->valid && k->epoch == epoch))
		return k;
	if (m == CS_AUTH_GMAC) {
		cs_auth_gmac_epoch_key(a->token, 0, epoch, k->g);
	} else {
		cs_auth_epoch_key(a->token, 0, epoch, key);
		cs_auth_ctx_init(&k->sip, key);
		explicit_bzero(key, sizeof(key));
	}
	k->epoch = epoch;
	k->valid = true;
	l->n.rekey++;
	return k;
}

/* Load @key into @g, allocating it the first time. */
static int gmac_load(struct cs_gmac *g, const uint8_t *key)
{
	return g->gcm ? cs_gmac_setkey(g, key) : cs_gmac_init(g, key);
}

/* The header as the tag covers it: CE is left out. */
static const struct cs_pkt_hdr *tag_hdr(const struct cs_pkt_hdr *h,
					struct cs_pkt_hdr *tmp)
{
	if (likely(!(h->flags & CS_PKT_F_CE)))
		return h;
	*tmp = *h;
	tmp->flags &= (uint16_t)~CS_PKT_F_CE;
	return tmp;
}

/*
 * The lane's sending instance for @h's epoch and rank. A new one draws a
 * fresh random sid, derives its key and counts from 0: the counter only
 * ever restarts together with a new sid, i.e. under a new key.
 */
static struct cs_fa_tx *tx_instance(struct cs_frame_auth *a,
				    struct cs_fa_lane *l, uint32_t view_epoch,
				    const struct cs_pkt_hdr *h)
{
	struct cs_fa_tx *t = &l->tx[h->epoch == view_epoch ? 0 : 1];
	uint8_t key[CS_AUTH_GMAC_KEY_LEN];
	int ret;

	if (likely(t->valid && t->epoch == h->epoch && t->src == h->src &&
		   !t->spent))
		return t;
	t->valid = false;
	randombytes_buf(t->sid, sizeof(t->sid));
	cs_auth_gmac_sender_key(
		epoch_key(a, l, CS_AUTH_GMAC, view_epoch, h->epoch)->g, h->src,
		t->sid, key);
	ret = gmac_load(&t->g, key);
	explicit_bzero(key, sizeof(key));
	if (ret)
		return NULL;
	t->epoch = h->epoch;
	t->src = h->src;
	t->ctr = 0;
	t->spent = false;
	t->valid = true;
	l->n.skeys++;
	return t;
}

void cs_frame_auth_tag_next(struct cs_frame_auth *a, unsigned q,
			    uint32_t view_epoch, const struct cs_pkt_hdr *h,
			    const void *payload, const void *next,
			    uint32_t next_len, uint8_t *out)
{
	struct cs_fa_lane *l = &a->lane[q];
	struct cs_pkt_hdr tmp;
	struct cs_fa_tx *t;
	uint32_t ctr;

	h = tag_hdr(h, &tmp);
	if (a->mac == CS_AUTH_SIPHASH) {
		cs_auth_ctx_tag(
			&epoch_key(a, l, CS_AUTH_SIPHASH, view_epoch, h->epoch)
				 ->sip,
			h, payload, out);
		return;
	}
	t = tx_instance(a, l, view_epoch, h);
	if (unlikely(!t))
		goto fail;
	/* the counter is used up before the tag is made: whatever
	 * happens next, no other frame gets it */
	ctr = t->ctr;
	if (ctr == UINT32_MAX)
		t->spent = true;
	else
		t->ctr++;
	memcpy(out, t->sid, CS_PROTO_SID_LEN);
	out[CS_PROTO_SID_LEN] = (uint8_t)(ctr >> 24);
	out[CS_PROTO_SID_LEN + 1] = (uint8_t)(ctr >> 16);
	out[CS_PROTO_SID_LEN + 2] = (uint8_t)(ctr >> 8);
	out[CS_PROTO_SID_LEN + 3] = (uint8_t)ctr;
	if (unlikely(cs_gmac_tag_next(&t->g, ctr, h, payload, next, next_len,
				      out + CS_PROTO_NONCE_LEN)))
		goto fail;
	return;
fail:
	memset(out, 0, cs_frame_auth_room(a));
	l->n.tx_fail++;
}

/*
 * A GMAC frame: the key of its sender instance (src, sid) from the lane's
 * cache, else derived. A new instance's key is tried on the spare context
 * and takes the cache slot only once the frame verified, so that forged
 * frames cost a derivation each but never evict a peer's key.
 */
static bool gmac_rx_ok(struct cs_frame_auth *a, struct cs_fa_lane *l,
		       uint32_t view_epoch, const struct cs_pkt_hdr *h,
		       const void *payload)
{
	uint32_t ctr = cs_auth_nonce_ctr(h->nonce);
	uint8_t tag[CS_PROTO_TAG_LEN], key[CS_AUTH_GMAC_KEY_LEN];
	struct cs_fa_rx *e;
	struct cs_gmac g;
	int ret;

	if (unlikely(!l->rx)) { /* once per lane */
		l->rx = calloc(2 * CS_FA_RX_SETS, sizeof(*l->rx));
		if (!l->rx)
			return false;
	}
	e = &l->rx[(h->src % CS_FA_RX_SETS) * 2 +
		   (h->epoch == view_epoch ? 0 : 1)];
	if (likely(e->valid && e->epoch == h->epoch && e->src == h->src &&
		   !memcmp(e->sid, h->nonce, CS_PROTO_SID_LEN)))
		return !cs_gmac_tag(&e->g, ctr, h, payload, tag) &&
		       cs_auth_equal(tag, h->tag, sizeof(tag));
	cs_auth_gmac_sender_key(
		epoch_key(a, l, CS_AUTH_GMAC, view_epoch, h->epoch)->g, h->src,
		h->nonce, key);
	ret = gmac_load(&l->spare, key);
	explicit_bzero(key, sizeof(key));
	if (ret)
		return false;
	l->n.skeys++;
	if (cs_gmac_tag(&l->spare, ctr, h, payload, tag) ||
	    !cs_auth_equal(tag, h->tag, sizeof(tag)))
		return false;
	g = e->g;
	e->g = l->spare;
	l->spare = g;
	e->epoch = h->epoch;
	e->src = h->src;
	memcpy(e->sid, h->nonce, CS_PROTO_SID_LEN);
	e->valid = true;
	return true;
}

bool cs_frame_auth_rx_ok(struct cs_frame_auth *a, unsigned q,
			 uint32_t view_epoch, const struct cs_pkt_hdr *h,
			 const void *payload)
{
	struct cs_fa_lane *l = &a->lane[q];
	struct cs_pkt_hdr tmp;
	bool ok;

	if (unlikely(!(h->flags & CS_PKT_F_AUTH))) {
		l->n.rx_notag++;
		l->n.rx_fail++;
		return false;
	}
	h = tag_hdr(h, &tmp);
	if (h->flags & CS_PKT_F_GMAC)
		ok = gmac_rx_ok(a, l, view_epoch, h, payload);
	else
		ok = !cs_auth_ctx_check(
			&epoch_key(a, l, CS_AUTH_SIPHASH, view_epoch, h->epoch)
				 ->sip,
			h, payload);
	if (unlikely(!ok))
		l->n.rx_fail++;
	return ok;
}
