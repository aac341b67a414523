#!/usr/bin/python3
"""A scripted model server on loopback for harness tests: it plays a fixed session instead of
a model, so a real harness binary can be driven offline and its tool calls asserted.

The script is JSON: {"steps": [STEP, ...]}. Each model request the harness sends takes the
next step, whatever API it came by; after the last step every request gets a final
message "done". A STEP is
  {"calls": [{"name": "exec_command", "arguments": {...}}, ...]}   tool calls, in order
       (a call with "custom": true and "input": TEXT is a free-form (custom) tool call)
  {"message": "TEXT"}                                               a final answer
  {"items": [...]}                                                  API items verbatim
A step may carry "text" too: a message shown before its calls. An argument value
{"$match": REGEX} (optionally "int": true) is replaced by the first group of REGEX in the
tool results of the request being answered (e.g. the session ID an earlier call printed).

Every request is appended as one JSON line to the log: {"path", "body"}; a test reads the
tool results the harness sent back from it. APIs are small handlers keyed by request path,
each turning a step into that API's answer:
  POST /v1/responses, /responses    OpenAI Responses API over SSE (Codex)
  POST /v1/chat/completions          OpenAI Chat Completions over SSE (pi, OpenCode); a
                                     request offering no tools (a session title) takes no step
  POST /v1/messages                  Anthropic Messages over SSE, or one JSON answer when the
                                     request does not stream (Claude Code); a request offering
                                     no tools or for a haiku model (a title, a quota probe, the
                                     small fast model's side work) takes no step
  POST /v1/messages/count_tokens     a fixed token count; takes no step
Another API plugs in the same way: add a handler to HANDLERS.

usage: scripted_model.py SCRIPT.json LOG.jsonl [PORT_FILE]
Listens on 127.0.0.1 on a free port; writes the port to PORT_FILE (or prints it) when ready.
Exits when its standard input closes, so a test's exit ends it.
"""
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Script:
    """The steps and where the session is; one lock, as requests may overlap."""

    def __init__(self, path, log_path):
        with open(path) as f:
            self.steps = json.load(f)["steps"]
        self.next = 0
        self.calls = 0
        self.lock = threading.Lock()
        self.log = open(log_path, "a", buffering=1)

    def note(self, path, body):
        """Logs a request that takes no step."""
        with self.lock:
            self.log.write(json.dumps({"path": path, "body": body, "untaken": True}) + "\n")

    def take(self, path, body):
        with self.lock:
            self.log.write(json.dumps({"path": path, "body": body}) + "\n")
            if self.next < len(self.steps):
                step = self.steps[self.next]
                self.next += 1
            else:
                step = {"message": "done"}
            self.calls += 1
            return step, self.calls


def fill(value, results):
    """Replaces {"$match": REGEX} values by what REGEX finds in the tool results."""
    if isinstance(value, dict) and "$match" in value:
        for text in reversed(results):
            m = re.search(value["$match"], text)
            if m:
                return int(m.group(1)) if value.get("int") else m.group(1)
        return None
    if isinstance(value, dict):
        return {k: fill(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, results) for v in value]
    return value


# --- OpenAI Responses API (SSE) ----------------------------------------------------------

def responses_results(body):
    """The tool results (text) a Responses request carries, oldest first."""
    out = []
    for item in body.get("input", []) if isinstance(body.get("input"), list) else []:
        if isinstance(item, dict) and item.get("type", "").endswith("_call_output"):
            o = item.get("output")
            out.append(o if isinstance(o, str) else json.dumps(o))
    return out


def responses_items(step, n, results):
    """A step as Responses API output items."""
    if "items" in step:
        return step["items"]
    items = []
    if step.get("text"):
        items.append({"type": "message", "role": "assistant", "id": "msg_t%d" % n,
                      "status": "completed",
                      "content": [{"type": "output_text", "text": step["text"],
                                   "annotations": []}]})
    for i, call in enumerate(step.get("calls", [])):
        call_id = call.get("call_id", "call_%d_%d" % (n, i))
        if call.get("custom"):
            items.append({"type": "custom_tool_call", "id": "ctc_%d_%d" % (n, i),
                          "status": "completed", "call_id": call_id, "name": call["name"],
                          "input": call["input"]})
        else:
            args = fill(call.get("arguments", {}), results)
            items.append({"type": "function_call", "id": "fc_%d_%d" % (n, i),
                          "status": "completed", "call_id": call_id, "name": call["name"],
                          "arguments": args if isinstance(args, str) else json.dumps(args)})
    if "message" in step:
        items.append({"type": "message", "role": "assistant", "id": "msg_%d" % n,
                      "status": "completed",
                      "content": [{"type": "output_text", "text": step["message"],
                                   "annotations": []}]})
    return items


def responses_handler(req, step, n, body):
    rid = "resp_%d" % n
    model = body.get("model", "scripted")
    base = {"id": rid, "object": "response", "model": model, "created_at": 0}
    events = [("response.created", {"response": dict(base, status="in_progress", output=[])})]
    items = responses_items(step, n, responses_results(body))
    for i, item in enumerate(items):
        events.append(("response.output_item.added", {"output_index": i, "item": item}))
        events.append(("response.output_item.done", {"output_index": i, "item": item}))
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 20}
    events.append(("response.completed",
                   {"response": dict(base, status="completed", output=items, usage=usage)}))
    req.send_response(200)
    req.send_header("Content-Type", "text/event-stream")
    req.send_header("Cache-Control", "no-cache")
    req.end_headers()
    for seq, (kind, data) in enumerate(events):
        data = dict(data, type=kind, sequence_number=seq)
        req.wfile.write(("event: %s\ndata: %s\n\n" % (kind, json.dumps(data))).encode())
    req.wfile.flush()
    req.close_connection = True


# --- OpenAI Chat Completions (SSE): pi's openai-completions, OpenCode's openai-compatible --

def chat_results(body):
    """The tool results (text) a chat request carries, oldest first."""
    out = []
    for m in body.get("messages", []):
        if isinstance(m, dict) and m.get("role") == "tool":
            c = m.get("content")
            if isinstance(c, list):
                c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
            out.append(c if isinstance(c, str) else json.dumps(c))
    return out


def chat_untaken(body):
    """A request offering no tools (OpenCode's title of the session) takes no step."""
    return not body.get("tools")


def chat_handler(req, step, n, body):
    base = {"id": "chatcmpl_%d" % n, "object": "chat.completion.chunk", "created": 0,
            "model": body.get("model", "scripted")}
    chunks = []
    delta = {"role": "assistant"}
    text = step.get("text", "") + step.get("message", "")
    if text:
        chunks.append(dict(delta, content=text))
        delta = {}
    results = chat_results(body)
    calls = step.get("calls", [])
    for i, call in enumerate(calls):
        args = fill(call.get("arguments", {}), results)
        chunks.append(dict(delta, tool_calls=[{
            "index": i, "id": call.get("call_id", "call_%d_%d" % (n, i)), "type": "function",
            "function": {"name": call["name"],
                         "arguments": args if isinstance(args, str) else json.dumps(args)}}]))
        delta = {}
    req.send_response(200)
    req.send_header("Content-Type", "text/event-stream")
    req.send_header("Cache-Control", "no-cache")
    req.end_headers()
    events = [dict(base, choices=[{"index": 0, "delta": d, "finish_reason": None}])
              for d in chunks]
    events.append(dict(base, choices=[{"index": 0, "delta": {},
                                       "finish_reason": "tool_calls" if calls else "stop"}]))
    events.append(dict(base, choices=[], usage={"prompt_tokens": 10, "completion_tokens": 10,
                                                "total_tokens": 20}))
    for e in events:
        req.wfile.write(("data: %s\n\n" % json.dumps(e)).encode())
    req.wfile.write(b"data: [DONE]\n\n")
    req.wfile.flush()
    req.close_connection = True


chat_handler.untaken = chat_untaken


# --- Anthropic Messages (SSE): Claude Code -------------------------------------------------

def anthropic_results(body):
    """The tool results (text) a Messages request carries, oldest first."""
    out = []
    for m in body.get("messages", []):
        if not isinstance(m, dict) or m.get("role") != "user" or not isinstance(m.get("content"), list):
            continue
        for b in m["content"]:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                c = b.get("content")
                if isinstance(c, list):
                    c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
                out.append(c if isinstance(c, str) else json.dumps(c))
    return out


def anthropic_untaken(body):
    """Claude Code's side requests take no step: those offering no tools (a title, a quota
    probe, a summary) and those of another model than the session's (the small fast one)."""
    return not body.get("tools") or "haiku" in str(body.get("model", ""))


def anthropic_blocks(step, n, results):
    """A step as Messages content blocks."""
    blocks = []
    text = step.get("text", "") + step.get("message", "")
    if text:
        blocks.append({"type": "text", "text": text})
    for i, call in enumerate(step.get("calls", [])):
        blocks.append({"type": "tool_use", "id": call.get("call_id", "toolu_%d_%d" % (n, i)),
                       "name": call["name"], "input": fill(call.get("arguments", {}), results)})
    return blocks


def anthropic_handler(req, step, n, body):
    blocks = anthropic_blocks(step, n, anthropic_results(body))
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 10, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    message = {"id": "msg_%d" % n, "type": "message", "role": "assistant",
               "model": body.get("model", "scripted"), "stop_reason": None,
               "stop_sequence": None, "usage": dict(usage, output_tokens=0)}
    if not body.get("stream"):
        answer = json.dumps(dict(message, content=blocks, stop_reason=stop,
                                 usage=usage)).encode()
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(answer)))
        req.end_headers()
        req.wfile.write(answer)
        return
    events = [("message_start", {"message": dict(message, content=[])})]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events.append(("content_block_start",
                           {"index": i, "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta",
                           {"index": i, "delta": {"type": "text_delta", "text": b["text"]}}))
        else:
            events.append(("content_block_start", {"index": i, "content_block": dict(
                b, input={})}))
            events.append(("content_block_delta", {"index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(b["input"])}}))
        events.append(("content_block_stop", {"index": i}))
    events.append(("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 10}}))
    events.append(("message_stop", {}))
    req.send_response(200)
    req.send_header("Content-Type", "text/event-stream")
    req.send_header("Cache-Control", "no-cache")
    req.end_headers()
    for kind, data in events:
        data = dict(data, type=kind)
        req.wfile.write(("event: %s\ndata: %s\n\n" % (kind, json.dumps(data))).encode())
    req.wfile.flush()
    req.close_connection = True


anthropic_handler.untaken = anthropic_untaken


def count_tokens_handler(req, step, n, body):
    """Token counting: a fixed small count; never a step."""
    answer = json.dumps({"input_tokens": 10}).encode()
    req.send_response(200)
    req.send_header("Content-Type", "application/json")
    req.send_header("Content-Length", str(len(answer)))
    req.end_headers()
    req.wfile.write(answer)


count_tokens_handler.untaken = lambda body: True


HANDLERS = {
    "/v1/responses": responses_handler,
    "/responses": responses_handler,
    "/v1/chat/completions": chat_handler,
    "/chat/completions": chat_handler,
    "/v1/messages": anthropic_handler,
    "/v1/messages/count_tokens": count_tokens_handler,
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script = None

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        # model lists and the like: an empty list answers them all
        body = json.dumps({"object": "list", "data": [], "models": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        path = self.path.split("?")[0]
        handler = HANDLERS.get(path)
        if not handler:
            self.send_error(404, "the scripted model has no handler for " + path)
            return
        untaken = getattr(handler, "untaken", None)
        if untaken and untaken(body):
            self.script.note(path, body)
            handler(self, {"message": "Scripted session"}, 0, body)
            return
        step, n = self.script.take(path, body)
        handler(self, step, n, body)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    Handler.script = Script(sys.argv[1], sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    if len(sys.argv) > 3:
        tmp = sys.argv[3] + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, sys.argv[3])
    else:
        print(port, flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sys.stdin.read()  # until the test's end closes it
    except KeyboardInterrupt:
        pass
    server.shutdown()


if __name__ == "__main__":
    main()
