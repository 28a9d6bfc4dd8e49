"""A study's cells: what --variants and --grid say, parsed into settings, named, labelled, and made into the configs
their runs train with.

A cell is a pos_encoding value ("rope"), or name=value settings of any GPTConfig/TrainConfig field separated by
spaces ("pos_encoding=sinusoidal sinusoidal_amplitude=1.0", or "sinusoidal sinusoidal_amplitude=1.0"); --grid adds
the cross product "name=v1,v2;name2=v3,v4". A cell's settings override the config file and flags.
"""

import itertools
import re
import typing
from dataclasses import dataclass, fields, replace

from errors import OptionError
from model import GPTConfig
from options import convert_value
from study.config import PER_RUN, AblateConfig
from train import TrainConfig, training_dtype, unused_settings
from training.devices import choose_device, dtype_name

LABEL_WORDS = {"learning_rate": "lr", "learned_init_std": "init std"}  # how cell_label names these settings
FROM_CELL = "from_cell"  # the cell setting of a finetune: the cell whose final checkpoint each seed starts from


@dataclass(frozen=True)
class Cell:
    """One cell, ready to train: its settings applied to the study's configs."""
    name: str  # its identity: its folder, its records' "variant" (cell_name)
    label: str  # as tables and plots show it (cell_label)
    train_config: TrainConfig
    model_config: GPTConfig


def with_resolved_dtype(train_config: TrainConfig) -> TrainConfig:
    """The config with its dtype as the runs train in it ("auto" resolved once, for the device): every run of a
    study then trains in the dtype its settings name, and a record says which."""
    dtype, _ = training_dtype(train_config, choose_device(train_config.device))
    return replace(train_config, dtype=dtype_name(dtype))


def field_types() -> dict[str, tuple[type, object]]:
    """Every setting a cell may change: {name: (its dataclass, its type hint)}."""
    types_ = {}
    for section in (TrainConfig, GPTConfig):
        hints = typing.get_type_hints(section)
        types_.update({f.name: (section, hints[f.name]) for f in fields(section) if f.name not in PER_RUN})
    return types_


def parse_setting(text: str) -> tuple[str, object]:
    """"name=value" as (name, typed value); a bare word is a pos_encoding value."""
    name, has_value, value = text.partition("=")
    if not has_value:
        name, value = "pos_encoding", text
    if name == FROM_CELL:
        return name, value
    known = field_types()
    if name not in known:
        raise OptionError(f"cell setting {text!r}: {name!r} is not a GPTConfig/TrainConfig field (or is set per "
                          f"run: {', '.join(PER_RUN)}); see python train.py --help")
    return name, convert_value(name, value, known[name][1])


def parse_cell(variant: str) -> dict[str, object]:
    """One cell, "name=value name=value" (or a bare pos_encoding word): {field: value}, each field set once."""
    cell: dict[str, object] = {}
    for name, value in map(parse_setting, variant.split()):
        if name in cell:
            commas = ",".join(variant.split())
            hint = f"; separate cells with commas: --variants={commas}" if name == "pos_encoding" else ""
            raise OptionError(f"cell {variant!r} sets {name} twice ({cell[name]!r} and {value!r}); set it once{hint}")
        cell[name] = value
    return cell


def study_cells(ablate: AblateConfig) -> list[dict[str, object]]:
    """The cells to compare, in order: --variants, then the --grid cross product. Each is {field: value}."""
    cells = [parse_cell(variant) for variant in ablate.variants]
    axes, parts = [], {}
    for part in filter(None, (p.strip() for p in ablate.grid.split(";"))):
        name, has_values, values = part.partition("=")
        if not has_values or not values:
            raise OptionError(f"grid part {part!r} must look like name=v1,v2")
        name, values = name.strip(), [v.strip() for v in values.split(",")]
        if name in parts:  # the product's dict would keep the last value alone, without a word
            both = ",".join(dict.fromkeys(parts[name][1] + values))
            raise OptionError(f"grid sets {name} twice ({parts[name][0]!r} and {part!r}); give its values once: "
                              f"--grid='{name}={both}'")
        parts[name] = (part, values)
        axes.append([parse_setting(f"{name}={value}") for value in values])
    cells += [dict(combination) for combination in itertools.product(*axes)] if axes else []
    names = [cell_name(c) for c in cells]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise OptionError(f"cells {repeated} are listed more than once; list each cell once")
    folders: dict[str, str] = {}
    for name in names:  # one folder would hold both cells' runs, and the table one of them
        if (other := folders.setdefault(cell_dir(name), name)) != name:
            raise OptionError(f"cells {other!r} and {name!r} would share the folder {cell_dir(name)!r} (a folder "
                              "name keeps letters, digits and ._=+- alone); change a value so that they differ there")
    if ablate.lr_sweep and any("learning_rate" in c for c in cells):
        raise OptionError("a cell sets learning_rate and lr_sweep picks each cell's own: drop one of them")
    return cells


def cell_name(cell: dict[str, object]) -> str:
    """"sinusoidal sinusoidal_amplitude=1.0": the pos_encoding first, bare, then the other settings. The cell's
    identity (its folder, its records); tables and plots show cell_label."""
    parts = [str(cell["pos_encoding"])] if "pos_encoding" in cell else []
    return " ".join(parts + [f"{k}={v}" for k, v in cell.items() if k != "pos_encoding"]) or "base"


def cell_dir(name: str) -> str:
    """A cell's folder name: its name with anything but letters, digits and ._=+- made _."""
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", name)


def cell_label(cell: dict[str, object]) -> str:
    """The cell as a person writes it: "sinusoidal 0.1" (a setting of the cell's own encoding, by value alone),
    "learned init std 0.01", "rope lr 0.003", other settings as name=value."""
    encoding = str(cell.get("pos_encoding", ""))
    parts = [encoding] if encoding else []
    for name, value in cell.items():
        shown = (f"{value:.1f}" if value.is_integer() else f"{value:g}") if isinstance(value, float) else str(value)
        if name == "pos_encoding":
            continue
        if name in LABEL_WORDS:
            parts.append(f"{LABEL_WORDS[name]} {shown}")
        elif encoding and name.startswith(f"{encoding}_"):
            parts.append(shown)
        else:
            parts.append(f"{name}={shown}")
    return " ".join(parts) or "base"


def given_labels(ablate: AblateConfig, cells: list[dict[str, object]]) -> dict[str, str]:
    """{cell name: the label a person gave it} from --labels' "label: cell" entries (the cell as --variants writes
    it); tables and plots show the label, the cell's folder and records keep its name. A label of no cell, a cell
    labelled twice or two cells of one label is one line."""
    names = [cell_name(c) for c in cells]
    found: dict[str, str] = {}
    for entry in ablate.labels:
        label, colon, variant = (part.strip() for part in entry.partition(":"))
        if not colon or not label or not variant:
            raise OptionError(f"labels entry {entry!r} must be 'label: cell', e.g. 'GPT-2 track: learned "
                              "optimizer=muon'")
        name = cell_name(parse_cell(variant))
        if name not in names:
            raise OptionError(f"labels entry {entry!r}: {name!r} is not one of the cells {names}; write the cell as "
                              "--variants does")
        if name in found:
            raise OptionError(f"labels: cell {name!r} is labelled twice ({found[name]!r} and {label!r}); give one")
        found[name] = label
    shown = [found.get(name, cell_label(cell)) for name, cell in zip(names, cells, strict=True)]
    repeated = sorted({label for label in found.values() if shown.count(label) > 1})
    if repeated:
        raise OptionError(f"labels: {repeated[0]!r} would name two cells; give each cell a label of its own")
    return found


def configured_cells(cells: list[dict], train_config: TrainConfig, model_config: GPTConfig) -> list[Cell]:
    """Each cell with its configs; a setting a config refuses (dropout=1.5, a misspelt encoding, rope with an odd
    head size) is one line naming the cell, before anything trains. A cell's own learning_rate scales min_lr with
    it (unless the cell sets min_lr too)."""
    configured = []
    for cell in cells:
        overrides = {s: {k: v for k, v in cell.items() if k != FROM_CELL and field_types()[k][0] is s}
                     for s in (TrainConfig, GPTConfig)}
        if "learning_rate" in cell and "min_lr" not in cell:  # the decay keeps its depth: min_lr / learning_rate
            overrides[TrainConfig]["min_lr"] = train_config.min_lr * cell["learning_rate"] / train_config.learning_rate
        try:
            configured.append(Cell(cell_name(cell), cell_label(cell),
                                   with_resolved_dtype(replace(train_config, **overrides[TrainConfig])),
                                   replace(model_config, **overrides[GPTConfig])))
        except ValueError as e:
            raise OptionError(f"cell {cell_name(cell)!r}: {e}") from None
        unused = unused_settings(configured[-1].train_config, configured[-1].model_config, cell)
        if unused:  # a grid over t5_num_buckets without t5 in its cells trained learned models labelled as t5's
            grid = " (a --grid's cells take --pos_encoding, not --variants)" if "pos_encoding=" in str(unused) else ""
            raise OptionError(f"cell {cell_name(cell)!r}: {'; '.join(unused)}: it would do nothing; give the cell what "
                              f"it is a setting of too{grid}, or drop the setting")
    return configured
