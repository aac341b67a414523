/*
 * The local terminal of asp shell, asp exec -t and asp attach: its size and type for
 * spawn's tty, and raw mode while a remote terminal is shown on it.
 *
 * Raw mode is entered once per run and left on every way out: the follow loop restores
 * it before it prints anything or returns, and an atexit handler catches an exit()
 * from anywhere else. A signal handler never restores it (tcsetattr from a handler would
 * race the main thread); signals reach the follow loop through its self-pipe instead.
 */
#include "cli.h"

#include "asp/transport.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static struct termios saved;
static int raw_fd = -1;
static bool atexit_set;

static unsigned env_size(const char *name)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return 0;
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	return *end || v < 1 || v > ASP_TTY_MAX ? 0 : (unsigned)v;
}

void cli_term_size(int fd, unsigned *rows, unsigned *cols)
{
	struct winsize ws;
	if (isatty(fd) && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0 &&
	    ws.ws_row <= ASP_TTY_MAX && ws.ws_col <= ASP_TTY_MAX) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
		return;
	}
	/* Not a terminal (or one without a size): what the shell says, else a VT100's. */
	*rows = env_size("LINES");
	*cols = env_size("COLUMNS");
	if (!*rows)
		*rows = 24;
	if (!*cols)
		*cols = 80;
}

const char *cli_term_type(void)
{
	const char *t = getenv("TERM");
	return t && *t ? t : NULL; /* NULL: the sandbox's default, xterm-256color */
}

int cli_term_raw(int fd)
{
	if (raw_fd >= 0)
		return 0;
	if (tcgetattr(fd, &saved) < 0)
		return -1;
	if (!atexit_set) {
		atexit(cli_term_restore);
		atexit_set = true;
	}
	struct termios t = saved;
	cfmakeraw(&t); /* no echo, no line editing, no signals from keys, no output mapping */
	t.c_cc[VMIN] = 1;
	t.c_cc[VTIME] = 0;
	/* TCSAFLUSH would drop what was typed ahead of the prompt; keep it for the remote. */
	if (tcsetattr(fd, TCSADRAIN, &t) < 0)
		return -1;
	raw_fd = fd;
	return 0;
}

void cli_term_restore(void)
{
	if (raw_fd < 0)
		return;
	tcsetattr(raw_fd, TCSANOW, &saved); /* never wait on a stuck output queue */
	raw_fd = -1;
}

void cli_term_restore_for_message(void)
{
	if (raw_fd < 0)
		return;
	cli_term_restore();
	/* The remote screen left the cursor anywhere: the message gets a line of its own. */
	if (isatty(STDERR_FILENO)) {
		ssize_t w = write(STDERR_FILENO, "\n", 1);
		(void)w;
	}
}
