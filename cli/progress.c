/* A one-line progress bar on stderr for cp, when stderr is a terminal. */
#include "transfer.h"

#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void human(char *out, size_t cap, double v)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(out, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static void draw(progress *p, double now, bool final)
{
	uint64_t done = atomic_load(&p->done);
	double secs = now - p->start_s;
	char got[32], rate[32];
	human(got, sizeof got, (double)done);
	human(rate, sizeof rate, secs > 0 ? (double)done / secs : 0);
	/* The name keeps its tail, where a long path's file name is. */
	size_t nl = strlen(p->name);
	const char *name = nl > 32 ? p->name + nl - 32 : p->name;
	if (p->total) {
		int pct = (int)((double)done * 100.0 / (double)p->total);
		int bar = pct / 5;
		char b[21];
		for (int i = 0; i < 20; i++)
			b[i] = i < bar ? '#' : '.';
		b[20] = '\0';
		fprintf(stderr, "\r%-32s [%s] %3d%% %10s %10s/s\033[K", name, b, pct, got, rate);
	} else {
		fprintf(stderr, "\r%-32s %10s %10s/s\033[K", name, got, rate);
	}
	if (final)
		fputc('\n', stderr);
	fflush(stderr);
}

void progress_init(progress *p, const char *name, uint64_t total, bool enabled)
{
	memset(p, 0, sizeof *p);
	p->enabled = enabled;
	p->name = name;
	p->total = total;
	atomic_init(&p->done, 0);
	pthread_mutex_init(&p->lock, NULL);
	p->start_s = p->last_s = now_s();
}

void progress_add(progress *p, uint64_t n)
{
	atomic_fetch_add(&p->done, n);
	if (!p->enabled)
		return;
	/* Whoever finds the lock free and the bar stale redraws it; the others move on. */
	if (pthread_mutex_trylock(&p->lock) != 0)
		return;
	double now = now_s();
	if (now - p->last_s >= 0.1) {
		p->last_s = now;
		draw(p, now, false);
	}
	pthread_mutex_unlock(&p->lock);
}

void progress_finish(progress *p)
{
	if (p->enabled)
		draw(p, now_s(), true);
	pthread_mutex_destroy(&p->lock);
}
