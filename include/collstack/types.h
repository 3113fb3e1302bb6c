/* SPDX-License-Identifier: MIT */
/* collstack shared types: element types, reduction operators, error codes. */
#ifndef COLLSTACK_TYPES_H
#define COLLSTACK_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. Values are part of the wire and IPC layouts: append only. */
enum cs_dtype {
	CS_F32 = 0,
	CS_F64 = 1,
	CS_F16 = 2,
	CS_BF16 = 3,
	CS_I32 = 4,
	CS_I64 = 5,
	CS_U8 = 6,
	CS_DTYPE_COUNT
};

/* Reduction operators. Values are part of the wire and IPC layouts. */
enum cs_redop {
	CS_SUM = 0,
	CS_PROD = 1,
	CS_MIN = 2,
	CS_MAX = 3,
	CS_REDOP_COUNT
};

/*
 * Error codes. Functions return 0 or a negative value: a negative errno
 * (-EINVAL, -ENOMEM, ...) or one of these, which lie above the errno range.
 */
enum cs_err {
	CS_ERR_BASE = 1000,
	CS_ERR_PEER_LOST = -1001, /* a member of the group was lost */
	CS_ERR_TIMEOUT = -1002, /* the operation's deadline passed */
	CS_ERR_CANCELLED = -1003, /* cancelled (trainer or group gone) */
	CS_ERR_BAD_DESC = -1004, /* malformed operation descriptor */
	CS_ERR_EPOCH = -1005, /* the group moved to a newer epoch */
	CS_ERR_AUTH = -1006, /* authentication failed */
	CS_ERR_PROTO = -1007, /* protocol violation by a peer */
};

/**
 * cs_dtype_size - bytes per element of a type
 * @t: element type
 *
 * Returns: the size in bytes, or 0 for a value outside enum cs_dtype.
 */
static inline size_t cs_dtype_size(enum cs_dtype t)
{
	static const unsigned char sz[CS_DTYPE_COUNT] = {
		[CS_F32] = 4, [CS_F64] = 8, [CS_F16] = 2, [CS_BF16] = 2,
		[CS_I32] = 4, [CS_I64] = 8, [CS_U8] = 1,
	};
	return (unsigned)t < CS_DTYPE_COUNT ? sz[t] : 0;
}

/**
 * cs_strerror - text for a collstack or errno error code
 * @err: a negative error code
 *
 * Returns: a static string.
 */
const char *cs_strerror(int err);

const char *cs_dtype_name(enum cs_dtype t);
const char *cs_redop_name(enum cs_redop op);
/* Parse "f32", "float", "bf16"...; returns 0 or -EINVAL. */
int cs_dtype_parse(const char *s, enum cs_dtype *out);
/* Parse "sum", "prod", "min", "max"; returns 0 or -EINVAL. */
int cs_redop_parse(const char *s, enum cs_redop *out);

#ifdef __cplusplus
}
#endif
#endif
