"""Prompts for the side-by-side benches cut from this repository's own code, as an editor would send them: a hole of
3-6 whole lines at a random line start, 2,000 characters before it and 400 after it (the hole's text removed, so no
drafter can copy it from the suffix). Prints JSON lines in docs/bench-prompts.jsonl's format, kind "repetitive"
(real code repeats itself); the same count and seed give the same prompts for the same tree.

    .venv/bin/python scripts/make-repo-prompts.py [count] [seed] > /tmp/repo-prompts.jsonl
    PROMPTS=/tmp/repo-prompts.jsonl .venv/bin/python scripts/bench-lookup-match.py 2
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("engine/*.py", "codecue_lsp/*.py", "codecue_bench/*.py", "tests/*.py", "editor-clients/vscode/src/*.ts")


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 7)
    files = sorted(path for pattern in SOURCES for path in ROOT.glob(pattern) if path.stat().st_size >= 4000)
    for path in rng.sample(files, min(count, len(files))):
        text = path.read_text()
        start = text.index("\n", rng.randrange(2000, len(text) - 800)) + 1
        end = start
        for _ in range(rng.randrange(3, 7)):
            end = text.index("\n", end) + 1
        print(json.dumps({"name": f"{path.relative_to(ROOT)}:{start}", "kind": "repetitive",
                          "prefix": text[start - 2000:start], "suffix": text[end:end + 400]}))


if __name__ == "__main__":
    main()
