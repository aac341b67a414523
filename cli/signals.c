/* Signal names as exec reports them ("KILL"), mapped to this machine's numbers. */
#include "cli.h"

#include <signal.h>
#include <string.h>

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
