"""Decoding: the static KV cache and the compiled decode step against the uncached forward (the reference), the
prompt shared by a batch, and the text streamed piece by piece. Compiling is slow (seconds per encoding), so the
compiled tests are few, marked slow, and each compiles one graph that serves all of its checks.
"""

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
from helpers import BLOCK, max_abs, random_ids, tiny_model

import model as M
from gpt import fast_decode
from gpt import generate as G
from layers.positions import POS_ENCODINGS
from text.tokenizer import GPT2Tokenizer


def eager_and_compiled_logits(model: M.GPT, prompt: torch.Tensor, tokens: torch.Tensor):
    """Logits of every decode step over `tokens` after the prompt, eager and compiled, each in its own cache."""
    runs = []
    for step in (model.decode_step, fast_decode.compiled_decode_step(model)):
        cache = model.make_cache(prompt.size(0))
        model(prompt, cache=cache)
        # contiguous, as generate's tokens are: a strided one would be a new graph
        runs.append(torch.stack([G.decode(model, tokens[:, i:i + 1].contiguous(), cache, step)
                                 for i in range(tokens.size(1))]))
    return runs


# Compiled generation across window slides, for one encoding of each way a position enters (the input, the turned
# queries and keys, a score bias, CoPE's attention): each costs compilations, and eager generation across slides is
# checked for every encoding (test_cached_generation_equals_uncached_for_every_encoding).
SLIDES_COMPILED = ("learned", "rope", "alibi", "cope")


@pytest.mark.slow
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_compiled_decoding_equals_eager_and_uncached(pos_encoding):
    model = tiny_model(pos_encoding)
    prompt = random_ids(2, 5, seed=20)
    eager, compiled = eager_and_compiled_logits(model, prompt, random_ids(2, BLOCK - 5, seed=21))
    assert max_abs(compiled, eager) < 1e-5
    # the reference: the full uncached forward over prompt and tokens gives the same last-position logits
    full = model(torch.cat((prompt, random_ids(2, BLOCK - 5, seed=21)), dim=1))[0][:, 5:]
    assert max_abs(compiled.transpose(0, 1), full) < 1e-4
    if pos_encoding not in SLIDES_COMPILED:
        return
    # generation across three window slides (and nanoGPT's crop, slide=1): the same tokens as without a cache
    for slide, kw in ((None, dict(temperature=0)), (3, dict(temperature=1.0, top_k=10)), (1, dict(temperature=0))):
        runs = [G.generate(model, prompt, 3 * BLOCK, slide=slide, generator=torch.Generator().manual_seed(5), **kw,
                               **options) for options in ({"compile": True}, {"use_cache": False})]
        assert torch.equal(runs[0], runs[1]), (slide, kw)


@pytest.mark.slow
@torch.no_grad()
def test_compiled_decoding_follows_weights_changed_after_compiling():
    """On the CPU the weights are frozen into the compiled graph: changing them must not leave a stale graph."""
    model = tiny_model("learned")
    prompt, tokens = random_ids(1, 4, seed=27), random_ids(1, 3, seed=28)
    eager_and_compiled_logits(model, prompt, tokens)  # compiles with these weights
    for p in model.parameters():
        p.mul_(1.5)  # in place, as an optimizer step or load_state_dict does
    eager, compiled = eager_and_compiled_logits(model, prompt, tokens)
    assert max_abs(compiled, eager) < 1e-5
    model.load_state_dict(tiny_model("learned", seed=1).state_dict())
    eager, compiled = eager_and_compiled_logits(model, prompt, tokens)
    assert max_abs(compiled, eager) < 1e-5


@pytest.mark.slow
@torch.no_grad()
def test_compiled_decoding_tells_models_batch_sizes_and_modes_apart_with_the_module_guards_filtered():
    """The frozen step's guard filter drops the checks of the module tree, but not what tells one graph from the
    next: another model of the same shapes (its own frozen weights), another batch size, the training flag."""
    first, second = tiny_model("learned", seed=0), tiny_model("learned", seed=1)
    prompt, tokens = random_ids(1, 4, seed=31), random_ids(1, 3, seed=32)
    for model in (first, second, first):  # both models' graphs live side by side on the one code object
        eager, compiled = eager_and_compiled_logits(model, prompt, tokens)
        assert max_abs(compiled, eager) < 1e-5
    eager, compiled = eager_and_compiled_logits(second, random_ids(3, 4, seed=33), random_ids(3, 3, seed=34))
    assert max_abs(compiled, eager) < 1e-5
    dropping = tiny_model("learned", seed=2, dropout=0.5)
    eager, compiled = eager_and_compiled_logits(dropping, prompt, tokens)  # compiled in eval mode
    assert max_abs(compiled, eager) < 1e-5
    dropping.train()  # a graph traced in eval mode has no dropout: this must not reuse it
    _, compiled_training = eager_and_compiled_logits(dropping, prompt, tokens)
    assert max_abs(compiled_training, eager) > 1e-3


def one_graph_a_function() -> contextlib.AbstractContextManager:
    """Dynamo's limit of graphs per compiled function (8) cut to 1, so that a test sees it without 9 compilations.
    Named cache_size_limit before torch 2.6."""
    from torch._dynamo import config

    return config.patch(**{"recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit": 1})


@pytest.mark.slow
@torch.no_grad()
def test_compiled_decoding_of_more_models_than_the_compilers_limit_of_graphs():
    """Each model's graphs count apart from another's (isolate_recompiles; on a torch without it, a step for another
    model starts from a reset): with the limit at one graph a function, a second model and then the first again
    decode as eager does, where one limit shared by the models would fail at the second (fullgraph)."""
    first, second = tiny_model("learned", seed=3), tiny_model("learned", seed=4)
    prompt, tokens = random_ids(1, 4, seed=35), random_ids(1, 3, seed=36)
    with one_graph_a_function():
        for model in (first, second, first):
            eager, compiled = eager_and_compiled_logits(model, prompt, tokens)
            assert max_abs(compiled, eager) < 1e-5


def test_frozen_step_guard_filter_keeps_inputs_parameter_identities_and_training_flags():
    guards = {"token": "TENSOR_MATCH", "cache.keys[0]": "TENSOR_MATCH", "": "GRAD_MODE",
              "G['torch'].arange": "BUILTIN_MATCH",
              "self._modules['blocks']._modules['0']._modules['attn']._modules['c_attn']._parameters['weight']":
                  "ID_MATCH",
              "self._modules['blocks']._modules['0']._modules['attn'].training": "CONSTANT_MATCH",
              "self._modules['blocks']._modules['0']._modules['attn'].n_head": "CONSTANT_MATCH",
              "self._modules['blocks']._modules['0']": "TYPE_MATCH",
              "self._modules['ln_f']._forward_hooks": "EMPTY_NN_MODULE_HOOKS_DICT"}
    entries = [SimpleNamespace(name=name, guard_type=kind) for name, kind in guards.items()]
    kept = {entry.name for entry, keep in zip(entries, fast_decode.frozen_step_guards(entries), strict=True) if keep}
    assert kept == set(list(guards)[:6])


@pytest.mark.slow
@torch.no_grad()
def test_compiled_decoding_under_bfloat16_autocast_equals_eager():
    """sample.py --dtype=bfloat16 --compile: the frozen graph folds the weights' bfloat16 casts into constants."""
    model = tiny_model("rope")
    prompt, tokens = random_ids(2, 4, seed=29), random_ids(2, 6, seed=30)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager, compiled = eager_and_compiled_logits(model, prompt, tokens)
    reference, _ = eager_and_compiled_logits(model, prompt, tokens)  # float32
    assert compiled.dtype == eager.dtype == torch.bfloat16
    # as close to eager bfloat16 as to float32 rounding allows, and both far from each other's rounding error
    assert max_abs(compiled.float(), eager.float()) <= 2 * max_abs(eager.float(), reference)
    assert max_abs(eager.float(), reference) < 0.05


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_cached_generation_equals_uncached_for_every_encoding(pos_encoding):
    """The eager static cache: whole-cache attention behind a position mask, stale keys of earlier windows hidden."""
    model = tiny_model(pos_encoding)
    prompt = random_ids(3, 7, seed=22)
    for slide, kw in ((None, dict(temperature=0)), (5, dict(temperature=1.0, top_p=0.9))):
        cached = G.generate(model, prompt, 3 * BLOCK, slide=slide, generator=torch.Generator().manual_seed(1), **kw)
        uncached = G.generate(model, prompt, 3 * BLOCK, slide=slide, generator=torch.Generator().manual_seed(1),
                                  use_cache=False, **kw)
        assert torch.equal(cached, uncached), slide


@torch.no_grad()
def test_decode_refuses_an_overflow_with_the_forward_error():
    model = tiny_model("rope")
    cache = model.make_cache(2, max_length=6)
    model(random_ids(2, 6), cache=cache)
    message = r"KV cache overflow: past_length=6 \+ T=1 exceeds the cache's max_length=6"
    with pytest.raises(ValueError, match=message):
        model(random_ids(2, 1), cache=cache)
    with pytest.raises(ValueError, match=message):
        G.decode(model, random_ids(2, 1), cache)
    with pytest.raises(ValueError, match="idx has batch size 1 but the KV cache holds 2"):
        G.decode(model, random_ids(1, 1), cache)
    assert cache.length == 6


@torch.no_grad()
def test_learned_positions_past_the_table_are_refused_by_decode():
    model = tiny_model("learned")
    cache = model.make_cache(1, max_length=2 * BLOCK)
    model(random_ids(1, BLOCK), cache=cache)
    with pytest.raises(ValueError, match=f"position {BLOCK} is out of range"):
        G.decode(model, random_ids(1, 1), cache)


@torch.no_grad()
def test_shared_prompt_runs_once_and_fills_every_row():
    model = tiny_model("alibi")
    batch_sizes = []
    model.blocks[0].register_forward_hook(lambda module, args, out: batch_sizes.append(args[0].size(0)))
    prompt = random_ids(1, 9, seed=23)
    cache = model.make_cache(4)
    logits = G.prefill(model, prompt.expand(4, -1), cache)
    assert batch_sizes == [1]
    alone = model.make_cache(1)
    expected = model(prompt, cache=alone)[0][:, -1]
    assert cache.length == alone.length == 9
    assert max_abs(logits, expected.expand(4, -1)) == 0
    for shared, single in zip(cache.keys + cache.values, alone.keys + alone.values, strict=True):
        assert torch.equal(shared[:, :, :9], single[:, :, :9].expand(4, -1, -1, -1))
    batch_sizes.clear()
    G.prefill(model, random_ids(4, 9, seed=24), model.make_cache(4))  # different rows: run as a batch
    assert batch_sizes == [4]


@pytest.mark.parametrize("pos_encoding", ["learned", "rope"])
@torch.no_grad()
def test_batch_with_a_shared_prompt_samples_each_row_as_alone(pos_encoding):
    """One generator per row: row i of the batch is what that row's seed gives alone, across window slides."""
    model = tiny_model(pos_encoding)
    prompt = random_ids(1, 6, seed=25)
    kw = dict(temperature=1.0, top_k=10, slide=5)
    seeds = [10, 11, 12, 13]
    together = G.generate(model, prompt.expand(4, -1), 2 * BLOCK,
                              generator=[torch.Generator().manual_seed(s) for s in seeds], **kw)
    assert len({tuple(row) for row in together.tolist()}) == 4
    for row, seed in enumerate(seeds):
        alone = G.generate(model, prompt, 2 * BLOCK, generator=[torch.Generator().manual_seed(seed)], **kw)
        assert torch.equal(alone, together[row:row + 1]), row
    with pytest.raises(ValueError, match="3 generators for a batch of 4 rows; give one per row"):
        G.generate(model, prompt.expand(4, -1), 2, generator=[torch.Generator()] * 3)


@torch.no_grad()
def test_shared_prompt_sampling_equals_the_unshared_reference():
    model = tiny_model("sinusoidal")
    prompt = random_ids(1, 6, seed=26).expand(4, -1)
    kw = dict(temperature=1.0, top_k=8, slide=4)
    shared = G.generate(model, prompt, 2 * BLOCK, generator=torch.Generator().manual_seed(2), **kw)
    reference = G.generate(model, prompt, 2 * BLOCK, generator=torch.Generator().manual_seed(2), use_cache=False, **kw)
    assert torch.equal(shared, reference)
    assert len({tuple(row) for row in shared.tolist()}) > 1  # the rows did sample apart


def incremental_text(tokenizer, ids) -> Iterator[str]:
    """The text of a stream of token ids, piece by piece, as sample.py streams its first sample through StopText:
    each token decoded once, not the whole text again.

    A piece ends where the bytes so far end a character; a token that ends inside a multi-byte character
    waits for the next. Whatever is pending at the end is sent too (as U+FFFD if it never completes).
    """
    text = G.StopText(tokenizer.decode)
    for token in ids:
        piece = text.push(token)
        if piece:
            yield piece
    if last := text.finish():
        yield last


class CountingTokenizer:
    """Counts the ids it is asked to decode."""

    def __init__(self, tokenizer):
        self.tokenizer, self.decoded = tokenizer, 0

    def decode(self, ids: list[int]) -> str:
        self.decoded += len(ids)
        return self.tokenizer.decode(ids)


@pytest.mark.gpt2_bpe
def test_incremental_text_decodes_each_token_once_and_sends_the_rest():
    tokenizer = GPT2Tokenizer()
    text = "a 😀 b 你好, and on " * 20
    ids = tokenizer.encode(text)
    counting = CountingTokenizer(tokenizer)
    pieces = list(incremental_text(counting, iter(ids)))
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)  # a multi-byte character is never split
    assert counting.decoded <= 2 * len(ids)  # each token decoded about once, not the whole text per token
    # a stream that stops inside a character still sends what it has
    cut = ids[:ids.index(tokenizer.encode(" 😀")[-1])]
    assert tokenizer.decode(cut).endswith("\ufffd")
    assert "".join(incremental_text(tokenizer, iter(cut))) == tokenizer.decode(cut)


# ---- on a CUDA GPU: python -m pytest -m gpu (skipped without one) ----------------------------------------


def cuda_graph_logits(model: M.GPT, prompt: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of each decode step through the compiled step (CUDA graphs) in the static cache. Each is cloned:
    a CUDA graph's output is overwritten by its next replay."""
    cache, step = G.static_cache(model, prompt.size(0)), fast_decode.compiled_decode_step(model)
    G.prefill(model, prompt, cache)
    return torch.stack([G.decode(model, tokens[:, i:i + 1].contiguous(), cache, step).clone()
                        for i in range(tokens.size(1))])


def eager_decode_logits(model: M.GPT, prompt: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    cache = model.make_cache(prompt.size(0))
    model(prompt, cache=cache)
    return torch.stack([G.decode(model, tokens[:, i:i + 1], cache) for i in range(tokens.size(1))])


@pytest.mark.gpu
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_cuda_graph_decoding_equals_eager_and_uncached(pos_encoding):
    from torch._dynamo.utils import counters  # the compiler's own record of graphs it could not capture

    model = tiny_model(pos_encoding).cuda()
    prompt, tokens = random_ids(2, 5, seed=50).cuda(), random_ids(2, BLOCK - 5, seed=51).cuda()
    torch.compiler.reset()  # each test compiles afresh, within the compiler's limit of graphs per function
    counters.clear()
    graphed = cuda_graph_logits(model, prompt, tokens)
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])  # the cache is static
    eager = eager_decode_logits(model, prompt, tokens)
    assert max_abs(graphed, eager) < 1e-4
    full = model(torch.cat((prompt, tokens), dim=1))[0][:, 5:]
    assert max_abs(graphed.transpose(0, 1), full) < 1e-4
    # a second generation replays the graphs in the same static cache: the same tokens as without a cache
    for _ in range(2):
        graphs = G.generate(model, prompt, 3 * BLOCK, temperature=0, compile=True)
        assert torch.equal(graphs, G.generate(model, prompt, 3 * BLOCK, temperature=0, use_cache=False))


@pytest.mark.gpu
@torch.no_grad()
def test_cuda_graph_decoding_of_more_models_than_the_compilers_limit_of_graphs():
    """As on the CPU (test_compiled_decoding_of_more_models_than_the_compilers_limit_of_graphs): each model's
    CUDA-graph step is its own compiled function, so a second model never meets the first one's graphs."""
    torch.compiler.reset()
    first, second = tiny_model("learned", seed=3).cuda(), tiny_model("learned", seed=4).cuda()
    prompt, tokens = random_ids(2, 5, seed=54).cuda(), random_ids(2, 6, seed=55).cuda()
    with one_graph_a_function():
        for model in (first, second, first):
            graphed = cuda_graph_logits(model, prompt, tokens)
            assert max_abs(graphed, eager_decode_logits(model, prompt, tokens)) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_compiled_decoding_in_bfloat16_on_cuda_is_as_close_as_eager(pos_encoding):
    reference_model = tiny_model(pos_encoding).cuda()
    model = tiny_model(pos_encoding).cuda().to(torch.bfloat16)
    prompt, tokens = random_ids(2, 4, seed=52).cuda(), random_ids(2, 8, seed=53).cuda()
    torch.compiler.reset()  # each test compiles afresh, within the compiler's limit of graphs per function
    compiled = cuda_graph_logits(model, prompt, tokens)
    eager, reference = (eager_decode_logits(m, prompt, tokens) for m in (model, reference_model))  # reference: fp32
    assert compiled.dtype == eager.dtype == torch.bfloat16
    assert max_abs(compiled.float(), eager.float()) <= 2 * max_abs(eager.float(), reference) + 1e-3
    assert max_abs(eager.float(), reference) < 0.2


# ---- stops: the text a sample ends with -------------------------------------------------------------------------


def pushed(stop_text: G.StopText, ids: list[int]) -> list[str]:
    """Every piece the stream would show, the finish included."""
    return [stop_text.push(token) for token in ids] + [stop_text.finish()]


@pytest.mark.gpt2_bpe
@pytest.mark.parametrize("keep", [False, True])
def test_a_stop_string_across_two_tokens_ends_the_text_and_the_stream_never_passes_it(keep):
    tokenizer = GPT2Tokenizer()
    text = "Hello world, my friend. Hello again"
    ids = tokenizer.encode(text)
    stop = "lo wor"  # the end of "Hello" and the start of " world": two tokens
    assert tokenizer.encode("Hello")[0] in ids and not any(stop in tokenizer.decode([i]) for i in ids)
    end = text.find(stop) + len(stop) * keep
    stop_text = G.StopText(tokenizer.decode, (stop,), keep=keep)
    pieces = pushed(stop_text, ids)
    assert stop_text.text == "".join(pieces) == text[:end]
    assert pieces[0] == "Hel"  # "lo" is held back: it may start the stop string
    assert stop_text.done


@pytest.mark.gpt2_bpe
def test_the_earliest_of_several_stops_wins_and_a_prefix_that_never_completes_is_sent_at_the_end():
    tokenizer = GPT2Tokenizer()
    text = "one, two. three"
    ids = tokenizer.encode(text)
    assert "".join(pushed(G.StopText(tokenizer.decode, (".", ","), frozenset()), ids)) == "one"
    held = G.StopText(tokenizer.decode, (" threes",))
    pieces = pushed(held, ids)
    assert "".join(pieces) == text and pieces[-1] == " three"  # held back to the end, then sent


@pytest.mark.gpt2_bpe
@pytest.mark.parametrize("keep", [False, True])
def test_end_of_text_ends_the_text(keep):
    tokenizer = GPT2Tokenizer()
    ids = tokenizer.encode("Hello") + [tokenizer.eot_token] + tokenizer.encode(" world")
    stop_text = G.StopText(tokenizer.decode, (), frozenset({tokenizer.eot_token}), keep)
    assert "".join(pushed(stop_text, ids)) == ("Hello<|endoftext|>" if keep else "Hello")


def test_compiling_a_frozen_step_leaves_the_shared_options_whole():
    """torch.compile pops guard_filter_fn from the options dict it is given: the second frozen step compiled in a
    process (a recompile, a second model) checked every guard while it shared FROZEN_STEP_OPTIONS' dict."""
    from gpt.fast_decode import FROZEN_STEP_OPTIONS, compile_frozen_step

    before = dict(FROZEN_STEP_OPTIONS["options"])
    compile_frozen_step()
    compile_frozen_step()
    assert FROZEN_STEP_OPTIONS["options"] == before
