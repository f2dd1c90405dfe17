"""The draft model's head over part of the vocabulary (engine/weights/draft_vocab.py): the same logits where it reaches,
-inf elsewhere, every id of the text reachable, and speculation's output still target alone's."""
import copy
import dataclasses

import pytest
import torch
from engine_helpers import (
    random_prompt,
    reference_greedy,
    tiny_model,
    tiny_pair,
    tiny_tokenizer,
)

from engine import CompletionRequest, Engine
from engine.decode.drafters import ModelDrafter
from engine.decode.kvcache import TrackedCache
from engine.decode.sampling import warp
from engine.store.config import ModelsError, load_config
from engine.weights import draft_vocab
from engine.weights.draft_vocab import (
    TrimmedHead,
    cover,
    describe,
    frequency_order,
    pick_rows,
    trim,
    wanted,
)
from engine.weights.vnni import VnniLinear, available

FIRST = 128  # of the tiny tokenizer's 384 ids


def trimmed_copy(model, first: int = FIRST, order: list[int] | None = None):
    model = copy.deepcopy(model).requires_grad_(False)
    assert trim(model, first, order)
    return model


# A ranking as frequency_order gives one: the tiny vocabulary's ids in a scrambled order.
RANKING = torch.randperm(384, generator=torch.Generator().manual_seed(4)).tolist()


@pytest.mark.parametrize("tokens, extra", [
    ([], []),
    ([1, 2, 127], []),  # below FIRST: the head's own rows
    ([130, 5, 130, 383], [130, 383]),  # each id once, in order
    ([128, 9999, -1], [128]),  # ids outside the vocabulary are no rows
])
def test_cover_keeps_the_texts_ids_past_the_kept_rows(tokens, extra):
    model = trimmed_copy(tiny_model(1, 1))
    cover(model, tokens)
    assert model.lm_head.extra.tolist() == extra
    assert (model.lm_head.extra_rows is None) == (not extra)


def test_cover_follows_the_text_as_it_grows_and_when_it_is_replaced():
    model = trimmed_copy(tiny_model(1, 1))
    head = model.lm_head
    cover(model, [9, 200])
    cover(model, [9, 200, 150, 200])  # grown: the new id joins
    assert head.extra.tolist() == [150, 200]
    rows = head.extra_rows
    cover(model, [9, 200, 150, 200, 9, 150])  # grown, no new id: the rows stay as they were
    assert head.extra.tolist() == [150, 200] and head.extra_rows is rows
    cover(model, [9, 300, 12])  # another text: its ids only
    assert head.extra.tolist() == [300]
    cover(model, [9, 12])
    assert head.extra.tolist() == [] and head.extra_rows is None


def test_the_trimmed_head_has_the_whole_heads_logits_where_it_reaches():
    whole = tiny_model(1, 1)
    model = trimmed_copy(whole)
    cover(model, [200, 7, 383])
    h = torch.randn(3, whole.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        full, cut = whole.lm_head(h), model.lm_head(h)
    reached = torch.zeros(full.shape[-1], dtype=torch.bool)
    reached[:FIRST] = True
    reached[[200, 383]] = True
    assert cut.shape == full.shape
    torch.testing.assert_close(cut[:, reached], full[:, reached], rtol=1e-5, atol=1e-5)
    assert torch.isneginf(cut[:, ~reached]).all()
    # the kept rows are a view of the head's weights, not a copy
    assert model.lm_head.rows.weight.untyped_storage().data_ptr() == model.lm_head.full.weight.untyped_storage().data_ptr()


@pytest.mark.skipif(not available(), reason="the vnni kernel does not build here")
def test_a_vnni_head_is_cut_to_a_view_and_its_rows_are_bitwise_the_whole_heads():
    model = copy.deepcopy(tiny_model(1, 1)).requires_grad_(False)
    model.lm_head = VnniLinear.from_dense_int4(model.lm_head.weight.detach(), None, torch.float32)
    whole = model.lm_head
    assert trim(model, FIRST + 5)  # rounded down to the kernel's blocks of 16 rows
    head = model.lm_head
    assert isinstance(head, TrimmedHead) and head.first == FIRST
    assert head.rows.packed.data_ptr() == whole.packed.data_ptr()  # nothing copied
    head.cover([300, 131, 383, 301])  # 131 in one block, 300/301 in another, 383 the last row
    h = torch.randn(4, model.config.hidden_size, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        cut, full = head(h), whole(h)
    reached = torch.zeros(full.shape[-1], dtype=torch.bool)
    reached[:FIRST] = True
    reached[[131, 300, 301, 383]] = True
    assert torch.equal(cut[:, reached], full[:, reached])
    assert torch.isneginf(cut[:, ~reached]).all()


def test_only_a_head_of_a_known_kind_without_bias_is_trimmed():
    biased = copy.deepcopy(tiny_model(1, 1))
    biased.lm_head.bias = torch.nn.Parameter(torch.zeros(biased.lm_head.out_features))
    assert not trim(biased, FIRST) and not isinstance(biased.lm_head, TrimmedHead)
    other = copy.deepcopy(tiny_model(1, 1))
    other.lm_head = torch.nn.Sequential(other.lm_head)
    assert not trim(other, FIRST)
    small = copy.deepcopy(tiny_model(1, 1))
    assert not trim(small, 4096)  # no larger than the cut: nothing to save
    assert not trim(small, 0)
    untied = copy.deepcopy(tiny_model(1, 1))
    untied.config.tie_word_embeddings = False  # the extra rows come from the head itself, tied or not
    assert trim(untied, FIRST)


@pytest.mark.parametrize("configured, rows", [(65536, 65536), (0, 0), (None, 0)])
def test_models_toml_sets_the_cut(configured, rows):
    assert wanted(configured) == rows


def engine_with_draft(draft) -> Engine:
    return Engine(dataclasses.replace(tiny_pair("random"), draft=draft))


@pytest.mark.parametrize("first, order", [(64, None), (FIRST, None), (64, RANKING), (FIRST, RANKING)])
def test_speculation_with_a_trimmed_draft_head_equals_target_alone(first, order):
    """The draft model is the target itself with its head cut: where the target's next token lies past the cut and
    not in the text, the draft cannot propose it and is rejected; the output is target alone's all the same."""
    target = tiny_model(2, 0)
    engine = engine_with_draft(trimmed_copy(target, first, order))
    accepted = 0
    for seed in range(1, 6):
        prompt = random_prompt(seed, repeat=True)
        result = engine.complete(CompletionRequest(prompt, 24, drafter="draft", max_draft_tokens=4,
                                                   adaptive_k=False))
        assert result.token_ids == reference_greedy(target, prompt, 24)
        accepted += result.stats.accepted
    assert accepted > 0


def next_token(model, prompt: list[int]) -> int:
    with torch.inference_mode():
        return int(model(input_ids=torch.tensor([prompt])).logits[0, -1].argmax())


def test_the_drafter_reaches_the_texts_ids_past_the_cut_and_only_those():
    """The whole model's next token t lies past the cut: a drafter with the cut head proposes t when the text holds
    it (ModelDrafter covers the text it is given), and something else when it does not."""
    whole = tiny_model(1, 1)
    model = trimmed_copy(whole, 64)
    found = {}
    for seed in range(200):
        prompt = random_prompt(seed, length=24)
        t = next_token(whole, prompt)
        if t >= 64:
            found.setdefault(t in prompt, (prompt, t))
        if len(found) == 2:
            break
    assert len(found) == 2, "no prompts found"
    for in_text, (prompt, t) in found.items():
        drafter = ModelDrafter(model, TrackedCache(model), min_confidence=0.0)
        token = drafter.propose(prompt, 1, lambda: False).tokens[0]
        assert (token == t) == in_text
        assert token < 64 or token in prompt


def test_sampled_drafts_from_a_trimmed_head_put_no_weight_past_it():
    target = tiny_model(2, 0)
    engine = engine_with_draft(trimmed_copy(target, 64))
    prompt = random_prompt(3)
    result = engine.complete(CompletionRequest(prompt, 16, drafter="draft", temperature=0.8, seed=5,
                                               max_draft_tokens=3, adaptive_k=False))
    assert 0 < len(result.token_ids) <= 16
    drafter_model = engine.pair.draft
    with torch.inference_mode():
        logits = drafter_model(input_ids=torch.tensor([prompt])).logits[0, -1]
    probs = torch.softmax(logits, dim=-1)
    outside = torch.ones_like(probs, dtype=torch.bool)
    outside[:64] = False
    outside[drafter_model.lm_head.extra] = False
    assert probs[outside].sum() == 0 and torch.isclose(probs.sum(), torch.tensor(1.0))


def test_the_check_line_says_how_much_of_the_vocabulary_the_head_covers():
    assert describe(trimmed_copy(tiny_model(1, 1))) == ", head over ids < 128 and the text's"
    assert describe(tiny_model(1, 1)) == "" and describe(None) == ""


@pytest.mark.skipif(not available(), reason="the vnni kernel does not build here")
@pytest.mark.parametrize("bits", [4, 8])
def test_picked_vnni_rows_are_bitwise_the_whole_heads_in_the_order_asked(bits):
    weight = torch.randn(96, 64, generator=torch.Generator().manual_seed(2))
    make = VnniLinear.from_dense_int4 if bits == 4 else VnniLinear.from_dense_int8
    head = make(weight, None, torch.float32)
    ids = torch.tensor([95, 0, 17, 16, 33, 40, 41, 2, 64, 80, 81, 94, 5, 6, 50, 31])  # across blocks, any order
    part = pick_rows(head, ids)
    h = torch.randn(3, 64, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        assert torch.equal(part(h), head(h)[:, ids])
    with pytest.raises(ValueError, match="blocks of 16"):
        pick_rows(head, ids[:15])


@pytest.mark.skipif(not available(), reason="the vnni kernel does not build here")
def test_a_head_over_ranked_ids_has_their_logits_and_the_texts_bitwise_and_minus_inf_elsewhere():
    model = copy.deepcopy(tiny_model(1, 1)).requires_grad_(False)
    model.lm_head = VnniLinear.from_dense_int4(model.lm_head.weight.detach(), None, torch.float32)
    whole = model.lm_head
    assert trim(model, 64, RANKING)
    head = model.lm_head
    kept = set(RANKING[:64])
    assert not head.prefix and set(head.kept.tolist()) == kept
    outside = [t for t in range(384) if t not in kept]
    text = [RANKING[0], outside[0], outside[-1], outside[0]]
    head.cover(text)
    assert head.extra.tolist() == sorted({outside[0], outside[-1]})  # only the text's ids the ranking left out
    reached = torch.zeros(384, dtype=torch.bool)
    reached[list(kept | {outside[0], outside[-1]})] = True
    h = torch.randn(2, model.config.hidden_size, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        cut, full = head(h), whole(h)
    assert torch.equal(cut[:, reached], full[:, reached])
    assert torch.isneginf(cut[:, ~reached]).all()


def test_a_ranking_keeps_its_first_ids_once_and_a_short_one_is_filled_by_id():
    order = [300, 5, 300, 9999, -3, 7] + list(range(200, 260))  # a repeat and ids outside the vocabulary
    head = trimmed_copy(tiny_model(1, 1), 64, order).lm_head
    assert head.kept.tolist() == sorted([0, 5, 7, 300] + list(range(200, 260)))  # 63 ranked, then id 0
    short = trimmed_copy(tiny_model(1, 1), 32, [383, 382]).lm_head
    assert short.kept.tolist() == list(range(30)) + [382, 383]
    assert describe(trimmed_copy(tiny_model(1, 1), 64, order)) == (
        ", head over the 64 most frequent ids in code and the text's")


def test_frequency_order_counts_the_corpus_ties_by_id_and_is_cached(tmp_path, monkeypatch):
    tokenizer = tiny_tokenizer()
    corpus = tmp_path / "lib"
    (corpus / "pkg").mkdir(parents=True)
    (corpus / "a.py").write_text("def f(x):\n    return x + x\n")
    (corpus / "pkg" / "b.py").write_text("x = f(x)\n")
    (corpus / "notes.txt").write_text("not python " * 50)  # not a .py file: not counted
    counts = {}
    for name in ("a.py", "pkg/b.py"):
        for t in tokenizer((corpus / name).read_text(), add_special_tokens=False)["input_ids"]:
            counts[t] = counts.get(t, 0) + 1
    expected = sorted(counts, key=lambda t: (-counts[t], t))
    home = tmp_path / "home"
    assert frequency_order(tokenizer, home, corpus) == expected
    assert list((home / "draft-vocab").glob("frequency-*.json"))

    def no_encoding(*args, **kwargs):
        raise AssertionError("the cached ranking should be read, not counted again")

    monkeypatch.setattr(draft_vocab, "encode_all", no_encoding)
    assert frequency_order(tokenizer, home, corpus) == expected
    with pytest.raises(AssertionError):
        frequency_order(tokenizer, home, corpus, limit=3)  # another limit: another ranking


def test_frequency_order_stops_after_the_limit(tmp_path):
    tokenizer = tiny_tokenizer()
    corpus = tmp_path / "lib"
    corpus.mkdir()
    (corpus / "a.py").write_text("aaaa")
    (corpus / "b.py").write_text("zzzz zzzz zzzz")
    first_file = set(tokenizer("aaaa", add_special_tokens=False)["input_ids"])
    ranked = frequency_order(tokenizer, tmp_path / "home", corpus, limit=1)
    assert set(ranked) == first_file  # b.py, past the limit, is not read


@pytest.mark.parametrize("line, order", [("", "id"), ('draft_vocab_order = "frequency"', "frequency"),
                                         ('draft_vocab_order = "ID"', "id")])
def test_models_toml_says_which_ids_the_head_keeps(tmp_path, line, order):
    assert load_config(models_file(tmp_path, line)).pairs["default"].draft_vocab_order == order


def test_an_unknown_order_says_what_it_wants(tmp_path):
    with pytest.raises(ModelsError, match="frequency"):
        load_config(models_file(tmp_path, 'draft_vocab_order = "alphabetical"'))


def models_file(tmp_path, line: str):
    """The repository's models.toml with the default pair's `draft_vocab_order` line replaced by `line`."""
    from engine.paths import REPO_MODELS_TOML

    kept = [old for old in REPO_MODELS_TOML.read_text().splitlines() if not old.startswith("draft_vocab_order")]
    at = next(i for i, old in enumerate(kept) if old.startswith("draft_vocab ="))
    path = tmp_path / "models.toml"
    path.write_text("\n".join(kept[:at + 1] + [line] + kept[at + 1:]) + "\n")
    return path


@pytest.mark.parametrize("order", [None, RANKING])
def test_the_drafter_picks_among_the_reached_ids_what_it_would_pick_over_the_whole_row(order):
    """reach: every id with a logit, ascending; the greedy pick among them alone (a tenth of the work) is the
    argmax over the whole row, and its confidence the whole row's softmax there."""
    model = trimmed_copy(tiny_model(1, 1), 64, order)
    head = model.lm_head
    drafter = ModelDrafter(model, TrackedCache(model), min_confidence=0.0)
    for seed in range(12):
        prompt = random_prompt(seed, length=24)
        cover(model, prompt)
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
        finite = torch.nonzero(~torch.isneginf(logits)).flatten()
        assert torch.equal(head.reach, finite)
        assert head.reach.tolist() == sorted(set(head.kept.tolist()) | set(head.extra.tolist()))
        with draft_vocab.reached_logits(model) as ids:
            with torch.inference_mode():
                compact = model(input_ids=torch.tensor([prompt])).logits[0, -1]
        assert not head.compact and torch.equal(ids, finite) and torch.equal(compact, logits[ids])
        for row, row_ids in ((logits, None), (compact, ids)):
            token, probs, confidence = drafter._pick(row, row_ids)
            assert token == int(torch.argmax(logits)) and probs is None
            assert confidence == pytest.approx(float(torch.softmax(logits, dim=-1)[token]), rel=1e-5)
    whole = tiny_model(1, 1)  # a whole head: no reach to pick among
    with draft_vocab.reached_logits(whole) as ids, torch.inference_mode():
        assert ids is None and whole(input_ids=torch.tensor([prompt])).logits.shape[-1] == 384


def test_a_sampled_pick_among_the_reached_ids_is_a_distribution_over_the_whole_vocabulary():
    model = trimmed_copy(tiny_model(1, 1), 64, RANKING)
    prompt = random_prompt(2, length=24)
    cover(model, prompt)
    drafter = ModelDrafter(model, TrackedCache(model), temperature=0.7, top_p=0.9,
                           generator=torch.Generator().manual_seed(1), min_confidence=0.0)
    with draft_vocab.reached_logits(model) as ids, torch.inference_mode():
        compact = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    want = warp(logits, 0.7, 0.9)
    for _ in range(20):
        token, probs, p = drafter._pick(compact, ids)
        assert probs.shape == (384,) and torch.allclose(probs, want, atol=1e-6)
        assert p == float(probs[token]) > 0 and token in ids.tolist()
