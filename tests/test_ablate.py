"""Tests of ablate.py on a tiny corpus and a tiny model: one study of 5 variants x 2 seeds, trained once for the
module, then checked against independent recomputations (NumPy statistics, the model's own loss, a train() run
of zero steps) and rerun to check that finished runs are skipped.
"""

import csv
import json
import random
import re
import shutil
from dataclasses import replace
from types import SimpleNamespace

import matplotlib.image  # reads PNGs without a display backend
import numpy as np
import pytest
import torch

import ablate
from ablate import AblateConfig, eval_lengths, initial_model, run_plan, run_study
from checkpoint import load_checkpoint, model_from_checkpoint
from dataset import get_batch, load_split, prepare, sample_offsets
from model import POS_ENCODINGS, GPTConfig
from options import OptionError, parse_options
from train import TrainConfig, train

BLOCK = 16
PLOTS = ("val_loss", "loss_by_position", "extrapolation", "position_similarity")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def corpus(n_words: int = 800) -> str:
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler", "in", "mind",
             "suffer", "slings", "arrows"]
    rng = random.Random(0)
    lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(n_words // 8)]
    return "\n".join(lines) + "\n"


def configs(root) -> tuple[AblateConfig, TrainConfig, GPTConfig]:
    ablate_config = AblateConfig(study_dir=str(root / "study"), seeds=2, eval_windows=8, eval_batch_size=3)
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


def table_rows(study_dir) -> dict[str, dict[str, str]]:
    """results.md's table as {variant: {column: cell}}."""
    lines = [line for line in (study_dir / "results.md").read_text().splitlines() if line.startswith("|")]
    split = lambda line: [cell.strip() for cell in line.strip("|").split("|")]
    header = split(lines[0])
    return {cells[0]: dict(zip(header, cells, strict=True)) for cells in map(split, lines[2:])}


def test_every_variant_trains(study):
    records = done_records(study.dir)
    assert sorted((r["variant"], r["seed"]) for r in records) == sorted(
        (v, s) for v in POS_ENCODINGS for s in (1337, 1338))
    for r in records:
        run_dir = study.dir / r["variant"] / f"seed{r['seed']}"
        assert r["iter_num"] == 4 and (run_dir / "ckpt.pt").is_file()
        assert [e["iter"] for e in r["evals"]] == [0, 2, 4]
        assert all(np.isfinite(e["val_loss"]) for e in r["evals"])
        # training moved the weights away from their initialisation
        assert r["evals"][-1]["train_loss"] < r["evals"][0]["train_loss"]


def test_shared_weights_start_identical(study):
    plan = run_plan(*study.configs)
    run = {(r["variant"], r["seed"]): r for r in plan}
    for seed in (1337, 1338):
        models = {v: initial_model(run[v, seed]).state_dict() for v in POS_ENCODINGS}
        shared = set(models["none"])
        assert shared == set(models["learned"]) - {"input_layer.wpe"}
        for variant in ("learned", "sinusoidal", "rope", "alibi"):
            assert shared <= set(models[variant]) and len(models[variant]) - len(shared) == (variant == "learned")
            for name in shared:
                assert torch.equal(models[variant][name], models["none"][name]), (variant, name)
    other_seed = initial_model(run["none", 1338]).state_dict()["input_layer.wte"]
    assert not torch.equal(initial_model(run["none", 1337]).state_dict()["input_layer.wte"], other_seed)


def test_initial_model_is_what_train_starts_from(study, tmp_path):
    """The 'before' heatmap rebuilds the initial table; a zero-step train() saves the real one."""
    run = next(r for r in run_plan(*study.configs) if r["variant"] == "learned")
    train(replace(run["train_config"], out_dir=str(tmp_path), max_iters=0), replace(run["model_config"]))
    saved = load_checkpoint(tmp_path / "ckpt.pt")["model"]
    rebuilt = initial_model(run).state_dict()
    assert saved.keys() == rebuilt.keys()
    for name in saved:
        assert torch.equal(saved[name], rebuilt[name]), name


def test_results_folder_has_table_csv_json_and_plots(study):
    for name in ("results.md", "results.csv", "results.json"):
        assert (study.dir / name).stat().st_size > 0
    for name in PLOTS:
        path = study.dir / f"{name}.png"
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        assert image.std() > 0  # not a blank canvas
    assert "final" in (study.dir / "results.md").read_text()  # the table says which checkpoint it evaluates


def test_learned_long_context_cells_are_marked(study):
    rows = table_rows(study.dir)
    lengths = eval_lengths(BLOCK, study.configs[0].eval_multipliers)
    assert max(lengths) == 4 * BLOCK
    number = re.compile(r"^\d+\.\d{4} ± \d+\.\d{4}$")
    for n in lengths:
        column = next(c for c in rows["learned"] if c.startswith(f"loss L={n} "))
        if n <= BLOCK:
            assert number.match(rows["learned"][column])
        else:
            assert rows["learned"][column] == f"n/a: no position rows past {BLOCK}"
        assert all(number.match(rows[v][column]) for v in ("sinusoidal", "rope", "alibi", "none"))
    summary = {row["variant"]: row for row in json.loads((study.dir / "results.json").read_text())["summary"]}
    assert summary["learned"]["loss"][str(4 * BLOCK)] is None
    assert summary["none"]["loss"][str(4 * BLOCK)] is not None
    with (study.dir / "results.csv").open() as file:
        csv_rows = {row["variant"]: row for row in csv.DictReader(file)}
    assert csv_rows["learned"][f"loss_L{4 * BLOCK}_mean"] == "n/a"
    assert float(csv_rows["sinusoidal"][f"loss_L{4 * BLOCK}_mean"]) > 0


def test_table_matches_recomputation(study):
    rows = table_rows(study.dir)
    with (study.dir / "results.csv").open() as file:
        csv_rows = {row["variant"]: row for row in csv.DictReader(file)}
    for variant in POS_ENCODINGS:
        best = [r["best_val_loss"] for r in done_records(study.dir) if r["variant"] == variant]
        assert len(best) == 2
        mean, std = np.mean(best), np.std(best, ddof=1)
        assert rows[variant]["best val loss"] == f"{mean:.4f} ± {std:.4f}"
        assert float(csv_rows[variant]["best_val_loss_mean"]) == pytest.approx(mean, rel=1e-12)
        assert float(csv_rows[variant]["best_val_loss_std"]) == pytest.approx(std, rel=1e-12)


def test_long_context_loss_matches_the_models_own_loss(study):
    """Recompute one run's loss at 4x block_size with the model's built-in mean cross-entropy, in one batch."""
    ablate_config, train_config, _ = study.configs
    run_dir = study.dir / "sinusoidal" / "seed1338"
    model = model_from_checkpoint(load_checkpoint(run_dir / "ckpt.pt")).eval()
    val = load_split(study.root / "data", "val", 4 * BLOCK)
    offsets = sample_offsets(len(val), 4 * BLOCK, ablate_config.eval_windows,
                             torch.Generator().manual_seed(ablate_config.eval_seed))
    for n in (BLOCK, 4 * BLOCK):
        x, y = get_batch(val, offsets, n, torch.device("cpu"))
        with torch.no_grad():
            expected = model(x, y)[1].item()
        stored = json.loads((run_dir / "eval.json").read_text())["loss"][str(n)]
        assert stored == pytest.approx(expected, rel=1e-5)
    # Shorter windows are prefixes of the longer ones and the model is causal: the 1x curve starts the 4x one.
    per_position = json.loads((run_dir / "eval.json").read_text())["per_position"]
    assert per_position[str(BLOCK)] == pytest.approx(per_position[str(4 * BLOCK)][:BLOCK], rel=1e-5)


def test_rerun_skips_finished_runs(study, tmp_path, monkeypatch):
    copy = tmp_path / "study"
    shutil.copytree(study.dir, copy)
    ablate_config, train_config, model_config = study.configs
    ablate_config = replace(ablate_config, study_dir=str(copy))
    calls = []

    def counting_train(*args, **kwargs):
        calls.append(args[0].out_dir)
        return train(*args, **kwargs)

    monkeypatch.setattr(ablate, "train", counting_train)
    again = run_study(ablate_config, train_config, model_config)
    assert calls == []
    assert again["summary"] == study.result["summary"]

    # An unfinished run (no done.json) trains again, from scratch, and only that one.
    (copy / "none" / "seed1338" / "done.json").unlink()
    again = run_study(ablate_config, train_config, model_config)
    assert calls == [str(copy / "none" / "seed1338")]
    assert len(again["runs"]) == 2 * len(POS_ENCODINGS)

    # A finished run made with other settings is not silently reused.
    with pytest.raises(ValueError, match="max_iters"):
        run_study(ablate_config, replace(train_config, max_iters=6, lr_decay_iters=6), model_config)


def test_options_from_the_config_file():
    sections = (AblateConfig, TrainConfig, GPTConfig)
    ablate_config, train_config, model_config = parse_options(
        ["config/ablate_shakespeare_char.py", "--seeds=2", "--variants=learned,none"], sections, "ablate.py", "",
        skip=ablate.SKIP)
    assert ablate_config.study_dir.startswith("out-ablate") and ablate_config.seeds == 2
    assert ablate_config.variants == ["learned", "none"]
    assert train_config.lr_decay_iters == train_config.max_iters and model_config.block_size == 64
    for flag in ("--seed=1", "--pos_encoding=none", "--out_dir=x"):  # set per run by the study
        with pytest.raises(OptionError, match="unknown option"):
            parse_options([flag], sections, "ablate.py", "", skip=ablate.SKIP)
    with pytest.raises(OptionError, match="variants"):
        parse_options(["--variants=learned,rotary"], sections, "ablate.py", "", skip=ablate.SKIP)
