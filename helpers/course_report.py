"""The course's report (notebook 06, section 5): every stage beside its peers and the copy
roofline, in every dtype, forward, backward and a whole step, on the H100 and the H200.

>>> tables = course_report.tables()            # this GPU measured now, the other GPUs committed  # doctest: +SKIP
>>> course_report.summary_table(tables)        # % of the copy, per GPU and dtype                 # doctest: +SKIP
>>> course_report.roofline_figure(tables)      # the same as bars, both GPUs side by side         # doctest: +SKIP

One run per GPU measures everything at each dtype's problem size (the reference size,
4096 × 393216, where it fits), with the copy that moves the same bytes timed in the
same run: every ratio is taken within one run (:func:`helpers.bench.measure_repeated`).
The stages of the course, in order:

* naive: notebook 02's one-thread-per-element kernel (float32 only);
* vectorized: notebook 03's kernel at its default launch, the same on every GPU;
* tuned: the same kernel at the launch measured on this GPU (:mod:`helpers.tuning`);
* backward: notebook 04's backward kernel;
* operator: one forward and backward through autograd with the course's operator, as a
  training step calls it (notebook 05's C++ rule and entry);

and the peers: eager ``torch.selu`` (and its backward and autograd step), ``torch.compile``,
a plain 10-line Triton SELU, and the Triton operator of notebook 05.
"""
from __future__ import annotations

import re

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, NullFormatter
import torch

from . import backward, bench, check, compiled, env, ops, plot, results, tuning
from .bench import dtype_name
from .report import Markdown, _table, _with_config

REPORT_FILE = "06_report.json"
REPORT_FIGURE = "06_report"
SLUGS = ("h100", "h200")
# kernels/selu_vectorized.cu's default_config(), which every GPU starts from.
DEFAULT_LAUNCH = bench.launch_config(*tuning.DEFAULT_CONFIG)

# Each record's variant, and what the report calls it, stage by stage and then the peers.
LABELS = {
    "forward": {
        "selu_naive": "naive (float32 only)",
        "selu_vectorized_default_launch": "vectorized, default launch",
        "selu_vectorized": "vectorized, launch tuned on this GPU",
        "torch_eager": "torch.selu, eager",
        "torch_compile": "torch.compile(torch.selu)",
        bench.TRITON: "Triton, 10 lines",
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
DEVICE_COLORS = {"h100": "tab:blue", "h200": "tab:orange"}  # the same GPU, the same colour, in every panel

CURVES_FILE = "06_curves.json"
CURVES_FIGURE = "06_curves"
# Throughput against size: four sizes from where launching is the whole cost (2^12) to where
# the copy is near its plateau (2^24), one run each; each dtype's problem size is added from
# the report table. Forward, backward and step, every dtype, every stage and peer.
CURVE_SIZES = tuple(2**k for k in (12, 16, 20, 24))
# Notebook 03's goal for its curve, applied to every stage against torch: from this size up.
CURVE_GOAL_FROM = 2**16
OP_TITLES = {"forward": "forward", "backward": "backward (from x)", "step": "a training step (forward + backward)"}


def _forward_variants(dtype: torch.dtype, device: torch.device) -> dict:
    variants = {}
    if dtype == torch.float32:
        variants["selu_naive"] = ops.selu_naive
    variants["selu_vectorized_default_launch"] = bench.Variant(_with_config(DEFAULT_LAUNCH),
                                                               "selu_vectorized_default_launch", DEFAULT_LAUNCH)
    variants["selu_vectorized"] = ops.selu_vectorized
    variants.update(compiled.forward_variants(dtype, device))  # eager, compile, Triton, the Triton operator
    return variants


def measure(dtypes=check.DTYPES, device=None, repeats: int = 3) -> dict:
    """Every stage and peer, forward, backward and step, in each dtype at its problem size;
    a table (dict) of the first run's records, each with every run's median."""
    device = check._device(device)
    records = []
    # The operator as notebook 05 leaves it; the rule and entry in place before come back after.
    with compiled.autograd_rule("cpp"), compiled.cpp_entry(True):
        records += _measure_dtypes(dtypes, device, repeats)
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "torch": torch.__version__,
            "launch_configs": {dtype_name(d): list(ops.launch_config(device, d)) for d in dtypes}
            if device.type == "cuda" else {}, "records": records}


def _measure_dtypes(dtypes, device: torch.device, repeats: int) -> list[dict]:
    records = []
    for dtype in dtypes:
        numel, _ = env.problem_numel(dtype, tensors=backward.BACKWARD_TENSORS)
        x = bench.random_input(numel, dtype, device, seed=5)
        records += bench.measure_repeated(_forward_variants(dtype, device), numel, x=x, repeats=repeats)
        grad = bench.random_input(numel, dtype, device, seed=6)
        records += bench.measure_repeated(compiled.backward_variants(grad), numel, x=x, repeats=repeats,
                                          op="backward")
        records += bench.measure_repeated(backward.step_variants(grad), numel, x=x, repeats=repeats, op="step")
        del x, grad
        bench._release_memory(device)
    return records


def measure_curves(dtypes=check.DTYPES, sizes=CURVE_SIZES, device=None) -> dict:
    """Every stage and peer of the report at each of ``sizes``, forward, backward and step, in
    each dtype: one run per size, each with its copy; a table (dict) to save as JSON."""
    device = check._device(device)
    records = []
    with compiled.autograd_rule("cpp"), compiled.cpp_entry(True):
        for dtype in dtypes:
            for numel in sizes:
                x = bench.random_input(numel, dtype, device, seed=5)
                grad = bench.random_input(numel, dtype, device, seed=6)
                records += bench.measure(_forward_variants(dtype, device), numel, x=x)
                records += bench.measure(compiled.backward_variants(grad), numel, x=x, op="backward")
                records += bench.measure(backward.step_variants(grad), numel, x=x, op="step")
            bench._release_memory(device)
    return {"device": bench.device_name(device), "device_slug": env.device_slug(device), "torch": torch.__version__,
            "sizes": list(sizes), "records": records}


def curves(report: dict[str, dict], slugs: tuple[str, ...] = SLUGS) -> dict[str, dict]:
    """Each GPU's curves: on a GPU measured now (saved as ``06_curves.json``), the committed
    ones for the other GPUs; each with the records of ``report`` (:func:`tables`) for the same
    GPU appended, the problem size's point."""
    found = {}
    if env.can_build_cuda():
        table = measure_curves()
        results.save_table(table, CURVES_FILE)
        found[table["device_slug"]] = table | {"source": "measured in this run"}
    for slug in slugs:
        if slug not in found and (table := results.load_table(CURVES_FILE, slug)) is not None:
            found[slug] = table | {"source": "committed"}
    return {slug: table | {"records": table["records"] + report.get(slug, {}).get("records", [])}
            for slug, table in found.items()}


def curves_figures(found: dict[str, dict], dtypes=check.DTYPES, save: bool = True) -> list:
    """One figure per GPU: GB/s against size, a row per pass (forward, backward, step) and a
    column per dtype, a line per stage and peer, the copy dashed. The figure of a GPU measured
    in this run is saved as ``<device>/figures/06_curves``."""
    figures = []
    for slug, table in found.items():
        fig, axes = plt.subplots(len(LABELS), len(dtypes), figsize=(3.3 * len(dtypes), 2.7 * len(LABELS)),
                                 sharex=True, layout="constrained", squeeze=False)
        data = {"figure": "report_curves", "device": table["device"], "source": table["source"], "panels": []}
        for row, (op, labels) in zip(axes, LABELS.items()):
            for ax, dtype in zip(row, dtypes):
                name = dtype_name(dtype)
                chosen = [r for r in table["records"] if r["op"] == op and r["dtype"] == name]
                panel = {"op": op, "dtype": name, "series": {}}
                for variant in (bench.COPY, *labels):
                    points = sorted(((r["numel"], r["gbps"]) for r in chosen
                                     if r["variant"] == variant), key=lambda p: p[0])
                    if not points:
                        continue
                    numel, gbps = zip(*points)
                    if variant == bench.COPY:
                        ax.plot(numel, gbps, "--", color="black", linewidth=1.2, label="copy of the same bytes")
                    else:
                        ax.plot(numel, gbps, marker="o", markersize=3, linewidth=1.2, label=labels[variant],
                                color=plot.variant_color(variant))
                    panel["series"][variant] = {"numel": list(numel), "gbps": list(gbps)}
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")  # a linear axis hides every size where launching is the cost
                ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
                ax.yaxis.set_minor_formatter(NullFormatter())
                ax.set_title(f"{OP_TITLES[op]}, {name}", fontsize=8)
                ax.grid(True, which="major", alpha=0.3)
                ax.tick_params(labelsize=7)
                data["panels"].append(panel)
            row[0].set_ylabel("GB/s", fontsize=8)
            # One legend per row, beside it (off the lines), with every line of the row's panels.
            handles = {label: handle for ax in row for handle, label in zip(*ax.get_legend_handles_labels())}
            row[-1].legend(handles.values(), handles.keys(), fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5))
        for ax in axes[-1]:
            ax.set_xlabel("elements", fontsize=8)
        fig.suptitle(f"SELU throughput against size on {table['device']} ({table['source']}); "
                     "the largest point is each dtype's problem size", fontsize=9)
        plt.close(fig)
        if save and table["source"] == "measured in this run":
            plot.save_figure(fig, data, results.figure_path(CURVES_FIGURE, slug))
        figures.append(fig)
    return figures


def _size(numel: int) -> str:
    return f"2^{numel.bit_length() - 1}" if numel & (numel - 1) == 0 else f"{numel:,} elements"


def curve_verdicts(found: dict[str, dict], dtypes=check.DTYPES, smallest: int = CURVE_GOAL_FROM) -> Markdown:
    """Per GPU, dtype and pass, from ``smallest`` elements up: the course's kernel (the tuned
    forward, the backward kernel, the operator's step) against torch's eager counterpart of
    the same run, the worst ratio of throughputs and where."""
    ours = {"forward": "selu_vectorized", "backward": "selu_backward", "step": "selu_course_autograd"}
    theirs = {"forward": "torch_eager", "backward": "torch_eager", "step": "torch_autograd"}
    lines = []
    for slug, table in found.items():
        for dtype in dtypes:
            name, cells = dtype_name(dtype), []
            for op in LABELS:
                runs: dict[str, dict[str, dict]] = {}
                for r in table["records"]:
                    if r["op"] == op and r["dtype"] == name and r["numel"] >= smallest and r.get("config") is None:
                        runs.setdefault(r["run"], {})[r["variant"]] = r
                ratios = {run[ours[op]]["numel"]: run[theirs[op]]["median_ms"] / run[ours[op]]["median_ms"]
                          for run in runs.values() if ours[op] in run and theirs[op] in run}
                if ratios:
                    worst = min(ratios, key=ratios.get)
                    cells.append(f"{op} {ratios[worst]:.2f}× at {_size(worst)}")
            if cells:
                lines.append(f"- {slug.upper()} {name}: " + "; ".join(cells))
    return Markdown(f"*The course's kernel against torch eager, throughput ratio (above 1: ours faster), the worst "
                    f"size from {_size(smallest)} elements up:*\n\n" + "\n".join(lines)
                    if lines else "*no curves*")


def tables(slugs: tuple[str, ...] = SLUGS) -> dict[str, dict]:
    """The report's table of each GPU: on a GPU, measured now (and saved as ``06_report.json``)
    for this one; the committed tables for the others, and for all of them elsewhere."""
    found = {}
    here = env.device_slug() if env.can_build_cuda() else None
    if here is not None:
        table = measure()
        results.save_table(table, REPORT_FILE)
        found[here] = table | {"source": "measured in this run"}
    for slug, table in committed_tables(slugs).items():
        found.setdefault(slug, table)
    return found


def committed_tables(slugs: tuple[str, ...] = SLUGS) -> dict[str, dict]:
    """The committed report table of each GPU that has one (what the README shows)."""
    return {slug: table | {"source": "committed"} for slug in slugs
            if (table := results.load_table(REPORT_FILE, slug)) is not None}


def pct_of_copy(table: dict, op: str, dtype: str, variant: str) -> float | None:
    """``variant``'s throughput as a % of the copy's in its own run, or None if not measured."""
    records = [r for r in table["records"] if r["op"] == op and r["dtype"] == dtype]
    record = next((r for r in records if r["variant"] == variant), None)
    return None if record is None else results.pct_of_copy(record, records)


def summary_table(found: dict[str, dict], dtypes=check.DTYPES) -> Markdown:
    """One table a reader can quote: each stage and peer as a % of the copy's throughput (the
    copy of the same run), one column per GPU and dtype, forward, backward and step."""
    if not found:
        return Markdown("*no report table: needs a GPU, and none is committed yet*")
    names = [dtype_name(d) for d in dtypes]
    columns = [(slug, name) for slug in found for name in names]
    header = ["% of the copy"] + [f"{slug.upper()} {name}" for slug, name in columns]
    lines = []
    for op, labels in LABELS.items():
        rows = []
        for variant, label in labels.items():
            cells = [pct_of_copy(found[slug], op, name, variant) for slug, name in columns]
            if any(cell is not None for cell in cells):
                rows.append([label] + [f"{cell:.1f}" if cell is not None else "—" for cell in cells])
        lines += [f"**{OP_TITLES[op]}**", ""] + _table(header, ["---"] + ["---:"] * len(columns), rows) + [""]
    sources = "; ".join(f"{slug.upper()}: {table['device']}, {table['source']}" for slug, table in found.items())
    return Markdown(f"*{sources}. Each dtype at its problem size; the copy moves the bytes the op must move "
                    f"(one read and one write forward, two reads and a write backward), in the same run.*\n\n"
                    + "\n".join(lines))


def roofline_figure(found: dict[str, dict], dtypes=check.DTYPES, op: str = "forward", save: bool = True):
    """Each forward stage and peer as a % of the copy, a panel per dtype, the GPUs side by side;
    saved as ``figures/06_report`` beside the per-device folders."""
    if not found:
        return None
    labels = LABELS[op]
    fig, axes = plt.subplots(1, len(dtypes), figsize=(3.2 * len(dtypes), 3.8), sharey=True, layout="constrained",
                             squeeze=False)
    axes = axes[0]
    data = {"figure": "report_roofline", "op": op, "devices": {slug: t["device"] for slug, t in found.items()},
            "panels": []}
    height = 0.8 / len(found)
    for ax, dtype in zip(axes, dtypes):
        name = dtype_name(dtype)
        panel = {"dtype": name, "bars": []}
        for i, (slug, table) in enumerate(found.items()):
            values = [pct_of_copy(table, op, name, variant) for variant in labels]
            positions = [k + (i - (len(found) - 1) / 2) * height for k in range(len(labels))]
            drawn = ax.barh(positions, [v or 0 for v in values], height=height, color=DEVICE_COLORS.get(slug, "tab:gray"),
                            label=f"{slug.upper()} ({table['source']})")
            ax.bar_label(drawn, labels=[f"{v:.1f}" if v else "" for v in values], padding=2, fontsize=6)
            panel["bars"] += [{"device": slug, "variant": v, "pct_of_copy": p} for v, p in zip(labels, values)]
        ax.axvline(100, color="black", linestyle="--", linewidth=1)
        ax.set(title=name, xlim=(0, 125), xlabel="% of the copy's throughput")
        data["panels"].append(panel)
    axes[0].set_yticks(range(len(labels)), list(labels.values()), fontsize=8)
    axes[0].invert_yaxis()
    # Below the panels, not over a bar.
    fig.legend(*axes[-1].get_legend_handles_labels(), fontsize=7, loc="outside lower center", ncols=len(found))
    fig.suptitle(f"SELU {OP_TITLES[op]} at each dtype's problem size, against a copy of the same bytes", fontsize=10)
    plt.close(fig)
    if save:
        plot.save_figure(fig, data, results.results_dir() / "figures" / f"{REPORT_FIGURE}.png")
    return fig


def memory_table(slugs: tuple[str, ...] = SLUGS) -> Markdown:
    """Notebook 04's peak-memory records of each GPU, as multiples of one tensor."""
    rows, devices = [], []
    for slug in slugs:
        table = results.load_table("04_memory.json", slug)
        if table is None:
            continue
        devices.append(f"{slug.upper()}: {table['device']}")
        for row in table["rows"]:
            rows.append([slug.upper(), row["variant"], f"{row['peak_bytes'] / 1e9:.2f}",
                         f"{row['peak_bytes'] / table['tensor_bytes']:.2f}"])
    if not rows:
        return Markdown("*no committed memory records*")
    lines = _table(["GPU", "forward", "peak GB", "peak / one tensor"], ["---", "---", "---:", "---:"], rows)
    return Markdown(f"*committed records of notebook 04 ({'; '.join(devices)}): peak memory of one forward and "
                    f"backward of SELU on h = x·2, float32 at the reference size*\n\n" + "\n".join(lines))


def default_launch_in_source() -> dict:
    """The default launch written in kernels/selu_vectorized.cu, read from the source."""
    source = (env.KERNELS_DIR / "selu_vectorized.cu").read_text()
    match = re.search(r"default_config\(at::ScalarType\)\s*\{\s*return LaunchConfig\{(\d+),\s*(\d+),\s*(\d+)\}", source)
    return bench.launch_config(*(int(g) for g in match.groups())) if match else {}


def _pct(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.1f}%"


def verdicts(found: dict[str, dict], dtypes=check.DTYPES) -> Markdown:
    """Per GPU and dtype, in one line each: the tuned kernel's % of the copy and the fastest
    forward row; the backward kernel's and torch's backward; the course's step and torch's."""
    lines = []
    for slug, table in found.items():
        for dtype in dtypes:
            name = dtype_name(dtype)
            forward = {label: pct_of_copy(table, "forward", name, variant)
                       for variant, label in LABELS["forward"].items()}
            forward = {label: pct for label, pct in forward.items() if pct is not None}
            if not forward:
                continue
            best = max(forward, key=forward.get)
            tuned = forward.get(LABELS["forward"]["selu_vectorized"])
            ours_back, theirs_back = (pct_of_copy(table, "backward", name, v) for v in ("selu_backward", "torch_eager"))
            ours_step, theirs_step = (pct_of_copy(table, "step", name, v)
                                      for v in ("selu_course_autograd", "torch_autograd"))
            lines.append(f"- {slug.upper()} {name}: forward, the tuned kernel at {_pct(tuned)} of the copy, the fastest "
                         f"row {best} ({_pct(forward[best])}); backward {_pct(ours_back)} (torch {_pct(theirs_back)}); "
                         f"step {_pct(ours_step)} (torch {_pct(theirs_step)})")
    return Markdown("\n".join(lines) or "*no report table*")
