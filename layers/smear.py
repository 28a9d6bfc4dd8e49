"""Smear (GPTConfig.smear): each token's embedding takes in a gated share of the previous token's,
    e_t <- e_t + lambda * sigmoid(w . e_t[:12]) * e_{t-1},
modded-nanogpt's "smear token embed forward 1 position" (@classiclarryd; train_gpt.py, GPT.forward, with
smear_gate a Linear(12, 1) and smear_lambda a scalar, both starting at zero, so a model starts as it would without).
A row's first token (column 0, or its start in a left-padded batch) has no previous token and takes in nothing.
At decode the previous token is the cache's (KVCache holds the token ids when smear is on: GPT.previous_tokens).
"""

import torch
from torch import nn

GATE_WIDTH = 12  # the gate reads this many leading features of the token's embedding (modded-nanogpt's 12)


class Smear(nn.Module):
    def __init__(self, n_embd: int):
        super().__init__()
        self.gate = nn.Parameter(torch.zeros(min(GATE_WIDTH, n_embd)))  # w
        self.strength = nn.Parameter(torch.zeros(1))  # lambda

    def forward(self, embedded: torch.Tensor, previous: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """embedded (B, T, C): the tokens' embeddings; previous (B, T, C): the previous tokens'; present
        (B or 1, T, 1): whether a token has a previous one. The smeared embeddings, (B, T, C)."""
        share = self.strength * torch.sigmoid(embedded[..., :self.gate.numel()] @ self.gate)[..., None]
        return embedded + share * previous * present
