/*
 * Terminals over SSH (tests/ssh/ssh_tty.c): CUnit test bodies the OpenSSH and the Dropbear
 * tests run on their connections, native and agent mode.
 */
#ifndef ASP_TEST_SSH_TTY_H
#define ASP_TEST_SSH_TTY_H

#include "asp/proto.h"

#include <stddef.h>

/* A connection (native or agent mode): its op table and self. */
typedef struct ssh_tty_target {
	const asp_ops *ops;
	void *self;
} ssh_tty_target;

/* hello lists the feature "pty" and the op proc_resize. */
void ssh_tty_hello(const ssh_tty_target *t);
/* isatty, session leader, controlling terminal, stty size, TERM, one stream, exit 7. */
void ssh_tty_basics(const ssh_tty_target *t);
/* proc_resize: SIGWINCH and the new size; bad sizes; a finished process. */
void ssh_tty_resize(const ssh_tty_target *t);
/* "\x03" interrupts `sleep` in `sh -i`; the shell's exit code. */
void ssh_tty_interrupt(const ssh_tty_target *t);
/* proc_write eof (Ctrl-D) ends `cat`; later writes refused; spawn's stdin_eof. */
void ssh_tty_eof(const ssh_tty_target *t);
/* proc_signal TERM and timeout_ms on a terminal's process. */
void ssh_tty_signal_timeout(const ssh_tty_target *t);
/* Bad sizes and terms, an unknown handle, a process without a terminal. */
void ssh_tty_bad_input(const ssh_tty_target *t);
/* On a connection whose server refuses terminals: unsupported, and the connection goes on. */
void ssh_tty_refused(const ssh_tty_target *t);

/*
 * Puts "no-pty " in front of the key in `authorized_keys`, keeping what was there in
 * `saved` (`cap` bytes) for ssh_tty_key_restore; connections opened meanwhile are refused
 * terminals. 0, or -1 (the file is as it was).
 */
int ssh_tty_key_no_pty(const char *authorized_keys, char *saved, size_t cap);

/* The file as ssh_tty_key_no_pty found it. */
void ssh_tty_key_restore(const char *authorized_keys, const char *saved);

#endif
