"""The CPU decode fast path that the sampler opts into (generate.py with compile=True, bench.py's step variants):
the decode step compiled to one graph, on the CPU with the weights frozen into it (inductor's freezing) and its
graph's own call in C++, with most of dynamo's guards left out. Each choice here is measured (docs/benchmarks.md);
the architecture it compiles is model.py's GPT.decode_step, unchanged. On CUDA the step is compiled with CUDA
graphs instead.
"""

import functools
import inspect
import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch

from layers.kernels import read_buffer
from model import GPT, KVCache, write_at, write_gates_at, write_tokens_at

DecodeStep = Callable[..., torch.Tensor]  # (token, position, cache[, starts]) -> logits: GPT.decode_step's

# torch.compile(isolate_recompiles=True) (torch 2.13) keeps each compiled function's graphs apart: dynamo's limit of
# 8 graphs per compiled function is then per model, and the lookup before each token tries only this model's graphs.
# Before it, every model's graphs count against one limit on GPT.decode_step, and a ninth hard-fails under fullgraph.
ISOLATION = {"isolate_recompiles": True} if "isolate_recompiles" in inspect.signature(torch.compile).parameters else {}

# Per model, held only while the model lives: the weights the frozen graphs were built from (CPU),
_frozen_weights: "weakref.WeakKeyDictionary[GPT, list]" = weakref.WeakKeyDictionary()
# its compiled step per device type, GPT.decode_step unbound (a bound method would keep the model alive),
_compiled_steps: "weakref.WeakKeyDictionary[GPT, dict[str, Callable]]" = weakref.WeakKeyDictionary()
# and, on a torch without isolate_recompiles, the one model whose graphs the compiler holds.
_holding: list[weakref.ref] = []


@dataclass
class PlainCache:
    """What decode_step uses of a KVCache, in a plain object. Frozen graphs guard on the identity of a module's
    buffers, so that the KVCache module itself would compile a graph for every new cache (measured)."""
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    max_length: int
    tokens: torch.Tensor | None  # the token ids, where smear or the bigram embedding reads the previous one
    gate_sums: list[torch.Tensor] | None  # FoX's running sums of log-gates, per layer

    def update(self, layer: int, positions: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """KVCache.update, on the same tensors."""
        return write_at(self.keys[layer], self.values[layer], positions, k, v)

    def write_tokens(self, positions: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """KVCache.write_tokens, on the same tensor."""
        return write_tokens_at(self.tokens, positions, idx)

    def write_gates(self, layer: int, positions: torch.Tensor,
                    log_gates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """KVCache.write_gates, on the same tensors."""
        return write_gates_at(self.gate_sums[layer], positions, log_gates)


def compiled_decode_step(model: GPT) -> DecodeStep:
    """model.decode_step compiled to one graph with fixed shapes; the first call per batch size compiles.

    On CUDA with CUDA graphs (reduce-overhead), which replay the step's hundred small kernels as one launch. On the
    CPU under no_grad, the weights are frozen into the graph (inductor's freezing) and packed for MKL's
    matrix-vector products, which then beat plain F.linear (docs/sampling.md, "Static cache, compiled step"). A
    frozen graph holds the weights it was compiled with, so when this model's weights have changed since, every
    compiled graph is dropped (torch.compiler.reset) and the step compiles again. On a torch before 2.13, which
    cannot keep one model's graphs apart from another's, a step for another model than the last drops them too:
    going back and forth between models compiles each time, but never runs out of dynamo's 8 graphs.
    """
    device = model.lm_head.weight.device
    if not ISOLATION:
        if _holding and _holding[0]() is not model:
            torch.compiler.reset()
        _holding[:] = [weakref.ref(model)]
    steps = _compiled_steps.setdefault(model, {})
    if device.type == "cpu":
        weights = [(t.data_ptr(), t._version) for t in itertools.chain(model.parameters(), model.buffers())]
        if _frozen_weights.get(model, weights) != weights:
            torch.compiler.reset()
        _frozen_weights[model] = weights
        if "cpu" not in steps:
            steps["cpu"] = compile_frozen_step()
        return frozen(model, steps["cpu"])
    if device.type not in steps:
        mode = "reduce-overhead" if device.type == "cuda" else "default"
        steps[device.type] = torch.compile(GPT.decode_step, mode=mode, fullgraph=True, dynamic=False, **ISOLATION)
    return functools.partial(steps[device.type], model)


def compile_frozen_step(options: dict | None = None) -> Callable:
    """GPT.decode_step (unbound) compiled as the frozen CPU step is, to one graph with fixed shapes; inductor's
    `options` in place of FROZEN_STEP_OPTIONS' own where given (bench.py's variants). Run it through frozen()."""
    # A copy: torch.compile pops guard_filter_fn from the options it is given, and the next step compiled from
    # FROZEN_STEP_OPTIONS (a recompile, a second model) then checked every guard.
    options = dict(FROZEN_STEP_OPTIONS["options"] if options is None else options)
    return torch.compile(GPT.decode_step, fullgraph=True, dynamic=False, **{**FROZEN_STEP_OPTIONS, "options": options})


def frozen(model: GPT, step: Callable) -> DecodeStep:
    """A DecodeStep for model from step, GPT.decode_step compiled on the CPU: run with inductor's freezing on, so
    that a graph it compiles holds the weights as constants (bench.py times variants of step through this)."""
    # torch.compile(options={"freezing": True}) does not freeze: dynamo decides whether to treat the parameters as
    # constants from the global config while it traces (measured with torch 2.13), so the config is patched.
    from torch._inductor import config as inductor_config  # imported with the compiler, not with the model

    def frozen_step(token: torch.Tensor, position: torch.Tensor, cache: KVCache,
                    starts: torch.Tensor | None = None) -> torch.Tensor:
        plain = PlainCache(cache.keys, cache.values, cache.max_length, read_buffer(cache, "tokens"), cache.gate_sums)
        # freezing is read when a graph compiles, on the first call: set for the call, not a global setting. Set
        # and restored by hand: inductor_config.patch took 50 us a call (measured), this takes 10.
        was_freezing = inductor_config.freezing
        inductor_config.freezing = True
        try:
            return step(model, token, position, plain, starts)
        finally:
            inductor_config.freezing = was_freezing

    return frozen_step


def frozen_step_guards(guards: list) -> list[bool]:
    """Which of the frozen decode step's guards dynamo checks before every token (torch.compile's guard_filter_fn).

    All of those on the inputs and the global state (shapes, dtypes, grad mode, autocast) stay, and of the ~900 on
    the model (`self...`) the identity of every parameter, which is what tells one model's frozen graph from
    another's, and each module's `training` flag. The rest re-check the module tree (types, hooks, that no forward
    was replaced, attribute values such as n_head) and took 6.5% of the step here (docs/benchmarks.md, "the same
    choices by hand"); a model rebuilt in place is new parameters, and weights changed in place are
    compiled_decode_step's own check.
    """
    return [not g.name.startswith("self.") or g.guard_type == "ID_MATCH" or g.name.endswith(".training")
            for g in guards]


# The graph's own call() in C++ (cpp_wrapper), not Python launching its ~55 kernels and products: 3% off the step
# (4.99 against 5.15 ms, randomized alternation in one process), for some 6 s more compilation (12.7 against 6.2 s).
# guard_filter_fn came with torch 2.8, beside torch.compiler's own filters; before it, every guard is checked.
FROZEN_STEP_OPTIONS = {
    "options": {"cpp_wrapper": True,
                **({"guard_filter_fn": frozen_step_guards} if hasattr(torch.compiler, "skip_all_guards_unsafe")
                   else {})},
    **ISOLATION}
