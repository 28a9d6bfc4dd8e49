"""The sampler's engine: prefill, the decode loop with its window slide, the static cache and the compiled decode
step's cache, and the logit processors (repetition, frequency and presence penalties, temperature, top-k, top-p,
min-p) with the log-probabilities of what is drawn. The architecture it runs is model.py's; the
compiled decode step (compile=True) is fast_decode.py's; the state of generation (the static cache, the weights a
frozen graph holds) lives in these two modules, not on the model.
"""

import math
import weakref
from collections import deque
from collections.abc import Callable, Iterator

import torch
from torch.nn import functional as F

from gpt.fast_decode import DecodeStep, compiled_decode_step
from model import GPT, KVCache

# Per model, held only while the model lives: the cache the compiled step writes (CUDA graphs replay fixed
# addresses, so a new cache each call would record a new graph). The compiled step itself is fast_decode.py's.
_static_caches: "weakref.WeakKeyDictionary[GPT, KVCache]" = weakref.WeakKeyDictionary()


@torch.no_grad()
def generate_stream(model: GPT, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                    top_k: int | None = None, top_p: float | None = None, slide: int | None = None,
                    use_cache: bool = True, generator: torch.Generator | list[torch.Generator] | None = None,
                    vocab_size: int | None = None, compile: bool = False, min_p: float = 0.0,
                    repetition_penalty: float = 1.0, frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                    penalty_last_n: int = 0,
                    on_token: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
                    starts: torch.Tensor | None = None) -> Iterator[torch.Tensor]:
    """Yield max_new_tokens tokens, each (B, 1), continuing idx (B, T).

    The context window holds at most block_size tokens. When it is full, the oldest `slide` tokens
    (default block_size // 2) are dropped and the rest is run again from position 0: cached keys and
    values carry their positions and cannot be shifted. slide=1 is nanoGPT's crop-every-step.
    use_cache=False runs the whole window every step (the slow reference) under the same policy.
    vocab_size limits sampling to ids below it: the rows that pad a vocabulary (50257 -> 50304) are no tokens.
    compile=True runs each new token through the compiled decode step (compiled_decode_step); the prompt
    and the re-runs after a slide, whose lengths vary, stay eager. generator: see sample_next_token.
    The penalties (see penalize) count the tokens of idx and of what has been generated, all of them (penalty_last_n=0)
    or the last penalty_last_n, whatever the window holds; they act on the logits outside the decode step, before
    temperature, top_k, top_p and min_p (HF's order). on_token(logits, token) receives each token drawn (B, 1) with the
    model's own logits it was drawn from (B, vocab), before any penalty or filter (see token_logprobs).
    starts (B,): prompts of different lengths, left-padded: row r's prompt begins at column starts[r] (GPT.forward);
    each row then gets the tokens it gets alone, until the longest row fills the window (after a slide every row
    keeps the same columns, so a shorter prompt keeps more of its past than it would alone). Padding is never counted
    by the penalties.
    """
    block_size = model.config.block_size
    slide = block_size // 2 if slide is None else slide
    if not 1 <= slide <= block_size:
        raise ValueError(f"slide={slide} must be in [1, block_size={block_size}]")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
    context = idx[:, -block_size:]
    prompt_starts = starts  # in idx's columns, for the penalties' counts
    if starts is not None:  # columns cut off the front of a long prompt take its padding first
        starts = (starts - (idx.size(1) - context.size(1))).clamp(min=0)
    cache = None if not use_cache else static_cache(model, idx.size(0)) if compile else model.make_cache(idx.size(0))
    decode_step = compiled_decode_step(model) if compile and use_cache else model.decode_step
    check_penalties(repetition_penalty, frequency_penalty, presence_penalty, penalty_last_n)
    penalized = (repetition_penalty, frequency_penalty, presence_penalty) != (1.0, 0.0, 0.0)
    # Neutral penalties count nothing and leave the logits as they are: the samples are those of no penalty at all.
    counts, window = start_counts(idx, model.config.vocab_size, penalty_last_n,
                                  prompt_starts) if penalized else (None, None)
    logits = prefill(model, context, cache, starts)
    for step in range(max_new_tokens):
        raw = logits[:, :vocab_size]
        processed = raw if counts is None else penalize(raw, counts, repetition_penalty, frequency_penalty,
                                                        presence_penalty)
        next_token = sample_next_token(processed, temperature, top_k, top_p, generator, min_p)
        if on_token is not None:
            on_token(raw, next_token)
        if counts is not None:
            count_token(counts, window, next_token)
        yield next_token
        if step == max_new_tokens - 1:
            break
        if context.size(1) == block_size:
            context = torch.cat((context[:, slide:], next_token), dim=1)
            starts = None if starts is None else (starts - slide).clamp(min=0)
            if cache is not None:
                cache.reset()
            logits = prefill(model, context, cache, starts)
        else:
            context = torch.cat((context, next_token), dim=1)
            logits = (model(context, starts=starts)[0][:, -1] if cache is None else
                      decode(model, next_token, cache, decode_step, starts))


@torch.no_grad()
def generate(model: GPT, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             **kwargs) -> torch.Tensor:
    """idx (B, T) followed by max_new_tokens sampled tokens: nanoGPT's model.generate(idx, max_new_tokens,
    temperature, top_k) as a function of the model; kwargs are generate_stream's (top_p, min_p, slide, generator, the
    penalties, ...)."""
    new_tokens = list(generate_stream(model, idx, max_new_tokens, temperature, top_k, **kwargs))
    return torch.cat([idx, *new_tokens], dim=1)


def prefill(model: GPT, context: torch.Tensor, cache: KVCache | None,
            starts: torch.Tensor | None = None) -> torch.Tensor:
    """Last-position logits (B, vocab_size) of context (B, T) (left-padded rows: starts, see GPT.forward), cached;
    a prompt shared by all rows runs once."""
    shared = (cache is not None and starts is None and context.size(0) > 1
              and torch.equal(context, context[:1].expand_as(context)))
    if not shared:
        return model(context, cache=cache, starts=starts)[0][:, -1]
    logits = model(context[:1], cache=cache.first_row())[0][:, -1]
    cache.copy_first_row(context.size(1))
    return logits.expand(context.size(0), -1)


def decode(model: GPT, token: torch.Tensor, cache: KVCache, decode_step: DecodeStep | None = None,
           starts: torch.Tensor | None = None) -> torch.Tensor:
    """Logits (B, vocab_size) of one new token (B, 1) per row after the cache, through decode_step (default
    model.decode_step; or its compiled form); the checks run here, on the host, with no device sync."""
    cache.check_room(token.size(0), 1)
    model.check_positions(1, cache.length)
    position = torch.full((1,), cache.length, dtype=torch.long, device=token.device)
    logits = (decode_step or model.decode_step)(token, position, cache, starts)
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
                      top_p: float | None = None, generator: torch.Generator | list[torch.Generator] | None = None,
                      min_p: float = 0.0) -> torch.Tensor:
    """(B, vocab) logits -> (B, 1) token ids. temperature 0 is greedy, and so is any below GREEDY_BELOW (top_k,
    top_p and min_p always keep the most likely token, so they change nothing then).

    generator: one for the batch (its rows draw one after the other), or a list of one per row, so that a row
    draws the same numbers whatever the batch holds.
    """
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature={temperature} must be a finite number >= 0 (0 means greedy)")
    if temperature < GREEDY_BELOW:
        return logits.argmax(dim=-1, keepdim=True)
    probs = F.softmax(filter_logits(logits.float() / temperature, top_k, top_p, min_p), dim=-1)
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


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None,
                  min_p: float = 0.0) -> torch.Tensor:
    """Set to -inf every logit outside the top_k, then outside the smallest set whose probability reaches top_p, then
    every one whose probability is below min_p times the most likely token's (HF's order, after temperature)."""
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
    if min_p:
        if not 0.0 <= min_p <= 1.0:
            raise ValueError(f"min_p={min_p} must be in [0, 1]")
        # As HF's MinPLogitsWarper: in probabilities, over what top_k and top_p kept. The most likely token passes its
        # own threshold (min_p <= 1), so at least one token stays.
        probs = F.softmax(logits, dim=-1)
        logits = logits.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), float("-inf"))
    return logits


# The penalties act on float32 logits (penalize): 3.4e38 at most. A penalty of this size moves a logit of up to 1e6 by
# at most 1e25 per count (1e34 for 2**32 counts), or scales it to at most 1e31: always finite. Past it, a float64
# value that is finite can be inf (or 0) in float32, and every logit inf or nan: each draw then returns id 0.
PENALTY_LIMIT = 1e25


def check_penalties(repetition_penalty: float = 1.0, frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                    penalty_last_n: int = 0) -> None:
    """Refuse penalties that are no numbers to penalise by: a repetition penalty must be finite and > 0 (it divides),
    the others finite; each within PENALTY_LIMIT, where the float32 logits they change stay finite;
    penalty_last_n >= 0."""
    if not (math.isfinite(repetition_penalty) and repetition_penalty > 0):
        raise ValueError(f"repetition_penalty={repetition_penalty} must be a finite number > 0 (1.0 is off)")
    if not 1 / PENALTY_LIMIT <= repetition_penalty <= PENALTY_LIMIT:
        raise ValueError(f"repetition_penalty={repetition_penalty} would overflow the float32 logits it divides or "
                         f"multiplies; give a number in [{1 / PENALTY_LIMIT:g}, {PENALTY_LIMIT:g}] (1.0 is off)")
    for name, value in (("frequency_penalty", frequency_penalty), ("presence_penalty", presence_penalty)):
        if not math.isfinite(value):
            raise ValueError(f"{name}={value} must be a finite number (0 is off)")
        if abs(value) > PENALTY_LIMIT:
            raise ValueError(f"{name}={value} would overflow the float32 logits it is subtracted from; give a "
                             f"number in [-{PENALTY_LIMIT:g}, {PENALTY_LIMIT:g}] (0 is off)")
    if penalty_last_n < 0:
        raise ValueError(f"penalty_last_n={penalty_last_n} must be >= 0 (0 counts the whole sequence)")


def start_counts(idx: torch.Tensor, vocab_size: int, last_n: int = 0,
                 starts: torch.Tensor | None = None) -> tuple[torch.Tensor, deque | None]:
    """How often each token id occurs in each row of idx (B, T), or in its last last_n tokens: (B, vocab_size) counts,
    and (last_n > 0) the window of those tokens, (B, 1) columns oldest first, for count_token to slide. With starts
    (left padding), a row's padding counts as id vocab_size, one column more that penalize never reads: it fills
    the window as the row's own tokens would not, and leaves it first."""
    if starts is not None:
        columns = torch.arange(idx.size(1), device=idx.device)
        idx = torch.where(columns[None, :] < starts[:, None], vocab_size, idx)
        vocab_size += 1
    seen = idx if last_n == 0 else idx[:, -last_n:]
    counts = torch.zeros(idx.size(0), vocab_size, dtype=torch.long, device=idx.device)
    counts.scatter_add_(1, seen, torch.ones_like(seen))
    return counts, (deque(seen.split(1, dim=1), maxlen=last_n) if last_n else None)


def count_token(counts: torch.Tensor, window: deque | None, token: torch.Tensor) -> None:
    """Add token (B, 1) to counts in place; with a full window, the oldest token leaves it and its count: the counts
    stay those of the last window.maxlen tokens. On the device, with no host sync."""
    ones = torch.ones_like(token)
    counts.scatter_add_(1, token, ones)
    if window is not None:
        if len(window) == window.maxlen:
            counts.scatter_add_(1, window.popleft(), -ones)
        window.append(token)


def penalize(logits: torch.Tensor, counts: torch.Tensor, repetition_penalty: float = 1.0,
             frequency_penalty: float = 0.0, presence_penalty: float = 0.0) -> torch.Tensor:
    """logits (B, vocab), in float32, with the tokens counted in counts (B, >= vocab) penalised.

    First the repetition penalty of CTRL (Keskar et al. 2019) as HF's RepetitionPenaltyLogitsProcessor: a present
    token's logit is divided by the penalty where it is >= 0 and multiplied where it is < 0, so > 1 makes it less
    likely either way. Then OpenAI's: logit - count * frequency_penalty - (count > 0) * presence_penalty. llama.cpp's
    penalties apply in that order too; both come before temperature, as in HF and llama.cpp.
    """
    counts = counts[:, :logits.size(-1)]
    present = counts > 0
    logits = logits.float()
    if repetition_penalty != 1.0:
        scaled = torch.where(logits < 0, logits * repetition_penalty, logits / repetition_penalty)
        logits = torch.where(present, scaled, logits)
    if frequency_penalty or presence_penalty:
        logits = logits - counts * frequency_penalty - present * presence_penalty
    return logits


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor,
                   k: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The log-probabilities (nats) of tokens (B, 1) under logits (B, vocab), and the k most likely ids and their
    log-probabilities (B, k), most likely first: (chosen (B, 1), top ids (B, k), top log-probs (B, k)), on the device.

    generate_stream hands on_token the model's own logits, before penalties, temperature and filters, so these are
    the model's distribution, as OpenAI's logprobs and llama.cpp's n_probs report it: a token top_k dropped still has
    its log-probability, and temperature 0 gives the same numbers as 1.
    """
    logprobs = F.log_softmax(logits.float(), dim=-1)
    top = torch.topk(logprobs, k, dim=-1)
    return logprobs.gather(-1, tokens), top.indices, top.values


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
