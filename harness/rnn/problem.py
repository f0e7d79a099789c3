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

from dataclasses import dataclass

CELLS = ("lstm", "gru", "rnn_tanh", "rnn_relu")
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


class RnnProblemError(ValueError):
    """An impossible recurrent shape; the message names the value."""


@dataclass(frozen=True)
class RnnProblem:
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

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise RnnProblemError(f"cell {self.cell!r}: one of {', '.join(CELLS)}")
        for field in ("input_size", "hidden_size", "seq_len", "batch", "layers"):
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
