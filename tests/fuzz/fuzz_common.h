/*
 * Shared by the libFuzzer targets (docs/fuzzing.md): a scratch directory the responder
 * targets run in, a backend confined to it, the input as a byte stream, and the checks
 * an answer must pass. A check that fails aborts, which libFuzzer reports as a crash.
 */
#ifndef ASP_FUZZ_COMMON_H
#define ASP_FUZZ_COMMON_H

#include "asp/proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Aborts with a message: the target's oracle said no. */
#define FUZZ_CHECK(cond, what)                                                                     \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fuzz_fail(__FILE__, __LINE__, what);                                       \
	} while (0)
void fuzz_fail(const char *file, int line, const char *what) __attribute__((noreturn));

/*
 * Makes a fresh directory under $TMPDIR (or /tmp), enters it and removes it at exit:
 * relative paths of the requests resolve there.
 */
void fuzz_scratch_enter(void);
/* Empties the scratch directory when an op may have created something in it. */
void fuzz_scratch_clear(void);

/*
 * `base` (asp_local_conn_ops) with every op that could reach outside the scratch
 * directory or start a process replaced (see fuzz_common.c).
 */
void fuzz_guarded_ops(const asp_ops *base, asp_ops *out);

/* An fd reading `size` bytes of `data` from their start (one memfd, reused). */
int fuzz_stream_fd(const uint8_t *data, size_t size);

/*
 * A frame (4-byte length, then msgpack) a responder wrote: it must decode as a response
 * to `id`, error or result, and its length must match.
 */
void fuzz_check_response(const uint8_t *frame, size_t len, uint32_t id);

#endif
