// SPDX-License-Identifier: MIT
/* Trainers' device allocations, mapped once in the sidecar and cached. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#define CS_LOG_MODULE "gpu"
#include "internal/log.h"

#include "gpu/gpu.h"

/*
 * A small table, searched linearly: a trainer shares a handful of
 * allocations (its parameter and gradient buckets), and lookups by id on
 * the descriptor path are an index. An id is slot | generation << 12, so
 * a stale id of a reused slot is refused.
 */
#define MAP_MAX 4096u
#define ID_SLOT(id) ((id) & (MAP_MAX - 1))
#define ID_GEN(id) ((id) >> 12)

struct entry {
	uint32_t refs; /* 0: free */
	uint32_t owner;
	uint32_t kind;
	uint32_t gen;
	uint8_t key[CS_GPU_IPC_HANDLE_LEN]; /* handle, or (st_dev, st_ino) */
	void *base;
	size_t size;
};

struct cs_gpu_map {
	struct cs_gpu_map_cfg cfg;
	const struct cs_gpu_map_ops *ops;
	void *ctx;
	bool check_uuid;
	unsigned held;
	uint64_t opens;
	struct entry e[];
};

static const uint8_t zero_uuid[CS_GPU_UUID_LEN];

int cs_gpu_map_create(const struct cs_gpu_map_cfg *cfg,
		      const struct cs_gpu_map_ops *ops, void *ctx,
		      struct cs_gpu_map **out)
{
	struct cs_gpu_map *m;

	if (!cfg || !ops || !out || !cfg->max_entries ||
	    cfg->max_entries > MAP_MAX || !ops->open_ipc || !ops->close_ipc)
		return -EINVAL;
	m = calloc(1, sizeof(*m) + cfg->max_entries * sizeof(m->e[0]));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	m->ops = ops;
	m->ctx = ctx;
	m->check_uuid = memcmp(cfg->uuid, zero_uuid, CS_GPU_UUID_LEN) != 0;
	*out = m;
	return 0;
}

static void unmap(struct cs_gpu_map *m, struct entry *e)
{
	if (e->kind == CS_GPU_HANDLE_CUDA_IPC)
		m->ops->close_ipc(m->ctx, e->base);
	else if (m->ops->release_fd)
		m->ops->release_fd(m->ctx, e->base, e->size);
	e->refs = 0;
	e->gen++;
	m->held--;
}

void cs_gpu_map_destroy(struct cs_gpu_map *m)
{
	if (!m)
		return;
	for (unsigned i = 0; i < m->cfg.max_entries; i++)
		if (m->e[i].refs)
			unmap(m, &m->e[i]);
	free(m);
}

static void uuid_str(const uint8_t *u, char *s)
{
	for (unsigned i = 0; i < CS_GPU_UUID_LEN; i++)
		sprintf(s + 2 * i, "%02x", u[i]);
}

static int wrong_device(const struct cs_gpu_map *m, const uint8_t *u,
			const char *whose, char *why, size_t whylen)
{
	char a[2 * CS_GPU_UUID_LEN + 1], b[2 * CS_GPU_UUID_LEN + 1];

	uuid_str(u, a);
	uuid_str(m->cfg.uuid, b);
	snprintf(why, whylen,
		 "%s device GPU-%.8s..., this sidecar serves GPU-%.8s...",
		 whose, a, b);
	return -ENODEV;
}

static struct entry *find(struct cs_gpu_map *m, uint32_t owner, uint32_t kind,
			  const uint8_t *key)
{
	for (unsigned i = 0; i < m->cfg.max_entries; i++) {
		struct entry *e = &m->e[i];

		if (e->refs && e->owner == owner && e->kind == kind &&
		    !memcmp(e->key, key, sizeof(e->key)))
			return e;
	}
	return NULL;
}

static struct entry *free_slot(struct cs_gpu_map *m)
{
	for (unsigned i = 0; i < m->cfg.max_entries; i++)
		if (!m->e[i].refs)
			return &m->e[i];
	return NULL;
}

static uint32_t id_of(const struct cs_gpu_map *m, const struct entry *e)
{
	return (uint32_t)(e - m->e) | (e->gen & 0xfffff) << 12;
}

static int open_one(struct cs_gpu_map *m, const struct cs_gpu_handle *h,
		    int fd, void **base, size_t *size, char *why,
		    size_t whylen)
{
	if (h->kind == CS_GPU_HANDLE_CUDA_IPC)
		return m->ops->open_ipc(m->ctx, h->ipc, base, size, why,
					whylen);
	if (!m->ops->import_fd) {
		snprintf(why, whylen, "POSIX-fd handles are not supported");
		return -EOPNOTSUPP;
	}
	return m->ops->import_fd(m->ctx, fd, h->len, base, size, why, whylen);
}

int cs_gpu_map_get(struct cs_gpu_map *m, uint32_t owner,
		   const struct cs_gpu_handle *h, int fd, uint32_t *id,
		   char *why, size_t whylen)
{
	uint8_t key[CS_GPU_IPC_HANDLE_LEN] = { 0 };
	uint8_t uuid[CS_GPU_UUID_LEN];
	struct entry *e;
	struct stat st;
	void *base = NULL;
	size_t size = 0;
	int err;

	why[0] = 0;
	if (h->kind == CS_GPU_HANDLE_CUDA_IPC) {
		memcpy(key, h->ipc, sizeof(key));
	} else if (h->kind == CS_GPU_HANDLE_POSIX_FD) {
		if (fd < 0 || fstat(fd, &st)) {
			snprintf(why, whylen, "a POSIX-fd handle without an fd");
			err = -EINVAL;
			goto out_fd;
		}
		memcpy(key, &st.st_dev, sizeof(st.st_dev));
		memcpy(key + 16, &st.st_ino, sizeof(st.st_ino));
	} else {
		snprintf(why, whylen, "unknown handle kind %u", h->kind);
		err = -EINVAL;
		goto out_fd;
	}
	if (!h->len || h->pad) {
		snprintf(why, whylen, "bad handle: length 0 or pad set");
		err = -EINVAL;
		goto out_fd;
	}
	if (m->check_uuid && memcmp(h->uuid, m->cfg.uuid, CS_GPU_UUID_LEN)) {
		err = wrong_device(m, h->uuid, "the handle is of", why, whylen);
		goto out_fd;
	}
	e = find(m, owner, h->kind, key);
	if (e) {
		if (h->len > e->size) {
			snprintf(why, whylen,
				 "length %llu runs past the allocation (%zu "
				 "bytes)",
				 (unsigned long long)h->len, e->size);
			err = -EINVAL;
			goto out_fd;
		}
		e->refs++;
		*id = id_of(m, e);
		err = 0;
		goto out_fd;
	}
	e = free_slot(m);
	if (!e) {
		snprintf(why, whylen, "%u device allocations mapped already",
			 m->cfg.max_entries);
		err = -ENOSPC;
		goto out_fd;
	}
	err = open_one(m, h, fd, &base, &size, why, whylen);
	m->opens++;
	if (err)
		goto out_fd;
	if (h->len > size) {
		snprintf(why, whylen,
			 "length %llu runs past the allocation (%zu bytes)",
			 (unsigned long long)h->len, size);
		err = -EINVAL;
		goto out_close;
	}
	if (m->check_uuid && m->ops->dev_uuid &&
	    (m->ops->dev_uuid(m->ctx, base, uuid) ||
	     memcmp(uuid, m->cfg.uuid, CS_GPU_UUID_LEN))) {
		err = wrong_device(m, uuid, "the allocation lives on", why,
				   whylen);
		goto out_close;
	}
	e->refs = 1;
	e->owner = owner;
	e->kind = h->kind;
	memcpy(e->key, key, sizeof(key));
	e->base = base;
	e->size = size;
	m->held++;
	*id = id_of(m, e);
	err = 0;
	goto out_fd;

out_close:
	if (h->kind == CS_GPU_HANDLE_CUDA_IPC)
		m->ops->close_ipc(m->ctx, base);
	else if (m->ops->release_fd)
		m->ops->release_fd(m->ctx, base, size);
out_fd:
	if (fd >= 0)
		close(fd);
	return err;
}

static struct entry *lookup(const struct cs_gpu_map *m, uint32_t owner,
			    uint32_t id)
{
	uint32_t slot = ID_SLOT(id);
	const struct entry *e;

	if (slot >= m->cfg.max_entries)
		return NULL;
	e = &m->e[slot];
	if (!e->refs || e->owner != owner || (e->gen & 0xfffff) != ID_GEN(id))
		return NULL;
	return (struct entry *)e;
}

int cs_gpu_map_addr(const struct cs_gpu_map *m, uint32_t owner, uint32_t id,
		    uint64_t off, uint64_t len, void **out)
{
	const struct entry *e = lookup(m, owner, id);

	if (!e)
		return -EBADF;
	if (off > e->size || len > e->size - off)
		return -ERANGE;
	*out = (uint8_t *)e->base + off;
	return 0;
}

int cs_gpu_map_put(struct cs_gpu_map *m, uint32_t owner, uint32_t id)
{
	struct entry *e = lookup(m, owner, id);

	if (!e)
		return -EBADF;
	if (!--e->refs) {
		e->refs = 1; /* unmap() counts it down */
		unmap(m, e);
	}
	return 0;
}

void cs_gpu_map_drop_owner(struct cs_gpu_map *m, uint32_t owner)
{
	for (unsigned i = 0; i < m->cfg.max_entries; i++)
		if (m->e[i].refs && m->e[i].owner == owner)
			unmap(m, &m->e[i]);
}

void cs_gpu_map_counts(const struct cs_gpu_map *m, unsigned *held,
		       uint64_t *opens)
{
	*held = m->held;
	*opens = m->opens;
}
