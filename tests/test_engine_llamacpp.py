"""Weight format "llamacpp": llama.cpp's kernels behind CodeCue's own loop (engine/weights/llamacpp.py), on tiny random
Qwen2 models written as F32 GGUF files. Lossless is relative to this format: every drafter must give what the same
llama.cpp model gives decoding alone."""
import threading
from pathlib import Path

import pytest
import torch

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pyproject pins it; `make venv`)")

from engine_helpers import STOP_IDS, random_prompt, tiny_model, tiny_tokenizer  # noqa: E402

from engine import CancelToken, CompletionRequest, Engine  # noqa: E402
from engine.calibration.measurements import Calibration, Measurement, choose  # noqa: E402
from engine.loading.pair import LoadedPair, load_model
from engine.store.config import FimTemplate, ModelsError, ModelSpec, PairSpec  # noqa: E402
from engine.testing import write_gguf  # noqa: E402
from engine.weights.llamacpp import N_SEQUENCES, LlamaCppCache, LlamaCppModel  # noqa: E402

MAX_NEW = 24


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return {"target": write_gguf(tiny_model(2, 0), tiny_tokenizer(), root / "target.gguf"),
            "draft": write_gguf(tiny_model(1, 1), tiny_tokenizer(), root / "draft.gguf")}


@pytest.fixture(scope="module")
def models(gguf_files):
    loaded = {role: LlamaCppModel(path, n_threads=1, n_ctx_per_sequence=1024, label=role)
              for role, path in gguf_files.items()}
    yield loaded
    for model in loaded.values():
        model.close()


def llamacpp_engine(models, draft: str = "draft") -> Engine:
    fim = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
    spec = ModelSpec(name="tiny-target", family="tiny", fim=fim, stop_token_ids=STOP_IDS)
    draft_model = {"draft": models["draft"], "same": models["target"], "none": None}[draft]
    pair = LoadedPair(spec=PairSpec("tiny", spec, spec if draft_model else None), target=models["target"],
                      draft=draft_model, tokenizer=tiny_tokenizer(), device=torch.device("cpu"), dtype=torch.float32,
                      target_weights="llamacpp", draft_weights="llamacpp" if draft_model else None)
    return Engine(pair)


def test_llamacpp_logits_match_transformers_on_the_same_weights(models):
    """The GGUF writer and the backend agree with the model they came from (llama.cpp keeps K/V in f16)."""
    ids = random_prompt(3)
    cache = models["target"].new_cache()
    ours = cache.forward(ids, logits="all")
    with torch.inference_mode():
        reference = tiny_model(2, 0)(input_ids=torch.tensor([ids])).logits[0]
    assert ours.shape == reference.shape
    assert (ours - reference).abs().max() < 0.02 * reference.abs().max()
    assert torch.equal(ours.argmax(-1), reference.argmax(-1))


def test_cache_continues_truncates_and_reuses_its_prefix(models):
    ids = random_prompt(4)
    whole = models["target"].new_cache().forward(ids, logits="all")
    cache = models["target"].new_cache()
    cache.forward(ids[:20], logits="none")
    cache.forward(ids[20:30] + [9, 9, 9], logits="none")
    cache.truncate(30)  # the three wrong tokens are gone
    assert cache.ids == ids[:30]
    assert cache.reuse_prefix(ids[:25] + [11, 12]) == 25 and cache.ids == ids[:25]
    reused, computed = cache.extend_to(ids[:-1])
    assert (reused, computed) == (25, len(ids) - 26)
    last = cache.forward(ids[-1:], logits="all")
    assert torch.allclose(last[0], whole[-1], atol=1e-3)


@pytest.fixture(scope="module")
def references(models):
    """llama.cpp target-alone outputs: two plain and two self-repeating prompts that run MAX_NEW tokens, and one
    that stops early (so the eos path is compared too)."""
    engine = llamacpp_engine(models, "none")
    picked, early = {}, None
    for seed in range(1, 300):
        for repeat in (False, True):
            ref = engine.complete(CompletionRequest(random_prompt(seed, repeat=repeat), MAX_NEW,
                                                    drafter="none")).token_ids
            if len(ref) == MAX_NEW and sum(r == repeat for key in picked if key != early for r in [key[1]]) < 2:
                picked[(seed, repeat)] = ref
            elif 3 <= len(ref) < MAX_NEW and early is None:
                early = (seed, repeat)
                picked[early] = ref
        if len(picked) == 5:
            return picked
    raise AssertionError("no suitable prompts")


def test_references_cover_long_runs_and_an_early_stop(references):
    lengths = sorted(len(ref) for ref in references.values())
    assert lengths[0] < MAX_NEW and lengths[1:] == [MAX_NEW] * 4


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("drafter,draft", [("draft", "draft"), ("draft", "same"), ("lookup", "none"),
                                           ("hybrid", "draft")])
def test_every_drafter_equals_llamacpp_target_alone(models, references, drafter, draft, k):
    engine = llamacpp_engine(models, draft)
    for (seed, repeat), ref in references.items():
        result = engine.complete(CompletionRequest(random_prompt(seed, repeat=repeat), MAX_NEW, drafter=drafter,
                                                   max_draft_tokens=k, adaptive_k=False))
        assert result.token_ids == ref, (drafter, draft, k, seed, repeat)
    if draft == "same":  # every draft right: the passes really verified several tokens at once
        assert result.stats.accepted > 0 and result.stats.target_passes < len(result.token_ids)


def test_auto_policy_and_sessions_equal_target_alone(models, references):
    engine = llamacpp_engine(models, "draft")
    for (seed, repeat), ref in references.items():
        prompt = random_prompt(seed, repeat=repeat)
        first = engine.complete(CompletionRequest(prompt, MAX_NEW, session="doc"))
        again = engine.complete(CompletionRequest(prompt, MAX_NEW, session="doc"))  # the prefix comes from cache
        assert first.token_ids == ref and again.token_ids == ref
        assert again.stats.reused_prompt_tokens == len(prompt) - 1


class CancelInPass:
    """llama.cpp's library, except that the cancel is set (from another thread) as pass number `at` starts: after
    the check before the pass, so only the abort byte read between graph nodes can stop that pass."""

    def __init__(self, lib, token: CancelToken, at: int):
        self.lib, self.token, self.at, self.passes = lib, token, at, 0

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def llama_decode(self, ctx, batch):
        self.passes += 1
        if self.passes == self.at:
            setter = threading.Thread(target=self.token.set)
            setter.start()
            setter.join()
        return self.lib.llama_decode(ctx, batch)


def test_cancel_stops_a_prefill_and_the_cache_stays_usable(models):
    """A long prefill stops within the pass the cancel lands in (the abort byte is read between graph nodes); what
    was cached stays exact, and the next request completes as a fresh one would."""
    big = LlamaCppModel(models["target"].path, n_threads=1, n_ctx_per_sequence=4096, n_sequences=2, label="big")
    try:
        cache = big.new_cache()
        prompt = random_prompt(7, length=3000)
        cancel = CancelToken()
        big.lib = CancelInPass(big.lib, cancel, at=2)  # the second chunk's pass: the first stays cached
        reused, computed = cache.extend_to(prompt, cancelled=cancel.is_set)
        big.lib = big.lib.lib
        fresh = big.new_cache()
        fresh.extend_to(prompt)
        assert reused == 0 and computed == big.prefill_chunk < len(prompt), "the pass the cancel landed in ran on"
        assert cache.ids == prompt[:computed]
        cache.extend_to(prompt)
        assert torch.allclose(cache.forward([42], logits="all"), fresh.forward([42], logits="all"), atol=1e-3)
    finally:
        del cache, fresh
        big.close()


def test_a_cancelled_pass_raises_and_leaves_only_the_committed_ids(models):
    from engine.interrupt import PassCancelled

    cache = models["target"].new_cache()
    cache.forward(random_prompt(8)[:10], logits="none")
    with pytest.raises(PassCancelled):
        cache.forward(random_prompt(8)[10:40], logits="all", cancelled=lambda: True)
    assert cache.ids == random_prompt(8)[:10]


def test_sequences_are_limited_and_given_back(models):
    held = [models["draft"].new_cache() for _ in range(N_SEQUENCES)]
    with pytest.raises(RuntimeError, match="sequences are in use"):
        LlamaCppCache(models["draft"])
    held.pop()
    assert LlamaCppCache(models["draft"]).ids == []


def test_missing_or_corrupt_gguf_names_the_command_that_fixes_it(tmp_path):
    from engine.store.config import write_ready_marker

    spec = ModelSpec(name="m", family="tiny", fim=None, stop_token_ids=(), gguf_file="m.gguf")
    (tmp_path / "models" / "m").mkdir(parents=True)
    write_ready_marker("m", {}, tmp_path)
    with pytest.raises(ModelsError, match="codecue-models fetch"):
        load_model(spec, "cpu", torch.float32, tmp_path, "llamacpp")
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "m.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelsError, match="codecue-models verify"):
        load_model(spec, "cpu", torch.float32, tmp_path, "llamacpp")


def measurement(weights, activations, one_token_ms, prefill_tok_s):
    return Measurement("target", weights, activations, {w: one_token_ms * w for w in (1, 2, 4, 8, 16)}, prefill_tok_s)


@pytest.mark.parametrize("llamacpp_ms,expected", [(30.0, "llamacpp"), (150.0, "gguf")])
def test_the_calibration_picks_llamacpp_only_where_it_measured_faster(llamacpp_ms, expected):
    cal = Calibration(key={}, measurements=[measurement("gguf", "bfloat16", 90.0, 100.0),
                                            measurement("llamacpp", "ggml", llamacpp_ms, 100.0)])
    choice = choose(cal, ("gguf", "llamacpp"), (), ("bfloat16", "float32"))
    assert choice.target_weights == expected
    # Not a candidate unless the format is: llamacpp is never chosen when the user named torch formats.
    assert choose(cal, ("gguf",), (), ("bfloat16",)).target_weights == "gguf"


def test_a_cached_table_gains_llamacpp_rows_once(gguf_files, tmp_path):
    """calibration_for times the GGUF files in llama.cpp when the cached table has no such rows, saves them, and
    does not time them again."""
    from engine.calibration import measurements as calibrate
    from engine.calibration.run import add_llamacpp, calibration_for

    config = tiny_model(2, 0).config
    key = calibrate.machine_key("cpu", config, None)
    calibrate.save(tmp_path, Calibration(key=key, measurements=[measurement("gguf", "bfloat16", 90.0, 100.0)]))
    cal = calibration_for(tmp_path, config, None, gguf_files={"target": gguf_files["target"]})
    rows = [m for m in cal.measurements if m.weights == "llamacpp"]
    assert len(rows) == 1 and rows[0].role == "target" and rows[0].complete
    assert rows[0].pass_ms[1] > 0 and rows[0].prefill_tok_s > 0
    again = calibrate.load_cached(tmp_path, key)
    assert [m.weights for m in again.measurements] == ["gguf", "llamacpp"]
    assert not add_llamacpp(again, {"target": gguf_files["target"]}, "cpu")  # already there


def test_a_token_set_after_its_pass_does_not_stop_the_next_one(models):
    """The abort byte belongs to one pass: a cancel that arrives after its request's pass ended (the usual race with
    a keystroke) must not stop the next request's pass."""
    cache = models["target"].new_cache()
    old, new = CancelToken(), CancelToken()
    cache.forward(random_prompt(9)[:10], logits="none", cancelled=old.is_set)
    old.set()
    assert cache.forward(random_prompt(9)[10:20], logits="all", cancelled=new.is_set).shape[0] == 10
    assert cache.ids == random_prompt(9)[:20]


def test_cancel_token_calls_its_listeners_once_set():
    token, calls = CancelToken(), []
    listener = lambda: calls.append("called")  # noqa: E731
    token.add_listener(listener)
    token.set()
    assert calls == ["called"]
    token.remove_listener(listener)
    token.set()
    late = []
    token.add_listener(lambda: late.append("at once"))  # already set: called at once
    assert calls == ["called"] and late == ["at once"]


def test_codecue_models_calibrate_times_the_gguf_and_prints_the_load_choice(tmp_path, engine_options, capsys):
    """`codecue-models calibrate` measures what a load would choose from, llama.cpp's GGUF rows included, and
    `list` prints the same choice from the cached table (it used to leave the GGUF out and print another choice)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from engine.calibration import measurements as calibrate
    from engine.cli import main
    from engine.store.config import model_dir
    from engine.testing import TINY_DRAFT, TINY_TARGET, build_tiny_pair, write_gguf

    home, toml = build_tiny_pair(tmp_path)
    (home / "gguf").mkdir()
    for name in (TINY_TARGET, TINY_DRAFT):
        write_gguf(AutoModelForCausalLM.from_pretrained(model_dir(name, home)),
                   AutoTokenizer.from_pretrained(model_dir(name, home)), home / "gguf" / f"{name}.gguf")
        toml.write_text(toml.read_text().replace(f"[models.{name}]\n", f'[models.{name}]\ngguf_file = "{name}.gguf"\n'))
    # a pin for loading (CODECUE_TARGET_WEIGHTS) does not narrow the calibration
    engine_options(models_toml=toml, home=home, target_weights="dense")
    assert main(["calibrate", "--pair", "tiny"]) == 0
    measured = capsys.readouterr().out
    rows = [line.split() for line in measured.splitlines() if line.split()[:1] in (["target"], ["draft"])]
    assert {(row[0], row[1]) for row in rows if row[1] == "llamacpp"} == {("target", "llamacpp"), ("draft", "llamacpp")}
    here = calibrate.formats_here("cpu")
    assert {row[1] for row in rows if row[0] == "target"} >= set(here["target"])
    chosen = [line for line in measured.splitlines() if "chosen: target" in line]
    assert len(chosen) == 1
    configs = [AutoConfig.from_pretrained(model_dir(name, home)) for name in (TINY_TARGET, TINY_DRAFT)]
    cached = calibrate.load_cached(home, calibrate.machine_key("cpu", *configs))
    best = choose(cached, here["target"] + ("llamacpp",), here["draft"] + ("llamacpp",))
    assert f"chosen: target {best.target_weights}/{best.target_activations}" in chosen[0]
    assert main(["list"]) == 0
    assert chosen[0].strip() in capsys.readouterr().out


@pytest.mark.parametrize("tok_s,chunk", [
    (50.0, 128),   # the AVX2-only Zen 3's 1.5B: 2.6 s a chunk
    (40.0, 64),    # a slower CPU: 128 tokens would take 3.2 s
    (20.0, 32),
    (5.0, 16),     # never below MIN_PREFILL_CHUNK
    (1000.0, 128),  # never above PREFILL_CHUNK
    (0.0, 128),    # no measurement: the old default
])
def test_the_prefill_chunk_takes_at_most_three_seconds_here(tok_s, chunk):
    from engine.weights import llamacpp

    assert llamacpp.prefill_chunk_for(tok_s) == chunk
    assert llamacpp.prefill_chunk_for(tok_s, 40) == 40  # CODECUE_PREFILL_CHUNK=40


def test_a_keystroke_during_prefill_keeps_the_chunks_that_finished(models, monkeypatch):
    """extend_to runs the model's prefill_chunk per pass; a cancel loses only the pass in flight, so the next request
    for the same prompt starts from there."""
    model = models["target"]
    monkeypatch.setattr(model, "prefill_chunk", 8)
    passes = []
    real_decode = model.decode
    monkeypatch.setattr(model, "decode", lambda seq, start, tokens, *a, **k: passes.append(len(tokens))
                        or real_decode(seq, start, tokens, *a, **k))
    ids = random_prompt(5)[:40]
    cache = model.new_cache()
    assert cache.extend_to(ids, cancelled=lambda: len(passes) >= 3) == (0, 16)  # the third pass is aborted
    assert passes == [8, 8, 8] and cache.ids == ids[:16]
    assert cache.extend_to(ids) == (16, 24) and passes[3:] == [8, 8, 8]


def test_the_loader_sizes_each_llamacpp_models_chunk_from_its_calibrated_rate(models, monkeypatch):
    from engine.calibration.measurements import Choice
    from engine.loading.choice import size_prefill_chunks

    for model in models.values():
        monkeypatch.setattr(model, "prefill_chunk", 128)
    cal = Calibration(key={}, measurements=[measurement("llamacpp", "ggml", 70.0, 20.0),
                                            Measurement("draft", "llamacpp", "ggml", {1: 30.0}, 40.0)])
    size_prefill_chunks(cal, Choice("llamacpp", "ggml", "llamacpp", "ggml", True), models["target"], models["draft"])
    assert (models["target"].prefill_chunk, models["draft"].prefill_chunk) == (32, 64)
    size_prefill_chunks(None, Choice("llamacpp", "ggml", None, None, False), models["target"], None)
    assert models["target"].prefill_chunk == 128  # not calibrated: the default


@pytest.mark.parametrize("shared,kept", [(0, 8), (20, 16)])
def test_a_keystroke_lets_a_shared_prefill_pass_end(models, monkeypatch, shared, kept):
    """In llama.cpp too: a pass inside the shared prefix runs without the abort and ends; the next is not started."""
    model = models["target"]
    monkeypatch.setattr(model, "prefill_chunk", 8)
    token = CancelToken()
    real_decode = model.decode

    def decode(seq, start, tokens, outputs, cancelled=None):
        if start == 8:
            token.set()  # the keystroke arrives as the second pass starts
        return real_decode(seq, start, tokens, outputs, cancelled)
    monkeypatch.setattr(model, "decode", decode)
    ids = random_prompt(6)[:40]
    cache = model.new_cache()
    cache.extend_to(ids, cancelled=token.is_set, shared=shared)
    assert cache.ids == ids[:kept]
    assert cache.extend_to(ids) == (kept, 40 - kept)  # the next request reuses what was kept


def test_a_shared_prefill_pass_stops_when_the_next_request_abandons_it(models, monkeypatch):
    """The shared pass runs under `finishing`'s test instead of the cancel (engine/decode/kvcache.SharedPasses): when
    the next request does not share it, llama.cpp's pass is stopped too."""
    model = models["target"]
    monkeypatch.setattr(model, "prefill_chunk", 8)
    token, abandon = CancelToken(), CancelToken()
    real_decode = model.decode

    def decode(seq, start, tokens, outputs, cancelled=None):
        if start == 8:
            token.set()     # the keystroke arrives as the second pass starts...
            abandon.set()   # ...and its request does not share the pass
        return real_decode(seq, start, tokens, outputs, cancelled)
    monkeypatch.setattr(model, "decode", decode)
    ids = random_prompt(6)[:40]
    cache = model.new_cache()
    cache.extend_to(ids, cancelled=token.is_set, shared=20, finishing=lambda stop: abandon.is_set)
    assert cache.ids == ids[:8]
    assert cache.extend_to(ids) == (8, 32)


def test_a_spare_fits_beside_every_session_and_a_one_off_request(models, references):
    """The engine's 4 sessions, the spare (codecue_lsp/growth.py) and a one-off request each hold a sequence of the
    target: all fit, and a taken spare answers exactly."""
    engine = llamacpp_engine(models, "none")
    try:
        (seed, repeat), ref = next(iter(references.items()))
        prompt = random_prompt(seed, repeat=repeat)
        for n in range(engine.max_sessions):
            engine.complete(CompletionRequest(random_prompt(30 + n), 2, session=f"doc{n}"))
        assert engine.prefill_spare("doc0", prompt[:-1]).result() == len(prompt) - 1
        assert engine.complete(CompletionRequest(prompt, MAX_NEW)).token_ids == ref  # one-off
        assert engine.take_spare("doc0").result() is True
        taken = engine.complete(CompletionRequest(prompt, MAX_NEW, session="doc0"))
        assert taken.token_ids == ref and taken.stats.new_prompt_tokens == 0
    finally:
        engine.close()


def test_a_kept_llamacpp_model_times_passes_again_until_closed(gguf_files, monkeypatch):
    """measure(keep=...) leaves the model open with its context cached, so the calibration can time its passes again
    beside torch's (engine/calibration/finalists.py); the calibration closes every kept model, even when it fails."""
    from engine.calibration import finalists as calibrate_finalists
    from engine.calibration import llamacpp_timing as calibrate_llamacpp
    from engine.calibration.run import calibration_for

    keep = {}
    row = calibrate_llamacpp.measure("target", gguf_files["target"], widths=(1, 2), context_tokens=24,
                                     prefill_tokens=16, reps=1, keep=keep)
    timer = keep["target"]
    assert set(row.pass_ms) == {1, 2}
    assert timer.cache.ids == timer.ids[:24]
    assert timer.pass_ms(2) > 0 and timer.cache.ids == timer.ids[:24]  # the context is kept for the next pass
    timer.close()
    assert timer.owner.ctx is None
    # calibration_for closes what it kept, also when measuring the torch formats fails.
    closed = []
    real_close = calibrate_finalists.PassTimer.close
    monkeypatch.setattr(calibrate_finalists.PassTimer, "close", lambda self: closed.append(self) or real_close(self))

    def fail(*args, **kwargs):
        raise RuntimeError("torch formats failed")
    monkeypatch.setattr("engine.calibration.run.calibrate", fail)
    config = tiny_model(2, 0).config
    with pytest.raises(RuntimeError, match="torch formats failed"):
        calibration_for(Path(gguf_files["target"]).parent, config, None, in_process=True, progress=False,
                                  gguf_files={"target": gguf_files["target"]})
    assert len(closed) == 1 and closed[0].owner.ctx is None
