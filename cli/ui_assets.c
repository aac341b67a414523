/*
 * The page's files, built into asp (cli/meson.build embeds web/ with gen_embed), so asp
 * ui needs nothing installed beside it and works offline. xterm.js comes from npm's
 * @xterm/xterm at the version web/xterm/package-lock.json pins, taken when asp was built;
 * where npm was not there, a stub says why and the page shows the terminal unavailable.
 */
#include "ui.h"

#include <string.h>

#define ASSET(name)                                                                                \
	extern const char ui_asset_##name[];                                                       \
	extern const size_t ui_asset_##name##_len;
ASSET(index_html)
ASSET(style_css)
ASSET(app_js)
ASSET(files_js)
ASSET(procs_js)
ASSET(changes_js)
ASSET(terminal_js)
ASSET(xterm_js)
ASSET(xterm_css)
ASSET(fit_js)
#undef ASSET

#define JS  "text/javascript; charset=utf-8"
#define CSS "text/css; charset=utf-8"

static const ui_asset *table(size_t *n)
{
	static ui_asset assets[] = {
	    {"/", "text/html; charset=utf-8", ui_asset_index_html, 0},
	    {"/style.css", CSS, ui_asset_style_css, 0},
	    {"/app.js", JS, ui_asset_app_js, 0},
	    {"/files.js", JS, ui_asset_files_js, 0},
	    {"/procs.js", JS, ui_asset_procs_js, 0},
	    {"/changes.js", JS, ui_asset_changes_js, 0},
	    {"/terminal.js", JS, ui_asset_terminal_js, 0},
	    {"/xterm/xterm.js", JS, ui_asset_xterm_js, 0},
	    {"/xterm/xterm.css", CSS, ui_asset_xterm_css, 0},
	    {"/xterm/addon-fit.js", JS, ui_asset_fit_js, 0},
	};
	/* the lengths are not constant expressions in C: filled on each look, which only the
	 * socket thread makes */
	const size_t lens[] = {ui_asset_index_html_len,  ui_asset_style_css_len,
	                       ui_asset_app_js_len,      ui_asset_files_js_len,
	                       ui_asset_procs_js_len,    ui_asset_changes_js_len,
	                       ui_asset_terminal_js_len, ui_asset_xterm_js_len,
	                       ui_asset_xterm_css_len,   ui_asset_fit_js_len};
	*n = sizeof assets / sizeof assets[0];
	for (size_t i = 0; i < *n; i++)
		assets[i].len = lens[i];
	return assets;
}

const ui_asset *ui_asset_find(const char *path)
{
	size_t n;
	const ui_asset *a = table(&n);
	if (!strcmp(path, "/index.html"))
		path = "/";
	for (size_t i = 0; i < n; i++)
		if (!strcmp(a[i].path, path))
			return &a[i];
	return NULL;
}

/* The stub the build writes when npm was missing starts with this line. */
#define STUB "/* asp: xterm.js unavailable: "

static char reason[256];
static bool built;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_stub(void)
{
	built = strncmp(ui_asset_xterm_js, STUB, strlen(STUB)) != 0;
	if (built)
		return;
	const char *s = ui_asset_xterm_js + strlen(STUB), *e = strstr(s, " */");
	size_t n = e ? (size_t)(e - s) : strlen(s);
	if (n >= sizeof reason)
		n = sizeof reason - 1;
	memcpy(reason, s, n);
	reason[n] = '\0';
}

bool ui_terminal_built(const char **why)
{
	pthread_once(&once, read_stub);
	*why = built ? NULL : reason;
	return built;
}
