/* asp: global options, the command table and dispatch. */
#include "cli.h"

#include <signal.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>

#ifndef ASP_VERSION
#define ASP_VERSION "0.0.0"
#endif

static const cli_command commands[] = {
    {"hello", cmd_hello, "agent info and round-trip time",
     "usage: asp hello\n"
     "\nAsks the sandbox's responder who it is (protocol, agent, os, arch, cwd, max_message,\n"
     "ops) and measures the time to connect and the round-trip time of one call. Over SSH\n"
     "it first shows the way there: each jump host and the sandbox, and for each value\n"
     "where it came from (.asp.json, the SSH config file and line, a default); --json\n"
     "puts that under \"route\".\n"},
    {"exec", cmd_exec, "run a command in the sandbox",
     "usage: asp exec [--cwd DIR] [--env K=V]... [--timeout SEC] [--stdin] -- ARGV...\n"
     "       asp exec [options] -c 'COMMAND STRING'\n"
     "       asp exec -t [options] -- ARGV...   (or -t -c 'COMMAND')\n"
     "\nRuns ARGV directly (PATH search) or COMMAND through /bin/sh -c in a fresh process,\n"
     "writes its stdout and stderr to this command's as they come and exits with its exit\n"
     "code: 128+N when signal N ended it, 124 on timeout, 255 when ASP itself failed.\n"
     "Ctrl-C is sent to the process as INT (twice: KILL); TERM and HUP are forwarded too.\n"
     "Sandboxes that cannot stream (no spawn in hello) get one exec: output at the end.\n"
     "\n  -c, --command STR  run STR through /bin/sh -c\n"
     "  -t, --tty          run it on a terminal, as ssh -tt does: our window's size and\n"
     "                     $TERM ($LINES/$COLUMNS or 24x80 when stdin is not a terminal);\n"
     "                     stdin is typed into it (raw mode when stdin is a terminal: Ctrl-C\n"
     "                     is a key for it; at the end of a non-terminal stdin, Ctrl-D is\n"
     "                     typed); its output and stderr come as one stream on stdout\n"
     "  --cwd DIR          working directory (relative: joined to the config's cwd)\n"
     "  --env K=V          add to the environment (repeatable)\n"
     "  --timeout SEC      TERM the process group after SEC seconds (fractions allowed),\n"
     "                     KILL 2 s later; default: the config's timeout_ms\n"
     "  --stdin            send this command's stdin to the process as it comes (without\n"
     "                     it the process's stdin is empty)\n"
     "  --max-output N     keep at most N bytes per stream (one exec, output at the end)\n"
     "\nWith --json (one exec, output at the end): {\"exit_code\", \"signal\", \"stdout\",\n"
     "\"stderr\", \"stdout_bytes\", \"stderr_bytes\", \"timed_out\", \"duration_ms\"};\n"
     "stdout/stderr are strings when they are valid UTF-8, else base64 with\n"
     "\"stdout_encoding\": \"base64\" beside them.\n"},
    {"shell", cmd_shell, "an interactive shell in the sandbox, on a terminal",
     "usage: asp shell [--cwd DIR] [--env K=V]...\n"
     "       asp shell [options] -- ARGV...\n"
     "\nStarts the sandbox user's login shell ($SHELL there, else bash, else sh, with -l) on\n"
     "a terminal in the sandbox, as ssh HOST does, and shows it on this one: our window's\n"
     "size (changes follow) and $TERM (xterm-256color when unset); raw mode while stdin is\n"
     "a terminal, so Ctrl-C, Ctrl-Z and Ctrl-D are keys for the remote shell, which runs\n"
     "job control and its own prompt. With ARGV, runs ARGV (no shell parses it) instead.\n"
     "Exits with the shell's exit code: 128+N when signal N ended it; 255 when ASP failed\n"
     "(the sandbox has no terminals, the connection was lost), or when TERM, HUP, INT or\n"
     "QUIT from outside made asp hang the remote terminal up. The local terminal is restored\n"
     "on every way out.\n"
     "\n  --cwd DIR    working directory (relative: joined to the config's cwd)\n"
     "  --env K=V    add to the environment (repeatable)\n"},
    {"ps", cmd_ps, "the sandbox's spawned processes",
     "usage: asp ps\n"
     "\nLists the processes spawned in the sandbox (by asp exec, or any client) that it still\n"
     "retains: the running ones and the last 64 that finished, with their tag and command.\n"
     "asp shell's shells have the tag shell, terminals of asp exec -t and asp shell -- ARGV\n"
     "the tag tty.\n"
     "STATE is running, exit N, or the signal that ended it (TERM, KILL, ...).\n"
     "With --json: {\"procs\": [{\"proc\", \"tag\", \"command\", \"running\", \"exit_code\",\n"
     "\"signal\"}]} (exit_code -1 and signal \"TERM\" for a process TERM ended).\n"},
    {"attach", cmd_attach, "follow a spawned process's output",
     "usage: asp attach PROC [--stdout-offset N] [--stderr-offset N]\n"
     "\nReplays what the sandbox holds of the process's output (its last 1 MiB per stream)\n"
     "from the offsets (default 0), then follows it live, and exits with its exit code as\n"
     "asp exec does. Ctrl-C detaches and leaves the process running.\n"
     "A process on a terminal (asp shell, asp exec -t), attached from a terminal, is shown\n"
     "as asp shell shows it: raw mode, our keys typed into it, our window's size; there\n"
     "Ctrl-] detaches (exit 0).\n"
     "\n  --stdout-offset N  replay stdout from byte N of the process's output\n"
     "  --stderr-offset N  replay stderr from byte N\n"},
    {"kill", cmd_kill, "signal a spawned process",
     "usage: asp kill PROC [SIGNAL]\n"
     "\nSends SIGNAL (TERM by default; KILL, INT, HUP, QUIT, USR1, USR2; with or without\n"
     "SIG, or as a number) to the process's group. A finished process is left alone.\n"},
    {"forward", cmd_forward, "a local TCP port that reaches a port in the sandbox",
     "usage: asp forward [--host HOST] [LOCAL_ADDR:]PORT[:REMOTE_PORT]\n"
     "\nListens on LOCAL_ADDR:PORT (127.0.0.1 unless given; [ADDR] for IPv6) and relays each\n"
     "connection to REMOTE_PORT (default PORT) on the sandbox's own 127.0.0.1, opened from\n"
     "inside the sandbox (connect), as ssh -L does: a server the agent started is reached\n"
     "even when the sandbox has no network of its own. Many connections at once; half-close\n"
     "passes through. PORT 0 (with REMOTE_PORT) takes a free port. Prints the address it\n"
     "listens on (--json: {\"listen\", \"host\", \"port\"}), then runs until INT, TERM or\n"
     "HUP, which close every relayed connection. A connection the sandbox refuses is closed\n"
     "with a warning naming the cause.\n"
     "\n  --host HOST  the address the sandbox connects to (default 127.0.0.1)\n"},
    {"watch", cmd_watch, "file changes in the sandbox, one JSON line each",
     "usage: asp watch [-r] PATH\n"
     "\nPrints one JSON line per change under PATH in the sandbox as it happens:\n"
     "{\"path\", \"kind\", \"type\"} with kind created, modified, removed, renamed (with\n"
     "\"old_path\") or overflow (changes were lost: look at PATH again), type file, dir,\n"
     "symlink, ... or \"\" when unknown. A path's changes within 50 ms are one line. Runs\n"
     "until INT, TERM or HUP (exit 0), or until PATH is removed (its removed line, exit 0).\n"
     "\n  -r, --recursive  also every directory below PATH, including new ones\n"},
    {"read", cmd_read, "file bytes to stdout",
     "usage: asp read PATH [--offset N] [--length N]\n"
     "\nWrites the file's bytes to stdout. Sizes take k, M, G suffixes (KiB, MiB, GiB).\n"
     "With --json: {\"data\", \"size\", \"eof\"}, data as for exec.\n"
     "\n  --offset N  start at byte N\n"
     "  --length N  at most N bytes\n"},
    {"write", cmd_write, "stdin to a file",
     "usage: asp write PATH [--append] [--mkdirs] [--atomic]\n"
     "\nReplaces the file with this command's stdin.\n"
     "\n  --append   append instead of replacing\n"
     "  --mkdirs   create missing parent directories\n"
     "  --atomic   old file or new file after a crash, never half of one\n"
     "\nData larger than one message is written in chunks to a temporary file beside the\n"
     "target, renamed over it at the end, so the target is never half written (an append\n"
     "that large is sent as consecutive appends). With --json: {\"written\", \"size\"}.\n"},
    {"stat", cmd_stat, "metadata of a path",
     "usage: asp stat [--no-follow] PATH\n"
     "\n  --no-follow  describe a final symlink itself, not what it points to\n"},
    {"ls", cmd_ls, "list a directory",
     "usage: asp ls [-a] [PATH]\n"
     "\nLists PATH (default: the config's cwd) as mode, size, modification time and name.\n"
     "With --json: {\"entries\": [{\"name\", \"type\", \"size\", \"mode\", \"mtime_ns\"}]} (every\n"
     "entry, names as for exec output).\n"
     "\n  -a, --all  also the names starting with '.'\n"},
    {"mkdir", cmd_mkdir, "create directories",
     "usage: asp mkdir [-p] PATH...\n"
     "\n  -p, --parents  create missing parents; an existing directory is fine\n"},
    {"rm", cmd_rm, "remove paths",
     "usage: asp rm [-r] [-f] PATH...\n"
     "\n  -r, -R, --recursive  remove directories and their contents\n"
     "  -f, --force          a path that does not exist is not an error\n"},
    {"mv", cmd_mv, "rename a path",
     "usage: asp mv [-n] FROM TO\n"
     "\nRenames FROM to TO, replacing TO; onto an existing directory it moves FROM into it.\n"
     "\n  -n, --no-clobber  fail with already_exists instead of replacing TO\n"},
    {"cp", cmd_cp, "copy files between here and the sandbox",
     "usage: asp cp [-r] [-q] SRC DST\n"
     "\nA path starting with ':' is in the sandbox (asp cp a.txt :/w/a.txt, asp cp :/w/a.txt .).\n"
     "Onto an existing directory, SRC is copied into it. Files of any size move in chunks\n"
     "with several requests in flight, into a temporary file beside the target that is\n"
     "renamed at the end. A progress bar is drawn on stderr when it is a terminal.\n"
     "\n  -r, -R, --recursive  copy directories\n"
     "  -q, --quiet          no progress bar\n"},
    {"conformance", cmd_conformance, "run the conformance suite against the sandbox",
     "usage: asp conformance [--root DIR] [--keep] [--only WORD]\n"
     "       asp conformance --list\n"
     "\nRuns the conformance case table against the configured sandbox in a fresh scratch\n"
     "directory (DIR/asp-conformance-RANDOM, DIR default /tmp) that it removes afterwards,\n"
     "prints a pass/fail table and exits 1 when any case failed. A case that needs an op or\n"
     "feature the sandbox's hello does not announce is n/a, with the reason, not a failure.\n"
     "\n  --root DIR   where to create the scratch directory in the sandbox\n"
     "  --keep       leave the scratch directory for inspection\n"
     "  --only WORD  run only the cases whose names contain WORD (none: an error)\n"
     "  --list       list the cases and the ops and features each needs; run nothing\n"},
    {"mcp", cmd_mcp, "serve the sandbox's tools to an MCP client on stdin/stdout",
     "usage: asp mcp [--tools LIST] [--workers N] [--vocabulary NAME] [--session NAME]\n"
     "\nAn MCP server (newline-delimited JSON-RPC 2.0 on stdin/stdout) whose tools act in\n"
     "the sandbox (listed below; docs/tools.md). For Claude Code, Codex, OpenCode and the\n"
     "Claude Agent SDK see docs/harnesses.md. Logs go to stderr. When stdin closes it\n"
     "answers the calls already received, then exits.\n"
     "\n  --tools LIST   only these tools (comma-separated names)\n"
     "  --workers N    most tool calls run at once (default 32)\n"
     "  --vocabulary NAME  the tools under a harness's names and arguments: claude (the\n"
     "                 default) or opencode (filePath, oldString, ...; docs/tools.md)\n"
     "  --session NAME the session its commands belong to (default: the working\n"
     "                 directory; '' for none): started again with the same one, it\n"
     "                 follows the session's running commands again and bash_list shows\n"
     "                 them (docs/tools.md, \"Sessions\")\n",
     cli_print_tools},
    {"tool", cmd_tool, "call one tool of the tools layer",
     "usage: asp tool [--vocabulary NAME] [--session NAME] NAME [ARGS-JSON | -]\n"
     "       asp tool [--vocabulary NAME]\n"
     "\nRuns tool NAME (as asp mcp serves it) with the JSON object ARGS-JSON (\"-\": read it\n"
     "from stdin; none: {}) and prints the tool's text. Exits 1 when the tool reports an\n"
     "error. Without NAME, lists the tools.\n"
     "\n  --vocabulary NAME  the tools under a harness's names and argument spellings: claude\n"
     "                     (the default) or opencode (docs/tools.md, \"Vocabularies\")\n"
     "  --session NAME     the session the commands it starts belong to, as for asp mcp\n"
     "                     (default: the working directory)\n"
     "\nExample: asp tool read '{\"file_path\": \"/w/main.c\", \"limit\": 20}'\n",
     cli_print_tools},
    {"exec-server", cmd_exec_server, "serve Codex's exec-server protocol from the sandbox",
     "usage: asp exec-server [--listen ws://IP:PORT | --listen stdio] [--session NAME]\n"
     "\nCodex's exec-server protocol (newline-delimited JSON-RPC) on stdin/stdout, or on a\n"
     "WebSocket at a loopback address: Codex's own shell, exec_command, write_stdin,\n"
     "apply_patch and file reads then act in the sandbox. Paths under the .asp.json\n"
     "workspace are mapped (docs/design.md, \".asp.json\"). Point Codex at it with\n"
     "asp bind codex, or see docs/harnesses.md. With --listen ws:// the URL is printed on\n"
     "stdout once listening; SIGINT or SIGTERM stops it. Processes a connection started\n"
     "are killed when it closes.\n"
     "\n  --listen URL   ws://IP:PORT (port 0: any free one) or stdio (the default)\n"
     "  --session NAME the session its processes belong to (default: the working\n"
     "                 directory; '' for none): processes of the session an earlier\n"
     "                 exec-server left running are followed again by their processId\n"},
    {"ui", cmd_ui, "a page in the browser that shows the sandbox",
     "usage: asp ui [--listen 127.0.0.1:PORT]\n"
     "\nServes a page on a loopback address that shows the sandbox: its files (a tree,\n"
     "a viewer for text and images, download, upload by drag and drop, rename, delete),\n"
     "its processes (proc_list, their output, signals) and whose session each belongs\n"
     "to, the changes in the open folder, and a terminal. Prints the page's URL, which\n"
     "carries a random token: a request without it (or the cookie its first visit\n"
     "sets), for another Host than the address printed, or from another Origin is\n"
     "refused. What the sandbox's transport lacks, the page says it cannot do, and why.\n"
     "Runs until INT or TERM; closing a page hangs its terminal up and ends its uploads\n"
     "(no half-written file is left: each goes to a temporary file renamed at the end).\n"
     "docs/design.md, \"The page\", says what it may do and what it refuses.\n"
     "\n  --listen ADDR:PORT  the loopback address and port (default 127.0.0.1:0: a free\n"
     "                     port)\n"},
    {"bind", cmd_bind, "set a harness up so its own tools act in the sandbox",
     "usage: asp bind claude|codex|opencode|pi [--print]\n"
     "\nRun in the harness's project: writes that harness's own configuration so that a\n"
     "plain run of it acts in the sandbox the config names (--config, else discovery).\n"
     "claude: .mcp.json (the server asp), .claude/settings.json (the built-in tools\n"
     "denied, the server enabled) and .claude/settings.local.json (its tools allowed).\n"
     "codex: $CODEX_HOME/environments.toml (default ~/.codex): the environment asp,\n"
     "running asp exec-server, as the default. opencode: .opencode/tool/*.js, OpenCode's\n"
     "bash, read, write, edit, glob, grep and apply_patch on the sandbox (bindings/opencode),\n"
     "and a lockfile so OpenCode installs nothing for them. pi: .pi/settings.json lists the\n"
     "extension bindings/pi. Existing settings are kept; a second run changes nothing.\n"
     "docs/harnesses.md tells what moves and what stays.\n"
     "\n  --print   show the files as they would be written; write nothing\n"},
    {"init", cmd_init, "write a .asp.json",
     "usage: asp init --stdio [options] -- COMMAND...\n"
     "       asp init --ssh [USER@]HOST[:PORT] [--identity FILE] [host key options]\n"
     "                [gateway options] [options]\n"
     "       asp init --from-ssh-config NAME [gateway options] [options]\n"
     "       asp init --http URL [--token-env NAME | --token-file FILE] [--websocket |\n"
     "                --no-websocket] [options]\n"
     "       asp init --from-v0 FILE\n"
     "\nWrites .asp.json in the working directory (or the --config FILE), checks it by loading\n"
     "it, and refuses to replace an existing file without --force.\n"
     "\nThe transport (one of):\n"
     "  --stdio              run COMMAND (after --) and speak over its stdin and stdout\n"
     "  --ssh [USER@]HOST[:PORT]  an SSH server (native mode; docs/design.md, \".asp.json\")\n"
     "  --http URL           asp-agent --listen at URL (docs/http.md)\n"
     "  --from-v0 FILE       the version 1 file an ASP v0 draft file means\n"
     "\n  --identity FILE      (--ssh) the private key to log in with\n"
     "  --token-env NAME     (--http) the environment variable holding the bearer token\n"
     "  --token-file FILE    (--http) the file holding it\n"
     "  --cwd DIR            default working directory in the sandbox\n"
     "  --env K=V            added to every exec (repeatable)\n"
     "  --timeout SEC        default exec timeout\n"
     "  --force              replace an existing file\n"
     "\nHost key options (--ssh; default: the key must already be in ~/.ssh/known_hosts):\n"
     "  --host-key-sha256 SHA256:...  accept only this key (known_hosts not consulted)\n"
     "  --known-hosts FILE            verify against FILE instead of ~/.ssh/known_hosts\n"
     "  --accept-new                  record an unknown key on first use, refuse a changed one\n"
     "\nGateway options (--ssh; docs/transports.md, \"Gateways\"):\n"
     "  --proxy-command 'CMD ARGS'    run CMD (its stdin and stdout carry the connection;\n"
     "                                %h %p %r %n %% as in ssh_config; quotes group words)\n"
     "  --jump [USER@]HOST[:PORT],... reach the sandbox through these jump hosts in order\n"
     "                                (repeatable; a HOST may name a Host of ~/.ssh/config)\n"
     "  --from-ssh-config NAME        take HostName, Port, User, IdentityFile, ProxyCommand,\n"
     "                                ProxyJump and UserKnownHostsFile from ~/.ssh/config's\n"
     "                                Host NAME (ssh.config_host); what --ssh gives wins\n"
     "\nStreaming (--http; absent: the transport's default, see docs/http.md):\n"
     "  --websocket      every call over one WebSocket (streams spawned processes)\n"
     "  --no-websocket   one POST per call\n"},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const cli_command *find_command(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++) {
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	}
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: asp [--config FILE] [--json] COMMAND [ARGS]\n\n"
	        "Runs exec, file and filesystem operations in the sandbox that .asp.json names.\n\n"
	        "Commands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fputs(CLI_COMMON_HELP "  --version       print the version\n"
	                      "\n`asp COMMAND --help` describes a command.\n",
	      f);
	fputs("\nExit status: 0, or 1 with one line on stderr, \"asp: WHAT: CODE: MESSAGE\"\n"
	      "(a usage mistake has the CODE invalid_argument). exec and shell exit with their\n"
	      "command's exit code: 128+N when signal N ended it, 124 when exec --timeout ended\n"
	      "it, 255 when ASP itself failed or TERM, HUP, INT or QUIT from outside made asp\n"
	      "hang a terminal up. conformance exits 1 when a case failed (n/a is not one).\n",
	      f);
}

int main(int argc, char **argv)
{
	/*
	 * A transport writes to pipes and sockets whose reader may die; that must be an
	 * EPIPE error we report, not a silent death. The same goes for our own stdout.
	 */
	signal(SIGPIPE, SIG_IGN);
#ifdef __GLIBC__
	/*
	 * `asp cp` receives each chunk (4 MiB) into a fresh buffer. glibc would map and unmap
	 * each, faulting in every page again: a third of a download's CPU. Kept on the heap,
	 * freed chunks are reused. A short-lived command can afford the retained memory.
	 */
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 128 << 20);
#endif

	cli c = {.cmd = "asp", .fail_code = CLI_EXIT_FAIL};
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, CLI_OPT_CONFIG},
	    {"json", no_argument, NULL, CLI_OPT_JSON},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	if (argc == 1 && getenv("ASP_CLI_LIST_OPTIONS")) { /* cli_list_options */
		cli_list_options("+h", longopts, true);
		return CLI_EXIT_OK;
	}
	opterr = 0;
	int opt;
	/* '+': stop at the command name; what follows is the command's to parse. */
	while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (opt) {
		case CLI_OPT_CONFIG: c.config_path = optarg; break;
		case CLI_OPT_JSON: c.json = true; break;
		case 'h': usage(stdout); return cli_finish(&c, CLI_EXIT_OK);
		case 'V':
			printf("asp %s (protocol %d)\n", ASP_VERSION, ASP_PROTOCOL);
			return cli_finish(&c, CLI_EXIT_OK);
		default:
			if (optopt == CLI_OPT_CONFIG)
				return cli_usage(&c, "--config needs a FILE");
			return cli_usage(&c, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return CLI_EXIT_FAIL;
	}
	const char *name = argv[optind];
	if (strcmp(name, "help") == 0) {
		const cli_command *cmd = optind + 1 < argc ? find_command(argv[optind + 1]) : NULL;
		if (cmd) {
			c.cmd = cmd->name;
			c.usage = cmd->usage;
			c.usage_more = cmd->usage_more;
			cli_print_help(&c);
		} else {
			usage(stdout);
		}
		return cli_finish(&c, CLI_EXIT_OK);
	}
	const cli_command *cmd = find_command(name);
	if (!cmd)
		return cli_usage(&c, "unknown command '%s'", name);
	c.cmd = cmd->name;
	c.usage = cmd->usage;
	c.usage_more = cmd->usage_more;
	if (cmd->run == cmd_exec || cmd->run == cmd_shell)
		c.fail_code = CLI_EXIT_EXEC_FAIL;
	int first = optind;
	cli_getopt_reset();
	int rc = cmd->run(&c, argc - first, argv + first);
	cli_close(&c);
	return rc;
}
