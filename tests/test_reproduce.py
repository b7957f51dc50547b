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
    assert reproduce.main(["--output", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "probe" / "notebooks" / "09_probe.ipynb").exists()
    records = json.loads((tmp_path / "out" / "probe" / "benchmarks.json").read_text())
    assert records[0]["variant"] == "copy"
    assert not (tmp_path / "out" / "probe" / "results").exists()  # no device folder twice
