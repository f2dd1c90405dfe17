"""Token healing (engine/decode/healing.py): the prompt backs off its last user-text token and the first generated token
must start with its bytes; every drafter still gives the target-alone output (fp32, tiny models)."""
import pytest
import torch
from engine_helpers import reference_greedy, tiny_engine, tiny_model, tiny_tokenizer

from engine import CompletionRequest
from engine.decode.healing import HealingMasks, back_off, mask_first, token_bytes

MAX_NEW = 16


@pytest.fixture(scope="module")
def table():
    return token_bytes(tiny_tokenizer())


# (text, whether its last token is backed off: not when that token is part of a character's UTF-8 bytes)
TEXTS = [("def add(a, b):\n    return a ", True), ("    result.append(", True), ("x = 'é'", True),
         ("# ünïcödé ✓", False)]


@pytest.mark.parametrize("text, backs_off", TEXTS)
def test_token_bytes_spell_the_text_and_back_off_removes_the_last_token(table, text, backs_off):
    tokenizer = tiny_tokenizer()
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert b"".join(table[i] for i in ids) == text.encode()
    kept, healed = back_off(ids, table)
    if backs_off:
        assert kept == ids[:-1] and healed == table[ids[-1]] and text.encode().endswith(healed)
    else:
        assert (kept, healed) == (ids, b"")
        with pytest.raises(UnicodeDecodeError):
            table[ids[-1]].decode("utf-8")


def test_markers_have_no_bytes_and_are_never_backed_off(table):
    tokenizer = tiny_tokenizer()
    middle = tokenizer.convert_tokens_to_ids("<|fim_middle|>")
    assert table[middle] == b"" and all(table[i] == b"" for i in tokenizer.all_special_ids)
    ids = tokenizer.encode("x = 1", add_special_tokens=False) + [middle]
    assert back_off(ids, table) == (ids, b"")


def test_mask_first_keeps_only_tokens_that_start_with_the_healed_bytes(table):
    allowed = torch.tensor([b.startswith(b" ") and bool(b) for b in table])
    logits = torch.randn(3, len(table) + 5)  # an output layer wider than the tokenizer
    masked = mask_first(logits, allowed)
    best = int(torch.argmax(masked[0]))
    assert table[best].startswith(b" ") and torch.equal(masked[1:], logits[1:])
    assert torch.isinf(masked[0, len(table):]).all()


EDGE_TABLE = [b"", b"a", b"ab", b"abc", b"b", b"\xff", b"\xff\x00", b"\xfe\xff", b" ", b"  ", b" a", b"", b"ab"]


@pytest.mark.parametrize("prefix", [b"a", b"ab", b"abc", b"abcd", b"b", b"\xff", b"\xfe", b" ", b"  ", b"z", b"\x00"])
def test_healing_masks_allow_exactly_the_tokens_that_start_with_the_prefix(prefix):
    masks = HealingMasks(EDGE_TABLE)
    expected = [bool(b) and b.startswith(prefix) for b in EDGE_TABLE]
    assert masks.allowed(prefix).tolist() == expected
    assert masks.allowed(prefix) is masks.allowed(prefix)  # cached per backed-off string


def test_healing_masks_match_a_scan_of_the_real_vocabulary(table):
    masks = HealingMasks(table)
    for token in (table[i] for i in range(0, len(table), max(1, len(table) // 50)) if table[i]):
        for prefix in (token, token[:1], token[:2]):
            scan = torch.tensor([bool(b) and b.startswith(prefix) for b in table])
            assert torch.equal(masks.allowed(prefix), scan), prefix


def healed_reference(table, prompt: list[int], healed: bytes) -> list[int]:
    """Target alone, no cache: the first token is the best of those that start with `healed`, then plain greedy."""
    model = tiny_model(2, 0)
    logits = model(input_ids=torch.tensor([prompt]), use_cache=False).logits[0, -1]
    allowed = torch.tensor([bool(b) and b.startswith(healed) for b in table] +
                           [False] * (logits.shape[-1] - len(table)))
    first = int(torch.argmax(logits.masked_fill(~allowed, float("-inf"))))
    return [first] + reference_greedy(model, prompt + [first], MAX_NEW - 1)


@pytest.mark.parametrize("drafter", ["none", "lookup", "draft", "hybrid", "auto"])
@pytest.mark.parametrize("text", ["def add(a, b):\n    return a ", "    result.append("])
def test_every_drafter_heals_to_the_target_alone_output(table, drafter, text):
    engine = tiny_engine("same")  # the draft model is the target: its drafts pass the mask or are rejected by it
    tokenizer = tiny_tokenizer()
    ids = tokenizer.encode(text * 3, add_special_tokens=False)  # repeats: lookup drafts too
    prompt, healed = engine.heal_prompt(ids)
    assert healed and prompt == ids[:-1]
    expected = healed_reference(table, prompt, healed)
    result = engine.complete(CompletionRequest(prompt, MAX_NEW, drafter=drafter, heal=healed, max_draft_tokens=4))
    assert table[result.token_ids[0]].startswith(healed)
    assert result.token_ids == expected
    # The text is what follows the healed bytes: the typed text plus it is the whole continuation.
    assert healed.decode() + result.text == tokenizer.decode(result.token_ids, skip_special_tokens=True)


def test_without_heal_nothing_is_masked():
    engine = tiny_engine("none")
    prompt = tiny_tokenizer().encode("def add(a, b):\n    return a ", add_special_tokens=False)
    result = engine.complete(CompletionRequest(prompt, MAX_NEW, drafter="none"))
    assert result.token_ids == reference_greedy(tiny_model(2, 0), prompt, MAX_NEW)
