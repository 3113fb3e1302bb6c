/* SPDX-License-Identifier: MIT */
/* The model file: JSON written with stdio, read with jansson. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "model/model.h"
#include "model/model_json.h"

#define CS_MODEL_FORMAT 1

int cs_model_save(const struct cs_model *m, FILE *f)
{
	fprintf(f,
		"{\n"
		"  \"format\": %d,\n"
		"  \"source\": \"%s\",\n"
		"  \"fit_nodes\": %u,\n"
		"  \"measured\": {\n"
		"    \"alpha_ns\": %.3f,\n"
		"    \"direct_alpha_ns\": %.3f,\n"
		"    \"beta_ns_per_byte\": %.6f,\n"
		"    \"frame_ns\": %.3f,\n"
		"    \"ack_turn_ns\": %.3f,\n"
		"    \"incast\": %.5f,\n"
		"    \"a2a_alpha_ns\": %.3f,\n"
		"    \"reduce_ns_per_byte\": %.6f,\n"
		"    \"copy_ns_per_byte\": %.6f,\n"
		"    \"ps_round_ns\": %.3f,\n"
		"    \"ps_tail_ns\": %.3f,\n"
		"    \"ps_beta_ns_per_byte\": %.6f,\n"
		"    \"have_alltoall\": %s,\n"
		"    \"have_ps\": %s\n"
		"  },\n"
		"  \"protocol\": {\n"
		"    \"channels\": %u,\n"
		"    \"chunk\": %llu,\n"
		"    \"window\": %u,\n"
		"    \"mtu_payload\": %u,\n"
		"    \"direct_max\": %llu,\n"
		"    \"max_direct_peers\": %u,\n"
		"    \"ack_every\": %u,\n"
		"    \"small_bytes\": %llu\n"
		"  }\n"
		"}\n",
		CS_MODEL_FORMAT, m->source, m->fit_nodes, m->alpha_ns,
		m->direct_alpha_ns, m->beta_ns, m->frame_ns, m->ack_turn_ns,
		m->incast, m->a2a_alpha_ns, m->reduce_ns, m->copy_ns,
		m->ps_round_ns, m->ps_tail_ns, m->ps_beta_ns, m->have_a2a ? "true" : "false",
		m->have_ps ? "true" : "false", m->channels,
		(unsigned long long)m->chunk, m->window, m->mtu_payload,
		(unsigned long long)m->direct_max, m->max_direct_peers,
		m->ack_every, (unsigned long long)m->small_bytes);
	return ferror(f) ? -EIO : 0;
}

int cs_model_json_read(const char *path, json_t **root, char *err,
		       size_t errlen)
{
	json_error_t je;
	FILE *f;

	*root = json_load_file(path, 0, &je);
	if (*root)
		return 0;
	f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -ENOENT;
	}
	fclose(f);
	snprintf(err, errlen, "%s:%d:%d: %s", path, je.line, je.column,
		 je.text);
	return -EINVAL;
}

/* A number >= 0 under @obj's @key (integers too); -EINVAL names it. */
static int get_num(json_t *obj, const char *sect, const char *key, double *out,
		   const char *path, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);

	if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
	    json_number_value(v) < 0) {
		snprintf(err, errlen, "%s: %s%s%s: %s", path, sect,
			 sect[0] ? "." : "", key,
			 v ? "not a number >= 0" : "missing");
		return -EINVAL;
	}
	*out = json_number_value(v);
	return 0;
}

static int get_u(json_t *obj, const char *sect, const char *key, double min,
		 double max, uint64_t *out, const char *path, char *err,
		 size_t errlen)
{
	double d;
	int ret = get_num(obj, sect, key, &d, path, err, errlen);

	if (ret)
		return ret;
	if (d != floor(d) || d > max || d < min) {
		snprintf(err, errlen,
			 "%s: %s%s%s: %g is not a whole number in %g..%g", path,
			 sect, sect[0] ? "." : "", key, d, min, max);
		return -EINVAL;
	}
	*out = (uint64_t)d;
	return 0;
}

static int get_bool(json_t *obj, const char *key, bool *out, const char *path,
		    char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);

	if (!json_is_boolean(v)) {
		snprintf(err, errlen, "%s: measured.%s: %s", path, key,
			 v ? "not true/false" : "missing");
		return -EINVAL;
	}
	*out = json_is_true(v);
	return 0;
}

int cs_model_load(const char *path, struct cs_model *m, char *err,
		  size_t errlen)
{
	static const struct {
		const char *key;
		size_t off;
	} nums[] = {
		{ "alpha_ns", offsetof(struct cs_model, alpha_ns) },
		{ "direct_alpha_ns", offsetof(struct cs_model, direct_alpha_ns) },
		{ "beta_ns_per_byte", offsetof(struct cs_model, beta_ns) },
		{ "frame_ns", offsetof(struct cs_model, frame_ns) },
		{ "ack_turn_ns", offsetof(struct cs_model, ack_turn_ns) },
		{ "incast", offsetof(struct cs_model, incast) },
		{ "a2a_alpha_ns", offsetof(struct cs_model, a2a_alpha_ns) },
		{ "reduce_ns_per_byte", offsetof(struct cs_model, reduce_ns) },
		{ "copy_ns_per_byte", offsetof(struct cs_model, copy_ns) },
		{ "ps_round_ns", offsetof(struct cs_model, ps_round_ns) },
		{ "ps_tail_ns", offsetof(struct cs_model, ps_tail_ns) },
		{ "ps_beta_ns_per_byte", offsetof(struct cs_model, ps_beta_ns) },
	};
	json_t *root, *meas, *prot, *v;
	uint64_t u;
	int ret = -EINVAL;

	ret = cs_model_json_read(path, &root, err, errlen);
	if (ret)
		return ret;
	ret = -EINVAL;
	if (cs_model_defaults(m))
		goto out;
	v = json_object_get(root, "format");
	if (!json_is_integer(v) || json_integer_value(v) != CS_MODEL_FORMAT) {
		snprintf(err, errlen, "%s: format: %s (this build reads %d)",
			 path, v ? "unsupported" : "missing", CS_MODEL_FORMAT);
		goto out;
	}
	v = json_object_get(root, "source");
	if (!json_is_string(v) || strlen(json_string_value(v)) >= sizeof(m->source)) {
		snprintf(err, errlen, "%s: source: missing or not a short string",
			 path);
		goto out;
	}
	snprintf(m->source, sizeof(m->source), "%s", json_string_value(v));
	if (get_u(root, "", "fit_nodes", 1, 65536, &u, path, err, errlen))
		goto out;
	m->fit_nodes = (uint32_t)u;
	meas = json_object_get(root, "measured");
	prot = json_object_get(root, "protocol");
	if (!json_is_object(meas) || !json_is_object(prot)) {
		snprintf(err, errlen, "%s: '%s' is missing or not an object",
			 path, json_is_object(meas) ? "protocol" : "measured");
		goto out;
	}
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
		if (get_num(meas, "measured", nums[i].key,
			    (double *)((char *)m + nums[i].off), path, err,
			    errlen))
			goto out;
	if (get_bool(meas, "have_alltoall", &m->have_a2a, path, err, errlen) ||
	    get_bool(meas, "have_ps", &m->have_ps, path, err, errlen))
		goto out;
	if (get_u(prot, "protocol", "channels", 1, 64, &u, path, err, errlen))
		goto out;
	m->channels = (uint32_t)u;
	if (get_u(prot, "protocol", "chunk", 1, 1ull << 30, &m->chunk, path, err,
		  errlen))
		goto out;
	if (get_u(prot, "protocol", "window", 1, 65536, &u, path, err, errlen))
		goto out;
	m->window = (uint32_t)u;
	if (get_u(prot, "protocol", "mtu_payload", 1, 65536, &u, path, err, errlen))
		goto out;
	m->mtu_payload = (uint32_t)u;
	if (get_u(prot, "protocol", "direct_max", 0, 1ull << 30, &m->direct_max,
		  path, err, errlen))
		goto out;
	if (get_u(prot, "protocol", "max_direct_peers", 1, 16384, &u, path, err,
		  errlen))
		goto out;
	m->max_direct_peers = (uint32_t)u;
	if (get_u(prot, "protocol", "ack_every", 1, 1024, &u, path, err, errlen))
		goto out;
	m->ack_every = (uint32_t)u;
	if (get_u(prot, "protocol", "small_bytes", 0, 1e12, &m->small_bytes,
		  path, err, errlen))
		goto out;
	ret = 0;
out:
	json_decref(root);
	return ret;
}
