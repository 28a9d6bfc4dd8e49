"""Value embeddings (GPTConfig.value_embeddings): token tables whose rows are added to attention's values in some
layers, as modded-nanogpt has them (@KoszarskyB's value embeddings, its record of 4 December 2024, 4.66 -> 4.41
min; the "012 ... 012" layout of its train_gpt.py from January 2025: table i feeds layer i and layer
n_layer - tables + i). Each layer they reach attends with v = W_v ln(x) + E_i[token], the row reshaped into heads;
at decode the row of the new token is added before its values are cached, so the cache holds what attention used.
"""

import torch
from torch import nn
from torch.nn import functional as F


def value_embedding_layers(n_layer: int, tables: int) -> list[int | None]:
    """Which table each of n_layer layers adds to its values (None: none): table i in layer i and in layer
    n_layer - tables + i, the first and the last layers (modded-nanogpt's 012 ... 012)."""
    layout: list[int | None] = [None] * n_layer
    for table in range(tables):
        layout[table] = layout[n_layer - tables + table] = table
    return layout


class ValueEmbeddings(nn.Module):
    """The tables, (tables, vocab_size, n_embd), drawn N(0, 0.02^2) as the token table is (GPT.reset_parameters)."""

    def __init__(self, tables: int, vocab_size: int, n_embd: int, n_layer: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(tables, vocab_size, n_embd))
        self.layout = value_embedding_layers(n_layer, tables)

    def reset(self, generator: torch.Generator) -> None:
        """Draw the tables on the CPU from generator (the token table's stream, after it); nothing on meta."""
        if not self.weight.is_meta:
            with torch.no_grad():
                self.weight.copy_(torch.randn(self.weight.shape, generator=generator) * 0.02)

    def forward(self, idx: torch.Tensor) -> list[torch.Tensor | None]:
        """Each layer's (B, T, n_embd) rows for the tokens idx (B, T), or None where a layer has no table."""
        rows = [F.embedding(idx, table) for table in self.weight]
        return [None if table is None else rows[table] for table in self.layout]
