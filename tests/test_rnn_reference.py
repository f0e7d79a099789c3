"""The float64 recurrent oracle (harness/rnn/reference.py) against PyTorch's float64 nn.LSTM,
nn.GRU and nn.RNN with autograd, and against finite differences of its own forward pass; and
RnnProblem's refusals of impossible shapes."""
from __future__ import annotations

import numpy as np
import pytest

from harness.rnn import reference
from harness.rnn.problem import RnnProblem, RnnProblemError

CASES = [
    RnnProblem("lstm", 5, 7, 6, 3),
    RnnProblem("lstm", 5, 7, 6, 3, layers=2, bidirectional=True, proj_size=4),
    RnnProblem("gru", 4, 6, 5, 3, layers=2, bidirectional=True),
    RnnProblem("rnn_tanh", 4, 6, 5, 2, bias=False),
    RnnProblem("rnn_relu", 4, 6, 5, 2, layers=2),
    RnnProblem("lstm", 4, 6, 7, 3, bidirectional=True, lengths=(7, 3, 5)),
    RnnProblem("gru", 4, 6, 7, 3, lengths=(2, 7, 4)),
]


def _data(problem: RnnProblem, seed: int = 0):
    rng = np.random.default_rng(seed)
    k = problem.layers * problem.directions
    x = rng.standard_normal((problem.seq_len, problem.batch, problem.input_size))
    h0 = rng.standard_normal((k, problem.batch, problem.out_size))
    c0 = rng.standard_normal((k, problem.batch, problem.hidden_size))
    weights = [[{name: 0.3 * rng.standard_normal(shape)
                 for name, shape in problem.weight_shapes(layer).items()}
                for _ in range(problem.directions)] for layer in range(problem.layers)]
    return x, h0, c0, weights


def _torch_module(problem: RnnProblem, weights):
    import torch
    kind = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(problem.cell)
    kwargs = dict(num_layers=problem.layers, bidirectional=problem.bidirectional,
                  bias=problem.bias)
    if kind is None:
        module = torch.nn.RNN(problem.input_size, problem.hidden_size,
                              nonlinearity=problem.cell.removeprefix("rnn_"), **kwargs)
    else:
        extra = {"proj_size": problem.proj_size} if problem.cell == "lstm" else {}
        module = kind(problem.input_size, problem.hidden_size, **kwargs, **extra)
    module = module.double()
    names = {"W": "weight_ih", "R": "weight_hh", "bW": "bias_ih", "bR": "bias_hh",
             "P": "weight_hr"}
    with torch.no_grad():
        for layer, directions in enumerate(weights):
            for d, w in enumerate(directions):
                for key, value in w.items():
                    suffix = f"_l{layer}" + ("_reverse" if d else "")
                    getattr(module, names[key] + suffix).copy_(torch.from_numpy(value))
    return module


# The oracle's steps per input GEMM: its own, and 2, so that a sequence of 5-7 steps spans chunk
# boundaries and ends in a partial chunk
@pytest.mark.parametrize("chunk", [reference.CHUNK_STEPS, 2], ids=["chunk_default", "chunk_2"])
@pytest.mark.parametrize("problem", CASES, ids=lambda p: f"{p.cell}-l{p.layers}-"
                         f"d{p.directions}-p{p.proj_size}-{'var' if p.lengths else 'full'}")
def test_forward_and_backward_match_pytorch_float64(problem, chunk, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(reference, "CHUNK_STEPS", chunk)
    x, h0, c0, weights = _data(problem)
    fwd = reference.forward(problem, x, h0, c0, weights, np)
    rng = np.random.default_rng(1)
    dy, dh = rng.standard_normal(fwd.y.shape), rng.standard_normal(fwd.h.shape)
    dc = rng.standard_normal(fwd.c.shape) if fwd.c is not None else None
    dx, dh0, dc0, grads = reference.backward(problem, fwd, weights, dy, dh, dc, np)

    module = _torch_module(problem, weights)
    tx = torch.from_numpy(x).requires_grad_()
    th0 = torch.from_numpy(h0).requires_grad_()
    tc0 = torch.from_numpy(c0).requires_grad_()
    state = (th0, tc0) if problem.cell == "lstm" else th0
    if problem.lengths is not None:
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
        packed = pack_padded_sequence(tx, torch.tensor(problem.lengths), enforce_sorted=False)
        out, final = module(packed, state)
        ty, _ = pad_packed_sequence(out, total_length=problem.seq_len)
    else:
        ty, final = module(tx, state)
    th, tc = final if problem.cell == "lstm" else (final, None)
    np.testing.assert_allclose(fwd.y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fwd.h, th.detach().numpy(), rtol=1e-10, atol=1e-12)
    loss = (ty * torch.from_numpy(dy)).sum() + (th * torch.from_numpy(dh)).sum()
    if tc is not None:
        np.testing.assert_allclose(fwd.c, tc.detach().numpy(), rtol=1e-10, atol=1e-12)
        loss = loss + (tc * torch.from_numpy(dc)).sum()
    loss.backward()
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(dh0, th0.grad.numpy(), rtol=1e-9, atol=1e-11)
    if problem.cell == "lstm":
        np.testing.assert_allclose(dc0, tc0.grad.numpy(), rtol=1e-9, atol=1e-11)
    names = {"W": "weight_ih", "R": "weight_hh", "bW": "bias_ih", "bR": "bias_hh",
             "P": "weight_hr"}
    for layer, directions in enumerate(grads):
        for d, g in enumerate(directions):
            for key, value in g.items():
                name = names[key] + f"_l{layer}" + ("_reverse" if d else "")
                np.testing.assert_allclose(value, getattr(module, name).grad.numpy(),
                                           rtol=1e-9, atol=1e-11, err_msg=name)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_gradients_match_finite_differences_of_the_forward_pass(cell):
    """Independent of PyTorch: every gradient against central differences (T=5, N=3)."""
    problem = RnnProblem(cell, 4, 5, 5, 3, proj_size=3 if cell == "lstm" else 0)
    x, h0, c0, weights = _data(problem, seed=2)
    rng = np.random.default_rng(3)
    fwd = reference.forward(problem, x, h0, c0, weights, np)
    dy = rng.standard_normal(fwd.y.shape)

    def loss() -> float:
        return float((reference.forward(problem, x, h0, c0, weights, np).y * dy).sum())
    zero_h = np.zeros_like(fwd.h)
    zero_c = np.zeros_like(fwd.c) if fwd.c is not None else None
    dx, dh0, _, grads = reference.backward(problem, fwd, weights, dy, zero_h, zero_c, np)
    for array, grad in [(x, dx), (h0, dh0), *[(weights[0][0][k], grads[0][0][k])
                                               for k in weights[0][0]]]:
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            saved = array[index]
            array[index] = saved + 1e-6
            up = loss()
            array[index] = saved - 1e-6
            numeric[index] = (up - loss()) / 2e-6
            array[index] = saved
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def test_a_planted_gate_order_error_is_caught():
    """The oracle must tell gate orders apart: f and i swapped in the weights changes y."""
    problem = CASES[0]
    x, h0, c0, weights = _data(problem)
    y = reference.forward(problem, x, h0, c0, weights, np).y
    swapped = [[{k: (np.concatenate(np.split(v, 4)[1::-1] + np.split(v, 4)[2:])
                     if k in ("W", "R", "bW", "bR") else v) for k, v in w.items()}
                for w in layer] for layer in weights]
    assert np.abs(reference.forward(problem, x, h0, c0, swapped, np).y - y).max() > 1e-3


@pytest.mark.parametrize("kwargs, says", [
    (dict(cell="lstm", hidden_size=0), "hidden_size 0"),
    (dict(cell="lstm", proj_size=8), "proj_size 8: from 1 to hidden_size - 1 (7)"),
    (dict(cell="gru", proj_size=4), "only an LSTM has a projection"),
    (dict(cell="lstm", lengths=(6, 7, 2)), "length 7: from 1 to seq_len (6)"),
    (dict(cell="lstm", lengths=(6, 2)), "one per sequence of the batch (3)"),
    (dict(cell="transformer"), "cell 'transformer'"),
])
def test_impossible_shapes_are_refused_naming_the_value(kwargs, says):
    base = dict(input_size=5, hidden_size=8, seq_len=6, batch=3)
    with pytest.raises(RnnProblemError, match=None) as err:
        RnnProblem(**{**base, **kwargs})
    assert says in str(err.value)


def test_flops_count_the_gemms_of_the_valid_steps():
    p = RnnProblem("lstm", 2048, 2048, 25, 128)        # DeepBench's LSTM training row
    assert p.forward_flops() == 2 * 25 * 128 * 4 * 2048 * (2048 + 2048)
    assert RnnProblem("gru", 4, 6, 7, 3, lengths=(2, 7, 4)).steps() == 13
