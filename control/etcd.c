/* SPDX-License-Identifier: MIT */
/* etcd v3 over its JSON gateway: HTTP/1.1 framing, requests, answers. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "control/etcd.h"

/* ---- HTTP/1.1 response framing (sans-IO) ---- */

/* The header line @name (lower case, with ':'), its value or NULL. */
static const char *hdr_value(const char *h, size_t hlen, const char *name,
			     size_t *vlen)
{
	size_t nl = strlen(name);
	const char *p = h, *end = h + hlen;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		size_t ll = eol ? (size_t)(eol - p) : (size_t)(end - p);

		if (ll > nl && !strncasecmp(p, name, nl)) {
			const char *v = p + nl;

			while (v < p + ll && (*v == ' ' || *v == '\t'))
				v++;
			*vlen = (size_t)(p + ll - v);
			while (*vlen &&
			       (v[*vlen - 1] == '\r' || v[*vlen - 1] == ' '))
				(*vlen)--;
			return v;
		}
		if (!eol)
			break;
		p = eol + 1;
	}
	return NULL;
}

/* A decimal (@hex false) or hex number of at most @max; -1 if not one. */
static int64_t parse_num(const char *p, size_t n, bool hex, int64_t max)
{
	int64_t v = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		int d;

		if (isdigit((unsigned char)p[i]))
			d = p[i] - '0';
		else if (hex && isxdigit((unsigned char)p[i]))
			d = tolower((unsigned char)p[i]) - 'a' + 10;
		else
			break;
		v = v * (hex ? 16 : 10) + d;
		if (v > max)
			return -1;
	}
	return i ? v : -1;
}

/* parse_num() over exactly @n characters, all of them digits. */
static int64_t parse_all(const char *p, size_t n, bool hex, int64_t max)
{
	for (size_t i = 0; i < n; i++)
		if (!(hex ? isxdigit((unsigned char)p[i])
			  : isdigit((unsigned char)p[i])))
			return -1;
	return n > 18 ? -1 : parse_num(p, n, hex, max);
}

int cs_http_parse(char *buf, size_t len, int *status, size_t *body,
		  size_t *blen, bool *close)
{
	const char *he = NULL, *v;
	size_t hlen, vl, off, out;
	bool chunked = false;
	int64_t cl = -1;

	for (size_t i = 0; i + 3 < len && i < CS_HTTP_MAX_HDR; i++)
		if (!memcmp(buf + i, "\r\n\r\n", 4)) {
			he = buf + i;
			break;
		}
	if (!he)
		return len >= CS_HTTP_MAX_HDR ? -EMSGSIZE : 0;
	hlen = (size_t)(he - buf) + 2; /* through the last header's CRLF */
	if (hlen < 14 || memcmp(buf, "HTTP/1.", 7) || buf[8] != ' ')
		return -EPROTO;
	*status = (int)parse_num(buf + 9, 3, false, 999);
	if (*status < 100)
		return -EPROTO;
	*close = (v = hdr_value(buf, hlen, "connection:", &vl)) && vl == 5 &&
		 !strncasecmp(v, "close", 5);
	if ((v = hdr_value(buf, hlen, "transfer-encoding:", &vl))) {
		if (vl != 7 || strncasecmp(v, "chunked", 7))
			return -EPROTO;
		chunked = true;
	}
	if ((v = hdr_value(buf, hlen, "content-length:", &vl))) {
		cl = parse_all(v, vl, false, INT64_MAX / 16);
		if (cl < 0 || chunked)
			return -EPROTO;
		if (cl > CS_ETCD_MAX_RESP)
			return -EMSGSIZE;
	}
	off = hlen + 2;
	*body = off;
	if (!chunked) {
		if (cl < 0) /* no length: the body ends when the server closes;
			       etcd never does that, so refuse it */
			return -EPROTO;
		if (len - off < (size_t)cl)
			return 0;
		*blen = (size_t)cl;
		return (int)(off + (size_t)cl);
	}
	/* chunked: first check that it is all there, then decode */
	for (size_t p = off;;) {
		const char *crlf = memmem(buf + p, len - p, "\r\n", 2);
		int64_t n;

		if (!crlf)
			return len - p > 32 ? -EPROTO : 0;
		n = parse_num(buf + p, (size_t)(crlf - buf) - p, true,
			      INT64_MAX / 16);
		if (n < 0)
			return -EPROTO;
		if (n > CS_ETCD_MAX_RESP)
			return -EMSGSIZE;
		p = (size_t)(crlf - buf) + 2;
		if (n == 0) {
			/* the final CRLF, after trailers if any (etcd's
			 * errors carry Grpc-Trailer-Content-Type) */
			size_t endp;

			if (len - p < 2)
				return 0;
			if (!memcmp(buf + p, "\r\n", 2)) {
				endp = p + 2;
			} else {
				const char *t =
					memmem(buf + p, len - p, "\r\n\r\n", 4);

				if (!t)
					return len - p > CS_HTTP_MAX_HDR
						       ? -EMSGSIZE
						       : 0;
				endp = (size_t)(t - buf) + 4;
			}
			out = off;
			for (size_t q = off;;) {
				const char *c2 =
					memmem(buf + q, endp - q, "\r\n", 2);
				int64_t m = parse_num(buf + q,
						      (size_t)(c2 - buf) - q,
						      true, CS_ETCD_MAX_RESP);

				q = (size_t)(c2 - buf) + 2;
				if (!m)
					break;
				memmove(buf + out, buf + q, (size_t)m);
				out += (size_t)m;
				q += (size_t)m + 2;
			}
			*blen = out - off;
			return (int)endp;
		}
		if (p - off + (size_t)n > CS_ETCD_MAX_RESP)
			return -EMSGSIZE;
		if (len - p < (size_t)n + 2)
			return 0;
		if (memcmp(buf + p + n, "\r\n", 2))
			return -EPROTO;
		p += (size_t)n + 2;
	}
}

/* ---- connection ---- */

static cs_ns_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * CS_NS_PER_S + (cs_ns_t)ts.tv_nsec;
}

static int wait_fd(int fd, short ev, cs_ns_t deadline)
{
	for (;;) {
		cs_ns_t now = mono_ns();
		struct pollfd p = { .fd = fd, .events = ev };
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1,
			 (int)CS_DIV_ROUND_UP(deadline - now, CS_NS_PER_MS));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static void conn_close(struct cs_etcd *e)
{
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
}

static int tcp_connect(const struct sockaddr_in *sa, cs_ns_t deadline,
		       int *out)
{
	int fd, err = 0, one = 1;
	socklen_t sl = sizeof(err);

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) &&
	    errno != EINPROGRESS) {
		err = -errno;
		goto out_close;
	}
	err = wait_fd(fd, POLLOUT, deadline);
	if (err)
		goto out_close;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) || err) {
		err = -(err ? err : errno);
		goto out_close;
	}
	*out = fd;
	return 0;

out_close:
	close(fd);
	return err;
}

static int conn_open(struct cs_etcd *e, cs_ns_t deadline)
{
	return tcp_connect(&e->sa, deadline, &e->fd);
}

static int send_all(int fd, const char *p, size_t n, cs_ns_t deadline)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
		} else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			int r = wait_fd(fd, POLLOUT, deadline);

			if (r)
				return r;
		} else {
			return w < 0 ? -errno : -EPIPE;
		}
	}
	return 0;
}

/*
 * POST @body to @path; the response body (NUL-terminated) in e->rbuf.
 * Returns: the HTTP status, or a negative errno. A connection kept from
 * an earlier request that turns out closed is reopened once.
 */
static int http_post(struct cs_etcd *e, const char *path, const char *body,
		     size_t *blen)
{
	cs_ns_t deadline = mono_ns() + e->timeout;
	char head[256];
	int hl, ret = -EIO;

	hl = snprintf(head, sizeof(head),
		      "POST %s HTTP/1.1\r\nHost: %s\r\n"
		      "Content-Type: application/json\r\n"
		      "Content-Length: %zu\r\n\r\n",
		      path, e->where, strlen(body));
	if (hl < 0 || (size_t)hl >= sizeof(head))
		return -ENAMETOOLONG;
	for (int attempt = 0; attempt < 2; attempt++) {
		bool reused = e->fd >= 0, close_after = false;
		size_t got = 0, boff = 0;
		int status = 0;

		if (!reused && (ret = conn_open(e, deadline)))
			break;
		ret = send_all(e->fd, head, (size_t)hl, deadline);
		if (!ret)
			ret = send_all(e->fd, body, strlen(body), deadline);
		for (int r = 0; !ret;) {
			ssize_t n;

			if (got + 1 >= e->rcap) {
				size_t cap = e->rcap * 2;
				char *nb;

				if (cap > CS_ETCD_MAX_RESP + CS_HTTP_MAX_HDR +
						  (CS_ETCD_MAX_RESP >> 4)) {
					ret = -EMSGSIZE;
					break;
				}
				nb = realloc(e->rbuf, cap);
				if (!nb) {
					ret = -ENOMEM;
					break;
				}
				e->rbuf = nb;
				e->rcap = cap;
			}
			n = recv(e->fd, e->rbuf + got, e->rcap - 1 - got, 0);
			if (n > 0) {
				got += (size_t)n;
				r = cs_http_parse(e->rbuf, got, &status, &boff,
						  blen, &close_after);
				if (r < 0)
					ret = r;
				else if (r > 0)
					break;
			} else if (n == 0) {
				ret = -ECONNRESET;
			} else if (errno == EAGAIN || errno == EINTR) {
				ret = wait_fd(e->fd, POLLIN, deadline);
			} else {
				ret = -errno;
			}
		}
		if (!ret) {
			memmove(e->rbuf, e->rbuf + boff, *blen);
			e->rbuf[*blen] = 0;
			if (close_after)
				conn_close(e);
			return status;
		}
		conn_close(e);
		/* a kept connection the server had closed: once more */
		if (!(reused && got == 0 &&
		      (ret == -ECONNRESET || ret == -EPIPE)))
			break;
	}
	snprintf(e->err, sizeof(e->err), "etcd %s%s: %s", e->where, path,
		 strerror(-ret));
	return ret;
}

/* ---- JSON ---- */

static char *b64(const void *p, size_t n)
{
	size_t cap =
		sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
	char *o = malloc(cap);

	if (o)
		sodium_bin2base64(o, cap, p, n, sodium_base64_VARIANT_ORIGINAL);
	return o;
}

/* Decode @s into @out (cap bytes + a NUL); -EPROTO if not base64. */
static int unb64(const char *s, char *out, size_t cap, size_t *n)
{
	if (sodium_base642bin((unsigned char *)out, cap, s, strlen(s), NULL, n,
			      NULL, sodium_base64_VARIANT_ORIGINAL))
		return -EPROTO;
	out[*n] = 0;
	return 0;
}

/* An int64 as etcd's gateway writes it: a decimal string (or a number);
 * absent means 0 (proto3 leaves zero values out). */
static int jint(json_t *o, const char *k, int64_t *v)
{
	json_t *x = json_object_get(o, k);
	char *end;

	*v = 0;
	if (!x)
		return 0;
	if (json_is_integer(x)) {
		*v = json_integer_value(x);
		return 0;
	}
	if (!json_is_string(x))
		return -EPROTO;
	errno = 0;
	*v = strtoll(json_string_value(x), &end, 10);
	return errno || *end || end == json_string_value(x) ? -EPROTO : 0;
}

/*
 * POST @req (consumed) to @path; on success *resp is the parsed object
 * (json_decref it). An HTTP error or an etcd error object is -EIO with
 * the message in e->err.
 */
static int call(struct cs_etcd *e, const char *path, json_t *req, json_t **resp)
{
	char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_error_t jerr;
	size_t blen = 0;
	json_t *r, *m;
	int st;

	json_decref(req);
	*resp = NULL;
	if (!body)
		return -ENOMEM;
	st = http_post(e, path, body, &blen);
	free(body);
	if (st < 0)
		return st;
	r = json_loadb(e->rbuf, blen, 0, &jerr);
	if (st != 200) {
		m = r ? json_object_get(r, "error") : NULL;
		if (!m)
			m = r ? json_object_get(r, "message") : NULL;
		snprintf(e->err, sizeof(e->err), "etcd %s%s: HTTP %d: %s",
			 e->where, path, st,
			 json_is_string(m) ? json_string_value(m)
					   : "(no message)");
		json_decref(r);
		return -EIO;
	}
	if (!json_is_object(r)) {
		snprintf(e->err, sizeof(e->err),
			 "etcd %s%s: the answer is not a JSON object", e->where,
			 path);
		json_decref(r);
		return -EPROTO;
	}
	/* a streaming call's answer is wrapped: {"result": {...}} or
	 * {"error": {...}} */
	if ((m = json_object_get(r, "error"))) {
		json_t *msg = json_object_get(m, "message");

		snprintf(
			e->err, sizeof(e->err), "etcd %s%s: %s", e->where, path,
			json_is_string(msg) ? json_string_value(msg) : "error");
		json_decref(r);
		return -EIO;
	}
	if ((m = json_object_get(r, "result")) && json_is_object(m)) {
		json_incref(m);
		json_decref(r);
		r = m;
	}
	*resp = r;
	return 0;
}

/* "key": base64(@key), and "range_end" for a prefix. */
static int put_key(json_t *o, const char *key, bool prefix)
{
	size_t n = strlen(key);
	char *k = b64(key, n), end[CS_ETCD_MAX_KEY + 1];
	int ret = -ENOMEM;

	if (!k || n > CS_ETCD_MAX_KEY || !n)
		goto out;
	if (json_object_set_new(o, "key", json_string(k)))
		goto out;
	if (prefix) {
		/* the first key after every key with this prefix */
		memcpy(end, key, n + 1);
		end[n - 1]++;
		free(k);
		k = b64(end, n);
		if (!k || json_object_set_new(o, "range_end", json_string(k)))
			goto out;
	}
	ret = 0;
out:
	free(k);
	return n > CS_ETCD_MAX_KEY || !n ? -EINVAL : ret;
}

static json_t *put_req(const char *key, const void *val, size_t vlen,
		       int64_t lease)
{
	json_t *o = json_object();
	char *v = b64(val, vlen);

	if (!o || !v || put_key(o, key, false) ||
	    json_object_set_new(o, "value", json_string(v)) ||
	    (lease && json_object_set_new(o, "lease", json_integer(lease)))) {
		json_decref(o);
		o = NULL;
	}
	free(v);
	return o;
}

/* ---- calls ---- */

int cs_etcd_parse_url(const char *url, char *host, size_t hlen, uint16_t *port,
		      char *prefix, size_t plen, char *err, size_t errlen)
{
	const char *h, *colon, *slash;
	int64_t p;

	if (strncmp(url, "etcd://", 7)) {
		snprintf(err, errlen, "'%s': expected etcd://host:port/prefix",
			 url);
		return -EINVAL;
	}
	h = url + 7;
	slash = strchr(h, '/');
	if (!slash)
		slash = h + strlen(h);
	colon = memchr(h, ':', (size_t)(slash - h));
	if (!colon || colon == h || (size_t)(colon - h) >= hlen) {
		snprintf(err, errlen, "'%s': expected etcd://host:port/prefix",
			 url);
		return -EINVAL;
	}
	p = parse_all(colon + 1, (size_t)(slash - colon - 1), false, 65535);
	if (p <= 0) {
		snprintf(err, errlen, "'%s': bad port", url);
		return -EINVAL;
	}
	memcpy(host, h, (size_t)(colon - h));
	host[colon - h] = 0;
	*port = (uint16_t)p;
	while (*slash == '/' && slash[1] == '/')
		slash++;
	if (!*slash || !strcmp(slash, "/"))
		slash = "/collstack";
	if (strlen(slash) >= plen || strlen(slash) > 200) {
		snprintf(err, errlen, "'%s': prefix too long", url);
		return -EINVAL;
	}
	for (const char *c = slash; *c; c++)
		if (!isgraph((unsigned char)*c)) {
			snprintf(err, errlen,
				 "'%s': the prefix must be printable, no "
				 "spaces",
				 url);
			return -EINVAL;
		}
	snprintf(prefix, plen, "%s", slash);
	if (strlen(prefix) > 1 && prefix[strlen(prefix) - 1] == '/')
		prefix[strlen(prefix) - 1] = 0;
	return 0;
}

int cs_etcd_init(struct cs_etcd *e, const char *host, uint16_t port,
		 uint64_t timeout)
{
	struct addrinfo hints = { .ai_family = AF_INET,
				  .ai_socktype = SOCK_STREAM },
			*ai = NULL;
	int r;

	memset(e, 0, sizeof(*e));
	e->fd = -1;
	e->timeout = timeout;
	snprintf(e->where, sizeof(e->where), "%s:%u", host, port);
	if (sodium_init() < 0)
		return -EIO;
	r = getaddrinfo(host, NULL, &hints, &ai);
	if (r || !ai) {
		snprintf(e->err, sizeof(e->err), "etcd host '%s': %s", host,
			 gai_strerror(r));
		return -EINVAL;
	}
	memcpy(&e->sa, ai->ai_addr, sizeof(e->sa));
	e->sa.sin_port = htons(port);
	freeaddrinfo(ai);
	e->rcap = 65536;
	e->rbuf = malloc(e->rcap);
	return e->rbuf ? 0 : -ENOMEM;
}

void cs_etcd_fini(struct cs_etcd *e)
{
	conn_close(e);
	free(e->rbuf);
	e->rbuf = NULL;
}

int cs_etcd_put(struct cs_etcd *e, const char *key, const void *val,
		size_t vlen, int64_t lease)
{
	json_t *r, *q = put_req(key, val, vlen, lease);
	int ret;

	if (!q)
		return !*key || strlen(key) > CS_ETCD_MAX_KEY ? -EINVAL
							      : -ENOMEM;
	ret = call(e, "/v3/kv/put", q, &r);
	json_decref(r);
	return ret;
}

static int parse_kvs(struct cs_etcd *e, json_t *r, struct cs_etcd_range *out)
{
	json_t *kvs = json_object_get(r, "kvs"), *hd, *kv;
	size_t i;

	if (jint((hd = json_object_get(r, "header")), "revision",
		 &out->revision) ||
	    !hd)
		goto bad;
	if (!kvs)
		return 0;
	if (!json_is_array(kvs) || json_array_size(kvs) > 1u << 20)
		goto bad;
	out->kvs = calloc(json_array_size(kvs) + 1, sizeof(*out->kvs));
	if (!out->kvs)
		return -ENOMEM;
	json_array_foreach(kvs, i, kv)
	{
		struct cs_etcd_kv *o = &out->kvs[out->n];
		json_t *k = json_object_get(kv, "key");
		json_t *v = json_object_get(kv, "value");
		size_t n;

		if (!json_is_string(k) ||
		    unb64(json_string_value(k), o->key, CS_ETCD_MAX_KEY, &n) ||
		    strlen(o->key) != n)
			goto bad;
		if (v &&
		    (!json_is_string(v) || unb64(json_string_value(v), o->val,
						 CS_ETCD_MAX_VAL, &o->vlen)))
			goto bad;
		if (jint(kv, "create_revision", &o->create_rev) ||
		    jint(kv, "mod_revision", &o->mod_rev) ||
		    jint(kv, "lease", &o->lease))
			goto bad;
		out->n++;
	}
	return 0;
bad:
	snprintf(e->err, sizeof(e->err),
		 "etcd %s: a range answer that does not parse", e->where);
	return -EPROTO;
}

int cs_etcd_range(struct cs_etcd *e, const char *key, bool prefix,
		  bool keys_only, struct cs_etcd_range *out)
{
	json_t *r, *q = json_object();
	int ret;

	memset(out, 0, sizeof(*out));
	if (!q)
		return -ENOMEM;
	ret = put_key(q, key, prefix);
	if (!ret && keys_only)
		ret = json_object_set_new(q, "keys_only", json_true());
	if (ret) {
		json_decref(q);
		return ret;
	}
	ret = call(e, "/v3/kv/range", q, &r);
	if (!ret)
		ret = parse_kvs(e, r, out);
	json_decref(r);
	if (ret)
		cs_etcd_range_free(out);
	return ret;
}

void cs_etcd_range_free(struct cs_etcd_range *r)
{
	free(r->kvs);
	r->kvs = NULL;
	r->n = 0;
}

int cs_etcd_delete(struct cs_etcd *e, const char *key, bool prefix)
{
	json_t *r, *q = json_object();
	int ret;

	if (!q)
		return -ENOMEM;
	ret = put_key(q, key, prefix);
	if (ret) {
		json_decref(q);
		return ret;
	}
	ret = call(e, "/v3/kv/deleterange", q, &r);
	json_decref(r);
	return ret;
}

int cs_etcd_put_if(struct cs_etcd *e, const char *key, int64_t mod_rev,
		   const void *val, size_t vlen, int64_t lease, bool *done)
{
	json_t *cmp = json_object(), *put = put_req(key, val, vlen, lease);
	json_t *r, *q;
	char rev[24];
	int ret;

	*done = false;
	snprintf(rev, sizeof(rev), "%lld", (long long)mod_rev);
	if (!cmp || !put || put_key(cmp, key, false) ||
	    json_object_set_new(cmp, "result", json_string("EQUAL")) ||
	    json_object_set_new(cmp, "target",
				json_string(mod_rev ? "MOD" : "CREATE")) ||
	    json_object_set_new(cmp,
				mod_rev ? "mod_revision" : "create_revision",
				json_string(rev))) {
		json_decref(cmp);
		json_decref(put);
		return !*key || strlen(key) > CS_ETCD_MAX_KEY ? -EINVAL
							      : -ENOMEM;
	}
	q = json_pack("{s:[o],s:[{s:o}]}", "compare", cmp, "success",
		      "request_put", put);
	if (!q)
		return -ENOMEM;
	ret = call(e, "/v3/kv/txn", q, &r);
	if (!ret) {
		json_t *s = json_object_get(r, "succeeded");

		if (s && !json_is_boolean(s))
			ret = -EPROTO;
		*done = json_is_true(s);
	}
	json_decref(r);
	return ret;
}

int cs_etcd_lease_grant(struct cs_etcd *e, int64_t ttl, int64_t *id,
			int64_t *granted)
{
	json_t *r, *q = json_pack("{s:I,s:I}", "TTL", (json_int_t)ttl, "ID",
				  (json_int_t)0);
	int ret;

	if (!q)
		return -ENOMEM;
	ret = call(e, "/v3/lease/grant", q, &r);
	if (!ret && (jint(r, "ID", id) || jint(r, "TTL", granted) || !*id ||
		     *granted <= 0)) {
		json_t *m = json_object_get(r, "error");

		snprintf(e->err, sizeof(e->err), "etcd %s: lease refused%s%s",
			 e->where, json_is_string(m) ? ": " : "",
			 json_is_string(m) ? json_string_value(m) : "");
		ret = -EIO;
	}
	json_decref(r);
	return ret;
}

int cs_etcd_lease_keepalive(struct cs_etcd *e, int64_t id, int64_t *ttl)
{
	json_t *r, *q = json_pack("{s:I}", "ID", (json_int_t)id);
	int ret;

	if (!q)
		return -ENOMEM;
	ret = call(e, "/v3/lease/keepalive", q, &r);
	if (!ret && jint(r, "TTL", ttl))
		ret = -EPROTO;
	if (!ret && *ttl <= 0) { /* TTL left out or 0: the lease is gone */
		snprintf(e->err, sizeof(e->err), "etcd %s: lease %llx expired",
			 e->where, (unsigned long long)id);
		ret = -ENOENT;
	}
	json_decref(r);
	return ret;
}

int cs_etcd_lease_revoke(struct cs_etcd *e, int64_t id)
{
	json_t *r, *q = json_pack("{s:I}", "ID", (json_int_t)id);
	int ret;

	if (!q)
		return -ENOMEM;
	ret = call(e, "/v3/lease/revoke", q, &r);
	json_decref(r);
	return ret;
}

/* ---- watch ---- */

enum { W_HDR = 0, W_SIZE, W_DATA, W_END };

int cs_etcd_watch_feed(struct cs_etcd_watch *w, const char *p, size_t n)
{
	uint64_t before = w->msgs;

	while (n) {
		switch (w->phase) {
		case W_HDR:
		case W_SIZE: {
			const char *v;
			size_t vl;
			int64_t sz;

			if (w->llen >= (w->phase == W_HDR ? sizeof(w->line)
							  : 64))
				return w->phase == W_HDR ? -EMSGSIZE : -EPROTO;
			w->line[w->llen++] = *p++;
			n--;
			if (w->phase == W_HDR) {
				if (w->llen < 4 ||
				    memcmp(w->line + w->llen - 4, "\r\n\r\n", 4))
					break;
				if (w->llen < 12 || memcmp(w->line, "HTTP/1.", 7) ||
				    memcmp(w->line + 8, " 200", 4))
					return -EPROTO;
				v = hdr_value(w->line, w->llen,
					      "transfer-encoding:", &vl);
				if (!v || vl != 7 || strncasecmp(v, "chunked", 7))
					return -EPROTO;
				w->phase = W_SIZE;
				w->llen = 0;
				break;
			}
			if (w->llen < 2 || memcmp(w->line + w->llen - 2, "\r\n", 2))
				break;
			sz = parse_num(w->line, w->llen - 2, true,
				       CS_ETCD_MAX_RESP);
			if (sz < 0)
				return -EPROTO;
			if (!sz)
				return -ECONNRESET; /* the stream ended */
			w->left = (size_t)sz;
			w->llen = 0;
			w->phase = W_DATA;
			break;
		}
		case W_DATA: {
			size_t k = w->left < n ? w->left : n;

			for (size_t i = 0; i < k; i++)
				w->msgs += p[i] == '\n';
			p += k;
			n -= k;
			w->left -= k;
			if (!w->left) {
				w->phase = W_END;
				w->llen = 0;
			}
			break;
		}
		case W_END:
			if (*p != "\r\n"[w->llen])
				return -EPROTO;
			p++;
			n--;
			if (++w->llen == 2) {
				w->llen = 0;
				w->phase = W_SIZE;
			}
			break;
		}
	}
	return (int)(w->msgs - before);
}

int cs_etcd_watch_start(struct cs_etcd *e, struct cs_etcd_watch *w,
			const char *key, bool prefix)
{
	cs_ns_t deadline = mono_ns() + e->timeout;
	json_t *cr = json_object(), *q;
	char head[256], *body;
	int hl, ret;

	memset(w, 0, sizeof(*w));
	w->fd = -1;
	if (!cr)
		return -ENOMEM;
	ret = put_key(cr, key, prefix);
	if (ret) {
		json_decref(cr);
		return ret;
	}
	q = json_pack("{s:o}", "create_request", cr);
	body = q ? json_dumps(q, JSON_COMPACT) : NULL;
	json_decref(q);
	if (!body)
		return -ENOMEM;
	hl = snprintf(head, sizeof(head),
		      "POST /v3/watch HTTP/1.1\r\nHost: %s\r\n"
		      "Content-Type: application/json\r\n"
		      "Content-Length: %zu\r\n\r\n",
		      e->where, strlen(body));
	ret = hl > 0 && (size_t)hl < sizeof(head) ? 0 : -ENAMETOOLONG;
	if (!ret)
		ret = tcp_connect(&e->sa, deadline, &w->fd);
	if (!ret)
		ret = send_all(w->fd, head, (size_t)hl, deadline);
	if (!ret)
		ret = send_all(w->fd, body, strlen(body), deadline);
	free(body);
	if (ret) {
		snprintf(e->err, sizeof(e->err), "etcd %s/v3/watch: %s",
			 e->where, strerror(-ret));
		cs_etcd_watch_stop(w);
	}
	return ret;
}

int cs_etcd_watch_read(struct cs_etcd_watch *w)
{
	char buf[16384];
	int got = 0;

	if (w->fd < 0)
		return -ENOTCONN;
	for (;;) {
		ssize_t r = recv(w->fd, buf, sizeof(buf), 0);
		int m;

		if (r > 0) {
			m = cs_etcd_watch_feed(w, buf, (size_t)r);
			if (m < 0)
				return m;
			got += m;
		} else if (r == 0) {
			return -ECONNRESET;
		} else if (errno == EAGAIN || errno == EINTR) {
			return got;
		} else {
			return -errno;
		}
	}
}

void cs_etcd_watch_stop(struct cs_etcd_watch *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
}
