/**
 * pi's grep, replaced whole: pi's own runs ripgrep on the harness's machine, so this one
 * keeps pi's definition (name, schema, description, rendering) and answers with ASP's grep
 * op in the sandbox, in pi's output format: `path:line: text` for a match, `path-line- text`
 * for context, paths relative to the searched directory, pi's match limit and byte cap.
 */
import {
  createGrepToolDefinition,
  DEFAULT_MAX_BYTES,
  formatSize,
  truncateHead,
  truncateLine,
} from "@mariozechner/pi-coding-agent";
import { AspError } from "asp-sdk";
import type { Sandbox } from "./sandbox.js";

const DEFAULT_LIMIT = 100;

/** A literal string as a regular expression, for PCRE2 and POSIX ERE alike. */
function literalPattern(s: string): string {
  return s.replace(/[\\^$.|?*+()[\]{}]/g, "\\$&");
}

function relative(dir: string, isDir: boolean, file: string): string {
  if (isDir && file.startsWith(`${dir === "/" ? "" : dir}/`)) return file.slice(dir === "/" ? 1 : dir.length + 1);
  return file.slice(file.lastIndexOf("/") + 1);
}

type GrepArgs = {
  pattern: string;
  path?: string;
  glob?: string;
  ignoreCase?: boolean;
  literal?: boolean;
  context?: number;
  limit?: number;
};

export function grepTool(sb: Sandbox) {
  const def = createGrepToolDefinition(sb.cwd);
  return {
    ...def,
    async execute(_id: string, args: GrepArgs, signal?: AbortSignal) {
      if (signal?.aborted) throw new Error("Operation aborted");
      const shown = args.path || ".";
      const dir = sb.path(shown.startsWith("/") ? shown : `${sb.cwd}/${shown}`);
      let isDir: boolean;
      try {
        isDir = (await sb.call((c) => c.stat({ path: dir }))).type === "dir";
      } catch (e) {
        if (e instanceof AspError && e.code === "not_found") throw new Error(`Path not found: ${dir}`);
        throw e;
      }
      const context = args.context && args.context > 0 ? Math.floor(args.context) : 0;
      const limit = Math.max(1, Math.floor(args.limit ?? DEFAULT_LIMIT));
      const r = await sb.call((c) =>
        c.grep({
          path: dir,
          regex: args.literal ? literalPattern(args.pattern) : args.pattern,
          glob: args.glob,
          ignore_case: !!args.ignoreCase,
          mode: "content",
          before: context,
          after: context,
          max_matches: limit,
        }),
      );
      if (signal?.aborted) throw new Error("Operation aborted");
      const matches = r.matches ?? [];
      if (matches.length === 0) return { content: [{ type: "text" as const, text: "No matches found" }], details: undefined };
      let linesTruncated = false;
      const line = (text: string) => {
        const t = truncateLine(text.replace(/\r/g, ""));
        if (t.wasTruncated) linesTruncated = true;
        return t.text;
      };
      const out: string[] = [];
      for (const m of matches) {
        const rel = relative(dir, isDir, m.path);
        const n = Number(m.line);
        m.before.forEach((t, i) => out.push(`${rel}-${n - m.before.length + i}- ${line(t)}`));
        out.push(`${rel}:${n}: ${line(m.text)}`);
        m.after.forEach((t, i) => out.push(`${rel}-${n + 1 + i}- ${line(t)}`));
      }
      const truncation = truncateHead(out.join("\n"), { maxLines: Number.MAX_SAFE_INTEGER });
      let text = truncation.content;
      const details: Record<string, unknown> = {};
      const notices: string[] = [];
      if (r.truncated && matches.length >= limit) {
        notices.push(`${limit} matches limit reached. Use limit=${limit * 2} for more, or refine pattern`);
        details.matchLimitReached = limit;
      }
      if (truncation.truncated) {
        notices.push(`${formatSize(DEFAULT_MAX_BYTES)} limit reached`);
        details.truncation = truncation;
      }
      if (linesTruncated) {
        notices.push("Some lines truncated. Use read tool to see full lines");
        details.linesTruncated = true;
      }
      if (notices.length) text += `\n\n[${notices.join(". ")}]`;
      return { content: [{ type: "text" as const, text }], details: Object.keys(details).length ? details : undefined };
    },
  };
}
