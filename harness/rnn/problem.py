"""A recurrent layer problem (issue 40): LSTM / GRU / plain RNN, as cuDNN's RNN API and PyTorch's
nn.LSTM / nn.GRU / nn.RNN describe it. Its own family beside ConvProblem, not a subclass: none
of a convolution's fields mean anything here.

Shapes follow PyTorch with batch_first=False: input (seq_len, batch, input_size); the output
(seq_len, batch, directions x out_size), out_size the projection size of an LSTM with one, else
the hidden size; initial and final states (layers x directions, batch, out_size) and, for an
LSTM, cell states (layers x directions, batch, hidden_size). `lengths` gives each sequence its
own length (padded, right-aligned as PyTorch's packed sequences and cuDNN's unpacked layout
take them); None: every sequence is seq_len long.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import ClassVar

CELLS = ("lstm", "gru", "rnn_tanh", "rnn_relu")
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


class RnnProblemError(ValueError):
    """An impossible recurrent shape; the message names the value."""


@dataclass(frozen=True)
class RnnProblem:
    kind: ClassVar[str] = "rnn"        # harness/families.py: which oracle checks its outputs
    is_3d: ClassVar[bool] = False      # what conv-only rules ask of every problem
    cell: str
    input_size: int
    hidden_size: int
    seq_len: int
    batch: int
    layers: int = 1
    bidirectional: bool = False
    proj_size: int = 0               # LSTM only: 0 = no projection
    bias: bool = True
    lengths: tuple[int, ...] | None = None
    name: str = ""
    multiplicity: int = 1

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise RnnProblemError(f"cell {self.cell!r}: one of {', '.join(CELLS)}")
        for field in ("input_size", "hidden_size", "seq_len", "batch", "layers", "multiplicity"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise RnnProblemError(f"{field} {value!r}: a whole number of at least 1")
        if self.proj_size and self.cell != "lstm":
            raise RnnProblemError(f"proj_size {self.proj_size}: only an LSTM has a projection")
        if self.proj_size < 0 or self.proj_size >= self.hidden_size:
            raise RnnProblemError(f"proj_size {self.proj_size}: from 1 to hidden_size - 1 "
                                  f"({self.hidden_size - 1}), or 0 for none")
        if self.lengths is not None:
            if len(self.lengths) != self.batch:
                raise RnnProblemError(f"lengths {list(self.lengths)}: one per sequence of the "
                                      f"batch ({self.batch})")
            bad = [n for n in self.lengths if not 1 <= n <= self.seq_len]
            if bad:
                raise RnnProblemError(f"length {bad[0]}: from 1 to seq_len ({self.seq_len})")

    @property
    def gates(self) -> int:
        return GATES[self.cell]

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def out_size(self) -> int:
        """What a layer outputs per direction and feeds back: the projection, else the state."""
        return self.proj_size or self.hidden_size

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.directions * self.out_size

    def weight_shapes(self, layer: int) -> dict[str, tuple[int, ...]]:
        """One layer and direction's weights, in PyTorch's (and cuDNN's) gate order."""
        rows = self.gates * self.hidden_size
        shapes = {"W": (rows, self.layer_input_size(layer)), "R": (rows, self.out_size)}
        if self.bias:
            shapes.update(bW=(rows,), bR=(rows,))
        if self.proj_size:
            shapes["P"] = (self.proj_size, self.hidden_size)
        return shapes

    def weight_keys(self) -> list[tuple[int, int, str]]:
        """(layer, direction, name) of every weight, in the order a bwd_filter result lists
        their gradients (harness/rnn/oracle.py) and backends hand theirs over."""
        return [(layer, d, name) for layer in range(self.layers)
                for d in range(self.directions) for name in self.weight_shapes(layer)]

    def steps(self) -> int:
        """Cell steps actually run: every valid (sequence, time) pair, per layer and direction."""
        valid = sum(self.lengths) if self.lengths is not None else self.batch * self.seq_len
        return valid * self.layers * self.directions

    def forward_flops(self) -> int:
        """Multiply-adds x 2 of the GEMMs (the elementwise part is left out, as for convolutions'
        epilogues): per valid step and layer, the input and recurrent GEMMs and the projection."""
        total = 0
        valid = sum(self.lengths) if self.lengths is not None else self.batch * self.seq_len
        for layer in range(self.layers):
            per_step = self.gates * self.hidden_size * (self.layer_input_size(layer)
                                                        + self.out_size)
            per_step += self.proj_size * self.hidden_size
            total += 2 * valid * per_step * self.directions
        return total

    # ---- what every problem family answers (harness/families.py) ----------------------------
    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.seq_len, self.batch, self.input_size)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.seq_len, self.batch, self.directions * self.out_size)

    @property
    def flops(self) -> int:
        """The forward GEMMs' count; the backward directions do the same GEMMs transposed (dx
        and dh; dW and dR), so one count serves all of them, as for convolutions."""
        return self.forward_flops()

    @property
    def flops_no_padding(self) -> int:
        return self.flops              # padded steps are not counted (steps())

    def flops_of(self, direction: str) -> int:
        """One call's FLOPs: a training step runs the forward GEMMs and both backward ones."""
        return self.flops * (3 if direction == "train_step" else 1)

    def kinked(self, direction: str) -> bool:
        """Whether a direction's result jumps where an input crosses a kink: the gradients of a
        ReLU recurrence (a unit's derivative is 0 or 1, decided by its rounded pre-activation;
        precision.tolerance's _KINK_UNITS). Its forward pass is continuous; tanh, sigmoid are
        smooth."""
        return self.cell == "rnn_relu" and direction in ("bwd_data", "bwd_filter", "train_step")

    @property
    def chain(self) -> int:
        """Steps that each store a state the next reads, one after another: every step of every
        layer (precision.tolerance's `chain`; reduction_length's random walk)."""
        return self.seq_len * self.layers

    def reduction_length(self, direction: str) -> int:
        """How many products feed one output's rounding: the longest GEMM inner length of a step
        (or, for the weight gradients, the steps summed into one weight), times the steps whose
        errors carry into it through the recurrence, seq_len x layers. A random walk over those
        steps; benchdnn grows its threshold with the log of the same count, which the sqrt of
        this exceeds, so no honest result is called wrong, while a bug errs by 1e-1 or more."""
        inner = max(self.layer_input_size(layer) + self.out_size for layer in range(self.layers))
        chain = self.chain
        if direction in ("fwd", "fwd_train", "bwd_data"):
            return inner * chain
        if direction == "bwd_filter":
            return self.batch * chain
        if direction == "train_step":      # its outputs include both gradients
            return max(inner, self.batch) * chain
        raise ValueError(f"unknown direction {direction!r}")

    def tensor_elements(self) -> dict[str, int]:
        """Elements of each tensor a direction reads or writes: the sequence in and out, the
        states, the weights."""
        states = self.layers * self.directions * self.batch * self.out_size
        if self.cell == "lstm":
            states += self.layers * self.directions * self.batch * self.hidden_size
        weights = sum(math.prod(shape) for layer in range(self.layers)
                      for shape in self.weight_shapes(layer).values()) * self.directions
        return {"x": self.seq_len * self.batch * self.input_size,
                "y": self.seq_len * self.batch * self.directions * self.out_size,
                "states": 2 * states, "weights": weights}

    def bytes_moved(self, element_bytes: int, result_bytes: int | None = None,
                    direction: str = "fwd") -> int:
        """Compulsory traffic: each tensor the direction touches once (fwd and fwd_train: x,
        weights, states in, y and states out, what training keeps for backward not counted;
        bwd_data: dy, weights, states' gradients, dx; bwd_filter: x, y, dweights;
        train_step: the three), at `element_bytes` each."""
        t = self.tensor_elements()
        passes = {"fwd": t["x"] + t["weights"] + t["states"] + t["y"],
                  "bwd_data": t["y"] + t["weights"] + t["states"] + t["x"],
                  "bwd_filter": t["x"] + t["y"] + t["weights"]}
        passes.update(fwd_train=passes["fwd"], train_step=sum(passes.values()))
        return passes[direction] * (result_bytes or element_bytes)

    def arithmetic_intensity(self, element_bytes: int, result_bytes: int | None = None,
                             direction: str = "fwd") -> float:
        return self.flops_of(direction) / self.bytes_moved(element_bytes, result_bytes,
                                                           direction)

    def with_batch(self, batch: int) -> RnnProblem:
        if self.lengths is not None and batch != self.batch:
            raise RnnProblemError(f"batch {batch}: {self.label} gives each of its {self.batch} "
                                  f"sequences a length; change those with the batch")
        return replace(self, batch=batch)

    @property
    def label(self) -> str:
        return self.name or self.short_shape

    @property
    def short_shape(self) -> str:
        stack = f"{self.layers}x" if self.layers > 1 else ""
        bi = " bi" if self.bidirectional else ""
        proj = f" p{self.proj_size}" if self.proj_size else ""
        return f"{stack}{self.cell} {self.input_size}->{self.hidden_size}{proj} t{self.seq_len}{bi}"

    def shape_id(self) -> str:
        """The problem's part of a point id: every field that changes what is computed."""
        text = (f"{self.cell}i{self.input_size}h{self.hidden_size}p{self.proj_size}"
                f"l{self.layers}{'bi' if self.bidirectional else 'uni'}t{self.seq_len}"
                f"n{self.batch}{'' if self.bias else 'nobias'}")
        if self.lengths is not None:
            digest = hashlib.sha1(",".join(map(str, self.lengths)).encode()).hexdigest()[:10]
            text += f"len{digest}"
        return text
