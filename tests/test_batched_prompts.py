"""Prompts of different lengths in one batch, left-padded (GPT.forward's starts): each row gives the logits and the
tokens its prompt gives alone (the reference: the same model on that prompt alone, batch 1, no padding), cached and
uncached, eager and compiled, for every position encoding."""

import pytest
import torch
from helpers import BLOCK, VOCAB, max_abs, random_ids, tiny_model

from gpt import generate as G
from layers.positions import POS_ENCODINGS

LENGTHS = (3, 8, 5)
PAD = 7  # any id: padding is never attended to


def padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, longest) prompts left-padded with PAD, and each row's first column of text (B,)."""
    longest = max(p.size(1) for p in prompts)
    rows = [torch.cat((torch.full((1, longest - p.size(1)), PAD), p), dim=1) for p in prompts]
    return torch.cat(rows), torch.tensor([longest - p.size(1) for p in prompts])


def prompts() -> list[torch.Tensor]:
    return [random_ids(1, n, seed=30 + i) for i, n in enumerate(LENGTHS)]


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_a_padded_batch_gives_each_prompt_its_own_logits_and_tokens(pos_encoding):
    model = tiny_model(pos_encoding)
    alone = prompts()
    idx, starts = padded(alone)
    batched = model(idx, starts=starts)[0]
    cache = model.make_cache(len(alone))
    cached = model(idx, cache=cache, starts=starts)[0]
    for row, prompt in enumerate(alone):
        own = model(prompt)[0][0]
        assert max_abs(batched[row, starts[row]:], own) < 1e-5, row
        assert max_abs(cached[row, starts[row]:], own) < 1e-5, row
    # greedy generation to the window's end: each row's tokens are the ones it draws alone, cached and not
    new = BLOCK - idx.size(1)
    for options in ({}, {"use_cache": False}):
        together = G.generate(model, idx, new, temperature=0, starts=starts, **options)[:, idx.size(1):]
        for row, prompt in enumerate(alone):
            own = G.generate(model, prompt, new, temperature=0, **options)[:, prompt.size(1):]
            assert torch.equal(together[row:row + 1], own), (row, options)


@pytest.mark.slow
@pytest.mark.parametrize("pos_encoding", ["learned", "rope", "fire"])
@torch.no_grad()
def test_seeded_sampling_with_penalties_compiled_is_each_prompts_own(pos_encoding):
    """A generator per row, the penalties counting a window of the last 6 tokens (padding never counted), the
    compiled decode step: each row as alone."""
    model = tiny_model(pos_encoding)
    alone = prompts()
    idx, starts = padded(alone)
    new = BLOCK - idx.size(1)
    kw = dict(temperature=1.0, top_k=12, repetition_penalty=1.3, frequency_penalty=0.2, penalty_last_n=6)
    together = G.generate(model, idx, new, starts=starts, compile=True, **kw,
                          generator=[torch.Generator().manual_seed(9 + row) for row in range(len(alone))])
    for row, prompt in enumerate(alone):
        own = G.generate(model, prompt, new, generator=[torch.Generator().manual_seed(9 + row)], **kw)
        assert torch.equal(together[row:row + 1, idx.size(1):], own[:, prompt.size(1):]), row


def test_bad_starts_are_refused():
    model = tiny_model()
    idx = random_ids(2, 4)
    with pytest.raises(ValueError, match=r"starts must be an int64 tensor of shape \(2,\)"):
        model(idx, starts=torch.tensor([0]))
    with pytest.raises(ValueError, match="starts -1 is negative"):
        model(idx, starts=torch.tensor([0, -1]))


def test_padding_is_never_counted_by_the_penalties():
    """start_counts of a padded batch: each row's counts are a bincount of its own prompt's last 6 tokens."""
    alone = prompts()
    idx, starts = padded(alone)
    counts, window = G.start_counts(idx, VOCAB, 6, starts)
    assert len(window) == 6
    for row, prompt in enumerate(alone):
        assert torch.equal(counts[row, :VOCAB], torch.bincount(prompt[0, -6:], minlength=VOCAB)), row
