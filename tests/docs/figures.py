#!/usr/bin/env python3
"""A measured figure lives in one document; another that gives it links there, in the
paragraph that gives it. Prints, one a line, each figure (a number with a unit of speed or
ratio: µs, decimal ms, MB/s and the like, ×, calls/s) that two documents give where
neither paragraph links to the other document, and exits 1 when there is one. Generated documents (docs/protocol.md, docs/cli.md, sdk/golden/) are
not read: their text is the spec's and the help's.

usage: figures.py SOURCE_ROOT FILE.md...
"""
import os
import re
import sys

# A range ("62–70 µs") is one figure.
NUM = r"\d+(?:\.\d+)?(?:\s?[–-]\s?\d+(?:\.\d+)?)?"
FIGURE = re.compile(
    r"(?<![\w.–-])("
    rf"{NUM}\s?(?:µs|us)(?![\w/])"
    r"|\d+\.\d+(?:\s?[–-]\s?\d+\.\d+)?\s?ms(?![\w/])"
    rf"|{NUM}\s?(?:[KMG]i?B|[KMG]bit)/s(?!\w)"
    rf"|{NUM}\s?[×x](?![\w\d])"
    rf"|{NUM}\s?(?:calls|ops|execs|requests|messages)/s(?!\w)"
    r")")
LINK = re.compile(r"\]\(([^)#\s]+)")
GENERATED = ("docs/protocol.md", "docs/cli.md")


def normal(figure):
    f = figure.replace(" ", "").replace("us", "µs").replace("x", "×").replace("-", "–")
    return f


def main(argv):
    root, files = argv[1], argv[2:]
    found = {}  # figure -> {file: [links of each paragraph that gives it]}
    for rel in files:
        if rel in GENERATED or rel.startswith("sdk/golden/"):
            continue
        with open(os.path.join(root, rel), encoding="utf-8") as fh:
            text = fh.read()
        here = os.path.dirname(rel)
        for para in re.split(r"\n\s*\n", text):
            links = {os.path.normpath(os.path.join(here, t)) for t in LINK.findall(para)}
            for fig in FIGURE.findall(para):
                found.setdefault(normal(fig), {}).setdefault(rel, []).append(links)
    bad = []
    for fig, where in sorted(found.items()):
        docs = sorted(where)
        for i, a in enumerate(docs):
            for b in docs[i + 1:]:
                a_cites = all(b in links for links in where[a])
                b_cites = all(a in links for links in where[b])
                if not a_cites and not b_cites:
                    bad.append(f"{fig}: in {a} and {b}, and neither's paragraph links the other")
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
