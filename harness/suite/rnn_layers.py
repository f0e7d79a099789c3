"""Recurrent layers in a suite's `layers` list (issue 40), three forms, beside the convolution
forms of harness/suite/loader.py:

    { cell = "lstm", input_size = 28, hidden_size = 128, seq_len = 28, batch = 128,
      name = "mnist:row_lstm" }            # RnnProblem's fields: layers, bidirectional,
                                           # proj_size, bias, lengths, multiplicity optional;
                                           # batch may be left out when [sweep] sets it
    { deepbench_rnn = "512, 16, 25, lstm" }            # DeepBench: hidden, batch, steps, cell
    { benchdnn_rnn = "l1t50mb32sic512slc512dhc512dic512", alg = "VANILLA_LSTM",
      direction = "left2right", activation = "RELU" }  # benchdnn --rnn; knobs optional
Each takes `name` and `multiplicity`, as convolution entries do.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from harness.rnn.problem import RnnProblem, RnnProblemError
from harness.rnn.text import parse_benchdnn_rnn, parse_deepbench_rnn
from harness.suite.checks import (Invalid, check_keys, checked_bool, checked_list,
                                  checked_positive_int, checked_text, field_table, is_int,
                                  kind_of)

_FIELDS = tuple(f.name for f in dataclasses.fields(RnnProblem))
_REQUIRED = ("cell", "input_size", "hidden_size", "seq_len", "batch")
_BOOLEANS = ("bidirectional", "bias")
_TEXT_FORMS = {"deepbench_rnn": ("deepbench_rnn", "name", "multiplicity"),
               "benchdnn_rnn": ("benchdnn_rnn", "alg", "direction", "activation", "name",
                                "multiplicity")}


def is_recurrent(entry: Any) -> bool:
    """Whether a `layers` entry is one of this module's forms."""
    return isinstance(entry, dict) and ("cell" in entry or any(k in entry for k in _TEXT_FORMS))


def layer(entry: dict[str, Any], where: str, batch: int | None) -> RnnProblem:
    """The RnnProblem an entry describes; Invalid naming the entry and value otherwise."""
    try:
        for form, keys in _TEXT_FORMS.items():
            if form in entry:
                return _text_form(entry, form, keys, where)
        return _field_form(entry, where, batch)
    except RnnProblemError as error:
        raise Invalid(where, str(error)) from None


def _named(problem: RnnProblem, entry: dict[str, Any], where: str) -> RnnProblem:
    name = checked_text(entry.get("name", problem.name), f"{where}.name", allow_empty=True)
    multiplicity = checked_positive_int(entry.get("multiplicity", 1), f"{where}.multiplicity")
    return dataclasses.replace(problem, name=name, multiplicity=multiplicity)


def _text_form(entry: dict[str, Any], form: str, keys: tuple[str, ...],
               where: str) -> RnnProblem:
    check_keys(entry, keys, where)
    text = checked_text(entry[form], f"{where}.{form}")
    if form == "deepbench_rnn":
        return _named(parse_deepbench_rnn(text), entry, where)
    knobs = {key: checked_text(entry[key], f"{where}.{key}")
             for key in ("alg", "direction", "activation") if key in entry}
    return _named(parse_benchdnn_rnn(text, **knobs), entry, where)


def _field_form(entry: dict[str, Any], where: str, batch: int | None) -> RnnProblem:
    fields = field_table(entry, _FIELDS, _REQUIRED, where, batch, "a recurrent layer table")
    for key, value in fields.items():
        spot = f"{where}.{key}"
        if key in ("name", "cell"):
            checked_text(value, spot, allow_empty=key == "name")
        elif key in _BOOLEANS:
            checked_bool(value, spot)
        elif key == "lengths":
            items = checked_list(value, spot)
            bad = [item for item in items if not is_int(item)]
            if bad:
                raise Invalid(spot, f"expected whole numbers, got {kind_of(bad[0])} {bad[0]!r}")
            fields[key] = tuple(items)
        elif not is_int(value):
            raise Invalid(spot, f"expected an integer, got {kind_of(value)} {value!r}")
    return RnnProblem(**fields)
