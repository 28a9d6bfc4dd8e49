"""One checkpoint format: a dict of tensors and plain values, written atomically, loaded without pickled code.

A checkpoint holds `model_args` (GPTConfig fields), `model` (state dict), `tokenizer` (the data's description,
so sampling needs no extra flag) and, for resuming (ckpt.pt; best.pt holds BEST_KEYS only), `optimizer` (one torch
state dict: AdamW's, or Muon's groups then AdamW's, as `config`'s optimizer records), `config`, `iter_num`,
`best_val_loss` and `rng`; a run with an EMA of its weights (ema.py) adds `ema` (the average, by parameter name)
and, once the average has replaced the weights at the end, `training_weights` (what the optimizer trains).
Weights and optimizer state are full state dicts as one process has them, whatever wrote them (one process, DDP
or FSDP), so any of them resumes any other's. A file that is not such a checkpoint (damaged, truncated, holding
code, or settings that do not fit its weights) is a UserError naming the file, found before the model is allocated.
This module is the one that knows what the keys hold: checkpoint_dict writes them, load_checkpoint and
model_from_checkpoint read the model, load_for_resume, restore and saved_average the rest.
"""

import dataclasses
import os
import pickle
import sys
import zipfile
from pathlib import Path

import torch

from errors import UserError
from files import atomic_files
from gpt import gpt2_weights
from gpt.gpt2_weights import GPT2_NAMES
from layers.positions import derived_settings
from model import GPT, GPTConfig
from text.dataset import OLD_SINGLE_TEXT_RULE, split_difference, split_identity
from text.tokenizer import check_description, tokenizer_difference
from training.nanogpt import init_checkpoint, is_checkpoint, to_ours
from training.parallel import full_model_state, full_optimizer_state, load_optimizer_state
from training.run_dir import DONE_FILE

BEST_KEYS = ("model_args", "model", "tokenizer", "iter_num", "best_val_loss")  # what best.pt holds of ckpt.pt
RESUME_KEYS = ("optimizer", "config", "iter_num", "best_val_loss", "rng")  # what resuming needs beyond BEST_KEYS


def check_init_from(init_from: str, modes: tuple[str, ...]) -> None:
    """A ValueError unless init_from is one of the script's modes (train: scratch, resume; sample: resume), a
    GPT-2 name, a local folder or a checkpoint file (nanoGPT's or ours)."""
    known = (*modes, *GPT2_NAMES)
    folder = Path(init_from)
    if folder.is_dir() and init_checkpoint(init_from) is None and not (folder / "config.json").is_file():
        raise ValueError(f"init_from={init_from!r} is a folder without a checkpoint: it holds no ckpt.pt (a run's "
                         "out_dir) and no config.json (a Hugging Face GPT-2's, with model.safetensors); give the "
                         "folder of one, or a ckpt.pt")
    if init_from.removeprefix("openai-community/") not in known and not folder.is_dir() \
            and init_checkpoint(init_from) is None:
        raise ValueError(f"init_from={init_from!r} must be one of {', '.join(known)}, a local folder "
                         "holding a Hugging Face GPT-2 (config.json and model.safetensors), or a checkpoint: a "
                         "ckpt.pt (nanoGPT's or ours) or the out_dir that holds it")


def all_finite(tensors) -> bool:
    """No NaN or inf in any floating-point tensor of tensors."""
    return all(torch.isfinite(t).all() for t in tensors if t.is_floating_point())


def save_checkpoint(state: dict, path: str | os.PathLike) -> None:
    """Write to a temporary file beside path, then rename: a crash mid-write leaves the old file intact, and a
    full disk is atomic_files' one line saying so."""
    with atomic_files(path) as (temp,), temp.open("wb") as file:
        try:
            torch.save(state, file)
        except RuntimeError as e:
            # torch's zip writer, closed after a write failed (ENOSPC) or was interrupted, raises a RuntimeError
            # of its own ("unexpected pos") over the real cause: that cause is what the user can act on.
            if isinstance(e.__context__, (OSError, KeyboardInterrupt)):
                raise e.__context__ from None
            raise


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """The checkpoint at path, checked to hold model_args, model and tokenizer; never runs pickled code."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}" + (" (it is a folder)" if path.is_dir() else ""))
    if path.stat().st_size == 0:
        raise UserError(f"{path} is empty, not a checkpoint (a copy or a disk that failed?)")
    try:  # torch does not check the CRCs of its zip archive: a flipped byte in the weights would load silently
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise UserError(f"{path} is truncated, damaged or not a checkpoint ({type(e).__name__})") from None
    if damaged is not None:
        raise UserError(f"{path} is damaged: its part {damaged!r} fails its checksum")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Weights only load failed" in str(e):  # torch's refusal: the file asks to build other objects
            raise UserError(f"{path} holds pickled objects other than tensors and plain values (possibly code); "
                            "refusing to load it") from None
        raise UserError(f"{path} is truncated, damaged or not a checkpoint (UnpicklingError)") from None
    except Exception as e:  # torch.load on arbitrary bytes fails in many ways (zip, pickle, EOF, decoding)
        raise UserError(f"{path} is truncated, damaged or not a checkpoint ({type(e).__name__})") from None
    if is_checkpoint(state):
        state = to_ours(state, path)
    missing = [key for key in ("model_args", "model", "tokenizer") if not isinstance(state, dict) or key not in state]
    if missing:
        raise UserError(f"{path} is not a checkpoint of this repo: it lacks {', '.join(map(repr, missing))}")
    check_description(state["tokenizer"], f"{path} (its tokenizer)")
    return state


def config_from_args(model_args: object, source: str | os.PathLike) -> GPTConfig:
    """GPTConfig from a checkpoint's model_args: every field known and of its type, the values valid."""
    if not isinstance(model_args, dict):
        raise UserError(f"{source}: model_args is not a dict of settings")
    fields = {field.name: field for field in dataclasses.fields(GPTConfig)}
    for name, value in model_args.items():
        if name not in fields:
            raise UserError(f"{source}: unknown model setting {name!r} (a checkpoint of another version or repo?)")
        expected = type(fields[name].default)
        if not (type(value) is expected or (expected is float and type(value) is int)):
            raise UserError(f"{source}: model setting {name}={value!r} should be a {expected.__name__}")
    try:
        return GPTConfig(**model_args)
    except ValueError as e:
        raise UserError(f"{source}: {e}") from None


def model_from_checkpoint(state: dict, source: str | os.PathLike = "the checkpoint", **overrides) -> GPT:
    """The model a checkpoint describes, with its weights; overrides replace settings that leave the shapes
    as they are (dropout). The shapes are compared before any memory is allocated for the model."""
    config = dataclasses.replace(config_from_args(state["model_args"], source), **overrides)
    weights = state["model"]
    if not isinstance(weights, dict) or not all(isinstance(t, torch.Tensor) for t in weights.values()):
        raise UserError(f"{source}: 'model' is not a dict of tensors")
    with torch.device("meta"):  # shapes only: a file declaring a huge model costs nothing here
        expected = {name: tuple(t.shape) for name, t in GPT(config).state_dict().items()}
    found = {name: tuple(t.shape) for name, t in weights.items()}
    missing, unexpected = sorted(expected.keys() - found.keys()), sorted(found.keys() - expected.keys())
    if missing or unexpected:
        raise UserError(f"{source}: the weights do not fit the model settings: missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]}")
    wrong = [name for name in expected if expected[name] != found[name]]
    if wrong:
        name = wrong[0]
        raise UserError(f"{source}: the model settings do not fit the weights: {name} should be {expected[name]} "
                        f"by the settings but is {found[name]} in the file ({len(wrong)} tensor(s) differ)")
    if not all_finite(weights.values()):
        raise UserError(f"{source}: the weights hold NaN or inf")
    if state["tokenizer"]["vocab_size"] > config.vocab_size:
        raise UserError(f"{source}: its tokenizer has {state['tokenizer']['vocab_size']} tokens, more than the "
                        f"model's vocab_size={config.vocab_size}")
    model = GPT(config)
    model.load_state_dict(weights)
    return model


def read_checkpoint(path: str | os.PathLike) -> tuple[GPT, dict]:
    """The model of the checkpoint at path (on the CPU), and the checkpoint; errors name the file."""
    state = load_checkpoint(path)
    return model_from_checkpoint(state, path), state


def load_pretrained(name_or_dir: str, dropout: float = 0.0) -> GPT:
    """gpt2_weights.from_pretrained, with what can go wrong in a download or a local folder as a UserError."""
    try:
        return gpt2_weights.from_pretrained(name_or_dir, dropout=dropout)
    except (OSError, ValueError, KeyError, ImportError, RuntimeError) as e:  # missing, damaged or offline
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"could not load GPT-2 weights from {name_or_dir!r}: {message}") from None


SEED_LIMIT = 2**64  # torch's generators take seeds below this


def random_state(batch_generator: torch.Generator, device: torch.device) -> dict:
    """The random streams a resumed run continues: torch's (dropout), the batch sampler's, and the GPU's."""
    rng = {"torch": torch.get_rng_state(), "batches": batch_generator.get_state()}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    return rng


def checkpoint_dict(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, model_config: GPTConfig,
                    config: object, tokenizer: dict, iter_num: int, best_val_loss: float, rng: dict,
                    ema: dict | None = None, training_weights: dict | None = None) -> dict:
    """What ckpt.pt holds (best.pt: best_subset of it). config is the training's settings dataclass, rng
    random_state(); ema and training_weights, where there are any, ema.py's. Under FSDP every rank must call this
    (it gathers the shards); rank 0 receives the weights."""
    model_args = {**dataclasses.asdict(model_config), **derived_settings(model_config)}  # stored resolved
    state = {"model_args": model_args, "model": full_model_state(model), "tokenizer": tokenizer,
             "iter_num": iter_num, "best_val_loss": best_val_loss, "optimizer": full_optimizer_state(model, optimizer),
             "config": dataclasses.asdict(config), "rng": rng}
    extras = {"ema": ema, "training_weights": training_weights}
    return state | {key: value for key, value in extras.items() if value is not None}


def best_subset(state: dict) -> dict:
    """best.pt's part of a checkpoint_dict: the weights and what describes them, without the optimizer."""
    return {key: state[key] for key in BEST_KEYS}


def load_for_resume(path: str | os.PathLike, model_config: GPTConfig, data_description: dict, dataset: str,
                    explicit: frozenset[str]) -> tuple[GPT, dict]:
    """The model in the checkpoint at path and the checkpoint, after checking that it can continue as asked:
    it holds the training state, was trained on the token ids of data_description, and no model shape among the
    settings the user gave (explicit) differs from its own. dropout is the run's, or model_config's where the user
    gave it (nanoGPT takes the command line's always: a resume without the flag trained on without dropout)."""
    path = Path(path)
    state = load_checkpoint(path)
    missing = [key for key in RESUME_KEYS if key not in state]
    if missing:
        raise UserError(f"{path} cannot be resumed: it lacks {', '.join(missing)} (weights only, like best.pt, "
                        "or nanoGPT's: --init_from=PATH continues it in a new --out_dir)")
    difference = tokenizer_difference(state["tokenizer"], data_description)
    if difference:
        raise UserError(f"{path} was trained on other token ids than dataset={dataset!r} holds: "
                        f"{difference}; resume on the run's own dataset, or start a new run")
    check_split(state["tokenizer"], data_description, path, dataset)
    trained = config_from_args(state["model_args"], path)
    refuse_other_shape(shape_differences(model_config, trained, explicit),
                       "a resumed model", "drop it to resume, or start a new run in another --out_dir")
    dropout = model_config.dropout if "dropout" in explicit else trained.dropout
    return model_from_checkpoint(state, path, dropout=dropout), state


def check_same_optimizer(state: dict, optimizer: str, path: str | os.PathLike) -> None:
    """Refuse to resume a run under another optimizer than the one its checkpoint's state belongs to (its config
    records it; a checkpoint from before --optimizer trained with AdamW): the state of one cannot go on in the other."""
    trained_with = state["config"].get("optimizer", "adamw")
    if trained_with != optimizer:
        raise UserError(f"{path} was trained with optimizer={trained_with!r}, but this run's is {optimizer!r}; "
                        f"resume with --optimizer={trained_with}, or start a new run from its weights: "
                        f"--init_from={path} --optimizer={optimizer} --out_dir=NEW_DIR")


SHAPE_SETTINGS = tuple(f.name for f in dataclasses.fields(GPTConfig) if f.name != "dropout")


def shape_differences(given: GPTConfig, found: GPTConfig, explicit: frozenset[str]) -> dict[str, tuple]:
    """The model settings the user gave (explicit) that differ from those of the model continued (a checkpoint's,
    GPT-2's): {name: (given, found)}. dropout is not a shape: it is taken from the command line. A setting derived
    from block_size is compared as the length it stands for (a checkpoint stores CoPE's 0 as the number)."""
    given, found = (dataclasses.replace(c, **derived_settings(c)) for c in (given, found))
    return {name: (getattr(given, name), getattr(found, name)) for name in SHAPE_SETTINGS
            if name in explicit and getattr(given, name) != getattr(found, name)}


def refuse_other_shape(differences: dict[str, tuple], what: str, fix: str) -> None:
    """One line naming every setting that differs, its value there and the fix; nothing when none does. A
    continued model keeps the shape of its weights: a differing flag was dropped without a word before."""
    if differences:
        given = ", ".join(f"{name}={mine!r} (the checkpoint has {theirs!r})"
                          for name, (mine, theirs) in differences.items())
        raise UserError(f"{what} keeps its shape, but {given} was given; {fix}")


def continued_differences(given: GPTConfig, found: GPTConfig, explicit: frozenset[str]) -> dict[str, tuple]:
    """shape_differences of a model continued in a new run (another run's checkpoint, GPT-2), less a shorter
    block_size, which crops the model; a longer one has no positions to come from."""
    differences = shape_differences(given, found, explicit)
    if "block_size" in differences and given.block_size < found.block_size:
        del differences["block_size"]
    return differences


def check_resumable(path: Path) -> tuple[dict | None, GPTConfig | None]:
    """Refuse --init_from=resume without a checkpoint, or on nanoGPT's out_dir, before this run makes out_dir or
    locks it (writing train.lock there): a glance at the checkpoint (weights_only, its tensors memory-mapped, not
    read). Its run's training settings (the checkpoint's `config`) and model settings (`model_args`), each None
    where the glance cannot tell; anything else wrong with the file is found by load_for_resume, after the lock."""
    if not path.is_file():
        raise UserError(f"--init_from=resume needs {path}, which does not exist; start a new run with "
                        "--init_from=scratch, or give the --out_dir of the run to continue")
    if (path.parent / DONE_FILE).is_file():  # resuming would replace the checkpoint the study recorded
        raise UserError(f"{path.parent} is a finished run of a study ({DONE_FILE} records {path.name}); resuming "
                        "would replace that checkpoint and the study would refuse the run. Continue it in a new "
                        f"folder: --init_from={path} --out_dir=NEW_DIR")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # damaged, truncated, hostile, not a zip: load_checkpoint names which
        return None, None
    if is_checkpoint(state):
        raise UserError(f"{path} is nanoGPT's checkpoint, which cannot be resumed in its own out_dir (it holds no "
                        f"random state); continue it in a new one: --init_from={path} --out_dir=NEW_DIR")
    if not isinstance(state, dict):
        return None, None
    try:
        model_config = config_from_args(state.get("model_args"), path)
    except UserError:  # said by load_for_resume, in its turn among the file's faults
        model_config = None
    trained = state.get("config")
    return trained if isinstance(trained, dict) else None, model_config


def check_split(trained_on: dict, data_description: dict, path: Path, dataset: str) -> None:
    """Refuse to resume on another split of the data (re-prepared with other fractions, or other text with the
    same characters): the val loss would no longer compare, and the run would train on what it held out. A
    checkpoint written before splits were recorded cannot be checked: said once, and it resumes."""
    if split_identity(trained_on) is None:
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"warning: {path} does not record the data split it was trained on (it predates that); "
                  f"resuming without checking dataset={dataset!r}", file=sys.stderr)
        return
    difference = split_difference(trained_on, data_description)
    if difference:
        identity = split_identity(trained_on)
        settings = {k: v for k, v in identity.items() if k not in ("rule", "sha256") and not k.endswith("_tokens")}
        as_it_was = " ".join(f"--{k}={v}" for k, v in settings.items())
        fix = f"re-prepare the data as the run had it ({as_it_was} --overwrite=True), or start a new run"
        if identity.get("rule") == OLD_SINGLE_TEXT_RULE:
            fix = ("its data was cut by the rule before this one (char and gpt2 in tokens, bpe at the exact "
                   "characters), which this code cannot prepare again: start a new run, or resume with the code "
                   "that prepared it")
        raise UserError(f"{path} was trained on another split than dataset={dataset!r} holds now: {difference}; "
                        f"{fix}")


def restore(state: dict, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            batch_generator: torch.Generator, device: torch.device, path: str | os.PathLike) -> tuple[int, float]:
    """Continue where the checkpoint stopped: load the weights the optimizer trains (training_weights, where the EMA
    took the model's place at the end), the optimizer moments (into a plain or a sharded optimizer) and both random
    streams; returns the step and the best val loss to go on from."""
    try:
        if "training_weights" in state:
            model.load_state_dict(state["training_weights"])
        load_optimizer_state(model, optimizer, state["optimizer"])
        torch.set_rng_state(state["rng"]["torch"])
        batch_generator.set_state(state["rng"]["batches"])
        if device.type == "cuda" and "cuda" in state["rng"]:
            torch.cuda.set_rng_state(state["rng"]["cuda"].cpu(), device)
        return int(state["iter_num"]), float(state["best_val_loss"])
    except (ValueError, KeyError, TypeError, RuntimeError) as e:  # only the file's content can cause these here
        raise UserError(f"{path}: the optimizer or random state does not fit the model ({type(e).__name__}: "
                        f"{str(e)[:200]})") from None


def saved_average(state: dict, model: torch.nn.Module, device: torch.device,
                  path: str | os.PathLike) -> dict[str, torch.Tensor] | None:
    """The EMA of the weights that a resumed checkpoint holds (ema.py's, on device), or None where it holds none."""
    if "ema" not in state:
        return None
    names = {name: p for name, p in model.named_parameters()}
    average = state["ema"]
    if not isinstance(average, dict) or average.keys() != names.keys() or \
            any(average[name].shape != p.shape for name, p in names.items()):
        raise UserError(f"{path}: its 'ema' does not fit the model's parameters (a damaged or edited checkpoint?); "
                        "resume with --ema_decay=0 to drop it")
    return {name: average[name].to(device=device, dtype=p.dtype) for name, p in names.items()}


def checkpoint_model(path: Path, model_config: GPTConfig, data_description: dict,
                     explicit: frozenset[str] = frozenset()) -> tuple[GPT, dict]:
    """The model of another run's checkpoint (nanoGPT's or ours) to train in this out_dir, and the checkpoint.
    A shape among the settings given (explicit) that differs from the checkpoint's is refused, but for a
    shorter block_size: the position table is cropped to it, as nanoGPT does."""
    state = load_checkpoint(path)
    difference = tokenizer_difference(state["tokenizer"], data_description)
    if difference:
        raise UserError(f"{path} was trained on other token ids than this dataset holds: {difference}; train it on "
                        "its own data (for a nanoGPT char model, its data folder with meta.pkl)")
    refuse_other_shape(continued_differences(model_config, config_from_args(state["model_args"], path), explicit),
                       f"a model continued from {path}", "drop it to train the checkpoint's shape, or train a new "
                       "model of that shape with --init_from=scratch")
    model = model_from_checkpoint(state, path, dropout=model_config.dropout)
    if model_config.block_size < model.config.block_size:
        model.crop_block_size(model_config.block_size)
    return model, state
