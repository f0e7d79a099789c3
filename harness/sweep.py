"""What to run: the sweep axes of a suite and the single points they expand to.

`Sweep` holds the axes as a suite file states them; `Sweep.points()` is their cartesian product.
A `Point` is one (problem, direction, op, precision, result precision, layout, backend,
algorithm, workspace limit, thread count) with the timing options that apply to it. Both are
frozen: they describe work, never results.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product

from harness import epilogue, families, setup_budget
from harness import precision as precision_table
from harness.problem import ConvProblem
from harness.rnn.problem import RnnProblem
from harness.threads import ALL as ALL_THREADS

DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
# A recurrent layer's forward pass as training runs it (autograd state kept; cuDNN's
# ForwardTraining, which writes the reserve space backward reads): recurrent layers only.
TRAINING_FORWARD = "fwd_train"
# One whole training step of a recurrent layer as one timed call: the training forward, then
# both gradients (data and weights) in one backward pass. Its own direction because the
# separate passes do not add up to a step: cuDNN's weight pass needs its data pass first, and
# PyTorch's gradient of the weights alone runs that data pass too (the sum counted it twice).
TRAINING_STEP = "train_step"
RECURRENT_ONLY = (TRAINING_FORWARD, TRAINING_STEP)
RNN_DIRECTIONS = ("fwd", TRAINING_FORWARD, "bwd_data", "bwd_filter", TRAINING_STEP)
ALL_DIRECTIONS = RNN_DIRECTIONS     # every direction a suite may ask, in display order
PRECISIONS = precision_table.NAMES
# A result precision, or "auto": each precision's own (precision.output_precision).
OUTPUTS = (precision_table.AUTO_OUTPUT, *PRECISIONS)
LAYOUTS = ("NCHW", "NHWC")
TIMING_MODES = ("warm", "cold")
# How warm GPU points are timed: "graph" replays a CUDA graph of the calls (kernel time, what
# CUDA-graph users get); "stream" queues them in stream order behind a hold (adds the ~1 us
# the GPU spends between stream-ordered kernels, what eager frameworks get).
GPU_TIMERS = ("graph", "stream")

# Each worker process holds its own CUDA context and buffers on the one GPU.
MAX_GPU_PROCESSES = 8

UNLIMITED = None  # a workspace limit of None means "no limit"


@dataclass(frozen=True)
class TimingOptions:
    """How hard to try for each point (shared/design/measurement.md)."""
    mode: str = "warm"            # "warm": back-to-back on the same buffers; "cold": L2 flushed
    budget_ms: float = 200.0      # wall-clock budget for the timed repetitions of one point
    min_samples: int = 5          # never stop with fewer samples than this
    max_samples: int = 1000
    # stop once the relative standard error of the median is below this
    noise_target: float = 0.01
    warmup: int = 1               # untimed runs after verification, before timing
    gpu_timer: str = "graph"      # GPU_TIMERS; cold points always use the stream
    # A GPU point's time can depend on the process it runs in (where its buffers land in memory:
    # one cuDNN point read 62 us in one process and 69 us in every fresh one, each tight), so
    # its samples are shared among this many worker processes; a row then carries that spread
    # and `convbench compare` can tell it from a regression (harness/process_split.py).
    gpu_processes: int = 2
    # A CPU point's samples are taken in this many rounds over the points that share its test
    # data, each round preparing it afresh (new buffers): the rounds' medians are replicates
    # inside one run, from which `convbench compare` takes the run-to-run noise floor that a
    # regression in the run being judged cannot raise (harness/compare/__init__.py).
    cpu_rounds: int = 2
    # Race a point's candidates (the graph API's plans; on a GPU also a backend's algorithms):
    # one whose first samples are all over the fastest so far by harness/stopping.RACE_MARGIN is
    # not timed in full (harness/race.py).
    race: bool = True
    # Prepare a GPU point's finalists once more in each timing process and time them again
    # before its answer is given: where buffers land moves a ~10 us kernel by up to 8%
    # (harness/runoff.py).
    runoff: bool = True
    # Measure only the first this-many candidates an expanding algorithm names for a point (the
    # graph API's plans, in the heuristics' order: mode A's ranking first), as PyTorch's
    # torch.backends.cudnn.benchmark_limit caps its search; None: every one. Each plan costs its
    # build: a runtime-compiled fp8 or int8 plan 0.4 s (median), up to 3.2 s, on an H100
    # (evidence/logs/gpu-test-rows-*.csv.gz), so a sweep of such points is mostly plan builds.
    plan_limit: int | None = None
    # The longest run-time kernel build a row waits for (cuDNN's PERSIST_DYNAMIC RNN,
    # harness/setup_budget.py); a longer one leaves the row not_tried, naming it.
    build_budget_s: float = setup_budget.RNN_BUILD_BUDGET_S
    # Set by harness/runoff.py, never by a user: a fresh preparation of a pick whose first
    # measurement found that replaying the library's own capture runs its eager kernels
    # (gpu_timer cuda_graph; point_timing.time_gpu), so it is timed by replay alone.
    replay_checked: bool = False
    # Set per plan by harness/race.py, never by a user: the bar (ms per launch) of that race.
    race_bar_ms: float | None = None
    # Set by the graph timer for its replays, never by a user: the race may end after the first
    # sample (harness/stopping.REPLAY_FIRST_FACTOR).
    race_first_replay: bool = False
    # Set by harness/process_split.py, never by a user: which of a point's replicates (GPU timing
    # processes, CPU rounds) this is. The first also asks a library for its own picks (cuDNN's
    # heuristic and Find: the policy columns, which the merged row takes from the first); a
    # later one only verifies (or takes the first's verdict) and times.
    replicate: int = 0


@dataclass(frozen=True)
class Point:
    problem: ConvProblem | RnnProblem     # harness/families.py
    direction: str
    precision: str
    layout: str
    backend: str
    algorithm: str
    workspace_limit: int | None = UNLIMITED
    timing: TimingOptions = field(default_factory=TimingOptions)
    threads: int = ALL_THREADS    # CPU points: threads the libraries may use (harness.threads)
    op: str = epilogue.CONV       # what follows the convolution (harness.epilogue; fwd only)
    # The precision the result is written in where it is not the precision's own (fp8 forward
    # into bf16, fp32 or fp8, int8 into int8: precision.offered_outputs); None: its own.
    output: str | None = None

    def __post_init__(self) -> None:
        if self.output is not None and self.output not in precision_table.offered_outputs(
                self.precision, self.direction)[1:]:
            raise ValueError(f"{self.precision} {self.direction} cannot be asked for an "
                             f"{self.output} result (Sweep.precisions_of names those it can)")

    @property
    def point_id(self) -> str:
        """Identity of a point within a run, stored as a column; used to resume and to match rows
        across runs. Built from every field that changes what is measured."""
        p = self.problem
        shape = p.shape_id()
        limit = "inf" if self.workspace_limit is None else str(self.workspace_limit)
        timing = self.timing.mode
        if self.timing.gpu_timer != "graph":      # default ids stay as they always were
            timing += f"+{self.timing.gpu_timer}"
        if self.threads != ALL_THREADS:
            timing += f"+t{self.threads}"
        direction = epilogue.labelled(self.direction, self.op)
        precision = self.precision if self.output is None else f"{self.precision}>{self.output}"
        return "|".join((p.name, shape, direction, precision, self.layout, self.backend,
                         self.algorithm, limit, timing))

    @property
    def result_precision(self) -> str | None:
        """The precision the result is written in (None: the direction does not exist at this
        precision, int8 backward)."""
        return precision_table.output_precision(self.precision, self.direction, self.output)

    @property
    def result_scale(self) -> float:
        """The power of two the result is multiplied by before it is rounded (1 unless it is
        written in an 8-bit type: precision.output_scale), on the device and in the check."""
        return precision_table.output_scale(self.precision, self.result_precision,
                                            self.problem.reduction_length(self.direction))


@dataclass(frozen=True)
class AlgorithmChoice:
    """A backend and the algorithms to run on it; an empty tuple means all of the backend's.
    An optional backend is dropped (with a note naming why) where it is unavailable, which is how
    the default suite uses the GPU when there is one and the CPU alone otherwise."""
    backend: str
    algorithms: tuple[str, ...] = ()
    optional: bool = False


@dataclass(frozen=True)
class Sweep:
    name: str
    problems: tuple[ConvProblem | RnnProblem, ...]   # harness/families.py
    directions: tuple[str, ...] = ("fwd",)
    precisions: tuple[str, ...] = ("fp32",)
    layouts: tuple[str, ...] = ("NCHW",)
    backends: tuple[AlgorithmChoice, ...] = (AlgorithmChoice("cpu"),)
    workspace_limits: tuple[int | None, ...] = (UNLIMITED,)
    timing: TimingOptions = field(default_factory=TimingOptions)
    threads: tuple[int, ...] = (ALL_THREADS,)
    ops: tuple[str, ...] = (epilogue.CONV,)
    outputs: tuple[str, ...] = (precision_table.AUTO_OUTPUT,)
    regression_threshold: float = 0.05   # fractional slowdown that `compare` calls practical
    # (precision, layout) pairs to sweep, where not every pair is wanted (the GPU default runs
    # each precision in the layout frameworks use for it: harness/cli/gpu_default.py); empty:
    # every precision in every layout
    precision_layouts: tuple[tuple[str, str], ...] = ()

    def points(self, algorithms_of) -> Iterator[Point]:
        """Expand the axes. `algorithms_of(backend_name)` lists a backend's algorithm names and is
        used where a backend entry names none."""
        for choice in self.backends:
            names = choice.algorithms or tuple(algorithms_of(choice.backend))
            # limits innermost: points that differ only in their limit are adjacent and
            # measured as one group (runner.groups)
            for problem, direction in product(self.problems, self.directions):
                recurrent = problem.kind == families.RNN
                if direction in RECURRENT_ONLY and not recurrent:
                    continue      # a convolution's training forward pass is its fwd
                for op, (precision, output), layout, algorithm, threads, limit in product(
                        (epilogue.CONV,) if recurrent else self.ops_of(direction),
                        self.precisions_of(direction),
                        (families.RNN_LAYOUT,) if recurrent else self.layouts,
                        names, self.threads, self.workspace_limits):
                    if self.precision_layouts and not recurrent and (
                            precision, layout) not in self.precision_layouts:
                        continue
                    yield Point(problem, direction, precision, layout, choice.backend, algorithm,
                                limit, self.timing, threads, op, output)

    def ops_of(self, direction: str) -> tuple[str, ...]:
        """The ops swept in a direction: each asked op where it exists (epilogue.applies_to),
        plain convolution in its place where not, so a direction is never dropped."""
        return tuple(dict.fromkeys(op if epilogue.applies_to(op, direction) else epilogue.CONV
                                   for op in self.ops))

    def unoffered_outputs(self) -> list[str]:
        """Asked outputs that no asked precision offers in any asked direction (a mistake: the
        axis would silently change nothing, e.g. fp32 asked of an fp16-only sweep)."""
        offered = {o for p in self.precisions for d in self.directions
                   for o in precision_table.offered_outputs(p, d)}     # own types: as auto
        return [o for o in self.outputs if o != precision_table.AUTO_OUTPUT and o not in offered]

    def precisions_of(self, direction: str) -> tuple[tuple[str, str | None], ...]:
        """(precision, output) pairs swept in a direction: each asked output where the precision
        offers it (precision.offered_outputs), its own result type (None) for "auto", for the
        one it already is, and in place of outputs it does not offer, so a precision is never
        dropped and one result type is never two points."""
        pairs = []
        for precision in self.precisions:
            offered = precision_table.offered_outputs(precision, direction)
            for output in self.outputs:
                own = output == precision_table.AUTO_OUTPUT or output not in offered[1:]
                pairs.append((precision, None if own else output))
        return tuple(dict.fromkeys(pairs))
