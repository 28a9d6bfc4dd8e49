"""Faults and bad input, as a careless or hostile user makes them: every case ends with its exit code, one line
that names the problem, no traceback, and the files that were there before byte-for-byte as they were.

Most cases run the scripts' main() in this process (through errors.main_guard, as the scripts do); signals,
kill -9 and a full disk need a real process and are few.
"""

import errno
import hashlib
import io
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
import torch

import sample
import train as train_module
from errors import OptionError, UserError, main_guard
from files import lock_folder
from options import chosen_values, parse_options
from text.dataset import prepare
from text.tokenizer import CharTokenizer
from training.checkpoint import load_checkpoint, save_checkpoint

REPO = Path(__file__).resolve().parents[1]
SETTINGS = dict(device="cpu", compile=False, progress=False, batch_size=4, eval_iters=2, eval_interval=4,
                log_interval=1, max_iters=4, lr_decay_iters=4, warmup_iters=1, n_layer=1, n_head=2, n_embd=16,
                block_size=16)


def flags(out_dir, dataset, **overrides) -> list[str]:
    return [f"--{k}={v}" for k, v in {**SETTINGS, "out_dir": out_dir, "dataset": dataset, **overrides}.items()]


def cli(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """Run a script's main as its __main__ does; (exit status, stdout, stderr)."""
    capsys.readouterr()
    try:
        main_guard(main, [str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "weights_only" not in lines[0]  # never torch's advice to load pickled code


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "train.lock"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus_text) -> Path:
    """A finished 4-step run (ckpt.pt, best.pt, metrics.jsonl) and its data, under one folder."""
    root = tmp_path_factory.mktemp("trained")
    prepare(corpus_text[:5000], root / "data", "char")
    config, model_config = parse_options(flags(root / "run", root / "data"),
                                         (train_module.TrainConfig, train_module.GPTConfig), "", "")
    train_module.train(config, model_config)
    return root


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    """A copy of the trained run and its data, to damage; returns the folder holding run/ and data/."""
    shutil.copytree(trained, tmp_path / "copy")
    return tmp_path / "copy"


# ---- 1, 2, 5: a new run, or an evaluation, over an old run ----------------------------------------------------


def test_new_run_over_an_old_one_is_refused(run_copy, capsys):
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", max_iters=8), capsys)
    assert_one_line_error(*result, "already holds a run", "--init_from=resume", "--overwrite=True")
    assert digests(run_copy) == before


def test_overwrite_replaces_the_run_but_a_failed_start_keeps_it(run_copy, capsys):
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", overwrite=True, block_size=10**5,
                                          n_layer=1), capsys)  # fails loading the data, after the out_dir check
    assert_one_line_error(*result, "too few for one block")
    assert digests(run_copy) == before  # metrics.jsonl included: nothing is deleted before training starts
    code, out, err = cli(train_module.main, flags(run_copy / "run", run_copy / "data", overwrite=True,
                                                  max_iters=2, eval_interval=1), capsys)
    assert code == 0 and "done: 2 iterations" in out, err
    records = [json.loads(line) for line in (run_copy / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in records if "val_loss" in r] == [0, 1, 2]  # the new run's log alone
    assert load_checkpoint(run_copy / "run" / "ckpt.pt")["iter_num"] == 2


@pytest.mark.parametrize("init_from", ["scratch", "resume"])
def test_eval_only_writes_nothing(run_copy, capsys, init_from):
    before = digests(run_copy)
    code, out, err = cli(train_module.main, flags(run_copy / "run", run_copy / "data", eval_only=True,
                                                  init_from=init_from), capsys)
    assert code == 0 and "val loss" in out, err
    assert digests(run_copy) == before


# ---- 3: resume checks the tokenizer itself --------------------------------------------------------------------


def test_resume_on_a_vocabulary_of_the_same_size_but_other_characters(run_copy, corpus_text, capsys):
    text = corpus_text[:5000]
    chars = CharTokenizer.from_text(text).chars
    other = chr(ord(chars[-1]) + 1)  # the last character replaced by one the text lacks, also sorted last
    prepare(text.replace(chars[-1], other), run_copy / "other", "char")
    assert json.loads((run_copy / "other" / "tokenizer.json").read_text())["vocab_size"] == len(chars)
    before = digests(run_copy / "run")
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "other", init_from="resume", max_iters=8),
                 capsys)
    assert_one_line_error(*result, "ckpt.pt", "other characters", f"id {len(chars) - 1}", repr(chars[-1]),
                          repr(other))
    assert digests(run_copy / "run") == before


# ---- 4: prepare writes all three files or none -----------------------------------------------------------------


def test_prepare_that_fails_writing_leaves_the_old_dataset_whole(run_copy, monkeypatch):
    before = digests(run_copy / "data")

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", disk_full)  # tokenizer.json, the last of the three to be written
    with pytest.raises(UserError, match=r"could not write .*train\.bin.*No space left on device"):
        prepare("a whole other corpus, with other characters! " * 50, run_copy / "data", "char")
    assert digests(run_copy / "data") == before  # and no temporary file left beside them


def limit_file_size(limit: int):
    def preexec():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # then a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


@pytest.mark.slow
def test_full_disk_during_training_keeps_the_last_checkpoint(run_copy, script_env):
    """A file size limit stands in for a full disk: a checkpoint cannot be written whole, the old one stays."""
    run = run_copy / "run"
    before = digests(run)
    old_metrics = (run / "metrics.jsonl").read_bytes()
    limit = (run / "best.pt").stat().st_size // 2
    result = subprocess.run([sys.executable, str(REPO / "train.py"),
                             *flags(run, run_copy / "data", init_from="resume", max_iters=6)],
                            capture_output=True, text=True, env=script_env, timeout=120,
                            preexec_fn=limit_file_size(limit))
    assert_one_line_error(result.returncode, result.stdout, result.stderr, "could not write", "File too large")
    assert {k: v for k, v in digests(run).items() if k != "metrics.jsonl"} == \
        {k: v for k, v in before.items() if k != "metrics.jsonl"}
    assert (run / "metrics.jsonl").read_bytes().startswith(old_metrics)  # resume appends, never cuts


# ---- 6: one training per out_dir ----------------------------------------------------------------------------


def test_a_second_training_in_the_same_out_dir_is_refused(run_copy, capsys):
    before = digests(run_copy)
    with ExitStack() as stack:
        lock_folder(run_copy / "run", stack)  # as a training running in another process holds it
        result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume",
                                              max_iters=6), capsys)
        assert_one_line_error(*result, "in use by a training already running", f"process {os.getpid()}")
        assert digests(run_copy) == before
    code, out, err = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume",
                                                  max_iters=6), capsys)
    assert code == 0 and "done: 6 iterations" in out, err  # released: the next one runs


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


# ---- checkpoints a user gives: damaged, hostile, inconsistent ---------------------------------------------------


class Payload:
    """Unpickling this runs code: it creates a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def damage(path: Path, how: str) -> str:
    """Damage the checkpoint at path; returns what the error line must say."""
    good = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
        return "is empty"
    if how == "truncated":
        path.write_bytes(good[:len(good) // 2])
        return "truncated, damaged or not a checkpoint"
    if how == "flipped":
        middle = len(good) // 2
        path.write_bytes(good[:middle] + bytes(b ^ 0xFF for b in good[middle:middle + 64]) + good[middle + 64:])
        return "ckpt.pt"
    if how == "text":
        path.write_text("n_layer = 4\n")
        return "truncated, damaged or not a checkpoint"
    if how == "code":
        torch.save({"model_args": {}, "model": {}, "tokenizer": {}, "x": Payload(path.parent / "marker")}, path)
        return "pickled objects other than tensors"
    state = load_checkpoint(path)
    if how == "no_tokenizer":
        del state["tokenizer"]
        message = "lacks 'tokenizer'"
    elif how == "not_a_dict":
        state = [1, 2, 3]
        message = "not a checkpoint of this repo"
    elif how == "huge_vocab":  # a small file declaring a vocabulary of 10^8: 25 GB if allocated
        state["model_args"]["vocab_size"] = 10**8
        message = "should be (100000000, 16) by the settings but is"
    elif how == "missing_weight":
        del state["model"]["lm_head.weight"], state["model"]["input_layer.wte"]
        message = "the weights do not fit the model settings"
    elif how == "unknown_setting":
        state["model_args"]["n_expert"] = 8
        message = "unknown model setting 'n_expert'"
    elif how == "bad_setting":
        state["model_args"]["n_head"] = 3
        message = "n_embd=16 is not divisible by n_head=3"
    elif how == "nan_weights":
        state["model"]["ln_f.weight"][3] = float("nan")
        message = "the weights hold NaN or inf"
    elif how == "tokenizer_too_big":
        chars = state["tokenizer"]["chars"] + "\u00e9\u00e8"
        state["tokenizer"] = {**state["tokenizer"], "chars": chars, "vocab_size": len(chars)}
        message = f"its tokenizer has {len(chars)} tokens, more than the model's vocab_size={len(chars) - 2}"
    save_checkpoint(state, path)
    return message


HOW = ["empty", "truncated", "flipped", "text", "code", "no_tokenizer", "not_a_dict", "huge_vocab", "missing_weight",
       "unknown_setting", "bad_setting", "nan_weights", "tokenizer_too_big"]


@pytest.mark.parametrize("how", HOW)
def test_sampling_from_a_bad_checkpoint_is_one_line(run_copy, capsys, how):
    run = run_copy / "run"
    (run / "best.pt").unlink()
    message = damage(run / "ckpt.pt", how)
    before = digests(run_copy)
    started = time.perf_counter()
    result = cli(sample.main, [f"--out_dir={run}", "--device=cpu", "--max_new_tokens=4"], capsys)
    assert_one_line_error(*result, str(run / "ckpt.pt"), message)
    assert time.perf_counter() - started < 20  # nothing of the declared size was allocated
    assert digests(run_copy) == before
    assert not (run / "marker").exists()


@pytest.mark.parametrize("how", ["truncated", "code", "huge_vocab", "no_tokenizer"])
def test_resuming_from_a_bad_checkpoint_is_one_line(run_copy, capsys, how):
    message = damage(run_copy / "run" / "ckpt.pt", how)
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=8),
                 capsys)
    assert_one_line_error(*result, "ckpt.pt", message)
    assert digests(run_copy) == before


def test_resuming_from_weights_only_is_one_line(run_copy, capsys):
    shutil.copy(run_copy / "run" / "best.pt", run_copy / "run" / "ckpt.pt")
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=8),
                 capsys)
    assert_one_line_error(*result, "cannot be resumed", "optimizer")


def test_corrupt_best_pt_falls_back_to_ckpt_pt(run_copy, capsys):
    damage(run_copy / "run" / "best.pt", "truncated")
    code, out, err = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", "--max_new_tokens=4",
                                       "--num_samples=1"], capsys)
    assert code == 0 and "Traceback" not in err
    warning = [line for line in err.splitlines() if line.startswith("warning")]
    assert len(warning) == 1 and "best.pt" in warning[0] and "sampling from" in warning[0] \
        and warning[0].endswith("ckpt.pt instead")
    assert out.count("---------------") == 1


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


def test_out_dir_naming_a_file(run_copy, capsys):
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run" / "metrics.jsonl", run_copy / "data"), capsys)
    assert_one_line_error(*result, "metrics.jsonl", "is a file, not a folder")
    assert digests(run_copy) == before


def test_a_shape_flag_on_resume_is_reported_and_dropout_applies(run_copy, capsys):
    before = digests(run_copy)
    result = cli(train_module.main, [*flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=6),
                                     "--n_layer=3"], capsys)
    assert_one_line_error(*result, "n_layer=3 (the checkpoint has 1)", "keeps its shape")
    assert digests(run_copy) == before
    argv = [*flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=6), "--dropout=0.25"]
    sections = (train_module.TrainConfig, train_module.GPTConfig)
    result = train_module.train(*parse_options(argv, sections, "", ""),
                                frozenset(chosen_values(argv, sections)))
    assert result["model"].config.dropout == 0.25  # nanoGPT's resume takes dropout from the command line
    assert load_checkpoint(run_copy / "run" / "ckpt.pt")["model_args"]["dropout"] == 0.25


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


# ---- data a user gives --------------------------------------------------------------------------------------


def test_damaged_tokenizer_json(run_copy, capsys):
    (run_copy / "data" / "tokenizer.json").write_text('{"kind": "char", "chars": "ab')
    result = cli(train_module.main, flags(run_copy / "new", run_copy / "data"), capsys)
    assert_one_line_error(*result, "tokenizer.json is damaged", "prepare.py")


@pytest.mark.parametrize("split", ["train", "val"])
def test_bin_file_cut_short_or_from_another_prepare(run_copy, capsys, split):
    path = run_copy / "data" / f"{split}.bin"
    path.write_bytes(path.read_bytes()[:-6])
    result = cli(train_module.main, flags(run_copy / "new", run_copy / "data"), capsys)
    assert_one_line_error(*result, f"{split}.bin holds", "tokenizer.json says", "prepare.py")
    assert not (run_copy / "new" / "ckpt.pt").exists()


@pytest.mark.parametrize("compile_model", [False, True])
def test_token_ids_beyond_the_vocabulary_in_a_bin_file(run_copy, capsys, compile_model, monkeypatch):
    """The compiled model skips its own id check: the data is checked as it is batched, compiled or not."""
    if compile_model:  # torch.compile itself is slow to start; what matters is that the model's check is off
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    path = run_copy / "data" / "train.bin"
    tokens = np.fromfile(path, dtype=np.uint16)
    tokens[::7] = 60000  # a damaged file of the right size
    tokens.tofile(path)
    # Where the split's SHA-256 is recorded, the start refuses the file (issue 28); a dataset prepared before
    # splits were recorded has none, and its batches are what finds it.
    description = json.loads((run_copy / "data" / "tokenizer.json").read_text())
    del description["split"]
    (run_copy / "data" / "tokenizer.json").write_text(json.dumps(description))
    result = cli(train_module.main, flags(run_copy / "new", run_copy / "data"), capsys)
    assert_one_line_error(*result, "token id 60000", "train.bin", "outside the vocabulary")


# ---- sampling input -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag, fragment", [
    ("--temperature=nan", "temperature=nan must be a finite number"),
    ("--temperature=inf", "temperature=inf must be a finite number"),
    ("--top_k=0", "top_k=0 must be >= 1"),
    ("--slide=0", "slide=0 must be >= 1"),
    ("--slide=99", "slide=99 must be at most the model's block_size=16"),
    ("--init_from=gtp2", "init_from='gtp2' must be one of resume, gpt2"),
])
def test_bad_sampling_settings_are_one_line(run_copy, capsys, flag, fragment):
    result = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", flag], capsys)
    assert_one_line_error(*result, fragment)


@pytest.mark.parametrize("kind", ["folder", "binary", "missing", "unreadable"])
def test_bad_prompt_files_are_one_line(run_copy, capsys, kind):
    path = run_copy / "prompt"
    if kind == "folder":
        path.mkdir()
    elif kind in ("binary", "unreadable"):
        path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    if kind == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        path.chmod(0)
    expected = {"folder": "is a folder", "binary": "is not UTF-8 text", "missing": "does not exist",
                "unreadable": "cannot be read"}[kind]
    result = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", f"--start=FILE:{path}"], capsys)
    assert_one_line_error(*result, f"prompt file {str(path)!r}", expected)


# ---- what main_guard catches --------------------------------------------------------------------------------


def test_main_guard_prints_user_errors_and_leaves_bugs_loud(capsys):
    def user_mistake(argv):
        raise OptionError("--batch_size=0 must be at least 1")

    def bug(argv):
        raise ValueError("an internal invariant broke")

    assert_one_line_error(*cli(user_mistake, [], capsys), "--batch_size=0")
    with pytest.raises(ValueError, match="internal invariant"):  # a bug keeps its traceback
        main_guard(bug, [])


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


# ---- issue 17: resume checks the data split ------------------------------------------------------------------


def test_resume_on_another_split_of_the_same_characters_is_refused(run_copy, corpus_text, capsys):
    from text.dataset import PrepareConfig

    text = corpus_text[:5000]
    prepare(text, run_copy / "other", "char", PrepareConfig(val_fraction=0.2))
    assert (run_copy / "other" / "tokenizer.json").read_text().count('"chars"') == 1
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "other", init_from="resume", max_iters=8),
                 capsys)
    assert_one_line_error(*result, "ckpt.pt", "another split", "val_fraction 0.1 before, 0.2 now",
                          "--val_fraction=0.1", "--overwrite=True")
    assert digests(run_copy) == before


def test_a_checkpoint_without_a_recorded_split_resumes_and_says_so_once(run_copy, capsys):
    path = run_copy / "run" / "ckpt.pt"
    state = load_checkpoint(path)
    del state["tokenizer"]["split"]  # as checkpoints written before splits were recorded
    save_checkpoint(state, path)
    code, out, err = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume",
                                                  max_iters=6), capsys)
    assert code == 0 and "done: 6 iterations" in out, err
    warnings = [line for line in err.splitlines() if "split" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ") and "ckpt.pt" in warnings[0], err
    assert "split" in load_checkpoint(path)["tokenizer"]  # recorded from now on


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


# ---- issue 17: the run folder ----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["chmod", "read-only file system"])
def test_resume_in_a_read_only_out_dir_is_one_line(run_copy, capsys, monkeypatch, how):
    run = run_copy / "run"
    if how == "chmod":
        if os.geteuid() == 0:
            pytest.skip("root writes any folder")
        run.chmod(0o555)
    else:  # what access() answers on a file system mounted read-only, for root too
        from training import run_dir

        monkeypatch.setattr(run_dir.os, "access", lambda path, mode: Path(path) != run)
    before = digests(run_copy)
    try:
        result = cli(train_module.main, flags(run, run_copy / "data", init_from="resume", max_iters=8), capsys)
    finally:
        run.chmod(0o755)
    assert_one_line_error(*result, f"out_dir={str(run)!r} cannot be written", "folder you can write")
    assert digests(run_copy) == before


def test_resume_without_a_checkpoint_makes_no_out_dir(run_copy, capsys):
    result = cli(train_module.main, flags(run_copy / "missing", run_copy / "data", init_from="resume"), capsys)
    assert_one_line_error(*result, "--init_from=resume needs", "missing/ckpt.pt", "--init_from=scratch")
    assert not (run_copy / "missing").exists()


def test_resume_in_nanogpts_out_dir_is_refused_before_it_is_locked(run_copy, capsys):
    from test_nanogpt import write_nanogpt_run

    ckpt = write_nanogpt_run(run_copy / "out-nanogpt")
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "out-nanogpt", run_copy / "data", init_from="resume"), capsys)
    assert_one_line_error(*result, f"{ckpt} is nanoGPT's checkpoint", f"--init_from={ckpt} --out_dir=NEW_DIR")
    assert digests(run_copy) == before
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["ckpt.pt"]  # no train.lock written there


def test_a_train_lock_left_behind_refuses_no_one(run_copy, capsys):
    """train.lock stays after a run (README: removing it would let two processes hold it); it is an flock,
    held only while its process lives, so a file left by a run, or by a kill -9, never refuses the next."""
    (run_copy / "run" / "train.lock").write_text("999999")
    code, out, err = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume",
                                                  max_iters=6), capsys)
    assert code == 0 and "done: 6 iterations" in out, err


# ---- issue 17: sampling --------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag, fragment", [
    ("--num_samples=100000000", "num_samples=100000000 must be in [1, 4096]"),
    ("--max_new_tokens=10000000000", "max_new_tokens=10000000000 must be in [0, 10,000,000]"),
    ("--seed=18446744073709551615", "seed=18446744073709551615 must be in [0, 2**64 - num_samples]"),
    ("--seed=-5", "seed=-5 must be in [0, 2**64 - num_samples]"),
    ("--dtype=float64", "dtype='float64' must be one of"),
    ("--stop=", "--stop='' would end every sample"),
])
def test_sampling_sizes_and_seeds_out_of_range_are_one_line(run_copy, capsys, flag, fragment):
    started = time.perf_counter()
    result = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", flag], capsys)
    assert_one_line_error(*result, fragment)
    assert time.perf_counter() - started < 5  # refused before a model, a generator or a batch is made


def test_a_temperature_too_small_to_divide_by_is_greedy(run_copy, capsys):
    def run(temperature: str) -> str:
        code, out, err = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", "--max_new_tokens=20",
                                           "--num_samples=2", f"--temperature={temperature}"], capsys)
        assert code == 0 and "Traceback" not in err, err
        return out

    assert run("1e-40") == run("0") == run("1e-7")


def test_a_top_p_below_float32s_least_keeps_the_most_likely_token(run_copy, capsys):
    """1e-300 is 0 in float32: every token's mass before it reached it, and all were dropped (a NaN softmax)."""
    def run(*flags: str) -> str:
        code, out, err = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", "--max_new_tokens=20",
                                           *flags], capsys)
        assert code == 0 and "Traceback" not in err, err
        return out

    assert run("--top_p=1e-300") == run("--temperature=0")


# ---- issue 28: tracebacks that were left ------------------------------------------------------------------------


COMMANDS = ["train.py", "sample.py", "ablate.py", "bench.py", "-m training.memory", "data/shakespeare_char/prepare.py",
            "data/shakespeare/prepare.py", "data/python_docs_char/prepare.py", "data/corpus/prepare.py"]


@pytest.mark.parametrize("argv", [[command, "--help"] for command in COMMANDS] + [["-m training.memory"]],
                         ids=" ".join)
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_output_into_a_closed_pipe_ends_quietly(script_env, argv, buffered):
    """`python train.py --help | head -1`: the reader is gone before the help is written (here, before the
    command starts). No traceback, no message: the exit status of a command that SIGPIPE ended. Buffered (a
    shell's pipe), the write fails at the last flush, which Python's exit reported as its own BrokenPipeError."""
    env = {k: v for k, v in script_env.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        command = argv[0].split() if argv[0].startswith("-m ") else [str(REPO / argv[0])]  # a module: from REPO
        result = subprocess.run([sys.executable, *command, *argv[1:]], stdout=write_end, stderr=subprocess.PIPE,
                                text=True, env=env, timeout=120, cwd=REPO)
    finally:
        os.close(write_end)
    assert result.returncode == 128 + signal.SIGPIPE, result.stderr
    assert result.stderr == ""


class FullDisk(io.RawIOBase):
    """A file whose disk fills after `room` bytes: write raises OSError(ENOSPC), as a full file system does."""

    def __init__(self, file, room: int):
        self.file, self.room = file, room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.room -= len(data)
        if self.room < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.file.write(data)

    def close(self) -> None:
        self.file.close()
        super().close()


def test_a_full_disk_during_a_checkpoint_save_is_one_line_and_keeps_the_old_one(run_copy, capsys, monkeypatch):
    """Was OSError, then torch's RuntimeError "unexpected pos" as a traceback."""
    run = run_copy / "run"
    before = digests(run)
    real_open = Path.open

    def open_on_a_full_disk(self, mode="r", *args, **kwargs):
        file = real_open(self, mode, *args, **kwargs)
        return FullDisk(file, 1000) if self.parent == run and self.name.endswith(".tmp") else file

    monkeypatch.setattr(Path, "open", open_on_a_full_disk)
    result = cli(train_module.main, flags(run, run_copy / "data", init_from="resume", max_iters=8), capsys)
    assert_one_line_error(*result, "could not write", "ckpt.pt", "No space left on device",
                          "the previous content is kept")
    after = digests(run)
    assert {k: v for k, v in after.items() if k != "metrics.jsonl"} == \
        {k: v for k, v in before.items() if k != "metrics.jsonl"}  # no temporary file left either


# Runs train.py (argv[1:]) so that its first checkpoint save is hit by two SIGTERMs 30 ms apart, as a scheduler
# that repeats its signal does; the second lands inside torch.save.
TWO_SIGNALS = '''
import os, runpy, signal, sys, time
import torch

real_save = torch.save


def save_hit_twice(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.03)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)  # the second signal ends the process here
    return real_save(*args, **kwargs)


torch.save = save_hit_twice
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


@pytest.mark.slow
def test_a_second_sigterm_during_a_save_aborts_at_once_with_143(run_copy, script_env, tmp_path):
    """Was exit 1 with KeyboardInterrupt then RuntimeError inside torch.save, or exit 130 for a SIGTERM."""
    run = run_copy / "run"
    before = digests(run)
    (tmp_path / "two_signals.py").write_text(TWO_SIGNALS)
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(tmp_path / "two_signals.py"), str(REPO / "train.py"),
                             *flags(run, run_copy / "data", init_from="resume", max_iters=8, eval_interval=1)],
                            capture_output=True, text=True, env=script_env, timeout=120)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert time.monotonic() - started < 25  # not the 30 s the save sleeps
    assert result.stderr.strip().splitlines() == ["aborted by a second SIGTERM: the checkpoints are the last ones "
                                                  "saved whole"]
    after = digests(run)
    assert {k: v for k, v in after.items() if k != "metrics.jsonl" and not k.endswith(".tmp")} == \
        {k: v for k, v in before.items() if k != "metrics.jsonl"}
    assert load_checkpoint(run / "ckpt.pt")["iter_num"] == 4


def test_a_tokenizer_json_whose_pattern_is_not_a_regex_is_one_line_before_the_lock(tmp_path, corpus_text, capsys):
    """Was tiktoken's ValueError as a traceback, after out_dir and its train.lock were made."""
    from text.bpe_train import TokenizerConfig

    prepare(corpus_text[:3000], tmp_path / "data", TokenizerConfig(tokenizer="bpe", vocab_size=300))
    description = json.loads((tmp_path / "data" / "tokenizer.json").read_text())
    (tmp_path / "data" / "tokenizer.json").write_text(json.dumps({**description, "pattern": "(?:'s|\\\\p{L}+"}))
    before = digests(tmp_path / "data")
    result = cli(train_module.main, flags(tmp_path / "new", tmp_path / "data"), capsys)
    assert_one_line_error(*result, "tokenizer.json", "'pattern' that is a regular expression", "prepare.py")
    assert digests(tmp_path / "data") == before and not (tmp_path / "new").exists()


# ---- issue 28: datasets read silently with the wrong ids, and fixes that named no existing command ------------


def test_our_dataset_without_its_tokenizer_json_is_not_read_as_nanogpts(run_copy, capsys):
    """Was read as a nanoGPT GPT-2 folder: a 50,257-token model on 65-character data, without a word."""
    (run_copy / "data" / "tokenizer.json").unlink()
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "new", run_copy / "data"), capsys)
    assert_one_line_error(*result, str(run_copy / "data"), "test.bin", "not the tokenizer.json",
                          f"--out_dir={run_copy / 'data'} --overwrite=True")
    assert digests(run_copy) == before and not (run_copy / "new").exists()


def test_a_tokenizer_json_copied_from_another_dataset_is_refused(run_copy, corpus_text, capsys):
    """The same token counts and vocabulary, other tokens: only the SHA-256 its split records tells them apart."""
    # Two letters swapped: the same characters and cuts (splits are cut at line and word starts), other tokens.
    prepare(corpus_text[:5000].translate(str.maketrans("ae", "ea")), run_copy / "other", "char")
    shutil.copy(run_copy / "other" / "tokenizer.json", run_copy / "data" / "tokenizer.json")
    before = digests(run_copy)
    for argv in (flags(run_copy / "new", run_copy / "data"),
                 flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=8)):
        result = cli(train_module.main, argv, capsys)
        assert_one_line_error(*result, "train.bin is not the file", "SHA-256", "copied from another dataset",
                              "--overwrite=True")
    assert digests(run_copy) == before and not (run_copy / "new").exists()


def damage_dataset(data: Path, how: str) -> str:
    """Damage the dataset folder data; returns what --dataset to give."""
    if how == "tokenizer.json":
        (data / "tokenizer.json").write_text('{"kind": "char", "chars": "ab')
    elif how == "val.bin":
        (data / "val.bin").unlink()
    elif how == "ids":
        tokens = np.fromfile(data / "train.bin", dtype=np.uint16)
        tokens[:] = 999  # outside the vocabulary; the size, and the SHA-256 check skipped for an old dataset
        tokens.tofile(data / "train.bin")
        description = json.loads((data / "tokenizer.json").read_text())
        del description["split"]
        (data / "tokenizer.json").write_text(json.dumps(description))
    return str(data)


@pytest.mark.parametrize("how", ["tokenizer.json", "val.bin", "ids"])
def test_a_damaged_dataset_given_by_path_is_told_its_preparer_and_out_dir(run_copy, capsys, how):
    """Was told to run python data/data/prepare.py, which does not exist."""
    dataset = damage_dataset(run_copy / "data", how)
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "new", dataset), capsys)
    assert_one_line_error(*result, f"--out_dir={run_copy / 'data'} --overwrite=True",
                          "data/shakespeare_char/prepare.py")
    assert "data/data/prepare.py" not in result[2]
    assert digests(run_copy) == before and not (run_copy / "new" / "ckpt.pt").exists()


@pytest.mark.parametrize("dataset, fragments", [
    ("shakespeare_bpe1024", ["data/shakespeare_bpe1024/prepare.py does not exist", "run python data/shakespeare_char/"
                             "prepare.py --tokenizer=bpe --vocab_size=1024 --out_dir=data/shakespeare_bpe1024"]),
    ("python_docs_gpt2", ["run python data/python_docs_char/prepare.py --tokenizer=gpt2 "
                          "--out_dir=data/python_docs_gpt2"]),
    ("my_own_text", ["data/my_own_text/prepare.py does not exist", "--out_dir=data/my_own_text"]),
    ("", ["dataset is empty", "--dataset=shakespeare_char"]),
    (str(REPO / "README.md"), ["README.md' is a file, not a dataset folder"]),
])
def test_a_dataset_name_that_no_preparer_has_names_the_command_that_makes_it(tmp_path, capsys, dataset, fragments):
    """Names made with --out_dir (README's shakespeare_bpe1024) have no data/<name>/prepare.py of their own."""
    assert not (REPO / "data" / dataset / "tokenizer.json").exists()
    result = cli(train_module.main, flags(tmp_path / "new", dataset), capsys)
    assert_one_line_error(*result, *fragments)
    assert "data//prepare.py" not in result[2] and not (tmp_path / "new").exists()


# ---- issue 28: continuing a run: its shape, a finished study's run, a folder without a checkpoint ---------------


def nanogpt_run(root: Path, corpus_text: str) -> tuple[Path, Path]:
    """nanoGPT's out_dir (2 layers, block_size 32) and its char data folder with meta.pkl, where it looks."""
    from test_nanogpt import write_nanogpt_data, write_nanogpt_run

    data = write_nanogpt_data(root / "data" / "shakespeare_char", corpus_text[:5000])
    write_nanogpt_run(root / "out-nanogpt", vocab_size=len(set(corpus_text[:5000])))
    return root / "out-nanogpt", data


SHAPE = ["ckpt.pt keeps its shape", "--init_from=scratch"]  # a shape the checkpoint continues with
LONGER = ["block_size=64 is larger than", "--extend_positions=interpolate|copy", "drop --block_size"]  # issue 31's


@pytest.mark.parametrize("source, overrides, fragments", [
    ("ours", {"n_layer": 2}, [*SHAPE, "n_layer=2 (the checkpoint has 1)"]),
    ("ours", {"n_layer": 2, "pos_encoding": "rope"}, [*SHAPE, "n_layer=2 (the checkpoint has 1), pos_encoding='rope' "
                                                      "(the checkpoint has 'learned')"]),
    ("nanogpt", {}, [*SHAPE, "n_layer=1 (the checkpoint has 2)"]),  # block_size=16 of 32: cropped, not refused
    ("ours", {"block_size": 64}, [*LONGER, "block_size=16"]),
    ("nanogpt", {"n_layer": 2, "block_size": 64}, [*LONGER, "block_size=32"]),
])
def test_a_shape_flag_with_init_from_a_checkpoint_is_refused(run_copy, corpus_text, capsys, source, overrides,
                                                             fragments):
    """Was dropped without a word: the checkpoint's shape trained. A longer block_size is context extension's to
    grow, and says so (docs/context_extension.md)."""
    init_from, data = (run_copy / "run", run_copy / "data") if source == "ours" else nanogpt_run(run_copy,
                                                                                                 corpus_text)
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "new", data, init_from=init_from, **overrides), capsys)
    assert_one_line_error(*result, *fragments)
    assert digests(run_copy) == before and not (run_copy / "new" / "ckpt.pt").exists()


def test_a_shorter_block_size_from_a_nanogpt_run_still_crops(run_copy, corpus_text, capsys):
    init_from, data = nanogpt_run(run_copy, corpus_text)
    code, out, err = cli(train_module.main, flags(run_copy / "new", data, init_from=init_from, n_layer=2,
                                                  max_iters=252, lr_decay_iters=252), capsys)
    assert code == 0 and "done: 252 iterations" in out, err
    assert load_checkpoint(run_copy / "new" / "ckpt.pt")["model_args"]["block_size"] == 16


def test_resuming_a_finished_study_run_is_refused(run_copy, capsys):
    """Was resumed: its checkpoint replaced, and the study then refused the run and asked to train it again."""
    (run_copy / "run" / "done.json").write_text('{"checkpoint": {}}')
    before = digests(run_copy)
    result = cli(train_module.main, flags(run_copy / "run", run_copy / "data", init_from="resume", max_iters=8),
                 capsys)
    assert_one_line_error(*result, "is a finished run of a study", "done.json",
                          f"--init_from={run_copy / 'run' / 'ckpt.pt'} --out_dir=NEW_DIR")
    assert digests(run_copy) == before


@pytest.mark.parametrize("main", [train_module.main, sample.main], ids=["train", "sample"])
def test_init_from_a_folder_without_a_checkpoint_says_so(run_copy, capsys, main):
    """Was told that the char tokenizer is not GPT-2's BPE."""
    (run_copy / "empty").mkdir()
    argv = flags(run_copy / "new", run_copy / "data", init_from=run_copy / "empty") if main is train_module.main \
        else [f"--init_from={run_copy / 'empty'}", "--device=cpu"]
    result = cli(main, argv, capsys)
    assert_one_line_error(*result, f"init_from={str(run_copy / 'empty')!r} is a folder without a checkpoint",
                          "no ckpt.pt", "no config.json")
    assert not (run_copy / "new").exists()


# ---- issue 28: sampling's text on the command line, and files that are not files -------------------------------


def test_stop_and_start_read_the_usual_escapes(run_copy, capsys):
    """--stop='\\n' was a backslash and an n, which no sample holds: "stop at the end of the line" never matched."""
    def samples(*flags: str) -> str:
        code, out, err = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", "--max_new_tokens=60",
                                           *flags], capsys)
        assert code == 0, err
        return out

    escaped = samples("--start=To be\\nor", "--stop=\\n")
    assert escaped == samples("--start=To be\nor", "--stop=\n")
    texts = escaped.split("---------------\n")[:-1]
    assert len(texts) == 3 and all(text.startswith("To be\nor") and text.count("\n") == 2 for text in texts)
    assert sample.unescape(r"a\tb\\nc\d") == "a\tb\\nc\\d"  # \\ is one backslash; other backslashes stay


@pytest.mark.parametrize("start, fragments", [
    ("FILE:", ["start='FILE:' names no file", "--start=FILE:PATH"]),
    ("FILE:/dev/null", ["prompt file '/dev/null' is a device, not a regular file"]),
    ("FILE:/dev/zero", ["prompt file '/dev/zero' is a device, not a regular file"]),
])
def test_a_prompt_file_that_is_no_file_is_one_line(run_copy, capsys, start, fragments):
    """Were "prompt file '' is a folder" and "'/dev/null' does not exist"."""
    started = time.perf_counter()
    result = cli(sample.main, [f"--out_dir={run_copy / 'run'}", "--device=cpu", f"--start={start}"], capsys)
    assert_one_line_error(*result, *fragments)
    assert time.perf_counter() - started < 10  # /dev/zero is not read


@pytest.mark.parametrize("path", ["/dev/null", "/dev/zero"])
def test_a_device_as_input_or_config_file_says_what_it_is(tmp_path, capsys, path):
    from test_prepare_faults import char_preparer, corpus_main

    for main, argv, fragment in [
            (char_preparer(tmp_path / "data"), [f"--input={path}"], f"input file {path!r} is a device"),
            (corpus_main(), [f"--input={path}", f"--out_dir={tmp_path / 'data'}"], f"input {path!r} is a device"),
            (train_module.main, [path], f"config file {path!r} is a device")]:
        result = cli(main, argv, capsys)
        assert_one_line_error(*result, fragment, "not a regular file")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("given, fragments", [
    ({"t5_num_buckets": 4}, ["t5_num_buckets is a setting of pos_encoding=t5, and this run's is learned"]),
    ({"pos_encoding": "rope", "learned_init_std": 0.02}, ["learned_init_std is a setting of pos_encoding=learned"]),
    ({"wsd_decay_shape": "linear"}, ["wsd_decay_shape is a setting of lr_schedule=wsd", "schedule is cosine"]),
])
def test_a_flag_that_would_do_nothing_is_refused_before_the_run(tmp_path, char_data, capsys, given, fragments):
    """Was: --t5_num_buckets=4 under learned positions, or --wsd_decay_shape=linear under cosine, trained
    without a word."""
    result = cli(train_module.main, flags(tmp_path / "out", char_data, **given), capsys)
    assert_one_line_error(*result, *fragments, "it would do nothing")
    assert not (tmp_path / "out").exists()
