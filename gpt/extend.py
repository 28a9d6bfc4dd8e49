"""Longer context for a trained model: grow its block_size by a method that its position encoding takes, and
record in its config what was done (docs/context_extension.md). What each method does to each encoding is
positions.py's (extensions, grow, position_scaling); this module applies it to a model, and to train.py's
--init_from=<run or GPT-2 folder> --block_size=<larger> --extend_positions=<method>.

The extended config is the record: block_size is the new length, trained_block_size the one the model was trained
at, position_scaling the method (none for keep) and position_scale the factor. A checkpoint of the finetune holds
them in its model_args, so resuming and sampling rebuild the extended model with no extra flag.
"""

from dataclasses import fields, replace

from errors import UserError
from layers.positions import ENCODINGS, derived_settings, trained_length
from model import GPT, GPTConfig

METHODS = ("interpolate", "copy", "ntk", "yarn", "keep")  # every encoding's extensions together (positions.py)


def extended_config(config: GPTConfig, block_size: int, method: str) -> GPTConfig:
    """config grown to block_size by method; a ValueError where the method does not apply to the encoding, the
    length does not grow, or the model already grew by another method."""
    extensions = ENCODINGS[config.pos_encoding].extensions
    if config.random_positions:
        raise ValueError(f"the model was trained with random_positions={config.random_positions}, so it already "
                         f"places positions 0..{config.random_positions - 1}: it is not extended (score.py and a "
                         "study read it at those lengths as it is)")
    if method not in extensions:
        raise ValueError(f"extend_positions={method!r} does not apply to pos_encoding={config.pos_encoding!r}, "
                         f"which takes {', '.join(extensions)}")
    if block_size <= config.block_size:
        raise ValueError(f"block_size={block_size} does not grow the model's block_size={config.block_size}; give "
                         "a larger one (GPT.crop_block_size shrinks)")
    scaling = "none" if method == "keep" else method
    if config.position_scaling not in ("none", scaling):
        raise ValueError(f"the model's context already grew by position_scaling={config.position_scaling!r}; grow "
                         f"it again by the same method, extend_positions={config.position_scaling}")
    # The factor compounds, relative to the length the positions reach (a cropped model's trained length: the
    # positions it was cropped from are still its own), and trained_block_size stays the length the weights first
    # learned positions at; a setting derived from block_size (CoPE's rows) is written out first: it keeps the
    # trained model's value.
    reach = ENCODINGS[config.pos_encoding].reach(config)
    if scaling != "none" and config.position_scaling == "none" and block_size <= reach:
        raise ValueError(f"block_size={block_size} is within the {reach} positions the model was trained at (it was "
                         f"cropped to {config.block_size}), so extend_positions={method} would scale nothing; give "
                         f"extend_positions=keep, or a block_size past {reach}")
    scale = config.position_scale * max(block_size, reach) / reach if scaling != "none" else 1.0
    return replace(config, **derived_settings(config), block_size=block_size, position_scaling=scaling,
                   position_scale=scale, trained_block_size=trained_length(config))


def extend_model(model: GPT, block_size: int, method: str) -> None:
    """Grow a model's context to block_size by method, in place (as GPT.crop_block_size shrinks it): new rows of
    a learned table, the scaled frequencies of sinusoidal and rope, and the config that records it. Draws no
    random numbers. ValueError: see extended_config."""
    config = extended_config(model.config, block_size, method)
    layer = model.input_layer
    layer.encoding.grow(layer, block_size, method)
    for field in fields(config):  # in place: the model, its input layer and its encoding share one config
        setattr(model.config, field.name, getattr(config, field.name))
    for name, buffer in layer.encoding.new_buffers().items():  # built from the config, which has changed
        layer.register_buffer(name, buffer.to(model.lm_head.weight.device), persistent=False)


def extend_for_training(model: GPT, block_size: int, method: str, source: str, block_size_given: bool) -> bool:
    """train.py --init_from: grow the model to block_size by --extend_positions=method; True when it grew (the run
    then finetunes from step 0: its optimizer state was for the shorter context). Without a method, a larger
    block_size that the user gave is refused; otherwise the model keeps its own, as before."""
    if not method:
        if block_size_given and block_size > model.config.block_size:
            raise UserError(f"block_size={block_size} is larger than {source}'s block_size={model.config.block_size}"
                            f"; give --extend_positions={'|'.join(ENCODINGS[model.config.pos_encoding].extensions)} "
                            "to extend it (docs/context_extension.md), or drop --block_size")
        return False
    old = model.config.block_size
    if block_size <= old:  # checked here: a smaller block_size has already cropped the model to it
        raise UserError(f"--extend_positions={method} grows block_size past {source}'s, but block_size={block_size} "
                        "is not larger; give a larger --block_size, or drop --extend_positions (a smaller block_size "
                        "crops the model)")
    try:
        extend_model(model, block_size, method)
    except ValueError as e:
        raise UserError(f"{source}: {e}") from None
    print(f"{source}: block_size {old} -> {block_size} by extend_positions={method} (position_scaling="
          f"{model.config.position_scaling}, position_scale={model.config.position_scale:g})")
    return True
