/*
 * Vocabularies (docs/design.md, "The tools layer and the MCP binding"): the same tools
 * under another harness's names and argument spellings. A vocabulary is a table — for each
 * of its tools the tool of this layer it calls, the argument renames and the defaults it
 * sets — over the one implementation in the other files; nothing here does a tool's work.
 */
#include "shared.h"

#include <string.h>

/* One argument spelling: the harness's name and the tools layer's. */
typedef struct vocab_arg {
	const char *from, *to;
} vocab_arg;

typedef struct vocab_tool {
	asp_tool_desc desc;    /* what the harness's model sees */
	const char *target;    /* the tool of this layer that does the work */
	const vocab_arg *args; /* renames, ending with {NULL, NULL}; others pass unchanged */
	const char *defaults;  /* a JSON object of arguments set when the call leaves them out */
} vocab_tool;

/* --- OpenCode (opencode-ai 1.18): filePath, oldString, newString, replaceAll, ... ------- */

static const vocab_arg oc_file_args[] = {{"filePath", "file_path"},
                                         {"oldString", "old_string"},
                                         {"newString", "new_string"},
                                         {"replaceAll", "replace_all"},
                                         {NULL, NULL}};
static const vocab_arg oc_grep_args[] = {{"include", "glob"}, {NULL, NULL}};
static const vocab_arg oc_patch_args[] = {{"patchText", "input"}, {NULL, NULL}};
static const vocab_arg oc_none[] = {{NULL, NULL}};

/* clang-format off */
static const vocab_tool opencode_tools[] = {
    {{"bash",
      "Runs a shell command in the sandbox and returns its combined stdout and stderr, with "
      "the exit code when it is not zero. Each call is a fresh shell; set workdir rather "
      "than using cd. Default timeout 120000 ms, at most 600000. Output over 30000 "
      "characters keeps its head and tail with a note of what was cut. Prefer the read, "
      "grep and glob tools over cat, grep and find.",
      "{\"type\":\"object\",\"properties\":{"
      "\"command\":{\"type\":\"string\",\"description\":\"The command to execute\"},"
      "\"timeout\":{\"type\":\"number\",\"description\":\"Optional timeout in milliseconds (max 600000)\"},"
      "\"workdir\":{\"type\":\"string\",\"description\":\"The directory to run the command in (default: the working directory)\"},"
      "\"description\":{\"type\":\"string\",\"description\":\"What the command does, in 5-10 words\"}},"
      "\"required\":[\"command\"],\"additionalProperties\":false}"},
     "bash", oc_none, NULL},
    {{"read",
      "Reads a file in the sandbox. Returns up to 2000 lines from the start (or from "
      "`offset`, a 1-based line number, `limit` lines), each as its line number, a tab and "
      "the line. Lines longer than 2000 characters are cut. Use absolute paths. Binary "
      "files are described, not dumped; for a directory run ls through bash.",
      "{\"type\":\"object\",\"properties\":{"
      "\"filePath\":{\"type\":\"string\",\"description\":\"The absolute path of the file to read\"},"
      "\"offset\":{\"type\":\"number\",\"description\":\"The line number to start reading from (1-based)\"},"
      "\"limit\":{\"type\":\"number\",\"description\":\"The number of lines to read (default 2000)\"}},"
      "\"required\":[\"filePath\"],\"additionalProperties\":false}"},
     "read", oc_file_args, NULL},
    {{"write",
      "Writes a file in the sandbox, replacing it if it exists, creating missing parent "
      "directories; atomic (readers see the old or the new file). Prefer edit for changing "
      "part of an existing file.",
      "{\"type\":\"object\",\"properties\":{"
      "\"filePath\":{\"type\":\"string\",\"description\":\"The absolute path of the file to write\"},"
      "\"content\":{\"type\":\"string\",\"description\":\"The content to write to the file\"}},"
      "\"required\":[\"filePath\",\"content\"],\"additionalProperties\":false}"},
     "write", oc_file_args, NULL},
    {{"edit",
      "Replaces exact text in a file in the sandbox. oldString must appear exactly once "
      "(give more surrounding context to make it unique) unless replaceAll is true. Match "
      "the file's text exactly, indentation included, without the line-number prefix of "
      "read's output. An empty oldString creates a new file with newString as its content.",
      "{\"type\":\"object\",\"properties\":{"
      "\"filePath\":{\"type\":\"string\",\"description\":\"The absolute path of the file to modify\"},"
      "\"oldString\":{\"type\":\"string\",\"description\":\"The text to replace\"},"
      "\"newString\":{\"type\":\"string\",\"description\":\"The text to replace it with (must differ from oldString)\"},"
      "\"replaceAll\":{\"type\":\"boolean\",\"description\":\"Replace every occurrence of oldString (default false)\"}},"
      "\"required\":[\"filePath\",\"oldString\",\"newString\"],\"additionalProperties\":false}"},
     "edit", oc_file_args, NULL},
    {{"glob",
      "Finds files in the sandbox by glob pattern (\"**/*.c\", \"src/**/*.{h,c}\"), newest "
      "first, at most 100 absolute paths, one per line. `path` is the directory to search "
      "(default: the working directory). .git is skipped.",
      "{\"type\":\"object\",\"properties\":{"
      "\"pattern\":{\"type\":\"string\",\"description\":\"The glob pattern to match files against\"},"
      "\"path\":{\"type\":\"string\",\"description\":\"The directory to search in (default: the working directory)\"}},"
      "\"required\":[\"pattern\"],\"additionalProperties\":false}"},
     "glob", oc_none, NULL},
    {{"grep",
      "Searches file contents in the sandbox with a Perl-compatible regular expression and "
      "shows the matching lines as path:line:text, sorted by path. `include` filters file "
      "names (\"*.js\", \"*.{ts,tsx}\"). Binary files, hidden files and .git are skipped.",
      "{\"type\":\"object\",\"properties\":{"
      "\"pattern\":{\"type\":\"string\",\"description\":\"The regular expression to search for\"},"
      "\"path\":{\"type\":\"string\",\"description\":\"The file or directory to search in (default: the working directory)\"},"
      "\"include\":{\"type\":\"string\",\"description\":\"Glob of the file names to search (e.g. \\\"*.js\\\", \\\"*.{ts,tsx}\\\")\"}},"
      "\"required\":[\"pattern\"],\"additionalProperties\":false}"},
     "grep", oc_grep_args, "{\"output_mode\":\"content\",\"-n\":true}"},
    {{"apply_patch",
      TOOLS_PATCH_DESCRIPTION,
      "{\"type\":\"object\",\"properties\":{"
      "\"patchText\":{\"type\":\"string\",\"description\":\"The full patch text, from *** Begin Patch to *** End Patch\"}},"
      "\"required\":[\"patchText\"],\"additionalProperties\":false}"},
     "apply_patch", oc_patch_args, NULL},
};
/* clang-format on */

typedef struct vocab {
	const char *name;
	const vocab_tool *tools;
	size_t n;
	asp_tool_desc *descs; /* filled once, for asp_tools_vocab_list */
} vocab;

#define N_OPENCODE (sizeof opencode_tools / sizeof opencode_tools[0])
static asp_tool_desc opencode_descs[N_OPENCODE];

static vocab vocabs[] = {{"opencode", opencode_tools, N_OPENCODE, opencode_descs}};

static pthread_once_t vocab_once = PTHREAD_ONCE_INIT;

static void vocab_fill(void)
{
	for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++)
		for (size_t i = 0; i < vocabs[v].n; i++)
			vocabs[v].descs[i] = vocabs[v].tools[i].desc;
}

static const vocab *vocab_find(const char *name)
{
	for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++)
		if (!strcmp(vocabs[v].name, name))
			return &vocabs[v];
	return NULL;
}

const asp_tool_desc *tools_vocab_list(const char *name, size_t *count)
{
	pthread_once(&vocab_once, vocab_fill);
	const vocab *v = vocab_find(name);
	*count = v ? v->n : 0;
	return v ? v->descs : NULL;
}

bool tools_vocab_known(const char *name)
{
	return vocab_find(name) != NULL;
}

static const vocab_tool *vocab_tool_find(const vocab *v, const char *name)
{
	for (size_t i = 0; i < v->n; i++)
		if (!strcmp(v->tools[i].desc.name, name))
			return &v->tools[i];
	return NULL;
}

static const char *rename_arg(const vocab_arg *args, const char *key)
{
	for (; args->from; args++)
		if (!strcmp(args->from, key))
			return args->to;
	return key;
}

/*
 * The call of `name` in vocabulary `vname` as a call of this layer: *target gets the tool,
 * the result the renamed arguments (new reference). A null argument counts as left out, so a
 * harness that must send every property (OpenCode lists them all as required) can send
 * null for a default. NULL with the result filled when the tool is unknown.
 */
json_t *tools_vocab_translate(const char *vname, const char *name, json_t *args,
                              const char **target, tresult *r)
{
	const vocab *v = vocab_find(vname);
	const vocab_tool *vt = v ? vocab_tool_find(v, name) : NULL;
	if (!vt) {
		tools_fail(r, "Error: no tool is called `%s`.", name);
		return NULL;
	}
	json_t *out = json_object();
	const char *key;
	json_t *val;
	json_object_foreach(args, key, val)
	{
		if (!json_is_null(val) && out)
			json_object_set(out, rename_arg(vt->args, key), val);
	}
	if (vt->defaults && out) {
		json_t *d = json_loads(vt->defaults, 0, NULL);
		json_object_update_missing(out, d);
		json_decref(d);
	}
	if (!out)
		tools_fail(r, "Error: out of memory.");
	*target = vt->target;
	return out;
}
