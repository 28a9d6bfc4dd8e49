"""batches.py: building the next step's batches ahead changes nothing: the same batches, the same generator
state (what a checkpoint saves), and so the same losses bit for bit, against drawing each step's batches in turn."""

import threading

import numpy as np
import torch
from helpers import configs

from text.dataset import get_batch, sample_offsets
from train import train
from training.batches import BatchPrefetcher

BLOCK, ROWS, STEPS = 8, 3, 6
DATA = np.arange(1000, dtype=np.uint16) % 97
CPU = torch.device("cpu")


def draw(generator, step):  # two micro-batches per step, growing to ROWS rows (a batch-size schedule)
    return sample_offsets(len(DATA), BLOCK, 2 * ROWS, generator).view(2, ROWS)[:, :min(step + 1, ROWS)]


def build(offsets):
    return [get_batch(DATA, row, BLOCK, CPU) for row in offsets]


def drawn_in_turn(seed: int, steps: int) -> list:
    """What train_step did before prefetching: draw each step's offsets, then build its batches."""
    generator = torch.Generator().manual_seed(seed)
    return [(build(draw(generator, step)), generator.get_state()) for step in range(steps)]


def test_prefetched_batches_and_generator_state_equal_drawing_in_turn():
    generator, built = torch.Generator().manual_seed(5), []
    prefetcher = BatchPrefetcher(generator, draw, lambda offsets: built.append(offsets) or build(offsets))
    try:
        got = [(prefetcher.step_batches(step), generator.get_state()) for step in range(STEPS)]
    finally:
        prefetcher.close()
    # step 0's, then each next step's ahead (of that step's size), each used (the last cancelled, if not begun)
    assert len(built) in (STEPS, STEPS + 1)
    expected = drawn_in_turn(5, STEPS)
    for (batches, state), (expected_batches, expected_state) in zip(got, expected, strict=True):
        assert torch.equal(state, expected_state)  # the generator has drawn this step's batches, not the next
        for (x, y), (ex, ey) in zip(batches, expected_batches, strict=True):
            assert torch.equal(x, ex) and torch.equal(y, ey)
    assert prefetcher.ahead is None and not any(t.name.startswith("batches") for t in threading.enumerate())


def test_a_generator_set_between_steps_rebuilds_the_batches():
    """A resume sets the generator's state: the batches built ahead from the old state are not used."""
    generator = torch.Generator().manual_seed(5)
    prefetcher = BatchPrefetcher(generator, draw, build)
    try:
        prefetcher.step_batches(0)  # and step 1's built ahead
        generator.set_state(torch.Generator().manual_seed(9).get_state())
        batches = prefetcher.step_batches(1)
    finally:
        prefetcher.close()
    for (x, _), (ex, _) in zip(batches, build(draw(torch.Generator().manual_seed(9), 1)), strict=True):
        assert torch.equal(x, ex)


def test_prefetching_leaves_the_losses_bit_for_bit_unchanged(tmp_path, char_data):
    losses = {}
    for prefetch in (False, True):
        result = train(*configs(tmp_path / str(prefetch), char_data, prefetch=prefetch, gradient_accumulation_steps=2,
                                dtype="float32"))
        losses[prefetch] = [record["loss"] for record in result["train_losses"]]
    assert len(losses[True]) == 10 and losses[True] == losses[False]
