"""``make reproduce``: executed copies and records land in one device folder, laid out as results/<device>/."""
from __future__ import annotations

import json
import os

import nbformat
import pytest

from helpers import env, reproduce


@pytest.mark.skipif(not (env.REPO_ROOT / "notebooks").exists(), reason="needs the notebooks")
def test_records_and_notebooks_share_one_device_folder(tmp_path, monkeypatch):
    notebook = tmp_path / "nb" / "09_probe.ipynb"
    notebook.parent.mkdir()
    cell = nbformat.v4.new_code_cell(
        "from helpers import results\n"
        "results.save([{'variant': 'copy', 'op': 'forward', 'dtype': 'float32', 'numel': 1, 'run': 'r',"
        " 'config': None, 'device_slug': 'probe', 'median_ms': 1.0}])")
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), notebook)
    monkeypatch.setattr(reproduce, "notebooks", lambda prefixes=None: [notebook])
    monkeypatch.setattr(env, "device_slug", lambda device=None: "probe")
    # main() sets these for the notebooks it starts: restored after the test.
    monkeypatch.setenv("HELPERS_RESULTS_DIR", os.environ.get("HELPERS_RESULTS_DIR", ""))
    monkeypatch.setenv(env.HEADLESS_ENV_VAR, os.environ.get(env.HEADLESS_ENV_VAR, ""))
    monkeypatch.setenv("PYTHONPATH", str(env.REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    assert reproduce.main(["--output", str(tmp_path / "out"), "--no-prebuild"]) == 0
    assert (tmp_path / "out" / "probe" / "notebooks" / "09_probe.ipynb").exists()
    records = json.loads((tmp_path / "out" / "probe" / "benchmarks.json").read_text())
    assert records[0]["variant"] == "copy"
    assert not (tmp_path / "out" / "probe" / "results").exists()  # no device folder twice
    summary = (tmp_path / "out" / "probe" / "report.md").read_text()
    assert "| 09_probe |" in summary and "## The report" in summary
    if not env.can_build_cuda():
        assert "## Not measured here" in summary and "`06_report.json`" in summary


def test_prebuild_builds_every_library(monkeypatch):
    started = []

    class Process:
        def __init__(self, command, **options):
            self.script = command[-1]
            started.append((self.script, options["env"]["MAX_JOBS"]))

        def wait(self):
            return 1 if "'mistakes'" in self.script else 0  # as if that build failed

    monkeypatch.setattr(reproduce.subprocess, "Popen", Process)
    failed = reproduce.prebuild()
    scripts = [script for script, _ in started]
    assert any("build.load('selu_vectorized')" in s for s in scripts)
    assert any("build.load('selu_autograd')" in s for s in scripts)
    assert any("build.load_entry()" in s for s in scripts)
    assert failed == ["mistakes"]
    assert all(int(jobs) >= 1 for _, jobs in started)
