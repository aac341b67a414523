/* Benchmark helpers: the clock and the median. */
#include "bench_util.h"

#include <stdlib.h>
#include <time.h>

double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

void bench_order(int *order, int n, unsigned long long *seed)
{
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) { /* Fisher-Yates, xorshift64 */
		unsigned long long x = *seed ? *seed : 0x9e3779b97f4a7c15ull;
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		*seed = x;
		int j = (int)(x % (unsigned long long)(i + 1)), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
}

double median(double *v, int n)
{
	if (n <= 0)
		return -1;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
