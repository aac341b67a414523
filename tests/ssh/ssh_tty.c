/*
 * Terminals over SSH (spawn with tty, proc_resize), shared by the OpenSSH and the Dropbear
 * tests, for native and agent mode: each case takes a connection's op table and follows
 * the process through the transport's subscribe slot, as the client does. Every wait is on output
 * or an exit, bounded by TTY_WAIT_MS; the remote side polls where a shell has to (a WINCH trap runs
 * between commands).
 */
#include "ssh_tty.h"

#include "asp/transport.h"
#include "asp_ssh.h"
#include "conformance.h"

#include <CUnit/CUnit.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TTY_WAIT_MS 20000

/* What a follower saw: stdout as one string, stderr's byte count, the exit. */
typedef struct tty_seen {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char *out;
	size_t len;
	uint64_t next, err_bytes;
	bool bad_offset, exited, lost;
	int64_t exit_code;
	char signal[32];
	bool timed_out;
} tty_seen;

static long long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	tty_seen *w = user;
	pthread_mutex_lock(&w->mu);
	if (stream != ASP_STREAM_STDOUT) {
		w->err_bytes += len;
	} else {
		if (offset != w->next)
			w->bad_offset = true;
		w->next = offset + len;
		char *n = realloc(w->out, w->len + len + 1);
		if (n) {
			memcpy(n + w->len, data, len);
			w->out = n;
			w->len += len;
			w->out[w->len] = '\0';
		}
	}
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void on_exit_ev(void *user, const asp_exit_event *ev)
{
	tty_seen *w = user;
	pthread_mutex_lock(&w->mu);
	w->exited = true;
	w->exit_code = ev->exit_code;
	w->timed_out = ev->timed_out;
	snprintf(w->signal, sizeof w->signal, "%s", ev->signal ? ev->signal : "");
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void on_lost(void *user, uint64_t proc, const asp_error *err)
{
	(void)proc;
	(void)err;
	tty_seen *w = user;
	pthread_mutex_lock(&w->mu);
	w->lost = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static const asp_proc_callbacks tty_cb = {on_output, on_exit_ev, on_lost};

static void seen_init(tty_seen *w)
{
	memset(w, 0, sizeof *w);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
}

static void seen_free(tty_seen *w)
{
	free(w->out);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
}

/* Waits until stdout holds `needle` (NULL: until the exit); whether it did in time. */
static bool wait_for(tty_seen *w, const char *needle)
{
	long long until = mono_ms() + TTY_WAIT_MS;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		bool done = needle ? (w->out && strstr(w->out, needle)) : w->exited;
		if (done || w->lost || (needle && w->exited) || mono_ms() >= until) {
			pthread_mutex_unlock(&w->mu);
			if (!done)
				fprintf(stderr,
				        "\n  waited for %s (exited %d, code %lld, signal '%s', "
				        "lost %d); output so far: [%s]\n",
				        needle ? needle : "the exit", w->exited,
				        (long long)w->exit_code, w->signal, w->lost,
				        w->out ? w->out : "");
			return done;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&w->cv, &w->mu, &ts);
	}
}

static conf_streaming streaming;
static pthread_once_t streaming_once = PTHREAD_ONCE_INIT;

static void streaming_init(void)
{
	conf_transport_streaming(&streaming, &asp_transport_ssh);
}

static asp_status spawn_tty(const ssh_tty_target *t, const char *cmd, const asp_tty *tty,
                            tty_seen *w, uint64_t *proc, asp_error *err)
{
	pthread_once(&streaming_once, streaming_init);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = cmd;
	p.tty = tty;
	return streaming.spawn(streaming.ctx, t->self, &p, &tty_cb, w, proc, err);
}

static asp_status type(const ssh_tty_target *t, uint64_t proc, const char *s, bool eof,
                       asp_error *err)
{
	asp_proc_write_params p;
	asp_proc_write_params_init(&p);
	p.proc = proc;
	p.data.data = (const uint8_t *)s;
	p.data.len = strlen(s);
	p.eof = eof;
	asp_proc_write_result r;
	asp_arena *a = asp_arena_new();
	asp_status st = t->ops->proc_write(t->self, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

static asp_status resize(const ssh_tty_target *t, uint64_t proc, uint64_t rows, uint64_t cols,
                         asp_error *err)
{
	asp_proc_resize_params p;
	asp_proc_resize_params_init(&p);
	p.proc = proc;
	p.rows = rows;
	p.cols = cols;
	asp_proc_resize_result r;
	asp_arena *a = asp_arena_new();
	asp_status st = t->ops->proc_resize(t->self, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

static asp_status signal_proc(const ssh_tty_target *t, uint64_t proc, const char *sig,
                              asp_error *err)
{
	asp_proc_signal_params p;
	asp_proc_signal_params_init(&p);
	p.proc = proc;
	p.signal = sig;
	asp_proc_signal_result r;
	asp_arena *a = asp_arena_new();
	asp_status st = t->ops->proc_signal(t->self, &p, &r, a, err);
	asp_arena_free(a);
	return st;
}

static void unfollow(const ssh_tty_target *t, uint64_t proc)
{
	pthread_once(&streaming_once, streaming_init);
	streaming.detach(streaming.ctx, t->self, proc);
}

/* Waits for the process's exit, checks its code, and lets it go. */
static void end_with(const ssh_tty_target *t, uint64_t proc, tty_seen *w, int64_t code)
{
	CU_ASSERT_TRUE(wait_for(w, NULL));
	CU_ASSERT_EQUAL(w->exit_code, code);
	unfollow(t, proc);
	seen_free(w);
}

void ssh_tty_hello(const ssh_tty_target *t)
{
	asp_arena *a = asp_arena_new();
	asp_hello_params p;
	asp_hello_params_init(&p);
	asp_hello_result r;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(t->ops->hello(t->self, &p, &r, a, &err), ASP_OK);
	bool pty = false, op = false;
	for (size_t i = 0; i < r.features.count; i++)
		pty |= strcmp(r.features.items[i], "pty") == 0;
	for (size_t i = 0; i < r.ops.count; i++)
		op |= strcmp(r.ops.items[i], "proc_resize") == 0;
	CU_ASSERT_TRUE(pty);
	CU_ASSERT_TRUE(op);
	asp_arena_free(a);
}

/*
 * On the terminal: stdin, stdout and stderr are it, the command leads its session with it
 * as controlling terminal, `stty size` is the size asked for, TERM the type asked for (the
 * request's env does not override it), everything arrives on stdout with none of the
 * login shell's noise or the wrapper's lines, and the exit code is the command's.
 */
void ssh_tty_basics(const ssh_tty_target *t)
{
	static const char cmd[] =
	    "[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo on-a-tty; "
	    "read -r x x x x x sid x </proc/$$/stat; [ \"$sid\" = $$ ] && echo leader; "
	    "{ : </dev/tty; } 2>/dev/null && echo ctty; "
	    "echo \"size=$(stty size)\" \"term=$TERM\" \"keep=$KEEP\"; "
	    "echo to-stderr >&2; exit 7";
	asp_tty tty = {.rows = 33, .cols = 101, .term = "vt100"};
	static const asp_strmap_entry env[] = {{"TERM", "dumb"}, {"KEEP", "kept"}};
	pthread_once(&streaming_once, streaming_init);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = cmd;
	p.tty = &tty;
	p.has_env = true;
	p.env = (asp_strmap){env, 2};
	tty_seen w;
	seen_init(&w);
	uint64_t proc = 0;
	asp_error err;
	asp_status st = streaming.spawn(streaming.ctx, t->self, &p, &tty_cb, &w, &proc, &err);
	if (st != ASP_OK)
		fprintf(stderr, "\n  spawn: %s\n", err.message);
	CU_ASSERT_EQUAL_FATAL(st, ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, NULL));
	pthread_mutex_lock(&w.mu);
	const char *o = w.out ? w.out : "";
	CU_ASSERT_PTR_NOT_NULL(strstr(o, "on-a-tty\r\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(o, "leader\r\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(o, "ctty\r\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(o, "size=33 101 term=vt100 keep=kept\r\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(o, "to-stderr\r\n"));
	CU_ASSERT_PTR_NULL(strstr(o, "noise"));
	CU_ASSERT_PTR_NULL(strstr(o, "\001ASP"));
	CU_ASSERT_EQUAL(w.err_bytes, 0);
	CU_ASSERT_FALSE(w.bad_offset);
	CU_ASSERT_EQUAL(w.exit_code, 7);
	CU_ASSERT_STRING_EQUAL(w.signal, "");
	if (!strstr(o, "leader") || !strstr(o, "size=33 101"))
		fprintf(stderr, "\n  output: [%s]\n", o);
	pthread_mutex_unlock(&w.mu);
	unfollow(t, proc);
	seen_free(&w);
}

/* proc_resize: the foreground group gets SIGWINCH and `stty size` shows the new size. */
void ssh_tty_resize(const ssh_tty_target *t)
{
	asp_tty tty = {.rows = 24, .cols = 80};
	tty_seen w;
	seen_init(&w);
	uint64_t proc = 0;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(
	    spawn_tty(t,
	              "trap 'echo \"winch=$(stty size)\"' WINCH; echo \"trap-$((1+1))\"; "
	              "while :; do sleep 0.05; done",
	              &tty, &w, &proc, &err),
	    ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, "trap-2"));
	CU_ASSERT_EQUAL(resize(t, proc, 50, 132, &err), ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, "winch=50 132"));
	CU_ASSERT_EQUAL(resize(t, proc, 1, 4096, &err), ASP_OK); /* the limits are sizes */
	CU_ASSERT_TRUE(wait_for(&w, "winch=1 4096"));
	/* bad sizes: invalid_argument, the terminal unchanged */
	CU_ASSERT_EQUAL(resize(t, proc, 0, 80, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_EQUAL(resize(t, proc, 24, 4097, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_EQUAL(signal_proc(t, proc, "KILL", &err), ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, NULL));
	CU_ASSERT_STRING_EQUAL(w.signal, "KILL");
	/* finished: invalid_argument */
	CU_ASSERT_EQUAL(resize(t, proc, 30, 90, &err), ASP_E_INVALID_ARGUMENT);
	unfollow(t, proc);
	seen_free(&w);
}

/*
 * "\x03" typed into an interactive sh interrupts the foreground `sleep` through the line
 * discipline, and the shell goes on; its exit code is ours.
 */
void ssh_tty_interrupt(const ssh_tty_target *t)
{
	asp_tty tty = {.rows = 24, .cols = 80};
	tty_seen w;
	seen_init(&w);
	uint64_t proc = 0;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(spawn_tty(t, "exec sh -i", &tty, &w, &proc, &err), ASP_OK);
	long long t0 = mono_ms();
	/*
	 * The echo of the typed line shows "$((20+1))", its output "21". The job prints it
	 * itself, so it is the terminal's foreground group by then: a Ctrl-C typed while the
	 * shell is between commands would reach the shell instead, which goes on.
	 */
	CU_ASSERT_EQUAL(
	    type(t, proc, "sh -c 'echo \"started-$((20+1))\"; exec sleep 60'\n", false, &err),
	    ASP_OK);
	CU_ASSERT_TRUE_FATAL(wait_for(&w, "started-21"));
	CU_ASSERT_EQUAL(type(t, proc, "\003", false, &err), ASP_OK);
	CU_ASSERT_EQUAL(type(t, proc, "echo \"alive-$((40+2))\"\n", false, &err), ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, "alive-42"));
	CU_ASSERT_TRUE(mono_ms() - t0 < 30000); /* not the sleep's 60 s */
	CU_ASSERT_EQUAL(type(t, proc, "exit 3\n", false, &err), ASP_OK);
	end_with(t, proc, &w, 3);
}

/*
 * proc_write's eof types Ctrl-D: `cat` reads end of input and exits; nothing more may be
 * written. spawn's stdin_eof does the same at once.
 */
void ssh_tty_eof(const ssh_tty_target *t)
{
	asp_tty tty = {.rows = 24, .cols = 80};
	tty_seen w;
	seen_init(&w);
	uint64_t proc = 0;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(
	    spawn_tty(t, "cat; echo \"cat-ended-$((3*3))\"", &tty, &w, &proc, &err), ASP_OK);
	CU_ASSERT_EQUAL(type(t, proc, "hello\n", false, &err), ASP_OK);
	/* echoed by the terminal, then written back by cat */
	CU_ASSERT_TRUE(wait_for(&w, "hello\r\nhello\r\n"));
	CU_ASSERT_EQUAL(type(t, proc, "", true, &err), ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, "cat-ended-9"));
	CU_ASSERT_EQUAL(type(t, proc, "more\n", false, &err), ASP_E_INVALID_ARGUMENT);
	end_with(t, proc, &w, 0);

	seen_init(&w);
	pthread_once(&streaming_once, streaming_init);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "cat; echo \"at-once-$((2*2))\"";
	p.tty = &tty;
	p.stdin_eof = true;
	CU_ASSERT_EQUAL_FATAL(streaming.spawn(streaming.ctx, t->self, &p, &tty_cb, &w, &proc, &err),
	                      ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, "at-once-4"));
	end_with(t, proc, &w, 0);
}

/* proc_signal and timeout_ms reach a terminal's process as any other's. */
void ssh_tty_signal_timeout(const ssh_tty_target *t)
{
	asp_tty tty = {.rows = 24, .cols = 80};
	tty_seen w;
	seen_init(&w);
	uint64_t proc = 0;
	asp_error err;
	CU_ASSERT_EQUAL_FATAL(
	    spawn_tty(t, "echo \"up-$((5+5))\"; exec sleep 60", &tty, &w, &proc, &err), ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, "up-10"));
	CU_ASSERT_EQUAL(signal_proc(t, proc, "TERM", &err), ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, NULL));
	CU_ASSERT_STRING_EQUAL(w.signal, "TERM");
	CU_ASSERT_EQUAL(w.exit_code, -1);
	unfollow(t, proc);
	seen_free(&w);

	seen_init(&w);
	pthread_once(&streaming_once, streaming_init);
	asp_spawn_params p;
	asp_spawn_params_init(&p);
	p.command = "sleep 60";
	p.tty = &tty;
	p.timeout_ms = 300;
	long long t0 = mono_ms();
	CU_ASSERT_EQUAL_FATAL(streaming.spawn(streaming.ctx, t->self, &p, &tty_cb, &w, &proc, &err),
	                      ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, NULL));
	CU_ASSERT_TRUE(w.timed_out);
	CU_ASSERT_TRUE(mono_ms() - t0 < 30000);
	unfollow(t, proc);
	seen_free(&w);
}

/* Bad input: clear errors, nothing started. */
void ssh_tty_bad_input(const ssh_tty_target *t)
{
	asp_error err;
	tty_seen w;
	seen_init(&w);
	uint64_t proc = 0;
	asp_tty zero = {.rows = 0, .cols = 80}, huge = {.rows = 24, .cols = 4097};
	asp_tty blank = {.rows = 24, .cols = 80, .term = ""};
	char long_term[200];
	memset(long_term, 'x', sizeof long_term - 1);
	long_term[sizeof long_term - 1] = '\0';
	asp_tty too_long = {.rows = 24, .cols = 80, .term = long_term};
	CU_ASSERT_EQUAL(spawn_tty(t, "true", &zero, &w, &proc, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "rows"));
	CU_ASSERT_EQUAL(spawn_tty(t, "true", &huge, &w, &proc, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_EQUAL(spawn_tty(t, "true", &blank, &w, &proc, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_EQUAL(spawn_tty(t, "true", &too_long, &w, &proc, &err), ASP_E_INVALID_ARGUMENT);
	/* an unknown handle */
	CU_ASSERT_EQUAL(resize(t, 987654321, 24, 80, &err), ASP_E_NOT_FOUND);
	/* a process without a terminal */
	CU_ASSERT_EQUAL_FATAL(
	    spawn_tty(t, "echo \"plain-$((1+2))\"; exec cat", NULL, &w, &proc, &err), ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, "plain-3"));
	CU_ASSERT_EQUAL(resize(t, proc, 24, 80, &err), ASP_E_INVALID_ARGUMENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "no terminal"));
	CU_ASSERT_EQUAL(type(t, proc, "", true, &err), ASP_OK);
	end_with(t, proc, &w, 0);
}

/* A server that refuses terminals: spawn with tty is unsupported naming the reason, and the
 * connection goes on (a spawn without tty runs). */
void ssh_tty_refused(const ssh_tty_target *t)
{
	asp_tty tty = {.rows = 24, .cols = 80};
	tty_seen w;
	seen_init(&w);
	uint64_t proc = 0;
	asp_error err;
	CU_ASSERT_EQUAL(spawn_tty(t, "true", &tty, &w, &proc, &err), ASP_E_UNSUPPORTED);
	CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "refused a terminal"));
	CU_ASSERT_EQUAL_FATAL(spawn_tty(t, "echo \"still-$((1+1))\"", NULL, &w, &proc, &err),
	                      ASP_OK);
	CU_ASSERT_TRUE(wait_for(&w, NULL));
	CU_ASSERT_TRUE(w.out && strstr(w.out, "still-2"));
	CU_ASSERT_EQUAL(w.exit_code, 0);
	unfollow(t, proc);
	seen_free(&w);
}

int ssh_tty_key_no_pty(const char *authorized_keys, char *saved, size_t cap)
{
	FILE *f = fopen(authorized_keys, "r");
	if (!f)
		return -1;
	size_t n = fread(saved, 1, cap - 1, f);
	fclose(f);
	saved[n] = '\0';
	f = fopen(authorized_keys, "w");
	if (!f)
		return -1;
	fprintf(f, "no-pty %s", saved);
	return fclose(f) == 0 ? 0 : -1;
}

void ssh_tty_key_restore(const char *authorized_keys, const char *saved)
{
	FILE *f = fopen(authorized_keys, "w");
	if (f) {
		fputs(saved, f);
		fclose(f);
	}
}
