/* asp read and asp write: a sandbox file to stdout, stdin to a sandbox file. */
#include "transfer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { OPT_OFFSET = CLI_OPT_FIRST_PRIVATE, OPT_LENGTH, OPT_APPEND, OPT_MKDIRS, OPT_ATOMIC };

/*
 * A local descriptor as a transfer end: a regular file (not opened for appending) is
 * read or written at offsets from its current position, in parallel; anything else is a
 * stream.
 */
static void local_end(xfer_end *end, int fd, const char *name)
{
	struct stat st;
	end->fd = fd;
	end->path = name;
	end->kind = XF_LOCAL_STREAM;
	int fl = fcntl(fd, F_GETFL);
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fl >= 0 && !(fl & O_APPEND)) {
		off_t pos = lseek(fd, 0, SEEK_CUR);
		if (pos >= 0) {
			end->kind = XF_LOCAL_FILE;
			end->base = (uint64_t)pos;
		}
	}
}

/* A positional end leaves its descriptor where a sequential one would have. */
static void local_end_done(const xfer_end *end, uint64_t moved)
{
	if (end->kind == XF_LOCAL_FILE)
		lseek(end->fd, (off_t)(end->base + moved), SEEK_SET);
}

/* --json: the bytes go to an anonymous file first, then into the JSON document. */
static int read_json(cli *c, xfer *x)
{
	int fd = memfd_create("asp-read", MFD_CLOEXEC);
	if (fd < 0) {
		FILE *f = tmpfile();
		fd = f ? dup(fileno(f)) : -1;
		if (f)
			fclose(f);
	}
	if (fd < 0)
		return cli_fail_errno(c, errno, "read %s: temporary file", x->src.path);
	x->dst.kind = XF_LOCAL_FILE;
	x->dst.fd = fd;
	x->dst.path = "the temporary file";
	if (xfer_run(x) < 0) {
		close(fd);
		return cli_fail(c, &x->err, "%s", x->what);
	}
	uint8_t *data = NULL;
	if (x->moved > 0) {
		data = mmap(NULL, x->moved, PROT_READ, MAP_PRIVATE, fd, 0);
		if (data == MAP_FAILED) {
			int e = errno;
			close(fd);
			return cli_fail_errno(c, e, "read %s: map the temporary file", x->src.path);
		}
	}
	jw w;
	jw_init(&w, stdout);
	jw_obj_begin(&w);
	jw_bytes_field(&w, "data", data, x->moved);
	jw_key(&w, "size");
	jw_uint(&w, x->src_size);
	jw_key(&w, "eof");
	jw_bool(&w, x->offset + x->moved >= x->src_size);
	jw_obj_end(&w);
	jw_end(&w);
	if (data)
		munmap(data, x->moved);
	close(fd);
	return cli_finish(c, CLI_EXIT_OK);
}

int cmd_read(cli *c, int argc, char **argv)
{
	c->sandbox_paths = true;
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"offset", required_argument, NULL, OPT_OFFSET},
	    {"length", required_argument, NULL, OPT_LENGTH},
	    {NULL, 0, NULL, 0},
	};
	uint64_t offset = 0, length = UINT64_MAX;
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "h", longopts)) != -1) {
		switch (opt) {
		case 'h': return cli_finish(c, CLI_EXIT_OK);
		case OPT_OFFSET:
			if (cli_parse_size(c, "--offset", optarg, &offset) < 0)
				return c->fail_code;
			break;
		case OPT_LENGTH:
			if (cli_parse_size(c, "--length", optarg, &length) < 0)
				return c->fail_code;
			break;
		default: return c->fail_code;
		}
	}
	if (argc - optind != 1)
		return cli_usage(c, argc - optind ? "give exactly one PATH" : "missing PATH");
	const char *path = argv[optind];

	asp_client *client = cli_client(c);
	if (!client)
		return c->fail_code;
	xfer x;
	xfer_init(&x, client, cli_chunk_size(c));
	x.src.kind = XF_REMOTE;
	x.src.path = path;
	x.offset = offset;
	x.length = length;
	if (c->json)
		return read_json(c, &x);
	fflush(stdout);
	local_end(&x.dst, STDOUT_FILENO, "stdout");
	if (xfer_run(&x) < 0)
		return cli_fail(c, &x.err, "%s", x.what);
	local_end_done(&x.dst, x.moved);
	return cli_finish(c, CLI_EXIT_OK);
}

int cmd_write(cli *c, int argc, char **argv)
{
	c->sandbox_paths = true;
	static const struct option longopts[] = {
	    CLI_COMMON_LONGOPTS,
	    {"append", no_argument, NULL, OPT_APPEND},
	    {"mkdirs", no_argument, NULL, OPT_MKDIRS},
	    {"atomic", no_argument, NULL, OPT_ATOMIC},
	    {NULL, 0, NULL, 0},
	};
	bool append = false, mkdirs = false, atomic = false;
	int opt;
	while ((opt = cli_getopt(c, argc, argv, "h", longopts)) != -1) {
		switch (opt) {
		case 'h': return cli_finish(c, CLI_EXIT_OK);
		case OPT_APPEND: append = true; break;
		case OPT_MKDIRS: mkdirs = true; break;
		case OPT_ATOMIC: atomic = true; break;
		default: return c->fail_code;
		}
	}
	if (argc - optind != 1)
		return cli_usage(c, argc - optind ? "give exactly one PATH" : "missing PATH");
	if (append && atomic)
		return cli_usage(c, "--append and --atomic do not go together");
	const char *path = argv[optind];

	asp_client *client = cli_client(c);
	if (!client)
		return c->fail_code;
	xfer x;
	xfer_init(&x, client, cli_chunk_size(c));
	local_end(&x.src, STDIN_FILENO, "stdin");
	x.dst.kind = XF_REMOTE;
	x.dst.path = path;
	x.append = append;
	x.mkdirs = mkdirs;
	x.atomic = atomic;
	x.keep_target_mode = true;
	if (xfer_run(&x) < 0)
		return cli_fail(c, &x.err, "%s", x.what);
	local_end_done(&x.src, x.moved);
	if (c->json) {
		jw w;
		jw_init(&w, stdout);
		jw_obj_begin(&w);
		jw_key(&w, "written");
		jw_uint(&w, x.moved);
		jw_key(&w, "size");
		jw_uint(&w, x.dst_size);
		jw_obj_end(&w);
		jw_end(&w);
	}
	return cli_finish(c, CLI_EXIT_OK);
}
