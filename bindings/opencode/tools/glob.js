// OpenCode's built-in `glob`, acting in the sandbox (docs/harnesses.md, "OpenCode").
import { aspTool } from "../asp.js";

export default await aspTool("glob");
