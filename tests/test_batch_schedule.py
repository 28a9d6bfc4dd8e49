"""The batch-size schedule (training/batch_schedule.py: --batch_size_warmup, --batch_size_start).

Checked against what does not come from its code: the line written out here in fractions; the batches drawn here
from the seed as the loop drew them before the schedule (a scheduled step's are the first rows of those); the first
loss computed here on them from the initial weights; an uninterrupted run (resume); the tokens/s figures recomputed
from the step times; the study's record of the tokens a run has seen.
"""

import itertools
import json
import math
import types
from fractions import Fraction

import pytest
import torch
from helpers import MODEL, REPO, assert_one_line_error, cli, configs, flags, resumed_as_one_run, run, torchrun
from tqdm.auto import tqdm

import train as train_module
from study import run as study_run
from study.plan import StudyRun
from study.records import config_settings
from text.dataset import get_batch, load_split, sample_offsets
from training.batch_schedule import batch_size_at
from training.batches import BatchPrefetcher
from training.checkpoint import load_checkpoint

BLOCK, SEED, ACCUMULATE, STEPS = MODEL["block_size"], 1337, 2, 7  # the seed: TrainConfig's default
RAMP = dict(batch_size=4, batch_size_warmup=5, batch_size_start=1)  # sizes 1, 1, 2, 2, 3, then 4
CPU = torch.device("cpu")


def line(step: int, start: int, full: int, warmup: int) -> int:
    """The schedule written out: the line from (0, start) to (warmup, full), down to whole sequences; then full."""
    return full if step >= warmup else math.floor(start + Fraction(full - start, warmup) * step)


# ---- the formula --------------------------------------------------------------------------------------------------


def test_the_batch_size_at_each_step_is_the_line_down_to_whole_sequences():
    for full, start, warmup in [(4, 1, 5), (8, 2, 4), (12, 3, 7), (64, 8, 300), (2, 1, 1)]:
        config = types.SimpleNamespace(batch_size=full, batch_size_start=start, batch_size_warmup=warmup)
        assert [batch_size_at(s, config) for s in range(warmup + 3)] == \
            [line(s, start, full, warmup) for s in range(warmup + 3)]
    assert [batch_size_at(s, types.SimpleNamespace(**RAMP)) for s in range(7)] == [1, 1, 2, 2, 3, 4, 4]
    off = types.SimpleNamespace(batch_size=12, batch_size_start=0, batch_size_warmup=0)
    assert {batch_size_at(s, off) for s in range(50)} == {12}


def test_the_tokens_trained_sum_the_steps_sizes():
    config, model_config = configs("out", "data", gradient_accumulation_steps=ACCUMULATE, **RAMP)
    for steps in (0, 1, 4, 5, 9):
        assert train_module.tokens_trained(config, model_config, steps) == \
            sum(ACCUMULATE * line(s, 1, 4, 5) * BLOCK for s in range(steps))
    plain = configs("out", "data", gradient_accumulation_steps=ACCUMULATE, batch_size=4)
    assert train_module.tokens_trained(*plain, 9) == 9 * train_module.tokens_per_iter(*plain)


# ---- the batches and the losses ------------------------------------------------------------------------------------


def trained_batches(monkeypatch, out_dir, char_data, **settings) -> tuple[list[list[tuple]], dict]:
    """Each step's micro-batches (x, y) as the loop trained on them, and the run's result."""
    seen = []

    class Recording(BatchPrefetcher):
        def step_batches(self, step: int) -> list:
            seen.append(super().step_batches(step))
            return seen[-1]

    monkeypatch.setattr(train_module, "BatchPrefetcher", Recording)
    result = run(out_dir, char_data, max_iters=STEPS, gradient_accumulation_steps=ACCUMULATE, **settings)
    return seen, result


def batches_before_the_schedule(char_data, batch_size: int) -> list[list[tuple]]:
    """Each step's micro-batches as the loop drew them before the schedule existed: all of a step's offsets from the
    seed's generator at once, then a micro-batch of batch_size rows after another."""
    data, generator = load_split(char_data, "train", BLOCK), torch.Generator().manual_seed(SEED)
    steps = []
    for _ in range(STEPS):
        offsets = sample_offsets(len(data), BLOCK, ACCUMULATE * batch_size, generator)
        steps.append([get_batch(data, offsets[m * batch_size:(m + 1) * batch_size], BLOCK, CPU)
                      for m in range(ACCUMULATE)])
    return steps


def first_loss(tmp_path, char_data, batches: list[tuple]) -> float:
    """The first step's logged loss computed here: the initial weights' (a run of no step) loss on each micro-batch,
    averaged."""
    model = run(tmp_path / "initial", char_data, max_iters=0)["model"]
    total = torch.zeros(())
    with torch.no_grad():
        for x, y in batches:
            total += model(x, y)[1] / len(batches)
    return total.item()


def assert_same_batches(got: list[tuple], expected: list[tuple]) -> None:
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected, strict=True):
        assert torch.equal(x, ex) and torch.equal(y, ey)


def test_off_the_batches_and_first_loss_are_those_from_before_the_schedule(tmp_path, char_data, monkeypatch):
    seen, result = trained_batches(monkeypatch, tmp_path / "off", char_data, batch_size=4)
    before = batches_before_the_schedule(char_data, 4)
    for got, expected in zip(seen, before, strict=True):
        assert_same_batches(got, expected)
    assert result["train_losses"][0]["loss"] == first_loss(tmp_path, char_data, before[0])


def test_on_each_steps_batches_are_the_first_rows_of_the_unscheduled_ones(tmp_path, char_data, monkeypatch):
    """The sizes of the line, the rows those the run without the schedule trains on (the generator advances as
    there), and the first logged loss the initial weights' on the step's smaller batches."""
    seen, result = trained_batches(monkeypatch, tmp_path / "on", char_data, **RAMP)
    before = batches_before_the_schedule(char_data, 4)
    assert [[len(x) for x, _ in step] for step in seen] == [[line(s, 1, 4, 5)] * ACCUMULATE for s in range(STEPS)]
    for step, (got, expected) in enumerate(zip(seen, before, strict=True)):
        rows = line(step, 1, 4, 5)
        assert_same_batches(got, [(x[:rows], y[:rows]) for x, y in expected])
    first = [(x[:1], y[:1]) for x, y in before[0]]
    assert result["train_losses"][0]["loss"] == first_loss(tmp_path, char_data, first)
    plain = run(tmp_path / "plain", char_data, max_iters=STEPS, gradient_accumulation_steps=ACCUMULATE, batch_size=4)
    assert [r["loss"] for r in plain["train_losses"]] != [r["loss"] for r in result["train_losses"]]


def test_tokens_per_second_count_each_steps_own_tokens(tmp_path, char_data):
    result = run(tmp_path / "on", char_data, max_iters=STEPS, gradient_accumulation_steps=ACCUMULATE, **RAMP)
    tokens = [ACCUMULATE * line(s, 1, 4, 5) * BLOCK for s in range(STEPS)]
    seconds = result["step_seconds"]
    assert result["tokens_per_sec"] == sum(tokens[1:]) / sum(seconds[1:])  # the first step (compilation) left out
    lines = [json.loads(text) for text in (tmp_path / "on" / "metrics.jsonl").read_text().splitlines()]
    logged = [entry["tokens_per_sec"] for entry in lines if "tokens_per_sec" in entry]  # log_interval=1
    assert logged == [t / s for t, s in zip(tokens, seconds, strict=True)]


@pytest.mark.slow
def test_two_ddp_processes_under_the_schedule_equal_one_process(tmp_path, char_data, script_env, ends_its_threads,
                                                                capsys):
    """4 micro-batches per step, 2 per process: each process's micro-batches shrink alike, so the run is the one
    process's with the same accumulation (to float rounding: the gradients are summed in another order)."""
    settings = dict(gradient_accumulation_steps=4, max_iters=STEPS, lr_decay_iters=STEPS, **RAMP)
    torchrun([str(REPO / "train.py"), *flags(tmp_path / "ddp", char_data, **settings)], script_env, tmp_path)
    assert cli(train_module.main, flags(tmp_path / "one", char_data, **settings), capsys)[0] == 0
    losses = {}
    for name in ("ddp", "one"):
        lines = [json.loads(text) for text in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        losses[name] = [entry["train_loss"] for entry in lines if "train_loss" in entry]
    assert len(losses["one"]) == STEPS and losses["ddp"] == pytest.approx(losses["one"], rel=1e-5)
    ddp, one = load_checkpoint(tmp_path / "ddp" / "ckpt.pt"), load_checkpoint(tmp_path / "one" / "ckpt.pt")
    for key, value in one["model"].items():
        torch.testing.assert_close(ddp["model"][key], value, atol=1e-6, rtol=0, msg=key)


# ---- resume and checkpoints ----------------------------------------------------------------------------------------


def test_resume_under_the_schedule_equals_an_uninterrupted_run(tmp_path, char_data):
    """3 steps saved and resumed for 3 more, inside the ramp, equal 6 straight bit for bit. The first part ran with
    max_iters=3: a schedule that depended on max_iters (stages at fractions of the run) would differ here, as it
    would in a study's wsd branch."""
    resumed_as_one_run(tmp_path, char_data, {}, gradient_accumulation_steps=ACCUMULATE, **RAMP)
    saved = load_checkpoint(tmp_path / "a" / "ckpt.pt")["config"]
    assert (saved["batch_size_warmup"], saved["batch_size_start"]) == (5, 1)


def test_a_resumed_run_keeps_its_schedule_and_an_older_checkpoint_resumes_without_one(tmp_path, char_data, capsys):
    out = tmp_path / "out"
    given = dict(batch_size_warmup=5, batch_size_start=2)
    assert cli(train_module.main, flags(out, char_data, max_iters=2, **given), capsys)[0] == 0
    assert cli(train_module.main, flags(out, char_data, max_iters=4, init_from="resume"), capsys)[0] == 0
    resumed = load_checkpoint(out / "ckpt.pt")
    assert resumed["iter_num"] == 4 and {k: resumed["config"][k] for k in given} == given
    older = tmp_path / "older"  # its config lacks the fields: written before they existed
    assert cli(train_module.main, flags(older, char_data, max_iters=2), capsys)[0] == 0
    state = torch.load(older / "ckpt.pt", weights_only=True)
    for name in given:
        del state["config"][name]
    torch.save(state, older / "ckpt.pt")
    assert cli(train_module.main, flags(older, char_data, max_iters=4, init_from="resume"), capsys)[0] == 0
    resumed = load_checkpoint(older / "ckpt.pt")
    assert resumed["iter_num"] == 4 and {k: resumed["config"][k] for k in given} == dict.fromkeys(given, 0)


# ---- the study -----------------------------------------------------------------------------------------------------


def test_a_study_records_the_tokens_seen_and_keeps_the_settings_of_runs_without_the_schedule(tmp_path, char_data):
    """done.json's tokens_seen (the report's tokens at a budget) under the schedule; without it the record and the
    settings are what they were (committed studies stay valid: study/records.py's LATER_TRAIN_FIELDS)."""
    records = {}
    for name, settings in (("ramp", RAMP), ("plain", dict(batch_size=4))):
        train_config, model_config = configs(tmp_path / name, char_data, max_iters=4, dtype="float32",
                                             gradient_accumulation_steps=ACCUMULATE, **settings)
        study = StudyRun(name, name, SEED, 4, "run", "val", tmp_path / name, None, model_config, train_config)
        records[name] = study_run.train_run(study, [study], tqdm(disable=True), 0)
        assert ("batch_size_warmup" in config_settings(train_config, model_config)["train_config"]) == (name == "ramp")
    assert records["ramp"]["tokens_seen"] == sum(ACCUMULATE * line(s, 1, 4, 5) * BLOCK for s in range(4))
    assert "tokens_seen" not in records["plain"]


def test_a_study_run_stopped_by_max_seconds_records_the_tokens_of_the_steps_it_trained(tmp_path, char_data,
                                                                                     monkeypatch):
    """train.py's clock reads one second later at each call, so each step takes 1 s and max_seconds=3 (then 2)
    stops a run of budget 6 after 3 (2) steps: its tokens_seen counts those steps, not budget x tokens_per_iter,
    with and without the schedule; the report's row takes the mean over seeds, as its steps."""
    from study.report import summarize

    monkeypatch.setattr(train_module, "time", types.SimpleNamespace(perf_counter=itertools.count().__next__))
    records = {}
    for name, settings in (("ramp", RAMP), ("plain", dict(batch_size=4))):
        for seconds in (3, 2):
            folder = tmp_path / f"{name}{seconds}"
            train_config, model_config = configs(folder, char_data, max_iters=6, dtype="float32", max_seconds=seconds,
                                                 gradient_accumulation_steps=ACCUMULATE, **settings)
            study = StudyRun(name, name, SEED + seconds, 6, "run", "val", folder, None, model_config, train_config)
            records[name, seconds] = study_run.train_run(study, [study], tqdm(disable=True), 0)
            assert records[name, seconds]["iter_num"] == seconds
    for seconds in (3, 2):
        assert records["ramp", seconds]["tokens_seen"] == sum(ACCUMULATE * line(s, 1, 4, 5) * BLOCK
                                                              for s in range(seconds))
        assert records["plain", seconds]["tokens_seen"] == seconds * ACCUMULATE * 4 * BLOCK
    scored = {"tokens": 1, "bytes": 1, "chars": 1}
    rows = summarize([{**r, "eval": scored} for r in records.values()], [], [], {})
    assert [(row["variant"], row["steps"], row["tokens_seen"]) for row in rows] == [
        ("ramp", 2.5, round(ACCUMULATE * BLOCK * (1 + 1 + 2 + 1 + 1) / 2)),
        ("plain", 2.5, round(ACCUMULATE * BLOCK * 4 * 2.5))]


# ---- refusals ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given, fragments", [
    (dict(batch_size_start=2), ["batch_size_start is a setting of batch_size_warmup, and this run's is 0", "drop it"]),
    (dict(batch_size_warmup=5), ["batch_size_start=0 must be in [1, batch_size=4)", "--batch_size_start=N with N "
                                                                                     "from 1 to 3"]),
    (dict(batch_size_warmup=5, batch_size_start=4), ["batch_size_start=4 must be in [1, batch_size=4)"]),
    (dict(batch_size_warmup=-1), ["batch_size_warmup=-1 must be >= 0"]),
    (dict(batch_size=1, batch_size_warmup=5, batch_size_start=1), ["batch_size_start=1 must be in [1, batch_size=1)",
                                                                   "a --batch_size of 2 or more"]),
])
def test_bad_or_idle_schedule_settings_are_one_line_before_anything_is_written(tmp_path, char_data, capsys, given,
                                                                                fragments):
    code, out, err = cli(train_module.main, flags(tmp_path / "out", char_data, **given), capsys)
    assert_one_line_error(code, out, err, *fragments)
    assert not (tmp_path / "out").exists()
