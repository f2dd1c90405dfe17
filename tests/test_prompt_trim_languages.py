"""Prompt trimming in every language the server serves (config.DEFAULT_LANGUAGES): when the prefix or the suffix is
cut to its token budget, the cut falls between whole syntactic units (definitions, members, statements), never
inside one. Each row is one language: code written with a cursor marker (█) the way that language is written, with
a statement that spans lines wherever a cut could fall, so that a cut at a line start or a line end that is not a
unit's would show."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest

from codecue_lsp.config import DEFAULT_LANGUAGES
from codecue_lsp.prompt import OpenDocument, PromptBudget, build_prompt
from codecue_lsp.prompt.languages import spec_for
from codecue_lsp.prompt.text import split_cursor
from engine.store.config import FimTemplate

FIM = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
CURSOR = "█"
UNITS = 40  # small definitions above the cursor's function: far more than any budget below holds


def count(text):
    return len(text) // 3 + 1  # as test_prompt_build.py: about one token per three characters


@dataclass(frozen=True)
class Sample:
    """One language's code. The file is head + open + units + the cursor's function + close; every piece is whole."""
    language: str                     # the LSP languageId
    path: str
    head: tuple[str, ...]             # top-level statements before the units (package, imports), each whole
    unit: Callable[[int], str]        # a small definition holding a statement that spans two lines
    enclosing: str                    # the function the cursor (█) is in, whole
    statement: Callable[[int], str]   # one statement of a long body: every third spans two lines
    big: tuple[str, str]              # a function's header, and its end that starts with the cursor's line
    suffix: tuple[str, str, str]      # a function with █ before a two-line statement; the suffix up to that
                                      # statement's end; the suffix up to the function's end
    open: str = ""                    # a container around the units (a class, an impl, a namespace)
    close: str = ""


SAMPLES = [
    Sample(
        "python", "main.py",
        head=("import os\n", "from typing import List\n\n\n"),
        unit=lambda i: (f"def helper_{i}(value, scale={i}):\n    result = combine(value,\n"
                        f"                     scale)\n    return result + {i}\n\n\n"),
        enclosing=("def total(items):\n    count = 0\n    for item in items:\n        count += item\n    █\n"
                   "    label = \", \".join([\n        \"a\",\n        \"b\"])\n    return count\n\n\n"),
        statement=lambda i: (f"    step_{i} = compute({i},\n                       {i + 1})\n" if i % 3 == 0
                             else f"    step_{i} = compute({i})\n"),
        big=("def big():\n", "    █\n    return 0\n\n\n"),
        suffix=("def f(x):\n    a = 1\n    █\n    b = call(x,\n             2)\n    return b\n\n\n",
                "\n    b = call(x,\n             2)\n",
                "\n    b = call(x,\n             2)\n    return b\n"),
    ),
    Sample(
        "javascript", "main.js",
        head=('import fs from "fs";\n', 'import { join } from "path";\n\n'),
        unit=lambda i: (f"function helper{i}(value) {{\n  const result = combine(value,\n    {i});\n"
                        f"  return result + {i};\n}}\n\n"),
        enclosing=("function total(items) {\n  let count = 0;\n  for (const item of items) {\n    count += item;\n"
                   "  }\n  █\n  const label = [\n    \"a\",\n    \"b\"].join(\", \");\n  return count;\n}\n\n"),
        statement=lambda i: (f"  const step{i} = compute({i},\n    {i + 1});\n" if i % 3 == 0
                             else f"  const step{i} = compute({i});\n"),
        big=("function big() {\n", "  █\n  return 0;\n}\n\n"),
        suffix=("function f(x) {\n  const a = 1;\n  █\n  const b = call(x,\n    2);\n  return b;\n}\n\n",
                "\n  const b = call(x,\n    2);\n",
                "\n  const b = call(x,\n    2);\n  return b;\n}\n"),
    ),
    Sample(
        "javascriptreact", "list.jsx",
        head=('import React from "react";\n', 'import { Item } from "./item";\n\n'),
        unit=lambda i: (f"function Row{i}({{ value }}) {{\n  return (\n    <li className=\"row\">\n"
                        f"      {{value}} {i}\n    </li>\n  );\n}}\n\n"),
        enclosing=("function List({ items }) {\n  const count = items.length;\n  █\n  return (\n    <ul>\n"
                   "      {items.map((item) => <Item key={item.id} {...item} />)}\n    </ul>\n  );\n}\n\n"),
        statement=lambda i: (f"  const cell{i} = <td key=\"{i}\">\n    {{values[{i}]}}</td>;\n" if i % 3 == 0
                             else f"  const cell{i} = <td key=\"{i}\">{{values[{i}]}}</td>;\n"),
        big=("function Table({ values }) {\n", "  █\n  return <tr />;\n}\n\n"),
        suffix=("function Card({ title }) {\n  const open = true;\n  █\n  const body = (\n    <p>{title}</p>);\n"
                "  return <div>{body}</div>;\n}\n\n",
                "\n  const body = (\n    <p>{title}</p>);\n",
                "\n  const body = (\n    <p>{title}</p>);\n  return <div>{body}</div>;\n}\n"),
    ),
    Sample(
        "typescript", "store.ts",
        head=('import { readFileSync } from "fs";\n', 'import type { Options } from "./options";\n\n'),
        open="export class Store {\n",
        unit=lambda i: (f"  helper{i}(value: number): number {{\n    const result = this.combine(value,\n"
                        f"      {i});\n    return result + {i};\n  }}\n\n"),
        enclosing=("  total(items: number[]): number {\n    let count = 0;\n    for (const item of items) {\n"
                   "      count += item;\n    }\n    █\n    const label: string = [\n      \"a\",\n"
                   "      \"b\"].join(\", \");\n    return count;\n  }\n\n"),
        statement=lambda i: (f"    const step{i}: number = compute({i},\n      {i + 1});\n" if i % 3 == 0
                             else f"    const step{i}: number = compute({i});\n"),
        big=("  big(): number {\n", "    █\n    return 0;\n  }\n\n"),
        suffix=("  f(x: number): number {\n    const a = 1;\n    █\n    const b: number = call(x,\n      2);\n"
                "    return b;\n  }\n\n",
                "\n    const b: number = call(x,\n      2);\n",
                "\n    const b: number = call(x,\n      2);\n    return b;\n  }\n"),
        close="}\n",
    ),
    Sample(
        "typescriptreact", "list.tsx",
        head=('import React from "react";\n', 'import type { Props } from "./props";\n\n'),
        unit=lambda i: (f"export function Row{i}({{ value }}: {{ value: number }}) {{\n  return (\n"
                        f"    <li className=\"row\">\n      {{value}} {i}\n    </li>\n  );\n}}\n\n"),
        enclosing=("export function List({ items }: Props) {\n  const count: number = items.length;\n  █\n"
                   "  return (\n    <ul>\n      {items.map((item) => <li key={item.id}>{item.name}</li>)}\n"
                   "    </ul>\n  );\n}\n\n"),
        statement=lambda i: (f"  const cell{i}: JSX.Element = <td key=\"{i}\">\n    {{values[{i}]}}</td>;\n"
                             if i % 3 == 0
                             else f"  const cell{i}: JSX.Element = <td key=\"{i}\">{{values[{i}]}}</td>;\n"),
        big=("export function Table({ values }: { values: number[] }) {\n", "  █\n  return <tr />;\n}\n\n"),
        suffix=("export function Card({ title }: { title: string }) {\n  const open: boolean = true;\n  █\n"
                "  const body = (\n    <p>{title}</p>);\n  return <div>{body}</div>;\n}\n\n",
                "\n  const body = (\n    <p>{title}</p>);\n",
                "\n  const body = (\n    <p>{title}</p>);\n  return <div>{body}</div>;\n}\n"),
    ),
    Sample(
        "go", "main.go",
        head=("package main\n\n", "import (\n\t\"fmt\"\n\t\"strings\"\n)\n\n"),
        unit=lambda i: (f"func helper{i}(value int) int {{\n\tresult := combine(value,\n\t\t{i})\n"
                        f"\treturn result + {i}\n}}\n\n"),
        enclosing=("func total(items []int) int {\n\tcount := 0\n\tfor _, item := range items {\n\t\tcount += item\n"
                   "\t}\n\t█\n\tlabel := strings.Join([]string{\n\t\t\"a\",\n\t\t\"b\"}, \", \")\n"
                   "\tfmt.Println(label)\n\treturn count\n}\n\n"),
        statement=lambda i: (f"\tstep{i} := compute({i},\n\t\t{i + 1})\n" if i % 3 == 0
                             else f"\tstep{i} := compute({i})\n"),
        big=("func big() int {\n", "\t█\n\treturn 0\n}\n\n"),
        suffix=("func f(x int) int {\n\ta := 1\n\t█\n\tb := call(x,\n\t\t2)\n\treturn b\n}\n\n",
                "\n\tb := call(x,\n\t\t2)\n",
                "\n\tb := call(x,\n\t\t2)\n\treturn b\n}\n"),
    ),
    Sample(
        "rust", "store.rs",
        head=("use std::collections::HashMap;\n", "use std::fmt;\n\n"),
        open="impl Store {\n",
        unit=lambda i: (f"    #[inline]\n    fn helper_{i}(&self, value: i64) -> i64 {{\n"
                        f"        let result = self.combine(value,\n            {i});\n"
                        f"        result + {i}\n    }}\n\n"),
        enclosing=("    #[must_use]\n    fn total(&self, items: &[i64]) -> i64 {\n        let mut count = 0;\n"
                   "        for item in items {\n            count += item;\n        }\n        █\n"
                   "        let label = vec![\n            \"a\",\n            \"b\"].join(\", \");\n"
                   "        count\n    }\n\n"),
        statement=lambda i: (f"    let step_{i} = compute({i},\n        {i + 1});\n" if i % 3 == 0
                             else f"    let step_{i} = compute({i});\n"),
        big=("#[must_use]\nfn big() -> i64 {\n", "    █\n    0\n}\n\n"),
        suffix=("    fn f(&self, x: i64) -> i64 {\n        let a = 1;\n        █\n        let b = call(x,\n"
                "            2);\n        b\n    }\n\n",
                "\n        let b = call(x,\n            2);\n",
                "\n        let b = call(x,\n            2);\n        b\n    }\n"),
        close="}\n",
    ),
    Sample(
        "java", "Main.java",
        head=("package demo;\n\n", "import java.util.List;\n", "import java.util.Map;\n\n"),
        open="public class Main {\n",
        unit=lambda i: (f"    int helper{i}(int value) {{\n        int result = combine(value,\n            {i});\n"
                        f"        return result + {i};\n    }}\n\n"),
        enclosing=("    int total(List<Integer> items) {\n        int count = 0;\n        for (int item : items) {\n"
                   "            count += item;\n        }\n        █\n        String label = String.join(\", \",\n"
                   "            \"a\",\n            \"b\");\n        return count;\n    }\n\n"),
        statement=lambda i: (f"        int step{i} = compute({i},\n            {i + 1});\n" if i % 3 == 0
                             else f"        int step{i} = compute({i});\n"),
        big=("    int big() {\n", "        █\n        return 0;\n    }\n\n"),
        suffix=("    int f(int x) {\n        int a = 1;\n        █\n        int b = call(x,\n            2);\n"
                "        return b;\n    }\n\n",
                "\n        int b = call(x,\n            2);\n",
                "\n        int b = call(x,\n            2);\n        return b;\n    }\n"),
        close="}\n",
    ),
    Sample(
        "c", "main.c",
        head=("#include <stdio.h>\n", "#include <string.h>\n\n"),
        unit=lambda i: (f"int helper_{i}(int value) {{\n    int result = combine(value,\n"
                        f"                         {i});\n    return result + {i};\n}}\n\n"),
        enclosing=("int total(const int *items, int n) {\n    int count = 0;\n    for (int i = 0; i < n; i++) {\n"
                   "        count += items[i];\n    }\n    █\n    printf(\"%d %d\\n\",\n           count, n);\n"
                   "    return count;\n}\n\n"),
        statement=lambda i: (f"    int step_{i} = compute({i},\n                           {i + 1});\n" if i % 3 == 0
                             else f"    int step_{i} = compute({i});\n"),
        big=("int big(void) {\n", "    █\n    return 0;\n}\n\n"),
        suffix=("int f(int x) {\n    int a = 1;\n    █\n    int b = call(x,\n                 2);\n"
                "    return b;\n}\n\n",
                "\n    int b = call(x,\n                 2);\n",
                "\n    int b = call(x,\n                 2);\n    return b;\n}\n"),
    ),
    Sample(
        "cpp", "main.cpp",
        head=("#include <string>\n", "#include <vector>\n\n"),
        open="namespace demo {\n\n",
        unit=lambda i: (f"int helper_{i}(int value) {{\n    auto result = combine(value,\n"
                        f"                          {i});\n    return result + {i};\n}}\n\n"),
        enclosing=("int total(const std::vector<int>& items) {\n    int count = 0;\n    for (int item : items) {\n"
                   "        count += item;\n    }\n    █\n    std::string label = join({\"a\",\n"
                   "                              \"b\"});\n    return count;\n}\n\n"),
        statement=lambda i: (f"    auto step_{i} = compute({i},\n                            {i + 1});\n" if i % 3 == 0
                             else f"    auto step_{i} = compute({i});\n"),
        big=("int big() {\n", "    █\n    return 0;\n}\n\n"),
        suffix=("int f(int x) {\n    int a = 1;\n    █\n    auto b = call(x,\n                  2);\n"
                "    return b;\n}\n\n",
                "\n    auto b = call(x,\n                  2);\n",
                "\n    auto b = call(x,\n                  2);\n    return b;\n}\n"),
        close="}  // namespace demo\n",
    ),
]
BY_LANGUAGE = {sample.language: sample for sample in SAMPLES}


def build(sample: Sample, marked: str, total: int, suffix: int = 40, context: int = 40):
    text, line, character = split_cursor(marked)
    doc = OpenDocument(f"file:///w/src/{sample.path}", sample.language, text)
    return text, build_prompt(doc, line, character, FIM, count,
                              budget=PromptBudget(total=total, suffix=suffix, context=context))


def starts(pieces: list[str]) -> list[int]:
    """The offset of each piece in their concatenation."""
    offsets, at = [], 0
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    return offsets


def without_cursor(text: str) -> str:
    return text.replace(CURSOR, "")


def test_every_served_language_has_a_row_and_a_grammar():
    assert sorted(BY_LANGUAGE) == sorted(DEFAULT_LANGUAGES)
    assert all(spec_for(language) is not None for language in DEFAULT_LANGUAGES)
    for sample in SAMPLES:  # each piece holds the marker where it must, and only there
        assert sample.enclosing.count(CURSOR) == sample.big[1].count(CURSOR) == sample.suffix[0].count(CURSOR) == 1
        assert CURSOR not in sample.unit(0) + sample.statement(0) + "".join(sample.head) + sample.open + sample.close


@pytest.mark.parametrize("total", [300, 600, 1000])
@pytest.mark.parametrize("language", DEFAULT_LANGUAGES)
def test_the_prefix_starts_at_a_whole_definition(language, total):
    """Far more code above the cursor than the budget holds: the prefix starts where a definition (or an import, the
    container) starts, so no definition is cut, and the cursor's own function is in it whole."""
    sample = BY_LANGUAGE[language]
    pieces = [*sample.head, sample.open, *(sample.unit(i) for i in range(UNITS)), sample.enclosing,
              sample.unit(UNITS), sample.close]
    text, prompt = build(sample, "".join(pieces), total)
    unit_starts = [offset for piece, offset in zip(pieces, starts([without_cursor(p) for p in pieces])) if piece]
    assert 0 < prompt.prefix_start, "the whole file fits: the test does not trim"
    assert prompt.prefix_start in unit_starts, (
        f"{language}: the prefix starts inside a unit:\n{text[prompt.prefix_start:prompt.prefix_start + 120]}")
    header = sample.enclosing.split(CURSOR)[0]
    assert prompt.prefix.endswith(header.rstrip(" \t")), f"{language}: the cursor's function is not whole"
    assert sum(prompt.sections.values()) <= total


@pytest.mark.parametrize("language", DEFAULT_LANGUAGES)
def test_a_function_longer_than_the_budget_is_cut_between_its_statements(language):
    """The cursor's function alone outgrows the budget: the prefix starts at one of its statements, never inside a
    statement that spans two lines."""
    sample = BY_LANGUAGE[language]
    statements = [sample.statement(i) for i in range(200)]
    pieces = [*sample.head, sample.open, sample.big[0], *statements, sample.big[1], sample.close]
    text, prompt = build(sample, "".join(pieces), 300)
    offsets = starts([without_cursor(p) for p in pieces])
    first_statement = len(sample.head) + 2
    statement_starts = offsets[first_statement:first_statement + len(statements)]
    assert prompt.prefix_start in statement_starts, (
        f"{language}: the prefix does not start at a statement:\n{text[prompt.prefix_start:prompt.prefix_start + 120]}")
    assert prompt.prefix.endswith(statements[-1]) and sum(prompt.sections.values()) <= 300


@pytest.mark.parametrize("language", DEFAULT_LANGUAGES)
def test_whatever_the_budget_the_prefix_starts_at_a_unit(language):
    """Budgets from a part of the cursor's function to several definitions above it: the prefix starts at a
    definition above, at the cursor's function itself (with its attributes, its export) or at one of its statements."""
    sample = BY_LANGUAGE[language]
    statements = [sample.statement(i) for i in range(24)]
    pieces = [*sample.head, sample.open, *(sample.unit(i) for i in range(UNITS)), sample.big[0], *statements,
              sample.big[1], sample.close]
    allowed = set(starts([without_cursor(p) for p in pieces]))
    for total in range(150, 800, 10):
        text, prompt = build(sample, "".join(pieces), total)
        assert prompt.prefix_start in allowed, (
            f"{language}, {total} tokens: the prefix starts inside a unit:\n"
            f"{text[prompt.prefix_start:prompt.prefix_start + 120]}")


@pytest.mark.parametrize("language", DEFAULT_LANGUAGES)
def test_the_suffix_ends_at_a_statement_end(language):
    """The suffix is the rest of the cursor's block, cut at the end of a statement: a budget one token short of the
    two-line statement after the cursor leaves it out whole (its first line would fit), not half of it."""
    sample = BY_LANGUAGE[language]
    marked, through_statement, through_function = sample.suffix
    pieces = [*sample.head, sample.open, marked, *(sample.unit(i) for i in range(5)), sample.close]
    first_line = through_statement[:through_statement.index("\n", 1) + 1]
    assert count(first_line) <= count(through_statement) - 1  # the table's premise: a cut at a line end would fit
    for budget, expected in [(count(through_statement) - 1, "\n"), (count(through_statement), through_statement),
                             (count(through_function), through_function)]:
        _, prompt = build(sample, "".join(pieces), 600, suffix=budget)
        assert prompt.suffix == expected, (language, budget)


@pytest.mark.parametrize("language", DEFAULT_LANGUAGES)
def test_no_suffix_budget_ends_the_suffix_inside_a_unit(language):
    """Every budget from one token to the whole rest of the file: the suffix ends at the cursor's line, at a statement
    of its function, at the function's end, at the end of a definition after it or at the file's end."""
    sample = BY_LANGUAGE[language]
    marked, through_statement, through_function = sample.suffix
    after = [sample.unit(i) for i in range(5)]
    pieces = [*sample.head, sample.open, marked, *after, sample.close]
    text = without_cursor("".join(pieces))
    cursor = "".join(pieces).index(CURSOR)
    rest = through_function[len(through_statement):]
    ends = {"\n", through_statement} | {through_statement + rest[:i + 1] for i, c in enumerate(rest) if c == "\n"}
    ends.add(text[cursor:])  # all of it: the file's end
    units_start = len(without_cursor("".join([*sample.head, sample.open, marked])))
    for piece, start in zip(after, starts(after)):
        ends.add(text[cursor:units_start + start + len(piece.rstrip("\n")) + 1])
    for budget in range(1, count(max(ends, key=len)) + 1):
        _, prompt = build(sample, "".join(pieces), 600, suffix=budget)
        assert prompt.suffix in ends, f"{language}, a suffix of {budget} tokens ends inside a unit:\n{prompt.suffix}"
