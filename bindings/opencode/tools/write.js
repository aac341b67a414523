// OpenCode's built-in `write`, acting in the sandbox (docs/harnesses.md, "OpenCode").
import { aspTool } from "../asp.js";

export default await aspTool("write");
