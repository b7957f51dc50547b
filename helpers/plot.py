"""The course's figure from benchmark records: :func:`throughput` (GB/s versus size, the copy dashed).

It returns its Figure, closed (Jupyter shows it once, as the cell's value; a script opens no window), and with
``save_as`` writes a PNG and the plotted numbers as JSON beside it, so that the figure's claim can be checked without
reading pixels."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation

from . import env, results
from .bench import COPY, dtype_name

DPI = 110  # with the sizes below: PNGs of a few tens of kB, notebooks stay small
THROUGHPUT_SIZE = (7.0, 4.2)
BAND_ALPHA = 0.2
COPY_LABEL = "torch copy_ (yardstick)"
# What bench.roofline_copy times for each pass: the same bytes, with torch's kernels.
COPY_LABELS = {"forward": COPY_LABEL, "backward": "torch.add(a, b, out=out) (yardstick)",
               "step": "copy_, then add (yardstick)"}


def datasheet_gbps(records: list[dict]) -> float | None:
    """The datasheet's peak bandwidth of the records' GPU, or None for one with no entry (and the CPU)."""
    return env.DATASHEET_BANDWIDTH_GBPS.get(records[0].get("device")) if records else None


# The same variant, the same colour, in every figure of the course: matplotlib's colour
# cycle would colour a line by its place in the legend, which changes from figure to figure.
_PALETTE = [matplotlib.colormaps["tab20"].colors[i] for i in (*range(0, 20, 2), *range(1, 20, 2))]
VARIANT_COLORS = dict(zip(
    ("torch_eager", "torch_compile", "selu_naive", "selu_vectorized", "triton", "selu_triton", "selu_backward",
     "selu_vectorized_default_launch", "torch_autograd", "selu_course_autograd", "relu_inline", "torch_relu",
     "selu_triton_backward", "torch_eager_from_output", "selu_backward_from_output"), _PALETTE))


def variant_color(name: str):
    """The colour of variant ``name`` in every figure: its own in :data:`VARIANT_COLORS`, else one
    picked by the name itself."""
    return VARIANT_COLORS.get(name) or _PALETTE[zlib.crc32(name.encode()) % len(_PALETTE)]


def _select(records: list[dict], *, dtype, op, numel=None) -> list[dict]:
    wanted = dtype_name(dtype)
    chosen = [r for r in records if r["op"] == op and r["dtype"] == wanted and (numel is None or r["numel"] == numel)]
    if not chosen:
        have = sorted({(r["op"], r["dtype"], r["numel"]) for r in records})
        raise ValueError(f"no records for op={op!r}, dtype={wanted!r}, numel={numel}; the records have {have}")
    slugs = {r.get("device_slug") for r in chosen}
    if len(slugs) > 1:
        # Lines of two machines under one variant name would be joined into nonsense.
        raise ValueError(f"records from several devices {sorted(map(str, slugs))}: plot one device at a time")
    return chosen


def _titles(fig: Figure, ax, title: str, label: str | None) -> None:
    if label:
        fig.suptitle(title)
        ax.set_title(label, fontsize=9, color="dimgray")
    else:
        ax.set_title(title)


def _save(fig: Figure, data: dict, save_as: str | Path | None, records: list[dict], shown: list[dict]) -> None:
    """PNG and JSON with the same stem; a bare name goes to the records' figures folder. Committed
    records shown where they were not measured (``shown.measured`` false) are not filed again."""
    if save_as is None or getattr(shown, "measured", True) is False:
        return
    if isinstance(save_as, Path):
        save_figure(fig, data, save_as)
    else:
        # The figure shows one device's numbers (see _select): file it with them.
        save_figure(fig, data, results.figure_path(save_as, slug=records[0].get("device_slug")))


def save_figure(fig: Figure, data: dict, png: Path) -> None:
    """``fig`` as ``png`` and the numbers it plots as JSON beside it (same stem)."""
    png = png if png.suffix else png.with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    # No "Software" stamp (matplotlib's version): a re-render then differs only where pixels do.
    fig.savefig(png, dpi=DPI, metadata={"Software": None})
    png.with_suffix(".json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def throughput(records: list[dict], *, title: str, dtype="float32", op: str = "forward",
               variants: list[str] | None = None, save_as: str | Path | None = None,
               label: str | None = None, marks: dict[str, int] | None = None) -> Figure:
    """GB/s versus elements, one line per variant (``variants`` picks and orders them): the median
    with its 20th-80th percentile band, the copy dashed black, the datasheet's peak dotted grey
    (no kernel can cross it); ``label`` is a subtitle, e.g. the records' ``source``; ``marks``
    draws a grey dash-dot vertical line at each size, with its name in the legend."""
    chosen = _select(records, dtype=dtype, op=op)
    names = variants if variants is not None else list(dict.fromkeys(results.label(r) for r in chosen))
    missing = [n for n in names if not any(results.label(r) == n for r in chosen)]
    if missing:
        raise ValueError(f"no records of {missing}; the records have {sorted({results.label(r) for r in chosen})}")

    fig, ax = plt.subplots(figsize=THROUGHPUT_SIZE, layout="constrained")
    series = {}
    for name in names:
        rows = sorted((r for r in chosen if results.label(r) == name), key=lambda r: r["numel"])
        x = [r["numel"] for r in rows]
        y, low, high = ([r[k] for r in rows] for k in ("gbps", "gbps_q20", "gbps_q80"))
        if name == COPY:
            ax.plot(x, y, linestyle="--", color="black", linewidth=1.5, label=COPY_LABELS[op], zorder=3)
        else:
            ax.plot(x, y, marker="o", markersize=3, linewidth=1.5, label=name, color=variant_color(name))
            ax.fill_between(x, low, high, color=variant_color(name), alpha=BAND_ALPHA, linewidth=0)
        series[name] = {"numel": x, "gbps": y, "gbps_q20": low, "gbps_q80": high}

    peak = datasheet_gbps(chosen)
    if peak is not None:
        ax.axhline(peak, linestyle=":", color="dimgray", linewidth=1.5, label=f"datasheet peak ({peak:.0f} GB/s)")
    for mark, numel in (marks or {}).items():
        ax.axvline(numel, linestyle="-.", color="dimgray", linewidth=1.2, label=mark)  # grey: no variant's colour

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(LogFormatterSciNotation(base=2))
    ax.set_xlabel("elements")
    ax.set_ylabel("GB/s (bytes read + written, 1 GB = 1e9 B)")
    # Log: a linear axis flattens every size where launching, not memory, is the cost.
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    _titles(fig, ax, title, label)

    # "variants" keeps the legend's order (the keys of "series" are stored sorted)
    data = {"figure": "throughput", "title": title, "label": label, "op": op, "dtype": dtype_name(dtype),
            "device": chosen[0].get("device"), "datasheet_gbps": peak, "series": series,
            "variants": names, "marks": marks or {}}
    _save(fig, data, save_as, chosen, records)
    plt.close(fig)  # shown once, as the returned value, and never left open in pyplot
    return fig
