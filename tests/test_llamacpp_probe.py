"""llama.cpp's repacked weights (extra buffer types, AMX) are used only where a child process ran them on this machine
(engine/weights/llamacpp_probe.py): on an AMX-reporting VM they crash the process at the first multi-token pass."""
import json
import signal
import sys

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pyproject pins it; `make venv`)")

from engine_helpers import tiny_model, tiny_tokenizer  # noqa: E402

from engine.testing import write_gguf  # noqa: E402
from engine.weights import llamacpp_probe  # noqa: E402
from engine.weights.llamacpp import LlamaCppModel  # noqa: E402


@pytest.fixture
def home(tmp_path, monkeypatch, engine_options):
    engine_options(home=tmp_path / "home", llamacpp_extra_buffers=None)
    monkeypatch.setattr(llamacpp_probe, "_answers", {})
    return tmp_path / "home"


@pytest.fixture(scope="module")
def q8_gguf(tmp_path_factory):
    """Q8_0 linear weights: a type llama.cpp repacks (and runs through AMX where the CPU reports it)."""
    return write_gguf(tiny_model(2, 0), tiny_tokenizer(), tmp_path_factory.mktemp("q8") / "q8.gguf",
                      linear_type="Q8_0")


def test_a_quantized_gguf_decodes_here_whatever_its_repacked_kernels_do(home, q8_gguf):
    """The default load asks the probe first: it never crashes this process, and the plain kernels it may fall back
    to give the same greedy tokens as the other way."""
    tokens = list(range(10, 42))
    model = llamacpp_probe.load_checked(q8_gguf, n_threads=1, n_ctx_per_sequence=256, n_sequences=1)
    chosen = model.decode(model.take_sequence(), 0, tokens, "all")
    model.close()
    stored = json.loads(llamacpp_probe.cache_file(home).read_text())
    assert list(stored.values()) == [{"file": str(q8_gguf.resolve()), "ran": model.extra_buffers}]
    plain = LlamaCppModel(q8_gguf, n_threads=1, n_ctx_per_sequence=256, n_sequences=1, extra_buffers=False)
    reference = plain.decode(plain.take_sequence(), 0, tokens, "all")
    plain.close()
    assert chosen.shape == reference.shape == (len(tokens), plain.n_vocab)
    assert (chosen.argmax(-1) == reference.argmax(-1)).mean() >= 0.9  # other kernels round differently at ties


def test_the_answer_is_asked_once_per_machine_and_file(home, q8_gguf, monkeypatch):
    first = llamacpp_probe.extra_buffers_run(q8_gguf)
    monkeypatch.setattr(llamacpp_probe, "run_child", lambda path: pytest.fail("asked again"))
    assert llamacpp_probe.extra_buffers_run(q8_gguf) is first
    monkeypatch.setattr(llamacpp_probe, "_answers", {})  # a new process reads the file
    assert llamacpp_probe.extra_buffers_run(q8_gguf) is first


def test_answers_for_files_that_are_gone_are_dropped(home, q8_gguf, tmp_path, monkeypatch):
    """A test suite's temporary GGUFs do not pile up in the user's cache."""
    monkeypatch.setattr(llamacpp_probe, "run_child", lambda path: True)
    gone = tmp_path / "gone.gguf"
    gone.write_bytes(q8_gguf.read_bytes())
    llamacpp_probe.extra_buffers_run(gone)
    gone.unlink()
    llamacpp_probe.extra_buffers_run(q8_gguf)
    files = [v["file"] for v in json.loads(llamacpp_probe.cache_file(home).read_text()).values()]
    assert files == [str(q8_gguf.resolve())]


def test_a_child_that_crashes_means_plain_kernels_and_says_why(home, q8_gguf, monkeypatch, caplog):
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    monkeypatch.setattr(llamacpp_probe, "child_command", lambda path: [sys.executable, "-c", crash])
    with caplog.at_level("WARNING"):
        assert llamacpp_probe.extra_buffers_run(q8_gguf) is False
    assert f"crashed (signal {int(signal.SIGSEGV)})" in caplog.text and "q8.gguf" in caplog.text
    assert [v["ran"] for v in json.loads(llamacpp_probe.cache_file(home).read_text()).values()] == [False]
    model = llamacpp_probe.load_checked(q8_gguf, n_threads=1, n_ctx_per_sequence=256, n_sequences=1)
    assert model.extra_buffers is False
    model.close()
    # The benchmark peer and the remote-engine tests start llama-server the same way.
    assert llamacpp_probe.peer_arguments(q8_gguf) == ["--no-repack"]


def test_a_file_that_does_not_load_is_not_an_answer(home, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    assert llamacpp_probe.run_child(broken) is None
    assert llamacpp_probe.extra_buffers_run(broken) is True  # the caller's own load says what is wrong
    assert not llamacpp_probe.cache_file(home).exists()
    with pytest.raises(ValueError, match="could not load"):
        LlamaCppModel(broken, n_threads=1)


@pytest.mark.parametrize("setting,expected", [("1", True), ("0", False)])
def test_the_setting_answers_without_a_child(home, q8_gguf, monkeypatch, engine_options, setting, expected):
    engine_options(llamacpp_extra_buffers=setting == "1")  # CODECUE_LLAMACPP_EXTRA_BUFFERS
    monkeypatch.setattr(llamacpp_probe, "run_child", lambda path: pytest.fail("asked"))
    assert llamacpp_probe.extra_buffers_run(q8_gguf) is expected
    assert llamacpp_probe.peer_arguments(q8_gguf) == ([] if expected else ["--no-repack"])


def test_list_and_check_say_what_the_probe_found(home, q8_gguf, tmp_path, monkeypatch):
    """`codecue-models list` and `codecue-lsp --check` print it: ran, crashed (plain kernels), or not tried yet."""
    assert llamacpp_probe.describe({"draft": None}, home) is None
    other = tmp_path / "other.gguf"
    other.write_bytes(q8_gguf.read_bytes())
    line = llamacpp_probe.describe({"target": q8_gguf, "draft": other}, home)
    assert line.endswith("target not tried yet (the first llama.cpp load of it tries); draft not tried yet (the first llama.cpp load of it tries)")
    monkeypatch.setattr(llamacpp_probe, "run_child", lambda path: path == q8_gguf)
    llamacpp_probe.extra_buffers_run(q8_gguf), llamacpp_probe.extra_buffers_run(other)
    line = llamacpp_probe.describe({"target": q8_gguf, "draft": other}, home)
    assert line.endswith("target ran; draft crashed here, so llama.cpp's plain kernels")
