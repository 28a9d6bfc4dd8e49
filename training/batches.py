"""The training batches of each optimizer step, the next step's built in a worker thread while this one computes.

The batch sampler's generator stays the run's own: each step draws its offsets from it on the main thread, as
without prefetching, so the batches, the losses and the generator state that a checkpoint saves are the same
bit for bit. The next step's offsets are drawn ahead from a copy of the generator; its batches are used only if
the step then draws the same offsets (a resume, say, that set the generator in between, rebuilds them). A step's
offsets may depend on the step (a batch-size schedule keeps the first rows of each micro-batch: batch_schedule.py).
On a GPU, get_batch pins the host memory and copies with non_blocking=True, so that the copy is queued behind
the step's kernels instead of waiting for them.
"""

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

Batch = tuple[torch.Tensor, torch.Tensor]
# offsets of one step's micro-batches -> their (x, y) on the device
BuildBatches = Callable[[torch.Tensor], list[Batch]]
# a generator and a step -> the offsets of that step drawn from it
DrawOffsets = Callable[[torch.Generator, int], torch.Tensor]


class BatchPrefetcher:
    """step_batches(step) returns that step's batches and starts building the next step's; close() waits for it."""

    def __init__(self, generator: torch.Generator, draw: DrawOffsets, build: BuildBatches, prefetch: bool = True):
        self.generator, self.draw, self.build = generator, draw, build
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches") if prefetch else None
        self.ahead: tuple[torch.Tensor, Future] | None = None  # the next step's offsets and its batches' future

    def step_batches(self, step: int) -> list[Batch]:
        offsets = self.draw(self.generator, step)
        ahead, self.ahead = self.ahead, None
        built_ahead = ahead is not None and torch.equal(ahead[0], offsets)
        batches = ahead[1].result() if built_ahead else self.build(offsets)
        if self.worker is not None:
            peek = torch.Generator().set_state(self.generator.get_state())
            next_offsets = self.draw(peek, step + 1)
            self.ahead = next_offsets, self.worker.submit(self.build, next_offsets)
        return batches

    def close(self) -> None:
        self.ahead = None
        if self.worker is not None:
            self.worker.shutdown(wait=True, cancel_futures=True)
