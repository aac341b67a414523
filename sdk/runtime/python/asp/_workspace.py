"""The workspace path mapping (docs/design.md, ".asp.json"), as core/src/workspace.c and the
TypeScript SDK's Workspace do it: a binding that serves a harness's own tools receives the
harness's paths; a path under the local directory is sent as the same path under the
sandbox directory, every other path unchanged, and paths shown back are mapped the other
way. Lexical and component-wise, no I/O: /home/me/proj2 is not under /home/me/proj. When
the sandbox directory lies inside the local one (both on one machine), a path already
under the sandbox directory is sent unchanged, so nothing is mapped twice, and nothing is
mapped back (every sandbox path is a harness path too); when the local directory lies
inside the sandbox's, a sandbox path under the local one is shown back unchanged."""

from ._errors import AspError


def normalize_path(path):
    """The lexical normal form of `path`: "." and empty components dropped, ".." pops one
    (at "/" it stays "/"), no trailing slash; a relative path stays relative ("" is ".")."""
    absolute = path.startswith("/")
    out = []
    fixed = 0  # leading ".." of a relative path cannot be popped
    for c in path.split("/"):
        if c in ("", "."):
            continue
        if c == "..":
            if len(out) > fixed:
                out.pop()
            elif not absolute:
                out.append("..")
                fixed = len(out)
            continue
        out.append(c)
    s = "/".join(out)
    return "/" + s if absolute else (s or ".")


def _under(d, path):
    """Whether the normalised absolute `path` is `d` or lies under it."""
    if d == "/":
        return path.startswith("/")
    return path == d or path.startswith(d + "/")


def _map(src, dst, keep_under_dst, path):
    n = normalize_path(path)
    if not n.startswith("/") or (keep_under_dst and _under(dst, n)) or not _under(src, n):
        return n
    rest = n if src == "/" else n[len(src):]
    return normalize_path(dst + "/" + rest)


class Workspace:
    """A mapping of the absolute directory `local` (the harness's) onto the absolute
    directory `sandbox`; both are kept normalised in .local and .sandbox. Immutable: any
    thread may use one. AspError("invalid_argument") when either is not absolute."""

    def __init__(self, local, sandbox):
        if not isinstance(local, str) or not isinstance(sandbox, str) or \
                not local.startswith("/") or not sandbox.startswith("/"):
            raise AspError("invalid_argument",
                           "workspace: local (%s) and sandbox (%s) must be absolute directories"
                           % ("absent" if local is None else local,
                              "absent" if sandbox is None else sandbox))
        self.local = normalize_path(local)
        self.sandbox = normalize_path(sandbox)
        same = self.local == self.sandbox
        self._sandbox_inside_local = not same and _under(self.local, self.sandbox)
        self._local_inside_sandbox = not same and _under(self.sandbox, self.local)

    @classmethod
    def from_config(cls, cfg, start_dir=None):
        """The mapping a config (asp.load_config) asks for: workspace.local, else the
        directory holding the config file; workspace.sandbox, else the config's cwd, else
        `start_dir` (hello's cwd), a relative one joined to `start_dir`. None when there is
        nothing to map (a config from memory without workspace.local, or the two
        directories the same). AspError("invalid_argument") when a relative sandbox
        directory has no absolute `start_dir` to join."""
        local = cfg.workspace.get("local")
        if local is None:
            if cfg.path is None:
                return None
            local = cfg.path[:cfg.path.rfind("/")] or "/"
        sb = cfg.workspace.get("sandbox")
        if sb is None:
            sb = cfg.cwd
        if sb is not None and sb.startswith("/"):
            sandbox = sb
        elif not start_dir or not start_dir.startswith("/"):
            raise AspError(
                "invalid_argument",
                "workspace: the sandbox directory %s is relative and the responder gave no "
                "absolute start directory to join it to; set workspace.sandbox to an absolute "
                "path" % (sb if sb is not None else "(the start directory)"), path=cfg.path)
        else:
            sandbox = start_dir if sb is None else start_dir + "/" + sb
        w = cls(local, sandbox)
        return None if w.local == w.sandbox else w

    def to_sandbox(self, path, base=None):
        """The sandbox path for the harness's `path`; a relative one joins `base` first
        (the harness's working directory) and stays relative, normalised, without it."""
        p = base + "/" + path if not path.startswith("/") and base is not None else path
        return _map(self.local, self.sandbox, self._sandbox_inside_local, p)

    def to_local(self, path):
        """The harness's path for the sandbox's absolute `path`; with the sandbox inside the
        harness's directory every path is the harness's already (normalised only)."""
        if self._sandbox_inside_local:
            return normalize_path(path)
        return _map(self.sandbox, self.local, self._local_inside_sandbox, path)

    def __repr__(self):
        return "Workspace(%r, %r)" % (self.local, self.sandbox)
