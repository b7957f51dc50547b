"""Benchmark records on disk: ``results/<device>/benchmarks.json`` and its figures.

One JSON file per device (``h100``, ``cpu``...), a list of the plain dicts that
:func:`helpers.bench.measure` returns. Saving merges: a record replaces the one
with the same (variant, op, dtype, numel) and leaves the others, so a notebook
re-run updates its own rows without wiping another notebook's.

Where they go: ``results/`` in the repository, or the folder named by the
``HELPERS_RESULTS_DIR`` environment variable (``make test`` points it at a scratch
folder so that a test run never edits the committed records). The committed H100
records are always read from ``results/h100`` by :func:`load_reference`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from . import env
from .bench import COPY, add_roofline_ratios, dtype_name

RESULTS_ENV_VAR = "HELPERS_RESULTS_DIR"
BENCHMARKS_FILE = "benchmarks.json"
RECORD_KEY = ("variant", "op", "dtype", "numel")
SIGNIFICANT_DIGITS = 6  # far finer than run-to-run noise; keeps the JSON readable


def results_dir() -> Path:
    """``$HELPERS_RESULTS_DIR`` (relative to the repository root) or ``results/``."""
    override = os.environ.get(RESULTS_ENV_VAR)
    if override:
        path = Path(override)
        return path if path.is_absolute() else env.REPO_ROOT / path
    return env.REPO_ROOT / "results"


def _key(record: dict) -> tuple:
    return tuple(record[k] for k in RECORD_KEY)


def _sort_key(record: dict) -> tuple:
    # Grouped as a reader scans the file: op, then dtype, then size, then variant.
    return (record["op"], record["dtype"], record["numel"], record["variant"])


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    return value


def save(records: list[dict], slug: str | None = None) -> Path:
    """Merge ``records`` into ``results_dir()/<slug>/benchmarks.json``; its path.

    ``slug`` defaults to the records' ``device_slug`` (they must agree). Records
    with the same (variant, op, dtype, numel) as a stored one replace it; all
    other stored records are kept. The file is sorted and indented so that a
    re-measurement shows up as a readable diff, and written atomically (a
    temporary file renamed over it), so an interrupted save leaves the old file.
    """
    if slug is None:
        slugs = {r["device_slug"] for r in records}
        if len(slugs) != 1:
            raise ValueError(
                f"records from {len(slugs)} devices ({sorted(slugs)}): save each device's records on their own, "
                "or name the slug"
            )
        (slug,) = slugs
    path = results_dir() / slug / BENCHMARKS_FILE
    merged = {_key(r): r for r in load(slug, results_dir())}
    merged.update({_key(r): {k: _rounded(v) for k, v in r.items()} for r in records})
    text = json.dumps(sorted(merged.values(), key=_sort_key), indent=1, sort_keys=True) + "\n"

    path.parent.mkdir(parents=True, exist_ok=True)
    # Beside the target (one file system, so the rename is atomic), named per process
    # and created with open() so that it gets the usual permissions (mkstemp's are 0600).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def load(slug: str, directory: Path | str | None = None) -> list[dict]:
    """The records in ``<directory>/<slug>/benchmarks.json`` ([] if none yet).

    ``directory`` defaults to :func:`results_dir`.
    """
    directory = Path(directory) if directory is not None else results_dir()
    path = directory / slug / BENCHMARKS_FILE
    if not path.exists():
        return []
    return json.loads(path.read_text())


def load_reference(slug: str = env.REFERENCE_DEVICE_SLUG) -> list[dict]:
    """The committed records of ``slug`` in the repository's ``results/`` ([] if none),
    whatever ``HELPERS_RESULTS_DIR`` says."""
    return load(slug, env.REPO_ROOT / "results")


def reference_label(records: list[dict]) -> str:
    """``"reference: NVIDIA H100 80GB HBM3, 2026-11-20"``: where and when the records
    were measured (the latest date), for the title of a figure drawn from them."""
    if not records:
        return "reference: no records"
    devices = sorted({r["device"] for r in records})
    dates = sorted({r["date"] for r in records})
    return f"reference: {', '.join(devices)}, {dates[-1]}"


# --------------------------------------------------------------------------- tables


def _select(records: list[dict], *, numel=None, dtype=None, op=None) -> list[dict]:
    wanted_dtype = dtype_name(dtype) if dtype is not None else None
    return [
        r
        for r in records
        if (op is None or r["op"] == op)
        and (wanted_dtype is None or r["dtype"] == wanted_dtype)
        and (numel is None or r["numel"] == numel)
    ]


def with_roofline_ratios(records: list[dict]) -> list[dict]:
    """The records as they are if each has ``pct_of_copy``, else copies of them with
    it computed (:func:`helpers.bench.add_roofline_ratios`); the inputs stay unchanged."""
    if all("pct_of_copy" in r for r in records):
        return records
    return add_roofline_ratios([dict(r) for r in records])


def table(
    records: list[dict],
    *,
    numel: int | None = None,
    dtype: torch.dtype | str | None = None,
    op: str = "forward",
) -> str:
    """A Markdown table: variant, dtype, numel, median ms, GB/s, % of copy.

    Filtered to ``op`` and, where given, one ``numel`` and one ``dtype``; fastest
    first within each (dtype, size). A device column is added when the records
    come from more than one device.
    """
    rows = with_roofline_ratios(_select(records, numel=numel, dtype=dtype, op=op))
    rows = sorted(rows, key=lambda r: (r["dtype"], r["numel"], r["median_ms"]))
    several_devices = len({r.get("device_slug") for r in rows}) > 1
    header = ["variant", "dtype", "numel", "median ms", "GB/s", "% of copy"]
    align = ["---", "---", "---:", "---:", "---:", "---:"]  # numbers right-aligned
    if several_devices:
        header.insert(0, "device")
        align.insert(0, "---")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        pct = r.get("pct_of_copy")
        cells = [
            f"**{r['variant']}**" if r["variant"] == COPY else r["variant"],
            r["dtype"],
            f"{r['numel']:,}",
            f"{r['median_ms']:.4g}",
            f"{r['gbps']:.1f}",
            "n/a" if pct is None else f"{pct:.1f}%",
        ]
        if several_devices:
            cells.insert(0, r.get("device_slug", "?"))
        lines.append("| " + " | ".join(cells) + " |")
    if not rows:
        lines.append("| " + " | ".join(["(no records)"] + [""] * (len(header) - 1)) + " |")
    return "\n".join(lines)


def display_table(
    records: list[dict],
    *,
    numel: int | None = None,
    dtype: torch.dtype | str | None = None,
    op: str = "forward",
) -> None:
    """:func:`table`, rendered as Markdown in Jupyter and printed elsewhere."""
    text = table(records, numel=numel, dtype=dtype, op=op)
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        print(text)
        return
    if get_ipython() is None:  # plain Python (a script, pytest): no front end to render it
        print(text)
    else:
        display(Markdown(text))


# --------------------------------------------------------------------------- figures


def figure_path(name: str, slug: str | None = None) -> Path:
    """Where figure ``name`` goes: ``results_dir()/<slug>/figures/<name>.png``.

    ``slug`` defaults to this machine's device; ``.png`` is added when ``name``
    has no suffix. The folder is not created here (saving does that).
    """
    slug = slug or env.device_slug()
    path = results_dir() / slug / "figures" / name
    return path if path.suffix else path.with_suffix(".png")
