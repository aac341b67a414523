/*
 * Helpers shared by the benchmark programs (bench_stdio, bench_http, bench_ssh): a
 * monotonic clock, the median of a sample and the order of a round.
 */
#ifndef ASP_BENCH_UTIL_H
#define ASP_BENCH_UTIL_H

/* CLOCK_MONOTONIC, in microseconds or milliseconds. */
double now_us(void);
double now_ms(void);
/* qsort comparator for doubles, ascending. */
int cmp_double(const void *a, const void *b);
/* Median of v[0..n), sorting v in place; -1 when n <= 0. */
double median(double *v, int n);

/*
 * A fresh random order of 0..n-1 in order[] for one round of paths timed in turn, from
 * *seed (any value; the same seed gives the same rounds). Not a rotation ((round + k) %
 * n): then each path follows the same one in all but one of n turns, and what a path
 * leaves behind (an exited command's clean-up, a woken thread) moved the next one's time
 * by up to 5 % here, the same way in every round.
 */
void bench_order(int *order, int n, unsigned long long *seed);

#endif
