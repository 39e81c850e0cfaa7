"""scripts/render_benchmarks.py on made-up Google Benchmark JSON.

Checked: a categorical x (the conv benchmarks' layer:<index>) is printed by its runs' labels
(the words they share, where a baseline appends what it chose) in index order, in tables and as
the plot's evenly spaced, linear x axis; a size x keeps its log axis and its printed values;
every figure's suptitle names the machine and the commit; a group with no baseline, with no
gpubatch, or whose baseline called SkipWithError gets no ratio column and says why; ratios are
gpubatch time / baseline time, and a baseline's paired_ratio counter gets a column and a dashed
line of its own; a host group's FLOP/s get their share of the machine's FMA peak of the same
element type, where one was measured; the hardware lines name the core, its caches and the host
kernels' instruction set; the document is the same whatever order the results were reported
in. The plot checks need matplotlib; "tables" leaves them out.

Usage: python3 render_benchmarks_test.py <path of render_benchmarks.py> [tables|all]
"""

import importlib.util
import json
import sys
import tempfile
import unittest
import warnings
from pathlib import Path

SCRIPT = Path(sys.argv[1]) if len(sys.argv) > 1 else \
    Path(__file__).resolve().parents[2] / "scripts" / "render_benchmarks.py"
WHICH = sys.argv[2] if len(sys.argv) > 2 else "all"

spec = importlib.util.spec_from_file_location("render_benchmarks", SCRIPT)
rb = importlib.util.module_from_spec(spec)
sys.modules["render_benchmarks"] = rb  # dataclasses look their module up while decorating
spec.loader.exec_module(rb)

COMMIT = "0a1b2c3+dirty"
GPU = "NVIDIA H100 80GB HBM3"
LAYERS = {0: "conv1_7x7s2_3-64", 1: "res2_1x1_64-64", 2: "res2_3x3_64-64",
          10: "res4_1x1_256-1024"}  # 10 sorts after 2 numerically, before it as text


def run(name, seconds, label=None, error=None, **counters):
    """One median aggregate as Google Benchmark writes it (time in microseconds)."""
    entry = {"name": name + "_median", "run_name": name, "run_type": "aggregate",
             "aggregate_name": "median", "repetitions": 3, "real_time": seconds * 1e6,
             "time_unit": "us", **counters}
    if label is not None:
        entry["label"] = label
    if error is not None:
        entry = {"name": name, "run_name": name, "run_type": "iteration", "error_occurred": True,
                 "error_message": error, "real_time": 0, "time_unit": "us"}
    return entry


def results():
    conv, gemm = [], []
    for index, layer in LAYERS.items():
        ours = run(f"conv2d_f16_nhwc.cuda/gpubatch/batch:32/layer:{index}/manual_time",
                   1e-3 * (index + 1), layer)
        if index == 2:  # a failed baseline run carries no label
            theirs = run(f"conv2d_f16_nhwc.cuda/cudnn/batch:32/layer:{index}/manual_time", 0,
                         error="cuDNN found no forward algorithm for this layer")
        else:  # a baseline may append what it chose to the layer's name, and come first
            theirs = run(f"conv2d_f16_nhwc.cuda/cudnn/batch:32/layer:{index}/manual_time",
                         4e-3 * (index + 1), layer + (" implicit_gemm" if index == 0 else ""))
        conv += [theirs, ours] if index == 0 else [ours, theirs]
        conv.append(run(f"conv2d_alone_f16_nhwc.cuda/gpubatch/layer:{index}/manual_time",
                        2e-3, layer))
        conv.append(run(f"conv2d_skipped_f16_nhwc.cuda/gpubatch/layer:{index}/manual_time",
                        3e-3, layer))
        conv.append(run(f"conv2d_skipped_f16_nhwc.cuda/cudnn/layer:{index}/manual_time", 0,
                        error="no CUDA device"))
    for n in (4, 16, 64):
        gemm.append(run(f"gemm_f32.cuda/gpubatch/n:{n}/manual_time", 2e-6 * n))
        gemm.append(run(f"gemm_f32.cuda/cublas/n:{n}/manual_time", 1e-6 * n))
        gemm.append(run(f"fma_peak.cuda/f32/n:{n}/manual_time", 1e-6 * n))
        # LIBXSMM pairs its calls with gpubatch's (paired_ratio), but not at n = 64; OpenBLAS
        # never does.
        gemm.append(run(f"gemm_f64.host/gpubatch/n:{n}/real_time", 3e-6 * n,
                        flops_per_second=n * 1e9))
        paired = {"paired_ratio": 0.5 + n / 100} if n != 64 else {}
        gemm.append(run(f"gemm_f64.host/libxsmm/n:{n}/real_time", 2e-6 * n, **paired,
                        flops_per_second=1.5 * n * 1e9))
        gemm.append(run(f"gemm_f64.host/openblas/n:{n}/real_time", 6e-6 * n))
        gemm.append(run(f"gemm_f32.host/gpubatch/n:{n}/real_time", 1e-6 * n,
                        flops_per_second=n * 1e9))
        if n != 64:  # the memory floor of the streaming batches that can be bound by memory
            gemm.append(run(f"gemm_f32.host/memory_floor/n:{n}/real_time", 0.8e-6 * n,
                            paired_ratio=1.2))
    # The host's FMA peak, f64 only: f32 host groups get no share of a peak.
    gemm.append(run("fma_peak.host/f64/real_time", 1e-4, flops_per_second=128e9))
    context = {"gpubatch_commit": COMMIT, "cpu_model": "Some CPU", "cuda_device": GPU,
               "date": "2026-01-01T00:00:00", "cpu_family_model": "family 25 model 17",
               "host_vector_isa": "AVX-512",
               "caches": [{"type": "Data", "level": 1, "size": 32768, "num_sharing": 1},
                          {"type": "Instruction", "level": 1, "size": 32768, "num_sharing": 1},
                          {"type": "Unified", "level": 2, "size": 1048576, "num_sharing": 1},
                          {"type": "Unified", "level": 3, "size": 33554432, "num_sharing": 2}]}
    return {"bench_conv_cuda-h100.json": {"context": context, "benchmarks": conv},
            "bench_gemm_cuda-h100.json": {"context": context, "benchmarks": gemm}}


def cells(row):
    """The cells of a markdown table row."""
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


class Fixture(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)
        (self.root / "results").mkdir()
        for name, data in results().items():
            (self.root / "results" / name).write_text(json.dumps(data))
        self.groups = {g.name: g for name in sorted(results())
                       for g in rb.read_results(self.root / "results" / name).groups}

    def tearDown(self):
        self.dir.cleanup()

    def render(self, plots):
        rb.render(self.root / "results", self.root / "plots", self.root / "out.md", plots=plots)
        return (self.root / "out.md").read_text()

    def section(self, markdown, group):
        """The lines of one group's section."""
        start = markdown.index(f"### {group}\n")
        end = markdown.find("\n### ", start + 1)
        return markdown[start:end if end >= 0 else None].splitlines()


class Tables(Fixture):
    def test_categorical_x_prints_layer_names_in_index_order(self):
        group = self.groups["conv2d_f16_nhwc.cuda [batch:32]"]
        self.assertTrue(group.categorical)
        rows = [cells(line) for line in self.section(self.render(False), group.name)
                if line.startswith("| ")]
        self.assertEqual(rows[0], ["layer", "gpubatch", "cudnn", "gpubatch / cudnn"])
        self.assertEqual([row[0] for row in rows[2:]], list(LAYERS.values()))
        self.assertEqual(rows[2][1:], ["1 ms", "4 ms", "0.25"])
        self.assertEqual(rows[4][1:], ["3 ms", "error [1]", "-"])

    def test_unlabelled_categorical_x_names_its_index(self):
        group = self.groups["conv2d_f16_nhwc.cuda [batch:32]"]
        group.names.pop(10.0)
        self.assertEqual(group.x_text(10.0), "layer 10")

    def test_size_x_keeps_its_values(self):
        group = self.groups["gemm_f32.cuda"]
        self.assertFalse(group.categorical)
        self.assertEqual([group.x_text(x) for x in group.xs()], ["4", "16", "64"])
        lines = self.section(self.render(False), group.name)
        self.assertIn("| 16 | 32 µs | 16 µs | 2.00 |", lines)

    def test_ratio_far_below_one_keeps_two_significant_digits(self):
        self.assertEqual(rb.fmt_ratio(2.0), "2.00")
        self.assertEqual(rb.fmt_ratio(0.0123), "0.01")
        self.assertEqual(rb.fmt_ratio(0.00287), "0.0029")
        self.assertEqual(rb.fmt_ratio(0.0012), "0.0012")

    def test_document_does_not_depend_on_the_order_results_were_reported_in(self):
        # With random interleaving Google Benchmark reports each run's results in a new order.
        first = self.render(False)
        for name, data in results().items():
            data["benchmarks"].reverse()
            (self.root / "results" / name).write_text(json.dumps(data))
        self.assertEqual(self.render(False), first)
        headings = [line for line in first.splitlines() if line.startswith("### ")]
        self.assertLess(headings.index("### conv2d_alone_f16_nhwc.cuda"),
                        headings.index("### conv2d_f16_nhwc.cuda [batch:32]"))

    def test_paired_ratio_gets_a_column_of_its_own_beside_the_ratio_of_medians(self):
        lines = self.section(self.render(False), "gemm_f64.host")
        self.assertTrue(any("paired = the median, over pairs of back-to-back calls" in line
                            for line in lines))
        header = next(line for line in lines if line.startswith("| n |"))
        self.assertEqual(cells(header)[:6], ["n", "gpubatch", "libxsmm", "openblas",
                                             "gpubatch / libxsmm", "gpubatch / openblas"])
        self.assertEqual(cells(header)[6], "gpubatch / libxsmm, paired")
        self.assertNotIn("gpubatch / openblas, paired", cells(header))
        rows = [line for line in lines if line.startswith("| 16 |") or line.startswith("| 64 |")]
        self.assertEqual([cells(row)[:7] for row in rows],
                         [["16", "48 µs", "32 µs", "96 µs", "1.50", "0.50", "0.66"],
                          ["64", "192 µs", "128 µs", "384 µs", "1.50", "0.50", "-"]])

    def test_host_flops_get_their_share_of_the_machines_fma_peak_of_that_type(self):
        lines = self.section(self.render(False), "gemm_f64.host")
        self.assertTrue(any("Of peak = FLOP/s / this machine's f64 `fma_peak.host` "
                            "(128 GFLOP/s)" in line for line in lines))
        header = cells(next(line for line in lines if line.startswith("| n |")))
        self.assertEqual(header[-3:], ["gpubatch of peak", "libxsmm of peak",
                                       "openblas of peak"])
        row = cells(next(line for line in lines if line.startswith("| 64 |")))
        self.assertEqual(row[-3:], ["50%", "75%", "-"])  # OpenBLAS reported no FLOP/s

    def test_memory_floor_is_explained_and_paired_like_a_baseline(self):
        lines = self.section(self.render(False), "gemm_f32.host")
        self.assertTrue(any("memory_floor = c = a b + 1 element by element" in line and
                            "(1.11: 90% of it)" in line for line in lines))
        header = cells(next(line for line in lines if line.startswith("| n |")))
        self.assertEqual(header[:5], ["n", "gpubatch", "memory_floor", "gpubatch / memory_floor",
                                      "gpubatch / memory_floor, paired"])
        rows = [cells(line)[:5] for line in lines
                if line.startswith("| 16 |") or line.startswith("| 64 |")]
        self.assertEqual(rows, [["16", "16 µs", "12.8 µs", "1.25", "1.20"],
                                ["64", "64 µs", "-", "-", "-"]])

    def test_no_share_of_a_peak_without_that_types_peak_or_on_a_gpu(self):
        markdown = self.render(False)
        for group in ("gemm_f32.host", "gemm_f32.cuda"):
            lines = self.section(markdown, group)
            self.assertFalse(any("of peak" in line for line in lines), group)

    def test_hardware_lines_name_the_core_its_caches_and_the_host_isa(self):
        markdown = self.render(False)
        self.assertIn("- CPU: Some CPU (family 25 model 17), ? logical cores; L1d 32 KiB per "
                      "core, L2 1 MiB per core, L3 32 MiB per 2 cores", markdown)
        self.assertIn("- gpubatch's host kernels compiled for AVX-512", markdown)

    def test_group_without_paired_ratio_has_no_paired_column(self):
        lines = self.section(self.render(False), "gemm_f32.cuda")
        self.assertFalse(any("paired" in line for line in lines))

    def test_group_without_baseline_says_so(self):
        lines = self.section(self.render(False), "conv2d_alone_f16_nhwc.cuda")
        self.assertIn("No baseline in this group: no ratio.", lines)
        self.assertEqual(lines[lines.index("| layer | gpubatch |") + 2],
                         "| conv1_7x7s2_3-64 | 2 ms |")
        self.assertFalse(any(" / " in line for line in lines if line.startswith("|")))
        self.assertFalse(any("ratio =" in line for line in lines))

    def test_group_without_gpubatch_says_so(self):
        lines = self.section(self.render(False), "fma_peak.cuda")
        self.assertIn("No gpubatch implementation in this group: no ratio.", lines)
        self.assertIn("| n | f32 |", lines)
        self.assertIn("| 16 | 16 µs |", lines)

    def test_skipped_baseline_shows_its_message_and_no_ratio(self):
        lines = self.section(self.render(False), "conv2d_skipped_f16_nhwc.cuda")
        self.assertIn("No baseline ran: no ratio.", lines)
        self.assertIn("`cudnn` did not run: no CUDA device", lines)
        self.assertIn("| layer | gpubatch |", lines)


class Plots(Fixture):
    def figure(self, name):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a matplotlib warning fails the test
            fig = rb.group_figure(self.groups[name], GPU)
        if fig is not None:
            import matplotlib.pyplot as plt
            self.addCleanup(plt.close, fig)
        return fig

    def test_categorical_axis_is_linear_and_named_by_layer(self):
        fig = self.figure("conv2d_f16_nhwc.cuda [batch:32]")
        self.assertEqual(len(fig.axes), 2)  # times and ratios
        for ax in fig.axes:
            self.assertEqual(ax.get_xscale(), "linear")
            self.assertEqual(list(ax.get_xticks()), [0.0, 1.0, 2.0, 3.0])
            labels = ax.get_xticklabels()
            self.assertEqual([t.get_text() for t in labels], list(LAYERS.values()))
            self.assertTrue(all(t.get_rotation() > 0 for t in labels))
        gpubatch = fig.axes[0].get_lines()[0]
        self.assertEqual(list(gpubatch.get_xdata()), [0.0, 1.0, 2.0, 3.0])

    def test_size_axis_stays_log(self):
        fig = self.figure("gemm_f32.cuda")
        self.assertEqual([ax.get_xscale() for ax in fig.axes], ["log", "log"])
        self.assertEqual([t.get_text() for t in fig.axes[0].get_xticklabels()], ["4", "16", "64"])

    def test_every_figure_names_machine_and_commit(self):
        markdown = self.render(True)
        pngs = sorted((self.root / "plots").rglob("*.png"))
        # Every group but the host's one-point FMA peak has 2 or more x values and a measurement.
        self.assertEqual(len(pngs), 7)
        self.assertEqual(markdown.count("![", 0), 7)
        for name in self.groups:
            if name == "fma_peak.host":
                self.assertIsNone(self.figure(name))
                continue
            fig = self.figure(name)
            self.assertIsNotNone(fig, name)
            title = " ".join(t.get_text() for t in fig.texts)  # the suptitle is a figure text
            self.assertIn(GPU, title)
            self.assertIn(COMMIT, title)

    def test_paired_ratio_is_a_dashed_line_in_its_baselines_colour(self):
        lines = {line.get_label(): line for line in self.figure("gemm_f64.host").axes[1].get_lines()}
        solid, dashed = lines["gpubatch / libxsmm"], lines["gpubatch / libxsmm, paired"]
        self.assertEqual(dashed.get_linestyle(), "--")
        self.assertEqual(dashed.get_color(), solid.get_color())
        self.assertEqual(list(dashed.get_ydata()), [0.54, 0.66])  # none at n = 64
        self.assertNotIn("gpubatch / openblas, paired", lines)

    def test_no_ratio_panel_without_a_baseline_that_ran(self):
        self.assertEqual(len(self.figure("conv2d_alone_f16_nhwc.cuda").axes), 1)
        self.assertEqual(len(self.figure("conv2d_skipped_f16_nhwc.cuda").axes), 1)


if __name__ == "__main__":
    suites = [Tables] + ([Plots] if WHICH == "all" else [])
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(s) for s in suites)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
