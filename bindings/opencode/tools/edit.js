// OpenCode's built-in `edit`, acting in the sandbox (docs/harnesses.md, "OpenCode").
import { aspTool } from "../asp.js";

export default await aspTool("edit");
