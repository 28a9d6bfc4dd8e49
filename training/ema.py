"""An exponential moving average of the weights (--ema_decay, --ema_start): modded-nanogpt's optimizer track ends
with one (its tail EMA, record 45), and an average of the last steps' weights sits nearer the valley's floor than the
last step does while the rate is still high.

After each step past ema_start, average <- decay x average + (1 - decay) x weights (torch's lerp), the first such
step's weights starting it. At the end of the run the average replaces the weights: it is what the last evaluation
measures and what ckpt.pt (and best.pt, if it is the best) holds as the model; the weights the optimizer trains stay
beside it in ckpt.pt, so that a resumed run continues them (checkpoint.py).
"""

import torch
from torch import nn


def update_average(average: dict[str, torch.Tensor] | None, model: nn.Module,
                   decay: float) -> dict[str, torch.Tensor]:
    """The average after this step's weights (a copy of them for the first); updated in place."""
    parameters = dict(model.named_parameters())
    if average is None:
        return {name: p.detach().clone() for name, p in parameters.items()}
    with torch.no_grad():
        for name, value in average.items():
            value.lerp_(parameters[name], 1 - decay)
    return average


def swap_in_average(model: nn.Module, average: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Put the average into the model's parameters; returns a copy of the model's state before (the weights the
    optimizer trains, in state-dict form, as checkpoint.py saves them)."""
    trained = {name: t.detach().clone() for name, t in model.state_dict().items()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(average[name])
    return trained
