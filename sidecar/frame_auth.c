/* SPDX-License-Identifier: MIT */
/* Per-frame authentication on the lcore: frame_auth.h. */
#include <stdio.h>
#include <string.h>

#include "internal/log.h"
#include "internal/util.h"
#include "frame_auth.h"

void cs_frame_auth_init(struct cs_frame_auth *a, const char *token)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->token, sizeof(a->token), "%s", token);
	a->on = true;
}

void cs_frame_auth_fini(struct cs_frame_auth *a)
{
	explicit_bzero(a, sizeof(*a));
}

/*
 * The packet key of @epoch. Derived again only when the view moves to a
 * new epoch or a frame carries another one than the last: never on the
 * steady path, and never with a syscall or an allocation.
 */
static const struct cs_auth_ctx *frame_key(struct cs_frame_auth *a,
					   uint32_t view_epoch, uint32_t epoch)
{
	unsigned i = epoch == view_epoch ? 0 : 1;
	uint8_t key[CS_AUTH_KEY_LEN];

	if (unlikely(!a->key[i].valid || a->key[i].epoch != epoch)) {
		cs_auth_epoch_key(a->token, 0, epoch, key);
		cs_auth_ctx_init(&a->key[i].ctx, key);
		explicit_bzero(key, sizeof(key));
		a->key[i].epoch = epoch;
		a->key[i].valid = true;
		a->rekey++;
	}
	return &a->key[i].ctx;
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

bool cs_frame_auth_rx_ok(struct cs_frame_auth *a, uint32_t view_epoch,
			 const struct cs_pkt_hdr *h, const void *payload)
{
	struct cs_pkt_hdr tmp;

	if (unlikely(!(h->flags & CS_PKT_F_AUTH))) {
		a->rx_notag++;
		a->rx_fail++;
		return false;
	}
	if (unlikely(cs_auth_ctx_check(frame_key(a, view_epoch, h->epoch),
				       tag_hdr(h, &tmp), payload))) {
		a->rx_fail++;
		return false;
	}
	return true;
}

void cs_frame_auth_tag(struct cs_frame_auth *a, uint32_t view_epoch,
		       const struct cs_pkt_hdr *h, const void *payload,
		       uint8_t tag[CS_PROTO_TAG_LEN])
{
	struct cs_pkt_hdr tmp;

	cs_auth_ctx_tag(frame_key(a, view_epoch, h->epoch), tag_hdr(h, &tmp),
			payload, tag);
}
