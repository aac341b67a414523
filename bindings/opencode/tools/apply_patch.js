// OpenCode's built-in `apply_patch`, acting in the sandbox (docs/harnesses.md, "OpenCode").
import { aspTool } from "../asp.js";

export default await aspTool("apply_patch");
