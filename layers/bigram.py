"""A bigram embedding (GPTConfig.bigram_embedding): a table with a row for each (previous token, token) pair, the
pair's row added to the token's input, as modded-nanogpt's bigram embedding does (the record of -165 steps; its
train_gpt.py, get_bigram_hash and GPT.forward's x0_bigram). A character vocabulary has few pairs, so each gets a row
of its own (rows = vocab_size^2: the pair p, c is row p * vocab_size + c); a BPE vocabulary's pairs are hashed into
the rows there are, with modded-nanogpt's hash, (36313 c) xor (27191 p) mod rows. The table starts at zero
(modded-nanogpt's). A row's first token has no previous token and takes no row (GPT.previous_tokens).
"""

import torch
from torch import nn
from torch.nn import functional as F


def bigram_rows(wanted: int, vocab_size: int) -> int:
    """Rows of the table for bigram_embedding=wanted: one per pair where wanted covers them all, else wanted."""
    return min(wanted, vocab_size * vocab_size)


def bigram_row(previous: torch.Tensor, token: torch.Tensor, rows: int, vocab_size: int) -> torch.Tensor:
    """The row of each (previous, token) pair: its own where every pair has one, else the pair hashed."""
    previous, token = previous.long(), token.long()
    if rows == vocab_size * vocab_size:
        return previous * vocab_size + token
    return torch.bitwise_xor(36313 * token, 27191 * previous) % rows


class BigramEmbedding(nn.Module):
    def __init__(self, wanted: int, vocab_size: int, n_embd: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.zeros(bigram_rows(wanted, vocab_size), n_embd))

    def forward(self, previous: torch.Tensor, token: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """The rows (B, T, C) of the pairs (previous, token), each (B, T); zero where present (B or 1, T, 1) says
        a token has no previous one."""
        rows = bigram_row(previous, token, self.weight.size(0), self.vocab_size)
        return F.embedding(rows, self.weight) * present
