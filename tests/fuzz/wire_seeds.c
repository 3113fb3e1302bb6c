// SPDX-License-Identifier: MIT
/*
 * Writes a small seed corpus of valid frames for fuzz_wire into a folder,
 * made with the codec itself so the seeds follow the current format.
 *
 *   wire_seeds DIR
 */
#include <stdio.h>
#include <string.h>

#include "dataplane/wire.h"
#include "internal/util.h"

static const struct cs_wire_addr seed_src = {
	.mac = { 0x02, 0, 0, 0, 0, 0x01 },
	.ip = 0x0a000001,
	.port = 4791,
};
static const struct cs_wire_addr seed_dst = {
	.mac = { 0x02, 0, 0, 0, 0, 0x02 },
	.ip = 0x0a000002,
	.port = 4791,
};

static int put(const char *dir, int i, const uint8_t *f, size_t n)
{
	char path[4096];
	FILE *fp;
	size_t w;

	snprintf(path, sizeof(path), "%s/seed-%02d", dir, i);
	fp = fopen(path, "wb");
	if (!fp) {
		perror(path);
		return -1;
	}
	w = fwrite(f, 1, n, fp);
	if (fclose(fp) || w != n) {
		perror(path);
		return -1;
	}
	return 0;
}

/* Insert 4 NOP option bytes after the IPv4 header and fix the header. */
static size_t add_opts(uint8_t *f, size_t n)
{
	size_t l4 = CS_WIRE_ETH_LEN + CS_WIRE_IP_LEN, i;
	uint8_t *ip = f + CS_WIRE_ETH_LEN;
	uint32_t sum = 0;
	unsigned int tot;

	memmove(f + l4 + 4, f + l4, n - l4);
	memset(f + l4, 0x01, 4);
	ip[0] = 0x46;
	tot = ((unsigned int)ip[2] << 8 | ip[3]) + 4;
	ip[2] = (uint8_t)(tot >> 8);
	ip[3] = (uint8_t)tot;
	ip[10] = ip[11] = 0;
	for (i = 0; i < 24; i += 2)
		sum += (uint32_t)ip[i] << 8 | ip[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	ip[10] = (uint8_t)(~sum >> 8);
	ip[11] = (uint8_t)~sum;
	return n + 4;
}

int main(int argc, char **argv)
{
	static const struct {
		uint8_t type;
		uint16_t flags;
		uint32_t len;
		int csum, opts;
	} s[] = {
		{ CS_PKT_DATA, 0, 0, 0, 0 },
		{ CS_PKT_DATA, CS_PKT_F_LAST, 64, 1, 0 },
		{ CS_PKT_DATA, CS_PKT_F_AUTH | CS_PKT_F_RETX, 32, 0, 0 },
		{ CS_PKT_ACK, CS_PKT_F_ACK | CS_PKT_F_ECE, 0, 1, 0 },
		{ CS_PKT_NACK, CS_PKT_F_ACK, 0, 0, 1 },
		{ CS_PKT_CREDIT, CS_PKT_F_AUTH, 0, 1, 1 },
		{ CS_PKT_HEARTBEAT, 0, 8, 0, 0 },
		{ CS_PKT_CTRL, CS_PKT_F_AUTH, 200, 1, 0 },
		{ CS_PKT_RAW, 0, 1400, 0, 0 },
		{ CS_PKT_DATA, CS_PKT_F_AUTH | CS_PKT_F_GMAC, 48, 1, 0 },
		{ CS_PKT_ACK, CS_PKT_F_AUTH | CS_PKT_F_GMAC | CS_PKT_F_ACK, 0,
		  0, 1 },
		{ CS_PKT_NACK, CS_PKT_F_ACK | CS_PKT_F_BUSY, 0, 1, 0 },
		{ CS_PKT_ACK, CS_PKT_F_ACK | CS_PKT_F_RESUME, 0, 0, 0 },
	};
	static uint8_t buf[2048], pay[1500];
	struct cs_pkt_hdr h;
	size_t i, n;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	for (i = 0; i < sizeof(pay); i++)
		pay[i] = (uint8_t)(i * 31 + 7);
	for (i = 0; i < CS_ARRAY_SIZE(s); i++) {
		memset(&h, 0, sizeof(h));
		h.version = CS_PROTO_VERSION;
		h.type = s[i].type;
		h.flags = s[i].flags;
		h.src = (uint16_t)i;
		h.channel = 1;
		h.group = 7;
		h.epoch = 3;
		h.op = 100 + (uint32_t)i;
		h.seq = 1000 + (uint32_t)i;
		h.ack = 990;
		h.sack = 0x5;
		h.offset = 4096 * i;
		h.len = s[i].len;
		h.ts = 123456789;
		memset(h.tag, 0xa5, sizeof(h.tag));
		memset(h.nonce, 0x3c, sizeof(h.nonce));
		rc = cs_wire_encode(buf, sizeof(buf) - 4, &seed_src, &seed_dst,
				    &h, pay);
		if (rc < 0) {
			fprintf(stderr, "seed %zu: %s\n", i,
				cs_wire_strerror(rc));
			return 1;
		}
		n = (size_t)rc;
		if (s[i].csum && cs_wire_udp_csum_fill(buf, n))
			return 1;
		if (s[i].opts)
			n = add_opts(buf, n);
		if (put(argv[1], (int)i, buf, n))
			return 1;
	}
	return 0;
}
