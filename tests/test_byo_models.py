"""Bring your own models (engine/store/local.py): models.toml entries that point at a local Hugging Face directory
(`path`) or a local GGUF file (`gguf_path`), pairs that mix them, and the check that a pair shares one vocabulary.

The "user's" models are tiny random Qwen2 models written here, outside CODECUE_HOME: Hugging Face directories
(save_pretrained) and F32 GGUF files that both llama.cpp and the conversion read. No network.
"""
from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from codecue_lsp.config import Settings
from codecue_lsp.prompt import OpenDocument
from codecue_lsp.prompt.text import split_cursor
from codecue_lsp.remote import build_remote_completer
from engine import CompletionRequest, Engine
from engine import cli as models_cli
from engine import options
from engine.loading.pair import load_pair
from engine.options import EngineOptions
from engine.store.config import ModelsError, load_config, model_dir
from engine.store.local import first_difference
from engine.testing import (
    SPECIAL_TOKENS,
    build_tiny_model,
    build_tokenizer,
    training_corpus,
    write_gguf,
)

OTHER_VOCAB = 300  # the tiny tokenizer has 384 tokens: the same BPE stopped at 300 is a prefix of it
STOP = "stop_token_ids = [0, 1, 2, 3, 4, 5, 6, 7]"
BYO_TOML = f"""\
[fim.tiny]
prefix = "<|fim_prefix|>"
suffix = "<|fim_suffix|>"
middle = "<|fim_middle|>"
file_sep = "<|file_sep|>"
repo_name = "<|repo_name|>"

[models.hf-target]
family = "tiny"
path = "hf-target"
{STOP}

[models.gguf-draft]
family = "tiny"
gguf_path = "draft.gguf"
sha256 = "{{draft_sha256}}"
{STOP}

[models.gguf-target]
family = "tiny"
gguf_path = "{{target_gguf}}"
{STOP}

[models.hf-draft]
family = "tiny"
path = "./hf-draft"
{STOP}

[models.hf-other-vocab]
family = "tiny"
path = "hf-other-vocab"
{STOP}

[models.hf-other-corpus]
family = "tiny"
path = "hf-other-corpus"
{STOP}

[models.gguf-wrong-sha]
family = "tiny"
gguf_path = "target.gguf"
sha256 = "{'0' * 64}"
{STOP}

[models.gguf-nowhere]
family = "tiny"
gguf_path = "nowhere.gguf"
{STOP}

[pairs.hf-gguf]
target = "hf-target"
draft = "gguf-draft"
description = "local HF directory target, local GGUF draft"
target_weights = "dense"
draft_weights = "dense"
activations = "float32"

[pairs.gguf-hf]
target = "gguf-target"
draft = "hf-draft"
description = "local GGUF target, local HF directory draft"
target_weights = "dense"
draft_weights = "dense"
activations = "float32"

[pairs.other-vocab]
target = "hf-target"
draft = "hf-other-vocab"
target_weights = "dense"
draft_weights = "dense"
activations = "float32"

[pairs.other-corpus]
target = "gguf-target"
draft = "hf-other-corpus"
target_weights = "dense"
draft_weights = "dense"
activations = "float32"

[pairs.wrong-sha]
target = "gguf-wrong-sha"

[pairs.nowhere]
target = "gguf-nowhere"
"""


def build_other_tokenizer(vocab_size: int, corpus: list[str]):
    """The tiny tokenizer's recipe (engine.testing.build_tokenizer) with another size or corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|fim_pad|>",
                                   additional_special_tokens=SPECIAL_TOKENS[1:])


def save_hf_dir(model, tokenizer, path: Path) -> Path:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under root with its size, mtime and sha256: the user's files must stay exactly as they were."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns,
                                       hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def byo(tmp_path_factory):
    """The user's models in their own folder (with models.toml beside them), and the torch models they hold."""
    root = tmp_path_factory.mktemp("byo")
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # an absolute gguf_path outside the models file's folder
    tokenizer = build_tokenizer()
    target, draft = build_tiny_model(len(tokenizer), 2, 0), build_tiny_model(len(tokenizer), 1, 1)
    save_hf_dir(target, tokenizer, root / "hf-target")
    save_hf_dir(draft, tokenizer, root / "hf-draft")
    smaller = build_other_tokenizer(OTHER_VOCAB, training_corpus())
    assert len(smaller) == OTHER_VOCAB
    save_hf_dir(build_tiny_model(len(smaller), 1, 2), smaller, root / "hf-other-vocab")
    reversed_text = build_other_tokenizer(len(tokenizer), [text[::-1] for text in training_corpus()])
    assert len(reversed_text) == len(tokenizer)  # same size, other merges
    save_hf_dir(build_tiny_model(len(reversed_text), 1, 3), reversed_text, root / "hf-other-corpus")
    write_gguf(draft, tokenizer, root / "draft.gguf")
    write_gguf(target, tokenizer, root / "target.gguf")
    target_gguf = write_gguf(target, tokenizer, elsewhere / "target.gguf")
    draft_sha256 = hashlib.sha256((root / "draft.gguf").read_bytes()).hexdigest()
    toml = root / "models.toml"
    toml.write_text(BYO_TOML.format(draft_sha256=draft_sha256, target_gguf=target_gguf))
    return {"root": root, "toml": toml, "target": target, "draft": draft, "tokenizer": tokenizer,
            "target_gguf": target_gguf}


def use(byo, home: Path) -> None:
    """The engine's options: this home and the byo models file, no format pinned (tests/conftest.py resets them)."""
    options.use(replace(EngineOptions.from_environment(), home=home, models_toml=byo["toml"], target_weights=None,
                        draft_weights=None, dtype=None, compile=None))


@pytest.fixture(scope="module")
def fetched_home(byo, tmp_path_factory):
    """A CODECUE_HOME where `codecue-models fetch` converted the local GGUFs of both mixed pairs."""
    home = tmp_path_factory.mktemp("home")
    use(byo, home)
    assert models_cli.main(["fetch", "--pair", "hf-gguf"]) == 0
    assert models_cli.main(["fetch", "--pair", "gguf-hf"]) == 0
    options.use(None)
    return home


@pytest.fixture
def fetched(byo, fetched_home, monkeypatch):
    use(byo, fetched_home)
    return fetched_home


def list_states(capsys) -> dict[str, str]:
    """`codecue-models list`: model name -> state (third column of a model's line), and the whole output."""
    capsys.readouterr()  # only the list's own output
    assert models_cli.main(["list"]) == 0
    out = capsys.readouterr().out
    states = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[0] in ("target", "draft"):
            states[fields[1]] = fields[2]
    return states, out


# ---- models.toml -------------------------------------------------------------------------------------------------

def test_paths_expand_home_and_are_relative_to_the_models_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    toml = tmp_path / "conf" / "models.toml"
    toml.parent.mkdir()
    toml.write_text('[fim.f]\nprefix = "<p>"\nsuffix = "<s>"\nmiddle = "<m>"\n'
                    '[models.a]\nfamily = "f"\npath = "~/models/A"\n'
                    '[models.b]\nfamily = "f"\ngguf_path = "../ggufs/b.gguf"\n'
                    '[models.c]\nfamily = "f"\ngguf_path = "/abs/c.gguf"\npath = "c-dir"\n'
                    '[pairs.p]\ntarget = "a"\ndraft = "b"\n')
    models = load_config(toml).models
    assert models["a"].path == tmp_path / "me" / "models" / "A" and models["a"].gguf_path is None
    assert models["b"].gguf_path == tmp_path / "ggufs" / "b.gguf" and models["b"].path is None
    assert models["b"].gguf_file == "b.gguf"  # named by its file in messages
    assert models["c"].gguf_path == Path("/abs/c.gguf") and models["c"].path == tmp_path / "conf" / "c-dir"
    assert model_dir(models["a"]) == tmp_path / "me" / "models" / "A"  # a directory is used where it is
    assert model_dir(models["b"], tmp_path / "home") == tmp_path / "home" / "models" / "b"


def test_a_pair_naming_an_unknown_model_is_a_clear_error(tmp_path):
    toml = tmp_path / "models.toml"
    toml.write_text('[fim.f]\nprefix = "<p>"\nsuffix = "<s>"\nmiddle = "<m>"\n'
                    '[models.a]\nfamily = "f"\npath = "a"\n[pairs.p]\ntarget = "a"\ndraft = "typo"\n')
    with pytest.raises(ModelsError, match="pair 'p' names draft 'typo'"):
        load_config(toml)


@pytest.mark.parametrize("line,expected", [("", 0.0), ("min_confidence = 0.35\n", 0.35), ("min_confidence = 1\n", 1.0),
                                           ("min_confidence = 1.5\n", None), ("min_confidence = \"high\"\n", None),
                                           ("min_confidence = true\n", None)])
def test_a_pairs_gate_threshold_is_a_probability(tmp_path, line, expected):
    toml = tmp_path / "models.toml"
    toml.write_text('[fim.f]\nprefix = "<p>"\nsuffix = "<s>"\nmiddle = "<m>"\n'
                    '[models.a]\nfamily = "f"\npath = "a"\n[pairs.p]\ntarget = "a"\n' + line)
    if expected is None:
        with pytest.raises(ModelsError, match="pair 'p': min_confidence"):
            load_config(toml)
    else:
        assert load_config(toml).pair("p").min_confidence == expected


# ---- codecue-models ----------------------------------------------------------------------------------------------

def test_list_shows_states_and_fetch_converts_without_touching_the_users_files(byo, tmp_path, monkeypatch, capsys):
    use(byo, tmp_path / "home")
    before = snapshot(byo["root"])
    states, out = list_states(capsys)
    assert states["hf-target"] == "ready" and states["hf-draft"] == "ready"  # a directory is used in place
    assert states["gguf-draft"] == "needs-fetch" and states["gguf-target"] == "needs-fetch"
    assert "run `codecue-models fetch --pair hf-gguf`" in out and "run `codecue-models fetch --pair gguf-hf`" in out
    assert states["gguf-nowhere"] == "missing" and "fix `gguf_path` of gguf-nowhere" in out
    assert f"local directory {byo['root'] / 'hf-target'}" in out and f"local GGUF {byo['target_gguf']}" in out

    assert models_cli.main(["fetch", "--pair", "hf-gguf", "--remove-gguf"]) == 0  # never removes the user's GGUF
    states, out = list_states(capsys)
    assert states["gguf-draft"] == "ready" and states["gguf-target"] == "needs-fetch"
    hf_gguf = out.split("pair hf-gguf")[1].split("\npair ")[0]
    assert "vocabulary: target and draft match" in hf_gguf
    assert snapshot(byo["root"]) == before  # read, never copied into, written or moved
    converted = tmp_path / "home" / "models" / "gguf-draft"
    assert (converted / "tokenizer.json").is_file() and list(converted.glob("*.safetensors"))
    assert not (tmp_path / "home" / "models" / "hf-target").exists() and not (tmp_path / "home" / "gguf").exists()
    assert models_cli.main(["verify", "--pair", "hf-gguf", "--quiet"]) == 0

    # A second fetch has nothing to do; a replaced GGUF (other mtime) needs converting again.
    capsys.readouterr()
    assert models_cli.main(["fetch", "--pair", "hf-gguf"]) == 0
    assert "converting" not in capsys.readouterr().err
    stat = (byo["root"] / "draft.gguf").stat()
    try:
        os.utime(byo["root"] / "draft.gguf", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        states, _ = list_states(capsys)
        assert states["gguf-draft"] == "needs-fetch"
    finally:
        os.utime(byo["root"] / "draft.gguf", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    states, _ = list_states(capsys)
    assert states["gguf-draft"] == "ready"


def test_sha256_mismatch_is_refused_naming_the_file_and_both_digests(byo, tmp_path, monkeypatch, capsys):
    use(byo, tmp_path / "home")
    gguf = byo["root"] / "target.gguf"
    before = gguf.read_bytes()
    assert models_cli.main(["fetch", "--pair", "wrong-sha"]) == 1
    err = capsys.readouterr().err
    assert str(gguf) in err and hashlib.sha256(before).hexdigest() in err and "0" * 64 in err
    assert "Traceback" not in err
    assert gguf.read_bytes() == before and not (tmp_path / "home" / "models" / "gguf-wrong-sha").exists()
    assert models_cli.main(["verify", "--pair", "wrong-sha", "--quiet"]) == 1
    assert hashlib.sha256(before).hexdigest() in capsys.readouterr().err


def test_missing_files_name_the_fix(byo, tmp_path, monkeypatch, capsys):
    use(byo, tmp_path / "home")
    with pytest.raises(ModelsError, match="does not exist; fix `gguf_path` of gguf-nowhere in models.toml"):
        load_pair("nowhere", device="cpu")
    with pytest.raises(ModelsError, match=r"gguf-target is not ready: .*run `codecue-models fetch --pair gguf-hf`"):
        load_pair("gguf-hf", device="cpu")
    assert models_cli.main(["fetch", "--pair", "nowhere"]) == 1
    assert "nowhere.gguf does not exist" in capsys.readouterr().err
    # A directory without its tokenizer files: the list names what is missing.
    broken = tmp_path / "broken"
    save_hf_dir(byo["target"], byo["tokenizer"], broken)
    (broken / "tokenizer.json").unlink()
    toml = tmp_path / "models.toml"
    toml.write_text(byo["toml"].read_text() + f'\n[models.broken]\nfamily = "tiny"\npath = "{broken}"\n{STOP}\n'
                    '[pairs.broken]\ntarget = "broken"\ndraft = "hf-draft"\n')
    options.use(replace(options.current(), models_toml=toml))
    states, out = list_states(capsys)
    assert states["broken"] == "missing" and f"{broken} lacks tokenizer.json" in out
    with pytest.raises(ModelsError, match="lacks tokenizer.json"):
        load_pair("broken", device="cpu")


def test_path_prints_a_local_directory(fetched, byo, capsys):
    assert models_cli.main(["path", "hf-target"]) == 0
    assert capsys.readouterr().out.strip() == str(byo["root"] / "hf-target")
    assert models_cli.main(["path", "gguf-target"]) == 0
    assert capsys.readouterr().out.strip() == str(fetched / "models" / "gguf-target")


# ---- one vocabulary per pair -------------------------------------------------------------------------------------

def test_a_draft_with_another_vocabulary_is_refused(fetched, capsys):
    with pytest.raises(ModelsError) as err:
        load_pair("other-vocab", device="cpu")
    message = str(err.value)
    assert "hf-target" in message and "hf-other-vocab" in message and "different vocabularies" in message
    assert "384 vs 300 token ids" in message and "is only in the target's" in message
    states, out = list_states(capsys)
    assert states["hf-other-vocab"] == "ready" and "vocabulary: DIFFERENT" in out
    assert models_cli.main(["verify", "--pair", "other-vocab", "--quiet"]) == 1
    assert "different vocabularies" in capsys.readouterr().err
    with pytest.raises(ModelsError, match=r"gguf-target and the draft hf-other-corpus have different vocabularies "
                                          r"\(384 vs 384 token ids; first difference at id \d+: "):
        load_pair("other-corpus", device="cpu")


def test_padding_tokens_past_the_shorter_vocabulary_do_not_count():
    # Qwen2.5-Coder 7B's GGUF pads its tokenizer to 152,064 ids, the 0.5B's to 151,936: the same tokenizer.
    assert first_difference(["a", "b"], ["a", "b", "[PAD2]", "[PAD3]"]) is None
    assert first_difference(["a", "b", "[PAD2]"], ["a", "b"]) is None
    assert "id 2 ('c') is only in the draft's" in first_difference(["a", "b"], ["a", "b", "c"])
    assert "first difference at id 1: 'b' in the target, 'x' in the draft" in first_difference(["a", "b"], ["a", "x"])


# ---- loading: every weight format reads the user's files -----------------------------------------------------------

def greedy(engine: Engine, drafter: str) -> list[int]:
    prompt = engine.encode("def fibonacci(n):\n    if n < 2:\n        return n\n    return ")
    return engine.complete(CompletionRequest(prompt, 16, drafter=drafter, max_draft_tokens=3,
                                             adaptive_k=False)).token_ids


def close(pair) -> None:
    for model in (pair.target, pair.draft):
        if hasattr(model, "close"):
            model.close()


@torch.inference_mode()
def test_hf_directory_target_with_gguf_draft_loads_dense_and_llamacpp(fetched, byo):
    ids = torch.tensor([byo["tokenizer"]("def f(x):\n    return x").input_ids])
    pair = load_pair("hf-gguf", device="cpu")
    assert (pair.target_weights, pair.draft_weights) == ("dense", "dense")
    # The directory's own fp32 weights (eager attention here, so equal up to summation order).
    assert torch.allclose(pair.target(ids).logits, byo["target"](ids).logits, atol=1e-4)
    want, got = byo["draft"](ids).logits, pair.draft(ids).logits  # converted from the GGUF to bf16
    assert (want - got).abs().max() < 0.05 * want.abs().max()
    engine = Engine(pair)
    assert greedy(engine, "draft") == greedy(engine, "none")
    engine.close()

    pair = load_pair("hf-gguf", device="cpu", draft_weights="llamacpp")
    assert pair.draft_weights == "llamacpp" and pair.draft.path == byo["root"] / "draft.gguf"
    engine = Engine(pair)
    assert greedy(engine, "draft") == greedy(engine, "none")
    engine.close()
    close(pair)


@torch.inference_mode()
def test_gguf_target_with_hf_directory_draft_loads_llamacpp_and_dense(fetched, byo):
    pair = load_pair("gguf-hf", device="cpu", target_weights="llamacpp")
    assert pair.target_weights == "llamacpp" and pair.target.path == byo["target_gguf"]  # read where it is
    assert pair.draft_weights == "dense"
    ids = byo["tokenizer"]("def f(x):\n    return x").input_ids
    logits = pair.target.new_cache().forward(ids, logits="all")
    want = byo["target"](input_ids=torch.tensor([ids])).logits[0]
    assert torch.equal(logits.argmax(-1), want.argmax(-1))
    engine = Engine(pair)
    reference = greedy(engine, "none")
    assert len(reference) > 0 and greedy(engine, "draft") == reference
    engine.close()
    close(pair)

    pair = load_pair("gguf-hf", device="cpu")  # the torch formats read the conversion in CODECUE_HOME
    assert pair.target_weights == "dense" and pair.target.config.num_hidden_layers == 2
    close(pair)


# ---- the remote backend's tokenizer -------------------------------------------------------------------------------

def remote_prompt(pair: str):
    completer = build_remote_completer(Settings().merged({"pair": pair, "engine": "http://127.0.0.1:9/v1"}))
    try:
        text, line, character = split_cursor("def f(x):\n    return █\n")
        return completer.encoder, completer.prepare(OpenDocument("file:///w/f.py", "python", text), line,
                                                    character, Settings()).prompt
    finally:
        completer.engine.close()


def test_remote_backend_finds_a_byo_models_tokenizer(fetched, byo, caplog):
    caplog.set_level(logging.INFO)
    encoder, prompt = remote_prompt("hf-gguf")  # tokenizer.json of the user's directory
    assert encoder is not None and encoder.name == "hf-target" and isinstance(prompt, list)
    assert encoder.encode("return x") == byo["tokenizer"]("return x").input_ids
    encoder, prompt = remote_prompt("gguf-hf")  # tokenizer.json of the GGUF's conversion
    assert encoder is not None and encoder.name == "gguf-target" and isinstance(prompt, list)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_remote_backend_without_the_conversion_sends_text(byo, tmp_path, monkeypatch, caplog):
    use(byo, tmp_path / "home")  # gguf-target not converted here
    encoder, prompt = remote_prompt("gguf-hf")
    assert encoder is None and isinstance(prompt, str)
