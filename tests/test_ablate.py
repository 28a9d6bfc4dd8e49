"""Tests of ablate.py: the evaluation protocols on hand-made data with known answers, the paired statistics
against formulas written out here, the cells and the reuse check, and one tiny study of every pos_encoding
(2 seeds, a few steps) trained once for the module and checked against independent recomputations.
"""

import csv
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import matplotlib.image  # reads PNGs without a display backend
import numpy as np
import pytest
import torch
from helpers import assert_one_line_error, cli, corpus
from scipy import stats

import ablate
import files
from errors import OptionError
from model import GPTConfig
from options import parse_options
from study import evaluation as study_eval
from study import plots as ablate_plots
from study import records as run_records
from study import run as study_run
from study.cells import cell_name, study_cells
from study.config import PER_RUN, AblateConfig
from study.config import STUDY_CELLS as POS_ENCODINGS
from study.evaluation import forward_pieces, token_losses
from study.paired_stats import holm, interval, paired
from study.plan import run_plan
from study.report import initial_model
from study.stages import run_study
from text.dataset import load_split, prepare
from train import TrainConfig, train
from training.checkpoint import load_checkpoint, model_from_checkpoint

BLOCK = 16
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------------- protocols


def context_sizes(x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """A fake model whose 'loss' at each position is the number of tokens before it in its forward pass."""
    return np.broadcast_to(np.arange(x.shape[1], dtype=np.float64), x.shape)


def targets(x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """A fake model whose 'loss' is the id of the token it predicts."""
    return y.numpy().astype(np.float64)


@pytest.mark.parametrize("n_tokens", [101, 97])
@pytest.mark.parametrize("length, window, stride", [(8, 8, 2), (20, 8, 3), (20, 8, 1), (40, 7, 7), (500, 9, 4),
                                                    (1, 1, 1)])
def test_every_val_token_is_scored_once(n_tokens, length, window, stride):
    data = np.arange(n_tokens)  # token i has id i: the scores name the tokens
    for w in (length, window):  # non-overlapping, then sliding
        scored = token_losses(targets, data, length, w, stride, batch_size=3)
        np.testing.assert_array_equal(scored, data[1:])
        pieces = forward_pieces(n_tokens - 1, length, w, stride)
        covered = np.concatenate([np.arange(s + first, s + size) for s, size, first in pieces])
        np.testing.assert_array_equal(np.sort(covered), np.arange(n_tokens - 1))


@pytest.mark.parametrize("length, window, stride", [(64, 16, 4), (64, 16, 16), (50, 16, 5), (16, 16, 4),
                                                    (33, 10, 1)])
def test_context_of_each_token(length, window, stride):
    n_targets = 300
    data = np.zeros(n_targets + 1, dtype=np.int64)
    position = np.arange(n_targets) % length  # windows start at multiples of length
    # Non-overlapping: everything before the token in its window, and nothing before the window.
    np.testing.assert_array_equal(token_losses(context_sizes, data, length, length, stride, 4), position)
    # Sliding: the same for the first window positions; past them, at most window - 1 tokens, at least
    # window - stride (a piece scores only its last stride tokens).
    context = token_losses(context_sizes, data, length, window, stride, 4)
    early = position < window
    np.testing.assert_array_equal(context[early], position[early])
    assert context[~early].max(initial=0) <= window - 1
    assert context[~early].min(initial=window) >= window - stride


def test_loss_by_position_of_a_fixed_model():
    """A model whose loss at context c is 1 + c / 10: the protocol's averages follow by hand."""
    def fixed(x, y):
        return 1.0 + context_sizes(x, y) / 10

    data = np.zeros(101, dtype=np.int64)  # 100 targets: 12 windows of 8, then one of 4
    losses = token_losses(fixed, data, 8, 8, 8, 5)
    f = 1.0 + np.arange(8) / 10
    assert losses.mean() == pytest.approx((12 * f.sum() + f[:4].sum()) / 100, rel=1e-12)
    np.testing.assert_allclose(study_eval.by_position(losses, 8), f, rtol=1e-12)
    # Sliding window of 4 advancing by 2 in windows of 8: positions 4..7 see 2 or 3 tokens before them.
    losses = token_losses(fixed, data, 8, 4, 2, 5)
    np.testing.assert_allclose(study_eval.by_position(losses, 8), [1.0, 1.1, 1.2, 1.3, 1.2, 1.3, 1.2, 1.3], rtol=1e-12)


# ---------------------------------------------------------------------------------------------------- statistics


def test_paired_difference_by_hand():
    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 2.5, 2.0, 3.0]
    # d = 0.5, -0.5, 1, 1: mean 0.5, sd sqrt(1.5 / 3), se sd / 2; t(0.975, 3) = 3.182446 (any t table)
    result = paired(a, b)
    half = 3.182446305 * math.sqrt(0.5) / 2
    assert result["mean"] == pytest.approx(0.5)
    assert (result["low"], result["high"]) == pytest.approx((0.5 - half, 0.5 + half), rel=1e-9)
    assert result["p"] == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-9)
    assert result["p"] == pytest.approx(0.25221549, rel=1e-6)
    assert (result["a_wins"], result["b_wins"], result["n"]) == (1, 3, 4)
    mean, half = interval([2.0, 4.0, 9.0])
    low, high = stats.t.interval(0.95, 2, loc=5.0, scale=np.std([2.0, 4.0, 9.0], ddof=1) / math.sqrt(3))
    assert (mean - half, mean + half) == pytest.approx((low, high), rel=1e-9)
    assert math.isnan(interval([3.0])[1])


def test_holm_by_hand():
    # sorted p against 0.05/4, 0.05/3, ...: 0.01 <= 0.0125 rejected; 0.03 > 0.0167 stops there.
    assert holm([0.01, 0.04, 0.03, 0.5]) == [True, False, False, False]
    # 0.001 <= 0.05/3, 0.01 <= 0.05/2, 0.02 <= 0.05: all three.
    assert holm([0.001, 0.02, 0.01]) == [True, True, True]
    assert holm([0.2, 0.3]) == [False, False]


def holm_by_adjusted_p(p_values: list[float], alpha: float = 0.05) -> list[bool]:
    """Holm by its adjusted p-values, another formulation than the step-down loop: the k-th smallest p becomes
    max over j <= k of (m - j + 1) p_(j); rejected where that is at most alpha. No test (nan) is p = 1."""
    p = [1.0 if math.isnan(v) else v for v in p_values]
    m, adjusted, running = len(p), [0.0] * len(p), 0.0
    for k, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, (m - k) * p[i])
        adjusted[i] = min(1.0, running)
    return [a <= alpha for a in adjusted]


def test_holm_does_not_depend_on_where_a_nan_stands():
    # m = 2 counts the untested one: 0.001 <= 0.05 / 2 is rejected, wherever the nan is.
    assert holm([math.nan, 0.001]) == [False, True] and holm([0.001, math.nan]) == [True, False]
    assert holm([math.nan, math.nan]) == [False, False]
    rng = random.Random(0)
    for _ in range(200):
        p_values = [rng.choice([math.nan, rng.random() * 0.05, rng.random()]) for _ in range(rng.randint(1, 6))]
        order = list(range(len(p_values)))
        rng.shuffle(order)
        shuffled = holm([p_values[i] for i in order])
        assert holm(p_values) == holm_by_adjusted_p(p_values)
        assert [shuffled[order.index(i)] for i in range(len(p_values))] == holm(p_values)


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # scipy's own, on nearly identical data
def test_identical_differences_over_seeds_are_no_test():
    """Both seeds 0.005 apart: scipy's paired t gives p = 3e-14 (t from float rounding) or p = 0 (exact), and a
    zero-width interval; a study can claim neither a difference nor equivalence from that."""
    a, b = [2.305, 2.310], [2.300, 2.305]
    assert stats.ttest_rel(a, b).pvalue < 1e-12 and stats.ttest_rel([1.0, 2.0], [0.0, 1.0]).pvalue == 0.0
    for x, y in ((a, b), ([1.0, 2.0], [0.0, 1.0]), ([3.0, 3.0, 3.0], [3.0, 3.0, 3.0])):
        result = paired(x, y)
        n = len(x)
        assert result["untested"] == f"{n} seeds, no spread: no test", result
        assert math.isnan(result["p"]) and math.isnan(result["low"]) and math.isnan(result["high"])
        assert result["mean"] == pytest.approx(np.mean(x) - np.mean(y))
    assert paired([2.0], [1.0])["untested"] == "1 seed: no test"
    spread = paired([2.305, 2.311], [2.300, 2.305])  # 0.005 and 0.006: a test, as scipy's
    assert spread["untested"] is None
    assert spread["p"] == pytest.approx(stats.ttest_rel([2.305, 2.311], [2.300, 2.305]).pvalue, rel=1e-9)


# ---------------------------------------------------------------------------------------------------- cells


def test_cells_from_variants_and_grid():
    config = AblateConfig(variants=["learned", "sinusoidal sinusoidal_amplitude=1.0", "n_layer=2"],
                          grid="pos_encoding=none,learned; learning_rate=1e-3,3e-3")
    cells = study_cells(config)
    assert cells[:3] == [{"pos_encoding": "learned"}, {"pos_encoding": "sinusoidal", "sinusoidal_amplitude": 1.0},
                         {"n_layer": 2}]
    assert cells[3:] == [{"pos_encoding": p, "learning_rate": lr} for p in ("none", "learned")
                         for lr in (1e-3, 3e-3)]
    assert [cell_name(c) for c in cells[:3]] == ["learned", "sinusoidal sinusoidal_amplitude=1.0",
                                                        "n_layer=2"]
    for bad, message in [(["learned", "pos_encoding=learned"], "more than once"), (["seed=3"], "set per run"),
                         (["n_layers=3"], "not a GPTConfig"), (["n_layer=two"], "expected int")]:
        with pytest.raises(OptionError, match=message):
            study_cells(AblateConfig(variants=bad))
    with pytest.raises(OptionError, match="name=v1,v2"):
        study_cells(AblateConfig(variants=[], grid="pos_encoding"))


def test_two_cells_of_one_folder_are_refused_before_anything_trains(tmp_path, capsys):
    """Was: 'learned dataset=a/b' and 'learned dataset=a_b' both trained in learned_dataset=a_b/, the second cell's
    runs found the first's finished and reused them, and the table showed one cell."""
    variants = ["learned dataset=a/b", "learned dataset=a_b"]
    result = cli(ablate.main, [f"--study_dir={tmp_path / 'study'}", "--device=cpu",
                               f"--variants=learned,{','.join(variants)}"], capsys)
    assert_one_line_error(*result, "cells 'learned dataset=a/b' and 'learned dataset=a_b' would share the folder "
                                   "'learned_dataset=a_b'")
    assert not (tmp_path / "study").exists()


def test_plan_applies_each_cell_and_goes_seed_by_seed(tmp_path):
    config = AblateConfig(study_dir=str(tmp_path), variants=["learned", "none batch_size=3"], seeds=2)
    plan = run_plan(config, TrainConfig(batch_size=5), GPTConfig(n_layer=1, n_head=1, n_embd=8))
    assert [(r.variant, r.seed) for r in plan] == [("learned", 1337), ("none batch_size=3", 1337),
                                                          ("learned", 1338), ("none batch_size=3", 1338)]
    assert [r.train_config.batch_size for r in plan] == [5, 3, 5, 3]
    assert [r.model_config.pos_encoding for r in plan] == ["learned", "none"] * 2
    assert plan[1].dir == tmp_path / "none_batch_size=3" / "seed1337"


@pytest.mark.parametrize("variants, grid, message", [
    (["t5"], "t5_num_buckets=4,8", r"cell 't5_num_buckets=4': t5_num_buckets is a setting of pos_encoding=t5, and "
                                   r"this run's is learned: it would do nothing; give the cell what it is a setting "
                                   r"of too \(a --grid's cells take --pos_encoding"),
    (["learned rope_base=5"], "", r"cell 'learned rope_base=5.0': rope_base is a setting of pos_encoding=rope"),
    (["rope wsd_decay_shape=linear"], "", r"wsd_decay_shape is a setting of lr_schedule=wsd, and this run's "
                                          r"schedule is cosine"),
    # was told to "name the encoding in the cell": a Muon setting in an AdamW cell wants optimizer=muon
    (["rope muon_learning_rate=0.01"], "", r"^cell 'rope muon_learning_rate=0.01': muon_learning_rate is a setting of "
                                           r"optimizer=muon, and this run's optimizer is adamw: it would do nothing; "
                                           r"give the cell what it is a setting of too, or drop the setting$"),
])
def test_a_cell_setting_that_does_nothing_is_refused_before_training(tmp_path, variants, grid, message):
    """Was: --variants=t5 --grid='t5_num_buckets=4,8' trained two learned-position models labelled as t5's."""
    config = AblateConfig(study_dir=str(tmp_path), variants=variants, grid=grid)
    with pytest.raises(OptionError, match=message):
        run_plan(config, TrainConfig(), GPTConfig(n_layer=1, n_head=1, n_embd=8))
    assert not any(tmp_path.iterdir())
    run_plan(AblateConfig(study_dir=str(tmp_path), variants=["t5 t5_num_buckets=4", "rope rope_base=5"]),
             TrainConfig(), GPTConfig(n_layer=1, n_head=1, n_embd=8))  # each its own encoding's: fine


def test_changed_or_unrecorded_settings_are_reported():
    current = {"train_config": {"max_iters": 5, "batch_size": 2}, "model_config": {"n_layer": 1}}
    assert run_records.changed_settings(current, current) == []
    stored = {"train_config": {"max_iters": 6, "batch_size": 2}, "model_config": {}}
    assert run_records.changed_settings(stored, current) == ["max_iters", "n_layer"]


# ---------------------------------------------------------------------------------------------------- a study


def configs(root) -> tuple[AblateConfig, TrainConfig, GPTConfig]:
    ablate_config = AblateConfig(study_dir=str(root / "study"), variants=list(POS_ENCODINGS), seeds=2,
                                 eval_multipliers=[1, 2, 4], sliding_stride=1, eval_batch_size=16)
    train_config = TrainConfig(dataset=str(root / "data"), max_iters=4, eval_interval=2, eval_iters=2,
                               log_interval=1, batch_size=4, warmup_iters=1, lr_decay_iters=4, device="cpu",
                               compile=False, progress=False)
    model_config = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=BLOCK)
    return ablate_config, train_config, model_config


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("ablate")
    prepare(corpus(), root / "data", "char")
    ablate_config, train_config, model_config = configs(root)
    result = run_study(ablate_config, train_config, model_config)
    return SimpleNamespace(root=root, dir=root / "study", result=result, configs=(ablate_config, train_config,
                                                                                 model_config))


def done_records(study_dir) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(study_dir.glob("*/seed*/done.json"))]


def eval_of(study, cell: str, seed: int) -> dict:
    return json.loads((study.dir / cell / f"seed{seed}" / "eval.json").read_text())["protocols"]


def test_every_cell_trains(study):
    records = done_records(study.dir)
    assert sorted((r["variant"], r["seed"]) for r in records) == sorted(
        (v, s) for v in POS_ENCODINGS for s in (1337, 1338))
    for r in records:
        assert r["iter_num"] == 4 and (study.dir / r["variant"] / f"seed{r['seed']}" / "ckpt.pt").is_file()
        assert [e["iter"] for e in r["evals"]] == [0, 2, 4]
        assert r["evals"][-1]["train_loss"] < r["evals"][0]["train_loss"]  # training moved the weights
        assert r["settings"]["model_config"]["pos_encoding"] == r["variant"]


def test_shared_weights_start_identical(study):
    run = {(r.variant, r.seed): r for r in run_plan(*study.configs)}
    for seed in (1337, 1338):
        models = {v: initial_model(run[v, seed]).state_dict() for v in POS_ENCODINGS}
        shared = set(models["none"])
        for variant, state in models.items():
            assert shared <= set(state) and set(state) - shared <= {"input_layer.wpe"}, variant
            for name in shared:
                assert torch.equal(state[name], models["none"][name]), (variant, name)
    other_seed = initial_model(run["none", 1338]).state_dict()["input_layer.wte"]
    assert not torch.equal(initial_model(run["none", 1337]).state_dict()["input_layer.wte"], other_seed)


def test_initial_model_is_what_train_starts_from(study, tmp_path):
    """The 'before' heatmap rebuilds the initial table; a zero-step train() saves the real one."""
    run = next(r for r in run_plan(*study.configs) if r.variant == "learned")
    train(replace(run.train_config, out_dir=str(tmp_path), max_iters=0), replace(run.model_config))
    saved = load_checkpoint(tmp_path / "ckpt.pt")["model"]
    rebuilt = initial_model(run).state_dict()
    assert saved.keys() == rebuilt.keys()
    for name in saved:
        assert torch.equal(saved[name], rebuilt[name]), name


def test_nonoverlapping_loss_is_the_models_own_loss(study):
    """Consecutive windows through the model's built-in mean cross-entropy, weighted by their token counts."""
    val = load_split(study.root / "data", "test", 4 * BLOCK)  # the split the study reports
    tokens = torch.from_numpy(val.astype(np.int64))
    for cell in ("sinusoidal", "none"):
        model = model_from_checkpoint(load_checkpoint(study.dir / cell / "seed1338" / "ckpt.pt")).eval()
        for n in (BLOCK, 4 * BLOCK):
            total = 0.0
            for start in range(0, len(val) - 1, n):
                stop = min(start + n, len(val) - 1)
                with torch.no_grad():
                    loss = model(tokens[None, start:stop], tokens[None, start + 1:stop + 1])[1].item()
                total += loss * (stop - start)
            stored = eval_of(study, cell, 1338)["nonoverlapping"][str(n)]["loss"]
            assert stored == pytest.approx(total / (len(val) - 1), rel=1e-5)


def test_sliding_window_loss_recomputed_token_by_token(study):
    """Stride 1: a token past the first block_size positions of its window is predicted from exactly the
    block_size - 1 tokens before it; before that, from the start of its window."""
    val = load_split(study.root / "data", "test", 4 * BLOCK)  # the split the study reports
    tokens = torch.from_numpy(val.astype(np.int64))
    n = 4 * BLOCK
    for cell in ("learned", "sinusoidal"):
        model = model_from_checkpoint(load_checkpoint(study.dir / cell / "seed1337" / "ckpt.pt")).eval()
        losses = []
        for i in range(len(val) - 1):
            start = max(i - BLOCK + 1, i - i % n)
            with torch.no_grad():
                logits, _ = model(tokens[None, start:i + 1])
            losses.append(torch.nn.functional.cross_entropy(logits[0, -1], tokens[i + 1]).item())
        stored = eval_of(study, cell, 1337)["sliding"][str(n)]
        assert stored["loss"] == pytest.approx(np.mean(losses), rel=1e-5)
        assert stored["per_position"] == pytest.approx(study_eval.by_position(np.array(losses), n), rel=1e-5)


def test_learned_is_na_past_block_size_only_without_a_sliding_window(study):
    protocols = eval_of(study, "learned", 1337)
    assert protocols["nonoverlapping"][str(2 * BLOCK)] is None and protocols["nonoverlapping"][str(BLOCK)]
    assert protocols["sliding"][str(4 * BLOCK)]["loss"] > 0
    with (study.dir / "results.csv").open() as file:
        rows = {(r["cell"], r["protocol"], r["length"]): r for r in csv.DictReader(file)}
    assert rows["learned", "nonoverlapping", str(4 * BLOCK)]["mean"] == "n/a"
    assert float(rows["learned", "sliding", str(4 * BLOCK)]["mean"]) > 0
    assert "n/a: a learned table has no rows past block_size." in (study.dir / "results.md").read_text()


def test_table_and_comparisons_match_recomputation(study):
    table = (study.dir / "results.md").read_text()
    for cell in POS_ENCODINGS:
        values = [eval_of(study, cell, s)["nonoverlapping"][str(BLOCK)]["loss"] for s in (1337, 1338)]
        mean = np.mean(values)
        half = stats.t.ppf(0.975, 1) * np.std(values, ddof=1) / math.sqrt(2)
        assert re.search(rf"^\| {cell} \|.*\| {mean:.4f} ± {half:.4f} \|", table, re.MULTILINE), cell
    family = study.result["comparisons"]["training length"]
    assert len(family) == math.comb(len(POS_ENCODINGS), 2)
    for row in family:
        a = [eval_of(study, row["a"], s)["nonoverlapping"][str(BLOCK)]["loss"] for s in (1337, 1338)]
        b = [eval_of(study, row["b"], s)["nonoverlapping"][str(BLOCK)]["loss"] for s in (1337, 1338)]
        assert row["mean"] == pytest.approx(np.mean(a) - np.mean(b), rel=1e-9)
        assert row["p"] == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-6)
        assert row["significant"] == (row["low"] > 0 or row["high"] < 0)
    extrapolation = study.result["comparisons"]["extrapolation against the sliding window"]
    assert {(r["a"], r["length"]) for r in extrapolation} == {
        (c, n) for c in POS_ENCODINGS if c != "learned" for n in (2 * BLOCK, 4 * BLOCK)}


def test_results_folder_has_tables_and_plots(study):
    for name in ("results.md", "results.csv", "results.json"):
        assert (study.dir / name).stat().st_size > 0
    assert not list(study.dir.glob("*.tmp"))
    for name in ("training", "loss_vs_length", "loss_by_position", "paired_differences", "position_similarity"):
        path = study.dir / f"{name}.png"
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100 and image.std() > 0
        assert f"({name}.png)" in (study.dir / "results.md").read_text()
    assert "final" in (study.dir / "results.md").read_text()  # the table says which checkpoint it evaluates


def test_rerun_skips_finished_runs_and_refuses_changed_ones(study, tmp_path, monkeypatch):
    copy = tmp_path / "study"
    shutil.copytree(study.dir, copy)
    ablate_config, train_config, model_config = study.configs
    ablate_config = replace(ablate_config, study_dir=str(copy))
    calls = []

    def counting_train(*args, **kwargs):
        calls.append(args[0].out_dir)
        return train(*args, **kwargs)

    monkeypatch.setattr(study_run, "train", counting_train)
    again = run_study(ablate_config, train_config, model_config)
    assert calls == []
    assert again["summary"] == study.result["summary"]

    # An unfinished run (no done.json) trains again, from scratch, and only that one.
    (copy / "none" / "seed1338" / "done.json").unlink()
    again = run_study(ablate_config, train_config, model_config)
    assert calls == [str(copy / "none" / "seed1338")]
    assert len(again["runs"]) == 2 * len(POS_ENCODINGS)

    # A finished run made with other settings is not silently reused: a flag, or a cell's own setting.
    with pytest.raises(ValueError, match="max_iters"):
        run_study(ablate_config, replace(train_config, max_iters=6, lr_decay_iters=6), model_config)
    with pytest.raises(ValueError, match="dropout.*2 of its finished runs have other settings"):
        run_study(replace(ablate_config, variants=["none"], grid="dropout=0.0"), train_config,
                  replace(model_config, dropout=0.1))
    # A run recorded before a setting existed is refused too: its value is unknown.
    done = copy / "learned" / "seed1337" / "done.json"
    record = json.loads(done.read_text())
    del record["settings"]["model_config"]["bias"]
    done.write_text(run_records.sealed(record))  # as older code wrote it, whole: its digest matches
    with pytest.raises(ValueError, match="learned.*bias"):
        run_study(ablate_config, train_config, model_config)
    assert calls == [str(copy / "none" / "seed1338")]


def test_options_from_the_config_files():
    sections = (AblateConfig, TrainConfig, GPTConfig)
    for path in ("config/ablate_positions.py", "config/ablate_positions_sweep.py", "config/ablate_init_std.py"):
        ablate_config, train_config, model_config = parse_options([path], sections, "ablate.py", "",
                                                                  skip=PER_RUN)
        assert ablate_config.study_dir.startswith("out-ablate") and model_config.block_size == 64
        assert train_config.lr_decay_iters == train_config.max_iters
        assert study_cells(ablate_config)
    for flag in ("--seed=1", "--out_dir=x", "--init_from=resume"):  # set per run by the study
        with pytest.raises(OptionError, match="unknown option"):
            parse_options([flag], sections, "ablate.py", "", skip=PER_RUN)
    with pytest.raises(OptionError, match="protocols"):
        parse_options(["--protocols=sliding,strided"], sections, "ablate.py", "", skip=PER_RUN)


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_study_exits_nonzero_without_done(study, tmp_path, script_env, sig, status):
    ablate_config, train_config, model_config = study.configs
    command = [sys.executable, "ablate.py", f"--study_dir={tmp_path / 'study'}", f"--dataset={study.root / 'data'}",
               "--variants=none", "--seeds=1", "--max_iters=100000", "--eval_interval=100000", "--log_interval=1",
               "--n_layer=1", "--n_head=2", "--n_embd=16", f"--block_size={BLOCK}", "--batch_size=2",
               "--device=cpu", "--compile=False", "--progress=False", "--lr_decay_iters=100000"]
    process = subprocess.Popen(command, cwd=ablate.__file__.rsplit("/", 1)[0], env=script_env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = tmp_path / "study" / "none" / "seed1337" / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.exists() and metrics.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(process.pid, sig)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == status, output
    assert "done" not in output and "interrupted" in output
    assert not (tmp_path / "study" / "none" / "seed1337" / "done.json").exists()


def test_sweeps_are_found_among_cells_that_differ_in_one_number():
    def record(cell, **settings):
        base = {"pos_encoding": "sinusoidal", "sinusoidal_amplitude": 0.02, "n_layer": 1}
        return {"variant": cell, "settings": {"train_config": {"max_iters": 5},
                                              "model_config": {**base, **settings}}}

    records = [record(f"a{v}", sinusoidal_amplitude=v) for v in (0.01, 0.1, 1.0)]
    records += [record("rope", pos_encoding="rope"), record("two layers", n_layer=2)]
    assert ablate_plots.sweeps(records) == [("sinusoidal_amplitude", {"a0.01": 0.01, "a0.1": 0.1, "a1.0": 1.0})]
    assert ablate_plots.sweeps(records[2:]) == []  # two values of a number are a comparison, not a sweep


def test_result_files_are_written_whole_with_the_usual_permissions(tmp_path):
    path = tmp_path / "results.md"
    path.write_text("old")
    expected = path.stat().st_mode & 0o777  # what a plain open() gives under this umask
    files.write_atomic(path, "new")
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == expected
    assert [p.name for p in tmp_path.iterdir()] == ["results.md"]


def test_a_t5_cell_scored_where_its_buckets_never_trained_is_named():
    """The position study's t5 (32 buckets to distance 128, block 64) trained buckets 0..26 (distance 63 is the
    farthest a 64-token window has): scored at 4x, distances 67 and up fell in buckets 27..31, never trained."""
    t5 = GPTConfig(block_size=64, pos_encoding="t5", t5_num_buckets=32, t5_max_distance=128)
    at_4x = AblateConfig(eval_multipliers=[1.0, 2.0, 4.0])
    line = study_eval.untrained_bucket(t5, at_4x)
    assert "trains buckets 0..26 of 32" in line and "reads buckets 27..31 (distances 67 and more)" in line
    assert study_eval.untrained_bucket(t5, AblateConfig(eval_multipliers=[1.0])) == ""
    assert study_eval.untrained_bucket(t5, replace(at_4x, protocols=["sliding"])) == ""  # windows of 64: trained
    assert study_eval.untrained_bucket(replace(t5, t5_max_distance=64), replace(at_4x, eval_multipliers=[8.0])) == ""
    assert study_eval.untrained_bucket(replace(t5, pos_encoding="learned"), at_4x) == ""


def test_sweeps_read_cells_whose_records_hold_other_settings():
    """Was: a KeyError ending the report of a study whose cells were of encodings with settings of their own
    (partial_rope's partial_rope_fraction is in its records only)."""
    def record(cell: str, **model) -> dict:
        return {"variant": cell, "settings": {"train_config": {"learning_rate": model.pop("lr")},
                                              "model_config": {"pos_encoding": cell.split()[0], **model}}}

    records = [record("learned a", lr=1e-3), record("learned b", lr=3e-3), record("learned c", lr=1e-2),
               record("partial_rope", lr=1e-3, partial_rope_fraction=0.25)]
    assert ablate_plots.sweeps(records) == [("learning_rate", {"learned a": 1e-3, "learned b": 3e-3,
                                                               "learned c": 1e-2})]
