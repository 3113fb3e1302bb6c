// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for the wire decoder. Besides "no crash, no overread"
 * (ASan/UBSan), it checks properties and traps when one fails:
 *  - every result is 0 or a known CS_WIRE_E_* code;
 *  - skipping checksum checks never turns an accepted frame into a reject;
 *  - an accepted frame's payload lies inside the input, and the cheap
 *    cs_wire_is_ours() filter agrees;
 *  - re-encoding the decoded header and payload decodes to the same fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define fuzz_assert(c)                                                         \
	do {                                                                   \
		if (!(c))                                                      \
			__builtin_trap();                                      \
	} while (0)

static void check_code(int rc)
{
	fuzz_assert(rc == 0 || (rc <= -(CS_WIRE_E_BASE + 1) &&
				rc >= -(CS_WIRE_E_BASE + CS_WIRE_E_COUNT)));
	fuzz_assert(strcmp(cs_wire_strerror(rc), "unknown wire error") != 0);
}

static int hdr_same(const struct cs_pkt_hdr *a, const struct cs_pkt_hdr *b)
{
	return a->version == b->version && a->type == b->type &&
	       a->flags == b->flags && a->src == b->src &&
	       a->channel == b->channel && a->group == b->group &&
	       a->epoch == b->epoch && a->op == b->op && a->step == b->step &&
	       a->seq == b->seq && a->ack == b->ack && a->sack == b->sack &&
	       a->offset == b->offset && a->len == b->len &&
	       a->credit == b->credit && a->ts == b->ts &&
	       a->ts_echo == b->ts_echo &&
	       memcmp(a->tag, b->tag, CS_PROTO_TAG_LEN) == 0 &&
	       memcmp(a->nonce, b->nonce, CS_PROTO_NONCE_LEN) == 0;
}

static void check_accepted(const uint8_t *data, size_t size,
			   const struct cs_wire_pkt *pkt)
{
	struct cs_wire_pkt again;
	uint8_t *buf;
	size_t n;
	int rc;

	fuzz_assert(pkt->frame_len <= size);
	fuzz_assert(pkt->payload >= data + pkt->hdr_off);
	fuzz_assert(pkt->payload + pkt->hdr.len == data + pkt->frame_len);
	fuzz_assert(pkt->hdr.offset + pkt->hdr.len >= pkt->hdr.offset);
	fuzz_assert(cs_wire_is_ours(data, size, pkt->dst.port));
	fuzz_assert(cs_wire_is_ours(data, size, 0));

	n = cs_wire_frame_len(&pkt->hdr);
	buf = malloc(n);
	fuzz_assert(buf);
	rc = cs_wire_encode(buf, n, &pkt->src, &pkt->dst, &pkt->hdr,
			    pkt->payload);
	fuzz_assert(rc == (int)n);
	rc = cs_wire_decode(buf, n, &again);
	fuzz_assert(rc == 0);
	fuzz_assert(hdr_same(&again.hdr, &pkt->hdr));
	fuzz_assert(memcmp(again.payload, pkt->payload, pkt->hdr.len) == 0);
	fuzz_assert(again.src.ip == pkt->src.ip &&
		    again.dst.ip == pkt->dst.ip &&
		    again.src.port == pkt->src.port &&
		    again.dst.port == pkt->dst.port &&
		    memcmp(again.src.mac, pkt->src.mac, 6) == 0 &&
		    memcmp(again.dst.mac, pkt->dst.mac, 6) == 0);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cs_wire_stats st;
	struct cs_wire_pkt pkt;
	uint16_t other;
	int full, lax, rc;

	memset(&st, 0, sizeof(st));

	/* As the NIC-offload path sees it: reaches the collstack header
	 * without the fuzzer having to forge checksums. */
	lax = cs_wire_decode_ex(data, size, 0,
				CS_WIRE_RX_NO_IP_CSUM | CS_WIRE_RX_NO_UDP_CSUM,
				&pkt);
	check_code(lax);
	cs_wire_count(&st, lax);
	if (lax == 0) {
		check_accepted(data, size, &pkt);
		rc = cs_wire_decode_ex(
			data, size, pkt.dst.port,
			CS_WIRE_RX_NO_IP_CSUM | CS_WIRE_RX_NO_UDP_CSUM, &pkt);
		fuzz_assert(rc == 0);
		other = (uint16_t)(pkt.dst.port + 1);
		if (other) {
			rc = cs_wire_decode_ex(data, size, other,
					       CS_WIRE_RX_NO_IP_CSUM |
						       CS_WIRE_RX_NO_UDP_CSUM,
					       &pkt);
			fuzz_assert(rc == CS_WIRE_E_UDP_PORT);
			fuzz_assert(!cs_wire_is_ours(data, size, other));
		}
	}

	/* Every check on. */
	full = cs_wire_decode(data, size, &pkt);
	check_code(full);
	cs_wire_count(&st, full);
	if (full == 0) {
		fuzz_assert(lax == 0);
		check_accepted(data, size, &pkt);
	}
	fuzz_assert(st.ok + cs_wire_stats_dropped(&st) == 2);

	(void)cs_wire_is_ours(data, size, 0);
	return 0;
}
