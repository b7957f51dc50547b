"""The course's two figures from benchmark records: :func:`throughput` (GB/s versus size, the copy dashed) and
:func:`roofline_bars` (each variant as a % of the copy at one size).

Each returns its Figure, closed (Jupyter shows it once, as the cell's value; a script opens no window), and with
``save_as`` writes a PNG and the plotted numbers as JSON beside it, so that a figure's claim can be checked without
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


def roofline_bars(records: list[dict], *, numel: int, dtype="float32", op: str = "forward", title: str,
                  save_as: str | Path | None = None, label: str | None = None) -> Figure:
    """Each variant's throughput as a % of the copy's at ``numel`` elements, as horizontal bars (fastest on top)
    against a line at 100% (torch's copy), and one at the datasheet's peak bandwidth where the GPU has one."""
    chosen = results.with_roofline_ratios(_select(records, dtype=dtype, op=op, numel=numel))
    copy = next((r for r in chosen if r["variant"] == COPY), None)
    bars = [r for r in chosen if r["variant"] != COPY]
    if copy is None or not bars or any(r["pct_of_copy"] is None for r in bars):
        raise ValueError(f"need a {COPY!r} record and at least one variant measured with it at numel={numel}")
    bars.sort(key=lambda r: r["pct_of_copy"])  # barh draws upwards: the fastest ends on top

    fig, ax = plt.subplots(figsize=(7.0, 1.4 + 0.45 * len(bars)), layout="constrained")
    pct = [r["pct_of_copy"] for r in bars]
    drawn = ax.barh([results.label(r) for r in bars], pct, color=[variant_color(results.label(r)) for r in bars],
                    alpha=0.8)
    ax.bar_label(drawn, labels=[f"{p:.1f}%" for p in pct], padding=3, fontsize=8)  # 100.4% and 99.8% differ
    ax.axvline(100, color="black", linestyle="--", linewidth=1.5,
               label=f"{COPY_LABELS[op].removesuffix(' (yardstick)')} = 100% ({copy['gbps']:.0f} GB/s)")
    peak = datasheet_gbps(chosen)
    peak_pct = None if peak is None else 100 * peak / copy["gbps"]
    if peak_pct is not None:
        ax.axvline(peak_pct, color="dimgray", linestyle=":", linewidth=1.5,
                   label=f"datasheet peak = {peak_pct:.1f}% ({peak:.0f} GB/s)")
    ax.set_xlim(0, max(115, max(pct) * 1.15, (peak_pct or 0) * 1.05))  # room for the labels past the longest bar
    ax.set_xlabel(f"% of copy throughput, {numel:,} {dtype_name(dtype)} elements")
    fig.legend(fontsize=8, loc="outside lower center", ncols=2)  # below the axes: no bar or label hidden
    _titles(fig, ax, title, label)

    data = {"figure": "roofline_bars", "title": title, "label": label, "op": op, "dtype": dtype_name(dtype),
            "numel": numel, "device": copy.get("device"), "copy_gbps": copy["gbps"], "datasheet_gbps": peak,
            "bars": [{"variant": r["variant"], "config": r.get("config"), "pct_of_copy": r["pct_of_copy"],
                      "gbps": r["gbps"], "median_ms": r["median_ms"]} for r in bars]}
    _save(fig, data, save_as, chosen, records)
    plt.close(fig)
    return fig
