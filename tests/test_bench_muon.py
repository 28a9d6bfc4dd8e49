"""bench.py --what=muon: one row per (orthogonalisation, iterations), each with its step's time, its time over its
method's at 5 iterations and its distances from the exact polar factor, on a tiny model with one step a round."""

import itertools
import math

import pytest
import torch
from helpers import needs_muon

import bench
from benchmarks.common import BenchConfig
from benchmarks.muon_speed import polar_distance
from errors import OptionError
from model import GPTConfig
from train import TrainConfig
from training.optimizers import orthogonalize


@needs_muon
def test_every_method_and_step_count_gets_a_row_of_positive_finite_figures(char_data):
    settings = BenchConfig(what="muon", bench_steps=1, warmup_steps=1, rounds=2)
    config = TrainConfig(dataset=str(char_data), device="cpu", batch_size=4, optimizer="muon")
    model_config = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8)
    result = bench.measure_once(settings, config, model_config)  # as bench.py --what=muon --repeats=1 runs it
    figures = result["figures"]
    rows = list(dict.fromkeys(f["row"] for f in figures))
    methods = ("newton_schulz", "polar_express")
    assert rows == [f"{method}, {n} steps" for method in methods for n in (5, 4, 3, 2)] + [
        f"{method}, {n} steps, aol" for method in methods for n in (5, 4, 3, 2)] + [
        f"{method}, 5 steps, float32" for method in methods]
    columns = ["a step", "vs 5 steps", "from U V^T, Gaussian", "from U V^T, gradients"]
    assert [f["column"] for f in figures] == columns * len(rows)
    assert all(math.isfinite(f["value"]) and f["value"] > 0 for f in figures)
    cells = {(f["row"], f["column"]): f["value"] for f in figures}
    assert cells[("newton_schulz, 5 steps", "vs 5 steps")] == cells[("polar_express, 5 steps", "vs 5 steps")] == 1.0
    for column in columns[2:]:  # Polar Express cut short lands farther from U V^T, one iteration less at a time
        distances = [cells[(f"polar_express, {steps} steps", column)] for steps in (5, 4, 3, 2)]
        assert all(a < b for a, b in itertools.pairwise(distances)), (column, distances)
        for method in methods:  # a float32 or AOL row is its own orthogonalisation, not bfloat16's again
            assert cells[(f"{method}, 5 steps, float32", column)] != cells[(f"{method}, 5 steps", column)]
            assert cells[(f"{method}, 5 steps, aol", column)] != cells[(f"{method}, 5 steps", column)]
    assert "4 matrices (48x16, 16x16, 64x16, 16x64)" in result["header"]
    assert "2 alternating rounds of 1 steps" in result["header"]


def test_the_distance_is_from_the_polar_factor_of_a_matrix_built_from_its_factors():
    """G = Q S W^T built here (Q 16x16 and W 24x16 orthonormal, singular values 0.1-2): its polar factor is Q W^T,
    whose norm is 4; the distance is ||orthogonalize(G) - Q W^T||_F / 4, for either method."""
    g = torch.Generator().manual_seed(0)
    q = torch.linalg.qr(torch.randn(16, 16, generator=g, dtype=torch.float64))[0]
    w = torch.linalg.qr(torch.randn(24, 16, generator=g, dtype=torch.float64))[0]
    matrix = (q * torch.linspace(0.1, 2.0, 16, dtype=torch.float64)) @ w.T
    group = dict(ns_coefficients=(3.4445, -4.7750, 2.0315), ns_steps=3, eps=1e-7)
    for method, dtype, scaling in itertools.product(("newton_schulz", "polar_express"), (torch.bfloat16, torch.float32),
                                                    ("frobenius", "aol")):
        expected = (orthogonalize(matrix.float(), method, group, dtype, scaling).double() - q @ w.T).norm().item() / 4
        assert polar_distance(matrix.float(), method, group, dtype, scaling) == pytest.approx(expected, rel=1e-6)
        assert 0.01 < expected < 1


def test_an_adamw_config_is_refused():
    with pytest.raises(OptionError, match=r"optimizer='adamw': the Muon benchmark times Muon's step"):
        bench.measure_once(BenchConfig(what="muon"), TrainConfig(), GPTConfig())
