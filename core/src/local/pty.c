/* Pseudo-terminals for spawn's tty: see pty.h. */
#include "pty.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

/* Keeps an fd off 0-2, so a child's dup2s cannot clobber one another when the host process
 * runs with a standard stream closed. */
static int above_stdio(int fd)
{
	if (fd < 0 || fd > 2)
		return fd;
	int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return nfd;
}

int local_pty_resize(int master, uint64_t rows, uint64_t cols)
{
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	return ioctl(master, TIOCSWINSZ, &ws) < 0 ? errno : 0;
}

int local_pty_open(uint64_t rows, uint64_t cols, int *master, int *slave, char *path, size_t cap)
{
	*master = *slave = -1;
	int m = above_stdio(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
	if (m < 0)
		return errno;
	int e = 0;
	if (grantpt(m) < 0 || unlockpt(m) < 0)
		e = errno;
	else
		e = ptsname_r(m, path, cap);
	if (!e)
		e = local_pty_resize(m, rows, cols);
	int s = e ? -1 : above_stdio(open(path, O_RDWR | O_NOCTTY | O_CLOEXEC));
	if (!e && s < 0)
		e = errno;
	if (!e) {
		/* UTF-8 input editing, as a terminal emulator sets it up. */
		struct termios t;
		if (tcgetattr(s, &t) == 0) {
			t.c_iflag |= IUTF8;
			tcsetattr(s, TCSANOW, &t);
		}
		/* The pump polls it; a proc_write never blocks a request thread on it. */
		fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
	}
	if (e) {
		close(m);
		if (s >= 0)
			close(s);
		return e ? e : EIO;
	}
	*master = m;
	*slave = s;
	return 0;
}

unsigned char local_pty_veof(int master)
{
	struct termios t;
	if (tcgetattr(master, &t) == 0 && t.c_cc[VEOF] != _POSIX_VDISABLE)
		return t.c_cc[VEOF];
	return 4; /* Ctrl-D */
}
