/* SPDX-License-Identifier: MIT */
/* Prometheus text format, read back (obs_prom.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "obs_prom.h"

static int parse_line(const char *l, size_t len, struct cs_prom_sample *s)
{
	const char *brace = memchr(l, '{', len), *sp, *end = l + len;
	size_t nl;
	char num[64], *e;

	sp = brace ? memchr(brace, '}', (size_t)(end - brace)) : l;
	if (!sp)
		return -EINVAL;
	sp = memchr(sp, ' ', (size_t)(end - sp));
	if (!sp)
		return -EINVAL;
	nl = (size_t)((brace ? brace : sp) - l);
	if (!nl || nl >= sizeof(s->name))
		return -EINVAL;
	memcpy(s->name, l, nl);
	s->name[nl] = 0;
	s->labels[0] = 0;
	if (brace) {
		const char *rb = memchr(brace, '}', (size_t)(end - brace));
		size_t ll = (size_t)(rb - brace - 1);

		if (ll >= sizeof(s->labels))
			return -EINVAL;
		memcpy(s->labels, brace + 1, ll);
		s->labels[ll] = 0;
	}
	while (sp < end && *sp == ' ')
		sp++;
	if ((size_t)(end - sp) >= sizeof(num) || sp == end)
		return -EINVAL;
	memcpy(num, sp, (size_t)(end - sp));
	num[end - sp] = 0;
	num[strcspn(num, " ")] = 0; /* a timestamp may follow */
	s->v = strtod(num, &e);
	return *e ? -EINVAL : 0;
}

int cs_prom_parse(const char *text, struct cs_prom *p)
{
	const char *l = text;

	p->n = 0;
	while (*l) {
		const char *nlp = strchr(l, '\n');
		size_t len = nlp ? (size_t)(nlp - l) : strlen(l);

		if (len && *l != '#') {
			if (p->n == p->cap) {
				size_t cap = p->cap ? 2 * p->cap : 256;
				void *s = realloc(p->s, cap * sizeof(*p->s));

				if (!s)
					return -ENOMEM;
				p->s = s;
				p->cap = cap;
			}
			if (parse_line(l, len, &p->s[p->n]))
				return -EINVAL;
			p->n++;
		}
		l += len + (nlp != NULL);
	}
	return 0;
}

void cs_prom_free(struct cs_prom *p)
{
	free(p->s);
	p->s = NULL;
	p->n = p->cap = 0;
}

double cs_prom_sum(const struct cs_prom *p, const char *name, const char *m1,
		   const char *m2)
{
	double sum = 0;

	for (size_t i = 0; i < p->n; i++)
		if (!strcmp(p->s[i].name, name) &&
		    (!m1 || strstr(p->s[i].labels, m1)) &&
		    (!m2 || strstr(p->s[i].labels, m2)))
			sum += p->s[i].v;
	return sum;
}
