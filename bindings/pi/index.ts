/**
 * The ASP binding for pi (docs/harnesses.md, "pi"): pi's own bash, read, write, edit, ls
 * and find, made by pi's factories with Operations that act in the sandbox .asp.json names,
 * and grep answered by ASP's grep op; `!command` runs there too, and the system prompt
 * gives the sandbox's working directory. Load it with `pi -e bindings/pi/index.ts`, or let
 * `asp bind pi` list it in the project's .pi/settings.json.
 */
import {
  createBashToolDefinition,
  createEditToolDefinition,
  createFindToolDefinition,
  createLsToolDefinition,
  createReadToolDefinition,
  createWriteToolDefinition,
  type ExtensionAPI,
} from "@mariozechner/pi-coding-agent";
import { grepTool } from "./grep.js";
import {
  bashOperations,
  editOperations,
  findOperations,
  lsOperations,
  readOperations,
  writeOperations,
} from "./operations.js";
import { Sandbox } from "./sandbox.js";

export default async function asp(pi: ExtensionAPI) {
  const localCwd = process.cwd();
  const sb = await Sandbox.open(localCwd);
  const cwd = sb.cwd;
  const bash = bashOperations(sb);
  pi.registerTool(createBashToolDefinition(cwd, { operations: bash }));
  pi.registerTool(createReadToolDefinition(cwd, { operations: readOperations(sb) }));
  pi.registerTool(createWriteToolDefinition(cwd, { operations: writeOperations(sb) }));
  pi.registerTool(createEditToolDefinition(cwd, { operations: editOperations(sb) }));
  pi.registerTool(createLsToolDefinition(cwd, { operations: lsOperations(sb) }));
  pi.registerTool(createFindToolDefinition(cwd, { operations: findOperations(sb) }));
  pi.registerTool(grepTool(sb));

  // `!command` typed by the user runs in the sandbox too.
  pi.on("user_bash", () => ({ operations: bash }));

  // The model is told the directory its tools work in.
  pi.on("before_agent_start", (event) => {
    if (cwd === localCwd) return;
    return {
      systemPrompt: event.systemPrompt.replace(`Current working directory: ${localCwd}`, `Current working directory: ${cwd}`),
    };
  });

  pi.on("session_shutdown", async () => {
    await sb.close();
  });
}
