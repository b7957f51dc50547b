"""Benchmark records on disk: ``results/<device>/benchmarks.json`` and its figures.

One JSON file per device (``h100``, ``cpu``...), a list of the plain dicts that
:func:`helpers.bench.measure` returns. Saving merges: a record replaces the one
with the same (variant, config, op, dtype, numel) and leaves the others, so a
notebook re-run updates its own rows without wiping another notebook's.

A record carries the run it came from (``run``) and its launch configuration
(``config``) as fields. Its ratio to the copy is never stored: it is computed when
records are read (:func:`pct_of_copy`), from the copy measured in the same run,
so a stored ratio can never disagree with the stored times.

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
from .bench import COPY, dtype_name

RESULTS_ENV_VAR = "HELPERS_RESULTS_DIR"
BENCHMARKS_FILE = "benchmarks.json"
RECORD_KEY = ("variant", "config", "op", "dtype", "numel", "experiment")  # experiment: see bench.Variant
DERIVED_FIELDS = ("pct_of_copy",)  # computed on reading, never written
SIGNIFICANT_DIGITS = 6  # far finer than run-to-run noise; keeps the JSON readable


def results_dir() -> Path:
    """``$HELPERS_RESULTS_DIR`` (relative to the repository root) or ``results/``."""
    override = os.environ.get(RESULTS_ENV_VAR)
    if override:
        path = Path(override)
        return path if path.is_absolute() else env.REPO_ROOT / path
    return env.REPO_ROOT / "results"


def _key(record: dict) -> tuple:
    key = tuple(json.dumps(record.get(k), sort_keys=True) for k in RECORD_KEY)
    # A copy is the yardstick of the run it was measured in: copies of different runs
    # are kept side by side while their runs' records are (see _prune_copies).
    return key + ((record.get("run"),) if record["variant"] == COPY else ())


def _prune_copies(records: list[dict]) -> list[dict]:
    """Drop a copy that no other record of its run needs, when a newer copy of the same
    op, dtype and size is kept: each stored ratio keeps its yardstick, and re-running a
    notebook does not pile up copies."""
    runs_in_use = {r.get("run") for r in records if r["variant"] != COPY}
    newest: dict[tuple, str] = {}
    for r in records:
        if r["variant"] == COPY:
            where = (r["op"], r["dtype"], r["numel"])
            newest[where] = max(newest.get(where, ""), r.get("run") or "")
    return [r for r in records if r["variant"] != COPY or r.get("run") in runs_in_use
            or (r.get("run") or "") == newest[(r["op"], r["dtype"], r["numel"])]]


def _sort_key(record: dict) -> tuple:
    # Grouped as a reader scans the file: op, then dtype, then size, then variant.
    return (record["op"], record["dtype"], record["numel"], record["variant"],
            json.dumps(record.get("config"), sort_keys=True), record.get("run") or "")


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    return value


def save(records: list[dict], slug: str | None = None) -> Path:
    """Merge ``records`` into ``results_dir()/<slug>/benchmarks.json``; its path.

    ``slug`` defaults to the records' ``device_slug`` (they must agree). Records
    with the same (variant, config, op, dtype, numel, experiment) as a stored one replace it; all
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
    merged.update({_key(r): {k: _rounded(v) for k, v in r.items() if k not in DERIVED_FIELDS} for r in records})
    text = json.dumps(sorted(_prune_copies(list(merged.values())), key=_sort_key), indent=1, sort_keys=True) + "\n"

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


def save_table(table: dict, filename: str, slug: str | None = None) -> Path:
    """Write a JSON table (a measurement that is not a timing: peak memory, a fast-math
    comparison...) beside ``benchmarks.json``, in ``results_dir()/<slug>/<filename>``.

    ``slug`` defaults to the table's ``device_slug``, else this machine's device. Written
    atomically, as :func:`save` writes.
    """
    path = results_dir() / (slug or table.get("device_slug") or env.device_slug()) / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(table, indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def load_table(filename: str, slug: str = env.REFERENCE_DEVICE_SLUG,
               directory: Path | str | None = None) -> dict | None:
    """The JSON table ``filename`` of ``slug`` (None if there is none): by default the committed
    one in the repository's ``results/``, whatever ``HELPERS_RESULTS_DIR`` says; from
    ``directory`` (e.g. :func:`results_dir`, this run's) where given."""
    path = Path(directory if directory is not None else env.REPO_ROOT / "results") / slug / filename
    return json.loads(path.read_text()) if path.exists() else None


def here_or_reference_table(measure, filename: str, slug: str = env.REFERENCE_DEVICE_SLUG) -> tuple[dict | None, str]:
    """:func:`here_or_reference` for a JSON table: ``measure()`` on this GPU, saved as
    ``filename`` (:func:`save_table`), or the committed table of ``slug``; and a line
    that says which (the table is None where neither exists)."""
    if env.can_build_cuda():
        table = measure()
        save_table(table, filename)
        return table, f"measured in this run on {table['device']}"
    table = load_table(filename, slug)
    if table is None:
        return None, f"needs a GPU, and there is no committed {slug.upper()} table yet"
    return table, f"no GPU here; reference: {table['device']}, the committed run"


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
    """``"NVIDIA H100 80GB HBM3, 2026-11-20"``: where and when the records were measured
    (the latest date), for the subtitle of a figure or table drawn from them."""
    if not records:
        return "no records"
    devices = sorted({r["device"] for r in records})
    dates = sorted({r["date"] for r in records})
    return f"{', '.join(devices)}, {dates[-1]}"


# --------------------------------------------------------------------------- here, or the reference


class Records(list):
    """A list of records that knows where it came from: ``source`` is a line to show
    above a table or figure, ``measured`` says whether this machine measured them."""

    def __init__(self, records=(), *, source: str, measured: bool):
        super().__init__(records)
        self.source = source
        self.measured = measured


def here_or_reference(
    measure,
    *,
    variants=None,
    dtype=None,
    numel: int | None = None,
    op: str = "forward",
    slug: str = env.REFERENCE_DEVICE_SLUG,
) -> Records:
    """Measure on this GPU, or show the committed reference: the one switch every GPU-only
    measurement of the notebooks makes.

    Where CUDA kernels can be built and run (:func:`helpers.env.can_build_cuda`),
    ``measure()`` runs, its records are saved (:func:`save`) and returned.
    Elsewhere the committed records of ``slug`` (``results/h100``) are returned,
    filtered to ``variants`` (names; the copy is always kept), ``dtype``, ``numel``
    and ``op``, and labelled as a reference.
    """
    if env.can_build_cuda():
        records = measure()
        save(records)
        device = records[0]["device"] if records else env.describe().gpu
        return Records(records, source=f"measured in this run on {device}", measured=True)
    committed = reference(variants=variants, dtype=dtype, numel=numel, op=op, slug=slug)
    return Records(committed, source=f"no GPU here; {committed.source}", measured=False)


def reference(
    *,
    variants=None,
    dtype=None,
    numel: int | None = None,
    op: str = "forward",
    slug: str = env.REFERENCE_DEVICE_SLUG,
) -> Records:
    """The committed records of ``slug`` (``results/h100``), filtered to ``variants`` (names;
    the copy is always kept), ``dtype``, ``numel`` and ``op``, labelled as a reference."""
    wanted = None if variants is None else {*variants, COPY}
    chosen = [r for r in _select(load_reference(slug), numel=numel, dtype=dtype, op=op)
              if wanted is None or r["variant"] in wanted]
    # The copies that are yardsticks of the chosen records (those of their runs), or
    # every copy when only copies were asked for.
    runs = {r.get("run") for r in chosen if r["variant"] != COPY}
    if runs:
        chosen = [r for r in chosen if r["variant"] != COPY or r.get("run") in runs]
    if not chosen:
        return Records([], source=f"no committed {slug.upper()} records of these yet", measured=False)
    return Records(chosen, source=f"reference: {reference_label(chosen)}", measured=False)


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


def _copy_of(record: dict, records: list[dict]) -> dict | None:
    """The copy measured in the same run as ``record``, on the same op, dtype and size."""
    for r in records:
        if (r["variant"] == COPY and r.get("run") == record.get("run") and r["op"] == record["op"]
                and r["dtype"] == record["dtype"] and r["numel"] == record["numel"]):
            return r
    return None


def pct_of_copy(record: dict, records: list[dict]) -> float | None:
    """``record``'s throughput as a % of the copy's in the same run (None if that run has none).

    Throughputs rather than times, so that an op moving more bytes than the copy
    (the backward pass) is not penalised for it; for the forward pass, which moves
    the copy's bytes, this is exactly ``copy_ms / record_ms * 100``.
    """
    copy = _copy_of(record, records)
    if copy is None:
        return None
    return record["bytes"] / record["median_ms"] / (copy["bytes"] / copy["median_ms"]) * 100


def with_roofline_ratios(records: list[dict]) -> list[dict]:
    """Copies of the records, each with ``pct_of_copy`` computed (:func:`pct_of_copy`)."""
    return [{**r, "pct_of_copy": pct_of_copy(r, records)} for r in records]


def config_label(config: dict | None) -> str:
    """``"256 threads × 4 vectors, one-shot grid"`` for a launch configuration ('' for none)."""
    if not config:
        return ""
    grid = "one-shot grid" if not config.get("max_blocks_per_sm") else f"≤ {config['max_blocks_per_sm']} blocks/SM"
    return f"{config['threads_per_block']} threads × {config['vectors_per_thread']} vectors, {grid}"


def label(record: dict) -> str:
    """The variant's name, with its launch configuration where it has one."""
    config = config_label(record.get("config"))
    return f"{record['variant']} ({config})" if config else record["variant"]


def find(records: list[dict], variant: str, *, config: dict | None = None, dtype=None, numel=None,
         op: str = "forward") -> dict | None:
    """The first record of ``variant`` (with exactly ``config``) and, where given, ``dtype`` and ``numel``."""
    for r in _select(records, numel=numel, dtype=dtype, op=op):
        if r["variant"] == variant and r.get("config") == config:
            return r
    return None


def table(
    records: list[dict],
    *,
    numel: int | None = None,
    dtype: torch.dtype | str | None = None,
    op: str = "forward",
    title: str | None = None,
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
            f"**{r['variant']}**" if r["variant"] == COPY else label(r),
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
    if title is None and isinstance(records, Records):
        title = records.source
    return (f"*{title}*\n\n" if title else "") + "\n".join(lines)


def display_table(
    records: list[dict],
    *,
    numel: int | None = None,
    dtype: torch.dtype | str | None = None,
    op: str = "forward",
    title: str | None = None,
) -> None:
    """:func:`table`, rendered as Markdown in Jupyter and printed elsewhere."""
    text = table(records, numel=numel, dtype=dtype, op=op, title=title)
    if env.in_jupyter():
        from IPython.display import Markdown, display

        display(Markdown(text))
    else:
        print(text)


# --------------------------------------------------------------------------- figures


def figure_path(name: str, slug: str | None = None) -> Path:
    """Where figure ``name`` goes: ``results_dir()/<slug>/figures/<name>.png``.

    ``slug`` defaults to this machine's device; ``.png`` is added when ``name``
    has no suffix. The folder is not created here (saving does that).
    """
    slug = slug or env.device_slug()
    path = results_dir() / slug / "figures" / name
    return path if path.suffix else path.with_suffix(".png")
