"""The GPT-2 input layer in plain NumPy: a small, readable reference for model.InputLayer.

    h[b, t] = wte[idx[b, t]] + wpe[past_length + t]

The token table is looked up by token id and the position table by absolute position; with a KV cache the
T new tokens sit after past_length cached ones, so they read rows past_length .. past_length+T-1 of wpe.
The backward pass is written out by hand so the tests can check both autograd (against this file) and this
file (against finite differences). Imports nothing from this repo on purpose: a reference that shared code
with the model would share its bugs.
"""

import numpy as np


def forward(idx: np.ndarray, wte: np.ndarray, wpe: np.ndarray, past_length: int = 0) -> np.ndarray:
    """(B, T) token ids -> (B, T, C) input vectors, h[b, t] = wte[idx[b, t]] + wpe[past_length + t].

    wte is (vocab_size, C) and wpe is (block_size, C). Positions are absolute: the t-th new token after
    past_length cached ones is at position past_length + t, which must be a row of wpe.
    """
    idx = np.asarray(idx)
    T = idx.shape[1]
    if past_length < 0 or past_length + T > wpe.shape[0]:
        raise ValueError(f"positions {past_length}..{past_length + T - 1} need rows that wpe "
                         f"({wpe.shape[0]} rows) does not have")
    if idx.min() < 0 or idx.max() >= wte.shape[0]:
        raise ValueError(f"token ids must be in [0, {wte.shape[0]})")
    token_vectors = wte[idx]  # (B, T, C): fancy indexing is the embedding lookup
    position_vectors = wpe[past_length:past_length + T]  # (T, C), broadcast over the batch
    return token_vectors + position_vectors[None, :, :]


def backward(idx: np.ndarray, grad_h: np.ndarray, vocab_size: int, block_size: int,
             past_length: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of a loss L with respect to wte and wpe, given grad_h = dL/dh of shape (B, T, C).

    dwte: each h[b, t] contains wte[idx[b, t]] once, so row v of dwte is the sum of grad_h over every
    (b, t) where token v occurs. Token ids repeat, so this is a scatter-ADD: np.add.at accumulates repeated
    indices, whereas `dwte[idx] += grad_h` would keep only one of them. Rows of unseen tokens stay zero.

    dwpe: position past_length + t is used by every sequence of the batch at step t, so its gradient is
    grad_h summed over the batch, added at offset past_length. Rows of positions not used are zero.
    """
    idx = np.asarray(idx)
    B, T, C = grad_h.shape
    dwte = np.zeros((vocab_size, C), dtype=grad_h.dtype)
    np.add.at(dwte, idx.reshape(-1), grad_h.reshape(B * T, C))
    dwpe = np.zeros((block_size, C), dtype=grad_h.dtype)
    dwpe[past_length:past_length + T] += grad_h.sum(axis=0)
    return dwte, dwpe


def sinusoidal_table(positions: np.ndarray, n_embd: int) -> np.ndarray:
    """Vaswani et al. (2017) position encodings, (len(positions), n_embd), computed in float64.

    Feature pair i (i = 0 .. n_embd/2 - 1) turns at angle = pos / 10000^(2i / n_embd):
    feature 2i is sin(angle), feature 2i+1 is cos(angle) (interleaved, not two halves). The wavelengths
    grow geometrically from 2*pi to 10000*2*pi, and no parameters are learned, so any position has a row.
    """
    if n_embd % 2:
        raise ValueError(f"n_embd={n_embd} must be even: features come in (sin, cos) pairs")
    positions = np.asarray(positions, dtype=np.float64)
    i = np.arange(n_embd // 2, dtype=np.float64)
    angles = positions[:, None] / 10000.0 ** (2.0 * i / n_embd)[None, :]  # (P, n_embd/2)
    table = np.empty((positions.shape[0], n_embd), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return table


def t5_buckets(distance: np.ndarray, num_buckets: int, max_distance: int) -> np.ndarray:
    """T5's causal relative-position buckets (Raffel et al. 2020) of distances query_pos - key_pos, in float64.

    A key after the query counts as distance 0. Distances 0 .. exact-1 (exact = num_buckets // 2) get a bucket
    each; a longer d gets exact + floor(ln(d / exact) / ln(max_distance / exact) * (num_buckets - exact)),
    capped at the last bucket, so the buckets widen geometrically up to max_distance.
    """
    exact = num_buckets // 2
    d = np.maximum(np.asarray(distance), 0)
    with np.errstate(divide="ignore"):  # ln 0 where d = 0, a bucket of its own, not read
        far = exact + np.floor(np.log(d / exact) / np.log(max_distance / exact) * (num_buckets - exact))
    return np.where(d < exact, d, np.minimum(far, num_buckets - 1)).astype(np.int64)
