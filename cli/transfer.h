/*
 * Moving bytes between a local descriptor and a sandbox file, or between two sandbox files,
 * in chunks with several requests in flight on the one (thread-safe) client.
 */
#ifndef ASP_CLI_TRANSFER_H
#define ASP_CLI_TRANSFER_H

#include <pthread.h>
#include <stdatomic.h>

#include "cli.h"

/* A progress bar on stderr, redrawn at most every 100 ms by whichever thread moved bytes. */
typedef struct progress {
	bool enabled;
	const char *name;
	uint64_t total; /* 0: unknown */
	_Atomic uint64_t done;
	pthread_mutex_t lock;
	double start_s, last_s;
} progress;

/* Enabled only when `enabled` (the caller checks isatty(2) and --quiet). */
void progress_init(progress *p, const char *name, uint64_t total, bool enabled);
void progress_add(progress *p, uint64_t n);
/* Draws the final state and ends the line. */
void progress_finish(progress *p);

typedef enum xfer_kind {
	XF_LOCAL_FILE,   /* a regular file: pread/pwrite at offsets, in parallel */
	XF_LOCAL_STREAM, /* a pipe or terminal: sequential read(), in-order write() */
	XF_REMOTE,       /* a file in the sandbox */
} xfer_kind;

typedef struct xfer_end {
	xfer_kind kind;
	int fd;           /* local ends */
	const char *path; /* remote: the sandbox path; local: the name used in messages */
	uint64_t base;    /* local file: the file offset of the transfer's first byte */
} xfer_end;

typedef struct xfer {
	/* Inputs. */
	asp_client *client;
	xfer_end src, dst;
	uint64_t offset;  /* remote source: where to start reading */
	uint64_t length;  /* at most this many bytes; UINT64_MAX: to the end of the source */
	size_t chunk;     /* bytes per request; must fit one message */
	unsigned threads; /* requests in flight at most */
	/* A remote destination: the write op's flags, for the target or its temporary file. */
	bool append, mkdirs, atomic;
	uint64_t mode; /* permission bits of a new file; 0: the protocol's default */
	/* Through a temporary file, give it the replaced target's mode (as a write in place). */
	bool keep_target_mode;
	progress *prog; /* NULL: none */

	/* Outputs. */
	uint64_t moved;    /* bytes written to the destination */
	uint64_t dst_size; /* remote destination: its size afterwards */
	uint64_t src_size; /* remote source: the file's size as the first read reported it */
	asp_error err;     /* on failure */
	char what[1200];   /* on failure: what failed ("read /w/x", "write ./y") */
} xfer;

/* Zeroes *x and sets the defaults: everything, CLI_THREADS_DEFAULT, no flags. */
void xfer_init(xfer *x, asp_client *client, size_t chunk);

/*
 * Runs the transfer; 0, or -1 with x->err and x->what filled. Data that fits one chunk goes
 * to a remote target in one write op with the caller's flags. More data goes to a remote
 * target through a temporary file beside it, renamed at the end (removed on failure), so
 * the target is never half written — except with `append`, which sends consecutive
 * appends. A local destination gets the bytes at dst.base + (their offset in the transfer).
 */
int xfer_run(xfer *x);

#endif
