"""Under CI=true a skip fails (tests/conftest.py): a skip at run time, a skipif and a module that skips itself at
collection (importorskip), each seen by pytest in a subprocess with this suite's conftest."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

SKIPPING = '''
import pytest

def test_skips_at_run_time():
    pytest.skip("no model here")

@pytest.mark.skipif(True, reason="not on this machine")
def test_skipped_by_a_mark():
    pass

def test_passes():
    pass

@pytest.mark.xfail(reason="a known bug: xfail is not a skip")
def test_known_bug():
    assert False
'''
SKIPPED_MODULE = '''
import pytest

pytest.importorskip("no_such_module_anywhere")

def test_never_collected():
    pass
'''


def run_pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    (tmp_path / "test_skipped_module.py").write_text(SKIPPED_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "--continue-on-collection-errors", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_under_ci_every_skip_fails(tmp_path):
    run = run_pytest(tmp_path, "true")
    assert run.returncode == 1, run.stdout
    summary = run.stdout.strip().splitlines()[-1]
    # The skipif and the module skip fail in setup and collection: pytest counts those as errors.
    assert "1 failed, 1 passed, 1 xfailed, 2 errors" in summary, run.stdout
    assert "skipped" not in summary
    assert "CI=true allows no skip: Skipped: no model here" in run.stdout
    assert "CI=true allows no skip: Skipped: not on this machine" in run.stdout
    assert "CI=true allows no skip: Skipped: could not import 'no_such_module_anywhere'" in run.stdout


def test_outside_ci_a_skip_is_a_skip_and_reported(tmp_path):
    run = run_pytest(tmp_path, None)
    assert run.returncode == 0, run.stdout
    assert "1 passed, 3 skipped, 1 xfailed" in run.stdout.strip().splitlines()[-1], run.stdout
    assert "SKIPPED [1] test_skipping.py" in run.stdout  # -rs names every skip and its reason
