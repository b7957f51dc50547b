"""Execute every notebook headless, into a separate folder.

    python -m run_notebooks                # all notebooks (make reproduce)
    python -m run_notebooks 01 03          # the notebooks whose names start so

Executed copies go to ``reproduced/<device>/notebooks/``, and the records and figures they
write to ``reproduced/<device>/``, laid out as ``results/<device>/``; ``notebooks/`` is never
written to. Everything the notebooks compile is built at once, each build in a process of its
own (``--no-prebuild`` leaves them to the notebooks), beside the first notebooks: every kernel
library (a notebook that loads one still building waits for it: torch's build lock), and, niced
below them, every notebook cell tagged ``build``, after the cells tagged ``sources`` that it needs
(each notebook waits for its own). All land in caches (``.build/``) that the notebooks then find.
The library the first notebook loads builds first, the others niced a little. Each notebook's
kernel starts ahead of its turn (as many as memory allows; ``--cold``: none) and imports what its
first cell imports, so no notebook waits for torch to import. At the end it writes
``reproduced/<device>/report.md``: how long each notebook took and its slowest cells, and what this
machine measured.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import time
from pathlib import Path

from helpers import env
from helpers.reproduce import ENTRY, PREBUILT_ENV_VAR, Builds, WarmKernel, execute

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


def libraries_loaded_by(notebook: Path) -> tuple[str, ...]:
    """The kernel libraries ``notebook``'s code loads by name (``build.load("...")``, ``build.load_entry()``)."""
    import nbformat

    code = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code")
    names = re.findall(r"build\.load\(\s*[\"'](\w+)[\"']", code) + ([ENTRY] if "build.load_entry(" in code else [])
    return tuple(dict.fromkeys(names))


def kernels_ahead(count: int) -> int:
    """How many notebooks' kernels to warm ahead (:class:`WarmKernel`): one per 8 GiB of memory (a kernel with
    torch imported holds about one), at least one, at most ``count``."""
    try:
        gib = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (AttributeError, ValueError, OSError):
        gib = 8
    return max(1, min(count, int(gib // 8)))


def _failures(failed: dict[str, str]) -> str:
    return (f"; failed: {'; '.join(f'{label} ({why[-300:]})' for label, why in failed.items())} "
            "(the notebooks that need them will say more)" if failed else "")


def _execute_all(chosen: list[Path], root: Path, builds: Builds | None, warm: dict, ahead: int,
                 started: float) -> tuple[dict[str, float | None], int]:
    """Each notebook in turn, once its build cells are done, in its warm kernel where it has one (as one
    ends, the kernel of the notebook ``ahead`` places on starts); its seconds (None where it failed)."""
    failures, timings = 0, {}
    for number, notebook in enumerate(chosen):
        target = root / "notebooks" / notebook.name
        if builds is not None and builds.cells.get(notebook.stem):
            failed = builds.wait(builds.cells[notebook.stem])
            last_s = max(builds.done_after_s[label] for label in builds.cells[notebook.stem])
            print(f"{notebook.name}: its build cells done after {last_s:.0f} s" + _failures(failed), flush=True)
        print(f"{notebook.name} ...", flush=True)
        try:
            seconds = execute(notebook, target, kernel=warm.pop(notebook, None))
            timings[notebook.stem] = seconds
            print(f"{notebook.name}: ok in {seconds:.0f} s -> {os.path.relpath(target, env.REPO_ROOT)}", flush=True)
        except Exception as error:  # keep going: one broken notebook should not hide the others
            failures += 1
            timings[notebook.stem] = None
            print(f"{notebook.name}: FAILED: {describe_failure(error, target)}", file=sys.stderr, flush=True)
        if ahead and number + ahead < len(chosen):
            warm[chosen[number + ahead]] = WarmKernel(chosen[number + ahead])
        write_summary(root, root.name, timings, started)  # after each: a cut-off run keeps its times
    return timings, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prefixes", nargs="*", help="run only notebooks whose names start with these")
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR,
                        help="folder that receives <device>/ with the executed copies and results (default: reproduced)")
    parser.add_argument("--no-prebuild", action="store_true", help="leave the kernel builds to the notebooks")
    parser.add_argument("--cold", action="store_true",
                        help="start each notebook's kernel at its turn (by default they start ahead, imports done)")
    args = parser.parse_args(argv)

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
        builds = Builds(chosen, progress=True, cell_niceness=10, first=libraries_loaded_by(chosen[0]) if chosen else ())
        os.environ[PREBUILT_ENV_VAR] = "1"
    ahead = 0 if args.cold else kernels_ahead(len(chosen))
    warm = {notebook: WarmKernel(notebook) for notebook in chosen[:ahead]}  # importing while the first builds run
    try:
        timings, failures = _execute_all(chosen, root, builds, warm, ahead, started)
    finally:
        for kernel in warm.values():  # the kernels of notebooks not reached (an interrupted run)
            kernel.shutdown()
    if builds is not None:  # every build ended (a run of the first notebooks can end sooner): the report says when
        builds.wait()
        prebuild_s = max(builds.done_after_s[label] for label in builds.libraries)
    summary = write_summary(root, root.name, timings, started, prebuild_s)
    print(f"done in {(time.perf_counter() - started) / 60:.1f} min; summary: {os.path.relpath(summary, env.REPO_ROOT)}",
          flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
