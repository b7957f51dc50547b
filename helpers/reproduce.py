"""Execute every notebook headless, into a separate folder.

    python -m helpers.reproduce                # all notebooks
    python -m helpers.reproduce 01 03          # the notebooks whose names start so

Executed copies go to ``reproduced/<device>/notebooks/``, and the records and figures they
write to ``reproduced/<device>/``, laid out as ``results/<device>/``; ``notebooks/`` is never
written to. Everything the notebooks compile is built at once, each build in a process of its
own (``--no-prebuild`` leaves them to the notebooks), beside the first notebooks: every kernel
library (a notebook that loads one still building waits for it: torch's build lock), and, niced
below them, every notebook cell tagged ``build``, after the cells tagged ``sources`` that it needs
(each notebook waits for its own). All land in caches (``.build/``) that the notebooks then find. At the end it writes ``reproduced/<device>/report.md``:
how long each notebook took and its slowest cells, and what this machine measured.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import env


OUTPUT_DIR = env.REPO_ROOT / "reproduced"


def output_root(slug: str | None = None, output_dir: Path = OUTPUT_DIR) -> Path:
    """Where one device's run goes: ``<output_dir>/<device>/``."""
    return output_dir / (slug or env.device_slug())


def notebooks(prefixes: list[str] | None = None) -> list[Path]:
    """The main path (``00_*`` to ``06_*``) in order, then the appendices (``A1_*``...)."""
    found = sorted(env.NOTEBOOKS_DIR.glob("[0-9][0-9]*_*.ipynb")) + sorted(env.NOTEBOOKS_DIR.glob("A[0-9]*_*.ipynb"))
    if prefixes:
        found = [nb for nb in found if any(nb.name.startswith(p) for p in prefixes)]
    return found


def execute(notebook: Path, destination: Path, timeout_s: int = 3600, working_dir: Path | None = None) -> float:
    """Run ``notebook`` top to bottom in a fresh python3 kernel (started in ``working_dir``,
    by default the notebook's folder); save the executed copy.

    The kernel talks to this process over local sockets (IPC) in a scratch folder, not TCP:
    nothing leaves the machine, and ipykernel has no unencrypted-TCP warning to print."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kernel-") as sockets:
        class LocalKernelManager(KernelManager):
            def __init__(self, **options):
                super().__init__(transport="ipc", ip=str(Path(sockets) / "kernel"), **options)

        client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3", kernel_manager_class=LocalKernelManager,
                                resources={"metadata": {"path": str(working_dir or notebook.parent)}})
        try:
            client.execute()
        finally:
            destination.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, destination)
    return time.perf_counter() - started


def describe_failure(error: BaseException, executed: Path | None = None, lines: int = 8) -> str:
    """One failure, said so that it can be acted on: the exception's type, the cell that
    raised (its index and first line, from the executed copy) and the traceback's last lines.
    nbclient's own message can be empty (a kernel that died says nothing)."""
    import nbformat

    said = [type(error).__name__ + (f": {str(error).strip().splitlines()[-1]}" if str(error).strip() else "")]
    if executed is not None and executed.exists():
        for index, cell in enumerate(nbformat.read(executed, as_version=4).cells):
            failed = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
            if failed:
                first_line = next((line for line in cell.source.splitlines() if line.strip()), "")
                said.append(f"in cell {index} ({first_line[:80]!r}): {failed[0].get('ename')}: {failed[0].get('evalue')}")
                said += [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in failed[0].get("traceback", [])][-lines:]
                break
    return "\n".join(said)


BUILD_TAG = "build"  # a cell that compiles something, which the prebuild runs ahead of time
SOURCES_TAG = "sources"  # a cell that a later build cell needs first: imports, a kernel's source text


def build_cell_jobs(notebook: Path) -> dict:
    """A small notebook for each code cell of ``notebook`` tagged ``build``: the cells tagged
    ``sources`` above it, then it; keyed ``<notebook stem>, cell <index>``."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    jobs, needed = {}, []
    for index, cell in enumerate(nb.cells):
        tags = cell.metadata.get("tags", []) if cell.cell_type == "code" else []
        if BUILD_TAG in tags:
            jobs[f"{notebook.stem}, cell {index}"] = nbformat.v4.new_notebook(cells=[*needed, cell],
                                                                             metadata=nb.metadata)
        if SOURCES_TAG in tags:
            needed.append(cell)
    return jobs


ENTRY = "entry"  # prebuild's name for the C++ entry (helpers.build.load_entry)
# Set by make reproduce, which builds everything before the notebooks, and by make test, which builds
# the kernel libraries first and leaves each notebook's build cells to compile in their cells.
PREBUILT_ENV_VAR = "HELPERS_PREBUILT"


class Builds:
    """Builds running at once, each in a process of its own: ``kernels`` (names of
    helpers.build.KERNELS or AUTOGRAD_KERNELS, or :data:`ENTRY`; by default every kernel
    library) and the build cells of ``notebook_paths`` (:func:`build_cell_jobs`), the cells' processes
    at ``cell_niceness``: the libraries, which the first notebooks wait for, come first."""

    def __init__(self, notebook_paths: list[Path] = (), kernels: tuple[str, ...] | None = None,
                 progress: bool = False, cell_niceness: int = 0):
        import nbformat

        from . import build

        libraries = (*build.KERNELS, *build.AUTOGRAD_KERNELS, ENTRY)
        kernels = libraries if kernels is None else kernels
        if unknown := sorted(set(kernels) - set(libraries)):
            raise ValueError(f"no kernel library named {unknown}; the libraries are {', '.join(libraries)}")
        scripts = {kernel: "from helpers import build; " + ("build.load_entry()" if kernel == ENTRY else
                                                             f"build.load({kernel!r})") for kernel in kernels}
        self.libraries, self.cells = tuple(scripts), {}  # cells: notebook stem -> the labels of its build cells
        self._scratch = tempfile.TemporaryDirectory(prefix="prebuild-")  # removed with this object
        scratch = self._scratch.name
        for notebook in notebook_paths:
            for label, job in build_cell_jobs(notebook).items():
                path = Path(scratch) / f"{len(scripts)}.ipynb"
                nbformat.write(job, path)
                scripts[label] = (f"from pathlib import Path; from helpers.reproduce import execute; "
                                  f"execute(Path({str(path)!r}), Path({str(path)!r}), timeout_s=1200, "
                                  f"working_dir=Path({str(notebook.parent)!r}))")
                self.cells[notebook.stem] = (*self.cells.get(notebook.stem, ()), label)
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(env.REPO_ROOT), environment.get("PYTHONPATH")]))
        # Each build runs ninja with this many jobs; together they fill the machine about once
        # (at least 2: an inline extension compiles its C++ and its CUDA file side by side).
        environment["MAX_JOBS"] = str(max(2, (os.cpu_count() or 2) // len(scripts)))
        self.progress, self.started, self.failed, self.done_after_s = progress, time.perf_counter(), {}, {}
        if progress:  # a cold build takes a minute or more: say what is being built, then each as it ends
            print(f"building {len(scripts)} at once: {', '.join(scripts)}", flush=True)
        self._running = {}
        for number, (label, script) in enumerate(scripts.items()):
            niceness = cell_niceness if label not in self.libraries else 0
            # stderr to a file, not a pipe: a full pipe would stall a build until it is read.
            with open(Path(scratch) / f"{number}.stderr", "w") as stderr:
                self._running[label] = (subprocess.Popen(
                    [sys.executable, "-c", script], cwd=env.REPO_ROOT, env=environment, stdout=subprocess.DEVNULL,
                    stderr=stderr, **({"preexec_fn": lambda n=niceness: os.nice(n)} if niceness else {})), stderr.name)
        threading.Thread(target=self._watch, daemon=True).start()  # each one timed and said as it ends

    def _watch(self) -> None:
        while len(self.done_after_s) < len(self._running):
            for label, (process, stderr) in self._running.items():
                if label in self.done_after_s or process.poll() is None:
                    continue
                if process.returncode != 0:
                    lines = [line for line in Path(stderr).read_text(errors="replace").splitlines() if line.strip()]
                    self.failed[label] = lines[-1].strip() if lines else f"exit status {process.returncode}"
                self.done_after_s[label] = time.perf_counter() - self.started
                if self.progress:
                    print(f"  {label}: {'FAILED' if label in self.failed else 'built'} after {self.done_after_s[label]:.0f} s"
                          + (f" ({self.failed[label][-300:]})" if label in self.failed else ""), flush=True)
            time.sleep(0.1)

    def wait(self, labels: tuple[str, ...] | None = None) -> dict[str, str]:
        """Wait for ``labels`` (by default every build); returns those that failed, each with the last
        line its process wrote to stderr (a notebook that needs one then reports the whole message)."""
        labels = tuple(self._running) if labels is None else labels
        while any(label not in self.done_after_s for label in labels):
            time.sleep(0.1)
        return {label: why for label, why in self.failed.items() if label in labels}


def prebuild(notebook_paths: list[Path] = (), kernels: tuple[str, ...] | None = None,
             done_after_s: dict[str, float] | None = None, progress: bool = False) -> dict[str, str]:
    """Run :class:`Builds` of ``kernels`` and the build cells of ``notebook_paths`` to the end; returns
    the ones that failed. ``done_after_s``, if given, receives the seconds after which each one was done."""
    builds = Builds(notebook_paths, kernels, progress)
    failed = builds.wait()
    if done_after_s is not None:
        done_after_s.update(builds.done_after_s)
    return failed


def build_ahead(notebook: str, kernels: tuple[str, ...] = ()) -> str:
    """A notebook's first build: ``kernels`` (see :func:`prebuild`) and the cells of ``notebook`` tagged ``build``, all
    at once, each in a process of its own, so that the cells below find them built (every build is cached under
    .build/, keyed by its sources) instead of building one after another. Returns one line: how long it took, and
    what failed (the cell that needs it then shows the whole error). Under ``make reproduce``, which has built
    everything already, it does nothing."""
    if os.environ.get(PREBUILT_ENV_VAR):
        return "built ahead by make reproduce"
    started, done_after_s = time.perf_counter(), {}
    failed = prebuild([env.NOTEBOOKS_DIR / notebook], kernels=tuple(kernels), done_after_s=done_after_s)
    line = f"{len(kernels)} kernel libraries and the build cells of {notebook}, built at once in " \
           f"{time.perf_counter() - started:.0f} s; each done after: " \
           + ", ".join(f"{label} {seconds:.0f} s" for label, seconds in sorted(done_after_s.items(), key=lambda i: -i[1]))
    if failed:
        line += "; failed: " + "; ".join(f"{label} ({why[-200:]})" for label, why in failed.items())
    return line


def slowest_cells(notebook: Path, count: int = 3) -> list[tuple[int, float]]:
    """The ``count`` slowest code cells of an executed notebook, as (index, seconds), from the
    timings nbclient writes into each cell's metadata."""
    import nbformat

    def seconds(cell) -> float | None:
        timing = cell.metadata.get("execution", {})
        start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if not (start and end):
            return None
        parse = datetime.datetime.fromisoformat
        return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()

    timed = [(i, s) for i, cell in enumerate(nbformat.read(notebook, as_version=4).cells)
             if cell.cell_type == "code" and (s := seconds(cell)) is not None]
    return sorted(timed, key=lambda item: -item[1])[:count]


def measured_here(records: list[dict]) -> list[str]:
    """What this machine measured, from the run's own records: for each dtype at the largest size
    timed, the copy's bandwidth and the course kernel and torch.selu as a share of the copy."""
    lines = []
    forward = [r for r in records if r.get("op", "forward") == "forward" and not r.get("config")]
    for dtype in sorted({r["dtype"] for r in forward}):
        mine = [r for r in forward if r["dtype"] == dtype]
        numel = max(r["numel"] for r in mine)
        at = {r["variant"]: r for r in mine if r["numel"] == numel}
        if "copy" not in at:
            continue
        copy = at["copy"]
        gbps = f"{copy['gbps']:.0f}" if "gbps" in copy else "—"
        row = f"| {dtype} | {numel:,} | {gbps} |"
        for variant in ("selu_vectorized", "torch_eager"):
            row += f" {100 * copy['median_ms'] / at[variant]['median_ms']:.1f}% |" if variant in at else " — |"
        lines.append(row)
    if not lines:
        return ["No timing records were written by this run."]
    return ["| dtype | elements | copy GB/s | course kernel, % of copy | torch.selu, % of copy |",
            "|---|---:|---:|---:|---:|", *lines]


def write_summary(root: Path, slug: str, timings: dict[str, float | None], started: float,
                  prebuild_s: float | None = None) -> Path:
    """``root/report.md``: the time of the builds and of each notebook with its slowest cells,
    and what this machine measured (its own records, never the committed ones)."""
    total = time.perf_counter() - started
    lines = [f"# Reproduced on {slug}", "",
             f"{len(timings)} notebook{'s' if len(timings) != 1 else ''} in {total / 60:.1f} min, builds included.", "",
             "| step | seconds | slowest cells (index: seconds) |", "|---|---:|---|"]
    if prebuild_s is not None:
        lines.append(f"| kernel libraries, all at once beside the first notebooks | {prebuild_s:.0f} | |")
    for name, seconds in timings.items():
        executed = root / "notebooks" / f"{name}.ipynb"
        cells = ", ".join(f"{i}: {s:.0f}" for i, s in slowest_cells(executed)) if executed.exists() else ""
        lines.append(f"| {name} | {'FAILED' if seconds is None else f'{seconds:.0f}'} | {cells} |")
    records_file = root / "benchmarks.json"
    records = json.loads(records_file.read_text()) if records_file.exists() else []
    lines += ["", "## Measured on this machine", "", *measured_here(records), "",
              f"- executed notebooks: `{os.path.relpath(root / 'notebooks', env.REPO_ROOT)}/`",
              f"- records, tables and figures: `{os.path.relpath(root, env.REPO_ROOT)}/` (laid out as `results/<device>/`)",
              ""]
    path = root / "report.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def _failures(failed: dict[str, str]) -> str:
    return (f"; failed: {'; '.join(f'{label} ({why[-300:]})' for label, why in failed.items())} "
            "(the notebooks that need them will say more)" if failed else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prefixes", nargs="*", help="run only notebooks whose names start with these")
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR,
                        help="folder that receives <device>/ with the executed copies and results (default: reproduced)")
    parser.add_argument("--no-prebuild", action="store_true", help="leave the kernel builds to the notebooks")
    parser.add_argument("--kernels-only", action="store_true",
                        help="build every kernel library at once and stop (make test, before its test processes)")
    args = parser.parse_args(argv)
    if args.kernels_only:
        return 1 if prebuild(progress=True) else 0

    output_dir = args.output.resolve()
    root = output_root(output_dir=output_dir)
    # The kernels started by nbclient inherit these: notebooks write records to <output>/<device>/
    # (helpers.results adds the device folder), and draw no progress bars into the executed copies.
    os.environ["HELPERS_RESULTS_DIR"] = str(output_dir)
    os.environ[env.HEADLESS_ENV_VAR] = "1"
    started = time.perf_counter()
    chosen = notebooks(args.prefixes)
    prebuild_s, builds = None, None
    if not args.no_prebuild:  # the notebooks start beside the builds; their own build_ahead cells have nothing to do
        builds = Builds(chosen, progress=True, cell_niceness=10)
        os.environ[PREBUILT_ENV_VAR] = "1"
    failures, timings = 0, {}  # notebook -> seconds, None where it failed
    for notebook in chosen:
        target = root / "notebooks" / notebook.name
        if builds is not None and builds.cells.get(notebook.stem):
            failed = builds.wait(builds.cells[notebook.stem])
            last_s = max(builds.done_after_s[label] for label in builds.cells[notebook.stem])
            print(f"{notebook.name}: its build cells done after {last_s:.0f} s" + _failures(failed), flush=True)
        print(f"{notebook.name} ...", flush=True)
        try:
            seconds = execute(notebook, target)
            timings[notebook.stem] = seconds
            print(f"{notebook.name}: ok in {seconds:.0f} s -> {os.path.relpath(target, env.REPO_ROOT)}", flush=True)
        except Exception as error:  # keep going: one broken notebook should not hide the others
            failures += 1
            timings[notebook.stem] = None
            print(f"{notebook.name}: FAILED: {describe_failure(error, target)}", file=sys.stderr, flush=True)
        write_summary(root, root.name, timings, started, prebuild_s)  # after each: a cut-off run keeps its times
    if builds is not None:  # every build ended (a run of the first notebooks can end sooner): the report says when
        builds.wait()
        prebuild_s = max(builds.done_after_s[label] for label in builds.libraries)
    summary = write_summary(root, root.name, timings, started, prebuild_s)
    print(f"done in {(time.perf_counter() - started) / 60:.1f} min; summary: {os.path.relpath(summary, env.REPO_ROOT)}",
          flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
