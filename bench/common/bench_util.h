/*
 * Helpers shared by the benchmark programs (bench_stdio, bench_http, bench_ssh): a
 * monotonic clock and the median of a sample.
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

#endif
