"""``make reproduce``: executed copies and records land in one device folder, laid out as results/<device>/."""
from __future__ import annotations

import json
import os
import re
import time

import nbformat
import pytest

import run_notebooks
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
    monkeypatch.setattr(run_notebooks, "notebooks", lambda prefixes=None: [notebook])
    monkeypatch.setattr(env, "device_slug", lambda device=None: "probe")
    # main() sets these for the notebooks it starts: restored after the test.
    monkeypatch.setenv("HELPERS_RESULTS_DIR", os.environ.get("HELPERS_RESULTS_DIR", ""))
    monkeypatch.setenv(env.HEADLESS_ENV_VAR, os.environ.get(env.HEADLESS_ENV_VAR, ""))
    monkeypatch.setenv("PYTHONPATH", str(env.REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    assert run_notebooks.main(["--output", str(tmp_path / "out"), "--no-prebuild"]) == 0
    assert (tmp_path / "out" / "probe" / "notebooks" / "09_probe.ipynb").exists()
    records = json.loads((tmp_path / "out" / "probe" / "benchmarks.json").read_text())
    assert records[0]["variant"] == "copy"
    assert not (tmp_path / "out" / "probe" / "results").exists()  # no device folder twice
    summary = (tmp_path / "out" / "probe" / "report.md").read_text()
    assert "| 09_probe |" in summary and "## Measured on this machine" in summary
    assert "| float32 | 1 | — | — | — |" in summary  # this run's copy, never a committed record


def test_a_warm_kernel_has_imported_the_first_cell_before_its_notebooks_turn(tmp_path, monkeypatch):
    folder = tmp_path / "nb"
    folder.mkdir()
    (folder / "stamp.py").write_text("import time\nIMPORTED_AT = time.time()\n")
    first = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(3)")])
    second = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\nimport stamp\nturn = time.time()"),
                                             nbformat.v4.new_code_cell("print(turn - stamp.IMPORTED_AT > 2)")])
    nbformat.write(first, folder / "08_first.ipynb")
    nbformat.write(second, folder / "09_second.ipynb")
    monkeypatch.setattr(run_notebooks, "notebooks", lambda prefixes=None: [folder / "08_first.ipynb", folder / "09_second.ipynb"])
    monkeypatch.setattr(env, "device_slug", lambda device=None: "probe")
    monkeypatch.setattr(run_notebooks, "kernels_ahead", lambda count: 2)
    made, warm_kernel = [], run_notebooks.WarmKernel
    monkeypatch.setattr(run_notebooks, "WarmKernel", lambda notebook: made.append(warm_kernel(notebook)) or made[-1])
    monkeypatch.setenv("HELPERS_RESULTS_DIR", os.environ.get("HELPERS_RESULTS_DIR", ""))
    monkeypatch.setenv(env.HEADLESS_ENV_VAR, os.environ.get(env.HEADLESS_ENV_VAR, ""))
    assert run_notebooks.main(["--output", str(tmp_path / "out"), "--no-prebuild"]) == 0
    executed = nbformat.read(tmp_path / "out" / "probe" / "notebooks" / "09_second.ipynb", as_version=4)
    assert executed.cells[1].outputs[0]["text"] == "True\n"  # imported while 08 slept, before 09's turn
    assert [c.execution_count for c in executed.cells] == [1, 2]  # the silent imports left no trace
    assert len(made) == 2 and not any(kernel.km.is_alive() for kernel in made)  # each shut down after its notebook


def test_a_warm_kernel_that_dies_importing_fails_its_notebook_at_once(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "nb"
    folder.mkdir()
    (folder / "dies.py").write_text("import os\nos._exit(3)\n")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import dies")]), folder / "09_dies.ipynb")
    monkeypatch.setattr(run_notebooks, "notebooks", lambda prefixes=None: [folder / "09_dies.ipynb"])
    monkeypatch.setattr(env, "device_slug", lambda device=None: "probe")
    monkeypatch.setenv("HELPERS_RESULTS_DIR", os.environ.get("HELPERS_RESULTS_DIR", ""))
    monkeypatch.setenv(env.HEADLESS_ENV_VAR, os.environ.get(env.HEADLESS_ENV_VAR, ""))
    started = time.monotonic()
    assert run_notebooks.main(["--output", str(tmp_path / "out"), "--no-prebuild"]) == 1
    assert time.monotonic() - started < 120  # no wait for the hour-long notebook timeout
    assert "09_dies.ipynb: FAILED: RuntimeError: its kernel died running what its first cell imports: 'import dies'" \
        in capsys.readouterr().err


def test_a_failure_names_its_exception_cell_and_traceback(tmp_path, monkeypatch, capsys):
    notebook = tmp_path / "nb" / "09_broken.ipynb"
    notebook.parent.mkdir()
    cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("def inner():\n    raise KeyError('lost')\ninner()")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), notebook)
    monkeypatch.setattr(run_notebooks, "notebooks", lambda prefixes=None: [notebook])
    monkeypatch.setattr(env, "device_slug", lambda device=None: "probe")
    monkeypatch.setenv("HELPERS_RESULTS_DIR", os.environ.get("HELPERS_RESULTS_DIR", ""))
    monkeypatch.setenv(env.HEADLESS_ENV_VAR, os.environ.get(env.HEADLESS_ENV_VAR, ""))
    assert run_notebooks.main(["--output", str(tmp_path / "out"), "--no-prebuild"]) == 1
    said = capsys.readouterr().err
    assert "09_broken.ipynb: FAILED: CellExecutionError" in said
    assert "in cell 1 ('def inner():'): KeyError: 'lost'" in said
    assert "raise KeyError('lost')" in said  # the traceback's last lines


def test_prebuild_builds_every_library(monkeypatch):
    started = []

    class Process:
        def __init__(self, command, **options):
            self.script = command[-1]
            started.append((self.script, options["env"]["MAX_JOBS"]))
            self.returncode = 1 if "'mistakes'" in self.script else 0  # as if that build failed
            if self.returncode:
                options["stderr"].write("building...\nRuntimeError: Error building extension 'mistakes'\n\n")

        def poll(self):
            return self.returncode

    monkeypatch.setattr(reproduce.subprocess, "Popen", Process)
    done_after_s = {}
    failed = reproduce.prebuild(run_notebooks.notebooks(["02"]), done_after_s=done_after_s)
    scripts = [script for script, _ in started]
    assert any("build.load('selu_vectorized')" in s for s in scripts)
    assert any("build.load('selu_autograd')" in s for s in scripts)
    assert any("build.load_entry()" in s for s in scripts)
    assert sum("helpers.reproduce import execute" in s for s in scripts) == len(
        reproduce.build_cell_jobs(run_notebooks.notebooks(["02"])[0]))  # one process per build cell of notebook 02
    assert failed == {"mistakes": "RuntimeError: Error building extension 'mistakes'"}
    assert len(done_after_s) == len(started) and "mistakes" in done_after_s  # every job, failed or not
    assert all(int(jobs) >= 2 for _, jobs in started)


def test_the_first_notebook_starts_beside_the_builds_and_each_waits_for_its_own_build_cells(tmp_path, monkeypatch):
    running = {}  # script -> its process
    seen = {}  # notebook -> [whether each build process had ended] when it started
    called = []  # the notebooks execute was asked for, before any check of its own

    class Process:
        def __init__(self, command, **options):
            self.script, self.returncode = command[-1], None
            self.niceness = int(command[2]) if command[0] == "nice" else 0
            running[self.script] = self

        def poll(self):  # every build runs until 0.2 s after a notebook has started (or 5 s: a run that waits ends)
            if (called and time.monotonic() - first_call[0] > 0.2) or time.monotonic() - started > 5:
                self.returncode = 0
            return self.returncode

    started, first_call = time.monotonic(), []

    monkeypatch.setattr(reproduce.subprocess, "Popen", Process)
    monkeypatch.setattr(reproduce.time, "sleep", lambda s: None)
    monkeypatch.setattr(env, "device_slug", lambda device=None: "probe")
    monkeypatch.setenv("HELPERS_RESULTS_DIR", os.environ.get("HELPERS_RESULTS_DIR", ""))
    monkeypatch.setenv(env.HEADLESS_ENV_VAR, os.environ.get(env.HEADLESS_ENV_VAR, ""))
    monkeypatch.setenv(reproduce.PREBUILT_ENV_VAR, os.environ.get(reproduce.PREBUILT_ENV_VAR, ""))

    def execute(notebook, target, **options):
        # whether each build cell's process had ended, read before this call lets the fakes end (the
        # libraries are left out: a notebook that loads one still building waits through torch's build lock)
        ended = [p.returncode == 0 for s, p in running.items() if "execute(" in s]
        first_call[:] = first_call or [time.monotonic()]
        called.append(notebook.stem)
        niceness = {s: p.niceness for s, p in running.items()}
        cells = [n for s, n in niceness.items() if "execute(" in s]
        assert cells and set(cells) == {10}  # the libraries, which notebooks wait for, come first
        assert niceness["from helpers import build; build.load('selu_naive')"] == 0  # the one 00 loads: before all
        assert {n for s, n in niceness.items() if "execute(" not in s and "selu_naive" not in s} == {5}
        seen[notebook.stem] = ended
        return 0.0

    monkeypatch.setattr(run_notebooks, "execute", execute)
    assert run_notebooks.main(["--output", str(tmp_path / "out"), "--cold", "00", "02"]) == 0
    assert not any(seen["00_setup"])  # 00 has no build cells: it started while they were building
    assert seen["02_first_cuda_kernel"] and all(seen["02_first_cuda_kernel"])
    assert "| kernel libraries, all at once beside the first notebooks |" in (tmp_path / "out" / "probe" / "report.md").read_text()


def test_python_m_helpers_reproduce_builds_every_library_and_runs_no_notebook(monkeypatch):
    asked = []
    monkeypatch.setattr(reproduce, "prebuild", lambda *paths, **options: asked.append((paths, options)) or {})
    monkeypatch.setattr(reproduce, "execute", lambda *args, **kwargs: pytest.fail("a notebook ran"))
    assert reproduce.main() == 0
    assert asked == [((), {"progress": True})]  # no notebook's build cells: every kernel library
    monkeypatch.setattr(reproduce, "prebuild", lambda *paths, **options: {"mistakes": "RuntimeError: ..."})
    assert reproduce.main() == 1


def test_prebuild_says_what_it_builds_and_when_each_ends(monkeypatch, capsys):
    class Process:
        def __init__(self, command, **options):
            self.returncode = 1 if "'mistakes'" in command[-1] else 0

        def poll(self):
            return self.returncode

    monkeypatch.setattr(reproduce.subprocess, "Popen", Process)
    reproduce.prebuild(kernels=("selu_vectorized", "mistakes"), progress=True)
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "building 2 at once: selu_vectorized, mistakes"
    assert sorted(line.split(" after ")[0] for line in said[1:]) == ["  mistakes: FAILED", "  selu_vectorized: built"]


def test_build_ahead_builds_what_a_notebook_names_and_its_build_cells(monkeypatch):
    started = []

    class Process:
        def __init__(self, command, **options):
            started.append(command[-1])
            self.returncode, self.polls_left = 0, 3 if "'mistakes'" in command[-1] else 0

        def poll(self):  # the mistakes library is the last one done
            self.polls_left -= 1
            return None if self.polls_left >= 0 else self.returncode

    monkeypatch.setattr(reproduce.subprocess, "Popen", Process)
    monkeypatch.delenv(reproduce.PREBUILT_ENV_VAR, raising=False)
    line = reproduce.build_ahead("02_first_cuda_kernel.ipynb", kernels=("selu_naive", "mistakes"))
    assert line.startswith("2 kernel libraries and the build cells of 02_first_cuda_kernel.ipynb, built at once")
    assert re.search(r"each done after: mistakes \d+ s, ", line) and "selu_naive" in line  # the last done first
    libraries = [s for s in started if "build.load(" in s]
    assert sorted(libraries) == sorted(f"from helpers import build; build.load({k!r})" for k in ("selu_naive", "mistakes"))
    cells = reproduce.build_cell_jobs(env.NOTEBOOKS_DIR / "02_first_cuda_kernel.ipynb")
    assert len(started) == 2 + len(cells) and cells
    started.clear()
    monkeypatch.setenv(reproduce.PREBUILT_ENV_VAR, "1")
    assert reproduce.build_ahead("02_first_cuda_kernel.ipynb", ("selu_naive",)) == "built ahead by make reproduce"
    assert started == []
    with pytest.raises(ValueError, match="no kernel library named"):
        reproduce.prebuild([], kernels=("selu_fast",))


def tagged(source, *tags):
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def test_a_build_job_is_the_sources_above_it_and_the_build_cell(tmp_path):
    notebook = tmp_path / "07_probe.ipynb"
    cells = [tagged("import torch", "sources"), tagged("A = 1", "sources"), tagged("print('timed')"),
             tagged("built = A + 1", "build"), tagged("B = 2", "sources"), tagged("built = B", "build", "sources")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), notebook)
    jobs = reproduce.build_cell_jobs(notebook)
    assert list(jobs) == ["07_probe, cell 3", "07_probe, cell 5"]
    assert [c.source for c in jobs["07_probe, cell 3"].cells] == ["import torch", "A = 1", "built = A + 1"]
    assert [c.source for c in jobs["07_probe, cell 5"].cells] == ["import torch", "A = 1", "B = 2", "built = B"]


def test_the_slowest_cells_come_from_nbclients_timings(tmp_path):
    def timed(seconds):
        cell = nbformat.v4.new_code_cell("pass")
        cell.metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00.000000Z",
                                      "shell.execute_reply": f"2026-01-01T00:00:{seconds:02d}.500000Z"}
        return cell

    notebook = tmp_path / "executed.ipynb"
    cells = [nbformat.v4.new_markdown_cell("text"), timed(3), nbformat.v4.new_code_cell("untimed"), timed(40), timed(7)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), notebook)
    assert run_notebooks.slowest_cells(notebook, count=2) == [(3, 40.5), (4, 7.5)]


@pytest.mark.skipif(not (env.REPO_ROOT / "notebooks").exists(), reason="needs the notebooks")
def test_notebook_02s_first_build_job_runs_on_its_own(tmp_path):
    """The cells tagged ``sources`` are all that the load_inline cell needs: its job, run in a
    fresh kernel as the prebuild runs it, finishes without an error."""
    notebook = run_notebooks.notebooks(["02"])[0]
    label, job = next(iter(reproduce.build_cell_jobs(notebook).items()))
    assert "load_inline" in job.cells[-1].source, label
    path = tmp_path / "job.ipynb"
    nbformat.write(job, path)
    reproduce.execute(path, path, timeout_s=900, working_dir=notebook.parent)
    executed = nbformat.read(path, as_version=4)
    assert not [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert "imported relu_inline_" in "".join(o.get("text", "") for o in executed.cells[-1].outputs)


def test_builds_leave_two_cpus_to_the_notebook_beside_them(monkeypatch):
    """A notebook times small kernels while the builds run: its host thread must find a CPU free."""
    monkeypatch.setattr(reproduce.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert reproduce._build_cpus() == set(range(2, 16))
    monkeypatch.setattr(reproduce.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert reproduce._build_cpus() == {0, 1, 2, 3}  # too few to spare two: the builds take them all
