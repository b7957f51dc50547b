"""Execute every notebook headless, into a separate folder.

    python -m helpers.reproduce                # all notebooks
    python -m helpers.reproduce 01 03          # the notebooks whose names start so

Executed copies go to ``reproduced/<device>/notebooks/``, and the records and
figures they write to ``reproduced/<device>/`` (``benchmarks.json``, ``figures/``),
laid out as ``results/<device>/`` is, so the two compare file by file. The
notebooks in ``notebooks/`` are never written to.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import env


OUTPUT_DIR = env.REPO_ROOT / "reproduced"


def output_root(slug: str | None = None, output_dir: Path = OUTPUT_DIR) -> Path:
    """Where one device's run goes: ``<output_dir>/<device>/``."""
    return output_dir / (slug or env.device_slug())


def notebooks(prefixes: list[str] | None = None) -> list[Path]:
    found = sorted(env.NOTEBOOKS_DIR.glob("[0-9][0-9]*_*.ipynb"))
    if prefixes:
        found = [nb for nb in found if any(nb.name.startswith(p) for p in prefixes)]
    return found


def execute(notebook: Path, destination: Path, timeout_s: int = 3600) -> float:
    """Run ``notebook`` top to bottom in a fresh python3 kernel; save the executed copy."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    started = time.perf_counter()
    client = NotebookClient(
        nb,
        timeout=timeout_s,
        kernel_name="python3",
        resources={"metadata": {"path": str(notebook.parent)}},
    )
    try:
        client.execute()
    finally:
        destination.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, destination)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prefixes", nargs="*", help="run only notebooks whose names start with these")
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR,
                        help="folder that receives <device>/ with the executed copies and results (default: reproduced)")
    args = parser.parse_args(argv)

    output_dir = args.output.resolve()
    root = output_root(output_dir=output_dir)
    # The kernels started by nbclient inherit these: notebooks write records to
    # <output>/<device>/ (helpers.results adds the device folder), and draw no
    # progress bars into the executed copies.
    os.environ["HELPERS_RESULTS_DIR"] = str(output_dir)
    os.environ[env.HEADLESS_ENV_VAR] = "1"
    failures = 0
    for notebook in notebooks(args.prefixes):
        target = root / "notebooks" / notebook.name
        print(f"{notebook.name} ...", flush=True)
        try:
            seconds = execute(notebook, target)
            print(f"{notebook.name}: ok in {seconds:.0f} s -> {os.path.relpath(target, env.REPO_ROOT)}", flush=True)
        except Exception as error:  # keep going: one broken notebook should not hide the others
            failures += 1
            print(f"{notebook.name}: FAILED: {str(error)[-2000:]}", file=sys.stderr, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
