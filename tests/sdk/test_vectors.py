#!/usr/bin/python3
"""tests/vectors/ through the Python SDK's decoder, and through a live stdio client.

1. Each msg-* vector is refused by asp._wire.decode with protocol_error, fast and
   without allocating what it claims; each req-* decodes as far as its id (5).
2. Each vector sent by a responder as its answer fails the pending call with
   protocol_error promptly (no hang); the client drops that responder and the next call
   works on a fresh one; each frame-* stream likewise. Also: a frame larger than max_message, a responder that dies
   mid-call (transport_error naming its exit status and stderr), a frame cut short.

usage: test_vectors.py SDK_DIR VECTORS_DIR
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402
from asp import _wire  # noqa: E402

vectors = sys.argv[2]
fake = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_responder.py")
passed = failed = 0


def report(ok, name, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok - %s" % name)
    else:
        failed += 1
        print("FAIL - %s %s" % (name, detail))


files = sorted(f for f in os.listdir(vectors) if f.endswith(".bin"))
messages = [f for f in files if not f.startswith("frame-")]
frames = [f for f in files if f.startswith("frame-")]
for f in messages:
    data = open(os.path.join(vectors, f), "rb").read()
    t0 = time.monotonic()
    try:
        m = _wire.decode(data)
        outcome = ("decoded", m.type, m.id)
    except asp.AspError as e:
        outcome = (e.code, e.message)
    took = time.monotonic() - t0
    if f.startswith("msg-"):
        report(outcome[0] == "protocol_error" and took < 1.0, "decode %s: protocol_error" % f,
               repr(outcome))
    else:
        good = (outcome[0] == "decoded" and outcome[1:] == (0, 5)) or (
            outcome[0] == "invalid_argument" and "request 5" in outcome[1])
        report(good, "decode %s: request 5" % f, repr(outcome))


def live(name, mode, arg=None, want="protocol_error", want_text=None):
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["/usr/bin/python3", fake, os.path.join(tmp, "counter"), mode]
        if arg:
            argv.append(arg)
        c = asp.Client.stdio(argv)
        t0 = time.monotonic()
        try:
            c.hello()
            got = ("ok",)
        except asp.AspError as e:
            got = (e.code, e.message)
        took = time.monotonic() - t0
        ok = got[0] == want and took < 5 and (want_text is None or want_text in got[-1])
        try:
            again = c.hello().agent == "fake/1"
        except asp.AspError as e:
            again = False
            got = got + ("then %s: %s" % (e.code, e.message),)
        c.close()
        report(ok and again, "%s: %s, then a fresh responder answers" % (name, want), repr(got))


for f in messages:
    live("responder sends %s" % f, "vector", os.path.join(vectors, f))
for f in frames:
    # frame-* are raw stream bytes: a length above max_message or an empty message is the
    # responder's protocol error; a stream ending inside a frame is a dead transport
    live("responder writes %s" % f, "raw", os.path.join(vectors, f),
         want="transport_error" if "truncated" in f else "protocol_error")
live("frame above max_message", "big")
live("responder dies", "die", want="transport_error", want_text="status 3")
live("responder dies (stderr shown)", "die", want="transport_error", want_text="dying")
live("frame cut short", "cut", want="transport_error")

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
