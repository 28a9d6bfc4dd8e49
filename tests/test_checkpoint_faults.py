"""training/checkpoint.py's faults, through train.py and sample.py (see docs/what_is_safe.md): a damaged, hostile
or inconsistent checkpoint (empty, cut short, flipped bytes, pickled code, a vocabulary of 10^8 declared, NaN
weights, a tokenizer larger than the model); resume on another vocabulary or split than the checkpoint's; a shape
flag that the checkpoint would continue without; a finished study's run; a folder without a checkpoint; a save on
a full disk. Every case ends with its exit code, one line that names the problem, no traceback, and the files that
were there before byte-for-byte as they were.

Each case damages its own copy (the run_copy fixture) of one trained run (conftest.py's trained, trained once for
every test_*_faults.py). test_checkpoint.py checks saving and loading themselves.
"""

import errno
import io
import json
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, assert_one_line_error, cli, digests, flags, write_nanogpt_data, write_nanogpt_run

import sample
import train as train_module
from options import chosen_values, parse_options
from text.dataset import prepare
from text.tokenizer import CharTokenizer
from training.checkpoint import load_checkpoint, save_checkpoint

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


# ---- issue 28: continuing a run: its shape, a finished study's run, a folder without a checkpoint ---------------


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


def nanogpt_run(root: Path, corpus_text: str) -> tuple[Path, Path]:
    """nanoGPT's out_dir (2 layers, block_size 32) and its char data folder with meta.pkl, where it looks."""
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


# ---- a full disk: a checkpoint is written whole or not at all -----------------------------------------------------


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
