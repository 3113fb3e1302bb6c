/* SPDX-License-Identifier: MIT */
/* JSON files of the model (model file, model descriptions): jansson. */
#ifndef CS_MODEL_MODEL_JSON_H
#define CS_MODEL_MODEL_JSON_H

#include <stddef.h>

#include <jansson.h>

/**
 * cs_model_json_read - parse @path into @root (json_decref() it)
 * @err: room for a message naming the file (and line, column, reason)
 * @errlen: its size
 * Returns: 0, -ENOENT (cannot be opened), -EINVAL (not JSON).
 */
int cs_model_json_read(const char *path, json_t **root, char *err,
		       size_t errlen);

#endif
