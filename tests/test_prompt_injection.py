"""Special-token injection: a document that contains the FIM markers' strings must reach the model as ordinary
text. The prompt is built as pieces and encoded by the engine: user text with special-token strings split, each
template marker as its one special token."""
import pytest
import torch
from engine_helpers import tiny_pair

from codecue_lsp.prompt import OpenDocument, PromptBudget, build_prompt
from codecue_lsp.prompt.text import split_cursor
from engine import Engine
from engine.loading.pair import LoadedPair
from engine.store.config import FimTemplate, ModelSpec, PairSpec, load_config, model_dir
from engine.store.local import is_ready

EVERY_MARKER = ("<|fim_prefix|> <|fim_suffix|> <|fim_middle|> <|fim_pad|> <|file_sep|> <|repo_name|> "
                "<|endoftext|> <|im_start|> <|im_end|>")
MARKERS = EVERY_MARKER.split()

FIB_WITH_MARKERS = f'''# prompt layout: {EVERY_MARKER}
TEMPLATE = "<|fim_prefix|>{{prefix}}<|fim_suffix|>{{suffix}}<|fim_middle|>"
STOPS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|file_sep|>", "<|repo_name|>"]


def fibonacci(n):
    if n <= 1:
        return n
    █

print(fibonacci(10))  # {EVERY_MARKER}
'''

UTIL = '''def wrap(text, start="<|fim_prefix|>", end="<|endoftext|>"):
    return start + text + end
'''

CALLER = '''import util

# {EVERY_MARKER}
def framed(body):
    return util.wrap(█)
'''.replace("{EVERY_MARKER}", EVERY_MARKER)

PLAIN = f"notes: {EVERY_MARKER}\nmore: █ <|fim_middle|>\n"


def models_toml_with_cursor() -> str:
    """This repository's own models.toml (it names every marker), cursor after the FIM prefix setting."""
    from engine.paths import REPO_MODELS_TOML

    text = REPO_MODELS_TOML.read_text()
    anchor = 'prefix = "<|fim_prefix|>"\n'
    return text.replace(anchor, anchor + "█", 1)


ONE_FILE = ["<|file_sep|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]

# (case, marked document, language, uri, other documents, user text the prompt must hold,
#  the special tokens the prompt must hold, in order)
CASES = [
    ("markers in comments and strings around the cursor", FIB_WITH_MARKERS, "python", "file:///w/fib.py", [],
     'TEMPLATE = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"', ONE_FILE),
    ("markers in another file's signature (context)", CALLER, "python", "file:///w/main.py",
     [OpenDocument("file:///w/util.py", "python", UTIL)], 'def wrap(text, start="<|fim_prefix|>", end="<|endoftext|>")',
     ["<|file_sep|>", "<|file_sep|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]),
    ("this repository's models.toml", models_toml_with_cursor(), "toml", "file:///w/models.toml", [],
     'prefix = "<|fim_prefix|>"', ONE_FILE),
    ("plain text, no grammar", PLAIN, "plaintext", "file:///w/notes.txt", [], EVERY_MARKER, ONE_FILE),
    ("a marker in the file name", FIB_WITH_MARKERS, "python", "file:///w/%3C%7Cfim_middle%7C%3E.py", [],
     "<|fim_middle|>.py\n", ONE_FILE),
]


def _engine_for(tokenizer, fim: FimTemplate, name: str) -> Engine:
    """An engine for its tokenizer only (no weights): prompt encoding needs nothing else."""
    spec = ModelSpec(name=name, family="test", fim=fim, stop_token_ids=())
    return Engine(LoadedPair(spec=PairSpec("test", spec, None), target=None, draft=None, tokenizer=tokenizer,
                             device=torch.device("cpu"), dtype=torch.float32))


@pytest.fixture(scope="module", params=["tiny", "qwen2.5-coder"])
def engine(request):
    if request.param == "tiny":
        engine = Engine(tiny_pair("none"))
    else:  # the real tokenizer: all of Qwen's special tokens, and models.toml's own template
        spec = load_config().pair("default").target
        if not is_ready(spec.name):
            pytest.skip("real models not fetched: run `codecue-models fetch`")
        from transformers import AutoTokenizer
        engine = _engine_for(AutoTokenizer.from_pretrained(model_dir(spec.name)), spec.fim, spec.name)
    yield engine
    engine.close()


def special_ids(tokenizer) -> set[int]:
    return {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}


def specials_in(ids: list[int], tokenizer) -> list[str]:
    """The special tokens among the ids, in order, by name."""
    special = special_ids(tokenizer)
    return [tokenizer.convert_ids_to_tokens(i) for i in ids if i in special]


@pytest.mark.parametrize("case, marked, language, uri, others, needle, expected", CASES, ids=[c[0] for c in CASES])
def test_marker_strings_in_the_document_stay_text(engine, case, marked, language, uri, others, needle, expected):
    text, line, character = split_cursor(marked)
    prompt = build_prompt(OpenDocument(uri, language, text), line, character, engine.fim, engine.count_tokens,
                          other_docs=others, budget=PromptBudget(total=1024, suffix=128, context=256))
    user_text = "".join(value for kind, value in prompt.pieces if kind == "text")
    assert needle in user_text  # the case really puts the user's marker strings into the prompt

    ids = engine.encode_prompt(prompt.pieces)

    # Each template marker is there once (file_sep once per file header); the user's strings added none.
    assert specials_in(ids, engine.tokenizer) == expected
    # The middle marker is the last marker; only the cursor line's typed part (user text) follows it.
    middle_at = len(ids) - 1 - ids[::-1].index(engine.special_token_id(engine.fim.middle))
    assert engine.tokenizer.decode(ids[middle_at + 1:], skip_special_tokens=False) == prompt.middle
    # Everything the user wrote is there, as ordinary tokens: the ids decode back to the prompt as displayed.
    assert engine.tokenizer.decode(ids, skip_special_tokens=False) == prompt.display


@pytest.mark.parametrize("marker", MARKERS)
def test_user_text_and_token_budget_split_special_token_strings(engine, marker):
    """The budget counts what the prompt will hold: a marker string written by the user is several tokens."""
    ids = engine.encode(f"x = '{marker}'\n")
    assert not set(ids) & special_ids(engine.tokenizer)
    assert engine.count_tokens(marker) == len(engine.encode(marker)) > 1


def test_documents_without_marker_strings_encode_as_before(engine):
    """For ordinary files the ids are exactly those of the whole prompt string with markers recognised."""
    text, line, character = split_cursor("import os\n\n\ndef area(r):\n    █\n\nprint(area(2))\n")
    others = [OpenDocument("file:///w/geo.py", "python", "def circle(r):\n    return 3.14 * r * r\n")]
    prompt = build_prompt(OpenDocument("file:///w/main.py", "python", text), line, character, engine.fim,
                          engine.count_tokens, other_docs=others)
    whole = engine.tokenizer.encode(prompt.display, add_special_tokens=False, split_special_tokens=False)
    assert engine.encode_prompt(prompt.pieces) == whole
    assert engine.encode_fim("def f(x):\n", "\n") == engine.tokenizer.encode(
        engine.fim.format("def f(x):\n", "\n"), add_special_tokens=False, split_special_tokens=False)


def _tiny_tokenizer_with_plain_added_token():
    from engine.testing import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.add_tokens(["<|plain|>"])  # an added token that is not special: user text would still match it
    return tokenizer


@pytest.mark.parametrize("bad_marker, why", [
    ("<PRE>", "not a token of this tokenizer"),
    ("<|im_start|>", "special in Qwen, unknown to the tiny tokenizer"),
    ("<|fim_prefix|><|fim_prefix|>", "two tokens"),
    ("<|fim_prefix|> ", "a token and a space"),
    ("<|plain|>", "an added token that is not special"),
])
def test_template_markers_must_be_one_special_token(bad_marker, why):
    tokenizer = _tiny_tokenizer_with_plain_added_token()
    bad = FimTemplate(bad_marker, "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
    with pytest.raises(ValueError, match="is not one special token of the tiny-target tokenizer"):
        _engine_for(tokenizer, bad, "tiny-target")  # refused at load, not on the first keystroke
    good = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
    engine = _engine_for(tokenizer, good, "tiny-target")
    try:
        with pytest.raises(ValueError, match="is not one special token"):
            engine.encode_prompt([("special", bad_marker)])
        assert engine.encode_prompt([("special", "<|fim_suffix|>")]) == [engine.special_token_id("<|fim_suffix|>")]
    finally:
        engine.close()


def test_unknown_piece_kind_is_refused():
    engine = Engine(tiny_pair("none"))
    try:
        with pytest.raises(ValueError, match="unknown prompt piece kind"):
            engine.encode_prompt([("marker", "<|fim_prefix|>")])
    finally:
        engine.close()
