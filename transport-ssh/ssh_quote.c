/*
 * Words for the remote shell. sshd hands the command line to the user's login shell
 * (`$SHELL -c LINE`), so LINE is a fixed `exec /bin/sh -c SCRIPT` whose every variable
 * part (cwd, env values, argv) is a single-quoted positional argument: inside single
 * quotes POSIX shells (bash, dash, zsh, ksh, busybox) expand nothing, so any byte
 * sequence arrives verbatim and runs nothing.
 */
#include "ssh_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sstr_add(sstr *s, const char *data, size_t len)
{
	if (s->len + len + 1 > s->cap) {
		size_t ncap = s->cap ? s->cap : 256;
		while (ncap < s->len + len + 1)
			ncap *= 2;
		char *np = realloc(s->p, ncap);
		if (!np) {
			sstr_free(s);
			return -1;
		}
		s->p = np;
		s->cap = ncap;
	}
	memcpy(s->p + s->len, data, len);
	s->len += len;
	s->p[s->len] = '\0';
	return 0;
}

int sstr_adds(sstr *s, const char *z)
{
	return sstr_add(s, z, strlen(z));
}

int sstr_add_quoted(sstr *s, const char *z)
{
	/* 'it'\''s': close the quote, an escaped quote, reopen */
	if (sstr_add(s, "'", 1) < 0)
		return -1;
	for (const char *q; (q = strchr(z, '\'')) != NULL; z = q + 1) {
		if (sstr_add(s, z, (size_t)(q - z)) < 0 || sstr_add(s, "'\\''", 4) < 0)
			return -1;
	}
	if (sstr_adds(s, z) < 0 || sstr_add(s, "'", 1) < 0)
		return -1;
	return 0;
}

void sstr_free(sstr *s)
{
	free(s->p);
	s->p = NULL;
	s->len = s->cap = 0;
}

/* A word the shell takes as it is: nothing in it needs quoting. */
static bool plain_word(const char *z)
{
	if (!*z)
		return false;
	for (; *z; z++) {
		unsigned char c = (unsigned char)*z;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("_@%+=:,./-", c)))
			return false;
	}
	return true;
}

char *ssh_quote_argv(const char *const *argv, size_t argc)
{
	sstr s = {0};
	if (sstr_add(&s, "", 0) < 0)
		return NULL;
	for (size_t i = 0; i < argc; i++) {
		if ((i && sstr_add(&s, " ", 1) < 0) ||
		    (plain_word(argv[i]) ? sstr_adds(&s, argv[i]) : sstr_add_quoted(&s, argv[i])) <
		        0)
			return NULL; /* sstr_add freed it */
	}
	return s.p;
}

bool ssh_is_shell_name(const char *z)
{
	if (!z || !((*z >= 'A' && *z <= 'Z') || (*z >= 'a' && *z <= 'z') || *z == '_'))
		return false;
	for (z++; *z; z++) {
		if (!((*z >= 'A' && *z <= 'Z') || (*z >= 'a' && *z <= 'z') || *z == '_' ||
		      (*z >= '0' && *z <= '9')))
			return false;
	}
	return true;
}

/*
 * The wrapper, run by /bin/sh with positional arguments
 *   $1 nonce  $2 cwd  $3 program to check  $4 "=" when $5 is the PATH to search
 *   $5 PATH   then "NAME=VALUE" words, then the argv to exec.
 * It only uses builtins (but the fallback below). Its own variables are done with before
 * the env is exported (so an env entry cannot change them), and the export loop counts
 * with a literal the client fills in (the number of argv words), not a variable.
 *
 * OpenSSH made the process a session and group leader: the group id goes out first, so a
 * timeout can kill it all, and the wrapper execs the argv. Dropbear runs the command in
 * its connection's group and, once that process exits, closes the channel as soon as the
 * pipes are empty (dropping what a background child writes later). There (not a group
 * leader) the wrapper stays as the channel's process: the command gets a session of its
 * own (setsid(1); else perl's setpgrp; else none, and only its pid is killed), its
 * stdout and stderr go through a `cat` each, which end only when every writer closed its
 * end, and the wrapper exits with the command's status once both have (re-raising the
 * signal that killed it). It ignores the signals the server delivers to it, so that the
 * group kill (from a second channel) is what ends the command.
 *
 * A server started with signals ignored (SIGINT and SIGQUIT, by a script's background job)
 * passes that on to every command, and a shell cannot undo it (POSIX: a signal ignored
 * on entry stays ignored). The wrapper reads the ignored set from /proc/$$/stat (the
 * line it reads anyway) and, where it is not empty, starts the command with every
 * signal's action the default, as the local backend does: through `env
 * --default-signal` (coreutils 9 and later) or perl, each running before the env is
 * exported and exec'ing a /bin/sh that exports it; with neither the command keeps what
 * it inherited.
 *
 * On a terminal (spawn with tty: stdout is the pty) it always execs: both servers make a
 * pty session's process a session leader with the pty as its controlling terminal, and
 * a relay would put pipes between the command and its terminal. A server that did not
 * would leave the command in its group, and the wrapper says so (PGID not PID): kills
 * then reach that process alone.
 */
/* What the local backend sets back to the default for a command (spawn_util.c). */
#define RESET_SIGNALS_ENV  "HUP,INT,QUIT,PIPE,ALRM,TERM,USR1,USR2,CHLD,TSTP,TTIN,TTOU,XFSZ"
#define RESET_SIGNALS_PERL "HUP INT QUIT PIPE ALRM TERM USR1 USR2 CHLD TSTP TTIN TTOU XFSZ"

static const char wrapper_head[] =
    "printf \"\\001ASP%s\\n\" \"$1\" >&2\n"
    "d=$2 e= p=$3\n"
    "if [ -n \"$d\" ]; then\n"
    "case $d in /*) ;; *) d=./$d;; esac\n"
    "if [ ! -e \"$d\" ]; then e=cwd_not_found\n"
    "elif [ ! -d \"$d\" ]; then e=cwd_not_a_directory\n"
    "elif ! cd -P -- \"$d\" 2>/dev/null; then e=cwd_permission_denied\n"
    "fi\n"
    "fi\n"
    "if [ -z \"$e\" ] && [ -n \"$p\" ]; then\n"
    "case $p in\n"
    "*/*) if [ ! -e \"$p\" ]; then e=prog_not_found\n"
    "elif [ -d \"$p\" ] || [ ! -x \"$p\" ]; then e=prog_permission_denied; fi;;\n"
    "*) if [ \"$4\" = = ]; then q=$5; else q=${PATH-/bin:/usr/bin}; fi\n"
    "e=prog_not_found\n"
    "IFS=:\n"
    "set -f\n"
    "for x in $q; do\n"
    "[ -n \"$x\" ] || x=.\n"
    "if [ -f \"$x/$p\" ]; then\n"
    "if [ -x \"$x/$p\" ]; then e=; break; fi\n"
    "e=prog_permission_denied\n"
    "fi\n"
    "done\n"
    "set +f\n"
    "unset IFS;;\n"
    "esac\n"
    "fi\n"
    "if [ -n \"$e\" ]; then printf \"\\001ASP%s err %s\\n\" \"$1\" \"$e\"; exit 0; fi\n"
    "n=$1 g=$$ i=0 D= k=\n"
    /* fields 5 and 33 of stat: the group, the ignored signals (decimal) */
    "if [ -r /proc/$$/stat ]; then\n"
    "read -r x x x x g x x x x x x x x x x x x x x x x x x x x x x x x x x x i x </proc/$$/stat\n"
    "fi\n"
    "if [ \"$i\" != 0 ]; then\n"
    "k='$SIG{$_}=\"DEFAULT\"for qw(" RESET_SIGNALS_PERL ");'\n"
    "if /usr/bin/env --default-signal=" RESET_SIGNALS_ENV " true 2>/dev/null; then\n"
    "D=/usr/bin/env\n"
    "elif [ -x /usr/bin/perl ]; then D=/usr/bin/perl; fi\n"
    "fi\n"
    "shift 5\n"
    /* o: the "ok" line from NONCE PID PGID SUFFIX */
    "o='printf \"\\001ASP%s ok %s %s%s\\n\" \"$1\" \"$2\" \"$3\" \"$4\"; shift 4\n'\n"
    /* E PROG NONCE PID PGID SUFFIX ENV... ARGV: with signals to reset, execs PROG (if not
     * empty), the reset, and a /bin/sh that says "ok", exports the env and execs the
     * argv, so that no signal sent after "ok" finds it ignored; else says "ok" */
    "E() {\n"
    "x=$1\n"
    "shift\n"
    "case $D in\n"
    "*/env) exec ${x:+\"$x\"} $D --default-signal=" RESET_SIGNALS_ENV " /bin/sh -c \"$o$t\"'\n"
    "exec \"$@\"' sh \"$@\";;\n"
    "*/perl) exec ${x:+\"$x\"} $D -e \"${k}exec@ARGV;exit 127\" -- /bin/sh -c \"$o$t\"'\n"
    "exec \"$@\"' sh \"$@\";;\n"
    "esac\n"
    "eval \"$o\"\n"
    "}\n"
    "t='while [ $# -gt ";
static const char wrapper_tail[] = " ]; do export \"$1\"; shift; done\n'\n"
                                   "if [ \"$g\" = $$ ] || [ -t 1 ]; then\n"
                                   "E '' \"$n\" $$ \"$g\" '' \"$@\"\n"
                                   "eval \"$t\"\n"
                                   "exec \"$@\"\n"
                                   "fi\n"
                                   "s= q=\n"
                                   "IFS=:\n"
                                   "set -f\n"
                                   "for x in ${PATH-/usr/bin:/bin}; do\n"
                                   "case $x in /*)\n"
                                   "[ -n \"$s\" ] || ! [ -x \"$x/setsid\" ] || s=$x/setsid\n"
                                   "[ -n \"$q\" ] || ! [ -x \"$x/perl\" ] || q=$x/perl;;\n"
                                   "esac\n"
                                   "done\n"
                                   "set +f\n"
                                   "unset IFS\n"
                                   "trap : HUP INT QUIT TERM USR1 USR2 ALRM\n"
                                   "G=\n";
/* With a hold: a USR1 from now on is the client's word that the wrapper may end. */
static const char wrapper_hold_trap[] =
    "w=\n"
    "trap 'G=1; [ -z \"$w\" ] || kill -s KILL $w 2>/dev/null' USR1\n";
static const char wrapper_relay[] =
    "exec 3>&1 4>&2\n"
    "r=$( { { { (\n"
    /* the traps above are the wrapper's: a shell may keep running them in a subshell, and
     * a signal here (a kill sent as soon as the line below is read) would be swallowed */
    "trap - HUP INT QUIT TERM USR1 USR2 ALRM\n"
    "read -r p x </proc/self/stat\n"
    "if [ -n \"$s$q\" ]; then g=$p; fi\n"
    /* "relay": the channel's process is this wrapper, not the command (no signal there);
     * (the client passes an env entry named s through env(1), so $s is still ours) */
    "if [ -n \"$s\" ]; then E \"$s\" \"$n\" \"$p\" \"$g\" ' relay' \"$@\"; eval \"$t\"; "
    "exec \"$s\" \"$@\"; fi\n"
    /* perl runs before the env is exported: PERL5OPT and the like cannot reach it; the
     * group exists before "ok" */
    "if [ -n \"$q\" ]; then exec \"$q\" -e \"setpgrp;${k}exec@ARGV;exit 127\" -- /bin/sh -c "
    "\"$o$t\"'\n"
    "exec \"$@\"' sh \"$n\" \"$p\" \"$g\" ' relay' \"$@\"; fi\n"
    "E '' \"$n\" \"$p\" \"$g\" ' relay' \"$@\"\n"
    "eval \"$t\"\n"
    "exec \"$@\"\n"
    /* the subshell's own stderr is /dev/null: dash reports a job killed by a signal */
    ") 2>&5 3>&- 4>&- 5>&- 6>&-; echo $? >&6; } 5>&2 2>/dev/null | cat >&3 3>&- 4>&- 6>&-; "
    "} 2>&1 | cat >&4 3>&- 4>&- 6>&-; } 6>&1 )\n"
    "case $r in ''|*[!0-9]*) r=255;; esac\n";
/*
 * The hold: the relay is done, the command's output all out. The wrapper lets go of the
 * channel's pipes, so the server sends EOF, and waits (at most 10 s) for the client's
 * USR1 (the channel's signal request) before it ends: its end is what makes Dropbear
 * look at every channel of the connection (ssh_internal.h, fragile_open).
 */
static const char wrapper_hold[] =
    "exec >/dev/null 2>&1 3>&- 4>&-\n"
    "if [ -z \"$G\" ]; then sleep 10 & w=$!; [ -z \"$G\" ] || kill -s KILL $w 2>/dev/null; "
    "wait $w; fi\n"
    "trap : USR1\n";
static const char wrapper_end[] =
    "if [ \"$r\" -gt 128 ] && x=$(kill -l $((r - 128)) 2>/dev/null); then\n"
    "case $x in HUP|INT|QUIT|ILL|TRAP|ABRT|BUS|FPE|KILL|USR1|SEGV|USR2|PIPE|ALRM|TERM|XCPU|"
    "XFSZ|VTALRM|PROF|SYS)\n"
    "trap - HUP INT QUIT TERM USR1 USR2 ALRM\n"
    "ulimit -c 0 2>/dev/null\n"
    /* a signal the wrapper inherited ignored: re-raised by what can reset it */
    "case $x$D in\n"
    "KILL*) ;;\n"
    "*/env) exec $D --default-signal=\"$x\" /bin/sh -c 'kill -s \"$1\" $$; exit \"$2\"' sh "
    "\"$x\" \"$r\";;\n"
    "*/perl) exec $D -e '$SIG{$ARGV[0]}=\"DEFAULT\";kill$ARGV[0],$$;exit$ARGV[1]' \"$x\" "
    "\"$r\";;\n"
    "esac\n"
    "kill -s \"$x\" $$;;\n"
    "esac\n"
    "fi\n"
    "exit \"$r\"";

int ssh_wrap_build(const ssh_wrap *w, sstr *out)
{
	char count[32];
	snprintf(count, sizeof count, "%zu", w->argc);
	sstr script = {0};
	if (sstr_adds(&script, wrapper_head) < 0 || sstr_adds(&script, count) < 0 ||
	    sstr_adds(&script, wrapper_tail) < 0 ||
	    (w->hold && sstr_adds(&script, wrapper_hold_trap) < 0) ||
	    sstr_adds(&script, wrapper_relay) < 0 ||
	    (w->hold && sstr_adds(&script, wrapper_hold) < 0) ||
	    sstr_adds(&script, wrapper_end) < 0)
		return -1;
	int rc = -1;
	if (sstr_adds(out, "exec /bin/sh -c ") < 0 || sstr_add_quoted(out, script.p) < 0 ||
	    sstr_adds(out, " sh ") < 0 || sstr_add_quoted(out, w->nonce) < 0 ||
	    sstr_adds(out, " ") < 0 || sstr_add_quoted(out, w->cwd ? w->cwd : "") < 0 ||
	    sstr_adds(out, " ") < 0 ||
	    sstr_add_quoted(out, w->check_prog ? w->check_prog : "") < 0 ||
	    sstr_adds(out, w->check_path ? " = " : " - ") < 0 ||
	    sstr_add_quoted(out, w->check_path ? w->check_path : "") < 0)
		goto out;
	for (size_t i = 0; i < w->env_count; i++) {
		if (sstr_adds(out, " ") < 0 || sstr_add_quoted(out, w->env[i]) < 0)
			goto out;
	}
	for (size_t i = 0; i < w->argc; i++) {
		if (sstr_adds(out, " ") < 0 || sstr_add_quoted(out, w->argv[i]) < 0)
			goto out;
	}
	rc = 0;
out:
	sstr_free(&script);
	return rc;
}
