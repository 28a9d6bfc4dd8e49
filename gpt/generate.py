"""The sampler's engine: prefill, the decode loop with its window slide, the static cache and the compiled decode
step's cache, and the sampling filters (temperature, top-k, top-p). The architecture it runs is model.py's; the
compiled decode step (compile=True) is fast_decode.py's; the state of generation (the static cache, the weights a
frozen graph holds) lives in these two modules, not on the model.
"""

import math
import weakref
from collections.abc import Callable, Iterator

import torch
from torch.nn import functional as F

from gpt.fast_decode import DecodeStep, compiled_decode_step
from gpt.model import GPT, KVCache

# Per model, held only while the model lives: the cache the compiled step writes (CUDA graphs replay fixed
# addresses, so a new cache each call would record a new graph). The compiled step itself is fast_decode.py's.
_static_caches: "weakref.WeakKeyDictionary[GPT, KVCache]" = weakref.WeakKeyDictionary()


@torch.no_grad()
def generate_stream(model: GPT, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                    top_k: int | None = None, top_p: float | None = None, slide: int | None = None,
                    use_cache: bool = True, generator: torch.Generator | list[torch.Generator] | None = None,
                    vocab_size: int | None = None, compile: bool = False) -> Iterator[torch.Tensor]:
    """Yield max_new_tokens tokens, each (B, 1), continuing idx (B, T).

    The context window holds at most block_size tokens. When it is full, the oldest `slide` tokens
    (default block_size // 2) are dropped and the rest is run again from position 0: cached keys and
    values carry their positions and cannot be shifted. slide=1 is nanoGPT's crop-every-step.
    use_cache=False runs the whole window every step (the slow reference) under the same policy.
    vocab_size limits sampling to ids below it: the rows that pad a vocabulary (50257 -> 50304) are no tokens.
    compile=True runs each new token through the compiled decode step (compiled_decode_step); the prompt
    and the re-runs after a slide, whose lengths vary, stay eager. generator: see sample_next_token.
    """
    block_size = model.config.block_size
    slide = block_size // 2 if slide is None else slide
    if not 1 <= slide <= block_size:
        raise ValueError(f"slide={slide} must be in [1, block_size={block_size}]")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
    context = idx[:, -block_size:]
    cache = None if not use_cache else static_cache(model, idx.size(0)) if compile else model.make_cache(idx.size(0))
    decode_step = compiled_decode_step(model) if compile and use_cache else model.decode_step
    logits = prefill(model, context, cache)
    for step in range(max_new_tokens):
        next_token = sample_next_token(logits[:, :vocab_size], temperature, top_k, top_p, generator)
        yield next_token
        if step == max_new_tokens - 1:
            break
        if context.size(1) == block_size:
            context = torch.cat((context[:, slide:], next_token), dim=1)
            if cache is not None:
                cache.reset()
            logits = prefill(model, context, cache)
        else:
            context = torch.cat((context, next_token), dim=1)
            logits = model(context)[0][:, -1] if cache is None else decode(model, next_token, cache, decode_step)


@torch.no_grad()
def generate(model: GPT, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             **kwargs) -> torch.Tensor:
    """idx (B, T) followed by max_new_tokens sampled tokens: nanoGPT's model.generate(idx, max_new_tokens,
    temperature, top_k) as a function of the model; kwargs are generate_stream's (top_p, slide, generator, ...)."""
    new_tokens = list(generate_stream(model, idx, max_new_tokens, temperature, top_k, **kwargs))
    return torch.cat([idx, *new_tokens], dim=1)


def prefill(model: GPT, context: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
    """Last-position logits (B, vocab_size) of context (B, T), cached; a prompt shared by all rows runs once."""
    shared = cache is not None and context.size(0) > 1 and torch.equal(context, context[:1].expand_as(context))
    if not shared:
        return model(context, cache=cache)[0][:, -1]
    logits = model(context[:1], cache=cache.first_row())[0][:, -1]
    cache.copy_first_row(context.size(1))
    return logits.expand(context.size(0), -1)


def decode(model: GPT, token: torch.Tensor, cache: KVCache, decode_step: DecodeStep | None = None) -> torch.Tensor:
    """Logits (B, vocab_size) of one new token (B, 1) per row after the cache, through decode_step (default
    model.decode_step; or its compiled form); the checks run here, on the host, with no device sync."""
    cache.check_room(token.size(0), 1)
    model.check_positions(1, cache.length)
    position = torch.full((1,), cache.length, dtype=torch.long, device=token.device)
    logits = (decode_step or model.decode_step)(token, position, cache)
    cache.length += 1
    return logits


def static_cache(model: GPT, batch_size: int) -> KVCache:
    """An empty cache for the compiled decode step, kept for this model and reused by later calls.

    Its tensors are buffers of the cache module, which torch.compile takes for static addresses: CUDA graphs
    then write them in place.
    """
    cache, weight = _static_caches.get(model), model.lm_head.weight
    if cache is None or (cache.batch_size, cache.max_length, cache.keys[0].device, cache.keys[0].dtype) != (
            batch_size, model.config.block_size, weight.device, weight.dtype):
        cache = _static_caches[model] = model.make_cache(batch_size)
    cache.reset()
    return cache


# Dividing logits by a temperature this small overflows float32 (1e-40 makes inf - inf = NaN in the softmax); long
# before it, sampling is greedy in all but ties: 1e-6 turns a logit gap of 1e-4 into 100, a factor e^100.
GREEDY_BELOW = 1e-6


def sample_next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                      top_p: float | None = None,
                      generator: torch.Generator | list[torch.Generator] | None = None) -> torch.Tensor:
    """(B, vocab) logits -> (B, 1) token ids. temperature 0 is greedy, and so is any below GREEDY_BELOW.

    generator: one for the batch (its rows draw one after the other), or a list of one per row, so that a row
    draws the same numbers whatever the batch holds.
    """
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature={temperature} must be a finite number >= 0 (0 means greedy)")
    if temperature < GREEDY_BELOW:
        return logits.argmax(dim=-1, keepdim=True)
    probs = F.softmax(filter_logits(logits.float() / temperature, top_k, top_p), dim=-1)
    if not isinstance(generator, list):
        noise = torch.empty_like(probs).exponential_(generator=generator)
    elif len(generator) != probs.size(0):
        raise ValueError(f"{len(generator)} generators for a batch of {probs.size(0)} rows; give one per row")
    else:
        noise = torch.cat([torch.empty_like(row).exponential_(generator=g)
                           for row, g in zip(probs.split(1), generator, strict=True)])
    # argmax of p_i / E_i with E_i ~ Exp(1) independent is i with probability p_i (E_i / p_i is the first arrival
    # of a clock of rate p_i): torch.multinomial's draw, without its checks of the probabilities, which made it 3-4
    # times slower at one row (measured). exponential_ can return 0, and 0 / 0 would be a NaN that argmax takes.
    return (probs / noise.clamp_min_(torch.finfo(noise.dtype).tiny)).argmax(dim=-1, keepdim=True)


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Set to -inf every logit outside the top_k, and outside the smallest set whose probability reaches top_p."""
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k={top_k} must be >= 1")
    if top_k is not None and top_k < logits.size(-1):  # top_k >= the vocabulary keeps every logit: no topk to run
        kth = torch.topk(logits, top_k).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p={top_p} must be in (0, 1]")
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = F.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # a token stays while the tokens above it fall short of p
        drop_sorted = mass_before >= top_p
        drop_sorted[..., 0] = False  # the most likely token always stays (a top_p below float32's least is 0)
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class StopText:
    """The text of one sample as its tokens come, and where it ends: before the first of `stops` that the text
    produced contains, or before a token of stop_ids (<|endoftext|>); keep=True keeps the stop itself.

    push(token) returns only text that is certain: a token that ends inside a multi-byte character waits for the
    next, and an end of the text that could be the start of a stop string is held back until it cannot be, so
    a stream never shows text past a stop. finish() returns what is still held when the tokens run out.
    """

    def __init__(self, decode: Callable[[list[int]], str], stops: tuple[str, ...] = (),
                 stop_ids: frozenset[int] = frozenset(), keep: bool = False):
        self.decode, self.stops, self.stop_ids, self.keep = decode, tuple(stops), stop_ids, keep
        self.longest = max(map(len, self.stops), default=0)
        self.text, self.sent, self.pending, self.done = "", 0, [], False

    def push(self, token: int) -> str:
        if self.done:
            return ""
        if token in self.stop_ids:
            self.done = True
            if self.keep:
                self.text += self.decode([*self.pending, token])
            else:
                self.text += self.decode(self.pending) if self.pending else ""
            return self._send(len(self.text))
        self.pending.append(token)
        piece = self.decode(self.pending)
        if piece.endswith("\ufffd"):
            return ""
        self.pending = []
        searched_from = max(0, len(self.text) - self.longest + 1)
        self.text += piece
        found = [(at, len(stop)) for stop in self.stops if (at := self.text.find(stop, searched_from)) >= 0]
        if found:
            at, length = min(found)
            self.done = True
            self.text = self.text[:at + length * self.keep]
            return self._send(len(self.text))
        return self._send(len(self.text) - self._held_back())

    def finish(self) -> str:
        if not self.done and self.pending:
            self.text += self.decode(self.pending)  # never completed: U+FFFD
        self.pending, self.done = [], True
        return self._send(len(self.text))

    def _held_back(self) -> int:
        """The length of the longest end of the text that begins some stop string (and so may become one)."""
        for length in range(min(self.longest - 1, len(self.text)), 0, -1):
            if any(stop.startswith(self.text[-length:]) for stop in self.stops):
                return length
        return 0

    def _send(self, end: int) -> str:
        piece, self.sent = self.text[self.sent:end], max(self.sent, end)
        return piece
