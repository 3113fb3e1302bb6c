// SPDX-License-Identifier: MIT
/* Where a GPU sits relative to a NIC: PCIe distance and NUMA from sysfs. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

#define MAX_DEPTH 32

struct pci_path {
	char buf[PATH_MAX];
	char *comp[MAX_DEPTH]; /* components below .../devices/ */
	unsigned n;
	int numa;
};

static int read_int(const char *dir, const char *file, int dflt)
{
	char path[PATH_MAX + 32], b[32];
	FILE *f;
	int v = dflt;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "r");
	if (!f)
		return dflt;
	if (fgets(b, sizeof(b), f))
		v = atoi(b);
	fclose(f);
	return v;
}

/* resolve <sysfs>/bus/pci/devices/<bdf> and split what lies below devices/ */
static int pci_resolve(const char *sysfs, const char *bdf, struct pci_path *p)
{
	char link[PATH_MAX], *s, *save = NULL;

	if (!bdf || !*bdf || strchr(bdf, '/') || strlen(bdf) > 32)
		return -EINVAL;
	snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", sysfs, bdf);
	if (!realpath(link, p->buf))
		return -ENOENT;
	p->numa = read_int(p->buf, "numa_node", -1);
	s = strstr(p->buf, "/devices/");
	if (!s)
		return -EINVAL;
	p->n = 0;
	for (s = strtok_r(s + 9, "/", &save); s; s = strtok_r(NULL, "/", &save)) {
		if (p->n == MAX_DEPTH)
			return -EINVAL;
		p->comp[p->n++] = s;
	}
	/* pciDDDD:BB (the root complex), then at least the device itself */
	if (p->n < 2 || strncmp(p->comp[0], "pci", 3))
		return -EINVAL;
	return 0;
}

int cs_gpu_placement(const char *sysfs, const char *gpu_bdf,
		     const char *nic_bdf, struct cs_gpu_placement *out)
{
	struct pci_path *g, *n;
	unsigned c = 0, below_g, below_n;
	int err;

	if (!sysfs || !out)
		return -EINVAL;
	g = malloc(2 * sizeof(*g));
	if (!g)
		return -ENOMEM;
	n = g + 1;
	err = pci_resolve(sysfs, gpu_bdf, g);
	if (err)
		goto out;
	out->gpu_numa = g->numa;
	out->nic_numa = -1;
	out->hops = 0;
	if (!nic_bdf || !*nic_bdf) {
		out->path = CS_GPU_PATH_NONE;
		goto out;
	}
	err = pci_resolve(sysfs, nic_bdf, n);
	if (err)
		goto out;
	out->nic_numa = n->numa;
	while (c < g->n && c < n->n && !strcmp(g->comp[c], n->comp[c]))
		c++;
	if (c == 0) {
		/* different root complexes */
		out->path = g->numa >= 0 && g->numa == n->numa ?
				    CS_GPU_PATH_NODE :
				    CS_GPU_PATH_SYS;
		out->hops = g->n + n->n; /* up to each root, then across */
		goto out;
	}
	if (c == g->n || c == n->n) {
		err = -EINVAL; /* one is the other's ancestor: not two devices */
		goto out;
	}
	/* bridges below the common ancestor on each side, plus that one */
	below_g = g->n - c - 1;
	below_n = n->n - c - 1;
	out->hops = below_g + below_n + 1;
	if (c == 1)
		out->path = CS_GPU_PATH_PHB; /* meet at the root complex */
	else if (below_g <= 1 && below_n <= 1)
		out->path = CS_GPU_PATH_PIX; /* one switch: up port + down */
	else
		out->path = CS_GPU_PATH_PXB;
out:
	free(g);
	return err;
}

const char *cs_gpu_path_name(enum cs_gpu_path p)
{
	static const char *const names[] = { "PIX", "PXB", "PHB",
					     "NODE", "SYS", "NONE" };

	return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "?";
}
