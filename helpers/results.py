"""Benchmark records on disk: ``results/<device>/benchmarks.json``, JSON tables and figures.

Saving merges: a record replaces the stored one with the same key and leaves the others, so a notebook re-run
updates its own rows. A record's ratio to the copy is never stored but computed on reading (:func:`pct_of_copy`)
from the copy of the same run, so it cannot disagree with the times. ``$HELPERS_RESULTS_DIR`` redirects writing
(``make test`` points it at a scratch folder); the committed records are always read from the repository's
``results/``."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from . import env
from .bench import COPY, METHOD_DO_BENCH, TRITON, Timing, dtype_name, new_run, record

RESULTS_ENV_VAR = "HELPERS_RESULTS_DIR"
BENCHMARKS_FILE = "benchmarks.json"
RECORD_KEY = ("variant", "config", "op", "dtype", "numel", "experiment")  # experiment: see bench.Variant
DERIVED_FIELDS = ("pct_of_copy",)  # computed on reading, never written
SIGNIFICANT_DIGITS = 6  # far finer than run-to-run noise; keeps the JSON readable
GPUS = ("h100", "h200")  # the GPUs whose records the course commits
LEVEL_PCT = 98  # a kernel at >= this % of the copy's throughput (pct_of_copy) is "level with the copy", in every notebook


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
    """Drop a copy that no other record of its run needs, when a newer copy of the same op, dtype and size is kept:
    each stored ratio keeps its yardstick, and re-running a notebook does not pile up copies."""
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
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}") if isinstance(value, float) else value


def _write_atomically(path: Path, text: str) -> Path:
    # A temporary file beside the target (one file system, so the rename is atomic) leaves the old
    # file whole if interrupted; made by open() for the usual permissions (mkstemp's are 0600).
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def save(records: list[dict], slug: str | None = None) -> Path:
    """Merge ``records`` into ``results_dir()/<slug>/benchmarks.json`` (``slug``: the records' one
    ``device_slug`` by default), sorted and indented so that a re-measurement reads as a diff."""
    if slug is None:
        slugs = {r["device_slug"] for r in records}
        if len(slugs) != 1:
            raise ValueError(f"records from {len(slugs)} devices ({sorted(slugs)}): save each device's records "
                             "on their own, or name the slug")
        (slug,) = slugs
    merged = {_key(r): r for r in load(slug, results_dir())}
    merged.update({_key(r): {k: _rounded(v) for k, v in r.items() if k not in DERIVED_FIELDS} for r in records})
    text = json.dumps(sorted(_prune_copies(list(merged.values())), key=_sort_key), indent=1, sort_keys=True)
    return _write_atomically(results_dir() / slug / BENCHMARKS_FILE, text + "\n")


def save_table(table: dict, filename: str, slug: str | None = None) -> Path:
    """Write a JSON table (a measurement that is not a timing) as ``results_dir()/<slug>/<filename>``;
    ``slug`` defaults to the table's ``device_slug``, else this machine's device."""
    path = results_dir() / (slug or table.get("device_slug") or env.device_slug()) / filename
    return _write_atomically(path, json.dumps(table, indent=1) + "\n")


def load_table(filename: str, slug: str = env.REFERENCE_DEVICE_SLUG,
               directory: Path | str | None = None) -> dict | None:
    """The JSON table ``filename`` of ``slug`` (None if there is none): the committed one, or the one
    in ``directory`` (e.g. :func:`results_dir`, this run's) where given."""
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


def this_gpu() -> str | None:
    """The slug of the GPU this run measures on; None where it measures nothing (no CUDA build)."""
    return env.device_slug() if env.can_build_cuda() else None


def newest_table(filename: str, slug: str) -> dict | None:
    """Table ``filename`` of ``slug`` as this run wrote it (another notebook of the same run on this
    GPU), else the committed one (None if neither exists)."""
    return (load_table(filename, slug, results_dir()) if slug == this_gpu() else None) or load_table(filename, slug)


def tables_of_every_gpu(filename: str, measure) -> dict[str, dict]:
    """Table ``filename`` of each GPU, by slug: ``measure()`` on this one, saved with this run's results,
    and the committed table of every other one of :data:`GPUS`, so that the GPUs can be compared."""
    here, tables = this_gpu(), {}
    if here is not None:
        tables[here] = measure()
        save_table(tables[here], filename, here)
    for slug in GPUS:
        if slug not in tables and (committed := load_table(filename, slug)) is not None:
            tables[slug] = committed
    return tables


def table_source(slug: str) -> str:
    """Where a table of :func:`tables_of_every_gpu` comes from: ``"H100 (this run)"``, ``"H200 (committed run)"``."""
    return f"{slug.upper()} ({'this run' if slug == this_gpu() else 'committed run'})"


def load(slug: str, directory: Path | str | None = None) -> list[dict]:
    """The records in ``<directory>/<slug>/benchmarks.json`` ([] if none yet); ``directory``: :func:`results_dir`."""
    path = Path(directory if directory is not None else results_dir()) / slug / BENCHMARKS_FILE
    return json.loads(path.read_text()) if path.exists() else []


def load_reference(slug: str = env.REFERENCE_DEVICE_SLUG) -> list[dict]:
    """The committed records of ``slug`` ([] if none), whatever ``HELPERS_RESULTS_DIR`` says."""
    return load(slug, env.REPO_ROOT / "results")


def reference_label(records: list[dict]) -> str:
    """``"NVIDIA H100 80GB HBM3"``: the device the records were measured on, for a subtitle."""
    return ", ".join(sorted({r["device"] for r in records})) or "no records"


# --------------------------------------------------------------------------- here, or the reference


class Records(list):
    """A list of records that knows where it came from: ``source`` is a line to show
    above a table or figure, ``measured`` says whether this machine measured them."""

    def __init__(self, records=(), *, source: str, measured: bool):
        super().__init__(records)
        self.source = source
        self.measured = measured


def here_or_reference(measure, *, variants=None, dtype=None, numel: int | None = None, op: str = "forward",
                      slug: str = env.REFERENCE_DEVICE_SLUG) -> Records:
    """Where CUDA kernels can be built and run, ``measure()``'s records, saved; elsewhere the
    committed records of ``slug`` (:func:`reference`): the one switch of every GPU-only measurement."""
    if env.can_build_cuda():
        records = measure()
        save(records)
        device = records[0]["device"] if records else env.describe().gpu
        return Records(records, source=f"measured in this run on {device}", measured=True)
    committed = reference(variants=variants, dtype=dtype, numel=numel, op=op, slug=slug)
    return Records(committed, source=f"no GPU here; {committed.source}", measured=False)


def reference(*, variants=None, dtype=None, numel: int | None = None, op: str = "forward",
              slug: str = env.REFERENCE_DEVICE_SLUG) -> Records:
    """The committed records of ``slug``, filtered to ``variants`` (names; the copy is always kept),
    ``dtype``, ``numel`` and ``op``, labelled as a reference."""
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


QUANTILES = [0.5, 0.2, 0.8]  # do_bench(fn, quantiles=QUANTILES): the median, 20th and 80th percentile ms


def save_times(times: dict[str, tuple[float, float, float]], x: torch.Tensor, *, op: str = "forward",
               experiment: str | None = None) -> list[dict]:
    """Save one run of a notebook's own timings as records, for a run without a GPU to read back
    (:func:`committed_times`): ``times`` maps each name, the yardstick under ``"copy"`` among them, to what
    ``triton.testing.do_bench(fn, quantiles=QUANTILES)`` returned for it on ``x``."""
    if COPY not in times:
        raise ValueError(f"times must hold the yardstick under {COPY!r}: every record is read as a ratio to it")
    run = new_run()
    records = [record(name, op, x.dtype, x.numel(), Timing(*map(float, quantiles), n=None, method=METHOD_DO_BENCH),
                      x.device, run, experiment=None if name == COPY else experiment)
               for name, quantiles in times.items()]
    save(records)
    return records


def committed_times(names, *, numel: int | None, dtype, op: str = "forward", experiment: str | None = None,
                    slug: str = env.REFERENCE_DEVICE_SLUG) -> tuple[dict[str, tuple[float, float, float]], str]:
    """What :func:`save_times` saved, read back from ``slug``'s committed records: of the runs at ``numel`` (None:
    any size) and ``dtype`` that timed some of ``names``, the one that timed most (the newest of equals), as the same
    ``{name: (median, q20, q80)}`` with its copy under ``"copy"`` (a name it lacks is absent), and a line
    saying where the times come from."""
    rows = _select(load_reference(slug), numel=numel, dtype=dtype, op=op)
    runs: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r["variant"] in names and r.get("experiment") == experiment and r.get("config") is None:
            runs.setdefault(r.get("run") or "", {})[r["variant"]] = r
    run = max(runs, key=lambda name: (len(runs[name]), name), default=None)
    copy = next((r for r in rows if r["variant"] == COPY and run is not None and r.get("run") == run), None)
    if copy is None:
        return {}, f"no GPU here, and no committed {slug.upper()} run of these yet"
    found = {COPY: copy, **runs[run]}
    times = {name: (r["median_ms"], r["q20_ms"], r["q80_ms"]) for name, r in found.items()}
    return times, (f"no GPU here: the committed {slug.upper()} run of {copy['date']} on {copy['device']}, "
                   f"{copy['numel']:,} elements")


# --------------------------------------------------------------------------- tables


def _select(records: list[dict], *, numel=None, dtype=None, op=None) -> list[dict]:
    wanted_dtype = dtype_name(dtype) if dtype is not None else None
    return [r for r in records if (op is None or r["op"] == op) and (wanted_dtype is None or r["dtype"] == wanted_dtype)
            and (numel is None or r["numel"] == numel)]


def _copy_of(record: dict, records: list[dict]) -> dict | None:
    """The copy measured in the same run as ``record``, on the same op, dtype and size."""
    for r in records:
        if (r["variant"] == COPY and r.get("run") == record.get("run") and r["op"] == record["op"]
                and r["dtype"] == record["dtype"] and r["numel"] == record["numel"]):
            return r
    return None


def pct_of_copy(record: dict, records: list[dict]) -> float | None:
    """``record``'s throughput as a % of the copy's in the same run (None if that run has none).

    Throughputs rather than times, so that an op moving more bytes than the copy (the backward pass) is not
    penalised for it; for the forward pass, which moves the copy's bytes, this is exactly ``copy_ms / record_ms *
    100``."""
    copy = _copy_of(record, records)
    if copy is None:
        return None
    return record["bytes"] / record["median_ms"] / (copy["bytes"] / copy["median_ms"]) * 100


def with_roofline_ratios(records: list[dict]) -> list[dict]:
    """Copies of the records, each with ``pct_of_copy`` computed (:func:`pct_of_copy`)."""
    return [{**r, "pct_of_copy": pct_of_copy(r, records)} for r in records]


def label(record: dict) -> str:
    """The variant's name, with its launch configuration where it has one:
    ``"selu_vectorized (256 threads × 4 vectors, one-shot grid)"``."""
    config = record.get("config")
    if not config:
        return record["variant"]
    grid = "one-shot grid" if not config.get("max_blocks_per_sm") else f"≤ {config['max_blocks_per_sm']} blocks/SM"
    return f"{record['variant']} ({launch_words(config['threads_per_block'], config['vectors_per_thread'])}, {grid})"


def launch_words(threads: int, vectors: int) -> str:
    """A block's shape in words, as every launch label says it: "256 threads × 1 vector"."""
    return f"{threads} threads × {vectors} {'vector' if vectors == 1 else 'vectors'}"


def find(records: list[dict], variant: str, *, config: dict | None = None, dtype=None, numel=None,
         op: str = "forward", experiment: str | None = None) -> dict | None:
    """The first record of ``variant`` (with exactly ``config`` and ``experiment``, see
    :class:`helpers.bench.Variant`) and, where given, ``dtype`` and ``numel``."""
    for r in _select(records, numel=numel, dtype=dtype, op=op):
        if r["variant"] == variant and r.get("config") == config and r.get("experiment") == experiment:
            return r
    return None


@dataclass
class Markdown:
    """Markdown text: Jupyter renders it, ``print`` and ``str`` give it as it is."""

    text: str

    def _repr_markdown_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def markdown_table(header: list[str], rows: list[list], align: list[str] | None = None) -> str:
    """A Markdown table of ``rows`` under ``header``; ``align``: ``"---"`` or ``"---:"`` (right) per column."""
    def cells(row):  # a "|" inside a cell would end it: escaped, it is shown as it is
        return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |"

    lines = [cells(header), "|" + "|".join(align or ["---"] * len(header)) + "|"]
    return "\n".join(lines + [cells(row) for row in rows])


def table(records: list[dict], *, numel: int | None = None, dtype: torch.dtype | str | None = None,
          op: str = "forward", title: str | None = None) -> str:
    """A Markdown table of ``op``'s records (at ``numel`` and ``dtype`` where given): variant, dtype,
    numel, median ms, GB/s, % of copy, fastest first, with a device column if they come from several."""
    rows = with_roofline_ratios(_select(records, numel=numel, dtype=dtype, op=op))
    rows = sorted(rows, key=lambda r: (r["dtype"], r["numel"], r["median_ms"]))
    several_devices = len({r.get("device_slug") for r in rows}) > 1
    header = ["variant", "dtype", "numel", "median ms", "GB/s", "% of copy"]
    align = ["---", "---", "---:", "---:", "---:", "---:"]  # numbers right-aligned
    cells = [[f"**{r['variant']}**" if r["variant"] == COPY else label(r), r["dtype"], f"{r['numel']:,}",
              f"{r['median_ms']:.4g}", f"{r['gbps']:.1f}",
              "n/a" if r["pct_of_copy"] is None else f"{r['pct_of_copy']:.1f}%"] for r in rows]
    if several_devices:
        header, align = ["device", *header], ["---", *align]
        cells = [[r.get("device_slug", "?"), *row] for r, row in zip(rows, cells)]
    if not rows:
        cells = [["(no records)"] + [""] * (len(header) - 1)]
    if title is None and isinstance(records, Records):
        title = records.source
    return (f"*{title}*\n\n" if title else "") + markdown_table(header, cells, align)


def display_table(records: list[dict], *, numel: int | None = None, dtype: torch.dtype | str | None = None,
                  op: str = "forward", title: str | None = None) -> None:
    """:func:`table`, rendered as Markdown in Jupyter and printed elsewhere."""
    text = table(records, numel=numel, dtype=dtype, op=op, title=title)
    if env.in_jupyter():
        from IPython.display import Markdown, display

        display(Markdown(text))
    else:
        print(text)


def figure_path(name: str, slug: str | None = None) -> Path:
    """``results_dir()/<slug>/figures/<name>.png`` (``slug``: this machine's device; ``.png`` added
    where ``name`` has no suffix); the folder is created when a figure is saved."""
    path = results_dir() / (slug or env.device_slug()) / "figures" / name
    return path if path.suffix else path.with_suffix(".png")


# --------------------------------------------------------------------------- the course's report
#
# Every stage of the course beside its peers, each as a % of the copy of the same bytes timed
# in the same run (appendix A5 measures it; the README shows it, and a test keeps the two in step).

REPORT_FILE = "06_report.json"
# Each record's variant and what the report calls it, stage by stage and then the peers.
REPORT_ROWS = {
    "forward": {
        "selu_naive": "naive (float32 only)",
        "selu_vectorized_default_launch": "vectorized, default launch",
        "selu_vectorized": "vectorized, launch tuned on this GPU",
        "torch_eager": "torch.selu, eager",
        "torch_compile": "torch.compile(torch.selu)",
        TRITON: "Triton, 10 lines",
        "selu_triton": "Triton operator (notebook 05)",
    },
    "backward": {
        "selu_backward": "backward kernel",
        "torch_eager": "torch's backward (elu_backward)",
        "selu_triton_backward": "Triton operator's backward",
    },
    "step": {
        "selu_course_autograd": "operator: forward + backward under autograd",
        "torch_autograd": "torch.selu under autograd",
    },
}
OP_TITLES = {"forward": "forward", "backward": "backward (from x)", "step": "a training step (forward + backward)"}


def committed_report_tables(slugs: tuple[str, ...] = GPUS) -> dict[str, dict]:
    """The committed report table (``results/<slug>/06_report.json``) of each GPU that has one."""
    return {slug: table | {"source": "committed"} for slug in slugs
            if (table := load_table(REPORT_FILE, slug)) is not None}


def report_pct_of_copy(table: dict, op: str, dtype: str, variant: str) -> float | None:
    """``variant``'s throughput as a % of the copy's in its own run, or None if not measured."""
    records = [r for r in table["records"] if r["op"] == op and r["dtype"] == dtype]
    record = next((r for r in records if r["variant"] == variant), None)
    return None if record is None else pct_of_copy(record, records)


def report_table(found: dict[str, dict], dtypes=(torch.float32, torch.float64, torch.float16, torch.bfloat16)) -> Markdown:
    """Each stage and peer as a % of the copy, one column per GPU (key of ``found``) and dtype,
    forward, backward and step; a row shows where any column has a number."""
    if not found:
        return Markdown("*no report table: needs a GPU, and none is committed yet*")
    columns = [(slug, dtype_name(d)) for slug in found for d in dtypes]
    header = ["% of the copy"] + [f"{slug.upper()} {name}" for slug, name in columns]
    lines = []
    for op, labels in REPORT_ROWS.items():
        rows = []
        for variant, label in labels.items():
            cells = [report_pct_of_copy(found[slug], op, name, variant) for slug, name in columns]
            if any(cell is not None for cell in cells):
                rows.append([label] + [f"{cell:.1f}" if cell is not None else "—" for cell in cells])
        lines += [f"**{OP_TITLES[op]}**", "", markdown_table(header, rows, align=["---"] + ["---:"] * len(columns)), ""]
    sources = "; ".join(f"{slug.upper()}: {table['device']}, {table['source']}" for slug, table in found.items())
    return Markdown(f"*{sources}. Each dtype at its problem size; the copy moves the bytes the op must move "
                    f"(one read and one write forward, two reads and a write backward), in the same run.*\n\n"
                    + "\n".join(lines))
