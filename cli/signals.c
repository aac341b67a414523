/*
 * Signal names as exec reports them ("KILL"), mapped to this machine's numbers; and the
 * stop signals of the commands that run until interrupted, turned into a byte on a pipe.
 */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static const struct {
	const char *name;
	int num;
} names[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},       {"QUIT", SIGQUIT}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT},     {"IOT", SIGABRT},  {"BUS", SIGBUS},
    {"FPE", SIGFPE},       {"KILL", SIGKILL},     {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},     {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CHLD", SIGCHLD},     {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN},     {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},
    {"XFSZ", SIGXFSZ},     {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},         {"POLL", SIGIO},       {"SYS", SIGSYS},
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
#ifdef SIGPWR
    {"PWR", SIGPWR},
#endif
};

int cli_signal_number(const char *name)
{
	if (!name)
		return 0;
	if (strncmp(name, "SIG", 3) == 0)
		name += 3;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (strcmp(names[i].name, name) == 0)
			return names[i].num;
	}
	return 0;
}

static const int stop_sigs[CLI_STOP_SIGNALS] = {SIGINT, SIGTERM, SIGHUP};
static int stop_fd = -1;

static void on_stop_signal(int sig)
{
	(void)sig;
	int e = errno;
	ssize_t w = write(stop_fd, "s", 1);
	(void)w;
	errno = e;
}

void cli_stop_signals_catch(int fd, struct sigaction old[CLI_STOP_SIGNALS])
{
	stop_fd = fd;
	struct sigaction sa = {0};
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < CLI_STOP_SIGNALS; i++)
		sigaction(stop_sigs[i], &sa, &old[i]);
	signal(SIGPIPE, SIG_IGN);
}

void cli_stop_signals_restore(const struct sigaction old[CLI_STOP_SIGNALS])
{
	for (int i = 0; i < CLI_STOP_SIGNALS; i++)
		sigaction(stop_sigs[i], &old[i], NULL);
}
