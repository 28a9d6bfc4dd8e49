"""options.py: config files, --key=value flags, type conversion, errors and --help.

Independent references: runpy (the config files really executed as Python), the tokenize module (the doc comments
read a second way), dataclasses.fields (what --help must list), and hand-written expectations.
"""

import ast
import dataclasses
import importlib
import inspect
import io
import re
import runpy
import subprocess
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import options
from errors import OptionError
from model import GPTConfig
from options import field_docs, parse_options, read_config_file
from train import TrainConfig

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Demo:
    count: int = 1  # an integer
    rate: float = 0.5  # a float
    flag: bool = False  # a switch
    name: str = "demo"  # a string
    limit: int | None = 7  # an integer or None
    share: float | None = None  # a float or None
    tags: list[str] = field(default_factory=list)  # some strings
    sizes: list[int] = field(default_factory=lambda: [1, 2])  # some integers


def parse(argv: list[str]) -> Demo:
    return parse_options(argv, (Demo,), prog="demo.py", description="demo")[0]


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def run_script(script: str, *args: str, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / script), *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


# ---- config files -------------------------------------------------------------------------------------------


def test_config_file_assignments_arithmetic_and_earlier_names(tmp_path):
    path = write(tmp_path, "c.py", '"""A docstring."""\n# a comment\ncount = 5 * 8\nrate = 1e-3\nname = "a" + "b"\n'
                                   "flag = True\nlimit = count // 4 - 2  # a name assigned above\nshare = -rate\n"
                                   'tags = ["x", "y"]\nsizes = [count, 2 ** 3]\n')
    assert parse([path]) == Demo(count=40, rate=0.001, flag=True, name="ab", limit=8, share=-0.001,
                                 tags=["x", "y"], sizes=[40, 8])
    # The same values as executing the file.
    executed = {k: v for k, v in runpy.run_path(path).items() if not k.startswith("__")}
    assert read_config_file(path) == executed


@pytest.mark.parametrize("line, lineno", [
    ("count = int('3')", 3),  # a function call
    ("import os", 3),  # an import
    ("from os import sep", 3),
    ("count = later", 3),  # a name not assigned above
    ("count = rate.real", 3),  # an attribute
    ("count, rate = 1, 2", 3),  # not a single name
    ("count += 1", 3),
    ("count = 1 / 0", 3),
    ("if True:\n    count = 2", 3),
])
def test_config_file_anything_else_is_an_error_naming_file_and_line(tmp_path, line, lineno):
    path = write(tmp_path, "bad.py", f"# header\nrate = 0.1\n{line}\nlater = 1\n")
    with pytest.raises(OptionError, match=rf"{path}:{lineno}\b"):
        parse([path])


def test_config_file_is_never_executed(tmp_path):
    marker = tmp_path / "marker"
    path = write(tmp_path, "evil.py", f"count = open({str(marker)!r}, 'w').write('x')\n")
    with pytest.raises(OptionError):
        parse([path])
    assert not marker.exists()


def test_config_file_syntax_error_is_an_option_error_naming_file_and_line(tmp_path):
    path = write(tmp_path, "broken.py", "count = 1\nrate = (2\n")
    with pytest.raises(OptionError, match=rf"{path}:2\b"):
        parse([path])


def test_a_config_file_that_is_not_utf8_names_the_line_and_the_byte(tmp_path):
    path = tmp_path / "latin1.py"
    path.write_bytes("count = 1\n# r\u00e9sum\u00e9 of the run\n".encode("latin-1"))
    with pytest.raises(OptionError, match=rf"{path}:2: byte 0xe9 is not UTF-8; save the config file as UTF-8"):
        parse([str(path)])


def test_a_config_file_that_starts_with_a_byte_order_mark_is_read(tmp_path):
    """Windows editors save UTF-8 with a BOM; it was "invalid non-printable character U+FEFF" at line 1."""
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbf" + "count = 3  # r\u00e9sum\u00e9\nrate = 0.5\n".encode("utf-8"))
    assert read_config_file(str(path)) == {"count": 3, "rate": 0.5}
    assert parse([str(path)]) == Demo(count=3, rate=0.5)
    path.write_bytes(b"\xef\xbb\xbfcount = 3\n\xef\xbb\xbfrate = 0.5\n")  # a mark inside is still no setting
    with pytest.raises(OptionError, match=rf"{path}:2: invalid non-printable character U\+FEFF"):
        parse([str(path)])


def test_missing_config_file_and_unknown_name_in_config_file(tmp_path):
    with pytest.raises(OptionError, match="does_not_exist.py"):
        parse([str(tmp_path / "does_not_exist.py")])
    path = write(tmp_path, "typo.py", "counts = 3\n")
    with pytest.raises(OptionError, match=r"'counts'.*typo\.py.*did you mean 'count'"):
        parse([path])


def test_argv_order_decides(tmp_path):
    first = write(tmp_path, "first.py", "count = 1\nname = 'first'\n")
    second = write(tmp_path, "second.py", "count = 2\n")
    assert parse([first, "--count=5"]) == Demo(count=5, name="first")
    assert parse(["--count=5", first]) == Demo(count=1, name="first")
    assert parse([first, second]) == Demo(count=2, name="first")
    assert parse([first, "--count=5", second, "--name=last"]) == Demo(count=2, name="last")
    assert parse(["--count=3", "--count=4"]).count == 4


@pytest.mark.parametrize("argv, message", [
    (["--tags=a", "--tags=b"], "--tags given twice (--tags=a, then --tags=b): give it once, with the values "
                               "comma-separated: --tags=a,b"),
    (["--sizes", "4,5", "--count=2", "--sizes=[6]"], "--sizes given twice (--sizes=4,5, then --sizes=[6]): give it "
                                                     "once, with the values comma-separated: --sizes=4,5,6"),
])
def test_a_list_flag_given_twice_is_refused_in_one_line(argv, message, tmp_path):
    """The second replaced the first, dropping its values unsaid; a scalar's later flag still wins (above), and a
    config file's list is still replaced by a flag."""
    with pytest.raises(OptionError) as refused:
        parse(argv)
    assert str(refused.value) == message
    assert parse([write(tmp_path, "tags.py", "tags = ['a']\n"), "--tags=b"]).tags == ["b"]

# ---- command-line flags and types ---------------------------------------------------------------------------


def test_space_separated_values_and_bare_bool_flags():
    assert parse(["--count", "7", "--name", "x y", "--flag"]) == Demo(count=7, name="x y", flag=True)
    assert parse(["--flag", "--count=3"]) == Demo(flag=True, count=3)
    assert parse(["--count=3", "--flag"]) == Demo(flag=True, count=3)
    with pytest.raises(OptionError, match="--name needs a value"):
        parse(["--name"])


@pytest.mark.parametrize("text, value", [("True", True), ("False", False), ("true", True), ("false", False),
                                         ("1", True), ("0", False)])
def test_bool_values(text, value):
    assert parse([f"--flag={text}"]).flag is value


@pytest.mark.parametrize("argv, expected", [
    (["--count=12"], dict(count=12)),
    (["--count=-3"], dict(count=-3)),
    (["--rate=1e-3"], dict(rate=0.001)),
    (["--rate=2"], dict(rate=2.0)),
    (["--name=123"], dict(name="123")),
    (["--name="], dict(name="")),
    (["--limit=None"], dict(limit=None)),
    (["--limit=42"], dict(limit=42)),
    (["--share=0.9"], dict(share=0.9)),
    (["--tags=a,b,c"], dict(tags=["a", "b", "c"])),
    (["--sizes=4,5"], dict(sizes=[4, 5])),
    (["--sizes=[6, 7]"], dict(sizes=[6, 7])),
])
def test_values_are_converted_to_the_field_type(argv, expected):
    config = parse(argv)
    assert config == Demo(**expected)
    for name, value in expected.items():
        assert type(getattr(config, name)) is type(value)


@pytest.mark.parametrize("argv, option", [
    (["--count=abc"], "count"), (["--count=1.5"], "count"), (["--count=True"], "count"), (["--count=1e3"], "count"),
    (["--rate=fast"], "rate"), (["--flag=maybe"], "flag"), (["--limit=many"], "limit"), (["--share=x"], "share"),
    (["--sizes=1,x"], "sizes"),
])
def test_badly_typed_values_name_the_option(argv, option):
    with pytest.raises(OptionError, match=f"--{option}="):
        parse(argv)


@pytest.mark.parametrize("argv, message", [
    (["--count=1e3"], "--count='1e3': expected int; give --count=1000"),
    (["--count=2000.0"], "--count='2000.0': expected int; give --count=2000"),
    (["--count=1.5"], "--count='1.5': expected int"),
    (["--count=1e999"], "--count='1e999': expected int"),
    (["--count=nan"], "--count='nan': expected int"),
    (["--limit=1e3"], "--limit='1e3': expected int | None; give --limit=1000"),
])
def test_a_whole_number_written_as_a_float_is_given_as_the_fix(argv, message):
    """Was: "--max_iters='1e3': expected int", the fix left to the user (nanoGPT's configs write 5e3 as 5000)."""
    with pytest.raises(OptionError) as refused:
        parse(argv)
    assert str(refused.value) == message


def test_badly_typed_config_file_values_name_the_option(tmp_path):
    for text, option in [("count = 2.5\n", "count"), ("flag = 1\n", "flag"), ("name = 3\n", "name"),
                         ("count = True\n", "count"), ("sizes = [1, 'x']\n", "sizes")]:
        with pytest.raises(OptionError, match=f"--{option}="):
            parse([write(tmp_path, "typed.py", text)])


@pytest.mark.parametrize("wrong, right", [("n_layers", "n_layer"), ("learning_rat", "learning_rate"),
                                          ("batchsize", "batch_size"), ("max_iter", "max_iters")])
def test_unknown_option_suggests_the_closest_name(wrong, right):
    with pytest.raises(OptionError, match=f"unknown option '{wrong}'.*did you mean '{right}'"):
        parse_options([f"--{wrong}=3"], (TrainConfig, GPTConfig), prog="train.py", description="")


def test_unknown_option_without_a_close_name_points_to_help():
    with pytest.raises(OptionError, match="see --help"):
        parse_options(["--zzzzzzzz=1"], (TrainConfig, GPTConfig), prog="train.py", description="")


def test_skipped_field_cannot_be_set():
    with pytest.raises(OptionError, match="vocab_size"):
        parse_options(["--vocab_size=100"], (TrainConfig, GPTConfig), prog="train.py", description="",
                      skip=("vocab_size",))


def test_dataclass_validation_becomes_an_option_error():
    with pytest.raises(OptionError, match="n_embd=30 is not divisible by n_head=4"):
        parse_options(["--n_embd=30", "--n_head=4"], (TrainConfig, GPTConfig), prog="train.py", description="")


def test_options_go_to_their_own_section():
    train_config, model_config = parse_options(["--n_layer=3", "--batch_size=5", "--dropout=0.25"],
                                               (TrainConfig, GPTConfig), prog="train.py", description="")
    assert train_config == TrainConfig(batch_size=5)
    assert model_config == GPTConfig(n_layer=3, dropout=0.25)


def test_nanogpt_style_command_line():
    config_file = "config/train_shakespeare_char_cpu.py"
    argv = [str(REPO / config_file), "--device=cpu", "--compile=False", "--block_size=64", "--batch_size=8",
            "--max_iters=300", "--lr_decay_iters=300", "--dropout=0.1"]
    train_config, model_config = parse_options(argv, (TrainConfig, GPTConfig), prog="train.py", description="")
    expected = executed_with_bases(REPO / config_file)
    expected.update(device="cpu", compile=False, block_size=64, batch_size=8, max_iters=300, lr_decay_iters=300,
                    dropout=0.1)
    chosen = {**dataclasses.asdict(train_config), **dataclasses.asdict(model_config)}
    assert {k: chosen[k] for k in expected} == expected
    untouched = {f.name: f.default for s in (TrainConfig, GPTConfig) for f in dataclasses.fields(s)
                 if f.name not in expected}
    assert {k: chosen[k] for k in untouched} == untouched


def config_sections(path: Path) -> tuple[type, ...]:
    if path.name.startswith("ablate"):
        from ablate import AblateConfig

        return AblateConfig, TrainConfig, GPTConfig
    if path.name.startswith("table"):  # python -m study.table's
        from study.table import TableConfig

        return (TableConfig,)
    return TrainConfig, GPTConfig


@pytest.mark.parametrize("path", sorted((REPO / "config").glob("*.py")), ids=lambda p: p.name)
def test_every_config_file_parses_to_what_python_makes_of_it(path):
    sections = config_sections(path)
    instances = parse_options([str(path)], sections, prog="x.py", description="")
    chosen = {k: v for instance in instances for k, v in dataclasses.asdict(instance).items()}
    expected = executed_with_bases(path)
    assert {k: chosen[k] for k in expected} == expected


def executed_with_bases(path: Path) -> dict[str, object]:
    """What Python makes of a config file run after the base it names (itself run the same way): the reference
    for base_config, independent of the reader."""
    base = re.search(r'^base_config = "(.+?)"', path.read_text(), re.M)
    start = executed_with_bases(path.parent / base.group(1)) if base else {}
    executed = runpy.run_path(str(path), init_globals=start)
    return {k: v for k, v in executed.items() if not k.startswith("__") and k not in ("base_config", "time")}


def test_every_config_file_is_its_flattened_text():
    """A config naming a base reads as the base's text followed by its own lines (the files before bases)."""
    for path in sorted((REPO / "config").glob("*.py")):
        text = path.read_text()
        base = re.search(r'^base_config = "(.+?)".*\n', text, re.M)
        if base:
            flat = Path(str(path) + ".flat")
            try:
                flat.write_text((path.parent / base.group(1)).read_text() + text.replace(base.group(0), ""))
                assert read_config_file(str(path)) == read_config_file(str(flat)), path.name
            finally:
                flat.unlink()


def test_the_baby_model_is_written_once():
    """Its shape is set in config/baby_cpu.py alone; the CPU configs and the studies name it as their base."""
    setting_files = [p.name for p in (REPO / "config").glob("*.py")
                     if re.search(r"^n_embd = 128$", p.read_text(), re.M)]
    assert setting_files == ["baby_cpu.py"]
    for name in ("train_shakespeare_char_cpu.py", "train_python_docs_char.py", "ablate_positions.py",
                 "ablate_positions_sweep.py", "ablate_init_std.py", "ablate_dtype.py"):
        assert read_config_file(str(REPO / "config" / name))["n_embd"] == 128


# ---- base configs -------------------------------------------------------------------------------------------


def test_base_config_is_read_first_relative_to_the_files_folder(tmp_path):
    (tmp_path / "bases").mkdir()
    write(tmp_path / "bases", "root.py", "count = 5\nrate = 0.5\nname = 'root'\n")
    write(tmp_path / "bases", "middle.py", 'base_config = "root.py"\nrate = 0.25\n')
    path = write(tmp_path, "study.py", '# a comment\nbase_config = "bases/middle.py"  # why\n'
                                       "limit = count * 2  # a name the base assigned\nname = name + '-study'\n")
    assert read_config_file(path) == {"count": 5, "rate": 0.25, "name": "root-study", "limit": 10}
    assert parse([path]) == Demo(count=5, rate=0.25, name="root-study", limit=10)
    assert read_config_file(path) == executed_with_bases(Path(path))  # what Python makes of base then file


@pytest.mark.parametrize("files, message", [
    ({"a.py": 'base_config = "a.py"\n'}, r"a\.py:1: base_config='a\.py' makes a cycle \(a\.py -> a\.py\)"),
    ({"a.py": 'base_config = "b.py"\n', "b.py": 'count = 1\nbase_config = "a.py"\n'}, r"b\.py:2: base_config must"),
    ({"a.py": 'base_config = "b.py"\n', "b.py": 'base_config = "c.py"\n', "c.py": 'base_config = "a.py"\n'},
     r"c\.py:1: base_config='a\.py' makes a cycle \(a\.py -> b\.py -> c\.py -> a\.py\)"),
    ({"a.py": 'base_config = "gone.py"\n'}, r"a\.py:1: base_config='gone\.py': .*gone\.py does not exist"),
    ({"a.py": "base_config = 3\n"}, r"a\.py:1: base_config=3 must be a file name in quotes"),
    ({"a.py": 'count = 1\nbase_config = "b.py"\n', "b.py": ""}, r"a\.py:2: base_config must be the first"),
])
def test_base_config_cycles_missing_and_misplaced_bases_are_one_line(tmp_path, files, message):
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(OptionError, match=message) as error:
        parse([str(tmp_path / "a.py")])
    assert "\n" not in str(error.value)


# ---- nanoGPT's config files ---------------------------------------------------------------------------------

# Written here in the style of nanoGPT's config/ folder: every construct its files use (import time, time.time(),
# str(), string concatenation, arithmetic, exponent literals, comments), and the settings they set.
NANOGPT_STYLE = {
    "finetune.py": "import time\n\nout_dir = 'out-ft'\neval_interval = 5\nwandb_log = False # on if you like\n"
                   "wandb_project = 'ft'\nwandb_run_name = 'ft-' + str(time.time())\ndataset = 'shakespeare'\n"
                   "init_from = 'gpt2-xl' # the largest\nalways_save_checkpoint = False\nbatch_size = 1\n"
                   "gradient_accumulation_steps = 32\nmax_iters = 20\nlearning_rate = 3e-5\ndecay_lr = False\n",
    "train.py": "# comments first\n\nwandb_log = True\nwandb_project = 'owt'\nwandb_run_name='gpt2-124M'\n"
                "batch_size = 12\nblock_size = 1024\ngradient_accumulation_steps = 5 * 8\nmax_iters = 600000\n"
                "lr_decay_iters = 600000\neval_interval = 1000\neval_iters = 200\nlog_interval = 10\n"
                "weight_decay = 1e-1\n",
    "eval.py": "# evaluate\n# n_layer=12\nbatch_size = 8\neval_iters = 500 # more\neval_only = True\n"
               "wandb_log = False\ninit_from = 'gpt2'\n",
    "char.py": "out_dir = 'out-c'\neval_interval = 250 # keep frequent\nalways_save_checkpoint = False\n"
               "wandb_run_name = 'mini-gpt'\ndataset = 'shakespeare_char'\nbatch_size = 64\nblock_size = 256\n"
               "n_layer = 6\nn_head = 6\nn_embd = 384\ndropout = 0.2\nlearning_rate = 1e-3\nmin_lr = 1e-4\n"
               "beta2 = 0.99\nwarmup_iters = 100\n# device = 'cpu'\n",
}


@pytest.mark.parametrize("name", NANOGPT_STYLE)
def test_nanogpt_config_files_read_as_python_runs_them(tmp_path, monkeypatch, name):
    import time

    monkeypatch.setattr(time, "time", lambda: 1700000000.123456)
    path = write(tmp_path, name, NANOGPT_STYLE[name])
    executed = {}
    exec(NANOGPT_STYLE[name], executed)  # the independent reference, in the test only
    expected = {k: v for k, v in executed.items() if not k.startswith("__") and k != "time"}
    assert read_config_file(path) == expected
    chosen = options.chosen_values([path], (TrainConfig, GPTConfig))  # every name is one of our settings
    assert chosen == expected


@pytest.mark.parametrize("line", [
    "import os", "import time as clock\ncount = 1", "from time import time", "count = time.time()",
    "import time\ncount = time.sleep(1)", "import time\ncount = time.time(1)", "count = str(1, 2)",
    "count = len('ab')", "str = 1\ncount = str(2)", "count = str(x=1)",
])
def test_nanogpt_constructs_go_no_further(tmp_path, line):
    path = write(tmp_path, "c.py", f"rate = 0.1\n{line}\n")
    with pytest.raises(OptionError, match=rf"{path}:\d+: "):
        read_config_file(path)


# ---- doc comments and --help --------------------------------------------------------------------------------


def comments_by_tokenize(section: type) -> dict[str, str]:
    """The comment on each field's line, found with ast (the fields) and tokenize (the comments)."""
    source = inspect.getsource(section)
    class_node = ast.parse(source).body[0]
    comments = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    return {node.target.id: comments.get(node.end_lineno, "") for node in class_node.body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


DOCUMENTED = [("train", "TrainConfig"), ("model", "GPTConfig"), ("sample", "SampleConfig"),
              ("text.dataset", "PrepareConfig"), ("study.config", "AblateConfig"), ("benchmarks.common", "BenchConfig"),
              ("test_options", "Demo")]


@pytest.mark.parametrize("module, name", DOCUMENTED, ids=[name for _, name in DOCUMENTED])
def test_every_field_has_a_doc_comment(module, name):
    section = Demo if name == "Demo" else getattr(importlib.import_module(module), name)
    names = [f.name for f in dataclasses.fields(section)]
    reference = comments_by_tokenize(section)
    assert list(reference) == names
    assert [name for name in names if not reference[name]] == [], "fields without a doc comment"
    assert field_docs(section) == reference


def check_help(output: str, sections: tuple[type, ...], skip: tuple[str, ...] = ()) -> None:
    lines = output.splitlines()
    for section in sections:
        docs = comments_by_tokenize(section)
        for f in dataclasses.fields(section):
            listed = [line for line in lines if line.strip().startswith(f"--{f.name}=")]
            if f.name in skip:
                assert listed == [], f"--{f.name} is derived and must not be offered"
                continue
            assert len(listed) == 1, f"--{f.name} listed {len(listed)} times"
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            assert listed[0].strip().startswith(f"--{f.name}={default!r} ")
            assert listed[0].rstrip().endswith(docs[f.name])


@pytest.mark.slow
def test_train_help_lists_every_option(script_env):
    result = run_script("train.py", "--help", env=script_env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    check_help(result.stdout, (TrainConfig, GPTConfig), skip=("vocab_size",))


@pytest.mark.slow
def test_sample_help_lists_every_option(script_env):
    from sample import SampleConfig

    result = run_script("sample.py", "-h", env=script_env)
    assert result.returncode == 0, result.stderr
    check_help(result.stdout, (SampleConfig,))


def test_help_wins_over_bad_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_options(["--no_such_option=1", "--help"], (Demo,), prog="demo.py", description="the demo")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "the demo" in out and "usage: python demo.py" in out
    check_help(out, (Demo,))


@pytest.mark.slow
def test_unknown_option_on_the_command_line_exits_2_without_traceback(script_env):
    result = run_script("train.py", "--n_layers=3", env=script_env)
    assert result.returncode == 2
    assert "did you mean 'n_layer'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("text", ["[bogus]", '["rope", "none"', "[1, (]", "[" * 2000 + "]" * 2000])
def test_a_list_flag_that_is_no_literal_is_one_line(text):
    """--variants=[bogus] (an unquoted name) raised ast's ValueError as a traceback; a flag is the user's text."""
    with pytest.raises(OptionError, match=r"^--variants=.*: not a list literal; quote its strings"):
        options.convert_value("variants", text, list[str])
    assert options.convert_value("variants", '["rope", "none"]', list[str]) == ["rope", "none"]
    assert options.convert_value("budgets", "[1000, 2000]", list[int]) == [1000, 2000]
