"""Everything the notebooks compile, built ahead, at once, each build in a process of its own: every
kernel library, and every notebook cell tagged ``build`` after the cells tagged ``sources`` that it needs
(:class:`Builds`). ``python -m helpers.reproduce`` builds the libraries (``make test``, before its test
processes); ``make reproduce`` (``run_notebooks.py``) builds everything beside the first notebooks; a
notebook's :func:`build_ahead` builds its own. All land in caches (``.build/``) that the notebooks then find.
:func:`execute` runs one notebook headless, in a fresh kernel or one started ahead (:class:`WarmKernel`).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import env


def first_imports(nb) -> str:
    """The import statements at the top level of ``nb``'s first code cell (what a warm kernel runs ahead)."""
    import ast

    cell = next((c for c in nb.cells if c.cell_type == "code"), None)
    try:
        tree = ast.parse(cell.source) if cell is not None else None
    except SyntaxError:
        return ""
    return "\n".join(ast.get_source_segment(cell.source, node) for node in (tree.body if tree else ())
                     if isinstance(node, (ast.Import, ast.ImportFrom)))


class WarmKernel:
    """A notebook's python3 kernel. Started ahead of its turn (``warm``), it runs the imports of the notebook's first
    code cell silently (no output, no execution count): torch, helpers and matplotlib take seconds to import, which
    the notebook then does not wait for. Imports measure nothing, so warming one beside a notebook at work disturbs
    no measurement more than an idle process does. It talks to this process over local sockets (IPC) in a scratch
    folder, not TCP: nothing leaves the machine, and ipykernel has no unencrypted-TCP warning to print."""

    def __init__(self, notebook: Path, working_dir: Path | None = None, warm: bool = True):
        import nbformat
        from jupyter_client.manager import KernelManager

        self._sockets = tempfile.TemporaryDirectory(prefix="kernel-")
        self.km = KernelManager(transport="ipc", ip=str(Path(self._sockets.name) / "kernel"), kernel_name="python3")
        self.km.start_kernel(cwd=str(working_dir or notebook.parent))
        self.imports = first_imports(nbformat.read(notebook, as_version=4)) if warm else ""
        self._client = self.km.blocking_client()
        self._client.start_channels()  # a message sent before the kernel listens waits in the socket
        self._request = self._client.execute(self.imports, silent=True, store_history=False)

    def ready(self, timeout_s: float = 600) -> bool:
        """Wait for the imports, while the kernel lives (an error or a dead kernel is left for the notebook's run
        to report); whether they ran."""
        import queue

        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline and self.km.is_alive():
                try:
                    reply = self._client.get_shell_msg(timeout=1)
                except queue.Empty:
                    continue
                if reply["parent_header"].get("msg_id") == self._request:
                    return reply["content"]["status"] == "ok"
        finally:
            self._client.stop_channels()
        return False

    def shutdown(self) -> None:
        try:
            if self.km.is_alive():
                self.km.shutdown_kernel()
        finally:
            self.km.cleanup_resources()
            self._sockets.cleanup()


def execute(notebook: Path, destination: Path, timeout_s: int = 3600, working_dir: Path | None = None,
            kernel: WarmKernel | None = None) -> float:
    """Run ``notebook`` top to bottom in ``kernel`` (started ahead), or in a fresh python3 kernel started in
    ``working_dir`` (by default the notebook's folder); shut it down; save the executed copy."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    started = time.perf_counter()
    kernel = kernel or WarmKernel(notebook, working_dir, warm=False)
    if not kernel.ready(timeout_s) and not kernel.km.is_alive():
        kernel.shutdown()
        raise RuntimeError(f"its kernel died running what its first cell imports: {kernel.imports!r}")
    client = NotebookClient(nb, timeout=timeout_s, km=kernel.km,
                            resources={"metadata": {"path": str(working_dir or notebook.parent)}})
    try:
        client.execute()
    finally:
        if client.kc is not None:  # nbclient leaves a kernel it did not start running, with its client
            client.kc.stop_channels()
        kernel.shutdown()
        destination.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, destination)
    return time.perf_counter() - started


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


NOTEBOOK_CPUS = 2  # CPUs that builds leave to the notebook running beside them


def _build_cpus() -> set[int]:
    """The CPUs a build may use: all of this process's but the first NOTEBOOK_CPUS where at least
    twice as many remain. A notebook that times small kernels beside the builds then finds a CPU
    free: a host thread that waits for one stretches do_bench's small-size times (a launch queued
    late leaves the GPU idle between the timing events)."""
    cpus = sorted(os.sched_getaffinity(0))
    return set(cpus[NOTEBOOK_CPUS:]) if len(cpus) >= 3 * NOTEBOOK_CPUS else set(cpus)


class Builds:
    """Builds running at once, each in a process of its own: ``kernels`` (names of
    helpers.build.KERNELS or AUTOGRAD_KERNELS, or :data:`ENTRY`; by default every kernel
    library) and the build cells of ``notebook_paths`` (:func:`build_cell_jobs`). The libraries in
    ``first`` (the first notebook waits for them) build at full priority, the other libraries at half
    ``cell_niceness`` and the cells at ``cell_niceness``."""

    def __init__(self, notebook_paths: list[Path] = (), kernels: tuple[str, ...] | None = None,
                 progress: bool = False, cell_niceness: int = 0, first: tuple[str, ...] = ()):
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
        build_cpus = _build_cpus()
        environment["MAX_JOBS"] = str(max(2, len(build_cpus) // len(scripts)))
        self.progress, self.started, self.failed, self.done_after_s = progress, time.perf_counter(), {}, {}
        if progress:  # a cold build takes a minute or more: say what is being built, then each as it ends
            print(f"building {len(scripts)} at once: {', '.join(scripts)}", flush=True)
        self._running = {}
        for number, (label, script) in enumerate(scripts.items()):
            niceness = 0 if label in first else cell_niceness // 2 if label in self.libraries else cell_niceness
            command = [*(["nice", "-n", str(niceness)] if niceness else []), sys.executable, "-c", script]
            # stderr to a file, not a pipe: a full pipe would stall a build until it is read.
            with open(Path(scratch) / f"{number}.stderr", "w") as stderr:
                self._running[label] = (subprocess.Popen(command, cwd=env.REPO_ROOT, env=environment,
                                                         stdout=subprocess.DEVNULL, stderr=stderr,
                                                         preexec_fn=lambda: os.sched_setaffinity(0, build_cpus)),
                                        stderr.name)
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


def main() -> int:
    """Every kernel library, at once (``make test``, before its test processes); 1 where one failed."""
    return 1 if prebuild(progress=True) else 0


if __name__ == "__main__":
    sys.exit(main())
