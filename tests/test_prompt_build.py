"""build_prompt: layout, budgets, syntactic cuts, a prefix that stays put while typing, context ranking, odd input."""
import pytest

from codecue_lsp.prompt import OpenDocument, PromptBudget, SyntaxCache, build_prompt
from codecue_lsp.prompt.text import split_cursor
from engine.store.config import FimTemplate

FIM = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")


def count(text):
    return len(text) // 3 + 1


def build(marked, language="python", uri="file:///w/pkg/main.py", **kwargs):
    text, line, character = split_cursor(marked)
    return build_prompt(OpenDocument(uri, language, text), line, character, FIM, count, **kwargs)


def module(functions=30):
    parts = ["import os\nfrom typing import List\n\n"]
    for i in range(functions):
        parts.append(f"def helper_{i}(value, scale={i}):\n    result = value * scale\n    return result + {i}\n\n")
    return "".join(parts)


FIB = "def fibonacci(n):\n    if n <= 1:\n        return n\n    █\n\nprint(fibonacci(10))\n"


def test_layout_is_context_then_prefix_then_suffix():
    other = OpenDocument("file:///w/pkg/util.py", "python", "def fib_cache(n):\n    return n\n")
    prompt = build("import util\n\n" + FIB, other_docs=[other])
    # The model's repository format: other files, then the current file's header, then the FIM part.
    assert prompt.display.startswith("<|file_sep|>util.py\ndef fib_cache(n): ...\n<|file_sep|>main.py\n<|fim_prefix|>")
    assert prompt.display.endswith(f"{prompt.prefix}<|fim_suffix|>{prompt.suffix}<|fim_middle|>")
    assert prompt.prefix.startswith("import util") and prompt.suffix == "\n\nprint(fibonacci(10))\n"
    assert prompt.mode == "block" and prompt.sections["prefix"] == count(prompt.prefix)


@pytest.mark.parametrize("total", [200, 400, 800])
def test_prefix_starts_at_a_statement_boundary_within_budget(total):
    budget = PromptBudget(total=total, suffix=40, context=60)
    prompt = build(module() + FIB, budget=budget)
    assert sum(prompt.sections.values()) + 3 <= total + 3               # + the three FIM markers, one token each
    assert prompt.sections["suffix"] <= budget.suffix and prompt.sections["context"] <= budget.context + 5
    first = prompt.prefix.split("\n", 1)[0]
    assert first.startswith(("def ", "import", "from")), first          # a whole top-level statement
    assert "def fibonacci(n):\n" in prompt.prefix                        # the enclosing function, whole


def test_enclosing_function_kept_whole_and_large_ones_cut_between_statements():
    body = "".join(f"    step_{i} = compute({i})\n" for i in range(200))
    budget = PromptBudget(total=300, suffix=30, context=40)
    prompt = build(module(3) + "def big():\n" + body + "    █\n", budget=budget)
    assert not prompt.prefix.startswith("def big")            # too large: cut inside it...
    assert prompt.prefix.startswith("    step_")             # ...at one of its statements, never mid-line


def test_prefix_start_stays_put_while_typing():
    text, line, character = split_cursor(module(40) + FIB)
    typed = "return fibonacci(n - 1) + fibonacci(n - 2)  # the classic recursive definition, typed slowly " * 4
    budget = PromptBudget(total=700, suffix=64, context=150)
    starts = []
    for n in range(0, len(typed) + 1, 2):
        doc = OpenDocument("file:///w/main.py", "python", _insert(text, line, character, typed[:n]))
        starts.append(build_prompt(doc, line, character + n, FIM, count, budget=budget).prefix_start)
    moves = [b - a for a, b in zip(starts, starts[1:]) if a != b]
    assert 1 <= len(moves) <= 2, moves                        # typing ~130 tokens forced a move, but only once
    assert all(move >= 300 for move in moves)                 # and then by a coarse step (several statements)


def _insert(text, line, character, typed):
    lines = text.split("\n")
    lines[line] = lines[line][:character] + typed + lines[line][character:]
    return "\n".join(lines)


def test_suffix_is_the_rest_of_the_block_cut_at_a_statement_end():
    marked = "def f(x):\n    a = 1\n    █\n    b = call(x,\n             2)\n    return b\n\n" + module(5)
    prompt = build(marked, budget=PromptBudget(total=400, suffix=12, context=40))
    assert prompt.suffix == "\n    b = call(x,\n             2)\n"   # not cut inside the call
    prompt = build(marked, budget=PromptBudget(total=400, suffix=25, context=40))
    assert prompt.suffix.startswith("\n    b = call(x,\n             2)\n    return b\n")


def test_context_prefers_functions_called_near_the_cursor():
    others = [OpenDocument(f"file:///w/lib/m{i}.py", "python",
                           f"def unrelated_{i}(a, b, c):\n    return a\n") for i in range(6)]
    others.append(OpenDocument("file:///w/lib/maths.py", "python", "def gcd(a, b):\n    return a\n"))
    prompt = build("from lib.maths import gcd\n\ndef lcm(x, y):\n    return x * y // gcd(█",
                   other_docs=others, budget=PromptBudget(total=400, suffix=20, context=40))
    assert "../lib/maths.py\ndef gcd(a, b): ..." in prompt.display
    assert "unrelated_5" not in prompt.display


def test_context_brings_imports_and_signatures_from_outside_the_prefix():
    marked = module(60) + "def uses():\n    return helper_3(█)\n"
    prompt = build(marked, budget=PromptBudget(total=300, suffix=20, context=100))
    header, prefix = prompt.display.split("<|file_sep|>main.py\n", 1)
    assert "import os" in prefix.split("def uses")[0]
    assert "def helper_3(value, scale=3): ..." in prefix.split("def uses")[0]
    assert prompt.display.count("def helper_3(") == 1         # once: the prefix does not hold it too


@pytest.mark.parametrize("text, line, character", [
    ("", 0, 0),
    ("", 5, 9),
    ("x = 1\n", 40, 3),
    ("x = 1", 0, 400),
    ("s = '\udcff\udcfe'\ndef f(😀):\n    ", 2, 4),
    ("a\r\nb\r\n", 1, 1),
    ("\x00\x01\x02", 0, 2),
])
@pytest.mark.parametrize("language", ["python", "rust", "plaintext"])
def test_odd_input_never_raises(text, line, character, language):
    prompt = build_prompt(OpenDocument("untitled:1", language, text), line, character, FIM, count,
                          syntax=SyntaxCache())
    assert prompt.display.startswith(FIM.file_sep + "1\n" + FIM.prefix)
    assert prompt.display.endswith(FIM.middle + prompt.middle)
    assert prompt.display.encode("utf-8")


@pytest.mark.parametrize("with_cache", [False, True])
def test_five_megabyte_document(with_cache):
    text = module(56000)
    text = text + "def last():\n    " + "x" * 10
    assert len(text) > 5_000_000
    cache = SyntaxCache() if with_cache else None
    doc = OpenDocument("file:///w/huge.py", "python", text)
    prompt = build_prompt(doc, 2_000_000, 0, FIM, count, syntax=cache)          # line past the end
    assert prompt.prefix.endswith("x" * 10) and prompt.sections["prefix"] <= 1536
    middle = build_prompt(doc, 40_000, 4, FIM, count, syntax=cache)
    assert middle.prefix.startswith(("def", "import", "from")) and middle.sections["suffix"] <= 128


def test_with_the_tiny_pair_tokenizer():
    from engine_helpers import tiny_pair

    from engine import Engine

    engine = Engine(tiny_pair("none"))
    text, line, character = split_cursor(module(80) + FIB)
    prompt = build_prompt(OpenDocument("file:///w/main.py", "python", text), line, character, FIM,
                          engine.count_tokens, budget=PromptBudget(total=600, suffix=64, context=128))
    ids = engine.encode_prompt(prompt.pieces)
    engine.close()
    assert len(ids) <= 600
    special = engine.tokenizer.convert_tokens_to_ids(["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"])
    assert [ids.count(i) for i in special] == [1, 1, 1] and ids[-1] == special[2]
    assert prompt.prefix.endswith("return n\n") and prompt.withheld == "    "
