/* SPDX-License-Identifier: MIT */
/* GPU memory for the sidecar: placement, registration, mapping, staging. */
#ifndef CS_GPU_GPU_H
#define CS_GPU_GPU_H

/*
 * Everything here is plain C and builds without CUDA: the logic (which
 * registration path, the mapping cache and its checks, the staging
 * pipeline, PCIe placement from sysfs) is separated from the CUDA calls
 * by ops tables, so it is tested on machines without a GPU with fake
 * backends. gpu/cuda_rt.c provides the real backends when the build found
 * CUDA (CS_HAVE_CUDA); gpu/kernels.cu the reduction kernels.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <collstack/types.h>

#define CS_GPU_UUID_LEN 16
#define CS_GPU_IPC_HANDLE_LEN 64 /* sizeof(cudaIpcMemHandle_t) */
#define CS_GPU_WHY_LEN 160

/* ---- placement ---------------------------------------------------------- */

/*
 * How far a GPU is from a NIC on the PCIe tree, in NCCL's words: PIX (one
 * PCIe switch between them), PXB (several switches, no host bridge), PHB
 * (through the host bridge of one root complex), NODE (between root
 * complexes of one NUMA node), SYS (across NUMA nodes). GPUDirect pays
 * at PIX/PXB; from PHB on, a host-staged path is often as fast.
 */
enum cs_gpu_path {
	CS_GPU_PATH_PIX = 0,
	CS_GPU_PATH_PXB = 1,
	CS_GPU_PATH_PHB = 2,
	CS_GPU_PATH_NODE = 3,
	CS_GPU_PATH_SYS = 4,
	CS_GPU_PATH_NONE = 5, /* the NIC is no PCI device (kernel socket) */
};

struct cs_gpu_placement {
	int gpu_numa; /* -1: unknown */
	int nic_numa;
	unsigned hops; /* PCIe bridges between the two, via their common root */
	enum cs_gpu_path path;
};

/**
 * cs_gpu_placement - where a GPU sits relative to a NIC
 * @sysfs: the sysfs root ("/sys"; tests pass a fake tree)
 * @gpu_bdf: the GPU's PCI address ("0000:17:00.0", lower case)
 * @nic_bdf: the NIC's PCI address, or NULL/"" for a NIC without one (a
 *           kernel socket, a virtual port): then path is NONE
 * @out: the placement
 *
 * Reads <sysfs>/bus/pci/devices/<bdf> (a link into the devices tree) and
 * its numa_node. Returns: 0, -ENOENT (no such device), -EINVAL.
 */
int cs_gpu_placement(const char *sysfs, const char *gpu_bdf,
		     const char *nic_bdf, struct cs_gpu_placement *out);

const char *cs_gpu_path_name(enum cs_gpu_path p);

/* What discovery learns about one device. */
struct cs_gpu_dev {
	int ordinal;
	char name[64];
	char bdf[16]; /* "0000:17:00.0" */
	uint8_t uuid[CS_GPU_UUID_LEN];
	int numa; /* from sysfs, -1 unknown */
	size_t mem_bytes;
	int cc_major, cc_minor;
	bool dmabuf; /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED */
	bool gdr; /* ..._GPU_DIRECT_RDMA_SUPPORTED */
	bool vmm_fd; /* VMM with POSIX-fd handles */
};

/* ---- registration of device memory for a NIC ---------------------------- */

/*
 * The NIC side of a registration: a port that can DMA from device memory
 * says so by filling these in (a dpdk port with rte_extmem_register +
 * rte_dev_dma_map: cs_port_gpu_nic(); verbs with ibv_reg_dmabuf_mr /
 * ibv_reg_mr: dataplane/verbs_gpu.h). A port without them (udp: kernel
 * sockets) gets the staging path; a port that has them may still refuse
 * a range (a dpdk vdev such as af_packet: its PMD copies with the CPU),
 * and then says why in @why, which the registrar logs.
 */
struct cs_gpu_nic {
	const char *name; /* for the log: "dpdk:0000:3b:00.0", "udp" */
	const char *bdf; /* NULL if not a PCI device */
	void *ctx;
	/* register a dma-buf fd (offset @off, @len bytes) mapped at @va;
	 * 0, or a negative errno with the reason in @why */
	int (*reg_dmabuf)(void *ctx, int fd, uint64_t off, size_t len, void *va,
			  void **mr, char *why, size_t whylen);
	/* register a device VA through the legacy peer-memory client */
	int (*reg_peer)(void *ctx, void *va, size_t len, void **mr, char *why,
			size_t whylen);
	void (*dereg)(void *ctx, void *mr);
};

enum cs_gpu_reg_kind {
	CS_GPU_REG_DMABUF = 0,
	CS_GPU_REG_PEERMEM = 1,
	CS_GPU_REG_STAGING = 2,
	CS_GPU_REG_COUNT
};

/* What the registrar knows about the host (peer memory is a kernel module). */
struct cs_gpu_host_caps {
	bool peermem; /* nvidia_peermem / nv_peer_mem loaded */
};

/* The device side of a registration (CUDA in production, fakes in tests). */
struct cs_gpu_export_ops {
	/* a dma-buf fd for [va, va+len): cuMemGetHandleForAddressRange */
	int (*dmabuf_export)(void *ctx, void *va, size_t len, int *fd,
			     char *why, size_t whylen);
};

/* One registration's result. */
struct cs_gpu_mr {
	enum cs_gpu_reg_kind kind;
	void *va;
	size_t len;
	int dmabuf_fd; /* -1 unless kind is DMABUF */
	void *nic_mr; /* what the NIC's callback returned */
	/* the choice and why the paths before it were not taken */
	char why[CS_GPU_WHY_LEN * 4];
};

const char *cs_gpu_reg_name(enum cs_gpu_reg_kind k);

/**
 * cs_gpu_register - register device memory for a NIC, best path first
 * @dev: the device owning @va (its dmabuf/gdr attributes)
 * @host: host capabilities
 * @nic: the NIC (its callbacks say what it can take)
 * @ex: how to export device memory, with @ex_ctx
 * @va: device address, @len bytes
 * @out: the registration; @out->why says what was chosen and why not the
 *       paths before it (also logged at info level)
 *
 * Tries dma-buf, then legacy peer memory, then staging; a path is skipped
 * when a precondition is missing and left when its calls fail, and the
 * next one is tried. Staging always succeeds: the memory then moves
 * through the staging pipeline. Returns: 0, or -EINVAL.
 */
int cs_gpu_register(const struct cs_gpu_dev *dev,
		    const struct cs_gpu_host_caps *host,
		    const struct cs_gpu_nic *nic,
		    const struct cs_gpu_export_ops *ex, void *ex_ctx, void *va,
		    size_t len, struct cs_gpu_mr *out);

/**
 * cs_gpu_deregister - undo cs_gpu_register
 * @nic: the NIC it was registered with
 * @mr: the registration (its fd is closed)
 */
void cs_gpu_deregister(const struct cs_gpu_nic *nic, struct cs_gpu_mr *mr);

/**
 * cs_gpu_host_caps_read - what this host offers (reads @sysfs/module)
 * @sysfs: sysfs root
 * @out: capabilities
 */
void cs_gpu_host_caps_read(const char *sysfs, struct cs_gpu_host_caps *out);

/* ---- trainers' device allocations, mapped once in the sidecar ----------- */

enum cs_gpu_handle_kind {
	CS_GPU_HANDLE_CUDA_IPC = 1, /* cudaIpcMemHandle_t, 64 bytes */
	CS_GPU_HANDLE_POSIX_FD = 2, /* a VMM allocation exported as an fd */
};

/* What a trainer sends to share an allocation (untrusted). */
struct cs_gpu_handle {
	uint32_t kind; /* enum cs_gpu_handle_kind */
	uint32_t pad;
	uint64_t len; /* the allocation's size, as the trainer says */
	uint8_t uuid[CS_GPU_UUID_LEN]; /* the device it lives on */
	uint8_t ipc[CS_GPU_IPC_HANDLE_LEN]; /* CUDA_IPC: the handle */
};

/* Opening and closing allocations: CUDA, or a fake in tests. */
struct cs_gpu_map_ops {
	/* map a CUDA IPC handle: base address and the allocation's real
	 * size; fails for a handle of a freed allocation */
	int (*open_ipc)(void *ctx, const uint8_t *handle, void **base,
			size_t *size, char *why, size_t whylen);
	void (*close_ipc)(void *ctx, void *base);
	/* import a VMM POSIX fd of @len bytes: reserve, map, set access
	 * (the caller keeps and closes @fd) */
	int (*import_fd)(void *ctx, int fd, size_t len, void **base,
			 size_t *size, char *why, size_t whylen);
	void (*release_fd)(void *ctx, void *base, size_t size);
	/* the uuid of the device an address lives on */
	int (*dev_uuid)(void *ctx, void *base, uint8_t *uuid);
};

struct cs_gpu_map;

struct cs_gpu_map_cfg {
	unsigned max_entries; /* mappings held at once */
	uint8_t uuid[CS_GPU_UUID_LEN]; /* the device this sidecar serves */
};

int cs_gpu_map_create(const struct cs_gpu_map_cfg *cfg,
		      const struct cs_gpu_map_ops *ops, void *ctx,
		      struct cs_gpu_map **out);
void cs_gpu_map_destroy(struct cs_gpu_map *m);

/**
 * cs_gpu_map_get - map a trainer's allocation (once) and take a reference
 * @m: the cache
 * @owner: the trainer (its handles are its own; an id, e.g. its slot)
 * @h: the handle as received
 * @fd: the fd that came with a POSIX_FD handle (taken over: closed by the
 *      cache when it is no longer needed), else -1
 * @id: out: the mapping's id for cs_gpu_map_addr / cs_gpu_map_put
 * @why: out: a message naming the problem when it fails
 *
 * A handle seen before from the same owner returns the cached mapping
 * (CUDA refuses to open one handle twice in a process, and opening costs
 * milliseconds). Returns: 0, -EINVAL (bad kind or length, a length beyond
 * the allocation), -ENODEV (the allocation lives on another device),
 * -ENOENT (the allocation is gone: freed, or its process exited), -ENOSPC.
 */
int cs_gpu_map_get(struct cs_gpu_map *m, uint32_t owner,
		   const struct cs_gpu_handle *h, int fd, uint32_t *id,
		   char *why, size_t whylen);

/**
 * cs_gpu_map_addr - a device address inside a mapping, bounds-checked
 * @m: the cache
 * @owner: the trainer
 * @id: from cs_gpu_map_get (of the same owner)
 * @off: byte offset inside the allocation
 * @len: bytes that will be touched from there
 * @out: the device address
 *
 * Returns: 0, -EBADF (no such mapping for this owner), -ERANGE (the range
 * runs past the allocation).
 */
int cs_gpu_map_addr(const struct cs_gpu_map *m, uint32_t owner, uint32_t id,
		    uint64_t off, uint64_t len, void **out);

/**
 * cs_gpu_map_put - drop a reference; the last one unmaps
 * Returns: 0 or -EBADF.
 */
int cs_gpu_map_put(struct cs_gpu_map *m, uint32_t owner, uint32_t id);

/* Drop every mapping of @owner (the trainer went away). */
void cs_gpu_map_drop_owner(struct cs_gpu_map *m, uint32_t owner);

/* Mappings held and how many times the CUDA open ran (for tests/stats). */
void cs_gpu_map_counts(const struct cs_gpu_map *m, unsigned *held,
		       uint64_t *opens);

/* ---- the staging pipeline ------------------------------------------------ */

/*
 * Moves a device range to the wire and back through a ring of pinned host
 * slots, without GPUDirect. A transfer is cut in chunks of chunk bytes;
 * at most depth chunks are in flight, each in its own slot.
 *
 *  - out (device -> host -> wire): copy chunk i into slot i % depth
 *    (async, on the engine's own stream); when the copy completes the
 *    chunk is handed to the wire (action SEND); when the wire says it is
 *    done with the slot (cs_gpu_stage_sent) the slot takes the next chunk.
 *  - in (wire -> host -> device): a received chunk is written into the
 *    slot the engine lends (cs_gpu_stage_rx_slot); cs_gpu_stage_received
 *    starts its copy to the device; the slot is free when the copy is.
 *
 * The engine does no I/O itself: copies go through the ops table (CUDA
 * streams and events, or a fake that tests complete in any order), the
 * wire through the send callback. Poll with cs_gpu_stage_poll.
 */
enum cs_gpu_stage_dir {
	CS_GPU_STAGE_OUT = 0, /* device -> wire */
	CS_GPU_STAGE_IN = 1, /* wire -> device */
};

struct cs_gpu_copy_ops {
	/* start an async copy for @slot (one copy per slot at a time) */
	int (*start)(void *ctx, void *dst, const void *src, size_t len,
		     enum cs_gpu_stage_dir dir, unsigned slot);
	/* has the copy in @slot completed? 1 yes, 0 no, <0 error */
	int (*done)(void *ctx, unsigned slot);
};

struct cs_gpu_stage_cfg {
	size_t chunk; /* bytes per chunk, > 0 */
	unsigned
		depth; /* slots (chunks in flight), 1..CS_GPU_STAGE_MAX_DEPTH */
};

#define CS_GPU_STAGE_MAX_DEPTH 64u

struct cs_gpu_stage;

/* the wire: chunk @idx (@off in the transfer, @len bytes) is in @host */
typedef void (*cs_gpu_stage_send_fn)(void *ctx, uint64_t idx, uint64_t off,
				     const void *host, size_t len);

/**
 * cs_gpu_stage_create - a staging engine over @slots (depth * chunk bytes
 * of pinned host memory the caller owns)
 * Returns: 0, -EINVAL (bad chunk/depth, NULL slots), -ENOMEM.
 */
int cs_gpu_stage_create(const struct cs_gpu_stage_cfg *cfg, void *slots,
			const struct cs_gpu_copy_ops *ops, void *ops_ctx,
			struct cs_gpu_stage **out);
void cs_gpu_stage_destroy(struct cs_gpu_stage *st);

/**
 * cs_gpu_stage_start - begin a transfer of @len bytes at device @dev
 * Returns: 0, -EBUSY (one is running), -EINVAL.
 */
int cs_gpu_stage_start(struct cs_gpu_stage *st, enum cs_gpu_stage_dir dir,
		       void *dev, size_t len, cs_gpu_stage_send_fn send,
		       void *send_ctx);

/* out: the wire finished with chunk @idx (its slot may be reused) */
int cs_gpu_stage_sent(struct cs_gpu_stage *st, uint64_t idx);

/* in: where chunk @idx must be written (NULL: its slot is still busy) */
void *cs_gpu_stage_rx_slot(struct cs_gpu_stage *st, uint64_t idx);
/* in: chunk @idx was written into its slot; copy it to the device */
int cs_gpu_stage_received(struct cs_gpu_stage *st, uint64_t idx);

/**
 * cs_gpu_stage_poll - reap finished copies and start the next ones
 * Returns: 1 when the whole transfer is done, 0 when not yet, <0 on a
 * copy error (the transfer is then over).
 */
int cs_gpu_stage_poll(struct cs_gpu_stage *st);

/* number of chunks of the running transfer */
uint64_t cs_gpu_stage_chunks(const struct cs_gpu_stage *st);

/* ---- CUDA (gpu/cuda_rt.c, built with CS_HAVE_CUDA) ----------------------- */

/**
 * cs_gpu_available - is there a usable CUDA device?
 * @why: out: the reason when not ("no CUDA driver", "built without CUDA")
 * Returns: the number of devices, 0 if none.
 */
int cs_gpu_available(char *why, size_t whylen);

/* Discover device @ordinal (attributes, PCI address, NUMA node). */
int cs_gpu_discover(int ordinal, struct cs_gpu_dev *out);

extern const struct cs_gpu_map_ops cs_gpu_cuda_map_ops;
extern const struct cs_gpu_export_ops cs_gpu_cuda_export_ops;

/* CUDA copy backend for the staging engine: its own stream, one event per
 * slot. */
struct cs_gpu_cuda_copier;
int cs_gpu_cuda_copier_create(unsigned depth, struct cs_gpu_cuda_copier **out);
void cs_gpu_cuda_copier_destroy(struct cs_gpu_cuda_copier *cp);

/**
 * cs_gpu_cuda_copier_reduce - reduce incoming chunks where they land
 * @cp: the copier of an in (wire -> device) staging engine
 * @chunk: the engine's chunk size (a multiple of the element size)
 * @t: CS_F32, CS_F64, CS_F16 or CS_BF16
 * @op: the operator
 *
 * From then on an incoming chunk is copied into a device scratch slot and
 * reduced into the destination by cs_gpu_reduce (dst = op(dst, chunk)) on
 * the copier's stream, instead of overwriting it.
 * Returns: 0, -EINVAL, -EOPNOTSUPP (a type without a GPU kernel), -ENOMEM.
 */
int cs_gpu_cuda_copier_reduce(struct cs_gpu_cuda_copier *cp, size_t chunk,
			      enum cs_dtype t, enum cs_redop op);
extern const struct cs_gpu_copy_ops cs_gpu_cuda_copy_ops;

/**
 * cs_gpu_reduce - dst[i] = op(dst[i], src[i]) on the device
 * @dst, @src: device addresses, aligned to the element size
 * @count: elements
 * @t: CS_F32, CS_F16 or CS_BF16 (CS_F64 too)
 * @op: any enum cs_redop
 * @stream: a cudaStream_t, or NULL for the default stream
 *
 * The semantics of collectives/reduce.h, bit for bit (f16/bf16 widened to
 * f32, rounded to nearest even; min/max propagate NaN, equal -> @src).
 * Asynchronous. Returns: 0, -EINVAL, -EOPNOTSUPP (another type: reduce on
 * the host), -EIO (the launch failed).
 */
int cs_gpu_reduce(void *dst, const void *src, size_t count, enum cs_dtype t,
		  enum cs_redop op, void *stream);

#endif
