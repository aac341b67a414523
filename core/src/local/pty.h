/*
 * Pseudo-terminals for spawn's tty: a new master/slave pair of a given size, and resizing
 * it. The child side (session leader, controlling terminal) is spawn_util.c's.
 */
#ifndef ASP_LOCAL_PTY_H
#define ASP_LOCAL_PTY_H

#include <stddef.h>
#include <stdint.h>

/*
 * Opens a new pseudo-terminal of rows x cols: *master (close-on-exec, non-blocking) and
 * *slave (close-on-exec, not our controlling terminal), and the slave's path in `path`.
 * 0, or an errno with nothing left open.
 */
int local_pty_open(uint64_t rows, uint64_t cols, int *master, int *slave, char *path, size_t cap);

/* Sets the window size through the master; the kernel signals the foreground group with
 * SIGWINCH. 0 or an errno. */
int local_pty_resize(int master, uint64_t rows, uint64_t cols);

/* The character that ends a line of input as end-of-file (VEOF, normally Ctrl-D). */
unsigned char local_pty_veof(int master);

#endif
