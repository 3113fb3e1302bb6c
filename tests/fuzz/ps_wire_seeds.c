// SPDX-License-Identifier: MIT
/*
 * Writes valid PS messages for fuzz_ps_wire into a folder: a push, a
 * multi-part push, a pull, an acknowledgement, a pull reply and an error
 * reply, for the fuzz target's table, made with the encoder itself.
 *
 *   ps_wire_seeds DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ps/ps.h"
#include "collectives/ps/ps_wire.h"

static int put(const char *dir, int i, const uint8_t *f, size_t n)
{
	char path[4096];
	FILE *fp;
	size_t w;

	snprintf(path, sizeof(path), "%s/ps-seed-%02d", dir, i);
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

static int make(const char *dir, int i, struct cs_ps_msg m)
{
	size_t n = cs_ps_wire_len(m.type, m.nkeys, m.dim, m.dtype, m.status);
	uint8_t *buf = calloc(1, n ? n : 1);
	float row[4] = { 0.5f, -1.0f, 2.0f, 0.125f };
	int rc;

	if (!n || !buf)
		return -1;
	cs_ps_wire_put_hdr(buf, &m);
	for (uint32_t k = 0; k < m.nkeys; k++) {
		if (m.type == CS_PS_MSG_PUSH || m.type == CS_PS_MSG_PULL)
			cs_ps_wire_put_key(buf, k, 3 + 17 * k);
		if (m.type == CS_PS_MSG_PUSH ||
		    (m.type == CS_PS_MSG_PULL_REPLY && !m.status))
			cs_ps_wire_put_row(buf, &m, k, row);
	}
	rc = put(dir, i, buf, n);
	free(buf);
	return rc;
}

int main(int argc, char **argv)
{
	struct cs_ps_msg b = {
		.table = 1, .worker = 2, .dim = 4, .dtype = CS_F32, .nparts = 1
	};
	struct cs_ps_msg m;
	int rc = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: ps_wire_seeds DIR\n");
		return 2;
	}
	m = b, m.type = CS_PS_MSG_PUSH, m.nkeys = 3, m.id = 0;
	rc |= make(argv[1], 0, m);
	m = b, m.type = CS_PS_MSG_PUSH, m.nkeys = 1, m.id = 1, m.part = 1,
	m.nparts = 2, m.version = 0;
	rc |= make(argv[1], 1, m);
	m = b, m.type = CS_PS_MSG_PULL, m.nkeys = 5, m.id = 7;
	rc |= make(argv[1], 2, m);
	m = b, m.type = CS_PS_MSG_PUSH_ACK, m.worker = 1, m.id = 0;
	rc |= make(argv[1], 3, m);
	m = b, m.type = CS_PS_MSG_PULL_REPLY, m.worker = 1, m.nkeys = 2;
	rc |= make(argv[1], 4, m);
	m = b, m.type = CS_PS_MSG_PULL_REPLY, m.worker = 1, m.status = -34;
	rc |= make(argv[1], 5, m);
	m = b, m.type = CS_PS_MSG_PUSH, m.nkeys = 0, m.id = 2;
	rc |= make(argv[1], 6, m);
	return rc ? 1 : 0;
}
