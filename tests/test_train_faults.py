"""train.py's faults, as a careless or hostile user makes them (see docs/what_is_safe.md): an evaluation over
an old run; SIGTERM and kill -9, also in a long compiled evaluation, a backward pass, an optimizer step and a save;
settings and flags out of range, silent or misleading; a run that diverges. Every case ends with its exit code, one
line that names the problem, no traceback, and the files that were there before byte-for-byte as they were.

Most cases run train.py's main() in this process (through errors.main_guard, as the script does); signals and
kill -9 need a real process and are few. Each case damages its own copy (the run_copy fixture) of one trained run
(conftest.py's trained, trained once for every test_*_faults.py).
"""

import itertools
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, assert_one_line_error, cli, digests, flags

import train as train_module
from model import GPTConfig
from options import parse_options
from training.checkpoint import load_checkpoint

# ---- 1, 2, 5: an evaluation over an old run -----------------------------------------------------------------------


@pytest.mark.parametrize("init_from", ["scratch", "resume"])
def test_eval_only_writes_nothing(run_copy, capsys, init_from):
    before = digests(run_copy)
    code, out, err = cli(train_module.main, flags(run_copy / "run", run_copy / "data", eval_only=True,
                                                  init_from=init_from), capsys)
    assert code == 0 and "val loss" in out, err
    assert digests(run_copy) == before


# ---- 7, 8: signals and kill -9 ------------------------------------------------------------------------------


def start_training(run_copy, script_env, **overrides) -> subprocess.Popen:
    argv = flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=10**6, lr_decay_iters=10**6,
                 **overrides)
    return subprocess.Popen([sys.executable, str(REPO / "train.py"), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=script_env)


def wait_for_training(process: subprocess.Popen, metrics: Path, lines: int) -> None:
    deadline = time.monotonic() + 60
    while len(metrics.read_text().splitlines()) <= lines:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no training step after 60 s"
        time.sleep(0.05)


def wait_for_handler(process: subprocess.Popen, signum: int, timeout: float = 60) -> None:
    """Until the process catches signum (its SigCgt mask in /proc, on Linux): the moment train.py's stop handler is
    in place. A fixed sleep raced it on a loaded machine, where the default action ends the process at once."""
    status = Path(f"/proc/{process.pid}/status")
    if not status.exists():  # no /proc: a generous sleep instead
        time.sleep(5)
        return
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, process.communicate()
        caught = next(line for line in status.read_text().splitlines() if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) >> (signum - 1) & 1:
            return
        assert time.monotonic() < deadline, f"signal {signum} not caught after {timeout} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_saves_and_exits_143(run_copy, script_env):
    lines = len((run_copy / "run" / "metrics.jsonl").read_text().splitlines())
    process = start_training(run_copy, script_env, eval_interval=10**6)
    try:
        wait_for_training(process, run_copy / "run" / "metrics.jsonl", lines + 2)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 143, stderr  # 128 + SIGTERM
    assert "Traceback" not in stdout + stderr and "done" not in stdout
    state = load_checkpoint(run_copy / "run" / "ckpt.pt")
    assert state["iter_num"] > 4  # the steps since the last evaluation are kept
    assert f"interrupted (SIGTERM): saved iteration {state['iter_num']}" in stdout


@pytest.mark.slow
def test_kill_9_during_saves_leaves_a_loadable_checkpoint_and_its_temps_are_cleared(run_copy, script_env):
    """eval_interval=1 saves after every step, so a kill lands in or near a save; whatever it leaves, ckpt.pt
    loads, and the next start removes the partial temporary files."""
    run = run_copy / "run"
    for delay in (0.05, 0.2):
        lines = len((run / "metrics.jsonl").read_text().splitlines())
        process = start_training(run_copy, script_env, eval_interval=1)
        wait_for_training(process, run / "metrics.jsonl", lines)
        time.sleep(delay)
        process.kill()
        process.communicate()
        assert load_checkpoint(run / "ckpt.pt")["iter_num"] >= 4
    (run / "ckpt.pt1234abcd.tmp").write_bytes(b"PK\x03\x04 the start of a checkpoint")  # as a kill leaves one
    (run / "best.ptzz.tmp").write_bytes(b"")
    resumed_from = load_checkpoint(run / "ckpt.pt")["iter_num"]
    result = train_module.train(*parse_options(
        flags(run, run_copy / "data", init_from="resume", max_iters=resumed_from + 1),
        (train_module.TrainConfig, train_module.GPTConfig), "", ""))
    assert result["iter_num"] == resumed_from + 1
    assert not list(run.glob("*.tmp"))


# Runs train.py (argv[1:]) so that its first checkpoint save is hit by two SIGTERMs 30 ms apart, as a scheduler
# that repeats its signal does; the second lands inside torch.save. SECOND_SIGNAL goes to stderr just before it
# (unbuffered: the process may end before anything after it runs), so that the test can time the abort alone.
SECOND_SIGNAL = "sending the second SIGTERM\n"
TWO_SIGNALS = f'''
import os, runpy, signal, sys, time
import torch

real_save = torch.save


def save_hit_twice(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.03)
    os.write(2, {SECOND_SIGNAL.encode()!r})
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)  # the second signal ends the process here
    return real_save(*args, **kwargs)


torch.save = save_hit_twice
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


@pytest.mark.slow
def test_a_second_sigterm_during_a_save_aborts_at_once_with_143(run_copy, script_env, tmp_path):
    """Was exit 1 with KeyboardInterrupt then RuntimeError inside torch.save, or exit 130 for a SIGTERM. Timed
    from the second signal to the exit (was: from the process's start, which a loaded machine made 27.9 s against
    a bound of 25 s): within 5 s, where the save it interrupts sleeps 30 s."""
    run = run_copy / "run"
    before = digests(run)
    (tmp_path / "two_signals.py").write_text(TWO_SIGNALS)
    process = subprocess.Popen([sys.executable, str(tmp_path / "two_signals.py"), str(REPO / "train.py"),
                                *flags(run, run_copy / "data", init_from="resume", max_iters=8, eval_interval=1)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=script_env)
    watchdog = threading.Timer(120, process.kill)  # the reads below have no timeout: a hang ends here, and fails
    watchdog.start()
    try:
        stderr = "".join(itertools.takewhile(lambda line: line != SECOND_SIGNAL, process.stderr))
        signalled = time.monotonic()
        # read on through the same buffered stream: communicate(timeout=...) reads the pipe itself, and would lose
        # what the stream has read past the line
        stderr += process.stderr.read()
        process.wait()
        waited = time.monotonic() - signalled
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert waited < 5, waited  # not the 30 s the save sleeps
    said = [line for line in stderr.strip().splitlines() if not line.startswith("note: resuming with")]
    assert said == ["aborted by a second SIGTERM: the checkpoints are the last ones "
                                                  "saved whole"]
    after = digests(run)
    assert {k: v for k, v in after.items() if k != "metrics.jsonl" and not k.endswith(".tmp")} == \
        {k: v for k, v in before.items() if k != "metrics.jsonl"}
    assert load_checkpoint(run / "ckpt.pt")["iter_num"] == 4


# ---- issue 17: a stop signal interrupts evaluation, compilation and steps ----------------------------------------


@pytest.mark.slow
def test_sigterm_during_a_long_compiled_evaluation_exits_143_within_seconds(run_copy, script_env):
    """eval_iters=10**9 takes days; the signal lands in its compilation or its batches, and must end the run
    within seconds, saving the complete state (iteration 4, as resumed), the other files as they were."""
    run = run_copy / "run"
    before = digests(run)
    weights = load_checkpoint(run / "ckpt.pt")["model"]
    process = subprocess.Popen(
        [sys.executable, str(REPO / "train.py"), *flags(run, run_copy / "data", init_from="resume", max_iters=8,
                                                        eval_iters=10**9, compile=True)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**script_env, "PYTHONUNBUFFERED": "1"})
    try:
        assert "parameters" in process.stdout.readline()  # set up: the evaluation at iteration 4 starts
        wait_for_handler(process, signal.SIGTERM)
        time.sleep(1.0)  # into the evaluation's compilation or its batches
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
        waited = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 143, stderr
    assert waited < 20, waited
    assert "Traceback" not in stdout + stderr and "done" not in stdout
    assert "interrupted (SIGTERM): saved iteration 4" in stdout
    after = digests(run)
    assert {k: v for k, v in after.items() if k != "ckpt.pt"} == {k: v for k, v in before.items() if k != "ckpt.pt"}
    state = load_checkpoint(run / "ckpt.pt")
    assert state["iter_num"] == 4
    assert all(torch.equal(state["model"][name], weights[name]) for name in weights)  # no half-evaluated state


@pytest.mark.parametrize("where", ["backward", "optimizer step"])
def test_a_signal_that_cuts_a_step_short_saves_the_step_before(run_copy, monkeypatch, where):
    """A signal in the backward pass of step 6 (its batches drawn) saves iteration 6 with the random state from
    before that step; one in its optimizer step lets the step finish and saves iteration 7. Either way, resuming
    gives exactly the weights of a run that was never interrupted."""
    real_step = train_module.train_step
    sections = (train_module.TrainConfig, train_module.GPTConfig)
    argv = flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=10, eval_interval=100)
    shutil.copytree(run_copy / "run", run_copy / "whole")
    whole = train_module.train(*parse_options([*argv, f"--out_dir={run_copy / 'whole'}"], sections, "", ""))
    assert whole["iter_num"] == 10

    class SignalInBackward(torch.autograd.Function):  # the signal lands inside the backward pass of step 6
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # interrupted: the handler raises here
            return grad

    def signal_and_wait(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)  # deferred: the step goes on after this

    def step_with_signal(run, lr):
        if run.iter_num == 6:
            hook = run.model.ln_f.register_forward_hook(lambda m, i, out: SignalInBackward.apply(out)) \
                if where == "backward" else run.optimizer.register_step_pre_hook(signal_and_wait)
            try:
                return real_step(run, lr)
            finally:
                hook.remove()
        return real_step(run, lr)

    monkeypatch.setattr(train_module, "train_step", step_with_signal)
    started = time.monotonic()
    cut = train_module.train(*parse_options(argv, sections, "", ""))
    assert time.monotonic() - started < 25
    saved = 6 if where == "backward" else 7
    assert cut["interrupted"] == signal.SIGTERM and cut["iter_num"] == saved
    assert load_checkpoint(run_copy / "run" / "ckpt.pt")["iter_num"] == saved
    monkeypatch.setattr(train_module, "train_step", real_step)
    resumed = train_module.train(*parse_options(argv, sections, "", ""))
    assert resumed["iter_num"] == 10
    for name, tensor in whole["model"].state_dict().items():
        assert torch.equal(resumed["model"].state_dict()[name], tensor), name


def test_sigterm_during_an_eval_only_run_writes_nothing(run_copy, monkeypatch):
    def estimate_then_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)

    before = digests(run_copy)
    monkeypatch.setattr(train_module, "estimate_loss", estimate_then_signal)
    result = train_module.train(*parse_options(flags(run_copy / "run", run_copy / "data", init_from="resume",
                                                     eval_only=True),
                                               (train_module.TrainConfig, train_module.GPTConfig), "", ""))
    assert result["interrupted"] == signal.SIGTERM
    assert digests(run_copy) == before


# ---- settings a user gives ------------------------------------------------------------------------------------


@pytest.mark.parametrize("body, fragment", [
    ("max_iters = 10**10**10\n", "too large for a setting"),
    ("max_iters = 2**4000 * 2**4000 * 2**4000\n", "too large"),
    ("max_iters = [0] * 10**9\n", "too long for a setting"),
    ("wandb_run_name = 'x' * 10**12\n", "too long for a setting"),
])
def test_config_values_that_take_unbounded_time_or_memory_are_refused(tmp_path, capsys, body, fragment):
    (tmp_path / "config.py").write_text(body)
    started = time.perf_counter()
    result = cli(train_module.main, [tmp_path / "config.py"], capsys)
    assert time.perf_counter() - started < 10
    assert_one_line_error(*result, f"{tmp_path / 'config.py'}:1", fragment)


def test_always_save_checkpoint_false_saves_ckpt_only_on_improvement(run_copy, monkeypatch):
    saved = []
    real_save = train_module.save_checkpoint

    def save(state, path):
        saved.append((Path(path).name, state["iter_num"]))
        real_save(state, path)

    monkeypatch.setattr(train_module, "save_checkpoint", save)
    val_losses = iter([3.0, 3.5, 2.5, 2.8, 2.9])  # evaluations at 0, 2, 4, 6, 8
    monkeypatch.setattr(train_module, "estimate_loss", lambda *a, **k: {"train": 1.0, "val": next(val_losses)})
    argv = flags(run_copy / "new", run_copy / "data", max_iters=8, lr_decay_iters=8, eval_interval=2,
                 always_save_checkpoint=False)
    train_module.train(*parse_options(argv, (train_module.TrainConfig, train_module.GPTConfig), "", ""))
    assert saved == [("best.pt", 0), ("ckpt.pt", 0), ("best.pt", 4), ("ckpt.pt", 4), ("ckpt.pt", 8)]


# ---- issue 17: settings that were tracebacks, silent or misleading -----------------------------------------------


@pytest.mark.parametrize("argv, fragments", [
    (["--device=tpu"], ["device='tpu'", "not a device name"]),
    (["--device=cuda:7"], ["device='cuda:7' is not available"]),
    (["--init_from=scrach"], ["init_from='scrach' must be one of scratch, resume, gpt2"]),
    (["--out_dir="], ["out_dir is empty"]),
    (["--max_iters=10**10**10"], ["--max_iters='10**10**10': expected int"]),
    (["--beta1=1.5"], ["beta1=1.5 must be in [0, 1)"]),
    (["--beta2=-0.1"], ["beta2=-0.1 must be in [0, 1)"]),
    (["--beta1=nan"], ["beta1=nan must be in [0, 1)"]),
    (["--seed=18446744073709551616"], ["seed=18446744073709551616 must be in [0, 2**64)"]),
    (["--seed=-1"], ["seed=-1 must be in [0, 2**64)"]),
    (["--grad_clip=-1"], ["grad_clip=-1.0 must be a finite number >= 0 (0: off)"]),
    (["--grad_clip=nan"], ["grad_clip=nan must be a finite number >= 0"]),
    (["--max_seconds=-10"], ["max_seconds=-10.0 must be a finite number >= 0 (0: off)"]),
    (["--weight_decay=nan"], ["weight_decay=nan must be a finite number >= 0"]),
    (["--weight_decay=-0.1"], ["weight_decay=-0.1 must be a finite number >= 0"]),
    (["--pos_encoding=sinusoidal", "--sinusoidal_amplitude=inf"], ["sinusoidal_amplitude=inf must be finite"]),
    (["--learned_init_std=inf"], ["learned_init_std=inf must be finite"]),
    (["--pos_encoding=rope", "--rope_base=inf"], ["rope_base=inf must be finite"]),
    (["--dropout=nan"], ["dropout=nan must be in [0, 1)"]),
    (["--learning_rate=inf"], ["learning_rate=inf must be a finite number > 0"]),
    (["--min_lr=inf"], ["min_lr=inf must be a finite number >= 0"]),
    (["--lr_schedule=wsd", "--decay_lr=False"], ["lr_schedule='wsd' decays", "decay_lr=False holds it constant",
                                                 "drop --decay_lr=False"]),
])
def test_bad_training_settings_are_one_line_before_anything_runs(run_copy, capsys, argv, fragments):
    before = digests(run_copy)
    result = cli(train_module.main, [*flags(run_copy / "new", run_copy / "data"), *argv], capsys)
    assert_one_line_error(*result, *fragments)
    assert digests(run_copy) == before and not (run_copy / "new").exists()


def test_resuming_below_the_runs_step_is_refused(run_copy, capsys):
    """Was (issue 57): --init_from=resume --max_iters=2 on a run at step 4 trained nothing, exit 0, "done: 4
    iterations"; as into a new folder, it is one line now, the run as it was. At its own step a resume still runs
    (a run stopped during its final evaluation finishes it)."""
    before = digests(run_copy)
    resume = [f"--out_dir={run_copy / 'run'}", "--init_from=resume", "--progress=False",
              f"--dataset={run_copy / 'data'}"]
    result = cli(train_module.main, [*resume, "--max_iters=2"], capsys)
    assert_one_line_error(*result, "max_iters=2 is below step 4", "no step would train",
                          "give a --max_iters above 4")
    assert digests(run_copy) == before
    code, out, err = cli(train_module.main, [*resume, "--max_iters=4"], capsys)
    assert code == 0 and "done: 4 iterations" in out, err


@pytest.mark.parametrize("argv, fragments", [
    (["--batch_size=1000000000"], ["batch_size=1000000000 x block_size=16", "GB for a step", "smaller batch_size"]),
    (["--gradient_accumulation_steps=1000000000"], ["gradient_accumulation_steps=1000000000)", "GB for a step"]),
    (["--n_head=16", "--n_embd=1000000000000"], ["n_embd=1000000000000 make more than 2**50 parameters"]),
    (["--t5_max_distance=0"], ["t5_max_distance=0 must be at least 1"]),
])
def test_sizes_no_memory_holds_are_one_line(run_copy, capsys, argv, fragments):
    """Were the kernel's OOM killer, an allocator's traceback, or a shape overflow's."""
    before = digests(run_copy)
    started = time.perf_counter()
    result = cli(train_module.main, [*flags(run_copy / "new", run_copy / "data"), *argv], capsys)
    assert_one_line_error(*result, *fragments)
    assert time.perf_counter() - started < 10
    assert digests(run_copy) == before


@pytest.mark.parametrize("setting", ["grad_clip", "max_seconds"])
def test_zero_still_turns_grad_clip_and_max_seconds_off(run_copy, capsys, setting):
    code, out, err = cli(train_module.main, flags(run_copy / "new", run_copy / "data", **{setting: 0}), capsys)
    assert code == 0 and "done: 4 iterations" in out, err


@pytest.mark.parametrize("old_run", [False, True])
def test_a_diverged_run_names_only_a_checkpoint_it_wrote(run_copy, capsys, monkeypatch, old_run):
    """NaN at the first evaluation: nothing of this run was saved, and an old run's ckpt.pt (replaced with
    --overwrite) is not this run's last good checkpoint."""
    monkeypatch.setattr(train_module, "estimate_loss", lambda *a, **k: {"train": math.nan, "val": math.nan})
    out_dir = run_copy / ("run" if old_run else "new")
    before = digests(run_copy)
    result = cli(train_module.main, flags(out_dir, run_copy / "data", overwrite=True), capsys)
    assert_one_line_error(*result, "val loss is nan at iteration 0", "No checkpoint of this run was saved")
    assert "ckpt.pt" not in result[2]
    assert digests(run_copy) == before


def test_a_diverged_resumed_run_names_its_checkpoint(run_copy, capsys, monkeypatch):
    monkeypatch.setattr(train_module, "estimate_loss", lambda *a, **k: {"train": math.nan, "val": math.nan})
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=8),
                 capsys)
    assert_one_line_error(*result, f"The last good checkpoint is {run_copy / 'run' / 'ckpt.pt'}")


def test_fsdp_without_torchrun_says_it_is_one_process(run_copy, capsys):
    code, out, err = cli(train_module.main, flags(run_copy / "new", run_copy / "data", parallel="fsdp",
                                                  max_iters=2), capsys)
    assert code == 0 and "done: 2 iterations" in out, err
    notes = [line for line in err.splitlines() if "fsdp" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "one process" in notes[0]


def test_a_setting_shared_by_encodings_is_used_by_each_of_them():
    """rope_base is read by every rotary encoding: given with xpos it is no unused setting."""
    for encoding in ("rope", "partial_rope", "p_rope", "xpos", "head_rope", "layer_rope", "pope"):
        model_config = GPTConfig(pos_encoding=encoding)
        assert train_module.unused_settings(train_module.TrainConfig(), model_config, ["rope_base"]) == []


@pytest.mark.parametrize("given, fragments", [
    ({"t5_num_buckets": 4}, ["t5_num_buckets is a setting of pos_encoding=t5, and this run's is learned"]),
    ({"pos_encoding": "rope", "learned_init_std": 0.02}, ["learned_init_std is a setting of pos_encoding=learned"]),
    ({"wsd_decay_shape": "linear"}, ["wsd_decay_shape is a setting of lr_schedule=wsd", "schedule is cosine"]),
    ({"lr_schedule": "wsd", "lr_decay_iters": 100},
     ["lr_decay_iters is a setting of lr_schedule=cosine, and this run's schedule is wsd"]),
    ({"decay_lr": False, "warmup_iters": 5, "min_lr": 1e-5},
     ["warmup_iters is a setting of the learning-rate schedule, and this run's rate is constant (decay_lr=False); "
      "min_lr is a setting of"]),
    ({"wandb_project": "owt", "wandb_mode": "offline"},
     ["wandb_project is a setting of wandb_log, and this run's is False (no metrics go to Weights & Biases; "
      "--wandb_log=True sends them); wandb_mode is a setting of wandb_log"]),
    ({"pos_encoding": "rope", "partial_rope_fraction": 0.5},
     ["partial_rope_fraction is a setting of pos_encoding=partial_rope, and this run's is rope"]),
    ({"pos_encoding": "rope", "rope_heads": 1},
     ["rope_heads is a setting of pos_encoding=head_rope, and this run's is rope"]),
    ({"nope_every": 2}, ["nope_every is a setting of pos_encoding=layer_rope, and this run's is learned"]),
    ({"pos_encoding": "alibi", "rope_base": 500.0},
     ["rope_base is a setting of pos_encoding=rope|partial_rope|p_rope|xpos|head_rope|layer_rope|pope, and this "
      "run's is alibi"]),
])
def test_a_flag_that_would_do_nothing_is_refused_before_the_run(tmp_path, char_data, capsys, given, fragments):
    """Was: --t5_num_buckets=4 under learned positions, or --wsd_decay_shape=linear under cosine, trained
    without a word."""
    result = cli(train_module.main, flags(tmp_path / "out", char_data, **given), capsys)
    assert_one_line_error(*result, *fragments, "it would do nothing")
    assert not (tmp_path / "out").exists()


def test_a_schedules_setting_from_a_config_file_is_no_flag_and_trains(tmp_path, char_data, capsys):
    """The configs built on baby_cpu.py (nanoGPT's cosine recipe) inherit its lr_decay_iters under their wsd: a
    config file's schedule settings are not refused, only train.py's flags are."""
    config = tmp_path / "wsd.py"
    config.write_text('lr_schedule = "wsd"\nlr_decay_iters = 100\n')
    given = [flag for flag in flags(tmp_path / "out", char_data, max_iters=2) if "lr_decay_iters" not in flag]
    code, out, err = cli(train_module.main, [str(config), *given], capsys)
    assert code == 0 and "done: 2 iterations" in out, err


def test_wandb_settings_from_a_config_file_are_no_flags_and_train(tmp_path, char_data, capsys):
    """nanoGPT's config files set wandb_project and wandb_run_name beside wandb_log = False ("on if you like"): from
    a config file they are not refused, on a new run or a resumed one; as flags they are, on a resumed one too (its
    wandb settings are this process's, not the checkpoint's)."""
    config = tmp_path / "gpt2.py"
    config.write_text('wandb_log = False\nwandb_project = "owt"\nwandb_run_name = "gpt2-124M"\n')
    code, out, err = cli(train_module.main, [str(config), *flags(tmp_path / "out", char_data, max_iters=2)], capsys)
    assert code == 0 and "done: 2 iterations" in out, err
    resume = [f"--out_dir={tmp_path / 'out'}", "--init_from=resume", "--max_iters=3", "--progress=False",
              f"--dataset={char_data}"]
    code, out, err = cli(train_module.main, [str(config), *resume], capsys)
    assert code == 0 and "done: 3 iterations" in out, err
    result = cli(train_module.main, [*resume, "--max_iters=4", "--wandb_run_name=again"], capsys)
    assert_one_line_error(*result, "wandb_run_name is a setting of wandb_log, and this run's is False", "it would do "
                          "nothing; drop it")


@pytest.mark.parametrize("given, fragment", [
    ({"head_learning_rate": 0.01}, "head_learning_rate is a setting of tie_head=False, and this run's head is the "
                                   "token table"),
    ({"batch_size_start": 2}, "batch_size_start is a setting of batch_size_warmup, and this run's is 0"),
    ({"fire_width": 8}, "fire_width is a setting of pos_encoding=fire, and this run's is learned"),
    ({"fire_width": 32}, "fire_width is a setting of pos_encoding=fire, and this run's is learned"),
])
def test_a_resume_given_a_flag_that_would_do_nothing_is_refused_before_a_step(run_copy, capsys, given, fragment):
    """Was: the check was skipped on resume, so these trained on the tied-head, learned, warmup-less run with a note
    (fire_width=8 was called a shape the checkpoint lacks, fire_width=32 said nothing)."""
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=8,
                                          **given), capsys)
    assert_one_line_error(*result, fragment, "it would do nothing; drop it (a resumed run keeps its checkpoint's")
    assert digests(run_copy) == before


def test_a_resume_takes_the_flags_its_checkpoints_settings_use(tmp_path, char_data, capsys):
    """The check reads the resumed run's settings, not the flags' alone: rope_base on a rope run, head_learning_rate
    on an untied head and batch_size_start under a batch warmup resume, none of their owners given again."""
    used = dict(rope_base=500.0, head_learning_rate=0.02, batch_size_start=2)
    code, out, err = cli(train_module.main, flags(tmp_path / "run", char_data, max_iters=2, pos_encoding="rope",
                                                  tie_head=False, batch_size_warmup=2, **used), capsys)
    assert code == 0, err
    code, out, err = cli(train_module.main, flags(tmp_path / "run", char_data, init_from="resume", **used), capsys)
    assert code == 0 and "done: 4 iterations" in out, err
