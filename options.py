"""One option parser for every script: config files and --key=value flags into dataclasses.

nanoGPT-compatible: `python train.py config/some_file.py --batch_size=32 --compile=False`. A config file is
plain Python assignments (`n_layer = 4`, `max_iters = 5000 * 2`), read with the ast module, never executed;
a first line `base_config = "other.py"` (relative to the file's folder) reads that file first.
Each dataclass field is documented by the comment on its line; `--help` prints those comments.
"""

import ast
import dataclasses
import difflib
import inspect
import math
import operator
import re
import sys
import time
import types
import typing
from pathlib import Path

from errors import OptionError
from files import special_file_kind


def field_docs(section: type) -> dict[str, str]:
    """The trailing `# comment` of each field line in the dataclass source."""
    docs = {}
    for line in inspect.getsource(section).splitlines():
        match = re.match(r"\s+(\w+)\s*:[^=]*=.*?#\s*(.*)$", line)
        if match:
            docs[match.group(1)] = match.group(2)
    return docs


def _fields(sections: tuple[type, ...], skip: tuple[str, ...]) -> dict[str, tuple[type, dataclasses.Field]]:
    fields = {}
    for section in sections:
        for field in dataclasses.fields(section):
            if field.name not in skip:
                fields[field.name] = (section, field)
    return fields


def format_help(prog: str, description: str, sections: tuple[type, ...], skip: tuple[str, ...] = ()) -> str:
    lines = [f"usage: python {prog} [config_file.py ...] [--key=value ...]", "", description.strip(), ""]
    for section in sections:
        docs, hints = field_docs(section), typing.get_type_hints(section)
        lines.append(f"{section.__name__}:")
        for field in dataclasses.fields(section):
            if field.name in skip:
                continue
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            kind = getattr(hints[field.name], "__name__", str(hints[field.name]))
            lines.append(f"  --{field.name}={default!r}  ({kind})  {docs.get(field.name, '')}")
        lines.append("")
    return "\n".join(lines)


def _unknown(name: str, known: typing.Iterable[str], where: str) -> OptionError:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else "; see --help for the valid options"
    return OptionError(f"unknown option {name!r} {where}{hint}")


def convert_value(name: str, value: object, hint: object) -> object:
    """Check or convert a value (a Python object from a config file, or str from the command line)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if (value is None or value == "None") and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return convert_value(name, value, arg)
            except OptionError:
                pass
        raise OptionError(f"--{name}={value!r}: expected {hint}{''.join(_as_int(name, value, a) for a in args)}")
    if origin is list:
        if isinstance(value, str) and value.startswith("["):
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                raise OptionError(f"--{name}={value}: not a list literal; quote its strings ('[\"a\", \"b\"]') or "
                                  "give a,b,c") from None
        elif isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise OptionError(f"--{name}={value!r}: expected a list like a,b,c")
        return [convert_value(name, v, args[0]) for v in value]
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no"):
            return False
        raise OptionError(f"--{name}={value!r}: expected True or False")
    if hint in (int, float):
        if isinstance(value, bool):
            raise OptionError(f"--{name}={value!r}: expected {hint.__name__}, got a bool")
        try:
            number = hint(value) if isinstance(value, str) else value
        except ValueError:
            number = None
        if hint is float and isinstance(number, int):
            number = float(number)
        if not isinstance(number, hint):
            raise OptionError(f"--{name}={value!r}: expected {hint.__name__}{_as_int(name, value, hint)}")
        return number
    if hint is str:
        if not isinstance(value, str):
            raise OptionError(f"--{name}={value!r}: expected a string")
        return value
    raise OptionError(f"--{name}: unsupported option type {hint}")


def _as_int(name: str, value: object, hint: type) -> str:
    """The fix where an int option got a whole number written as a float (1e3, 1000.0): "; give --name=1000"."""
    try:
        number = float(value) if hint is int and isinstance(value, (str, float)) else math.nan
    except ValueError:
        return ""
    return f"; give --{name}={int(number)}" if math.isfinite(number) and number.is_integer() else ""


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod,
              ast.USub: operator.neg, ast.UAdd: operator.pos}


MAX_INT_BITS = 4096  # a config value is a size, a rate or a name: no integer needs more bits
MAX_LENGTH = 100_000  # the longest list or string a config expression may build


def _check_cost(op: ast.operator, left: object, right: object) -> None:
    """Refuse, before computing it, a result too large to be a setting (10**10**10 would never finish)."""
    if isinstance(op, ast.Pow) and type(left) is int and type(right) is int and abs(left) > 1 \
            and right * left.bit_length() > MAX_INT_BITS:
        raise ValueError(f"{left} ** {right} is too large for a setting")
    if isinstance(op, ast.Mult):
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, (list, str)) and type(count) is int and len(sequence) * count > MAX_LENGTH:
                raise ValueError(f"a sequence of {len(sequence)} x {count} items is too long for a setting")


def _check_size(value: object) -> object:
    if type(value) is int and value.bit_length() > MAX_INT_BITS:
        raise ValueError(f"a {value.bit_length()}-bit integer is too large for a setting")
    if isinstance(value, (list, str)) and len(value) > MAX_LENGTH:
        raise ValueError(f"{len(value)} items are too many for a setting")
    return value


# What nanoGPT's config files use beyond literals and arithmetic (its finetune_shakespeare.py names its run
# 'ft-' + str(time.time())): the modules a file may import, the calls it may make. Nothing else is callable.
_MODULES = {"time"}
_CALLS = {("time", "time"): lambda: time.time(), (None, "str"): str}


def _call(node: ast.Call, names: dict[str, object], imported: set[str]) -> object:
    function = node.func
    if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) \
            and function.value.id in imported:
        key = (function.value.id, function.attr)
    else:
        key = (None, function.id) if isinstance(function, ast.Name) and function.id not in names else None
    if key not in _CALLS or node.keywords:
        raise SyntaxError(f"{ast.unparse(node)}: the only calls allowed are time.time() (after import time) "
                          "and str(value)")
    return _check_size(_CALLS[key](*(_evaluate(arg, names, imported) for arg in node.args)))


def _evaluate(node: ast.AST, names: dict[str, object], imported: set[str] = frozenset()) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_evaluate(item, names, imported) for item in node.elts]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left, names, imported), _evaluate(node.right, names, imported)
        _check_cost(node.op, left, right)
        return _check_size(_OPERATORS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand, names, imported))
    if isinstance(node, ast.Call):
        return _call(node, names, imported)
    raise SyntaxError(f"{ast.unparse(node)}: only literals, arithmetic and names assigned above are allowed")


BASE_KEY = "base_config"  # `base_config = "other.py"`, first: this file's lines change that file's values


def _parse(path: str) -> ast.Module:
    file = Path(path)
    if kind := special_file_kind(file):
        raise OptionError(f"config file {path!r} is {kind}, not a regular file; give a .py file of settings")
    if not file.is_file():
        raise OptionError(f"config file {path!r} does not exist" + (" (it is a folder)" if file.is_dir() else ""))
    try:
        # utf-8-sig: a byte-order mark (Windows editors write one) is dropped; ast.parse refused it ("invalid
        # non-printable character U+FEFF") once the text was decoded
        return ast.parse(file.read_text(encoding="utf-8-sig"), filename=path)
    except SyntaxError as e:
        raise OptionError(f"{path}:{e.lineno}: {e.msg}") from None
    except UnicodeDecodeError as e:
        line = file.read_bytes()[:e.start].count(b"\n") + 1
        raise OptionError(f"{path}:{line}: byte {e.object[e.start]:#x} is not UTF-8; save the config file as "
                          "UTF-8") from None


def _base_path(path: str, statement: ast.stmt, value: object, chain: tuple[str, ...]) -> str:
    """The file a base_config line names, relative to the folder of the file that names it."""
    where = f"{path}:{statement.lineno}"
    if not isinstance(value, str):
        raise OptionError(f"{where}: {BASE_KEY}={value!r} must be a file name in quotes, e.g. "
                          f"{BASE_KEY} = \"train_shakespeare_char_cpu.py\"")
    base = Path(path).parent / value
    if not base.is_file():
        raise OptionError(f"{where}: {BASE_KEY}={value!r}: {base} does not exist (the name is relative to the "
                          f"folder of {Path(path).name})")
    if base.resolve() in {Path(p).resolve() for p in chain}:
        cycle = " -> ".join(Path(p).name for p in (*chain, str(base)))
        raise OptionError(f"{where}: {BASE_KEY}={value!r} makes a cycle ({cycle}); a base config cannot build "
                          "on the files that build on it")
    return str(base)


def read_config_file(path: str) -> dict[str, object]:
    """The assignments of a config file, in order, over those of its base config if it names one.

    Literals, arithmetic, earlier names (the base's included), `import time`, time.time() and str() are allowed.
    """
    return _read(path, ())


def _read(path: str, chain: tuple[str, ...]) -> dict[str, object]:
    chain = (*chain, path)
    values: dict[str, object] = {}
    imported: set[str] = set()
    assignments = 0
    for statement in _parse(path).body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        if isinstance(statement, ast.Import) and all(a.name in _MODULES and a.asname is None for a in statement.names):
            imported.update(a.name for a in statement.names)
            continue
        target = statement.targets[0] if isinstance(statement, ast.Assign) and len(statement.targets) == 1 else None
        if not isinstance(target, ast.Name):
            raise OptionError(f"{path}:{statement.lineno}: a config file holds only `name = value` lines (and "
                              "`import time`)")
        try:
            value = _evaluate(statement.value, values, imported)
        except OverflowError:
            raise OptionError(f"{path}:{statement.lineno}: {target.id}: the value overflows") from None
        except (SyntaxError, ValueError, TypeError, ArithmeticError) as e:
            raise OptionError(f"{path}:{statement.lineno}: {target.id}: {e}") from None
        assignments += 1
        if target.id != BASE_KEY:
            values[target.id] = value
        elif assignments > 1:
            raise OptionError(f"{path}:{statement.lineno}: {BASE_KEY} must be the first assignment, so that "
                              "every line after it changes the base's values")
        else:
            values = _read(_base_path(path, statement, value, chain), chain)
    return values


REPEATED = {"repeat": True}  # field metadata of a list given by repeating its flag: --stop=a --stop=b gives [a, b]


def chosen_values(argv: list[str], sections: tuple[type, ...], skip: tuple[str, ...] = ()) -> dict[str, object]:
    """The values that config files and --key=value flags in argv set (later ones win), by field name."""
    fields = _fields(sections, skip)
    hints = {name: typing.get_type_hints(section)[name] for name, (section, _) in fields.items()}
    chosen: dict[str, object] = {}
    repeated: dict[str, list] = {}  # what the command line's flags of a REPEATED field gave so far
    list_flags: dict[str, tuple] = {}  # each other list field's flag (its text, its values), to refuse a second
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--"):
            for name, value in read_config_file(arg).items():
                if name not in fields:
                    raise _unknown(name, fields, f"in config file {arg}")
                chosen[name] = convert_value(name, value, hints[name])
            continue
        name, has_value, value = arg[2:].partition("=")
        if name not in fields:
            raise _unknown(name, fields, "on the command line")
        if not has_value:
            if hints[name] is bool:  # a bare flag, or `--flag False` with a space
                is_literal = args and args[0].lower() in ("true", "false", "1", "0", "yes", "no")
                value = args.pop(0) if is_literal else "True"
            elif args:
                value = args.pop(0)
            else:
                raise OptionError(f"--{name} needs a value: --{name}=VALUE")
        if fields[name][1].metadata.get("repeat"):  # each flag adds one value, taken whole (commas and all)
            chosen[name] = [*repeated.get(name, []), convert_value(name, value, typing.get_args(hints[name])[0])]
            repeated[name] = chosen[name]
            continue
        chosen[name] = convert_value(name, value, hints[name])
        if typing.get_origin(hints[name]) is list:
            if name in list_flags:  # a scalar's later flag wins, as in nanoGPT; a list's would drop values given
                first, values = list_flags[name]
                both = ",".join(str(v) for v in [*values, *chosen[name]])
                raise OptionError(f"--{name} given twice (--{name}={first}, then --{name}={value}): give it once, "
                                  f"with the values comma-separated: --{name}={both}")
            list_flags[name] = (value, chosen[name])
    return chosen


def flag_names(argv: list[str]) -> set[str]:
    """The fields argv names as --key=value flags (config files' values are not among them)."""
    return {arg[2:].partition("=")[0] for arg in argv if arg.startswith("--")}


def without_flags(argv: list[str], names: typing.Container[str]) -> list[str]:
    """argv less its flags of these fields (--name=value or `--name value`; fields that take a value, not bools),
    for a process started again with values of its own for them: a list flag given twice is refused."""
    kept, args = [], list(argv)
    while args:
        arg = args.pop(0)
        name, has_value, _ = arg.partition("=")
        if not (arg.startswith("--") and name[2:] in names):
            kept.append(arg)
        elif not has_value and args:
            args.pop(0)
    return kept


def parse_options(argv: list[str], sections: tuple[type, ...], prog: str, description: str,
                  skip: tuple[str, ...] = ()) -> tuple:
    """Instances of each dataclass in sections, from config files then --key=value flags, in argv order.

    skip names fields that the command line may not set (they are derived elsewhere).
    """
    return parse_options_and_choices(argv, sections, prog, description, skip)[0]


def parse_options_and_choices(argv: list[str], sections: tuple[type, ...], prog: str, description: str,
                              skip: tuple[str, ...] = ()) -> tuple[tuple, dict[str, object]]:
    """parse_options, and the values that argv set by field name (chosen_values), from one reading of argv."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(format_help(prog, description, sections, skip))
        sys.exit(0)
    chosen = chosen_values(argv, sections, skip)
    instances = []
    for section in sections:
        kwargs = {f.name: chosen[f.name] for f in dataclasses.fields(section) if f.name in chosen}
        try:
            instances.append(section(**kwargs))
        except ValueError as e:
            raise OptionError(str(e)) from None
    return tuple(instances), chosen
