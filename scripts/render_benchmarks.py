#!/usr/bin/env python3
"""Renders Google Benchmark JSON results into docs/benchmarks.md and PNG plots.

Input: every bench/results/<executable>-<machine>.json (scripts/bench writes them, with
--benchmark_out_format=json). One section per machine; in it, one plot and one table per group.
Every plot's title names the machine (the GPU, else the CPU model) and the gpubatch commit
measured (the context's gpubatch_commit, "+dirty" when the tree had changes).

Naming convention (bench/README.md; gpubatch::bench::name() builds the first two parts):

    <group>/<impl>[/<arg>...]          e.g.  device_buffer_alloc.cuda/cudaMalloc/bytes:1024

  group  what is measured and on which backend, "<operation>.<backend>"; no '/'.
  impl   "gpubatch" for the code under test, else the name of a baseline (cudaMalloc, cublas,
         openblas, cudnn, malloc, ...). Every implementation of a group measures the same work on
         the same data, so their times divide: the tables show gpubatch / baseline per x. A
         group with no baseline, no gpubatch, or no baseline that ran (SkipWithError) has no
         ratio column and a line saying which.
  args   Google Benchmark's arguments, "name:value" (with ArgName/ArgNames) or a bare value.
         The LAST argument is the x axis; any earlier ones (and threads:N) split the group into
         sub-groups, e.g. gemm_f32.cuda/cublas/batch:64/n:256 -> sub-group "batch:64", x = n.
         An argument named "bytes" is printed as KiB/MiB/GiB. Sizes are plotted on a log axis.
         An x argument named "layer" (CATEGORICAL_ARGS) is an index into a list, not a size:
         its values are plotted evenly spaced in index order on a linear axis, and tables and
         ticks print each by its runs' label (state.SetLabel; the words all implementations'
         labels share, so a baseline may append what it chose), "layer <index>" without one.

Google Benchmark's own suffixes (real_time, manual_time, process_time, iterations:N, repeats:N,
min_time:..., min_warmup_time:...) are recognised and removed; manual_time marks device time
measured with CUDA events, anything else wall-clock time (the JSON's real_time field is reported).

Values: the "median" aggregate of the repetitions (--benchmark_repetitions with
--benchmark_report_aggregates_only); without aggregates, the median of the individual runs.
Rate counters "flops_per_second" and "bytes_per_second" (gpubatch::bench::set_rates) get table
columns when a group reports them, as does "extra_bytes" (memory beyond inputs and outputs).
A baseline that reports "paired_ratio" (gpubatch::bench::set_paired_ratio: gpubatch time / its
time, median over pairs of back-to-back calls) gets a "paired" ratio column next to the ratio of
the medians, and a dashed line in the ratio plot: on a shared machine it moves far less.
Benchmarks that called SkipWithError (for example "no CUDA device") are listed as not run, with
the message. tests/bench/render_benchmarks_test.py checks the renderer on made-up results.

Usage: render_benchmarks.py --results DIR --plots DIR --output FILE [--no-plots]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

SUBJECT = "gpubatch"
RATE_COUNTERS = {"flops_per_second": "FLOP/s", "bytes_per_second": "B/s"}
# Plain counters in bytes: memory an implementation needs beyond its inputs and outputs.
MEMORY_COUNTERS = {"extra_bytes": "extra memory"}
# A baseline's median, over pairs of back-to-back calls of gpubatch and of it on the same data,
# of gpubatch time / its time (gpubatch::bench::set_paired_ratio).
PAIRED_COUNTER = "paired_ratio"
TIMER_SUFFIXES = {"manual_time": "device time (CUDA events)", "real_time": "wall clock"}
IGNORED_PREFIXES = ("iterations:", "repeats:", "min_time:", "min_warmup_time:", "process_time")
TIME_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# x arguments that index a list (the layers of bench/conv/layers.hpp) rather than measure a size:
# evenly spaced in index order on a linear axis, named by the runs' labels.
CATEGORICAL_ARGS = {"layer"}
# The host's FMA roofline (bench/gemm/host_roofline.cpp): one implementation per element type.
# A host group whose name carries that type gets each implementation's share of it.
HOST_PEAK_GROUP = "fma_peak.host"
# The memory floor of a streaming host GEMM batch (bench/gemm/gemm_host.cpp): an implementation
# that moves the batch's bytes with next to no arithmetic, explained under the tables it is in.
MEMORY_FLOOR = "memory_floor"
ELEMENT_TYPE = re.compile(r"(?:^|_)(f32|f64)(?:_|\.)")


# --------------------------------------------------------------------------------------------
# Parsing

@dataclass(frozen=True)
class ParsedName:
    group: str          # group plus sub-group arguments, e.g. "gemm_f32.cuda [batch:64]"
    impl: str
    x_label: str | None  # None when the benchmark has no argument
    x: float | None
    timer: str


def parse_name(run_name: str) -> ParsedName | None:
    """Splits a run name by the convention above; None when it does not follow it."""
    timer = "wall clock"
    kept: list[str] = []
    threads: list[str] = []
    for token in run_name.split("/"):
        if token in TIMER_SUFFIXES:
            timer = TIMER_SUFFIXES[token]
        elif token.startswith(IGNORED_PREFIXES):
            continue
        elif token.startswith("threads:"):
            threads.append(token)
        else:
            kept.append(token)
    if len(kept) < 2 or not kept[0] or not kept[1]:
        return None
    group, impl, *args = kept
    x_label = x = None
    if args:
        label, _, value = args[-1].rpartition(":")
        try:
            x = float(value)
        except ValueError:
            return None
        x_label = label or "x"
    sub = args[:-1] + threads
    if sub:
        group = f"{group} [{', '.join(sub)}]"
    return ParsedName(group, impl, x_label, x, timer)


@dataclass
class Cell:
    """One implementation at one x: its median time and rates, or why it did not run."""
    time_s: float | None = None
    counters: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass
class Group:
    name: str
    source: str                       # the executable that produced it
    timer: str
    x_label: str | None
    commit: str = "unknown"           # gpubatch_commit of the results file
    impls: list[str] = field(default_factory=list)
    repetitions: int = 1
    cells: dict[tuple[str, float | None], Cell] = field(default_factory=dict)
    names: dict[float, str] = field(default_factory=dict)  # x -> its runs' label

    @property
    def categorical(self) -> bool:
        return self.x_label in CATEGORICAL_ARGS

    def xs(self) -> list[float | None]:
        values = {x for (_, x) in self.cells}
        return sorted(values, key=lambda v: (v is None, v if v is not None else 0.0))

    def x_text(self, x: float | None) -> str:
        """x as tables and ticks print it: a categorical x by its label (else "layer 3")."""
        if self.categorical and x is not None:
            return self.names.get(x) or f"{self.x_label} {x:g}"
        return fmt_x(x, self.x_label)

    def ran(self, impl: str) -> bool:
        return any(c.time_s is not None for (i, _), c in self.cells.items() if i == impl)

    def errors(self, impl: str) -> list[str]:
        return sorted({c.error for (i, _), c in self.cells.items()
                       if i == impl and c.error and c.time_s is None})

    def baselines(self) -> list[str]:
        return [i for i in self.impls if i != SUBJECT]

    def paired(self, baseline: str, x: float | None) -> float | None:
        """The baseline's paired ratio at x (gpubatch / baseline), None when it reports none."""
        cell = self.cells.get((baseline, x))
        return cell.counters.get(PAIRED_COUNTER) if cell and cell.time_s is not None else None

    def paired_baselines(self) -> list[str]:
        """The baselines that report a paired ratio, when gpubatch ran too."""
        if not self.ran(SUBJECT):
            return []
        return [b for b in self.baselines() if any(self.paired(b, x) for x in self.xs())]


@dataclass
class ResultFile:
    path: Path
    executable: str
    machine: str
    context: dict
    groups: list[Group]
    unconventional: list[str]


def _seconds(entry: dict) -> float:
    return float(entry["real_time"]) * TIME_UNIT_SECONDS.get(entry.get("time_unit", "ns"), 1e-9)


def _counters(entry: dict) -> dict[str, float]:
    return {k: float(entry[k]) for k in (*RATE_COUNTERS, *MEMORY_COUNTERS, PAIRED_COUNTER)
            if isinstance(entry.get(k), (int, float))}


def _common_label(by_impl: dict[str, str]) -> str:
    """The words every implementation's label at one x starts with (a baseline may append
    what it chose, e.g. "res2_3x3_64-64 brg:avx512_core"); else gpubatch's label."""
    words = [label.split() for label in by_impl.values()]
    common: list[str] = []
    for column in zip(*words):
        if any(w != column[0] for w in column):
            break
        common.append(column[0])
    return " ".join(common) or by_impl.get(SUBJECT) or next(iter(by_impl.values()))


def read_results(path: Path) -> ResultFile:
    executable, _, machine = path.stem.partition("-")
    data = json.loads(path.read_text())
    commit = str(data.get("context", {}).get("gpubatch_commit") or "unknown")
    groups: dict[str, Group] = {}
    medians: dict[tuple[str, str, float | None], dict] = {}
    runs: dict[tuple[str, str, float | None], list[dict]] = {}
    errors: dict[tuple[str, str, float | None], str] = {}
    labels: dict[tuple[str, float], dict[str, str]] = {}  # (group, x) -> impl -> label
    unconventional: list[str] = []

    for entry in data.get("benchmarks", []):
        run_name = entry.get("run_name", entry.get("name", ""))
        parsed = parse_name(run_name)
        if parsed is None:
            if run_name not in unconventional:
                unconventional.append(run_name)
            continue
        group = groups.get(parsed.group)
        if group is None:
            group = groups[parsed.group] = Group(parsed.group, executable, parsed.timer,
                                                 parsed.x_label, commit)
        if parsed.impl not in group.impls:
            group.impls.append(parsed.impl)
        if parsed.x is not None and entry.get("label"):
            labels.setdefault((parsed.group, parsed.x), {})[parsed.impl] = str(entry["label"])
        if not entry.get("error_occurred"):
            group.repetitions = max(group.repetitions, int(entry.get("repetitions", 1)))
        key = (parsed.group, parsed.impl, parsed.x)
        if entry.get("error_occurred"):
            errors[key] = entry.get("error_message") or "error"
        elif entry.get("run_type") == "aggregate":
            if entry.get("aggregate_name") == "median":
                medians[key] = entry
        else:
            runs.setdefault(key, []).append(entry)

    for key in set(medians) | set(runs) | set(errors):
        group_name, impl, x = key
        cell = Cell()
        if key in medians:
            cell.time_s = _seconds(medians[key])
            cell.counters = _counters(medians[key])
        elif key in runs:
            cell.time_s = statistics.median(_seconds(e) for e in runs[key])
            per_run = [_counters(e) for e in runs[key]]
            names = {n for counters in per_run for n in counters}
            cell.counters = {n: statistics.median(c[n] for c in per_run if n in c)
                             for n in names}
        else:
            cell.error = errors[key]
        groups[group_name].cells[(impl, x)] = cell

    for (group_name, x), by_impl in labels.items():
        groups[group_name].names[x] = _common_label(by_impl)

    # Sorted, so that a document renders the same whatever order a run reported its results in
    # (with random interleaving that order changes from run to run): groups by name, numbers in
    # names by value; the subject first, then the baselines by name.
    for group in groups.values():
        group.impls.sort(key=lambda i: (i != SUBJECT, i))
    ordered = sorted(groups.values(), key=lambda g: _natural_key(g.name))
    return ResultFile(path, executable, machine, data.get("context", {}), ordered, unconventional)


def _natural_key(text: str) -> list:
    """Orders 'batch:32' before 'batch:256': runs of digits compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", text) if part]


# --------------------------------------------------------------------------------------------
# Formatting

def fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_x(x: float | None, label: str | None) -> str:
    if x is None:
        return "-"
    if label == "bytes":
        for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if x >= scale:
                return f"{x / scale:g} {unit}"
        return f"{x:g} B"
    return f"{x:g}"


def fmt_ratio(ratio: float) -> str:
    """Two decimals, or two significant digits below 0.01 (a ratio never prints as 0.00)."""
    return f"{ratio:.2f}" if ratio >= 0.01 else f"{ratio:.2g}"


def fmt_rate(value: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def fmt_bytes(n: float) -> str:
    return fmt_x(n, "bytes")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "group"


def table(header: list[str], rows: list[list[str]], align_right_from: int = 1) -> list[str]:
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---" if i < align_right_from else "---:"
                               for i in range(len(header))) + " |"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


# --------------------------------------------------------------------------------------------
# Plots

def plot_group(group: Group, machine_label: str, path: Path) -> bool:
    """Writes the group's plot to path; False when it has nothing to plot."""
    fig = group_figure(group, machine_label)
    if fig is None:
        return False
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)
    return True


def plot_title(group: Group, machine_label: str) -> str:
    """The suptitle: the machine and the commit measured, as the Machines table names them."""
    return f"{machine_label}, gpubatch commit {group.commit}"


def group_figure(group: Group, machine_label: str):
    """Time per implementation (left) and gpubatch / baseline (right) against x; None when the
    group has fewer than 2 x values or no measurement."""
    xs = [x for x in group.xs() if x is not None]
    if len(xs) < 2 or not any(group.ran(i) for i in group.impls):
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    # A categorical x (a layer index) is drawn at 0, 1, 2, ... in index order; a size at itself.
    position = {x: float(i) for i, x in enumerate(xs)} if group.categorical else {x: x for x in xs}
    has_ratio = group.ran(SUBJECT) and any(group.ran(b) for b in group.baselines())
    width = (11 if has_ratio else 6) + (2 if group.categorical and len(xs) > 8 else 0)
    height = 5 if group.categorical else 4
    fig, axes = plt.subplots(1, 2 if has_ratio else 1, figsize=(width, height), squeeze=False)
    ax = axes[0][0]
    for impl in group.impls:
        points = [(position[x], group.cells[(impl, x)].time_s) for x in xs
                  if (impl, x) in group.cells and group.cells[(impl, x)].time_s is not None]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                    linewidth=2.2 if impl == SUBJECT else 1.4, label=impl)
    ax.set_yscale("log")
    ax.set_ylabel(f"median time [s], {group.timer}")
    ax.set_title(group.name)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    _x_axis(ax, group, xs, position)

    if has_ratio:
        ax = axes[0][1]
        ratios = [1.0]
        for baseline in group.baselines():
            points, color = [], None
            for x in xs:
                s, b = group.cells.get((SUBJECT, x)), group.cells.get((baseline, x))
                if s and b and s.time_s is not None and b.time_s:
                    points.append((position[x], s.time_s / b.time_s))
            if points:
                line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                                label=f"{SUBJECT} / {baseline}")
                color = line.get_color()
                ratios += [p[1] for p in points]
            if baseline in group.paired_baselines():
                points = [(position[x], group.paired(baseline, x)) for x in xs
                          if group.paired(baseline, x)]
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="x",
                        linestyle="--", color=color,
                        label=f"{SUBJECT} / {baseline}, paired")
                ratios += [p[1] for p in points]
        ax.axhline(1.0, color="black", linewidth=0.8)
        if max(ratios) / min(ratios) > 10:  # log only when the ratios span a decade
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_minor_locator(ticker.NullLocator())
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_ylabel("time ratio (below 1: gpubatch faster)")
        ax.set_title(f"{SUBJECT} / baseline")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        _x_axis(ax, group, xs, position)
    fig.suptitle(plot_title(group, machine_label), fontsize=9)
    fig.tight_layout()
    return fig


def _x_base(xs: list[float]) -> int:
    """Base 2 when every x is a power of two (sizes), else 10."""
    return 2 if all(x > 0 and math.log2(x).is_integer() for x in xs) else 10


def _x_axis(ax, group: Group, xs: list[float], position: dict[float, float]) -> None:
    """A categorical x: linear, one tick per value named as the tables name it, rotated. A size:
    log, ticks at the measured values (up to 16) printed as the tables print them."""
    from matplotlib import ticker

    ax.set_xlabel(group.x_label or "x")
    if group.categorical:
        ax.set_xscale("linear")
        ax.set_xlim(-0.5, len(xs) - 0.5)
        ax.set_xticks([position[x] for x in xs])
        ax.set_xticklabels([group.x_text(x) for x in xs], rotation=45, ha="right",
                           rotation_mode="anchor", fontsize=7)
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        return
    ax.set_xscale("log", base=_x_base(xs))
    if len(xs) <= 16:
        ax.set_xticks(xs)
        ax.set_xticklabels([group.x_text(x).replace(" ", "\n") for x in xs], fontsize=8)
        ax.xaxis.set_minor_locator(ticker.NullLocator())


# --------------------------------------------------------------------------------------------
# Markdown

def machine_label(ctx: dict, machine: str) -> str:
    device = ctx.get("cuda_device", "")
    if device and not device.startswith(("none", "unknown")):
        return device
    return ctx.get("cpu_model") or machine


def hardware_lines(ctx: dict) -> list[str]:
    cpu = ctx.get("cpu_model", "unknown CPU")
    cores = ctx.get("num_cpus", "?")
    mhz = ctx.get("mhz_per_cpu")
    if ctx.get("cpu_family_model"):
        cpu += f" ({ctx['cpu_family_model']})"
    lines = [f"- CPU: {cpu}, {cores} logical cores" + (f", {mhz} MHz" if mhz else "")]
    caches = [c for c in ctx.get("caches", []) if c.get("type") in ("Data", "Unified")]
    if caches:
        lines[0] += "; " + ", ".join(
            f"L{c['level']}{'d' if c['type'] == 'Data' else ''} {fmt_bytes(float(c['size']))}"
            + (" per core" if c.get("num_sharing") == 1 else
               f" per {c['num_sharing']} cores" if c.get("num_sharing") else "")
            for c in sorted(caches, key=lambda c: c["level"]))
    if ctx.get("host_vector_isa"):
        lines.append(f"- gpubatch's host kernels compiled for {ctx['host_vector_isa']}")
    device = ctx.get("cuda_device")
    if device and not device.startswith(("none", "unknown")):
        parts = [device]
        if "cuda_compute_capability" in ctx:
            parts.append(f"compute capability {ctx['cuda_compute_capability']}")
        if "cuda_sm_count" in ctx:
            parts.append(f"{ctx['cuda_sm_count']} SMs")
        if "cuda_memory_bytes" in ctx:
            parts.append(f"{fmt_bytes(float(ctx['cuda_memory_bytes']))} memory")
        if "cuda_l2_bytes" in ctx:
            parts.append(f"{fmt_bytes(float(ctx['cuda_l2_bytes']))} L2")
        if "cuda_peak_bandwidth_bytes_per_second" in ctx:
            parts.append(
                f"{fmt_rate(float(ctx['cuda_peak_bandwidth_bytes_per_second']), 'B/s')} peak")
        lines.append("- GPU: " + ", ".join(parts))
        lines.append(f"- CUDA driver {ctx.get('cuda_driver_version', '?')}, "
                     f"runtime {ctx.get('cuda_runtime_version', '?')}")
    else:
        lines.append(f"- GPU: {device or 'not recorded'}")
        if "cuda_runtime_version" in ctx:
            lines.append(f"- CUDA runtime {ctx['cuda_runtime_version']} "
                         "(linked; no usable driver or device)")
    if ctx.get("library_build_type") == "debug":
        lines.append("- Google Benchmark library: a debug build (the distribution's); it adds a "
                     "little per-batch bookkeeping outside the timed code")
    return lines


def host_peaks(groups: list[Group]) -> dict[str, float]:
    """Element type -> the FMA peak FLOP/s measured on this machine, where it was."""
    peaks = {}
    for group in groups:
        if group.name != HOST_PEAK_GROUP:
            continue
        for (impl, _), cell in group.cells.items():
            rate = cell.counters.get("flops_per_second")
            if cell.time_s is not None and rate:
                peaks[impl] = rate
    return peaks


def group_peak(group: Group, peaks: dict[str, float]) -> tuple[str, float] | None:
    """(element type, FMA peak) for a host group of FLOP/s measured where the peak was."""
    match = ELEMENT_TYPE.search(group.name)
    if not match or ".host" not in group.name or match.group(1) not in peaks:
        return None
    if not any("flops_per_second" in cell.counters for cell in group.cells.values()):
        return None
    return match.group(1), peaks[match.group(1)]


def no_ratio_reason(group: Group) -> str | None:
    """Why the group's table has no ratio column; None when it has one."""
    if SUBJECT not in group.impls:
        return f"no {SUBJECT} implementation in this group: no ratio"
    if not group.baselines():
        return "no baseline in this group: no ratio"
    if not group.ran(SUBJECT):
        return f"{SUBJECT} did not run: no ratio"
    if not any(group.ran(b) for b in group.baselines()):
        return "no baseline ran: no ratio"
    return None


def group_section(group: Group, label: str, plot_rel: str | None,
                  peaks: dict[str, float] | None = None) -> list[str]:
    impls = [i for i in group.impls if group.ran(i)]
    peak = group_peak(group, peaks or {})
    ratios = [b for b in group.baselines() if b in impls] if SUBJECT in impls else []
    intro = (f"From `{group.source}`; {group.timer}; median of {group.repetitions} "
             f"repetition{'s' if group.repetitions != 1 else ''}")
    paired = [b for b in group.paired_baselines() if b in ratios]
    if ratios:
        intro += f"; ratio = {SUBJECT} time / baseline time (below 1: {SUBJECT} is faster)"
        if paired:
            intro += ("; paired = the median, over pairs of back-to-back calls of both on the same "
                      "data, of that ratio (median of the repetitions), which a slow spell of a "
                      "shared machine moves far less")
        intro += "."
    if MEMORY_FLOOR in ratios:
        intro += (f" {MEMORY_FLOOR} = c = a b + 1 element by element over the batch's own A, B "
                  "and C, C written with non-temporal stores: the bytes the batch must move, at "
                  f"the memory's pace, so {SUBJECT} / {MEMORY_FLOOR} is {SUBJECT}'s time against "
                  "the memory bandwidth (1.11: 90% of it).")
    if peak:
        intro += (f"{'' if ratios else '.'} Of peak = FLOP/s / this machine's {peak[0]} "
                  f"`{HOST_PEAK_GROUP}` ({fmt_rate(peak[1], 'FLOP/s')}), the most any kernel "
                  "reaches here; measured like the rest, so a run timed while the cores clocked "
                  "higher can show a little over 100%.")
    out = [f"### {group.name}", "", intro if ratios or peak else intro + ".", ""]
    if not ratios:  # said plainly, not left to empty ratio cells
        reason = no_ratio_reason(group) or "no ratio"
        out += [reason[0].upper() + reason[1:] + ".", ""]
    if plot_rel:
        out += [f"![{group.name} on {label}]({plot_rel})", ""]
    rates = [c for c in RATE_COUNTERS
             if any(c in cell.counters for cell in group.cells.values())]
    header = [group.x_label or "x"] + impls + [f"{SUBJECT} / {b}" for b in ratios]
    header += [f"{SUBJECT} / {b}, paired" for b in paired]
    header += [f"{i} {RATE_COUNTERS[c]}" for c in rates for i in impls]
    header += [f"{i} of peak" for i in impls] if peak else []
    memory = [c for c in MEMORY_COUNTERS
              if any(c in cell.counters for cell in group.cells.values())]
    header += [f"{i} {MEMORY_COUNTERS[c]}" for c in memory for i in impls]
    rows = []
    notes: dict[str, int] = {}
    for x in group.xs():
        row = [group.x_text(x)]
        for impl in impls:
            cell = group.cells.get((impl, x))
            if cell is None:
                row.append("-")
            elif cell.time_s is None:
                note = notes.setdefault(cell.error or "error", len(notes) + 1)
                row.append(f"error [{note}]")
            else:
                row.append(fmt_time(cell.time_s))
        for baseline in ratios:
            s, b = group.cells.get((SUBJECT, x)), group.cells.get((baseline, x))
            ok = s and b and s.time_s is not None and b.time_s
            row.append(fmt_ratio(s.time_s / b.time_s) if ok else "-")
        for baseline in paired:
            value = group.paired(baseline, x)
            row.append(fmt_ratio(value) if value else "-")
        for counter in rates:
            for impl in impls:
                cell = group.cells.get((impl, x))
                value = cell.counters.get(counter) if cell else None
                row.append(fmt_rate(value, RATE_COUNTERS[counter]) if value else "-")
        for impl in impls if peak else []:
            cell = group.cells.get((impl, x))
            value = cell.counters.get("flops_per_second") if cell else None
            row.append(f"{100 * value / peak[1]:.0f}%" if value else "-")
        for counter in memory:
            for impl in impls:
                cell = group.cells.get((impl, x))
                value = cell.counters.get(counter) if cell else None
                row.append(fmt_bytes(value) if value is not None else "-")
        rows.append(row)
    out += table(header, rows)
    for message, number in notes.items():
        out.append(f"\n[{number}] {message}")
    for impl in group.impls:
        if not group.ran(impl):
            out.append(f"\n`{impl}` did not run: {'; '.join(group.errors(impl)) or 'no result'}")
    out.append("")
    return out


def render(results_dir: Path, plots_dir: Path, output: Path, plots: bool) -> int:
    files: list[ResultFile] = []
    unreadable: list[str] = []
    for path in sorted(results_dir.glob("*.json")):
        try:
            files.append(read_results(path))
        except (OSError, ValueError, KeyError, TypeError) as e:
            unreadable.append(f"`{path.name}`: {e}")
            print(f"render_benchmarks: cannot read {path}: {e}", file=sys.stderr)

    machines: dict[str, list[ResultFile]] = {}
    for f in files:
        machines.setdefault(f.machine, []).append(f)

    written: set[Path] = set()
    md = ["# Benchmarks", "",
          "<!-- Generated by scripts/bench (scripts/render_benchmarks.py) from "
          "bench/results/*.json; edits are overwritten. -->", "",
          "gpubatch against its baselines, measured in the same executable on the same sizes "
          "and data. Every number is the median of the repetitions (9 with `scripts/bench`, "
          "in random order); the "
          f"ratio columns are {SUBJECT} time / baseline time, so below 1 {SUBJECT} is faster. "
          "Groups ending in `.cuda` run on the GPU backend, `.host` on the host backend. The "
          "host baselines are those a CPU expert would pick: a loop of OpenBLAS calls and "
          "LIBXSMM's JIT kernels for GEMM, oneDNN's primitives and im2col + OpenBLAS for "
          "convolution, and beside them a memory floor for GEMM batches streamed from memory "
          "(`memory_floor`: their bytes moved with next to no arithmetic); each host GEMM and "
          "forward-convolution baseline's result but the floor's is compared with gpubatch's "
          "before it is timed. LIBXSMM's GEMM, the memory floor and oneDNN's convolution "
          "benchmarks (forward and backward) also time back-to-back pairs of calls, gpubatch's and "
          "their own: the `paired` columns, the median ratio over those pairs, are what a "
          "shared machine's slow spells move least. How to "
          "run the benchmarks and add one: [bench/README.md](../bench/README.md).", ""]
    if not files:
        md += ["No results yet: run `scripts/bench`.", ""]

    if machines:
        md += ["## Machines", ""]
        rows = []
        for machine, mfiles in sorted(machines.items()):
            ctx = mfiles[0].context
            label = machine_label(ctx, machine)
            rows.append([f"[{label}](#{_anchor(label)})",
                         ", ".join(f"`{f.path.name}`" for f in mfiles),
                         ", ".join(sorted({f.context.get('date', '?')[:10] for f in mfiles})),
                         ", ".join(sorted({f.context.get('gpubatch_commit', '?')
                                           for f in mfiles}))])
        md += table(["machine", "results", "date", "commit"], rows, align_right_from=99) + [""]

    for machine, mfiles in sorted(machines.items()):
        ctx = mfiles[0].context
        label = machine_label(ctx, machine)
        md += [f"## {label}", ""] + hardware_lines(ctx)
        for f in mfiles:
            # The baseline library's kernel choice decides what a ratio means: record it.
            blas = (f", OpenBLAS kernels for {f.context['openblas_core']}"
                    if "openblas_core" in f.context else "")
            if "libxsmm_target_arch" in f.context:
                blas += (f", LIBXSMM {f.context.get('libxsmm_version', '')} JIT for "
                         f"{f.context['libxsmm_target_arch']}")
            if "onednn_cpu_isa" in f.context:
                blas += (f", oneDNN {f.context.get('onednn_version', '')} on "
                         f"{f.context['onednn_cpu_isa']}")
            for key, name in (("cublas_version", "cuBLAS"), ("cudnn_version", "cuDNN")):
                if key in f.context:
                    blas += f", {name} {f.context[key]}"
            md.append(f"- `{f.path.name}`: {f.context.get('date', 'unknown date')}, "
                      f"commit {f.context.get('gpubatch_commit', 'unknown')}{blas}")
        md.append("")

        groups = [g for f in mfiles for g in f.groups]
        peaks = host_peaks(groups)
        skipped = [g for g in groups if not any(g.ran(i) for i in g.impls)]
        if skipped:
            md += ["### Did not run", "",
                   "These groups produced no measurement on this machine:", ""]
            md += table(["group", "implementations", "why"],
                        [[f"`{g.name}`", ", ".join(g.impls),
                          "; ".join(sorted({e for i in g.impls for e in g.errors(i)}))]
                         for g in skipped], align_right_from=99)
            md.append("")
        for group in groups:
            if group in skipped:
                continue
            plot_rel = None
            if plots:
                png = plots_dir / slug(machine) / f"{slug(group.name)}.png"
                if plot_group(group, label, png):
                    written.add(png.resolve())
                    plot_rel = os.path.relpath(png, output.parent).replace(os.sep, "/")
            md += group_section(group, label, plot_rel, peaks)
        for f in mfiles:
            if f.unconventional:
                md += [f"Not rendered from `{f.path.name}` (names do not follow "
                       "`<group>/<impl>/<args>`): " +
                       ", ".join(f"`{n}`" for n in f.unconventional), ""]

    if unreadable:
        md += ["## Unreadable results", ""] + [f"- {u}" for u in unreadable] + [""]

    if plots and plots_dir.exists():  # plots of groups or machines that no longer exist
        for png in plots_dir.rglob("*.png"):
            if png.resolve() not in written:
                png.unlink()
        for d in sorted((p for p in plots_dir.rglob("*") if p.is_dir()), reverse=True):
            if not any(d.iterdir()):
                d.rmdir()

    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(md).rstrip() + "\n")
    print(f"render_benchmarks: wrote {output} ({len(files)} results files, "
          f"{len(written)} plots)")
    return 0


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--results", type=Path, default=Path("bench/results"))
    parser.add_argument("--plots", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--output", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--no-plots", action="store_true",
                        help="tables only (when matplotlib is unavailable)")
    args = parser.parse_args()
    return render(args.results, args.plots, args.output, plots=not args.no_plots)


if __name__ == "__main__":
    sys.exit(main())
