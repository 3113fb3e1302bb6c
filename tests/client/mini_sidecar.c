/* SPDX-License-Identifier: MIT */
/* mini_sidecar: serve trainers of one node (no network) until SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "collstack/collstack.h"
#include "sidecar_loop.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : CS_DEFAULT_SOCKET;
	struct sigaction sa = { .sa_handler = on_signal };
	int ret;

	if (argc > 2 || (argc == 2 && !strcmp(argv[1], "--help"))) {
		fprintf(stderr, "usage: mini_sidecar [SOCKET_PATH]\n");
		return 2;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	fprintf(stderr, "mini_sidecar: serving %s\n", path);
	ret = cs_test_sidecar_loop(path, &stop, NULL, NULL);
	if (ret)
		fprintf(stderr, "mini_sidecar: %s\n", cs_strerror(ret));
	return ret ? 1 : 0;
}
