"""train.py: the schedule, learning, resuming, Ctrl-C, NaN, metrics, wandb, DDP, the BPE path and its errors.

Each test checks against something independent: the cosine formula worked by hand, ln(vocab) for an untrained
model, a second run (resume vs uninterrupted, two processes vs one, eval_only vs the training run's own
evaluation), or the bytes of a file written before. Tiny models on CPU; nothing is downloaded.
"""

import hashlib
import json
import math
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import MODEL, TRAIN, assert_same_state, cli, configs, flags, run, torchrun

import train as train_module
from errors import UserError
from gpt import gpt2_weights
from gpt.generate import generate
from model import GPT, GPTConfig
from options import parse_options
from text.dataset import get_batch, prepare
from train import TrainConfig, get_lr, train
from training.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[1]


def command_line(out_dir, dataset, **overrides) -> list[str]:
    values = {**TRAIN, **MODEL, "out_dir": str(out_dir), "dataset": str(dataset), **overrides}
    return [f"--{k}={v}" for k, v in values.items()]


def metrics(out_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(out_dir) / "metrics.jsonl").read_text().splitlines()]


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def assert_no_traceback(*outputs: str) -> None:
    for output in outputs:
        assert "Traceback" not in output, output


# ---- the learning-rate schedule -----------------------------------------------------------------------------


def test_get_lr_by_hand():
    config = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=10, lr_decay_iters=110)
    assert get_lr(0, config) == pytest.approx(1 / 11)  # warmup: (it + 1) / (warmup_iters + 1)
    assert get_lr(4, config) == pytest.approx(5 / 11)
    assert get_lr(9, config) == pytest.approx(10 / 11)
    assert get_lr(10, config) == pytest.approx(1.0)  # the peak
    assert get_lr(35, config) == pytest.approx(0.1 + 0.45 * (1 + math.sqrt(0.5)))  # a quarter: cos(pi/4)
    assert get_lr(60, config) == pytest.approx(0.55)  # half way: the mean of peak and floor
    assert get_lr(85, config) == pytest.approx(0.1 + 0.45 * (1 - math.sqrt(0.5)))
    assert get_lr(110, config) == pytest.approx(0.1)
    assert get_lr(111, config) == get_lr(10_000, config) == 0.1
    lrs = [get_lr(it, config) for it in range(200)]
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:11], strict=True))  # rises through the warmup
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))  # then never rises again
    assert get_lr(50, TrainConfig(learning_rate=0.3, decay_lr=False)) == 0.3


@pytest.mark.parametrize("bad, message", [
    (dict(batch_size=0), r"batch_size=0 must be at least 1"),
    (dict(learning_rate=0.0), r"learning_rate=0\.0 must be a finite number > 0"),
    (dict(learning_rate=math.nan), r"learning_rate=nan must be a finite number > 0"),
    (dict(dtype="float64"), r"dtype='float64' must be one of auto, float32, bfloat16, float16"),
    (dict(wandb_mode="cloud"), r"wandb_mode='cloud' must be online, offline or disabled"),
    (dict(backend="mpi"), r"backend='mpi' must be auto, nccl or gloo"),
    (dict(max_iters=-1), r"max_iters=-1, .* must be >= 0"),
    (dict(init_from="scrach"), r"init_from='scrach' must be one of scratch, resume, gpt2, gpt2-medium"),
    (dict(out_dir=" "), r"out_dir is empty"),
])
def test_train_config_validation(bad, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**bad)


def test_warmup_past_lr_decay_iters_runs_like_nanogpt():
    """nanoGPT accepts warmup_iters >= lr_decay_iters: warm up, then min_lr (its cosine has no room)."""
    config = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=10, lr_decay_iters=5)
    assert [get_lr(it, config) for it in (0, 9, 10, 11, 500)] == pytest.approx([1 / 11, 10 / 11, 0.1, 0.1, 0.1])
    equal = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=5, lr_decay_iters=5)
    assert [get_lr(it, equal) for it in (4, 5, 6)] == pytest.approx([5 / 6, 0.1, 0.1])


@pytest.mark.parametrize("warmup_iters, fraction, max_iters", [(100, 0.2, 120), (100, 0.2, 10), (7, 0.5, 9),
                                                                 (33, 0.9, 40), (2, 0.5, 3), (250, 0.37, 300)])
def test_a_wsd_decay_inside_the_warmup_names_the_values_that_work(warmup_iters, fraction, max_iters):
    """Was: "... would start at step 96, inside the warmup_iters=100; lower one of them". The refusal names the
    smallest max_iters at this warmup and the largest warmup at this max_iters; both are accepted, and one step
    past either is refused (found here by counting up and down, the decay start written out as in schedule.py's
    docstring: max_iters - round(fraction * max_iters))."""
    def start(m):
        return m - round(fraction * m)

    settings = dict(lr_schedule="wsd", warmup_iters=warmup_iters, wsd_decay_fraction=fraction)
    with pytest.raises(ValueError) as refused:
        TrainConfig(**settings, max_iters=max_iters)
    message = str(refused.value)
    smallest = int(re.search(r"--max_iters=(\d+) or more", message).group(1))
    largest = int(re.search(r"--warmup_iters=(\d+) or less", message).group(1))
    assert smallest == next(m for m in range(10**6) if start(m) >= warmup_iters)
    assert largest == start(max_iters)
    TrainConfig(**settings, max_iters=smallest)
    TrainConfig(**{**settings, "warmup_iters": largest}, max_iters=max_iters)
    with pytest.raises(ValueError, match="inside the warmup_iters"):
        TrainConfig(**settings, max_iters=smallest - 1)
    with pytest.raises(ValueError, match="inside the warmup_iters"):
        TrainConfig(**{**settings, "warmup_iters": largest + 1}, max_iters=max_iters)


def test_a_wsd_decay_over_the_whole_run_needs_no_warmup():
    with pytest.raises(ValueError, match=r"would start at step 0, inside the warmup_iters=5; give --warmup_iters=0"):
        TrainConfig(lr_schedule="wsd", warmup_iters=5, wsd_decay_fraction=1.0, max_iters=50)


# ---- learning -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_loss_falls_on_a_small_corpus(tmp_path, char_data):
    vocab = json.loads((char_data / "tokenizer.json").read_text())["vocab_size"]
    result = run(tmp_path / "out", char_data, n_embd=32, block_size=32, batch_size=8, max_iters=150,
                 lr_decay_iters=150, warmup_iters=10, eval_interval=50, eval_iters=5, log_interval=10)
    first, last = result["evals"][0], result["evals"][-1]
    assert [e["iter"] for e in result["evals"]] == [0, 50, 100, 150]
    assert abs(first["val_loss"] - math.log(vocab)) < 0.3  # an untrained model guesses nearly uniformly
    assert last["val_loss"] < math.log(vocab) - 1.0
    assert last["train_loss"] < first["train_loss"] - 1.0
    assert result["best_val_loss"] == min(e["val_loss"] for e in result["evals"])


def test_a_single_batch_can_be_overfit():
    vocab = 65
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=vocab))
    optimizer = model.configure_optimizers(0.0, 1e-2, (0.9, 0.99), "cpu")
    tokens = torch.randint(0, vocab, (4, 17), generator=torch.Generator().manual_seed(0))
    tokens[:, 0] = torch.arange(4)  # distinct first tokens: every target is predictable from its prefix
    x, y = get_batch(tokens.flatten().numpy(), torch.tensor([0, 17, 34, 51]), 16, torch.device("cpu"))
    losses = []
    for _ in range(100):
        loss = model(x, y)[1]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert abs(losses[0] - math.log(vocab)) < 0.2
    assert losses[-1] < 0.02


# ---- resume -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", [{}, {"random_positions": 64}], ids=["positions", "random_positions"])
def test_resume_equals_an_uninterrupted_run(tmp_path, char_data, positions):
    """Dropout on, so the resumed run also needs the restored torch RNG; the batch order needs the batch RNG; so
    do randomized positions (drawn from torch's CPU generator)."""
    settings = dict(max_iters=12, lr_decay_iters=12, warmup_iters=3, eval_interval=4, dropout=0.1, **positions)
    whole = run(tmp_path / "a", char_data, **settings)
    first = run(tmp_path / "b", char_data, **{**settings, "max_iters": 6})
    assert load_checkpoint(tmp_path / "b" / "ckpt.pt")["iter_num"] == 6
    second = run(tmp_path / "b", char_data, **settings, init_from="resume")
    assert [r["iter"] for r in first["train_losses"] + second["train_losses"]] == list(range(1, 13))
    assert first["train_losses"] + second["train_losses"] == whole["train_losses"]
    assert_same_state(second["model"].state_dict(), whole["model"].state_dict())
    a, b = load_checkpoint(tmp_path / "a" / "ckpt.pt"), load_checkpoint(tmp_path / "b" / "ckpt.pt")
    assert a["iter_num"] == b["iter_num"] == 12
    for state_a, state_b in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert_same_state(state_a, state_b)
    evals_b = {e["iter"]: e for e in first["evals"] + second["evals"]}
    assert all(evals_b[e["iter"]] == e for e in whole["evals"])  # iters 0, 4, 8, 12


def test_max_seconds_stops_after_the_step_that_used_it_up(tmp_path, char_data):
    result = run(tmp_path / "out", char_data, max_iters=1000, lr_decay_iters=1000, max_seconds=1e-9)
    assert result["iter_num"] == 1 and len(result["step_seconds"]) == 1
    assert load_checkpoint(tmp_path / "out" / "ckpt.pt")["iter_num"] == 1
    assert [e["iter"] for e in result["evals"]] == [0, 1]


def test_resume_on_other_data_is_refused(tmp_path, char_data):
    run(tmp_path / "out", char_data, max_iters=1)
    other = tmp_path / "other"
    prepare("just a few other characters, repeated. " * 30, other, "char")
    with pytest.raises(ValueError, match="vocabulary"):
        run(tmp_path / "out", other, init_from="resume", max_iters=2)


@pytest.mark.slow
def test_ctrl_c_saves_and_exits_cleanly(tmp_path, char_data, script_env):
    out = tmp_path / "out"
    argv = command_line(out, char_data, max_iters=1_000_000, lr_decay_iters=1_000_000, eval_interval=1_000_000,
                        eval_iters=1, log_interval=50)
    process = subprocess.Popen([sys.executable, str(REPO / "train.py"), *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=script_env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not (out / "ckpt.pt").exists():  # written at iteration 0, inside the loop that handles Ctrl-C
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no checkpoint after 60 s"
            time.sleep(0.05)
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr  # 128 + SIGINT, the shell's convention for Ctrl-C
    assert_no_traceback(stdout, stderr)
    assert "--init_from=resume" in stdout and "done" not in stdout
    state = load_checkpoint(out / "ckpt.pt")
    assert state["iter_num"] > 0
    assert f"saved iteration {state['iter_num']}" in stdout
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    resumed = run(out, char_data, init_from="resume", max_iters=state["iter_num"] + 2, lr_decay_iters=1_000_000)
    assert resumed["iter_num"] == state["iter_num"] + 2


def test_a_reader_that_goes_away_saves_the_steps_first(tmp_path, char_data, script_env):
    """train.py | head -3: the next line into the closed pipe is a request to save and stop, as SIGTERM is (it
    ended the run with 141 and lost every step since the last checkpoint); exit status 141, SIGPIPE's."""
    out = tmp_path / "out"
    argv = command_line(out, char_data, max_iters=1_000_000, lr_decay_iters=1_000_000, eval_interval=7,
                        eval_iters=1, log_interval=1, always_save_checkpoint=False)
    process = subprocess.Popen([sys.executable, str(REPO / "train.py"), *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=script_env, cwd=tmp_path)
    try:
        lines = [process.stdout.readline() for _ in range(3)]  # what head -3 reads, then it goes
        process.stdout.close()
        stderr = process.stderr.read()
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert all(lines) and process.returncode == 141, (lines, stderr)
    assert "Traceback" not in stderr
    logged = [json.loads(line)["iter"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert load_checkpoint(out / "ckpt.pt")["iter_num"] == max(logged) > 7  # every logged step is in the checkpoint


# ---- NaN ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("log_interval, eval_interval, caught_by", [(1, 1000, "train loss"), (1000, 8, "val loss")])
def test_nan_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, char_data, log_interval, eval_interval,
                                                               caught_by):
    """log_interval=1: the logged train loss stops it at once; otherwise the next evaluation does."""
    good = run(tmp_path / "out", char_data, max_iters=4, lr_decay_iters=30)
    before = digest(tmp_path / "out" / "ckpt.pt")
    with pytest.raises(FloatingPointError, match=rf"{caught_by} is nan at iteration [5-8]\b.*last good checkpoint.*"
                                                 r"ckpt\.pt"):
        # lr=1e6 turns the loss into NaN within two steps (grad_clip does not help: Adam divides it away)
        run(tmp_path / "out", char_data, init_from="resume", max_iters=30, lr_decay_iters=30, warmup_iters=0,
            learning_rate=1e6, min_lr=1e6, weight_decay=0.0, log_interval=log_interval, eval_interval=eval_interval)
    assert digest(tmp_path / "out" / "ckpt.pt") == before
    state = load_checkpoint(tmp_path / "out" / "ckpt.pt")
    assert state["iter_num"] == 4
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    assert_same_state(state["model"], good["model"].state_dict())


def test_nan_weights_are_never_saved(tmp_path, char_data, monkeypatch):
    """If the weights go bad while the losses still look finite, the checkpoint must not be overwritten."""
    run(tmp_path / "out", char_data, max_iters=2, lr_decay_iters=30)
    before = digest(tmp_path / "out" / "ckpt.pt")
    real_step = torch.optim.AdamW.step

    def poisoned_step(self, *args, **kwargs):
        result = real_step(self, *args, **kwargs)
        with torch.no_grad():
            self.param_groups[1]["params"][-1].fill_(float("nan"))  # a LayerNorm bias: the forward stays NaN
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", poisoned_step)
    monkeypatch.setattr(train_module, "estimate_loss", lambda *a, **k: {"train": 1.0, "val": 1.0})
    with pytest.raises(FloatingPointError, match="NaN or inf"):
        run(tmp_path / "out", char_data, init_from="resume", max_iters=6, lr_decay_iters=30, log_interval=1000,
            eval_interval=4)
    assert digest(tmp_path / "out" / "ckpt.pt") == before


# ---- eval_only and metrics ----------------------------------------------------------------------------------


def test_eval_only_matches_the_training_runs_own_evaluations(tmp_path, char_data):
    trained = run(tmp_path / "out", char_data, max_iters=6, lr_decay_iters=6, eval_interval=3)
    before = digest(tmp_path / "out" / "ckpt.pt")
    resumed = run(tmp_path / "out", char_data, max_iters=6, lr_decay_iters=6, init_from="resume", eval_only=True)
    assert resumed["evals"] == [trained["evals"][-1]] and resumed["iter_num"] == 6
    assert resumed["train_losses"] == []
    assert digest(tmp_path / "out" / "ckpt.pt") == before  # eval_only trains nothing and saves no ckpt.pt
    fresh = run(tmp_path / "fresh", char_data, max_iters=6, lr_decay_iters=6, eval_only=True)
    assert fresh["evals"] == [trained["evals"][0]] and fresh["iter_num"] == 0
    assert not (tmp_path / "fresh" / "ckpt.pt").exists()


def test_metrics_file_records_train_and_val_losses(tmp_path, char_data):
    config, model_config = configs(tmp_path / "out", char_data, max_iters=10, lr_decay_iters=10, log_interval=3,
                                   eval_interval=4)
    result = train(config, model_config)
    records = metrics(tmp_path / "out")
    train_records = [r for r in records if "train_loss" in r]
    val_records = [r for r in records if "val_loss" in r]
    assert [r["iter"] for r in train_records] == [3, 6, 9, 10]
    assert [r["iter"] for r in val_records] == [0, 4, 8, 10]
    assert [{"iter": r["iter"], "loss": r["train_loss"]} for r in train_records] == result["train_losses"]
    assert [(r["iter"], r["val_loss"]) for r in val_records] == [(e["iter"], e["val_loss"]) for e in result["evals"]]
    for r in train_records:  # the rate used for the step that ended at r["iter"]
        assert r["lr"] == pytest.approx(get_lr(r["iter"] - 1, config))
        assert r["tokens_per_sec"] > 0 and math.isfinite(r["train_loss"])
    assert len(records) == len(train_records) + len(val_records)


# ---- wandb --------------------------------------------------------------------------------------------------


def wandb_sandbox(tmp_path, monkeypatch) -> list[Path]:
    """Point every wandb folder (and HOME) into tmp_path; return the places outside it that wandb could touch."""
    places = [REPO / "wandb", Path.home() / ".config" / "wandb", Path.home() / ".cache" / "wandb",
              Path.home() / ".local" / "share" / "wandb", Path.home() / ".netrc"]
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb_home" / name.lower()))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    return places


def snapshot(places: list[Path]) -> dict:
    return {str(p): sorted(str(q) for q in p.rglob("*")) if p.is_dir() else p.exists() for p in places}


@pytest.mark.slow
def test_wandb_offline_needs_no_login_and_stays_in_tmp_path(tmp_path, char_data, monkeypatch, script_env):
    places = wandb_sandbox(tmp_path, monkeypatch)
    before = snapshot(places)
    env = {**script_env, **{k: v for k, v in os.environ.items() if k.startswith("WANDB") or k in ("HOME", "TMPDIR")}}
    env.pop("WANDB_MODE", None)
    env["PYTHONUSERBASE"] = site.USER_BASE or site.getuserbase()  # packages installed with --user, despite HOME
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(REPO / "train.py"),
                             *command_line(out, char_data, max_iters=4, wandb_log=True, wandb_mode="offline")],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert_no_traceback(result.stdout, result.stderr)
    runs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    logged = runs[0].read_bytes()
    assert b"train_loss" in logged and b"val_loss" in logged
    assert snapshot(places) == before


def test_wandb_disabled_logs_what_metrics_jsonl_holds(tmp_path, char_data, monkeypatch):
    import wandb

    places = wandb_sandbox(tmp_path, monkeypatch)
    before = snapshot(places)
    calls = []
    real_init = wandb.init

    class Spy:
        def __init__(self, run):
            self.run, self.logged, self.finished = run, [], False

        def log(self, data, step=None):
            self.logged.append({"iter": step, **data})
            self.run.log(data, step=step)

        def finish(self):
            self.finished = True
            self.run.finish()

    def init(**kwargs):
        calls.append(kwargs)
        spy = Spy(real_init(**kwargs))
        calls.append(spy)
        return spy

    monkeypatch.setattr(wandb, "init", init)
    run(tmp_path / "out", char_data, max_iters=4, wandb_log=True, wandb_mode="disabled", wandb_project="p",
        wandb_run_name="r")
    kwargs, spy = calls
    assert kwargs["mode"] == "disabled" and kwargs["project"] == "p" and kwargs["name"] == "r"
    assert kwargs["dir"] == str(tmp_path / "out")
    assert kwargs["config"]["n_embd"] == 16 and kwargs["config"]["max_iters"] == 4
    assert spy.logged == metrics(tmp_path / "out") and spy.finished
    assert snapshot(places) == before
    assert not (tmp_path / "out" / "wandb").exists()


# ---- DDP ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ddp_two_processes_equal_one_process_with_gradient_accumulation(tmp_path, char_data, script_env,
                                                                        ends_its_threads):
    """4 micro-batches per step: 2 per process (exercising no_sync) against all 4 in one process."""
    settings = dict(gradient_accumulation_steps=4, max_iters=8, lr_decay_iters=8, learning_rate=2e-4, min_lr=2e-5,
                    eval_interval=4, dropout=0.0)
    result = torchrun([str(REPO / "train.py"), *command_line(tmp_path / "ddp", char_data, **settings)], script_env,
                      tmp_path, check=False)
    assert result.returncode == 0, result.stderr
    assert "2 process(es)" in result.stdout
    argv = command_line(tmp_path / "one", char_data, **settings)
    single = train(*parse_options(argv, (TrainConfig, GPTConfig), prog="train.py", description="",
                                  skip=("vocab_size",)))
    assert single["iter_num"] == 8

    ddp, one = load_checkpoint(tmp_path / "ddp" / "ckpt.pt"), load_checkpoint(tmp_path / "one" / "ckpt.pt")
    assert ddp["iter_num"] == one["iter_num"] == 8
    for key, value in one["model"].items():
        torch.testing.assert_close(ddp["model"][key], value, atol=1e-6, rtol=0, msg=key)
    # Adam's moments are sensitive to the scale of the gradient (the weights, under Adam, hardly are).
    for a, b in zip(ddp["optimizer"]["state"].values(), one["optimizer"]["state"].values(), strict=True):
        torch.testing.assert_close(a["exp_avg"], b["exp_avg"], atol=1e-7, rtol=1e-4)
        torch.testing.assert_close(a["exp_avg_sq"], b["exp_avg_sq"], atol=1e-10, rtol=1e-4)
    ddp_records, one_records = metrics(tmp_path / "ddp"), metrics(tmp_path / "one")
    assert [r["iter"] for r in ddp_records] == [r["iter"] for r in one_records]  # rank 0 alone writes
    ddp_losses = [r["train_loss"] for r in ddp_records if "train_loss" in r]
    one_losses = [r["train_loss"] for r in one_records if "train_loss" in r]
    assert len(one_losses) == 8
    np.testing.assert_allclose(ddp_losses, one_losses, rtol=1e-5)
    np.testing.assert_allclose([r["val_loss"] for r in ddp_records if "val_loss" in r],
                               [r["val_loss"] for r in one_records if "val_loss" in r], rtol=1e-5)


@pytest.mark.slow
def test_ddp_gradient_accumulation_must_divide_among_processes(tmp_path, char_data, script_env, ends_its_threads):
    argv = command_line(tmp_path / "out", char_data, gradient_accumulation_steps=3)
    result = torchrun([str(REPO / "train.py"), *argv], script_env, tmp_path, check=False)
    assert result.returncode != 0
    assert "gradient_accumulation_steps=3 must be a multiple of the number of processes (2)" in result.stderr
    assert not (tmp_path / "out" / "ckpt.pt").exists()


# ---- GPT-2 BPE data and sampling ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory, corpus_text) -> Path:
    root = tmp_path_factory.mktemp("bpe")
    prepare(corpus_text[:20_000], root / "data", "gpt2")
    result = run(root / "out", root / "data", max_iters=8, lr_decay_iters=8, eval_interval=4)
    assert result["model"].config.vocab_size == 50304
    assert result["evals"][-1]["val_loss"] < result["evals"][0]["val_loss"]
    assert abs(result["evals"][0]["val_loss"] - math.log(50304)) < 0.3
    return root / "out"


@pytest.mark.gpt2_bpe
def test_bpe_train_and_sample(bpe_run):
    import sample
    from text.tokenizer import GPT2Tokenizer

    model, tokenizer = sample.load_model("resume", str(bpe_run))
    assert isinstance(tokenizer, GPT2Tokenizer) and model.config.vocab_size == 50304
    model.eval()
    config = sample.SampleConfig(start="ROMEO:", num_samples=2, max_new_tokens=12, temperature=0.0)
    texts = sample.sample(model, tokenizer, config)
    prompt = tokenizer.encode("ROMEO:")
    expected = generate(model, torch.tensor([prompt]), 12, temperature=0.0, use_cache=False)[0].tolist()
    assert texts == [tokenizer.decode(expected)] * 2
    assert texts[0].startswith("ROMEO:") and len(expected) == len(prompt) + 12


@pytest.mark.gpt2_bpe
def test_bpe_sampling_never_yields_padding_ids(bpe_run):
    """The padded rows are never trained towards, but nothing stops the sampler from drawing them: with a
    briefly trained model and top_k=None, 10 of 20 seeds hit one in 3 x 200 tokens (seen). Here a row is made
    to win outright, so the outcome does not depend on luck."""
    import sample

    model, tokenizer = sample.load_model("resume", str(bpe_run))
    with torch.no_grad():
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)  # every position's final hidden state is all ones ...
        model.input_layer.wte[50300] = 1.0  # ... and the padding id 50300 scores n_embd, every real id ~0
    config = sample.SampleConfig(start="ROMEO:", num_samples=1, max_new_tokens=3, temperature=0.0)
    text = sample.sample(model.eval(), tokenizer, config)[0]
    ids = tokenizer.encode("ROMEO:")
    with torch.no_grad():
        assert model(torch.tensor([ids]))[0][0, -1].argmax().item() == 50300  # the padding row does win overall
        for _ in range(3):  # greedy by hand, uncached, over the real vocabulary only
            ids.append(model(torch.tensor([ids]))[0][0, -1, :50257].argmax().item())
    assert text == tokenizer.decode(ids)


@pytest.mark.gpt2_bpe
def test_finetune_from_a_local_hugging_face_directory(tmp_path, bpe_run):
    """init_from=<HF dir> (how config/finetune_shakespeare.py starts, offline): the weights arrive unchanged,
    the position table cropped to block_size; training on and resuming then work on the 50257-token model."""
    torch.manual_seed(5)
    original = GPT(GPTConfig(vocab_size=50257, block_size=32, n_layer=1, n_head=2, n_embd=16))
    gpt2_weights.export_hf(original, tmp_path / "hf")
    data = bpe_run.parent / "data"
    loaded = run(tmp_path / "out", data, init_from=str(tmp_path / "hf"), block_size=16, eval_only=True)
    state = loaded["model"].state_dict()
    assert loaded["model"].config.block_size == 16 and loaded["model"].config.vocab_size == 50257
    for key, value in original.state_dict().items():
        expected = value[:16] if key == "input_layer.wpe" else value
        assert torch.equal(state[key], expected), key
    tuned = run(tmp_path / "out", data, init_from=str(tmp_path / "hf"), block_size=16, max_iters=2, dropout=0.1)
    assert tuned["model"].config.dropout == 0.1
    resumed = run(tmp_path / "out", data, init_from="resume", max_iters=3)
    assert resumed["iter_num"] == 3 and resumed["model"].config.vocab_size == 50257


# ---- errors -------------------------------------------------------------------------------------------------


def test_unprepared_dataset_names_prepare_py(tmp_path):
    with pytest.raises(UserError, match=r"prepare\.py"):
        run(tmp_path / "out", tmp_path / "empty_folder_that_does_not_exist")
    with pytest.raises(UserError, match=r"python data/no_such_dataset/prepare\.py"):
        run(tmp_path / "out", "no_such_dataset")


def test_block_size_larger_than_the_val_split(tmp_path):
    text = "To be, or not to be, that is the question. " * 10
    n_val = int(0.1 * len(text)) + 1  # 43 characters, moved back to the space before "To": 44 val tokens
    prepare(text, tmp_path / "data", "char")
    with pytest.raises(ValueError, match=rf"val\.bin holds {n_val} tokens.*block_size=64"):
        run(tmp_path / "out", tmp_path / "data", block_size=64)
    assert not (tmp_path / "out" / "ckpt.pt").exists()


def test_pretrained_init_on_char_data_is_refused_before_any_download(tmp_path, char_data, monkeypatch):
    monkeypatch.setattr(gpt2_weights, "from_pretrained", lambda *a, **k: pytest.fail("tried to load GPT-2"))
    with pytest.raises(ValueError, match=r"init_from='gpt2' needs GPT-2 BPE data.*'char'"):
        run(tmp_path / "out", char_data, init_from="gpt2")


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "alibi", "none"])
def test_pretrained_init_needs_the_learned_table(tmp_path, char_data, monkeypatch, pos_encoding):
    monkeypatch.setattr(gpt2_weights, "from_pretrained", lambda *a, **k: pytest.fail("tried to load GPT-2"))
    with pytest.raises(ValueError, match=f"init_from='gpt2' .*pos_encoding='{pos_encoding}'; set pos_encoding="):
        run(tmp_path / "out", char_data, init_from="gpt2", pos_encoding=pos_encoding)


def test_resume_without_a_checkpoint(tmp_path, char_data):
    with pytest.raises(UserError, match="ckpt.pt"):
        run(tmp_path / "out", char_data, init_from="resume")


def test_train_script_errors_exit_2_without_traceback(tmp_path, script_env):
    result = subprocess.run([sys.executable, str(REPO / "train.py"), f"--dataset={tmp_path / 'missing'}",
                             f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--compile=False"],
                            capture_output=True, text=True, env=script_env, cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert "prepare.py" in result.stderr
    assert_no_traceback(result.stdout, result.stderr)


def test_the_command_line_reads_its_config_file_once(tmp_path, monkeypatch):
    """main parses argv once: the settings and the names the user gave (for the resume checks) come from one
    reading of each config file, so a file changed in between cannot give two different answers."""
    import options

    reads = []
    real_read = options.read_config_file
    monkeypatch.setattr(options, "read_config_file", lambda *a, **k: reads.append(a[0]) or real_read(*a, **k))
    (tmp_path / "config.py").write_text("n_layer = 1\n")
    with pytest.raises(UserError, match=r"prepare\.py"):
        train_module.main([str(tmp_path / "config.py"), f"--dataset={tmp_path / 'missing'}",
                           f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--compile=False"])
    assert reads == [str(tmp_path / "config.py")]


def test_a_resumed_auto_run_keeps_the_dtype_it_trained_in(tmp_path, char_data):
    """The checkpoint records the dtype chosen, not "auto"; a resumed auto run trains on in it (a run that older
    code's CPU probe put in bfloat16 stays in bfloat16), and a new auto run on a CPU takes float32."""
    settings = dict(max_iters=4, lr_decay_iters=4, warmup_iters=1, eval_interval=2)
    run(tmp_path / "a", char_data, **settings, dtype="bfloat16")
    assert load_checkpoint(tmp_path / "a" / "ckpt.pt")["config"]["dtype"] == "bfloat16"
    resumed = run(tmp_path / "a", char_data, **{**settings, "max_iters": 6, "lr_decay_iters": 6}, dtype="auto",
                  init_from="resume")
    assert resumed["iter_num"] == 6
    assert load_checkpoint(tmp_path / "a" / "ckpt.pt")["config"]["dtype"] == "bfloat16"
    run(tmp_path / "b", char_data, **settings, dtype="auto")
    assert load_checkpoint(tmp_path / "b" / "ckpt.pt")["config"]["dtype"] == "float32"


def test_resume_from_the_command_line_takes_the_runs_own_settings(tmp_path, char_data, capsys):
    """Was: --init_from=resume without the run's flags continued at the default batch of 12 and the default
    schedule, warmup restarting, without a word. Now the run's settings come from its checkpoint (dropout too),
    and the resumed run equals the uninterrupted one; a flag given that differs from the run's is named."""
    own = dict(batch_size=3, learning_rate=3e-3, lr_decay_iters=40, warmup_iters=4, eval_interval=3, dropout=0.1)
    assert cli(train_module.main, flags(tmp_path / "a", char_data, max_iters=6, **own), capsys)[0] == 0
    assert cli(train_module.main, flags(tmp_path / "b", char_data, max_iters=3, **own), capsys)[0] == 0
    code, _, err = cli(train_module.main, [f"--out_dir={tmp_path / 'b'}", "--init_from=resume", "--max_iters=6",
                                           "--progress=False"], capsys)
    assert code == 0, err
    assert not [line for line in err.splitlines() if line.startswith("note:")]  # a longer max_iters is not named
    a, b = load_checkpoint(tmp_path / "a" / "ckpt.pt"), load_checkpoint(tmp_path / "b" / "ckpt.pt")
    assert_same_state(a["model"], b["model"])
    assert b["config"]["batch_size"] == 3 and b["config"]["lr_decay_iters"] == 40
    code, _, err = cli(train_module.main, [f"--out_dir={tmp_path / 'b'}", "--init_from=resume", "--max_iters=7",
                                           "--learning_rate=1e-3", "--progress=False"], capsys)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("note:")] == [
        "note: resuming with learning_rate=0.001 (the run's: 0.003); every other setting is the run's"]


def rates(out_dir) -> dict[int, float]:
    """{step: its learning rate} from metrics.jsonl (log_interval=1: the line after step s has iter s + 1)."""
    return {record["iter"] - 1: record["lr"] for record in metrics(out_dir) if "lr" in record}


def test_resuming_a_finished_wsd_run_longer_names_the_decay_it_moves(tmp_path, char_data, capsys):
    """Was: --init_from=resume --max_iters=16 on a wsd run that ended at 8 went from the end of its decay back to
    the peak without a word. The schedule is computed from the settings as given (a longer wsd budget moves its
    decay); a resume that changes the rate of the steps the run trained says so in one line, and the hint it
    gives holds min_lr from there. Rates against the formula written here: warmup lr * (s + 1) / (warmup + 1),
    then lr, then min + (lr - min) * (1 - sqrt((s - start) / decay)) over the last round(0.25 * max_iters)."""
    lr, low = 1e-2, 1e-3

    def wsd(step, max_iters):
        decay = round(0.25 * max_iters)
        if step < 1:
            return lr * (step + 1) / 2
        if step < max_iters - decay:
            return lr
        return low + (lr - low) * (1 - math.sqrt((step - (max_iters - decay)) / decay))

    own = dict(lr_schedule="wsd", wsd_decay_fraction=0.25, warmup_iters=1, learning_rate=lr, min_lr=low,
               eval_interval=8, log_interval=1)
    wsd_flags = [f for f in flags(tmp_path / "a", char_data, max_iters=8, **own) if "lr_decay_iters" not in f]
    assert cli(train_module.main, wsd_flags, capsys)[0] == 0  # lr_decay_iters, cosine's, would be refused
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    resume = ["--init_from=resume", "--progress=False", f"--dataset={char_data}"]
    code, _, err = cli(train_module.main, [f"--out_dir={tmp_path / 'a'}", "--max_iters=16", *resume], capsys)
    assert code == 0, err
    ran = rates(tmp_path / "a")
    assert list(ran) == list(range(16))
    assert [ran[s] for s in range(8)] == pytest.approx([wsd(s, 8) for s in range(8)], rel=1e-12)
    assert [ran[s] for s in range(8, 16)] == pytest.approx([wsd(s, 16) for s in range(8, 16)], rel=1e-12)
    assert ran[8] == lr and ran[7] < lr / 2  # back up to the peak
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes == [f"note: max_iters 8 → 16 moves the learning-rate schedule under the run: the rate goes from "
                     f"{wsd(7, 8):.3g} at step 7 to 0.01 at step 8, holds learning_rate=0.01 to step 12, then decays "
                     "to min_lr=0.001 over steps 12–16 (wsd, 1-sqrt); to hold min_lr=0.001 from here instead, give "
                     "--lr_schedule=cosine --warmup_iters=0 --lr_decay_iters=0"]
    hold = ["--max_iters=12", "--lr_schedule=cosine", "--warmup_iters=0", "--lr_decay_iters=0"]
    code, _, err = cli(train_module.main, [f"--out_dir={tmp_path / 'b'}", *hold, *resume], capsys)
    assert code == 0, err
    assert [rates(tmp_path / "b")[s] for s in range(8, 12)] == [low] * 4
    assert "holds min_lr=0.001 (past lr_decay_iters=0)" in err


def test_resuming_a_cosine_run_longer_names_a_moved_lr_decay_iters(tmp_path, char_data, capsys):
    """A cosine run's schedule ends at lr_decay_iters, not max_iters: a longer max_iters alone continues at min_lr
    (nanoGPT's) and is not named; a longer lr_decay_iters moves the cosine under the steps trained and is."""
    lr, low = 1e-2, 1e-3
    own = dict(warmup_iters=1, learning_rate=lr, min_lr=low, lr_decay_iters=6, eval_interval=6, log_interval=1)
    assert cli(train_module.main, flags(tmp_path / "a", char_data, max_iters=6, **own), capsys)[0] == 0
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    resume = ["--init_from=resume", "--progress=False", f"--dataset={char_data}"]
    code, _, err = cli(train_module.main, [f"--out_dir={tmp_path / 'a'}", "--max_iters=8", *resume], capsys)
    assert code == 0 and "note:" not in err, err
    assert [rates(tmp_path / "a")[s] for s in (6, 7)] == [low, low]
    code, _, err = cli(train_module.main, [f"--out_dir={tmp_path / 'b'}", "--max_iters=8", "--lr_decay_iters=11",
                                           *resume], capsys)
    assert code == 0, err

    def cosine(step):  # warmup 1, the cosine from step 1 to 11
        return low + 0.5 * (1 + math.cos(math.pi * (step - 1) / 10)) * (lr - low)

    assert [rates(tmp_path / "b")[s] for s in (6, 7)] == pytest.approx([cosine(6), cosine(7)], rel=1e-12)
    assert (f"note: lr_decay_iters 6 → 11, max_iters 6 → 8 moves the learning-rate schedule under the run: the rate "
            f"goes from {low + 0.5 * (1 + math.cos(math.pi * 4 / 5)) * (lr - low):.3g} at step 5 to "
            f"{cosine(6):.3g} at step 6, follows the cosine down to min_lr=0.001 at step 11; to hold") in err


def test_a_resumed_run_says_where_its_dtype_came_from_and_its_bits_per_byte(run_copy, capsys):
    """Was: a resumed run printed dtype=float32 (as asked) when no dtype was given; now the run's own, and as asked
    when given. The done line gives the best val loss in bits per byte too: that of the evaluation it came from."""
    resume = [f"--out_dir={run_copy / 'run'}", "--init_from=resume", "--progress=False",
              f"--dataset={run_copy / 'data'}"]
    code, out, err = cli(train_module.main, [*resume, "--max_iters=6"], capsys)
    assert code == 0, err
    assert "dtype=float32 (the resumed run's, recorded in its checkpoint)" in out and "as asked" not in out
    best = min((r for r in metrics(run_copy / "run") if "val_loss" in r), key=lambda r: r["val_loss"])
    done = out.strip().splitlines()[-1]
    assert done.startswith(f"done: 6 iterations, best val loss {best['val_loss']:.4f} "
                           f"({best['val_bits_per_byte']:.4f} bits/byte), ")
    code, out, err = cli(train_module.main, [*resume, "--max_iters=7", "--dtype=float32"], capsys)
    assert code == 0, err
    assert "dtype=float32 (as asked)" in out
