/* SPDX-License-Identifier: MIT */
/* Names and parsers for the shared enums, and error strings. */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include <collstack/types.h>

static const char *const dtype_names[CS_DTYPE_COUNT] = {
	[CS_F32] = "f32",   [CS_F64] = "f64", [CS_F16] = "f16",
	[CS_BF16] = "bf16", [CS_I32] = "i32", [CS_I64] = "i64",
	[CS_U8] = "u8",
};

static const char *const redop_names[CS_REDOP_COUNT] = {
	[CS_SUM] = "sum",
	[CS_PROD] = "prod",
	[CS_MIN] = "min",
	[CS_MAX] = "max",
};

const char *cs_dtype_name(enum cs_dtype t)
{
	return (unsigned)t < CS_DTYPE_COUNT ? dtype_names[t] : "?";
}

const char *cs_redop_name(enum cs_redop op)
{
	return (unsigned)op < CS_REDOP_COUNT ? redop_names[op] : "?";
}

int cs_dtype_parse(const char *s, enum cs_dtype *out)
{
	static const struct {
		const char *name;
		enum cs_dtype t;
	} alias[] = {
		{ "float", CS_F32 },	 { "float32", CS_F32 },
		{ "double", CS_F64 },	 { "float64", CS_F64 },
		{ "half", CS_F16 },	 { "float16", CS_F16 },
		{ "bfloat16", CS_BF16 }, { "int", CS_I32 },
		{ "int32", CS_I32 },	 { "int64", CS_I64 },
		{ "uint8", CS_U8 },
	};

	for (unsigned i = 0; i < CS_DTYPE_COUNT; i++) {
		if (!strcasecmp(s, dtype_names[i])) {
			*out = (enum cs_dtype)i;
			return 0;
		}
	}
	for (unsigned i = 0; i < sizeof(alias) / sizeof(alias[0]); i++) {
		if (!strcasecmp(s, alias[i].name)) {
			*out = alias[i].t;
			return 0;
		}
	}
	return -EINVAL;
}

int cs_redop_parse(const char *s, enum cs_redop *out)
{
	for (unsigned i = 0; i < CS_REDOP_COUNT; i++) {
		if (!strcasecmp(s, redop_names[i])) {
			*out = (enum cs_redop)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *cs_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case CS_ERR_PEER_LOST:
		return "peer lost";
	case CS_ERR_TIMEOUT:
		return "operation deadline passed";
	case CS_ERR_CANCELLED:
		return "operation cancelled";
	case CS_ERR_BAD_DESC:
		return "malformed operation descriptor";
	case CS_ERR_EPOCH:
		return "group moved to a newer epoch";
	case CS_ERR_AUTH:
		return "authentication failed";
	case CS_ERR_PROTO:
		return "protocol violation";
	default:
		return err < 0 && err > -CS_ERR_BASE ? strerror(-err)
						     : "unknown error";
	}
}
