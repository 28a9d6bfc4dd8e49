"""bench.py --what=nanogpt (benchmarks/nanogpt_train.py): nanoGPT's own train.py timed beside ours. A stand-in for
nanoGPT's train.py prints step times this test chose and keeps what it was given; its training time follows from
those by hand, ours from a real train.py run; a recipe nanoGPT's train.py cannot follow is one line."""

import json
import statistics
from pathlib import Path

import pytest
from helpers import assert_one_line_error, cli

import bench
from benchmarks import nanogpt_train
from benchmarks.common import BenchConfig
from benchmarks.nanogpt_train import bench_nanogpt
from model import GPTConfig
from train import TrainConfig

# Prints, for steps 0..max_iters as nanoGPT does, 1 s for a step that began with an evaluation and (i + 1) x 10 ms
# for the others; keeps its command line, its working folder's meta.pkl and the configurator it found.
STAND_IN = '''
import json, pickle, sys
from pathlib import Path
settings = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
meta = pickle.loads((Path("data") / settings["dataset"] / "meta.pkl").read_bytes())
Path("given.json").write_text(json.dumps({"settings": settings, "vocab_size": meta["vocab_size"],
                                          "configurator": Path("configurator.py").is_file()}))
steps, every = int(settings["max_iters"]), int(settings["eval_interval"])
for i in range(steps + 1):
    print(f"iter {i}: loss 3.1000, time {1000.0 if i % every == 0 else (i + 1) * 10.0:.2f}ms, mfu -100.00%")
'''
RECIPE = dict(max_iters=4, eval_interval=2, eval_iters=2, batch_size=4, block_size=16, n_layer=1, n_head=2, n_embd=16,
              device="cpu", compile=False, warmup_iters=1, lr_decay_iters=4, log_interval=1)
GPT_FIELDS = ("block_size", "n_layer", "n_head", "n_embd")


@pytest.fixture
def stand_in(tmp_path) -> Path:
    folder = tmp_path / "nanoGPT"
    folder.mkdir()
    (folder / "train.py").write_text(STAND_IN)
    (folder / "configurator.py").write_text("")
    return folder


def test_both_runs_are_timed_without_their_evaluations(stand_in, char_data, tmp_path, monkeypatch):
    given = []
    real_run = nanogpt_train.subprocess.run

    def run(command, cwd, **kwargs):  # keep what the stand-in was given before its folder goes
        done = real_run(command, cwd=cwd, **kwargs)
        if command[1].endswith("nanoGPT/train.py"):
            given.append(json.loads((Path(cwd) / "given.json").read_text()))
        return done

    monkeypatch.setattr(nanogpt_train.subprocess, "run", run)
    header, figures = bench_nanogpt(BenchConfig(what="nanogpt", nanogpt_dir=str(stand_in), rounds=2),
                                    TrainConfig(dataset=str(char_data), **{k: v for k, v in RECIPE.items()
                                                                             if k not in GPT_FIELDS}),
                                    GPTConfig(**{k: v for k, v in RECIPE.items() if k in GPT_FIELDS}))
    values = {(f["row"], f["column"]): f["value"] for f in figures}
    # steps 0..3 of the 5 it printed; 0 and 2 began with an evaluation: each counts as the median of 20 and 40 ms
    assert values["nanoGPT's train.py", "median"] == pytest.approx(0.020 + 0.040 + 2 * statistics.median([0.02, 0.04]))
    ours = values["train.py", "median"]
    assert 0 < ours < 60 and values["train.py / nanoGPT's, round by round", "median"] == pytest.approx(ours / 0.12)
    assert len(given) == 2 and given[0]["vocab_size"] == json.loads((char_data / "tokenizer.json").read_text())[
        "vocab_size"] and given[0]["configurator"]
    settings = given[0]["settings"]
    assert (settings["batch_size"], settings["n_layer"], settings["bias"], settings["compile"], settings["dataset"],
            settings["device"], settings["log_interval"]) == ("4", "1", "True", "False", char_data.name, "cpu", "1")
    assert "4 steps of batch 4 x 16" in header


@pytest.mark.parametrize("setting, fragments", [
    ("--optimizer=muon", ["optimizer='muon': nanoGPT's train.py only trains optimizer='adamw'", "--optimizer=adamw"]),
    ("--pos_encoding=rope", ["pos_encoding='rope'", "--pos_encoding=learned"]),
    ("--dtype=bfloat16", ["dtype='bfloat16'", "--dtype=float32"]),
    ("--nanogpt_dir=", ["--what=nanogpt times nanoGPT's own train.py: give --nanogpt_dir=PATH"]),
])
def test_a_recipe_nanogpt_cannot_train_is_one_line(stand_in, char_data, capsys, setting, fragments):
    argv = ["--what=nanogpt", f"--nanogpt_dir={stand_in}", "--repeats=1", f"--dataset={char_data}",
            *[f"--{k}={v}" for k, v in RECIPE.items()], setting]
    assert_one_line_error(*cli(bench.main, argv, capsys), *fragments)
