"""Recurrent problems from the peers' texts (issue 40): Baidu DeepBench's RNN tuples and oneDNN
benchdnn's `--rnn` descriptors (facts: shared/reference/rnn.md section 1.2).

DeepBench: `(hidden, batch, timesteps, cell)`, e.g. `512, 16, 25, lstm` or `(1760, 16, 50,
"vanilla")`. It runs one unidirectional layer with CUDNN_SKIP_INPUT, so the input size is the
hidden size; "vanilla" is cuDNN's RNN_RELU.

benchdnn: `lXtXmbX_sicX_slcX_dhcX_dicX_nNAME` (`_` ignored) with the knobs that say the cell and
the direction. Defaults as benchdnn's: l 1, t 1, mb 2, slc = dhc = sic, dic = dhc. slc is the
input size, dhc the hidden size, dic < dhc an LSTM projection; sic, the state fed back, must be
dic; dlc, the layer's output, directions x dic. Only what cuDNN and PyTorch compute too is
taken: VANILLA_LSTM, LBR_GRU (PyTorch's and cuDNN's GRU applies the reset gate after the
recurrent GEMM, which benchdnn calls "linear before reset"; its VANILLA_GRU does not) and
VANILLA_RNN with RELU or TANH; left2right or concat (bidirectional). Anything else is refused
with one line naming it.
"""
from __future__ import annotations

import re

from harness.rnn.problem import RnnProblem, RnnProblemError

DEEPBENCH_CELLS = {"vanilla": "rnn_relu", "lstm": "lstm", "gru": "gru"}
_DEEPBENCH = re.compile(r"""^\(?\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*["']?(\w+)["']?\s*\)?$""")

BENCHDNN_CELLS = {("VANILLA_LSTM", None): "lstm", ("LBR_GRU", None): "gru",
                  ("VANILLA_RNN", "RELU"): "rnn_relu", ("VANILLA_RNN", "TANH"): "rnn_tanh"}
BENCHDNN_DIRECTIONS = {"left2right": False, "concat": True}
_KEYS = ("mb", "sic", "slc", "dhc", "dic", "dlc", "l", "t")   # longest first: "l" after "slc"
_ENTRY = re.compile(r"(" + "|".join(_KEYS) + r")(\d+)")


def parse_deepbench_rnn(text: str) -> RnnProblem:
    """An RnnProblem from one DeepBench RNN tuple (hidden, batch, timesteps, cell)."""
    match = _DEEPBENCH.match(text.strip())
    if match is None:
        raise RnnProblemError(f"DeepBench RNN tuple {text.strip()!r}: expected hidden, batch, "
                              f"timesteps, cell, e.g. 512, 16, 25, lstm")
    hidden, batch, steps, cell = match.groups()
    if cell not in DEEPBENCH_CELLS:
        raise RnnProblemError(f"DeepBench RNN tuple {text.strip()!r}: cell {cell!r} is not one "
                              f"of {', '.join(DEEPBENCH_CELLS)}")
    kind = DEEPBENCH_CELLS[cell]
    return RnnProblem(kind, int(hidden), int(hidden), int(steps), int(batch),
                      name=f"deepbench:{cell}_h{hidden}_n{batch}_t{steps}")


def parse_benchdnn_rnn(text: str, alg: str = "VANILLA_RNN", direction: str = "left2right",
                       activation: str = "RELU") -> RnnProblem:
    """An RnnProblem from a benchdnn RNN descriptor and the `--alg`, `--direction` and
    `--activation` knobs it runs with (benchdnn's defaults)."""
    desc = text.strip()
    values, name = _entries(desc)
    cell = BENCHDNN_CELLS.get((alg, activation if alg == "VANILLA_RNN" else None))
    if cell is None:
        known = ", ".join(a if a != "VANILLA_RNN" else f"{a} ({act})"
                          for a, act in BENCHDNN_CELLS)
        raise RnnProblemError(f"--alg {alg} with --activation {activation}: not one that "
                              f"cuDNN and PyTorch compute; known: {known}")
    if direction not in BENCHDNN_DIRECTIONS:
        raise RnnProblemError(f"--direction {direction}: one of "
                              f"{', '.join(BENCHDNN_DIRECTIONS)}")
    if "sic" not in values:
        raise RnnProblemError(f"descriptor {desc!r}: sic is missing; it has no default")
    hidden = values.get("dhc", values["sic"])
    state = values.get("dic", hidden)
    if values["sic"] != state:
        raise RnnProblemError(f"descriptor {desc!r}: sic{values['sic']} must equal the state "
                              f"fed back, dic{state}")
    directions = 2 if BENCHDNN_DIRECTIONS[direction] else 1
    if values.get("dlc", directions * state) != directions * state:
        raise RnnProblemError(f"descriptor {desc!r}: dlc{values['dlc']} must be the layer's "
                              f"output, {directions} x dic{state} = {directions * state}")
    try:
        return RnnProblem(cell, values.get("slc", values["sic"]), hidden, values.get("t", 1),
                          values.get("mb", 2), layers=values.get("l", 1),
                          bidirectional=BENCHDNN_DIRECTIONS[direction],
                          proj_size=state if state != hidden else 0, name=name)
    except RnnProblemError as error:
        raise RnnProblemError(f"descriptor {desc!r}: {error}") from None


def _entries(desc: str) -> tuple[dict[str, int], str]:
    """The descriptor's values by key and its name (`n` to the end, quotes dropped)."""
    values: dict[str, int] = {}
    pos = 0
    while pos < len(desc):
        if desc[pos] == "_":
            pos += 1
        elif desc[pos] == "n":
            return values, desc[pos + 1:].strip().strip("\"'")
        elif (match := _ENTRY.match(desc, pos)) is not None:
            key, digits = match.groups()
            if key in values:
                raise RnnProblemError(f"descriptor {desc!r}: {key}{digits} repeats "
                                      f"{key}{values[key]}")
            values[key] = int(digits)
            pos = match.end()
        else:
            raise RnnProblemError(f"descriptor {desc!r}: unexpected {desc[pos:pos + 12]!r} at "
                                  f"position {pos}; expected entries such as l1, t50, mb32, "
                                  f"sic512, slc512, dhc512, dic512 or n\"name\"")
    return values, ""


def to_benchdnn_rnn(problem: RnnProblem) -> str:
    """The problem as benchdnn's --rnn knobs and descriptor (parse_benchdnn_rnn reads it back;
    per-sequence lengths and a missing bias have no benchdnn form and are left out)."""
    (alg, activation), = [key for key, cell in BENCHDNN_CELLS.items() if cell == problem.cell]
    knobs = f"--alg={alg}" + (f" --activation={activation}" if activation else "")
    direction = "concat" if problem.bidirectional else "left2right"
    p = problem
    return (f"{knobs} --direction={direction} l{p.layers}t{p.seq_len}mb{p.batch}"
            f"sic{p.out_size}slc{p.input_size}dhc{p.hidden_size}dic{p.out_size}"
            + (f"n{p.name}" if p.name else ""))
