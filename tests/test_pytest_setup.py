"""The suite's own setup: it runs without pytest-xdist (pytest -p no:xdist, or a machine without the plugin), and
its summary names each skipped test's reason."""

import subprocess
import sys

from helpers import REPO


def test_the_suite_runs_without_xdist(script_env):
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "--collect-only", "-q",
                             "tests/test_pytest_setup.py"], capture_output=True, text=True, cwd=REPO,
                            env=script_env, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "2 tests collected" in result.stdout


def test_skipped_tests_show_their_reason(tmp_path, script_env):
    """The repository's addopts (its pyproject.toml, as the rootdir's) put each skip's reason in the summary."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "test_skip.py").write_text('import pytest\n\n\n@pytest.mark.skip(reason="no accelerator here")\n'
                                           "def test_skipped():\n    pass\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider",
                             "test_skip.py"], capture_output=True, text=True, cwd=tmp_path, env=script_env,
                            timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "SKIPPED [1] test_skip.py:4: no accelerator here" in result.stdout
