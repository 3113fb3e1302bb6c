/* SPDX-License-Identifier: MIT */
/*
 * A small client of etcd v3's gRPC-gateway JSON API over HTTP/1.1 (the
 * paths of etcd 3.4: /v3/kv/put, /v3/kv/range, /v3/kv/txn,
 * /v3/kv/deleterange, /v3/lease/grant, /v3/lease/keepalive,
 * /v3/lease/revoke). Keys and values are base64 in the JSON (libsodium's
 * codec), 64-bit numbers are decimal strings (jansson parses the JSON).
 *
 * Blocking calls with a deadline each: meant for a control thread, never
 * the dataplane. One persistent connection, reopened after an error.
 * Every response is untrusted input: its size is bounded, its framing
 * parsed by cs_http_parse() (sans-IO, fuzzable), its JSON checked field
 * by field; anything else is -EPROTO, never a crash or a hang.
 */
#ifndef CS_CONTROL_ETCD_H
#define CS_CONTROL_ETCD_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal/util.h"

#define CS_HTTP_MAX_HDR 16384 /* bytes of status line and headers */
#define CS_ETCD_MAX_RESP (8u << 20) /* bytes of one response */
#define CS_ETCD_MAX_KEY 512
#define CS_ETCD_MAX_VAL 4096

/**
 * cs_http_parse - frame one HTTP/1.1 response held in @buf
 * @buf: the bytes received so far; a complete chunked body is decoded in
 *       place (the chunks are moved together)
 * @len: bytes in @buf
 * @status: out, the status code
 * @body: out, offset of the body in @buf
 * @blen: out, body length (after decoding)
 * @close: out, the server will close the connection after it
 *
 * Returns: the response's length in @buf (> 0) when complete, 0 when more
 * bytes are needed, -EPROTO when malformed, -EMSGSIZE when over the limits.
 */
int cs_http_parse(char *buf, size_t len, int *status, size_t *body,
		  size_t *blen, bool *close);

struct cs_etcd {
	struct sockaddr_in sa;
	char where[96]; /* host:port, for messages */
	int fd;
	uint64_t timeout; /* ns per request */
	char *rbuf;
	size_t rcap;
	char err[200]; /* why the last call failed */
};

/* One key-value pair of a range response (key and value NUL-terminated). */
struct cs_etcd_kv {
	char key[CS_ETCD_MAX_KEY + 1];
	char val[CS_ETCD_MAX_VAL + 1];
	size_t vlen;
	int64_t create_rev, mod_rev, lease;
};

struct cs_etcd_range {
	int64_t revision; /* the store's revision the answer is from */
	unsigned n; /* pairs in kvs */
	struct cs_etcd_kv *kvs; /* cs_etcd_range_free() */
};

/**
 * cs_etcd_parse_url - split "etcd://host:port/prefix"
 * @host, @port, @prefix: out; the prefix keeps its leading '/', no
 *                        trailing one, and is "/collstack" when empty
 * Returns: 0 or -EINVAL (message in @err).
 */
int cs_etcd_parse_url(const char *url, char *host, size_t hlen, uint16_t *port,
		      char *prefix, size_t plen, char *err, size_t errlen);

/**
 * cs_etcd_init - resolve @host (IPv4 or a name) and get ready; connects
 * on the first request
 * @timeout: ns each request may take, connection included
 * Returns: 0, -EINVAL (unknown host, e->err says) or -ENOMEM.
 */
int cs_etcd_init(struct cs_etcd *e, const char *host, uint16_t port,
		 uint64_t timeout);
void cs_etcd_fini(struct cs_etcd *e);

/* Every call below returns 0 or a negative errno: -ETIMEDOUT, -ECONNREFUSED
 * and friends (etcd unreachable), -EPROTO (an answer that is not etcd's),
 * -EIO (etcd answered with an error; e->err has its message). */

int cs_etcd_put(struct cs_etcd *e, const char *key, const void *val,
		size_t vlen, int64_t lease);
/* @prefix: every key starting with @key; @keys_only: no values. */
int cs_etcd_range(struct cs_etcd *e, const char *key, bool prefix,
		  bool keys_only, struct cs_etcd_range *out);
void cs_etcd_range_free(struct cs_etcd_range *r);
int cs_etcd_delete(struct cs_etcd *e, const char *key, bool prefix);

/**
 * cs_etcd_put_if - write @key only if its mod revision is @mod_rev (0:
 * only if it does not exist), in one transaction
 * @done: out, whether it was written
 */
int cs_etcd_put_if(struct cs_etcd *e, const char *key, int64_t mod_rev,
		   const void *val, size_t vlen, int64_t lease, bool *done);

/* @ttl: seconds asked; @id, @granted: out (etcd may raise the TTL). */
int cs_etcd_lease_grant(struct cs_etcd *e, int64_t ttl, int64_t *id,
			int64_t *granted);
/* Returns -ENOENT when the lease has expired (or never was). */
int cs_etcd_lease_keepalive(struct cs_etcd *e, int64_t id, int64_t *ttl);
int cs_etcd_lease_revoke(struct cs_etcd *e, int64_t id);

/*
 * A watch (/v3/watch) on a connection of its own, read without blocking:
 * the member learns that something under its prefix changed as soon as
 * etcd says so, instead of at its next poll. Only the number of messages
 * is kept: the caller reads the store again when it moves.
 */
struct cs_etcd_watch {
	int fd; /* -1: not started */
	int phase; /* headers, chunk size, chunk data, chunk end */
	size_t left; /* bytes of the current chunk still to come */
	char line[CS_HTTP_MAX_HDR];
	size_t llen;
	uint64_t msgs; /* messages received (each ends with a newline) */
};

/**
 * cs_etcd_watch_feed - decode received bytes of a watch response
 * (sans-IO: status, chunked framing, messages)
 * Returns: the number of messages completed by these bytes, or -EPROTO
 * (not a 200 chunked stream, a bad chunk), -EMSGSIZE (headers too long),
 * -ECONNRESET (the stream ended).
 */
int cs_etcd_watch_feed(struct cs_etcd_watch *w, const char *p, size_t n);

/**
 * cs_etcd_watch_start - watch @key (every key under it with @prefix)
 * Returns: 0 or a negative errno (e->err says why).
 */
int cs_etcd_watch_start(struct cs_etcd *e, struct cs_etcd_watch *w,
			const char *key, bool prefix);
/**
 * cs_etcd_watch_read - what has arrived, without waiting
 * Returns: new messages (>= 0), or a negative errno: the stream broke or
 * ended (stop it and start again).
 */
int cs_etcd_watch_read(struct cs_etcd_watch *w);
void cs_etcd_watch_stop(struct cs_etcd_watch *w);

#endif
