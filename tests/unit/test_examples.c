/* Every shipped example config stays valid: the docs point users at them. */
#include "asp/config.h"

#include <stdio.h>

int main(int argc, char **argv)
{
	int failed = 0;
	for (int i = 1; i < argc; i++) {
		asp_config *cfg = NULL;
		asp_error err;
		if (asp_config_load(argv[i], &cfg, &err)) {
			printf("FAIL - %s: %s\n", argv[i], err.message);
			failed++;
		} else {
			printf("ok - %s\n", argv[i]);
		}
		asp_config_free(cfg);
	}
	printf("%d passed, %d failed\n", argc - 1 - failed, failed);
	return failed != 0 || argc < 2;
}
