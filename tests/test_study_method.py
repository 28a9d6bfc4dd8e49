"""Tests of the study method (ablate.py with study/plan.py, schedule.py, paired_stats.py): learning-rate schedules
against their formulas, TOST against scipy and hand-worked values, bits per byte against hand-counted text,
budgets with wsd branches against a run trained from scratch, the learning-rate sweep blind to the test split,
reuse that refuses another split or schedule, cell labels, and every bad cell or evaluation setting refused in
one line before anything trains.
"""

import json
import math
import random
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import cli
from scipy import stats

import ablate
from errors import OptionError, main_guard
from model import GPTConfig
from study import plan as study_plan
from study import run as study_run
from study import stages as study_stages
from study.cells import cell_label, study_cells
from study.config import AblateConfig
from study.evaluation import bits_per, target_counts
from study.paired_stats import tost, verdict
from study.plan import lr_sweep_plan, run_plan
from study.report import study_comparisons, with_history
from study.stages import own_learning_rates, run_study
from text.dataset import PrepareConfig, prepare, sample_offsets
from text.tokenizer import CharTokenizer, GPT2Tokenizer
from train import TrainConfig, train
from training.checkpoint import load_checkpoint
from training.schedule import cosine_lr, get_lr, wsd_lr

BLOCK = 16


# ---------------------------------------------------------------------------------------------------- schedules


@pytest.mark.parametrize("shape", ["linear", "1-sqrt"])
def test_wsd_rates_follow_the_formula(shape):
    config = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=10, max_iters=100, lr_schedule="wsd",
                         wsd_decay_fraction=0.2, wsd_decay_shape=shape)
    expected = []
    for it in range(120):
        if it < 10:
            expected.append((it + 1) / 11)  # warmup, as the cosine's
        elif it < 80:  # stable until the last 20 steps
            expected.append(1.0)
        else:
            p = min(1.0, (it - 80) / 20)
            expected.append(0.1 + 0.9 * ((1 - p) if shape == "linear" else (1 - math.sqrt(p))))
    assert [get_lr(it, config) for it in range(120)] == pytest.approx(expected, rel=1e-12)
    assert get_lr(90, config) == pytest.approx(0.1 + 0.9 * (0.5 if shape == "linear" else 1 - math.sqrt(0.5)))
    # Until its decay starts, a wsd run of any budget follows the same rates: what lets a budget branch.
    longer = replace(config, max_iters=1000)
    assert [get_lr(it, longer) for it in range(80)] == [get_lr(it, config) for it in range(80)]
    stable = replace(config, max_iters=80, wsd_decay_fraction=0.0)
    assert [get_lr(it, stable) for it in range(80)] == [get_lr(it, config) for it in range(80)]


def test_cosine_is_the_schedule_train_used_before():
    config = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=10, lr_decay_iters=110)
    assert get_lr(60, config) == cosine_lr(60, 1.0, 0.1, 10, 110) == pytest.approx(0.55)
    assert wsd_lr(5, 1.0, 0.1, 10, 100, 0.2, "linear") == cosine_lr(5, 1.0, 0.1, 10, 110)


@pytest.mark.parametrize("bad, fragment", [(dict(lr_schedule="step"), "lr_schedule"),
                                           (dict(wsd_decay_shape="cubic"), "wsd_decay_shape"),
                                           (dict(wsd_decay_fraction=1.5), "wsd_decay_fraction"),
                                           (dict(lr_schedule="wsd", max_iters=100, warmup_iters=90), "warmup")])
def test_schedule_settings_are_checked(bad, fragment):
    with pytest.raises(ValueError, match=fragment):
        TrainConfig(**bad)


# ---------------------------------------------------------------------------------------------------- TOST


def scipy_tost(d: list[float], margin: float) -> float:
    lower = stats.ttest_1samp(d, -margin, alternative="greater").pvalue
    upper = stats.ttest_1samp(d, margin, alternative="less").pvalue
    return max(lower, upper)


@pytest.mark.parametrize("d, margin", [([0.01, -0.02, 0.005, 0.0, 0.015, -0.01], 0.05),
                                       ([0.3, 0.25, 0.31, 0.28], 0.05),
                                       ([0.04, -0.03, 0.06, -0.05, 0.02], 0.02),
                                       ([-0.1, -0.12, -0.09], 0.2)])
def test_tost_matches_scipy(d, margin):
    assert tost(d, margin) == pytest.approx(scipy_tost(d, margin), rel=1e-10)


def test_tost_by_hand():
    # d = 0.01, 0.03, 0.02: mean 0.02, sd 0.01, se 0.01 / sqrt(3) = 0.0057735; margin 0.05:
    # t_lower = (0.02 + 0.05) / se = 12.124, t_upper = (0.02 - 0.05) / se = -5.196; df 2.
    # p_upper = P(T2 < -5.196) = 0.01755 (the larger): equivalent at 0.05.
    d = [0.01, 0.03, 0.02]
    se = 0.01 / math.sqrt(3)
    t_upper = (0.02 - 0.05) / se
    assert t_upper == pytest.approx(-5.196152, rel=1e-6)
    # Student's t with 2 df has the closed-form cdf 1/2 + t / (2 sqrt(2 + t^2)).
    by_hand = 0.5 + t_upper / (2 * math.sqrt(2 + t_upper ** 2))
    assert by_hand == pytest.approx(0.017549, rel=1e-4)  # t^2 = 27: 1/2 - 5.196152 / (2 sqrt(29))
    assert tost(d, 0.05) == pytest.approx(by_hand, rel=1e-9)
    # The same differences with a margin of 0.025: t_upper = -0.866, p = 0.239: not shown equivalent, and the
    # two-sided t test (t = 0.02 / se = 3.46, p = 0.074) does not show a difference: inconclusive.
    p = tost(d, 0.025)
    assert p == pytest.approx(0.5 - 0.866025 / (2 * math.sqrt(2 + 0.75)), rel=1e-5)
    two_sided = 2 * (0.5 - 3.464102 / (2 * math.sqrt(2 + 12)))
    assert stats.ttest_1samp(d, 0).pvalue == pytest.approx(two_sided, rel=1e-5) == pytest.approx(0.0742, rel=1e-3)
    assert p > 0.05 and two_sided > 0.05
    assert verdict(p < 0.05, stats.ttest_1samp(d, 0).pvalue < 0.05) == "inconclusive"
    assert verdict(True, False) == "equivalent" and verdict(False, True) == "different"
    assert math.isnan(tost([0.01], 0.05))  # one seed: no test
    assert math.isnan(tost([0.01, 0.01], 0.05)) and math.isnan(tost([0.1, 0.1], 0.05))  # no spread: no test
    assert verdict(True, True, "2 seeds, no spread: no test") == "2 seeds, no spread: no test"


# ---------------------------------------------------------------------------------------------------- bits per byte


@pytest.mark.gpt2_bpe
def test_bits_per_byte_of_hand_counted_text():
    text = "héllo, wörld\n"  # 13 characters, 15 UTF-8 bytes (é and ö take 2)
    char = CharTokenizer.from_text(text)
    ids = np.array(char.encode(text))
    counts = target_counts(ids, char.description())  # the targets: everything after the first character
    assert counts == {"tokens": 12, "bytes": 14, "chars": 12}
    assert bits_per(1.0, counts, "bytes") == pytest.approx(12 / 14 / math.log(2))
    gpt2 = GPT2Tokenizer()
    ids = np.array(gpt2.encode("The naïve café\n"))  # 15 characters, 17 bytes; GPT-2's first token "The"
    counts = target_counts(ids, gpt2.description())
    assert gpt2.decode([int(ids[0])]) == "The"
    assert counts["bytes"] == 17 - 3 and counts["chars"] == 15 - 3 and counts["tokens"] == len(ids) - 1
    assert bits_per(2.0, counts, "chars") == pytest.approx(2.0 * (len(ids) - 1) / 12 / math.log(2))


def test_train_logs_bits_per_byte_of_its_estimate(tmp_path):
    """train.py's val estimate in bits per byte: its batches' targets decoded to text and counted by hand."""
    rng = random.Random(1)
    text = "".join(rng.choice(["a", "b", "é", "ö", " ", "\n"]) for _ in range(3000))
    prepare(text, tmp_path / "data", "char")
    config = TrainConfig(dataset=str(tmp_path / "data"), out_dir=str(tmp_path / "run"), max_iters=0, eval_iters=3,
                         batch_size=2, device="cpu", compile=False, progress=False)
    result = train(config, GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=BLOCK))
    tokenizer = CharTokenizer.from_text(text)
    val = np.fromfile(tmp_path / "data" / "val.bin", dtype=np.uint16)
    generator = torch.Generator().manual_seed(config.seed)
    text_bytes = 0
    for _ in range(3):  # estimate_loss's batches: the same offsets every call
        for start in sample_offsets(len(val), BLOCK, 2, generator).tolist():
            text_bytes += len(tokenizer.decode(val[start + 1:start + 1 + BLOCK].tolist()).encode("utf-8"))
    assert text_bytes > 3 * 2 * BLOCK  # é and ö take two bytes
    first = result["evals"][0]
    assert first["val_bits_per_byte"] == pytest.approx(first["val_loss"] * 3 * 2 * BLOCK / text_bytes / math.log(2))
    logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert logged["val_bits_per_byte"] == first["val_bits_per_byte"] and logged["eval_train_bits_per_byte"] > 0


# ---------------------------------------------------------------------------------------------------- cells


def test_cell_labels_are_what_a_person_writes():
    assert cell_label({"pos_encoding": "sinusoidal", "sinusoidal_amplitude": 0.1}) == "sinusoidal 0.1"
    assert cell_label({"pos_encoding": "learned", "learned_init_std": 0.01}) == "learned init std 0.01"
    assert cell_label({"pos_encoding": "rope", "learning_rate": 0.003}) == "rope lr 0.003"
    assert cell_label({"pos_encoding": "none", "n_layer": 2}) == "none n_layer=2"
    assert cell_label({}) == "base"


# ---------------------------------------------------------------------------------------------------- studies


def corpus(n_lines: int = 200) -> str:
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler", "in", "mind"]
    rng = random.Random(0)
    return "\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(n_lines)) + "\n"


def tiny(root, **ablate_settings) -> tuple[AblateConfig, TrainConfig, GPTConfig]:
    ablate_config = AblateConfig(**{"study_dir": str(root / "study"), "variants": ["learned", "rope"], "seeds": 2,
                                    "eval_multipliers": [1], "protocols": ["nonoverlapping"], "eval_batch_size": 16,
                                    **ablate_settings})
    train_config = TrainConfig(dataset=str(root / "data"), max_iters=8, eval_interval=4, eval_iters=2,
                               log_interval=1, batch_size=4, warmup_iters=1, lr_decay_iters=8, learning_rate=1e-2,
                               min_lr=1e-3, device="cpu", compile=False, progress=False)
    return ablate_config, train_config, GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=BLOCK)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("method")
    prepare(corpus(), root / "data", "char")
    return root / "data"


def study_root(tmp_path, data_dir):
    shutil.copytree(data_dir, tmp_path / "data")
    return tmp_path


def test_wsd_branch_is_the_run_trained_from_scratch(tmp_path, data_dir):
    """A budget's branch (a copy of the stable run's checkpoint, resumed with the decay) ends with the weights of
    a wsd run of that budget trained from scratch, and trains with the formula's rates."""
    root = study_root(tmp_path, data_dir)
    ablate_config, train_config, model_config = tiny(root, variants=["rope"], seeds=1, budgets=[8, 12])
    train_config = replace(train_config, lr_schedule="wsd", wsd_decay_fraction=0.5, wsd_decay_shape="linear")
    plan = run_plan(ablate_config, train_config, model_config)
    assert [(r.role, r.budget, r.start_from and r.start_from.name) for r in plan] == [
        ("stable", 4, None), ("run", 8, "stable4"), ("stable", 6, "stable4"), ("run", 12, "stable6")]
    result = run_study(ablate_config, train_config, model_config)
    branch = plan[-1]
    alone = train(replace(branch.train_config, out_dir=str(tmp_path / "alone"), init_from="scratch"),
                  replace(branch.model_config))
    assert alone["iter_num"] == 12
    branched = load_checkpoint(branch.dir / "ckpt.pt")["model"]
    for name, weight in load_checkpoint(tmp_path / "alone" / "ckpt.pt")["model"].items():
        torch.testing.assert_close(branched[name], weight, rtol=1e-5, atol=1e-6)
    logged = [json.loads(line) for line in (branch.dir / "metrics.jsonl").read_text().splitlines()]
    rates = {r["iter"]: r["lr"] for r in logged if "lr" in r}
    assert sorted(rates) == list(range(7, 13))  # the branch trains steps 6..11 (logged after each)
    for it, lr in rates.items():
        assert lr == pytest.approx(1e-3 + (1e-2 - 1e-3) * (1 - (it - 1 - 6) / 6), rel=1e-12)
    curve = with_history(plan, result["runs"])[-1]["evals"]  # the branch's curve, from step 0
    assert [e["iter"] for e in curve] == [0, 4, 6, 8, 12]
    budgets = result["budgets"]["by_budget"]
    assert sorted(budgets) == [8, 12] and (tmp_path / "study" / "budgets.png").is_file()
    assert budgets[12]["rows"][0]["tokens_seen"] == 12 * 4 * BLOCK
    means = [budgets[b]["rows"][0]["loss"][f"nonoverlapping {BLOCK}"][0] for b in (8, 12)]
    text = (tmp_path / "study" / "results.md").read_text()
    assert f"Change of the mean loss from 8 to 12 steps: rope {(means[1] - means[0]) / means[0]:+.2%}." in text


def test_extra_budgets_extend_some_cells_on_their_first_seeds_after_the_whole_plan(tmp_path, data_dir):
    """extra_budgets (the issue's check of whether the largest budget still moves): the plan is the study's, then
    the chosen cells' first seeds go on from their last constant-rate run to the larger budget; the report shows
    that budget for those cells alone, and each gap's change on the seeds both budgets have."""
    root = study_root(tmp_path, data_dir)
    ablate_config, train_config, model_config = tiny(root, variants=["learned", "rope", "none"], budgets=[8],
                                                     extra_budgets=[12], extra_variants=["learned", "rope"],
                                                     seeds=3, extra_seeds=2)
    train_config = replace(train_config, lr_schedule="wsd", wsd_decay_fraction=0.5)
    plan = run_plan(ablate_config, train_config, model_config)
    regular = run_plan(replace(ablate_config, extra_budgets=[], extra_variants=[]), train_config, model_config)
    assert plan[:len(regular)] == regular
    assert [(r.variant, r.seed, r.role, r.budget, r.start_from and r.start_from.name) for r in plan[len(regular):]] \
        == [(cell, seed, role, budget, start) for seed in (1337, 1338) for cell in ("learned", "rope")
            for role, budget, start in (("stable", 6, "stable4"), ("run", 12, "stable6"))]
    result = run_study(ablate_config, train_config, model_config)
    at_12 = result["budgets"]["by_budget"][12]
    assert [(row["variant"], row["seeds"]) for row in at_12["rows"]] == [("learned", [1337, 1338]),
                                                                          ("rope", [1337, 1338])]
    [move] = [m for m in result["budgets"]["moves"] if m["to"] == 12]
    [rope_8] = [g for g in result["budgets"]["by_budget"][8]["gaps"] if g["a"] == "rope"]
    [rope_12] = at_12["gaps"]
    assert rope_8["seeds"] == [1337, 1338, 1339] and rope_12["seeds"] == [1337, 1338]
    assert move["cells"]["rope"]["change"] == pytest.approx(rope_12["mean"] - np.mean(rope_8["differences"][:2]))
    assert "rope" in (tmp_path / "study" / "results.md").read_text().split("from 8 to 12 steps")[1]
    with pytest.raises(OptionError, match="extra_variants: 'alibi' is not a cell of this study"):
        run_plan(replace(ablate_config, extra_variants=["alibi"]), train_config, model_config)
    for bad, message in (({"extra_budgets": [8]}, "larger than every one of budgets"),
                         ({"extra_variants": []}, "give both"), ({"extra_seeds": 4}, "must be 1..seeds=3")):
        with pytest.raises(ValueError, match=message):
            replace(ablate_config, **bad)


def test_cosine_budgets_are_separate_whole_schedules(tmp_path, data_dir):
    ablate_config, train_config, model_config = tiny(tmp_path, seeds=1, budgets=[4, 8])
    plan = run_plan(ablate_config, train_config, model_config)
    assert [(r.variant, r.budget, r.train_config.lr_decay_iters, r.start_from) for r in plan] == [
        ("learned", 4, 4, None), ("learned", 8, 8, None), ("rope", 4, 4, None), ("rope", 8, 8, None)]
    assert plan[1].dir == tmp_path / "study" / "learned" / "seed1337" / "8steps"


def sweep_picks(root, monkeypatch) -> tuple[dict, list[str]]:
    ablate_config, train_config, model_config = tiny(root, lr_sweep=[3e-3, 3e-2], lr_sweep_seeds=2)
    loaded = []
    real = study_run.load_split

    def spy(data_dir, split, block_size):
        loaded.append(split)
        return real(data_dir, split, block_size)

    monkeypatch.setattr(study_run, "load_split", spy)
    cells = study_cells(ablate_config)
    plan = lr_sweep_plan(ablate_config, train_config, model_config, cells)
    sweep, stopped = own_learning_rates(ablate_config, plan, train_config, model_config, cells)
    assert stopped == 0
    return sweep, loaded


def test_learning_rate_sweep_never_reads_the_test_split(tmp_path, data_dir, monkeypatch):
    first, loaded = sweep_picks(study_root(tmp_path / "a", data_dir), monkeypatch)
    assert set(loaded) == {"val"}  # what the sweep scored: val alone
    assert set(first["picks"]) == {"learned", "rope"} and set(first["picks"].values()) <= {3e-3, 3e-2}
    # Other test tokens (a test split of random ids), same val: the same val losses and the same picks.
    other = study_root(tmp_path / "b", data_dir)
    test_bin = other / "data" / "test.bin"
    tokens = np.fromfile(test_bin, dtype=np.uint16)
    np.random.default_rng(0).integers(0, tokens.max() + 1, len(tokens)).astype(np.uint16).tofile(test_bin)
    second, _ = sweep_picks(other, monkeypatch)
    assert second["picks"] == first["picks"] and second["val"] == first["val"]


real_entry = study_plan.entry


def test_a_sweep_that_peeks_at_test_is_caught(tmp_path, data_dir, monkeypatch):
    """The guard the previous test relies on: a sweep scored on test fails."""
    monkeypatch.setattr(study_plan, "entry", lambda *args, **kwargs: replace(real_entry(*args, **kwargs), split="test"))
    with pytest.raises(AssertionError, match="test split"):
        sweep_picks(study_root(tmp_path, data_dir), monkeypatch)


def test_own_learning_rate_cells_join_the_headline(tmp_path, data_dir, monkeypatch):
    root = study_root(tmp_path, data_dir)
    ablate_config, train_config, model_config = tiny(root, lr_sweep=[1e-2, 5e-2], lr_sweep_seeds=1, seeds=2,
                                                     equivalence_margin=0.05)
    monkeypatch.setattr(study_stages, "pick_learning_rates", lambda val: {"learned": 1e-2, "rope": 5e-2})
    result = run_study(ablate_config, train_config, model_config)
    assert result["lr_sweep"]["own"] == {"learned": "learned", "rope": "rope learning_rate=0.05"}
    labels = [row["label"] for row in result["summary"]]
    assert labels == ["learned", "rope", "rope lr 0.05"]
    own = next(r for r in result["runs"] if r["variant"] == "rope learning_rate=0.05")
    assert own["settings"]["train_config"]["min_lr"] == pytest.approx(5e-3)  # min_lr keeps its ratio
    text = (tmp_path / "study" / "results.md").read_text()
    assert "## Learning rate per cell" in text and "| rope lr 0.05 |" in text
    for family in ("training length", "own learning rate against the common one"):
        for row in result["comparisons"][family]:
            assert row["verdict"] in ("equivalent", "different", "inconclusive")
            assert row["tost_p"] == pytest.approx(scipy_tost(row["differences"], 0.05), rel=1e-9)


def test_reuse_refuses_another_split_or_schedule(tmp_path, data_dir):
    root = study_root(tmp_path, data_dir)
    ablate_config, train_config, model_config = tiny(root, variants=["rope"], seeds=1)
    run_study(ablate_config, train_config, model_config)
    with pytest.raises(ValueError, match="lr_schedule"):
        run_study(ablate_config, replace(train_config, lr_schedule="wsd"), model_config)
    prepare(corpus(), root / "data", "char", PrepareConfig(test_fraction=0.2))  # the same text, cut elsewhere
    with pytest.raises(ValueError, match="split"):
        run_study(ablate_config, train_config, model_config)


# ---------------------------------------------------------------------------------------------------- refused


def ablate_cli(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        main_guard(ablate.main, [str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.parametrize("flags, fragments", [
    (["--variants=learned,lerned"], ["lerned", "pos_encoding"]),
    (["--variants=dropout=1.5"], ["dropout=1.5", "[0, 1)"]),
    (["--variants=learning_rate=-1"], ["learning_rate=-1", "> 0"]),
    (["--variants=rope n_embd=30"], ["'rope n_embd=30'", "head_dim", "15"]),  # n_head=2
    (["--sliding_stride=80", "--sliding_window=64"], ["sliding_stride=80", "64"]),
    (["--sliding_stride=80"], ["sliding_stride=80", "window (16 tokens)"]),
    (["--eval_multipliers=1,nan"], ["eval_multipliers", "finite"]),
    (["--eval_multipliers=1,inf"], ["eval_multipliers", "finite"]),
    (["--variants=learned rope"], ["'learned rope'", "twice", "--variants=learned,rope"]),
    (["--variants=learned learned_init_std=0.01 learned_init_std=0.02"], ["learned_init_std twice"]),
    (["--seeds=1000000000"], ["seeds=1,000,000,000", "MAX_SEEDS=10,000"]),
    (["--first_seed=9223372036854775807", "--seeds=2"], ["9223372036854775808", "64-bit"]),
    (["--first_seed=99999999999999999999"], ["64-bit"]),
    (["--lr_sweep=1e-3", "--lr_sweep_first_seed=1337"], ["overlap", "--lr_sweep_first_seed"]),
    (["--budgets=10,10"], ["budgets"]),
    (["--budgets=10", "--lr_schedule=wsd", "--max_iters=100", "--warmup_iters=9"], ["budget 10", "warmup_iters=9"]),
    (["--equivalence_margin=nan"], ["equivalence_margin"]),
    # issue 28
    (["--variants=", "--grid=max_iters=5;max_iters=10"], ["grid sets max_iters twice", "'max_iters=5' and "
                                                          "'max_iters=10'", "--grid='max_iters=5,10'"]),
    (["--grid=max_iters=5;n_layer=1,2;max_iters=5,7"], ["grid sets max_iters twice", "--grid='max_iters=5,7'"]),
    (["--equivalence_margin=inf"], ["equivalence_margin=inf must be a finite number >= 0"]),
    (["--jobs=0"], ["jobs=0 must be at least 1"]),
    (["--jobs=-1"], ["jobs=-1 must be at least 1"]),
    (["--run_index=-2"], ["run_index=-2 must be a run's number, 0 or more", "--list_runs", "-1 for every run"]),
    (["--jobs=2", "--run_index=0"], ["choose one of --jobs, --run_index and --report_only"]),
    (["--eval_multipliers=1,20000"], ["eval_multipliers=[1.0, 20000.0] make an eval length of 320,000 tokens",
                                      "(20000 x block_size=16)", "give multipliers of at most"]),
    (["--lr_schedule=wsd", "--decay_lr=False"], ["lr_schedule='wsd'", "decay_lr=False", "--lr_schedule"]),
])
def test_bad_cells_and_settings_are_one_line_before_training(tmp_path, data_dir, capsys, flags, fragments):
    base = [f"--study_dir={tmp_path / 'study'}", f"--dataset={data_dir}", "--n_layer=1", "--n_head=2",
            "--n_embd=16", f"--block_size={BLOCK}", "--device=cpu", "--compile=False", "--max_iters=10",
            "--lr_decay_iters=10", "--warmup_iters=1", "--progress=False"]
    code, output = ablate_cli(base + flags, capsys)
    assert code == 2, output
    assert "Traceback" not in output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert not (tmp_path / "study").exists()  # refused before anything was made


@pytest.mark.parametrize("flags, message", [
    (["--lr_sweep_seeds=3"], "error: lr_sweep_seeds is a setting of lr_sweep, and this study's lr_sweep is [] (no "
                             "sweep): it would do nothing; drop it, or give --lr_sweep=3e-4,1e-3"),
    (["--lr_sweep_budget=4", "--lr_sweep_first_seed=7"], "error: lr_sweep_budget is a setting of lr_sweep, and this "
     "study's lr_sweep is [] (no sweep); lr_sweep_first_seed is a setting of lr_sweep"),
    (["--extra_seeds", "2"], "error: extra_seeds is a setting of extra_budgets, and this study's extra_budgets is [] "
                             "(no extra budget): it would do nothing; drop it, or give --extra_budgets with "
                             "--extra_variants"),
    (["--protocols=nonoverlapping", "--sliding_window=8", "--sliding_stride=4"],
     "error: sliding_window is a setting of protocols=sliding, and this study's protocols are nonoverlapping; "
     "sliding_stride is a setting of protocols=sliding, and this study's protocols are nonoverlapping: they would do "
     "nothing; drop them, or add sliding to --protocols"),
])
def test_a_study_flag_that_would_do_nothing_is_refused_before_the_study(tmp_path, data_dir, capsys, flags, message):
    """Was: studied without a word, with no sweep, no extra budget or no sliding protocol to read them."""
    base = [f"--study_dir={tmp_path / 'study'}", f"--dataset={data_dir}", "--variants=rope", "--device=cpu"]
    code, output = ablate_cli(base + flags, capsys)
    assert code == 2 and output.strip().startswith(message) and len(output.strip().splitlines()) == 1, output
    assert not (tmp_path / "study").exists()


def test_a_study_setting_from_a_config_file_is_no_flag_and_runs(tmp_path, data_dir, capsys):
    """A config file's sweep, extra budgets and sliding window, turned off by flags, leave its settings of them
    behind: those are not refused, only ablate.py's flags are."""
    config = tmp_path / "sweep.py"
    config.write_text('lr_sweep = [1e-3, 3e-3]\nlr_sweep_seeds = 1\nlr_sweep_budget = 4\nlr_sweep_first_seed = 50\n'
                      'budgets = [8, 12]\nextra_budgets = [16]\nextra_variants = ["rope"]\nextra_seeds = 1\n'
                      'protocols = ["nonoverlapping", "sliding"]\nsliding_window = 8\nsliding_stride = 4\n')
    flags = ["--lr_sweep=", "--extra_budgets=", "--extra_variants=", "--protocols=nonoverlapping",
             f"--study_dir={tmp_path / 'study'}", f"--dataset={data_dir}", "--variants=rope", "--seeds=1",
             "--list_runs=True", "--device=cpu", "--n_layer=1", "--n_head=2", "--n_embd=16", f"--block_size={BLOCK}"]
    code, output = ablate_cli([config, *flags], capsys)
    assert code == 0 and "error" not in output, output


def test_old_dataset_without_test_split_is_one_line(tmp_path, data_dir, capsys):
    old = tmp_path / "old"
    shutil.copytree(data_dir, old)
    description = json.loads((old / "tokenizer.json").read_text())
    for key in ("test_tokens", "split"):
        description.pop(key)
    (old / "tokenizer.json").write_text(json.dumps(description))
    (old / "test.bin").unlink()
    code, output = ablate_cli([f"--study_dir={tmp_path / 'study'}", f"--dataset={old}", "--variants=none",
                               "--device=cpu", f"--block_size={BLOCK}"], capsys)
    assert code == 2 and "Traceback" not in output and len(output.strip().splitlines()) == 1
    assert "no test split" in output and "--overwrite=True" in output


def test_a_dataset_without_a_test_split_names_eval_split_val(tmp_path, capsys):
    """Prepared with --test_fraction=0: was told to use a smaller block_size or a longer corpus (issue 28)."""
    prepare(corpus(), tmp_path / "data", "char", PrepareConfig(test_fraction=0.0))
    code, output = ablate_cli([f"--study_dir={tmp_path / 'study'}", f"--dataset={tmp_path / 'data'}",
                               "--variants=none", "--device=cpu", f"--block_size={BLOCK}"], capsys)
    assert code == 2 and "Traceback" not in output and len(output.strip().splitlines()) == 1, output
    assert "test.bin holds 0 tokens" in output and "--eval_split=val" in output and "--test_fraction=" in output
    assert "smaller block_size" not in output and not (tmp_path / "study").exists()


@pytest.mark.parametrize("config", ["ablate_positions_bpe.py", "ablate_tokenizers.py",
                                    "ablate_tokenizers_python_docs.py"])
def test_a_study_config_before_its_data_is_prepared_names_preparers_that_exist(tmp_path, capsys, config):
    """Was told to run data/shakespeare_bpe1024/prepare.py, which does not exist (issue 28)."""
    repo = Path(ablate.__file__).resolve().parent
    if any((repo / "data" / name / "tokenizer.json").exists() for name in ("shakespeare_char", "python_docs_char",
                                                                           "shakespeare_bpe1024")):
        pytest.skip("the study's data is prepared in this checkout: it would train")
    code, output = ablate_cli([str(repo / "config" / config), f"--study_dir={tmp_path / 'study'}"], capsys)
    assert code == 2 and "Traceback" not in output and len(output.strip().splitlines()) == 1, output
    named = re.findall(r"run python (data/\S+/prepare\.py)", output)  # not the "does not exist" it names
    assert named and all((repo / script).is_file() for script in named), output
    assert not (tmp_path / "study").exists()


def test_sliding_window_as_long_as_the_eval_length_compares_no_model_with_itself():
    records = []
    for cell in ("a", "b"):
        for seed in (1, 2, 3):
            losses = {str(n): {"loss": 1.0 + seed * 0.01 + (cell == "b") * 0.1 + n / 1000, "per_position": []}
                      for n in (16, 32)}
            records.append({"variant": cell, "seed": seed, "eval": {
                "tokens": 100, "bytes": 100, "chars": 100,
                "protocols": {"nonoverlapping": losses, "sliding": losses}}})
    config = AblateConfig(variants=["a", "b"], sliding_window=32)
    families = study_comparisons(records, ["a", "b"], [16, 32], config, 16)
    assert families["extrapolation against the sliding window"] == [] and families["longer, sliding"] == []
    assert len(families["longer, nonoverlapping"]) == 1
    families = study_comparisons(records, ["a", "b"], [16, 32], replace(config, sliding_window=16), 16)
    assert {r["a"] for r in families["extrapolation against the sliding window"]} == {"a", "b"}


# ---------------------------------------------------------------------------------------------------- many processes


def wsd_flags(study_dir, data, **overrides) -> list[str]:
    settings = dict(study_dir=study_dir, dataset=data, variants="rope", seeds=2, budgets="8,12",
                    eval_multipliers=1, protocols="nonoverlapping", eval_batch_size=16, threads=1, max_iters=12,
                    eval_interval=4, eval_iters=2, log_interval=1, batch_size=4, warmup_iters=1, lr_decay_iters=8,
                    learning_rate=1e-2, min_lr=1e-3, device="cpu", compile=False, progress=False, n_layer=1,
                    n_head=2, n_embd=16, block_size=BLOCK, lr_schedule="wsd", wsd_decay_fraction=0.5)
    return [f"--{k}={v}" for k, v in {**settings, **overrides}.items()]


def budget_numbers(study_dir) -> dict:
    results = json.loads((study_dir / "results.json").read_text())
    return {b: [(r["variant"], r["seeds"], r["loss"]) for r in entry["rows"]]
            for b, entry in results["budgets"]["by_budget"].items()}


def test_run_index_trains_the_segments_its_branch_continues(tmp_path, data_dir, capsys):
    reference = tmp_path / "reference"
    code, out, err = cli(ablate.main, wsd_flags(reference, data_dir), capsys)
    assert code == 0, (out, err)
    study_dir = tmp_path / "study"
    code, out, _ = cli(ablate.main, wsd_flags(study_dir, data_dir, list_runs=True), capsys)
    assert out.strip().splitlines()[-1].startswith("8 runs")  # per seed: stable4, 8steps, stable6, 12steps
    code, out, err = cli(ablate.main, wsd_flags(study_dir, data_dir, run_index=3), capsys)  # seed 1337's 12steps
    trained = re.findall(r"^trained (\S+):", out, re.M)
    assert code == 0 and [Path(t).name for t in trained] == ["stable4", "stable6", "12steps"], (out, err)
    for index in (1, 4, 5, 6, 7):
        code, out, err = cli(ablate.main, wsd_flags(study_dir, data_dir, run_index=index), capsys)
        assert code == 0, (out, err)
    code, out, err = cli(ablate.main, wsd_flags(study_dir, data_dir, report_only=True), capsys)
    assert code == 0 and "trained" not in out, (out, err)
    assert budget_numbers(study_dir) == budget_numbers(reference)


@pytest.mark.slow
def test_jobs_on_wsd_branches_give_the_numbers_of_one_process(tmp_path, data_dir, capsys, script_env):
    import subprocess
    import sys

    reference = tmp_path / "reference"
    assert cli(ablate.main, wsd_flags(reference, data_dir), capsys)[0] == 0
    study_dir = tmp_path / "study"
    process = subprocess.run([sys.executable, "ablate.py", *wsd_flags(study_dir, data_dir, jobs=2, threads=0)],
                             cwd=Path(ablate.__file__).parent, env=script_env, capture_output=True, text=True,
                             timeout=600)
    assert process.returncode == 0, process.stderr
    trained = sorted(Path(t).relative_to(study_dir).as_posix()
                     for t in re.findall(r"^trained (\S+):", process.stdout, re.M))
    assert len(trained) == len(set(trained)) == 8  # each run once
    assert budget_numbers(study_dir) == budget_numbers(reference)


def test_list_runs_numbers_the_sweep_until_it_has_finished(tmp_path, data_dir, capsys):
    flags = wsd_flags(tmp_path / "study", data_dir, budgets="8", seeds=1, lr_sweep="3e-3,3e-2", lr_sweep_seeds=1,
                      variants="learned,rope")
    code, out, _ = cli(ablate.main, [*flags, "--list_runs=True"], capsys)
    assert code == 0 and out.strip().splitlines()[-1].startswith("4 runs")  # 2 cells x 2 rates x 1 seed
    assert "lr_sweep" in out
    for index in range(4):
        assert cli(ablate.main, [*flags, f"--run_index={index}"], capsys)[0] == 0
    code, out, _ = cli(ablate.main, [*flags, "--list_runs=True"], capsys)  # now the headline's runs
    assert code == 0 and "lr_sweep" not in out and "stable4" in out, out


def eval_records(losses: dict[str, dict[int, float]], tokens: dict[str, int]) -> list[dict]:
    """Run records of cells {cell: {seed: loss in nats per token}}, each cell's split of tokens[cell] tokens for
    1000 bytes (and characters)."""
    return [{"variant": cell, "seed": seed, "eval": {"tokens": tokens[cell], "bytes": 1000, "chars": 1000,
                                                     "protocols": {"nonoverlapping": {"64": {"loss": loss}}}}}
            for cell, by_seed in losses.items() for seed, loss in by_seed.items()]


def test_a_pair_with_no_spread_reads_as_no_test_in_every_report():
    """Two cells 0.005 apart in both seeds: no p, no interval, not significant, not equivalent (at a margin of
    0.02 the old code said equivalent from these 2 seeds), in the row, the table and the budget gap; a pair with
    spread beside it is tested as before, and Holm counts the untested row in the family."""
    from study import report as study_report

    records = eval_records({"a": {1: 2.305, 2: 2.310}, "b": {1: 2.300, 2: 2.305}, "c": {1: 2.40, 2: 2.33}},
                           {"a": 1000, "b": 1000, "c": 1000})
    pairs = [(("a", "nonoverlapping"), ("b", "nonoverlapping")), (("a", "nonoverlapping"), ("c", "nonoverlapping"))]
    flat, spread = study_report.comparisons(records, pairs, [64], margin=0.02)
    assert flat["untested"] == "2 seeds, no spread: no test" and flat["verdict"] == flat["untested"]
    assert not (flat["significant"] or flat["holm"] or flat["equivalent"])
    assert math.isnan(flat["p"]) and math.isnan(flat["tost_p"]) and flat["mean"] == pytest.approx(0.005)
    assert spread["untested"] is None and spread["verdict"] in ("equivalent", "different", "inconclusive")
    assert spread["p"] == pytest.approx(stats.ttest_rel([2.305, 2.310], [2.40, 2.33]).pvalue, rel=1e-9)
    table = "\n".join(study_report.comparison_table([flat, spread], 64, {}))
    [row] = [line for line in table.splitlines() if line.startswith("| L=64 (1x) | a | b |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[4] == "2 seeds, no spread: no test" and cells[6] == "n/a" and cells[-2:] == [
        "n/a", "**2 seeds, no spread: no test**"]
    assert "± 0.0000" not in table and "nan" not in table and "equivalent**" not in row
    cell_rows = [{"variant": cell, "tokens_seen": 768, "loss": {"nonoverlapping 64": (2.3, 0.01)},
                  "bits_per_byte": {"nonoverlapping 64": (3.3, 0.01)}} for cell in ("a", "b")]
    budgets = {"reference": "b", "by_budget": {budget: {"rows": cell_rows, "gaps": [flat]} for budget in (8, 12)}}
    lines = study_report.budget_table(budgets, {"labels": {}, "block_size": 64,
                                                "ablate_config": {"equivalence_margin": 0.02}})
    [a_line] = [line for line in lines if line.startswith("| a |")]
    assert a_line.count("; gap +0.0050 2 seeds, no spread: no test |") == 2 and "nan" not in a_line


def test_an_interval_is_printed_from_its_own_ends_and_tost_speaks_the_rows_unit():
    """The 8192 BPE against GPT-2 on Shakespeare (docs/tokenizers_shakespeare/results.json): low 0.004461 prints
    +0.0045 (and 0.004 at three digits, not the 0.005 that rounding +0.0045 again gives). The TOST note names the
    unit the rows were compared in: bits/byte where the cells tokenize differently."""
    from study import report as study_report

    row = {"a": "bpe8192", "b": "gpt2", "a_protocol": "nonoverlapping", "b_protocol": "nonoverlapping",
           "length": 64, "mean": 0.015259918265298822, "low": 0.00446052668961909, "high": 0.026059309840978553,
           "mean_bits_per_byte": 0.015259918265298822, "p": 0.026, "a_wins": 0, "b_wins": 3, "n": 3,
           "significant": True, "holm": True, "unit": "bits/byte", "untested": None}
    assert "| +0.0153 | [+0.0045, +0.0261] |" in "\n".join(study_report.comparison_table([row], 64, {}))
    assert f"{row['low']:.3f}" == "0.004"
    losses = {"char": {1: 1.40, 2: 1.45, 3: 1.38}, "bpe": {1: 4.10, 2: 4.30, 3: 4.00}}
    pairs = [(("char", "nonoverlapping"), ("bpe", "nonoverlapping"))]
    for tokens, unit in (({"char": 1000, "bpe": 300}, "bits/byte"), ({"char": 1000, "bpe": 1000}, "nats/token")):
        families = {"training length": study_report.comparisons(eval_records(losses, tokens), pairs, [64], 0.02)}
        [note] = [line for line in study_report.comparison_notes(families, 0.02) if line.startswith("TOST")]
        assert f"|a − b| ≥ 0.02 {unit}," in note and families["training length"][0]["unit"] == unit


def test_cells_that_tokenize_differently_are_compared_in_bits_per_byte():
    """Cells on datasets that tokenize the same text differently (char vs BPE) score different token counts;
    their paired gap is taken seed by seed in bits per byte, each run's own bytes, by hand here."""
    from study import report as study_report

    def record(cell, seed, loss, tokens, nbytes):
        return {"variant": cell, "seed": seed, "eval": {"tokens": tokens, "bytes": nbytes, "chars": nbytes,
                                                         "protocols": {"nonoverlapping": {"64": {"loss": loss}}}}}

    char = {1: 1.40, 2: 1.45, 3: 1.38}  # nats per token, 1000 tokens = 1000 bytes
    bpe = {1: 4.10, 2: 4.30, 3: 4.00}  # nats per token, 300 tokens for the same 1000 bytes
    records = [record("char", s, v, 1000, 1000) for s, v in char.items()]
    records += [record("bpe", s, v, 300, 1000) for s, v in bpe.items()]
    [row] = study_report.comparisons(records, [(("char", "nonoverlapping"), ("bpe", "nonoverlapping"))], [64])
    by_hand = [(char[s] * 1000 / 1000 - bpe[s] * 300 / 1000) / math.log(2) for s in (1, 2, 3)]
    assert row["unit"] == "bits/byte"
    assert row["mean"] == pytest.approx(np.mean(by_hand), rel=1e-12)
    assert row["mean_bits_per_byte"] == pytest.approx(np.mean(by_hand), rel=1e-12)
    assert row["p"] == pytest.approx(stats.ttest_1samp(by_hand, 0.0).pvalue, rel=1e-9)
    same = [record("a", s, v, 1000, 1000) for s, v in char.items()]
    same += [record("b", s, v, 1000, 1000) for s, v in bpe.items()]
    [row] = study_report.comparisons(same, [(("a", "nonoverlapping"), ("b", "nonoverlapping"))], [64])
    assert row["unit"] == "nats/token" and row["mean"] == pytest.approx(np.mean([char[s] - bpe[s] for s in (1, 2, 3)]))


def test_a_gap_whose_change_is_the_same_in_every_seed_is_still_moving():
    """A larger budget continues the same seeds' runs, so a gap's change between two budgets is paired seed by
    seed (on the seeds both have: an extra budget has fewer). A change far smaller than the gap's own interval but
    the same in every seed is still moving; one that flips sign from seed to seed is not told apart from 0. The
    test is scipy's paired t, Holm over the cells of each pair of budgets."""
    from scipy import stats

    from study import report as study_report

    def gap(cell, seeds, differences):
        return {"a": cell, "seeds": seeds, "differences": differences, "mean": float(np.mean(differences)),
                "untested": None}

    seeds = [1337, 1338, 1339, 1340, 1341]
    rope_2000 = [-0.16, -0.14, -0.10, -0.30, -0.20]
    rope_4000 = [d + c for d, c in zip(rope_2000, [0.010, 0.012, 0.011, 0.009, 0.013], strict=True)]
    none_2000 = [0.31, 0.20, 0.45, 0.28, 0.36]
    none_4000 = [d + c for d, c in zip(none_2000, [0.05, -0.04, 0.03, -0.06, 0.01], strict=True)]
    by_budget = {2000: {"gaps": [gap("rope", seeds, rope_2000), gap("none", seeds, none_2000)]},
                 4000: {"gaps": [gap("rope", seeds, rope_4000), gap("none", seeds, none_4000),
                                 gap("t5", seeds, [0.01, 0.02, 0.0, 0.01, 0.03])]},
                 8000: {"gaps": [gap("rope", [1337, 1339], [-0.13, -0.08])]}}
    first, second = study_report.gap_moves(by_budget)
    assert (first["from"], first["to"], second["from"], second["to"]) == (2000, 4000, 4000, 8000)
    assert sorted(first["cells"]) == ["none", "rope"]  # t5 has no gap at 2000
    rope, changes = first["cells"]["rope"], np.subtract(rope_4000, rope_2000)
    assert rope["p"] == pytest.approx(stats.ttest_rel(rope_4000, rope_2000).pvalue)
    assert (rope["low"], rope["high"]) == pytest.approx(
        stats.t.interval(0.95, len(changes) - 1, loc=changes.mean(), scale=stats.sem(changes)))
    level = stats.t.ppf(0.975, 4) * np.std(rope_4000, ddof=1) / np.sqrt(5)  # the half-width the old rule used
    assert abs(rope["change"]) < level / 5 and rope["p"] < 0.05 / 2 and rope["moved"]  # Holm over 2 cells
    none = first["cells"]["none"]
    assert none["p"] == pytest.approx(stats.ttest_rel(none_4000, none_2000).pvalue) and not none["moved"]
    # 8000 has seeds 1337 and 1339: each one's gap there minus its own at 4000
    assert second["cells"]["rope"]["seeds"] == 2 and second["cells"]["rope"]["change"] == pytest.approx(
        np.mean([-0.13 - rope_4000[0], -0.08 - rope_4000[2]]))
    assert study_report.gap_moves({1000: by_budget[2000]}) == []
    lines = study_report.moves_text({"reference": "learned", "moves": [first, second]}, {"labels": {"rope": "RoPE"}})
    assert "from 2000 to 4000 steps, seed by seed on the 5 seeds both have" in lines[1]
    assert f"RoPE {rope['change']:+.4f} [{rope['low']:+.4f}, {rope['high']:+.4f}], moving" in lines[1]
    assert lines[1].endswith("Still moving: RoPE.")
    assert lines[3].endswith("No change told apart from 0.")


@pytest.mark.parametrize("split", ["test", "val"])
def test_the_loss_plots_name_the_split_the_study_scored(tmp_path, monkeypatch, split):
    """loss_vs_length.png said "val" for a study scored on test (stage 2 of the position study)."""
    from study import plots as study_plots

    drawn = []
    monkeypatch.setattr(study_plots, "save", lambda fig, path: drawn.append(fig))
    rows = [{"variant": "rope", "loss": {"nonoverlapping 64": (1.6, 0.01), "nonoverlapping 128": (1.8, 0.02)}}]
    study = {"block_size": 64, "lengths": [64, 128], "ablate_config": {"protocols": ["nonoverlapping"]},
             "window": 64, "split": split}
    study_plots.plot_loss_vs_length(tmp_path, rows, study)
    [axes] = [fig.axes for fig in drawn]
    assert axes[0].get_ylabel() == f"mean {split} loss, whole {split} split (nats/token)"


@pytest.mark.parametrize("cells", [17, 25])
def test_no_two_cells_of_a_plot_share_a_colour(tmp_path, monkeypatch, cells):
    """The palette repeated after 10 cells, so the extrapolation study's 17 cells drew pairs in one colour."""
    from matplotlib.colors import to_rgb

    from study import plots as study_plots

    drawn = []
    monkeypatch.setattr(study_plots, "save", lambda fig, path: drawn.append(fig))
    rows = [{"variant": f"cell{i}", "loss": {"nonoverlapping 64": (1.6 + i / 100, 0.01),
                                             "nonoverlapping 128": (1.8 + i / 100, 0.02)}} for i in range(cells)]
    study = {"block_size": 64, "lengths": [64, 128], "ablate_config": {"protocols": ["nonoverlapping"]},
             "window": 64, "split": "test"}
    study_plots.plot_loss_vs_length(tmp_path, rows, study)
    [axes] = [fig.axes for fig in drawn]
    lines = [line for line in axes[0].get_lines() if line.get_label().startswith("cell")]
    assert len(lines) == cells and len({to_rgb(line.get_color()) for line in lines}) == cells


def position_records(cells: int) -> list[dict]:
    """Records of `cells` cells on 2 seeds, scored at 64 and 512 by position: cell i's loss rises past 64 by
    i / 2 nats, so the larger ones leave the scale of the plot past block_size."""
    records = []
    for i in range(cells):
        for seed in (1, 2):
            curve = {n: [1.6 + seed / 100 + (i / 2 if p >= 64 else 0) for p in range(n)] for n in (64, 512)}
            records.append({"variant": f"encoding number {i}", "seed": seed, "eval": {"protocols": {
                "nonoverlapping": {str(n): {"per_position": curve[n]} for n in (64, 512)},
                "sliding": {"512": {"per_position": [1.6 + seed / 100] * 512}}}}})
    return records


@pytest.mark.parametrize("cells", [3, 17])
def test_no_legend_or_title_covers_a_panel(tmp_path, monkeypatch, cells):
    """With 17 cells the legends inside the panels covered their lines, and the one-line list of the cells off the
    scale ran across the next panel's title: now many cells get one legend below the panels, and the list wraps."""
    from study import plots as study_plots

    drawn = []
    monkeypatch.setattr(study_plots, "save", lambda fig, path: drawn.append(fig))
    study = {"block_size": 64, "lengths": [64, 512], "ablate_config": {"protocols": ["nonoverlapping", "sliding"]},
             "window": 64, "split": "test"}
    names = [f"encoding number {i}" for i in range(cells)]
    study_plots.plot_loss_by_position(tmp_path, position_records(cells), study, names, names[0])
    rows = [{"variant": name, "loss": {f"{p} {n}": (1.6, 0.01) for p in ("nonoverlapping", "sliding")
                                       for n in (64, 512)}} for name in names]
    study_plots.plot_loss_vs_length(tmp_path, rows, study)
    for fig in drawn:
        renderer = fig.canvas.get_renderer()
        fig.draw(renderer)
        panels = [ax.get_window_extent(renderer) for ax in fig.axes]
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
        shown = [text.get_text() for legend in legends for text in legend.get_texts()]
        assert set(names) <= set(shown)
        if cells > study_plots.LEGEND_INSIDE:
            assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
            extent = fig.legends[0].get_window_extent(renderer)
            assert not any(extent.overlaps(panel) for panel in panels)
            assert extent.y0 >= 0 and extent.y1 < min(panel.y0 for panel in panels)
        titles = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
        assert all(fig.bbox.x0 <= t.x0 and t.x1 <= fig.bbox.x1 for t in titles)
        assert not any(a.overlaps(b) for i, a in enumerate(titles) for b in titles[i + 1:])


def test_past_the_training_length_is_reported_at_every_budget():
    """Each cell's whole window minus its own sliding window at each budget (stage 2 found it growing with the
    budget for every encoding but ALiBi): scipy's paired interval on the seeds' differences."""
    from study import report as study_report

    rng = np.random.default_rng(1)
    records = []
    for budget in (1000, 2000):
        for cell in ("learned", "rope"):
            for seed in (1, 2, 3):
                whole, sliding = 1.8 + rng.normal(0, 0.05), 1.7 + rng.normal(0, 0.01)
                longer = {} if cell == "learned" else {"128": {"loss": whole}}
                records.append({
                    "variant": cell, "seed": seed, "budget": budget, "parameters": 10, "tokens_per_iter": 768,
                    "iter_num": budget, "train_seconds": 1.0, "tokens_per_sec": 1.0,
                    "eval": {"tokens": 1000, "bytes": 1000, "chars": 1000, "protocols": {
                        "nonoverlapping": {"64": {"loss": 1.6}, "128": None if cell == "learned" else longer["128"]},
                        "sliding": {"64": {"loss": 1.6}, "128": {"loss": sliding}}}}})
    study = {"block_size": 64, "cells": ["learned", "rope"], "labels": {}, "lengths": [64, 128], "own_steps": False}
    budgets = study_report.budget_summary(records, study, AblateConfig(variants=["learned", "rope"]))
    for budget in (1000, 2000):
        [row] = budgets["by_budget"][budget]["extrapolation"]
        runs = [r for r in records if r["budget"] == budget and r["variant"] == "rope"]
        differences = [r["eval"]["protocols"]["nonoverlapping"]["128"]["loss"]
                       - r["eval"]["protocols"]["sliding"]["128"]["loss"] for r in runs]
        low, high = stats.t.interval(0.95, 2, loc=np.mean(differences), scale=stats.sem(differences))
        assert (row["a"], row["length"]) == ("rope", 128)
        assert (row["mean"], row["low"], row["high"]) == pytest.approx((np.mean(differences), low, high))
    lines = study_report.extrapolation_table(budgets, {**study, "labels": {"rope": "RoPE"}})
    assert lines[3] == "| cell | 1000 steps, L=128 (2x) | 2000 steps, L=128 (2x) |"
    assert lines[5].startswith(f"| RoPE | {budgets['by_budget'][1000]['extrapolation'][0]['mean']:+.4f} [")
    assert len(lines) == 6  # learned has no whole window past its table: no row
