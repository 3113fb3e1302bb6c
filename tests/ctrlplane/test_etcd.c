/* SPDX-License-Identifier: MIT */
/*
 * The etcd client and rendezvous back-end against a real etcd started on
 * loopback by each test (free ports from the kernel, a data folder of its
 * own); skipped, saying why, where the etcd binary is missing (Debian's
 * etcd-server). HTTP framing and hostile servers need no etcd. Bounds are
 * generous: this runs on loaded 2-core machines.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <collstack/types.h>

#include "control/etcd.h"
#include "control/rdzv.h"

static cs_ns_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (cs_ns_t)ts.tv_sec * CS_NS_PER_S + (cs_ns_t)ts.tv_nsec;
}

/* ---- HTTP framing (no etcd) ---- */

static int parse(const char *s, int *st, char *body)
{
	static char buf[4096];
	size_t b, bl;
	bool cl;
	int r;

	snprintf(buf, sizeof(buf), "%s", s);
	r = cs_http_parse(buf, strlen(buf), st, &b, &bl, &cl);
	if (r > 0 && body) {
		memcpy(body, buf + b, bl);
		body[bl] = 0;
	}
	return r;
}

Test(etcd, http_framing)
{
	char body[256];
	int st;
	const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
	const char *ch = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			 "3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n";

	cr_assert_eq(parse(ok, &st, body), (int)strlen(ok));
	cr_assert_eq(st, 200);
	cr_assert_str_eq(body, "hello");
	cr_assert_eq(parse(ch, &st, body), (int)strlen(ch));
	cr_assert_str_eq(body, "hello");
	{ /* trailers, as etcd sends with its errors */
		const char *tr = "HTTP/1.1 404 Not Found\r\n"
				 "Transfer-Encoding: chunked\r\n\r\n"
				 "5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n"
				 "Grpc-Trailer-Content-Type: x\r\n\r\n";

		cr_assert_eq(parse(tr, &st, body), (int)strlen(tr));
		cr_assert_eq(st, 404);
		cr_assert_str_eq(body, "{\"a\":1}");
		for (size_t n = 0; n < strlen(tr); n++) {
			char p[256];

			memcpy(p, tr, n);
			p[n] = 0;
			cr_assert_eq(parse(p, &st, NULL), 0, "prefix %zu", n);
		}
	}
	/* every prefix of a response is "need more", never an error */
	for (size_t n = 0; n < strlen(ch); n++) {
		char p[256];

		memcpy(p, ch, n);
		p[n] = 0;
		cr_assert_eq(parse(p, &st, NULL), 0, "prefix %zu", n);
	}
	for (size_t n = 0; n < strlen(ok); n++) {
		char p[256];

		memcpy(p, ok, n);
		p[n] = 0;
		cr_assert_eq(parse(p, &st, NULL), 0, "prefix %zu", n);
	}
	/* hostile framing: an error, never a crash */
	cr_assert_eq(parse("SMTP 220 hi\r\n\r\n", &st, NULL), -EPROTO);
	cr_assert_eq(parse("HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", &st,
			   NULL),
		     -EPROTO);
	cr_assert_eq(parse("HTTP/1.1 200 OK\r\n\r\n", &st, NULL), -EPROTO);
	cr_assert_eq(parse("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", &st,
			   NULL),
		     -EPROTO);
	cr_assert_eq(parse("HTTP/1.1 200 OK\r\nContent-Length: "
			   "99999999999\r\n\r\n",
			   &st, NULL),
		     -EMSGSIZE);
	cr_assert_eq(
		parse("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n"
		      "Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
		      &st, NULL),
		-EPROTO);
	cr_assert_eq(
		parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		      "fffffffffffffff\r\n",
		      &st, NULL),
		-EPROTO);
	cr_assert_eq(
		parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		      "7ffff0\r\n",
		      &st, NULL),
		0); /* within the limit: waits for the bytes */
	cr_assert_eq(
		parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		      "900000\r\n",
		      &st, NULL),
		-EMSGSIZE);
	cr_assert_eq(
		parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		      "2\r\nabc\r\n0\r\n\r\n",
		      &st, NULL),
		-EPROTO);
	cr_assert_eq(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
			   &st, NULL),
		     -EPROTO);
	{
		static char big[CS_HTTP_MAX_HDR + 64];
		size_t b, bl;
		bool cl;

		memset(big, 'a', sizeof(big));
		memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
		cr_assert_eq(cs_http_parse(big, sizeof(big), &st, &b, &bl, &cl),
			     -EMSGSIZE);
	}
}

/* Seeded mutations of valid responses: the parser answers within the
 * bytes it was given, whatever they are. */
Test(etcd, http_framing_mutations)
{
	static const char *base[] = {
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		"3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
		"HTTP/1.1 404 No\r\nTransfer-Encoding: chunked\r\n"
		"Connection: close\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n"
		"Grpc-Trailer-Content-Type: x\r\n\r\n",
	};
	uint64_t rng = 29;

	for (unsigned it = 0; it < 200000; it++) {
		const char *b = base[it % CS_ARRAY_SIZE(base)];
		char buf[256];
		size_t len = strlen(b), body, blen;
		unsigned nmut = 1 + (unsigned)(cs_rand_next(&rng) % 4);
		bool cl;
		int st, r;

		memcpy(buf, b, len);
		for (unsigned m = 0; m < nmut; m++) {
			size_t at = cs_rand_next(&rng) % len;
			uint64_t x = cs_rand_next(&rng);

			buf[at] = (x & 1) ? (char)(x >> 8)
					  : "0123456789abcdef\r\n:; "[x % 21];
		}
		if (cs_rand_next(&rng) % 4 == 0)
			len = cs_rand_next(&rng) % (len + 1);
		r = cs_http_parse(buf, len, &st, &body, &blen, &cl);
		cr_assert(r == 0 || r == -EPROTO || r == -EMSGSIZE ||
				  (r > 0 && (size_t)r <= len),
			  "iteration %u: %d", it, r);
		if (r > 0)
			cr_assert(body <= (size_t)r && blen <= (size_t)r - body,
				  "iteration %u: body %zu+%zu of %d", it, body,
				  blen, r);
	}
}

/* The watch stream's decoder, fed in every split, and hostile streams. */
Test(etcd, watch_stream)
{
	const char *st = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
			 "Content-Type: application/json\r\n\r\n"
			 "6\r\n{\"a\":1\r\n2\r\n}\n\r\n"
			 "9\r\n{\"b\":2}\n{\r\n4\r\n\"c\"}\r\n1\r\n\n\r\n";
	struct cs_etcd_watch w;
	size_t n = strlen(st);

	for (size_t cut = 0; cut <= n; cut++) {
		int a, b;

		memset(&w, 0, sizeof(w));
		a = cs_etcd_watch_feed(&w, st, cut);
		b = cs_etcd_watch_feed(&w, st + cut, n - cut);
		cr_assert(a >= 0 && b >= 0, "cut %zu: %d %d", cut, a, b);
		cr_assert_eq(a + b, 3, "cut %zu", cut);
	}
	memset(&w, 0, sizeof(w));
	for (size_t i = 0; i < n; i++) /* byte by byte */
		cr_assert_geq(cs_etcd_watch_feed(&w, st + i, 1), 0);
	cr_assert_eq(w.msgs, 3);
	cr_assert_eq(cs_etcd_watch_feed(&w, "0\r\n\r\n", 5), -ECONNRESET);

	static const char *bad[] = {
		"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		"2\r\nabXY",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		"fffffffffffffffffffff\r\n",
		"SSH-2.0-OpenSSH\r\n\r\n",
	};
	for (unsigned i = 0; i < CS_ARRAY_SIZE(bad); i++) {
		memset(&w, 0, sizeof(w));
		cr_assert_eq(cs_etcd_watch_feed(&w, bad[i], strlen(bad[i])),
			     -EPROTO, "bad stream %u", i);
	}
	{ /* headers that never end */
		static char big[CS_HTTP_MAX_HDR + 16];

		memset(big, 'h', sizeof(big));
		memset(&w, 0, sizeof(w));
		cr_assert_eq(cs_etcd_watch_feed(&w, big, sizeof(big)),
			     -EMSGSIZE);
	}
}

Test(etcd, url)
{
	char host[64], prefix[64], err[128];
	uint16_t port;

	cr_assert_eq(cs_etcd_parse_url("etcd://10.0.0.1:2379/jobs/a/", host,
				       sizeof(host), &port, prefix,
				       sizeof(prefix), err, sizeof(err)),
		     0);
	cr_assert_str_eq(host, "10.0.0.1");
	cr_assert_eq(port, 2379);
	cr_assert_str_eq(prefix, "/jobs/a");
	cr_assert_eq(cs_etcd_parse_url("etcd://h:1", host, sizeof(host), &port,
				       prefix, sizeof(prefix), err,
				       sizeof(err)),
		     0);
	cr_assert_str_eq(prefix, "/collstack");
	static const char *bad[] = { "http://h:1/x",	 "etcd://h/x",
				     "etcd://:1/x",	 "etcd://h:0/x",
				     "etcd://h:70000/x", "etcd://h:1x/p",
				     "etcd://h:1/a b" };
	for (unsigned i = 0; i < CS_ARRAY_SIZE(bad); i++)
		cr_assert_eq(cs_etcd_parse_url(bad[i], host, sizeof(host),
					       &port, prefix, sizeof(prefix),
					       err, sizeof(err)),
			     -EINVAL, "%s", bad[i]);
}

/* ---- a hostile server (no etcd) ---- */

struct fake {
	int lfd;
	uint16_t port;
	const char *reply; /* NULL: accept, read, never answer */
	pthread_t thr;
};

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	char buf[4096];
	int c = accept(f->lfd, NULL, NULL);

	if (c < 0)
		return NULL;
	(void)!read(c, buf, sizeof(buf));
	if (f->reply)
		(void)!write(c, f->reply, strlen(f->reply));
	sleep(5); /* hold the connection open */
	close(c);
	return NULL;
}

static void fake_start(struct fake *f, const char *reply)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);

	f->reply = reply;
	f->lfd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(f->lfd, 0);
	cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(f->lfd, 4), 0);
	getsockname(f->lfd, (struct sockaddr *)&sa, &sl);
	f->port = ntohs(sa.sin_port);
	pthread_create(&f->thr, NULL, fake_main, f);
	pthread_detach(f->thr);
}

Test(etcd, hostile_servers, .timeout = 60)
{
	static const char *bodies[] = {
		"200 OK",   "not json!",
		"200 OK",   "[]",
		"200 OK",   "{\"kvs\":[{\"key\":\"%%%\"}],\"x\":1}",
		"200 OK",   "{\"header\":{\"revision\":\"x\"},\"kvs\":[]}",
		"200 OK",   "{\"header\":{\"revision\":\"1\"},\"kvs\":7}",
		"200 OK",   "{\"header\":{},\"kvs\":[{\"key\":\"!!\"}]}",
		"500 Oops", "{\"error\":\"broken\"}",
	};
	static char replies[CS_ARRAY_SIZE(bodies) / 2 + 1][256];

	for (unsigned i = 0; i < CS_ARRAY_SIZE(bodies) / 2; i++)
		snprintf(replies[i], sizeof(replies[i]),
			 "HTTP/1.1 %s\r\nContent-Length: %zu\r\n\r\n%s",
			 bodies[2 * i], strlen(bodies[2 * i + 1]),
			 bodies[2 * i + 1]);
	snprintf(replies[CS_ARRAY_SIZE(bodies) / 2], 256,
		 "garbage garbage garbage\r\n\r\n");
	struct cs_etcd_range rg;
	struct cs_etcd e;

	for (unsigned i = 0; i < CS_ARRAY_SIZE(replies); i++) {
		struct fake f;
		int r;

		fake_start(&f, replies[i]);
		cr_assert_eq(
			cs_etcd_init(&e, "127.0.0.1", f.port, 2 * CS_NS_PER_S),
			0);
		r = cs_etcd_range(&e, "/k", false, false, &rg);
		cr_assert(r == -EPROTO || r == -EIO, "reply %u: %d (%s)", i, r,
			  e.err);
		cr_assert_eq(rg.n, 0);
		cs_etcd_fini(&e);
		close(f.lfd);
	}
	/* a server that never answers: the deadline, not a hang */
	{
		struct fake f;
		cs_ns_t t0 = now_ns();

		fake_start(&f, NULL);
		cr_assert_eq(cs_etcd_init(&e, "127.0.0.1", f.port,
					  500 * CS_NS_PER_MS),
			     0);
		cr_assert_eq(cs_etcd_range(&e, "/k", false, false, &rg),
			     -ETIMEDOUT);
		cr_assert_lt(now_ns() - t0, 30 * CS_NS_PER_S);
		cr_assert(strstr(e.err, "timed out"), "%s", e.err);
		cs_etcd_fini(&e);
		close(f.lfd);
	}
}

/* ---- a real etcd ---- */

struct etcd_proc {
	pid_t pid;
	uint16_t client, peer;
	char dir[64];
};

static uint16_t free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	close(fd);
	return ntohs(sa.sin_port);
}

static const char *etcd_bin(void)
{
	const char *e = getenv("CS_ETCD_BIN");

	if (e && *e)
		return access(e, X_OK) ? NULL : e;
	if (!access("/usr/bin/etcd", X_OK))
		return "/usr/bin/etcd";
	if (!access("/usr/local/bin/etcd", X_OK))
		return "/usr/local/bin/etcd";
	return NULL;
}

/* Start etcd and wait until it answers (skips the test without one). */
static void etcd_start(struct etcd_proc *p)
{
	const char *bin = etcd_bin();
	char curl[64], purl[64];
	struct cs_etcd_range rg;
	struct cs_etcd e;
	cs_ns_t deadline;

	if (!bin)
		cr_skip_test("no etcd binary (install etcd-server, or set "
			     "CS_ETCD_BIN)");
	snprintf(p->dir, sizeof(p->dir), "/tmp/cs-etcd-test.XXXXXX");
	cr_assert_not_null(mkdtemp(p->dir));
	p->client = free_port();
	p->peer = free_port();
	snprintf(curl, sizeof(curl), "http://127.0.0.1:%u", p->client);
	snprintf(purl, sizeof(purl), "http://127.0.0.1:%u", p->peer);
	p->pid = fork();
	cr_assert_geq(p->pid, 0);
	if (!p->pid) {
		char init[96];

		snprintf(init, sizeof(init), "default=%s", purl);
		freopen("/dev/null", "w", stdout);
		freopen("/dev/null", "w", stderr);
		execl(bin, bin, "--data-dir", p->dir, "--listen-client-urls",
		      curl, "--advertise-client-urls", curl,
		      "--listen-peer-urls", purl,
		      "--initial-advertise-peer-urls", purl,
		      "--initial-cluster", init, (char *)NULL);
		_exit(127);
	}
	cr_assert_eq(cs_etcd_init(&e, "127.0.0.1", p->client, CS_NS_PER_S), 0);
	deadline = now_ns() + 60 * CS_NS_PER_S;
	while (cs_etcd_range(&e, "/ping", false, false, &rg)) {
		int st;

		cr_assert_eq(waitpid(p->pid, &st, WNOHANG), 0,
			     "etcd exited at start (port taken?)");
		cr_assert_lt(now_ns(), deadline, "etcd did not answer: %s",
			     e.err);
		usleep(50 * 1000);
	}
	cs_etcd_fini(&e);
}

static void etcd_stop(struct etcd_proc *p)
{
	char cmd[128];

	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		p->pid = 0;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p->dir);
	(void)!system(cmd);
}

static struct etcd_proc ep;

static void fini(void)
{
	etcd_stop(&ep);
}

TestSuite(etcd_real, .fini = fini, .timeout = 240);

Test(etcd_real, kv_txn_and_leases)
{
	struct cs_etcd_range rg;
	struct cs_etcd e;
	int64_t lease, ttl, left, rev;
	bool done;
	cs_ns_t deadline;

	etcd_start(&ep);
	cr_assert_eq(cs_etcd_init(&e, "localhost", ep.client, 5 * CS_NS_PER_S),
		     0);
	cr_assert_eq(cs_etcd_put(&e, "/t/a", "one", 3, 0), 0, "%s", e.err);
	cr_assert_eq(cs_etcd_put(&e, "/t/b", "t\"w\n\0o", 6, 0), 0);
	cr_assert_eq(cs_etcd_put(&e, "/tz", "out", 3, 0), 0);
	cr_assert_eq(cs_etcd_range(&e, "/t/", true, false, &rg), 0, "%s",
		     e.err);
	cr_assert_eq(rg.n, 2);
	cr_assert_str_eq(rg.kvs[0].key, "/t/a");
	cr_assert_str_eq(rg.kvs[0].val, "one");
	cr_assert_eq(rg.kvs[1].vlen, 6);
	cr_assert_eq(memcmp(rg.kvs[1].val, "t\"w\n\0o", 6), 0);
	cr_assert_gt(rg.revision, 0);
	rev = rg.kvs[0].mod_rev;
	cs_etcd_range_free(&rg);
	cr_assert_eq(cs_etcd_range(&e, "/t/", true, true, &rg), 0);
	cr_assert_eq(rg.n, 2);
	cr_assert_eq(rg.kvs[0].vlen, 0);
	cs_etcd_range_free(&rg);
	cr_assert_eq(cs_etcd_range(&e, "/nothing", false, false, &rg), 0);
	cr_assert_eq(rg.n, 0);

	/* create-only and compare-and-swap on the mod revision */
	cr_assert_eq(cs_etcd_put_if(&e, "/t/a", 0, "x", 1, 0, &done), 0);
	cr_assert(!done);
	cr_assert_eq(cs_etcd_put_if(&e, "/t/c", 0, "new", 3, 0, &done), 0);
	cr_assert(done);
	cr_assert_eq(cs_etcd_put_if(&e, "/t/a", rev + 100, "x", 1, 0, &done),
		     0);
	cr_assert(!done);
	cr_assert_eq(cs_etcd_put_if(&e, "/t/a", rev, "two", 3, 0, &done), 0);
	cr_assert(done);
	cr_assert_eq(cs_etcd_put_if(&e, "/t/a", rev, "three", 5, 0, &done), 0);
	cr_assert(!done, "a stale revision must not win");
	cr_assert_eq(cs_etcd_range(&e, "/t/a", false, false, &rg), 0);
	cr_assert_str_eq(rg.kvs[0].val, "two");
	cs_etcd_range_free(&rg);

	/* a lease: kept alive, then revoked (its keys go), then gone */
	cr_assert_eq(cs_etcd_lease_grant(&e, 30, &lease, &ttl), 0, "%s", e.err);
	cr_assert_geq(ttl, 30);
	cr_assert_eq(cs_etcd_put(&e, "/l/k", "v", 1, lease), 0);
	cr_assert_eq(cs_etcd_lease_keepalive(&e, lease, &left), 0, "%s", e.err);
	cr_assert_gt(left, 0);
	cr_assert_eq(cs_etcd_lease_revoke(&e, lease), 0);
	cr_assert_eq(cs_etcd_range(&e, "/l/k", false, false, &rg), 0);
	cr_assert_eq(rg.n, 0);
	cr_assert_eq(cs_etcd_lease_keepalive(&e, lease, &left), -ENOENT);
	/* a lease left alone expires, and its key with it */
	cr_assert_eq(cs_etcd_lease_grant(&e, 1, &lease, &ttl), 0);
	cr_assert_eq(cs_etcd_put(&e, "/l/k2", "v", 1, lease), 0);
	deadline = now_ns() + 60 * CS_NS_PER_S;
	do {
		cs_etcd_range_free(&rg);
		cr_assert_lt(now_ns(), deadline, "the lease never expired");
		usleep(100 * 1000);
		cr_assert_eq(cs_etcd_range(&e, "/l/k2", false, false, &rg), 0);
	} while (rg.n);
	/* a put under an unknown lease is etcd's error, reported */
	cr_assert_eq(cs_etcd_put(&e, "/l/k3", "v", 1, 12345), -EIO);
	cr_assert(strstr(e.err, "lease"), "%s", e.err);
	/* a watch sees a put under its prefix, not one outside it */
	{
		struct cs_etcd_watch w;
		cs_ns_t dl = now_ns() + 60 * CS_NS_PER_S;
		int m, got = 0;

		cr_assert_eq(cs_etcd_watch_start(&e, &w, "/w/", true), 0, "%s",
			     e.err);
		while (!got) { /* the "created" answer */
			cr_assert_lt(now_ns(), dl, "no created message");
			m = cs_etcd_watch_read(&w);
			cr_assert_geq(m, 0);
			got += m;
			usleep(10 * 1000);
		}
		cr_assert_eq(cs_etcd_put(&e, "/x/outside", "v", 1, 0), 0);
		cr_assert_eq(cs_etcd_put(&e, "/w/inside", "v", 1, 0), 0);
		got = 0;
		while (!got) {
			cr_assert_lt(now_ns(), dl, "no event");
			m = cs_etcd_watch_read(&w);
			cr_assert_geq(m, 0);
			got += m;
			usleep(10 * 1000);
		}
		cr_assert_eq(w.msgs, 2, "one event, for the key inside");
		cs_etcd_watch_stop(&w);
		cr_assert_eq(cs_etcd_watch_read(&w), -ENOTCONN);
	}
	/* bad keys */
	cr_assert_eq(cs_etcd_put(&e, "", "v", 1, 0), -EINVAL);
	cs_etcd_fini(&e);
}

/* ---- the rendezvous back-end ---- */

#define M 3

static const struct cs_member_params RMP = {
	.hb_interval = 100 * CS_NS_PER_MS,
	.fail_timeout = 2 * CS_NS_PER_S,
};

struct members {
	void *impl[M + 1];
	unsigned ev[M + 1];
	bool live[M + 1];
};

static void rjoin(struct members *w, unsigned k, const char *url,
		  const char *token, int rank, int expect)
{
	struct cs_node_addr self = { .mac = { 2, 0, 0, 0, 0, (uint8_t)k },
				     .ip = 0x0a000001 + k,
				     .udp_port = (uint16_t)(7700 + k),
				     .queues = 1 };
	char err[256];

	cr_assert_eq(cs_rendezvous_etcd.create(&w->impl[k], url, M, &RMP, err,
					       sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(
		cs_rendezvous_etcd.join(w->impl[k], token, rank, &self, 20000),
		expect);
	w->live[k] = !expect;
}

static void rpump(struct members *w)
{
	for (unsigned k = 0; k <= M; k++)
		if (w->live[k])
			w->ev[k] |= cs_rendezvous_etcd.poll(w->impl[k],
							    now_ns(), 0);
	usleep(10 * 1000);
}

static bool all_got(struct members *w, unsigned ev)
{
	for (unsigned k = 0; k < M; k++)
		if (w->live[k] && !(w->ev[k] & ev))
			return false;
	return true;
}

static void wait_all(struct members *w, unsigned ev, const char *what)
{
	cs_ns_t deadline = now_ns() + 90 * CS_NS_PER_S;

	while (!all_got(w, ev)) {
		cr_assert_lt(now_ns(), deadline, "%s never came", what);
		rpump(w);
	}
}

Test(etcd_real, rendezvous_form_lose_and_store_loss)
{
	struct members *w = calloc(1, sizeof(*w));
	char url[96], err[256];
	struct cs_rdzv_view v, v0;
	void *impl;

	etcd_start(&ep);
	snprintf(url, sizeof(url), "etcd://127.0.0.1:%u/job1", ep.client);
	for (unsigned k = 0; k < M; k++)
		rjoin(w, k, url, "tok", (int)k, 0);
	/* a fourth with another token is refused, saying why */
	cr_assert_eq(cs_rendezvous_etcd.create(&impl, url, M, &RMP, err,
					       sizeof(err)),
		     0);
	cr_assert_eq(cs_rendezvous_etcd.join(
			     impl, "other", 0,
			     &(struct cs_node_addr){ .udp_port = 1 }, 5000),
		     CS_ERR_AUTH);
	cs_rendezvous_etcd.view(impl, &v);
	cr_assert(strstr(v.error, "token"), "%s", v.error);
	cs_rendezvous_etcd.leave(impl);

	wait_all(w, CS_MSVC_READY, "the first view");
	cs_rendezvous_etcd.view(w->impl[0], &v0);
	cr_assert_eq(v0.epoch, 1);
	cr_assert_eq(v0.world, M);
	for (unsigned k = 0; k < M; k++) {
		cs_rendezvous_etcd.view(w->impl[k], &v);
		cr_assert_eq(v.rank, k);
		cr_assert_eq(v.epoch, 1);
		cr_assert_eq(memcmp(v.table, v0.table, M * sizeof(v.table[0])),
			     0, "member %u sees another table", k);
		cr_assert_eq(v.table[k].udp_port, 7700 + k);
		cr_assert_eq(v.table[k].ip, 0x0a000001 + k);
		cr_assert_eq(v.table[k].state, CS_MEMBER_ALIVE);
	}
	/* a rank already held: refused (after the join's timeout) */
	cr_assert_eq(cs_rendezvous_etcd.create(&impl, url, M, &RMP, err,
					       sizeof(err)),
		     0);
	cr_assert_eq(cs_rendezvous_etcd.join(
			     impl, "tok", 1,
			     &(struct cs_node_addr){ .udp_port = 1 }, 500),
		     -EPERM);
	cs_rendezvous_etcd.leave(impl);

	/* a client of etcd without the token forges a view (every rank
	 * lost, epoch 9): it is ignored, and the next real view replaces it */
	{
		struct cs_etcd e;
		char v[512];

		cr_assert_eq(cs_etcd_init(&e, "127.0.0.1", ep.client,
					  5 * CS_NS_PER_S),
			     0);
		snprintf(v, sizeof(v), "v1 epoch=9 world=3 lost=7 auth=%064d",
			 0);
		cr_assert_eq(cs_etcd_put(&e, "/job1/view", v, strlen(v), 0), 0);
		cs_etcd_fini(&e);
	}
	/* rank 0, "the first one", goes silent (no keepalives, as after
	 * kill -9): its lease expires and the others move to epoch 2 */
	memset(w->ev, 0, sizeof(w->ev));
	w->live[0] = false;
	wait_all(w, CS_MSVC_VIEW, "the view without rank 0");
	for (unsigned k = 1; k < M; k++) {
		cs_rendezvous_etcd.view(w->impl[k], &v);
		cr_assert_eq(v.epoch, 2);
		cr_assert_eq(v.nlost, 1);
		cr_assert_eq(v.lost[0], 0);
		cr_assert_eq(v.table[0].state, CS_MEMBER_LOST);
		cr_assert_eq(v.table[2].state, CS_MEMBER_ALIVE);
	}
	cs_rendezvous_etcd.leave(w->impl[0]);

	/* rank 2's record is overwritten from outside (no lease, another
	 * address): it is not rank 2's any more, which counts as gone */
	{
		struct cs_etcd e;
		char v[512];

		cr_assert_eq(cs_etcd_init(&e, "127.0.0.1", ep.client,
					  5 * CS_NS_PER_S),
			     0);
		snprintf(v, sizeof(v),
			 "v1 ip=01020304 port=1 mac=00:00:00:00:00:00 "
			 "queues=1 numa=0 qpn=0 auth=%064d",
			 0);
		memset(w->ev, 0, sizeof(w->ev));
		cr_assert_eq(cs_etcd_put(&e, "/job1/members/0002", v,
					 strlen(v), 0),
			     0);
		cs_etcd_fini(&e);
	}
	wait_all(w, CS_MSVC_VIEW, "the view without rank 2");
	cs_rendezvous_etcd.view(w->impl[1], &v);
	cr_assert_eq(v.epoch, 3);
	cr_assert_eq(v.nlost, 1);
	cr_assert_eq(v.lost[0], 2);
	cs_rendezvous_etcd.view(w->impl[2], &v);
	cr_assert_eq(v.epoch, 3, "rank 2 sees itself out too");
	cs_rendezvous_etcd.leave(w->impl[2]);
	w->live[2] = false;

	/* etcd itself dies: reported once, within the detection time,
	 * and poll keeps returning */
	memset(w->ev, 0, sizeof(w->ev));
	kill(ep.pid, SIGKILL);
	waitpid(ep.pid, NULL, 0);
	ep.pid = 0;
	{
		cs_ns_t t0 = now_ns();

		wait_all(w, CS_MSVC_COORD_LOST, "the store's loss");
		cr_assert_lt(now_ns() - t0, 30 * CS_NS_PER_S);
		/* once, not at every poll */
		memset(w->ev, 0, sizeof(w->ev));
		t0 = now_ns();
		while (now_ns() - t0 < CS_NS_PER_S)
			rpump(w);
		cr_assert_eq(w->ev[1] & CS_MSVC_COORD_LOST, 0,
			     "the loss was reported again");
	}
	cs_rendezvous_etcd.leave(w->impl[1]);
	free(w);
}
