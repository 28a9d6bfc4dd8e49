"""bench.py --what=encodings: one row per position encoding (and learned on random positions), each with its time at
block_size, at 4x block_size and decoding, and each against learned's, on a tiny model with one step a round."""

import math

import bench
from benchmarks.common import BenchConfig
from layers.positions import POS_ENCODINGS
from model import GPTConfig
from train import TrainConfig


def test_every_encoding_gets_a_row_of_positive_finite_figures(char_data):
    settings = BenchConfig(what="encodings", bench_steps=1, warmup_steps=1, rounds=2, max_new_tokens=12)
    config = TrainConfig(dataset=str(char_data), device="cpu", batch_size=4)
    # 2 layers, the second without rope in layer_rope's row (nope_every=2: it needs a layer with rope and one without)
    model_config = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, nope_every=2)
    result = bench.measure_once(settings, config, model_config)  # as bench.py --what=encodings --repeats=1 runs it
    figures = result["figures"]
    rows = list(dict.fromkeys(f["row"] for f in figures))
    assert rows == [*POS_ENCODINGS, "learned, random_positions=512"]
    columns = ["train, T 8 x B 4, a step", "vs learned (T 8)", "train, T 32 x B 1, a step", "vs learned (T 32)",
               "decode tokens/s", "vs learned (decode)"]
    assert [f["column"] for f in figures] == columns * len(rows)
    assert all(math.isfinite(f["value"]) and f["value"] > 0 for f in figures)
    assert [f["value"] for f in figures if f["row"] == "learned" and f["column"].startswith("vs")] == [1.0] * 3
    assert "a KV cache of 13 positions" in result["header"] and "2 alternating rounds of 1 steps" in result["header"]
    table = bench.spread_tables([figures]).splitlines()
    assert table[0].startswith("| position encoding (eager; vs learned: time over learned's) | train, T 8 x B 4")
    assert [line.split(" | ")[0].removeprefix("| ") for line in table[2:]] == rows
