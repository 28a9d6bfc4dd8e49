"""The speedrun's configs train what its committed records trained: config/speedrun_cpu_*.py, read as train.py
reads them, against the settings in the done.json of a record run (docs/speedrun2_records/, written by ablate.py
from its cell strings, another path to the same settings). A line of a config that drifted from its record (a
rate, the decay's floor, the batch) fails here."""

import dataclasses
import json
from pathlib import Path

import pytest

from model import GPTConfig
from options import parse_options
from train import TrainConfig

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "docs" / "speedrun2_records"
GPT2 = ("lr_schedule=wsd_optimizer=muon_learning_rate=0.003_"
        "muon_learning_rate=0.02_batch_size=24_warmup_iters=0_normuon=True")
OPEN = ("lr_schedule=wsd_optimizer=muon_learning_rate=0.01_"
        "muon_learning_rate=0.01_batch_size=24_qk_norm=True_warmup_iters=30")
# The run's, not the recipe's ("auto" is recorded as what it chose); the data are recorded by their identity.
RUN_ONLY = {"seed", "out_dir", "dtype", "dataset"}


@pytest.mark.parametrize("config, record", [
    ("speedrun_cpu_baseline.py", "learned"),
    ("speedrun_cpu_gpt2.py", f"learned_{GPT2}_max_iters=350"),
    ("speedrun_cpu_open.py", f"rope_{OPEN}_max_iters=250"),
])
def test_a_speedrun_config_is_its_record_recipe(config, record):
    done = json.loads((RECORDS / record / "seed1347" / "done.json").read_text())
    train_config, model_config = parse_options([str(REPO / "config" / config)], (TrainConfig, GPTConfig),
                                               prog="train.py", description="")
    assert train_config.dataset == "shakespeare_char" and done["settings"]["data"]["vocab_size"] == 65
    for ours, recorded, section in ((dataclasses.asdict(train_config), done["settings"]["train_config"], TrainConfig),
                                    (dataclasses.asdict(model_config), done["settings"]["model_config"], GPTConfig)):
        assert {k: ours[k] for k in recorded if k not in RUN_ONLY} == {
            k: v for k, v in recorded.items() if k not in RUN_ONLY}
        # A record leaves out the options its run left at their defaults (qk_norm appears where it was on).
        defaults = {f.name: f.default for f in dataclasses.fields(section) if f.name not in recorded}
        assert {k: ours[k] for k in defaults if k not in RUN_ONLY} == {
            k: v for k, v in defaults.items() if k not in RUN_ONLY}
