/*
 * tree_write and tree_read in native mode (docs/design.md, "Trees as one stream"): the
 * sandbox's own tar on an exec channel, behind a small sh script, with the stream checked
 * here as it passes, since a tar of the sandbox (GNU, busybox, whatever version) would
 * not refuse a hostile member the way asp-agent does.
 *
 * tree_write: the script makes the temporary directory, says "ASPTREE ready" on stdout and
 * runs `tar -x` on its stdin; proc_write feeds it in offset order through asp_tar_reader,
 * and only bytes the reader accepted go on. When the reader sees the end-of-archive, a
 * sentinel member (".asp-tree-done-NONCE", carrying the root's mtime) is sent before the
 * end blocks: the script puts the tree in place only when tar extracted the sentinel, so
 * a stream that was refused, cut or cancelled here, or a tar that took a truncated stream
 * for a whole one, leaves nothing. The script then renames the temporary to the target,
 * or checks and moves its entries into the existing target, and says "ASPTREE err CODE
 * MESSAGE" on stdout when it cannot.
 *
 * tree_read: `tar -c` in the directory (the wrapper checks it exists, so a missing one is
 * the call's not_found); its output goes through asp_tar_reader and comes out re-encoded
 * by asp_tar_header, minus what `exclude` names, so the follower sees the same stream,
 * and the same refusals, as from asp-agent. The filter runs on the delivery thread:
 * a follower that stops reading stops the channel, as for any process.
 *
 * Each tree handle is a spawned process of ssh_proc.c that this file follows itself (an
 * asp_proc_sub): its proc_write, proc_wait and proc_signal come here first.
 */
#include "ssh_internal.h"
#include "ssh_sftp.h"

#include "asp/tar.h"
#include "asp/tree.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define READY_WAIT_MS  30000u /* the script's first line, at most */
#define OFFSET_WAIT_MS 60000u /* a write ahead of the stream waits for the ones before it */
#define OUT_CHUNK      (64u * 1024u)
#define KEEP_DONE      64 /* finished tree handles still answered */
#define LINE_MAX_B     512
#define CLEAN_WAIT_MS  30000u /* the script's removal of a temporary, at most */

/*
 * The write script: $1 the target, $2 the nonce. Exit 0 once the tree is in place.
 * Temporaries are named as asp-agent names them (the hex pid of their owner, which runs
 * as long as the write), so each removes what the other left: a temporary whose pid no
 * longer runs is removed by the next write beside it. Without tar the script makes the
 * temporary, says "ASPTREE sftp HEX INSIDE" and holds it while the members go over SFTP
 * (ssh_tree_sftp.c); the line "commit" on its stdin, once every member is in, has it put
 * the tree in place as after tar; its stdin's end without it (the client's abort, the
 * connection's loss) has it remove what is left of the temporary.
 */
static const char write_script[] =
    "t=$1 n=$2\n"
    "say() { echo \"ASPTREE err $1 $2\"; exit 1; }\n"
    "gone() { rm -rf -- \"$1\" 2>/dev/null || { chmod -R u+rwx -- \"$1\"; rm -rf -- \"$1\"; "
    "} 2>/dev/null; }\n"
    "alive() { kill -0 \"$1\" 2>/dev/null || [ -d \"/proc/$1\" ]; }\n"
    "tar=1\n"
    "command -v tar >/dev/null 2>&1 || tar=\n"
    "while :; do case $t in ?*/) t=${t%/};; *) break;; esac; done\n"
    "hex=$(printf %x $$)\n"
    "if [ -d \"$t\" ]; then\n"
    "  inside=1 pre=$t/.asp-tree-\n"
    "elif [ -e \"$t\" ] || [ -L \"$t\" ]; then\n"
    "  say not_a_directory \"tree_write: $t exists and is not a directory\"\n"
    "else\n"
    "  inside=\n"
    "  case $t in */*) p=${t%/*} b=${t##*/};; *) p=. b=$t;; esac\n"
    "  [ -n \"$p\" ] || p=/\n"
    "  if ! mkdir -p -- \"$p\" 2>/dev/null; then\n"
    "    [ -e \"$p\" ] && [ ! -d \"$p\" ] && say not_a_directory \"tree_write: $p is not a "
    "directory\"\n"
    "    say io_error \"tree_write: cannot make the directory $p\"\n"
    "  fi\n"
    "  pre=$p/.$b.asp-tree-\n"
    "fi\n"
    "for d in \"$pre\"*; do\n"
    "  [ -d \"$d\" ] || continue\n"
    "  x=${d#\"$pre\"} x=${x%%-*}\n"
    "  case $x in ''|*[!0-9a-f]*) continue;; esac\n"
    "  alive \"$((0x$x))\" || gone \"$d\"\n"
    "done\n"
    "tmp=$pre$hex-$n\n"
    "if ! mkdir -- \"$tmp\" 2>/dev/null; then\n"
    "  [ -w \"${tmp%/*}\" ] || say permission_denied \"tree_write: cannot write in "
    "${tmp%/*}\"\n"
    "  say io_error \"tree_write: cannot make $tmp\"\n"
    "fi\n"
    "trap 'gone \"$tmp\"; rm -f -- \"$tmp.ref\"' EXIT\n"
    "trap 'exit 1' INT TERM HUP\n"
    "chmod \"$(umask -S)\" \"$tmp\"\n"
    "if [ -z \"$tar\" ]; then\n"
    "  echo \"ASPTREE sftp $hex ${inside:-0}\"\n"
    "  read -r line || exit 1\n"
    "  [ \"$line\" = commit ] || exit 1\n"
    "else\n"
    "  echo 'ASPTREE ready'\n"
    "  if tar --version 2>/dev/null | grep -q 'GNU tar'; then\n"
    "    tar -x -p -o -f - -C \"$tmp\"\n"
    "  else\n"
    "    tar -x -o -f - -C \"$tmp\"\n"
    "  fi\n"
    "  st=$?\n"
    "  s=$tmp/.asp-tree-done-$n\n"
    "  [ -f \"$s\" ] || exit 3\n"
    "  [ $st = 0 ] || say io_error \"tree_write: the sandbox's tar failed (exit $st)\"\n"
    "  mv -- \"$s\" \"$tmp.ref\" && touch -r \"$tmp.ref\" \"$tmp\" && rm -f -- \"$tmp.ref\"\n"
    "fi\n"
    "find \"$tmp\" \\( -perm -4000 -o -perm -2000 \\) -exec chmod ug-s {} + 2>/dev/null\n"
    "if [ -z \"$inside\" ] && [ ! -e \"$t\" ] && [ ! -L \"$t\" ]; then\n"
    "  mv -- \"$tmp\" \"$t\" || say io_error \"tree_write: cannot rename the tree to $t\"\n"
    "  trap - EXIT\n"
    "  exit 0\n"
    "fi\n"
    "check() {\n"
    "  for e in \"$1\"/* \"$1\"/.[!.]* \"$1\"/..?*; do\n"
    "    [ -e \"$e\" ] || [ -L \"$e\" ] || continue\n"
    "    d=$2/${e##*/} r=$3${e##*/}\n"
    "    [ \"$d\" = \"$tmp\" ] && continue\n"
    "    if [ -d \"$e\" ] && [ ! -L \"$e\" ]; then\n"
    "      if [ -d \"$d\" ] && [ ! -L \"$d\" ]; then check \"$e\" \"$d\" \"$r/\"\n"
    "      elif [ -e \"$d\" ] || [ -L \"$d\" ]; then say not_a_directory \"tree_write: member "
    "'$r' is a directory but $t/$r is a file or symlink; remove it first\"\n"
    "      fi\n"
    "    elif [ -d \"$d\" ] && [ ! -L \"$d\" ]; then say is_a_directory \"tree_write: member "
    "'$r' is a file or symlink but $t/$r is a directory; remove it first\"\n"
    "    fi\n"
    "  done\n"
    "}\n"
    "move() {\n"
    "  for e in \"$1\"/* \"$1\"/.[!.]* \"$1\"/..?*; do\n"
    "    [ -e \"$e\" ] || [ -L \"$e\" ] || continue\n"
    "    d=$2/${e##*/}\n"
    "    [ \"$d\" = \"$tmp\" ] && continue\n"
    "    if [ -d \"$e\" ] && [ ! -L \"$e\" ] && [ -d \"$d\" ] && [ ! -L \"$d\" ]; then\n"
    "      move \"$e\" \"$d\" || return 1\n"
    "    else\n"
    "      if [ -e \"$d\" ] || [ -L \"$d\" ]; then rm -f -- \"$d\" || return 1; fi\n"
    "      mv -- \"$e\" \"$d\" || return 1\n"
    "    fi\n"
    "  done\n"
    "}\n"
    "check \"$tmp\" \"$t\" ''\n"
    "move \"$tmp\" \"$t\" || say io_error \"tree_write: cannot move the tree into $t\"\n"
    "exit 0\n";

/*
 * The read script, run in the directory (the wrapper's cwd): the arguments are GNU tar's
 * --exclude words for the simple patterns (the filter here applies every pattern, these
 * only save sending what it would drop). Says "ASPTREE ready" on stderr first.
 */
static const char read_script[] =
    "command -v tar >/dev/null 2>&1 || { echo 'ASPTREE notar' >&2; exit 127; }\n"
    "echo 'ASPTREE ready' >&2\n"
    "if tar --version 2>/dev/null | grep -q 'GNU tar'; then\n"
    "  exec tar -c -f - --sort=name --hard-dereference --numeric-owner \"$@\" .\n"
    "fi\n"
    "exec tar -c -f - .\n";

typedef struct tree_h tree_h;

struct ssh_trees {
	ssh_procs *ps;
	sftpc *sftp;    /* where the sandbox has no tar */
	size_t budget;  /* bytes of data one SFTP read may carry */
	bool closing;   /* walks over SFTP stop */
	unsigned walks; /* walks over SFTP running (their threads detached) */
	pthread_cond_t walks_cv;
	pthread_mutex_t mu; /* the list and every handle's state; never held with sshc.mu */
	tree_h *head;
	unsigned done; /* listed handles that finished */
	uint64_t seq;  /* finishing order */
};

struct tree_h {
	tree_h *next;
	ssh_trees *ts;
	uint64_t proc;
	bool reading;
	bool listed; /* answered by proc_write/wait/signal */
	unsigned refs;
	pthread_cond_t cv;
	/* what the script and its exit said (under ts->mu) */
	bool ready, notar, exited, lost, cancelled;
	int64_t exit_code;
	char sig[16];
	char line[LINE_MAX_B];
	size_t line_len;
	char code[32], msg[LINE_MAX_B]; /* "ASPTREE err CODE MESSAGE" */
	char tail[1024];                /* the end of tar's stderr */
	size_t tail_len;
	asp_error lost_why;
	bool failed; /* the stream broke the rules (here) */
	asp_error fail;
	asp_tree_counts counts;
	uint64_t done_seq;
	/* tree_write's input (feed_mu serializes the writes; in_off under ts->mu) */
	pthread_mutex_t feed_mu;
	uint64_t in_off;
	bool complete, eof_sent;
	bool input_closed; /* the caller's eof came */
	asp_tar_reader *rd;
	char nonce[17];
	bool has_root;
	int64_t root_mtime;
	/* tree_read's filter (the delivery thread only) */
	int64_t read_exit; /* the exit its follower got (under ts->mu) */
	asp_proc_sub *ext;
	asp_tree_exclude *ex;
	asp_tar_reader *frd;
	bool skipping, ended_stream;
	uint8_t *out;
	size_t out_len;
	uint64_t out_off;
	/* no tar in the sandbox: the tree goes over SFTP (ssh_tree_sftp.c) and the handle
	 * ends with it, not with the script */
	bool via_sftp;
	sftp_tw *tw;       /* (h->tw set and cleared under ts->mu too, for a cancel) */
	char *dir;         /* tree_read's directory */
	char hex[17];      /* the script's pid, in the temporary's name */
	bool inside;       /* the temporary is in the target */
	bool script_ended; /* the write script exited (under ts->mu) */
	bool committed;    /* the script put the tree over SFTP in place */
	int64_t script_exit;
};

/* ---- handles ---------------------------------------------------------------------- */

ssh_trees *ssh_trees_new(ssh_procs *ps, sftpc *sftp, size_t budget)
{
	ssh_trees *ts = calloc(1, sizeof *ts);
	if (!ts)
		return NULL;
	ts->ps = ps;
	ts->sftp = sftp;
	ts->budget = budget;
	pthread_mutex_init(&ts->mu, NULL);
	pthread_cond_init(&ts->walks_cv, NULL);
	return ts;
}

static void handle_free(tree_h *h)
{
	if (h->tw) /* closing mid-write: the script's channel is gone, its own removal races
	            * the requests in flight, so what is left goes over SFTP too */
		sftp_tw_remove(h->tw);
	sftp_tw_free(h->tw);
	free(h->dir);
	asp_tar_reader_free(h->rd);
	asp_tar_reader_free(h->frd);
	asp_tree_exclude_free(h->ex);
	asp_proc_sub_unref(h->ext);
	free(h->out);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->feed_mu);
	free(h);
}

void ssh_trees_free(ssh_trees *ts)
{
	if (!ts)
		return;
	pthread_mutex_lock(&ts->mu);
	ts->closing = true; /* a walk stops at its next bytes (SFTP calls have deadlines) */
	while (ts->walks)
		pthread_cond_wait(&ts->walks_cv, &ts->mu);
	pthread_mutex_unlock(&ts->mu);
	while (ts->head) {
		tree_h *h = ts->head;
		ts->head = h->next;
		handle_free(h);
	}
	pthread_cond_destroy(&ts->walks_cv);
	pthread_mutex_destroy(&ts->mu);
	free(ts);
}

/* Under ts->mu: drops a reference; an unlisted handle nobody holds goes. */
static void unref_locked(ssh_trees *ts, tree_h *h)
{
	if (--h->refs || h->listed)
		return;
	for (tree_h **pp = &ts->head; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	handle_free(h);
}

/* Under ts->mu: finished handles past KEEP_DONE are answered no more (as processes). */
static void evict_locked(ssh_trees *ts)
{
	while (ts->done > KEEP_DONE) {
		tree_h *old = NULL;
		for (tree_h *x = ts->head; x; x = x->next)
			if (x->listed && (x->exited || x->lost) &&
			    (!old || x->done_seq < old->done_seq))
				old = x;
		if (!old)
			break;
		old->listed = false;
		ts->done--;
		old->refs++;
		unref_locked(ts, old);
	}
}

/* The listed handle of `proc` with a reference taken, or NULL. */
static tree_h *find(ssh_trees *ts, uint64_t proc)
{
	pthread_mutex_lock(&ts->mu);
	tree_h *h = ts->head;
	while (h && !(h->proc == proc && h->listed))
		h = h->next;
	if (h)
		h->refs++;
	pthread_mutex_unlock(&ts->mu);
	return h;
}

static void release(ssh_trees *ts, tree_h *h)
{
	pthread_mutex_lock(&ts->mu);
	unref_locked(ts, h);
	pthread_mutex_unlock(&ts->mu);
}

/* ---- what the process says -------------------------------------------------------- */

/* Under ts->mu: one protocol line of the script. */
static void protocol_line(tree_h *h, const char *l)
{
	if (strcmp(l, "ASPTREE ready") == 0)
		h->ready = true;
	else if (strcmp(l, "ASPTREE notar") == 0)
		h->notar = true;
	else if (strncmp(l, "ASPTREE sftp ", 13) == 0) {
		/* "HEX INSIDE": the temporary is made, named by the script's pid */
		const char *x = l + 13;
		size_t n = strspn(x, "0123456789abcdef");
		if (n && n < sizeof h->hex && x[n] == ' ') {
			memcpy(h->hex, x, n);
			h->hex[n] = '\0';
			h->inside = x[n + 1] == '1';
			h->notar = true;
		}
	} else if (strncmp(l, "ASPTREE err ", 12) == 0) {
		const char *c = l + 12, *sp = strchr(c, ' ');
		size_t n = sp ? (size_t)(sp - c) : strlen(c);
		snprintf(h->code, sizeof h->code, "%.*s", (int)n, c);
		snprintf(h->msg, sizeof h->msg, "%s", sp ? sp + 1 : c);
	}
}

/* Under ts->mu: bytes of the stream that carries the script's lines. */
static void protocol_bytes(tree_h *h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\n') {
			if (h->line_len < sizeof h->line - 1)
				h->line[h->line_len++] = (char)p[i];
			continue;
		}
		h->line[h->line_len] = '\0';
		protocol_line(h, h->line);
		h->line_len = 0;
	}
}

/* Under ts->mu: the last of tar's complaints, for messages. */
static void tail_bytes(tree_h *h, const uint8_t *p, size_t n)
{
	if (n >= sizeof h->tail) {
		p += n - (sizeof h->tail - 1);
		n = sizeof h->tail - 1;
	}
	if (h->tail_len + n >= sizeof h->tail) {
		size_t drop = h->tail_len + n - (sizeof h->tail - 1);
		memmove(h->tail, h->tail + drop, h->tail_len - drop);
		h->tail_len -= drop;
	}
	memcpy(h->tail + h->tail_len, p, n);
	h->tail_len += n;
	h->tail[h->tail_len] = '\0';
}

/* tar's complaint as an error code: the errno text it ends with. */
static asp_status tar_code(const char *text)
{
	if (strstr(text, "Permission denied"))
		return ASP_E_PERMISSION_DENIED;
	if (strstr(text, "No such file"))
		return ASP_E_NOT_FOUND;
	if (strstr(text, "Not a directory"))
		return ASP_E_NOT_A_DIRECTORY;
	return ASP_E_IO_ERROR;
}

/* Its text without control characters and with the newlines as "; ". */
static void tidy(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
		s[--n] = '\0';
	for (char *c = s; *c; c++)
		if (*c == '\n')
			*c = ';';
		else if ((unsigned char)*c < 0x20)
			*c = ' ';
}

/* ---- tree_read's filter (the delivery thread) ------------------------------------- */

static void flush_out(tree_h *h)
{
	if (!h->out_len)
		return;
	asp_output_event ev = {
	    .proc = h->proc,
	    .stream = "stdout",
	    .offset = h->out_off,
	    .data = {h->out, h->out_len},
	};
	asp_proc_sub_output(h->ext, &ev); /* may block: a follower that reads slowly */
	h->out_off += h->out_len;
	h->out_len = 0;
}

static void put_out(tree_h *h, const uint8_t *p, size_t n)
{
	while (n > 0) {
		size_t k = OUT_CHUNK - h->out_len < n ? OUT_CHUNK - h->out_len : n;
		memcpy(h->out + h->out_len, p, k);
		h->out_len += k;
		p += k;
		n -= k;
		if (h->out_len == OUT_CHUNK)
			flush_out(h);
	}
}

/* Whether `path` or a directory above it is excluded. */
static bool excluded(const tree_h *h, const char *path)
{
	if (!h->ex || !path[0])
		return false;
	char buf[ASP_TAR_PATH_MAX + 1];
	size_t n = strlen(path);
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (i < n && buf[i] != '/')
			continue;
		char c = buf[i];
		buf[i] = '\0';
		bool hit = asp_tree_exclude_match(h->ex, buf);
		buf[i] = c;
		if (hit)
			return true;
	}
	return false;
}

static asp_status f_member(void *user, const asp_tar_member *m, asp_error *err)
{
	tree_h *h = user;
	h->skipping = excluded(h, m->path);
	if (h->skipping)
		return ASP_OK;
	uint8_t hdr[ASP_TAR_HEADER_MAX];
	size_t n = asp_tar_header(m, hdr, sizeof hdr, err);
	if (!n)
		return err->code;
	put_out(h, hdr, n);
	if (m->path[0])
		h->counts.entries++;
	h->counts.bytes += m->size;
	return ASP_OK;
}

static asp_status f_data(void *user, const uint8_t *p, size_t n, asp_error *err)
{
	(void)err;
	tree_h *h = user;
	if (!h->skipping)
		put_out(h, p, n);
	return ASP_OK;
}

static asp_status f_file_end(void *user, asp_error *err)
{
	(void)err;
	tree_h *h = user;
	if (h->skipping)
		return ASP_OK;
	/* padding: what the data lacks of a whole block, counted from the output itself */
	static const uint8_t zero[ASP_TAR_BLOCK];
	put_out(h, zero, asp_tar_padding(h->out_off + h->out_len));
	return ASP_OK;
}

/* The tar's stdout: checked, filtered, re-encoded, on to the follower. */
static void read_stdout(tree_h *h, const uint8_t *p, size_t n)
{
	if (h->failed || h->ended_stream)
		return;
	asp_error e;
	asp_status st = asp_tar_reader_feed(h->frd, p, n, &e);
	if (st == ASP_OK && asp_tar_reader_done(h->frd)) {
		static const uint8_t end[ASP_TAR_END_BYTES];
		put_out(h, end, sizeof end);
		h->ended_stream = true;
	}
	flush_out(h);
	if (st == ASP_OK)
		return;
	pthread_mutex_lock(&h->ts->mu);
	h->failed = true;
	h->fail = e;
	asp_error_prefix(&h->fail, st, "tree_read");
	pthread_mutex_unlock(&h->ts->mu);
	/* nothing more of it is wanted: the tar goes (a callback may call the transport) */
	asp_proc_signal_params sp;
	asp_proc_signal_params_init(&sp);
	sp.proc = h->proc;
	sp.signal = "KILL";
	asp_error ignore;
	ssh_proc_signal(h->ts->ps, &sp, &ignore);
}

/* The exit the follower gets: the stream's result, not tar's status alone. */
static void read_exit(tree_h *h, const asp_exit_event *ev)
{
	flush_out(h);
	char msg[ASP_ERROR_MESSAGE_MAX];
	asp_exit_event out = {.proc = h->proc, .exit_code = 1};
	pthread_mutex_lock(&h->ts->mu);
	bool tar_ok = ev->exit_code == 0 || ev->exit_code == 1; /* 1: files changed meanwhile */
	if (h->failed) {
		out.error = h->fail.message;
		out.error_code = asp_strerror(h->fail.code);
	} else if (ev->signal && !h->ended_stream) {
		out.exit_code = -1;
		out.signal = ev->signal;
	} else if (!h->via_sftp && (h->notar || ev->exit_code == 127)) {
		snprintf(msg, sizeof msg, "tree_read: the sandbox has no tar");
		out.error = msg;
		out.error_code = asp_strerror(ASP_E_UNSUPPORTED);
	} else if (!tar_ok || !h->ended_stream) {
		tidy(h->tail);
		snprintf(msg, sizeof msg, "tree_read: the sandbox's tar failed (exit %lld): %.600s",
		         (long long)ev->exit_code, h->tail[0] ? h->tail : "no message");
		out.error = msg;
		out.error_code = asp_strerror(tar_code(h->tail));
	} else {
		out.exit_code = 0;
		out.has_entries = out.has_bytes = true;
		out.entries = h->counts.entries;
		out.bytes = h->counts.bytes;
	}
	/* what proc_wait answers too */
	h->read_exit = out.exit_code;
	snprintf(h->msg, sizeof h->msg, "%s", out.error ? out.error : "");
	snprintf(h->code, sizeof h->code, "%s", out.error_code ? out.error_code : "");
	pthread_mutex_unlock(&h->ts->mu);
	asp_proc_sub_exit(h->ext, &out);
}

/* ---- the follower of the process -------------------------------------------------- */

static void on_output(void *user, uint64_t proc, asp_stream stream, uint64_t offset,
                      const uint8_t *data, size_t len)
{
	(void)proc;
	(void)offset;
	tree_h *h = user;
	if (h->reading && stream == ASP_STREAM_STDOUT) {
		read_stdout(h, data, len);
		return;
	}
	/* the script's lines: tree_write's on stdout, tree_read's on stderr; tar's complaints
	 * on stderr */
	pthread_mutex_lock(&h->ts->mu);
	if (stream == ASP_STREAM_STDOUT || h->reading)
		protocol_bytes(h, data, len);
	if (stream == ASP_STREAM_STDERR)
		tail_bytes(h, data, len);
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->ts->mu);
}

/* Under ts->mu: the handle has ended (exit_code as proc_wait's). */
static void ended_locked(tree_h *h, int64_t exit_code, const char *sig)
{
	h->exited = true;
	h->exit_code = exit_code;
	snprintf(h->sig, sizeof h->sig, "%s", sig ? sig : "");
	h->done_seq = ++h->ts->seq;
	if (h->listed)
		h->ts->done++;
	evict_locked(h->ts);
	pthread_cond_broadcast(&h->cv);
}

static void on_exit_ev(void *user, const asp_exit_event *ev)
{
	tree_h *h = user;
	pthread_mutex_lock(&h->ts->mu);
	bool notar = h->notar; /* its line came before the exit */
	pthread_mutex_unlock(&h->ts->mu);
	if (h->reading && !notar)
		read_exit(h, ev);
	pthread_mutex_lock(&h->ts->mu);
	if (h->line_len) { /* a last line without its newline */
		h->line[h->line_len] = '\0';
		protocol_line(h, h->line);
		h->line_len = 0;
	}
	if (notar) { /* the tree goes over SFTP: the handle ends with it */
		h->script_ended = true;
		h->script_exit = ev->exit_code;
		pthread_cond_broadcast(&h->cv);
	} else
		ended_locked(h, ev->exit_code, ev->signal);
	ssh_trees *ts = h->ts;
	unref_locked(ts, h); /* the follower's (h may be gone) */
	pthread_mutex_unlock(&ts->mu);
}

static void on_lost(void *user, uint64_t proc, const asp_error *why)
{
	(void)proc;
	tree_h *h = user;
	if (h->reading)
		asp_proc_sub_lost(h->ext, why);
	pthread_mutex_lock(&h->ts->mu);
	h->lost = true;
	h->lost_why = *why;
	h->done_seq = ++h->ts->seq;
	if (h->listed)
		h->ts->done++;
	evict_locked(h->ts);
	pthread_cond_broadcast(&h->cv);
	ssh_trees *ts = h->ts;
	unref_locked(ts, h); /* (h may be gone) */
	pthread_mutex_unlock(&ts->mu);
}

static const asp_proc_callbacks follower = {
    .on_output = on_output,
    .on_exit = on_exit_ev,
    .on_lost = on_lost,
};

/* A new handle, listed once its process runs; refs: the caller's and the follower's. */
static tree_h *handle_new(ssh_trees *ts, bool reading)
{
	tree_h *h = calloc(1, sizeof *h);
	if (!h)
		return NULL;
	h->ts = ts;
	h->reading = reading;
	h->refs = 2;
	pthread_cond_init(&h->cv, NULL);
	pthread_mutex_init(&h->feed_mu, NULL);
	return h;
}

/* Spawns the script, followed here; the handle listed. The caller's reference stays. */
static asp_status start(ssh_trees *ts, tree_h *h, asp_spawn_params *sp, asp_error *err)
{
	asp_proc_sub *sub = asp_proc_sub_new(&follower, h);
	asp_arena *a = asp_arena_new();
	asp_status st =
	    sub && a ? ASP_OK : asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
	asp_spawn_result r = {0};
	if (st == ASP_OK)
		st = ssh_procs_subscribe(ts->ps, ASP_OP_SPAWN, sp, &r, a, sub, err);
	asp_proc_sub_unref(sub);
	asp_arena_free(a);
	pthread_mutex_lock(&ts->mu);
	if (st == ASP_OK) {
		h->proc = r.proc;
		h->listed = true;
		h->next = ts->head;
		ts->head = h;
	} else {
		h->refs--; /* no follower: its callbacks never run (a failed start) */
	}
	pthread_mutex_unlock(&ts->mu);
	return st;
}

/* Waits for the script's "ready" (or its early end); ASP_OK when it is ready. */
static asp_status await_ready(tree_h *h, const char *op, asp_error *err)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += READY_WAIT_MS / 1000;
	pthread_mutex_lock(&h->ts->mu);
	while (!h->ready && !h->exited && !h->lost && !h->notar)
		if (pthread_cond_timedwait(&h->cv, &h->ts->mu, &dl) == ETIMEDOUT)
			break;
	asp_status st = ASP_OK;
	if (h->notar && h->ts->sftp)
		st = ASP_OK; /* the caller goes over SFTP */
	else if (h->notar || (h->exited && h->exit_code == 127))
		st = asp_error_set(err, ASP_E_UNSUPPORTED, NULL,
		                   "%s: the sandbox has no tar, which native SSH uses for trees; "
		                   "install it there, or use agent mode (ssh.agent)",
		                   op);
	else if (h->code[0])
		st = asp_error_set(err, asp_status_from_name(h->code, strlen(h->code)), NULL, "%s",
		                   h->msg);
	else if (h->lost)
		*err = h->lost_why, st = err->code;
	else if (!h->ready) {
		tidy(h->tail);
		st = asp_error_set(err, ASP_E_IO_ERROR, NULL, "%s: the sandbox's script %s: %s", op,
		                   h->exited ? "ended early" : "did not start in 30 s",
		                   h->tail[0] ? h->tail : "no message");
	}
	pthread_mutex_unlock(&h->ts->mu);
	return st;
}

/* Takes the handle out of the answered ones (a start that failed after spawning). */
static void unlist(ssh_trees *ts, tree_h *h)
{
	pthread_mutex_lock(&ts->mu);
	h->listed = false;
	pthread_mutex_unlock(&ts->mu);
}

/* ---- tree_write ------------------------------------------------------------------- */

static asp_status w_member(void *user, const asp_tar_member *m, asp_error *err)
{
	tree_h *h = user;
	char sentinel[40];
	snprintf(sentinel, sizeof sentinel, ".asp-tree-done-%s", h->nonce);
	if (strcmp(m->path, sentinel) == 0)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, m->path,
		                     "tar stream: member '%s': the name is reserved", m->path);
	if (!m->path[0]) {
		h->has_root = true;
		h->root_mtime = m->mtime;
	}
	return h->tw ? sftp_tw_member(h->tw, m, err) : ASP_OK;
}

static asp_status w_data(void *user, const uint8_t *p, size_t n, asp_error *err)
{
	tree_h *h = user;
	return h->tw ? sftp_tw_data(h->tw, p, n, err) : ASP_OK;
}

static asp_status w_file_end(void *user, asp_error *err)
{
	tree_h *h = user;
	return h->tw ? sftp_tw_file_end(h->tw, err) : ASP_OK;
}

/*
 * Over SFTP: the end of the write script's stdin, after which it removes what is left of
 * the temporary and exits. With `wait`, until it did (at most CLEAN_WAIT_MS); not on a
 * connection that is gone, whose end reaches the script on its own.
 */
/* Under ts->mu: until the write script ended or the connection went, CLEAN_WAIT_MS at most. */
static void wait_script_locked(tree_h *h)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += CLEAN_WAIT_MS / 1000;
	while (!h->script_ended && !h->lost)
		if (pthread_cond_timedwait(&h->cv, &h->ts->mu, &dl) == ETIMEDOUT)
			break;
}

static void script_done(tree_h *h, bool wait)
{
	ssh_trees *ts = h->ts;
	asp_proc_write_params w;
	asp_proc_write_params_init(&w);
	w.proc = h->proc;
	w.eof = true;
	asp_error ignore;
	pthread_mutex_lock(&ts->mu);
	bool was_gone = h->script_ended || h->lost;
	pthread_mutex_unlock(&ts->mu);
	if (!was_gone)
		ssh_proc_write(ts->ps, &w, &ignore);
	if (!wait || was_gone || atomic_load(&ts->sftp->c->dead))
		return;
	pthread_mutex_lock(&ts->mu);
	wait_script_locked(h);
	pthread_mutex_unlock(&ts->mu);
}

/* Whether the script removed the temporary (it exited 0 after its input's end). */
static bool script_cleaned(tree_h *h)
{
	pthread_mutex_lock(&h->ts->mu);
	bool ok = h->script_ended && h->script_exit == 0 && !h->lost;
	pthread_mutex_unlock(&h->ts->mu);
	return ok;
}

/*
 * Under feed_mu, over SFTP: the stream ended (st ASP_OK: in place) or was given up. No
 * request of the writer's is in flight once it stopped; then the script removes what is
 * left of the temporary (a refused, cut or cancelled stream's, or a merge's emptied
 * directories) before the handle ends, so a failed call has left nothing when it
 * answers. A tree renamed into place leaves nothing to remove: the script is told to end
 * and not waited for.
 */
static void sftp_end(tree_h *h, asp_status st, const asp_error *why)
{
	pthread_mutex_lock(&h->ts->mu);
	sftp_tw *tw = h->tw;
	h->tw = NULL;
	pthread_mutex_unlock(&h->ts->mu);
	bool renamed = h->committed;
	if (tw && st != ASP_OK) /* what is still queued is not sent */
		sftp_tw_cancel(tw, why);
	sftp_tw_stop(tw);
	script_done(h, !renamed);
	if (!renamed && !script_cleaned(h)) /* the script was gone, or failed: over SFTP */
		sftp_tw_remove(tw);
	sftp_tw_free(tw);
	pthread_mutex_lock(&h->ts->mu);
	if (st != ASP_OK && !h->failed && !h->cancelled) {
		h->failed = true;
		h->fail = *why;
	}
	if (!h->exited)
		ended_locked(h, st == ASP_OK ? 0 : 1, h->cancelled ? h->sig : NULL);
	pthread_mutex_unlock(&h->ts->mu);
}

/* Under feed_mu: bytes on to the script's stdin (eof: its end). */
static asp_status send_raw(tree_h *h, const uint8_t *p, size_t n, bool eof, asp_error *err)
{
	if (h->via_sftp) { /* the members went as they came; an end here is an abort */
		if (eof && !h->eof_sent) {
			h->eof_sent = true;
			asp_error e;
			asp_error_set(&e, ASP_E_IO_ERROR, NULL, "tree_write: the stream was cut");
			sftp_end(h, ASP_E_IO_ERROR, &e);
		}
		return ASP_OK;
	}
	if (h->eof_sent)
		return ASP_OK;
	asp_proc_write_params w;
	asp_proc_write_params_init(&w);
	w.proc = h->proc;
	w.data = (asp_bytes){p, n};
	w.eof = eof;
	h->eof_sent = eof;
	return ssh_proc_write(h->ts->ps, &w, err);
}

/* Under feed_mu: the sentinel member and the end blocks, then the end of stdin. */
/*
 * Every member is in over SFTP: "commit" tells the script to put the tree in place (a
 * rename, or the merge into an existing target) as it does after tar; its exit says how
 * that went.
 */
static asp_status commit(tree_h *h, asp_error *err)
{
	ssh_trees *ts = h->ts;
	static const char line[] = "commit\n";
	asp_proc_write_params w;
	asp_proc_write_params_init(&w);
	w.proc = h->proc;
	w.data = (asp_bytes){(const uint8_t *)line, sizeof line - 1};
	w.eof = true;
	asp_status st = ssh_proc_write(ts->ps, &w, err);
	if (st != ASP_OK)
		return st;
	pthread_mutex_lock(&ts->mu);
	wait_script_locked(h);
	if (h->script_ended && h->script_exit == 0 && !h->lost)
		h->committed = true;
	else if (h->code[0])
		st = asp_error_set(err, asp_status_from_name(h->code, strlen(h->code)), NULL, "%s",
		                   h->msg);
	else if (h->lost)
		*err = h->lost_why, st = err->code;
	else
		st = asp_error_set(
		    err, ASP_E_IO_ERROR, NULL,
		    "tree_write: the sandbox's script %s (exit %lld) putting the tree "
		    "in place",
		    h->script_ended ? "failed" : "did not end in 30 s", (long long)h->script_exit);
	pthread_mutex_unlock(&ts->mu);
	return st;
}

static asp_status send_end(tree_h *h, asp_error *err)
{
	if (h->via_sftp) {
		h->complete = true;
		h->eof_sent = true;
		asp_status st = sftp_tw_finish(h->tw, err);
		if (st == ASP_OK)
			st = commit(h, err);
		if (st != ASP_OK) {
			pthread_mutex_lock(&h->ts->mu);
			if (!h->failed) {
				h->failed = true;
				h->fail = *err;
			}
			pthread_mutex_unlock(&h->ts->mu);
		}
		sftp_end(h, st, err);
		return st;
	}
	char name[40];
	snprintf(name, sizeof name, ".asp-tree-done-%s", h->nonce);
	asp_tar_member m = {
	    ASP_TAR_FILE, name, NULL, 0600, h->has_root ? h->root_mtime : (int64_t)time(NULL), 0};
	uint8_t buf[ASP_TAR_HEADER_MAX + ASP_TAR_END_BYTES];
	size_t n = asp_tar_header(&m, buf, sizeof buf, err);
	if (!n)
		return err->code;
	memset(buf + n, 0, ASP_TAR_END_BYTES);
	h->complete = true;
	return send_raw(h, buf, n + ASP_TAR_END_BYTES, true, err);
}

/* The stream broke the rules: remembered for the handle's end; the script gets an end
 * without the sentinel, so it removes what tar extracted. Under feed_mu. */
static asp_status refuse(tree_h *h, const asp_error *why, asp_error *err)
{
	pthread_mutex_lock(&h->ts->mu);
	if (!h->failed && !h->cancelled) { /* (a cancel that stopped a feed stays a cancel) */
		h->failed = true;
		h->fail = *why;
	}
	*err = h->failed ? h->fail : *why;
	pthread_mutex_unlock(&h->ts->mu);
	asp_error ignore;
	send_raw(h, NULL, 0, true, &ignore);
	return err->code;
}

/*
 * `n` bytes of the stream at `offset` (has_offset false: next), then its end when `eof`.
 * Checked here; only what the decoder accepted goes on, the end blocks held back for the
 * sentinel.
 */
static asp_status feed(tree_h *h, const uint8_t *p, size_t n, bool has_offset, uint64_t offset,
                       bool eof, asp_error *err)
{
	ssh_trees *ts = h->ts;
	pthread_mutex_lock(&ts->mu);
	if (has_offset && offset < h->in_off) {
		uint64_t have = h->in_off;
		pthread_mutex_unlock(&ts->mu);
		return asp_error_set(
		    err, ASP_E_INVALID_ARGUMENT, NULL,
		    "proc_write: offset %llu of handle %llu is before the %llu bytes "
		    "already written: a write sent twice?",
		    (unsigned long long)offset, (unsigned long long)h->proc,
		    (unsigned long long)have);
	}
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += OFFSET_WAIT_MS / 1000;
	/* over SFTP the handle ends inside the write that completed the archive, before its
	 * bytes count in in_off: the writes after it still wait for them */
	while (has_offset && offset > h->in_off && !h->failed &&
	       (!h->exited || (h->via_sftp && h->exit_code == 0)) && !h->lost && !h->cancelled)
		if (pthread_cond_timedwait(&h->cv, &ts->mu, &dl) == ETIMEDOUT)
			break;
	/* once the archive is complete (over SFTP the handle may have ended), what follows
	 * its end is ignored in any order */
	bool late = has_offset && offset > h->in_off && !h->complete;
	pthread_mutex_unlock(&ts->mu);

	pthread_mutex_lock(&h->feed_mu);
	asp_status st = ASP_OK;
	pthread_mutex_lock(&ts->mu);
	bool failed = h->failed, gone = h->exited || h->lost || h->cancelled;
	if (failed)
		*err = h->fail;
	pthread_mutex_unlock(&ts->mu);
	if (failed) {
		st = err->code;
	} else if (late) {
		st = asp_error_set(
		    err, ASP_E_INVALID_ARGUMENT, NULL,
		    "proc_write: offset %llu of handle %llu: the bytes before it did "
		    "not come within %u s",
		    (unsigned long long)offset, (unsigned long long)h->proc, OFFSET_WAIT_MS / 1000);
	} else if (h->input_closed || (gone && !h->complete)) {
		st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                   "proc_write: tree stream %llu has ended",
		                   (unsigned long long)h->proc);
	} else if (!h->complete) { /* (once complete, what follows the end is ignored) */
		asp_error e;
		uint64_t at = h->in_off;
		st = n ? asp_tar_reader_feed(h->rd, p, n, &e) : ASP_OK;
		if (st != ASP_OK) {
			asp_error_prefix(&e, st, "tree_write");
			st = refuse(h, &e, err);
		} else {
			uint64_t end = asp_tar_reader_end_at(h->rd);
			size_t fwd = end == UINT64_MAX ? n : end <= at ? 0 : (size_t)(end - at);
			if (fwd > n)
				fwd = n;
			st = fwd ? send_raw(h, p, fwd, false, err) : ASP_OK;
			if (st == ASP_OK && asp_tar_reader_done(h->rd))
				st = send_end(h, err);
		}
	}
	if (eof)
		h->input_closed = true; /* later writes are refused, as after a process's eof */
	if (st == ASP_OK && eof && !h->complete) { /* the end came before the archive's */
		asp_error e;
		asp_status cut = asp_tar_reader_end(h->rd, &e);
		if (cut != ASP_OK)
			asp_error_prefix(&e, cut, "tree_write");
		st = refuse(h, &e, err);
	}
	pthread_mutex_lock(&ts->mu);
	if (!late)
		h->in_off += n;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&ts->mu);
	pthread_mutex_unlock(&h->feed_mu);
	return st;
}

/* Under ts->mu, once the process ended: the handle's result, as proc_wait answers it. */
static void result_locked(tree_h *h, asp_proc_wait_result *r, char *msg, size_t cap)
{
	memset(r, 0, sizeof *r);
	r->exit_code = 1;
	if (h->cancelled && !h->failed) {
		r->exit_code = -1;
		r->signal = h->sig[0] ? h->sig : "KILL";
	} else if (h->failed) {
		snprintf(msg, cap, "%s", h->fail.message);
		r->error = msg;
		r->error_code = asp_strerror(h->fail.code);
	} else if (h->code[0]) {
		snprintf(msg, cap, "%s", h->msg);
		r->error = msg;
		r->error_code = asp_strerror(asp_status_from_name(h->code, strlen(h->code)));
	} else if (h->exit_code != 0 || !h->complete) {
		tidy(h->tail);
		snprintf(msg, cap, "tree_write: the sandbox's script ended with %lld%s%s: %.600s",
		         (long long)h->exit_code, h->sig[0] ? " by SIG" : "", h->sig,
		         h->tail[0] ? h->tail : "no message");
		r->error = msg;
		r->error_code = asp_strerror(ASP_E_IO_ERROR);
	} else {
		r->exit_code = 0;
		r->has_entries = r->has_bytes = true;
		asp_tar_reader_counts(h->rd, &r->entries, &r->bytes);
	}
}

static asp_status wait_end(tree_h *h, uint64_t timeout_ms, asp_proc_wait_result *r, asp_arena *a,
                           asp_error *err)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	uint64_t ms = timeout_ms ? timeout_ms : 86400ull * 1000;
	dl.tv_sec += (time_t)(ms / 1000);
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	asp_status st = ASP_OK;
	pthread_mutex_lock(&h->ts->mu);
	while (!h->exited && !h->lost)
		if (pthread_cond_timedwait(&h->cv, &h->ts->mu, &dl) == ETIMEDOUT)
			break;
	if (h->lost) {
		*err = h->lost_why;
		st = err->code;
	} else if (!h->exited) {
		st = asp_error_set(err, ASP_E_TIMEOUT, NULL,
		                   "proc_wait: tree stream %llu is still running after %llu ms",
		                   (unsigned long long)h->proc, (unsigned long long)timeout_ms);
	} else if (h->reading) { /* the exit its follower got */
		memset(r, 0, sizeof *r);
		r->exit_code = h->read_exit;
		r->signal = h->read_exit == -1 && h->sig[0]
		                ? asp_arena_strndup(a, h->sig, strlen(h->sig))
		                : NULL;
		if (h->msg[0])
			r->error = asp_arena_strndup(a, h->msg, strlen(h->msg));
		if (h->code[0])
			r->error_code =
			    asp_strerror(asp_status_from_name(h->code, strlen(h->code)));
		r->has_entries = r->has_bytes = h->read_exit == 0;
		r->entries = h->counts.entries;
		r->bytes = h->counts.bytes;
	} else {
		char msg[ASP_ERROR_MESSAGE_MAX];
		result_locked(h, r, msg, sizeof msg);
		if (r->error)
			r->error = asp_arena_strndup(a, r->error, strlen(r->error));
		if (r->signal)
			r->signal = asp_arena_strndup(a, r->signal, strlen(r->signal));
	}
	pthread_mutex_unlock(&h->ts->mu);
	return st;
}

/* The temporary's name as the write script made it (beside the target, or in it). */
static char *tmp_name(const char *target, const tree_h *h)
{
	size_t tl = strlen(target);
	while (tl > 1 && target[tl - 1] == '/')
		tl--;
	const char *base = target;
	for (size_t i = 0; i < tl; i++)
		if (target[i] == '/')
			base = target + i + 1;
	int bl = (int)(target + tl - base);
	size_t n = (size_t)bl + strlen(h->hex) + strlen(h->nonce) + 32;
	char *s = malloc(n);
	if (s && h->inside)
		snprintf(s, n, ".asp-tree-%s-%s", h->hex, h->nonce);
	else if (s)
		snprintf(s, n, ".%.*s.asp-tree-%s-%s", bl, base, h->hex, h->nonce);
	return s;
}

static void make_nonce(char out[17])
{
	uint8_t b[8];
	if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
		uint64_t t = ssh_now_ns();
		memcpy(b, &t, sizeof b);
	}
	for (int i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

asp_status ssh_tree_write(ssh_trees *ts, const asp_tree_write_params *p, asp_tree_write_result *r,
                          asp_error *err)
{
	memset(r, 0, sizeof *r);
	asp_status st = asp_check_path("tree_write", p->path, err);
	if (st != ASP_OK)
		return st;
	if (p->data.len && !p->data.data)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "tree_write: 'data' has no bytes");
	tree_h *h = handle_new(ts, false);
	asp_tar_reader_cb cb = {.member = w_member, .data = w_data, .file_end = w_file_end};
	if (h)
		h->rd = asp_tar_reader_new(&cb, h);
	if (!h || !h->rd) {
		if (h)
			handle_free(h);
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "tree_write: out of memory");
	}
	make_nonce(h->nonce);
	const char *argv[] = {"/bin/sh", "-c", write_script, "asp-tree", p->path, h->nonce};
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.has_argv = true;
	sp.argv = (asp_strv){argv, 6};
	st = start(ts, h, &sp, err);
	if (st != ASP_OK) {
		pthread_mutex_lock(&ts->mu);
		unref_locked(ts, h);
		pthread_mutex_unlock(&ts->mu);
		return st;
	}
	st = await_ready(h, "tree_write", err);
	if (st == ASP_OK && h->notar) {
		sftp_tw *tw = NULL;
		char *name = tmp_name(p->path, h);
		st = name ? sftp_tw_open(ts->sftp, ts->budget, p->path, name, h->inside, &tw, err)
		          : asp_error_set(err, ASP_E_INTERNAL, NULL, "tree_write: out of memory");
		free(name);
		pthread_mutex_lock(&ts->mu);
		h->tw = tw;
		h->via_sftp = st == ASP_OK;
		h->ready = h->via_sftp;
		pthread_mutex_unlock(&ts->mu);
		if (st != ASP_OK) /* the script removes its temporary */
			script_done(h, true);
	}
	if (st == ASP_OK && (p->data.len || p->eof))
		st = feed(h, p->data.data, p->data.len, false, 0, p->eof, err);
	if (st == ASP_OK && p->eof) {
		asp_proc_wait_result wr;
		asp_arena *a = asp_arena_new();
		st = a ? wait_end(h, 0, &wr, a, err)
		       : asp_error_set(err, ASP_E_INTERNAL, NULL, "out of memory");
		if (st == ASP_OK && wr.exit_code != 0)
			st = asp_error_set(
			    err,
			    wr.error_code
			        ? asp_status_from_name(wr.error_code, strlen(wr.error_code))
			        : ASP_E_IO_ERROR,
			    NULL, "%s", wr.error ? wr.error : "tree_write: cancelled");
		r->has_entries = r->has_bytes = st == ASP_OK;
		r->entries = wr.entries;
		r->bytes = wr.bytes;
		asp_arena_free(a);
	}
	if (st != ASP_OK && h->ready) {
		/* the script may still wait for its input; once it ends, what tar extracted is
		 * gone, so a refused stream has left nothing when the call returns */
		asp_error ignore;
		pthread_mutex_lock(&h->feed_mu);
		send_raw(h, NULL, 0, true, &ignore);
		pthread_mutex_unlock(&h->feed_mu);
		asp_proc_wait_result wr;
		asp_arena *a = asp_arena_new();
		if (a)
			wait_end(h, READY_WAIT_MS, &wr, a, &ignore);
		asp_arena_free(a);
	}
	r->proc = h->proc;
	if (st != ASP_OK && !h->ready)
		unlist(ts, h); /* never a stream: the error is the call's */
	release(ts, h);
	return st;
}

/* ---- tree_read -------------------------------------------------------------------- */

static asp_status walk_start(ssh_trees *ts, tree_h *h, const char *dir, asp_error *err);

/* A pattern GNU tar's --exclude matches as glob does: a name pattern, no braces or '**'. */
static bool simple_pattern(const char *s)
{
	return !strchr(s, '/') && !strchr(s, '{') && !strstr(s, "**") && !strchr(s, '\\');
}

asp_status ssh_tree_read(ssh_trees *ts, const asp_tree_read_params *p, asp_tree_read_result *r,
                         asp_proc_sub *sub, asp_error *err)
{
	r->proc = 0;
	asp_status st = asp_check_path("tree_read", p->path, err);
	if (st != ASP_OK) {
		asp_proc_sub_fail(sub);
		return st;
	}
	tree_h *h = handle_new(ts, true);
	size_t nex = p->has_exclude ? p->exclude.count : 0;
	const char **argv = calloc(5 + nex, sizeof *argv);
	char **words = calloc(nex + 1, sizeof *words);
	asp_tar_reader_cb cb = {f_member, f_data, f_file_end};
	if (h) {
		h->frd = asp_tar_reader_new(&cb, h);
		h->out = malloc(OUT_CHUNK);
	}
	if (!h || !argv || !words || !h->frd || !h->out) {
		st = asp_error_set(err, ASP_E_INTERNAL, NULL, "tree_read: out of memory");
		goto fail;
	}
	asp_tar_reader_skip_special(h->frd);
	if (nex && (st = asp_tree_exclude_new(p->exclude.items, nex, &h->ex, err)) != ASP_OK)
		goto fail;
	size_t argc = 0;
	argv[argc++] = "/bin/sh";
	argv[argc++] = "-c";
	argv[argc++] = read_script;
	argv[argc++] = "asp-tree";
	for (size_t i = 0; i < nex; i++) {
		if (!simple_pattern(p->exclude.items[i]))
			continue;
		size_t n = strlen(p->exclude.items[i]) + 11;
		if (!(words[i] = malloc(n))) {
			st = asp_error_set(err, ASP_E_INTERNAL, NULL, "tree_read: out of memory");
			goto fail;
		}
		snprintf(words[i], n, "--exclude=%s", p->exclude.items[i]);
		argv[argc++] = words[i];
	}
	h->ext = asp_proc_sub_ref(sub);
	asp_proc_sub_expect(sub, 0, 0);
	asp_spawn_params sp;
	asp_spawn_params_init(&sp);
	sp.has_argv = true;
	sp.argv = (asp_strv){argv, argc};
	sp.cwd = p->path;
	st = start(ts, h, &sp, err);
	if (st == ASP_E_NOT_FOUND || st == ASP_E_NOT_A_DIRECTORY || st == ASP_E_PERMISSION_DENIED)
		asp_error_set(err, st, p->path, "tree_read: %s: %s", p->path,
		              st == ASP_E_NOT_FOUND         ? "no such directory"
		              : st == ASP_E_NOT_A_DIRECTORY ? "not a directory"
		                                            : "permission denied");
	if (st == ASP_OK) {
		ssh_proc_widen(ts->ps, h->proc, SSHC_BULK_WINDOW);
		st = await_ready(h, "tree_read", err);
	}
	bool walk = st == ASP_OK && h->notar;
	if (st != ASP_OK && h->proc)
		unlist(ts, h);
	for (size_t i = 0; i < nex; i++)
		free(words[i]);
	free(words);
	free(argv);
	if (st != ASP_OK) {
		asp_proc_sub_fail(sub); /* nothing reaches the caller's follower */
		release(ts, h);
		return st;
	}
	r->proc = h->proc;
	asp_proc_sub_start(sub, h->proc);
	if (walk && (st = walk_start(ts, h, p->path, err)) != ASP_OK) {
		asp_exit_event ev = {.proc = h->proc, .exit_code = 1};
		pthread_mutex_lock(&ts->mu);
		h->failed = true;
		h->fail = *err;
		pthread_mutex_unlock(&ts->mu);
		read_exit(h, &ev);
		pthread_mutex_lock(&ts->mu);
		ended_locked(h, 1, NULL);
		pthread_mutex_unlock(&ts->mu);
	}
	release(ts, h);
	return ASP_OK;
fail:
	if (words)
		for (size_t i = 0; i < nex; i++)
			free(words[i]);
	free(words);
	free(argv);
	if (h)
		handle_free(h);
	asp_proc_sub_fail(sub);
	return st;
}

/* ---- tree_read over SFTP ---------------------------------------------------------- */

/* The walk's bytes, through the same check and filter as tar's. */
static asp_status walk_emit(void *user, const uint8_t *p, size_t n, asp_error *err)
{
	tree_h *h = user;
	pthread_mutex_lock(&h->ts->mu);
	bool stop = h->cancelled || h->ts->closing;
	pthread_mutex_unlock(&h->ts->mu);
	if (!stop && !h->failed)
		read_stdout(h, p, n);
	if (stop || h->failed)
		return asp_error_set(err, ASP_E_IO_ERROR, NULL, "tree_read: stopped");
	return ASP_OK;
}

static void *walker(void *arg)
{
	tree_h *h = arg;
	ssh_trees *ts = h->ts;
	asp_error e;
	asp_status st = sftp_tree_walk(ts->sftp, ts->budget, h->dir, h->ex, walk_emit, h, &e);
	pthread_mutex_lock(&ts->mu);
	bool cancelled = h->cancelled, closing = ts->closing;
	if (st != ASP_OK && !h->failed && !cancelled) {
		h->failed = true;
		h->fail = e;
	}
	pthread_mutex_unlock(&ts->mu);
	asp_exit_event ev = {.proc = h->proc, .exit_code = st == ASP_OK ? 0 : 1};
	if (cancelled && !h->failed) {
		ev.exit_code = -1;
		ev.signal = h->sig[0] ? h->sig : "KILL";
	}
	if (!closing) /* (closing: the subscriptions are gone with the process table) */
		read_exit(h, &ev);
	pthread_mutex_lock(&ts->mu);
	ended_locked(h, ev.exit_code, ev.signal);
	unref_locked(ts, h); /* the walk's (h may be gone) */
	if (--ts->walks == 0)
		pthread_cond_broadcast(&ts->walks_cv);
	pthread_mutex_unlock(&ts->mu);
	return NULL;
}

/* No tar: the walk starts; its reference on the handle is its own. */
static asp_status walk_start(ssh_trees *ts, tree_h *h, const char *dir, asp_error *err)
{
	if (!(h->dir = strdup(dir)))
		return asp_error_set(err, ASP_E_INTERNAL, NULL, "tree_read: out of memory");
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_t tid;
	pthread_mutex_lock(&ts->mu);
	h->via_sftp = true;
	h->refs++;
	ts->walks++;
	bool ok = pthread_create(&tid, &at, walker, h) == 0;
	if (!ok) {
		h->refs--;
		ts->walks--;
	}
	pthread_mutex_unlock(&ts->mu);
	pthread_attr_destroy(&at);
	return ok ? ASP_OK : asp_error_set(err, ASP_E_INTERNAL, NULL, "tree_read: no thread");
}

/* ---- the handle's other calls ----------------------------------------------------- */

bool ssh_tree_proc_write(ssh_trees *ts, const asp_proc_write_params *p, asp_status *st,
                         asp_error *err)
{
	tree_h *h = find(ts, p->proc);
	if (!h)
		return false;
	if (h->reading)
		*st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                    "proc_write: %llu is a tree_read stream, which takes no input",
		                    (unsigned long long)p->proc);
	else if (p->data.len && !p->data.data)
		*st = asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                    "proc_write: 'data' has no bytes");
	else
		*st = feed(h, p->data.data, p->data.len, p->has_offset, p->offset, p->eof, err);
	release(ts, h);
	return true;
}

bool ssh_tree_proc_wait(ssh_trees *ts, const asp_proc_wait_params *p, asp_proc_wait_result *r,
                        asp_arena *a, asp_status *st, asp_error *err)
{
	tree_h *h = find(ts, p->proc);
	if (!h)
		return false;
	*st = wait_end(h, p->timeout_ms, r, a, err);
	release(ts, h);
	return true;
}

bool ssh_tree_proc_signal(ssh_trees *ts, const asp_proc_signal_params *p, asp_status *st,
                          asp_error *err)
{
	tree_h *h = find(ts, p->proc);
	if (!h)
		return false;
	const char *sig = p->signal ? p->signal : "";
	*st = ASP_OK;
	if (strcmp(sig, "KILL") != 0 && strcmp(sig, "TERM") != 0) {
		*st =
		    asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                  "proc_signal: %llu is a tree stream, which KILL or TERM closes; "
		                  "%.32s means nothing to it",
		                  (unsigned long long)p->proc, sig);
	} else if (h->reading && h->via_sftp) {
		pthread_mutex_lock(&ts->mu);
		if (!h->exited && !h->cancelled) {
			h->cancelled = true;
			snprintf(h->sig, sizeof h->sig, "%s", sig);
		}
		pthread_mutex_unlock(&ts->mu);
	} else if (h->reading) {
		*st = ssh_proc_signal(ts->ps, p, err);
	} else {
		pthread_mutex_lock(&ts->mu);
		bool ended = h->exited || h->lost;
		if (!ended && !h->cancelled) {
			h->cancelled = true;
			snprintf(h->sig, sizeof h->sig, "%s", sig);
		}
		if (!ended && h->tw) { /* a feed waiting on the writer gives up at once */
			asp_error why;
			asp_error_set(&why, ASP_E_IO_ERROR, NULL, "tree_write: cancelled by %s",
			              sig);
			sftp_tw_cancel(h->tw, &why);
		}
		pthread_cond_broadcast(&h->cv); /* writes waiting for their turn give up */
		pthread_mutex_unlock(&ts->mu);
		if (!ended && pthread_mutex_trylock(&h->feed_mu) == 0) {
			/* an end without the sentinel: the script removes what tar extracted */
			asp_error ignore;
			send_raw(h, NULL, 0, true, &ignore);
			pthread_mutex_unlock(&h->feed_mu);
		} else if (!ended &&
		           !h->via_sftp) { /* a write is stuck on a full window: the script goes */
			asp_proc_signal_params tp = *p;
			tp.signal = "TERM";
			*st = ssh_proc_signal(ts->ps, &tp, err);
		}
	}
	release(ts, h);
	return true;
}

bool ssh_tree_unsubscribe(ssh_trees *ts, uint64_t proc)
{
	tree_h *h = find(ts, proc);
	if (!h)
		return false;
	/* no callback once this returns; our own follower stays, for the handle's end */
	if (h->reading && h->ext)
		asp_proc_sub_close(h->ext);
	release(ts, h);
	return true;
}
