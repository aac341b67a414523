#include <stdio.h>

#include "calc.h"

static int failures;

static void check(const char *what, int got, int want)
{
	if (got != want) {
		printf("FAIL %s: got %d, want %d\n", what, got, want);
		failures++;
	}
}

int main(void)
{
	check("add(2, 3)", add(2, 3), 5);
	check("sub(7, 4)", sub(7, 4), 3);
	if (failures)
		return 1;
	printf("all tests passed\n");
	return 0;
}
