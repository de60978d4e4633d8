"""A small real-text corpus for the benches' --small modes, built from the
repository's own text: a fresh clone has no data/ (`make data` downloads
Debian's Python documentation), and a small mode must run there.

README.md and docs/*.md are cut into documents of a few paragraphs (a couple
of hundred), written as the JSONL the trainer reads (id, source, license, text),
and a tokenizer is trained on them with `hlat tokenizer`; with tasks=True the
evaluation task files too, with `hlat make-tasks` (as `make data` does).
The same checkout gives the same files: the documents come in a fixed order
and every seed is the default.
"""
import glob
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HLAT = os.path.join(ROOT, "build", "cli", "hlat")
TASKS = ("heldout_perplexity", "next_sentence_mc4", "cloze_lastword")
HELDOUT_PERCENT = 30.0
MIN_CHARS, MAX_CHARS = 200, 800  # a heading with a line under it is not a document; a page is several


def documents(path):
    """The file's text in pieces of whole paragraphs, each piece within one heading's section and, unless one
    paragraph is longer, at most MAX_CHARS; Markdown code blocks are not cut."""
    pieces, lines, fenced = [], [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        heading = line.startswith("#") and not fenced
        paragraph_end = not line.strip() and not fenced and sum(map(len, lines)) >= MAX_CHARS
        if lines and (heading or paragraph_end):
            pieces.append("".join(lines))
            lines = []
        lines.append(line)
    pieces.append("".join(lines))
    return [p.strip() for p in pieces if len(p.strip()) >= MIN_CHARS]


def write_corpus(path):
    """The documents of README.md and docs/*.md as JSONL; returns how many."""
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for f in files:
            source = os.path.relpath(f, ROOT)
            for k, text in enumerate(documents(f)):
                out.write(json.dumps({"id": f"{source}#{k}", "source": source, "license": "hlat's own documentation",
                                      "text": text}) + "\n")
                count += 1
    return count


def hlat(*args):
    """Runs an hlat command quietly; on failure, exits with what it said."""
    r = subprocess.run([HLAT, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"small_corpus: hlat {' '.join(args)} failed (exit {r.returncode}):\n{r.stderr[-2000:]}")


def build(work, vocab_size=512, tasks=False):
    """Writes the corpus, its tokenizer (vocab_size pieces) and, with tasks, the task files into the folder
    work; returns {"corpus", "tokenizer", "config": a config naming both, "tasks": [task files]}."""
    corpus, tokenizer = os.path.join(work, "small-corpus.jsonl"), os.path.join(work, "small-tokenizer.model")
    write_corpus(corpus)
    config = os.path.join(work, "small-data.json")
    # A third held out, not the default tenth: the corpus is ~a few hundred documents of hlat's own docs, which
    # change every session, and a tenth of them left next_sentence_mc4 with no items once README was trimmed.
    json.dump({"data": {"corpus": [corpus], "tokenizer": tokenizer, "heldout_percent": HELDOUT_PERCENT},
               "model": {"vocab_size": vocab_size}}, open(config, "w"))
    hlat("tokenizer", "--config", config)
    out = {"corpus": corpus, "tokenizer": tokenizer, "config": config, "tasks": []}
    if tasks:
        folder = os.path.join(work, "tasks")
        hlat("make-tasks", "--config", config, "--out", folder)
        out["tasks"] = [os.path.join(folder, t + ".jsonl") for t in TASKS]
    return out
