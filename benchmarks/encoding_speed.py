"""bench.py --what=encodings: what each position encoding (layers.positions.POS_ENCODINGS, and learned trained on
random positions) costs on the config's model, against learned timed in the same alternating rounds: a training
step (forward, backward, AdamW step; eager, on one fixed batch) at the config's block_size and at 4x block_size
with a quarter of the batch (as many tokens a step), and cached decoding of one sequence (eager, one token a call).

    OMP_NUM_THREADS=1 python bench.py config/baby_cpu.py --what=encodings --clock=cpu --max_new_tokens=256

CoPE writes its attention out (positions.cope_attention, the (T, T) scores of every head in memory) where the
others call SDPA, and FIRE's bias is an MLP over every (query, key) pair of every layer: both grow with T^2, which
the 4x column shows (a run on the 2-core CPU: docs/benchmarks.md#position-encodings).
"""

import statistics
from collections.abc import Iterator
from dataclasses import replace

import torch

from benchmarks.common import BenchConfig, bench_clock, figure, seconds
from benchmarks.train_speed import BareLoop, Variant
from errors import OptionError
from layers.positions import POS_ENCODINGS
from model import GPT, GPTConfig, has_fused_adamw
from text.dataset import resolve_data_dir
from text.tokenizer import read_description
from train import TrainConfig, model_vocab_size, training_dtype
from training.devices import choose_device, dtype_name

LONGER = 4  # the long training column: block_size this many times the config's, the batch as many times smaller
RANDOM_POSITIONS = 512  # the extra row: learned with random_positions this (or the longest block timed, if more)
BASE = "learned"  # the row every "vs learned" divides by
DECODE = "decode"  # the decoding column's key
DECODE_CHUNK = 16  # tokens a row decodes in its turn before the next row's (timed_round)


def encoding_rows(longest_block: int) -> dict[str, dict]:
    """{row: the GPTConfig fields it sets}: every encoding of POS_ENCODINGS, then learned trained on positions drawn
    from a range of RANDOM_POSITIONS (at least longest_block, as random_positions must be)."""
    rows = {name: {"pos_encoding": name, "random_positions": 0} for name in POS_ENCODINGS}
    drawn_from = max(RANDOM_POSITIONS, longest_block)
    rows[f"learned, random_positions={drawn_from}"] = {"pos_encoding": "learned", "random_positions": drawn_from}
    return rows


def decoding(model: GPT, new_tokens: int, chunk: int) -> Iterator[None]:
    """Eager cached decoding, one sequence after another, pausing after every `chunk` tokens: each sequence a 1-token
    prompt, then one token a call, model(token, cache=cache), the most likely token fed back, until new_tokens are
    made (new_tokens calls)."""
    cache = model.make_cache(1)
    device = model.lm_head.weight.device
    made = 0
    while True:
        cache.reset()
        token = torch.zeros((1, 1), dtype=torch.long, device=device)
        for _ in range(new_tokens):
            with torch.no_grad():
                logits, _ = model(token, cache=cache)
            token = logits[:, -1].argmax(-1, keepdim=True)
            made += 1
            if made % chunk == 0:
                yield


def timed_round(bench: BenchConfig, loops: dict[str, dict[str, BareLoop]], decoders: dict[str, Iterator[None]],
                order: list[str], clock, device: torch.device) -> dict[str, dict[str, float]]:
    """{column: {row: median seconds of a step, or of a token}} of one round: the rows take turns step by step (a
    training step each; DECODE_CHUNK tokens each), so that every row is timed in the same few seconds as learned
    (on this shared machine a row's speed drifts by 2x from one second to the next: measured)."""
    times = {column: {row: [] for row in order} for column in loops}
    for column, by_row in loops.items():
        for step in range(bench.bench_steps):
            for row in order if step % 2 == 0 else order[::-1]:
                times[column][row].append(by_row[row].step(clock)[0])
    chunk = min(DECODE_CHUNK, bench.max_new_tokens)
    decoded = {row: [] for row in order}
    for turn in range(max(1, bench.max_new_tokens // chunk)):
        for row in order if turn % 2 == 0 else order[::-1]:
            decoded[row].append(seconds(lambda row=row: next(decoders[row]), clock, device) / chunk)
    return {**{column: {row: statistics.median(t) for row, t in by_row.items()} for column, by_row in times.items()},
            DECODE: {row: statistics.median(t) for row, t in decoded.items()}}


def bench_encodings(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> tuple[str, list[dict]]:
    """(what was measured, in one line; the figures): each row's training step at block_size and at LONGER x
    block_size, and its decoding, timed in every round beside learned's (timed_round; odd rounds in the reverse
    order). A "vs learned" is the row's time over learned's (a step's, or a token's) in the same round, its median
    over the rounds; > 1 is slower. Absolute figures are medians over the rounds."""
    if config.optimizer != "adamw":  # the loops step AdamW: another optimizer would not be what is timed
        raise OptionError(f"optimizer={config.optimizer!r}: the encodings benchmark times AdamW steps; drop "
                          "--optimizer")
    device = choose_device(config.device)
    clock = bench_clock(bench, device)
    model_config = replace(model_config, vocab_size=model_vocab_size(read_description(resolve_data_dir(
        config.dataset))), dropout=0.0, random_positions=0)
    dtype, _ = training_dtype(config, device)
    variant = Variant("eager", compile=False, fused=has_fused_adamw(device.type), dtype=dtype)
    block, batch = model_config.block_size, config.batch_size
    shapes = {f"train, T {t} x B {b}": (t, b) for t, b in ((block, batch), (LONGER * block, max(1, batch // LONGER)))}
    decode_block = max(block, 1 + bench.max_new_tokens)  # every row's cache (and learned's table) holds them all
    rows = encoding_rows(max(LONGER * block, decode_block))
    loops = {column: {row: BareLoop(variant, bench, replace(config, batch_size=b),
                                    replace(model_config, block_size=t, **fields), device)
                      for row, fields in rows.items()} for column, (t, b) in shapes.items()}
    decoders = {}
    for row, fields in rows.items():
        torch.manual_seed(config.seed)
        model = GPT(replace(model_config, block_size=decode_block, **fields)).to(device).eval()
        decoders[row] = decoding(model, bench.max_new_tokens, min(DECODE_CHUNK, bench.max_new_tokens))
    for by_row in loops.values():
        for loop in by_row.values():
            for _ in range(bench.warmup_steps):
                loop.step(clock)
    if bench.warmup_steps:
        for tokens in decoders.values():
            next(tokens)
    rounds = [timed_round(bench, loops, decoders, list(rows) if r % 2 == 0 else list(rows)[::-1], clock, device)
              for r in range(bench.rounds)]
    table = "position encoding (eager; vs learned: time over learned's)"
    figures = []
    for row in rows:
        for column in [*shapes, DECODE]:
            took = statistics.median(times[column][row] for times in rounds)
            ratio = statistics.median(times[column][row] / times[column][BASE] for times in rounds)
            if column == DECODE:
                figures += [figure(table, row, "decode tokens/s", 1 / took, "tokens/s"),
                            figure(table, row, "vs learned (decode)", ratio, "x")]
            else:
                figures += [figure(table, row, f"{column}, a step", 1e3 * took, "ms"),
                            figure(table, row, f"vs learned (T {shapes[column][0]})", ratio, "x")]
    base_params = loops[next(iter(shapes))][BASE].model.get_num_params()
    return (f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}, clock {bench.clock}; "
            f"n_layer {model_config.n_layer}, n_head {model_config.n_head}, n_embd {model_config.n_embd}, "
            f"{base_params:,} parameters with learned at T {block}; training: eager, "
            f"{'fused' if variant.fused else 'foreach'} AdamW, {dtype_name(dtype)}, one fixed batch, {bench.rounds} "
            f"alternating rounds of {bench.bench_steps} steps a row, the rows taking turns step by step (medians); "
            f"decoding: eager, float32, batch 1, a KV cache of {decode_block} positions, a 1-token prompt then one "
            f"token a call, {bench.max_new_tokens} tokens a round in turns of {min(DECODE_CHUNK, bench.max_new_tokens)}"
            ), figures
