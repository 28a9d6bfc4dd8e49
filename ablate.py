"""Controlled studies: train every cell of a grid under the same seeds, batches, initialisation and budgets, then
evaluate every final model the same way on a split no choice looked at, and compare the cells seed by seed.
    python ablate.py config/ablate_positions_budgets.py
    python ablate.py config/ablate_positions.py --variants=learned,none --seeds=2 --max_iters=500
    python ablate.py config/train_shakespeare_char_cpu.py --variants=learned,rope   (a train config as the base)

Cells. --variants lists cells; a cell is a pos_encoding value ("rope"), or name=value settings of any
GPTConfig/TrainConfig field separated by spaces ("pos_encoding=sinusoidal sinusoidal_amplitude=1.0", or
"sinusoidal sinusoidal_amplitude=1.0"). --grid adds the cross product "name=v1,v2;name2=v3,v4" (";" between fields,
"," between values). A cell's settings override the config file and flags; everything else is the same for all.
Tables and plots name a cell as a person writes it ("sinusoidal 1.0"), or by a label the config gives it
(labels = ["GPT-2 track: learned optimizer=muon"]; its folder and records keep its name).

Finetunes of a trained cell. A cell with from_cell=<cell> (a cell listed before it) starts each seed's run from
that cell's final checkpoint of the same seed, as train.py --init_from=<its ckpt.pt> does: a new run of its own
max_iters (0: the model as it is) from those weights, e.g. "rope block_size=128 extend_positions=yarn max_iters=200
from_cell=rope" (config/ablate_context_extension.py). It may change block_size (with extend_positions), dropout
and training settings, no other model setting; it is scored at the eval lengths and sliding window of the study's
block_size, like the cell it starts from, and reported beside it at the headline budget.

Budgets (--budgets=1000,2000): each cell trains to each budget with a complete schedule: a cosine run per budget,
or with --lr_schedule=wsd one constant-rate run per (cell, seed) that each budget's decay branches from
(study/plan.py). --lr_sweep=3e-4,1e-3 first picks each cell's own learning rate on val, on seeds of its own; the
cells then train at the common rate and at their own. --equivalence_margin adds a TOST verdict to every pair.

Each run trains in this process with train.train() into <study_dir>/<cell>/seed<N>/ (with budgets, one folder per
budget below it) and leaves there its checkpoints, train.log, done.json (the training record with every setting
that changes the numbers, the data split's identity included) and eval.json (the evaluation). A rerun reuses
finished runs, refuses one made with other settings, and restarts unfinished ones from scratch; runs go seed by
seed, so a study cut short still has whole seeds for every cell. Runs can be spread over processes (--jobs=N) or a
cluster's job array (--run_index=K, then --report_only=True); see study/jobs.py for how they share one study
folder. With --lr_sweep the study has two stages: --list_runs and --run_index number the sweep's runs until it
has finished, then the headline's runs (which depend on the sweep's picks).

Evaluation of every final model (ckpt.pt) on the whole eval_split (test; val for a study that makes a choice), at
each length L in eval_multipliers:
  nonoverlapping  the split cut into consecutive windows of L tokens; every token scored once, with the tokens
                  before it in its window as context (the protocol of Press et al.)
  sliding         the same windows, but no token sees more than sliding_window tokens (itself included): the
                  windows are scored in pieces of sliding_window tokens that advance by sliding_stride
The results (results.md, .csv, .json and the plots) go to <study_dir>, in nats per token and bits per byte.
"""

import signal
import sys
from pathlib import Path

from errors import OptionError, main_guard
from model import GPTConfig
from options import flag_names, parse_options_and_choices
from study.config import PER_RUN, AblateConfig, unused_settings
from study.cost import OutOfTime
from study.jobs import stop_by_exception
from study.stages import run_study
from train import TrainConfig


def read_options(argv: list[str]) -> tuple[AblateConfig, TrainConfig, GPTConfig]:
    """The study's configs from config files and flags. A train config (config/train_*.py) may be the study's base:
    the out_dir it sets is ignored, with a note, since the study gives each run its own folder under study_dir; an
    --out_dir flag is refused. --help lists neither it nor the other settings the study makes per run. A flag that
    would do nothing in this study (--lr_sweep_seeds without --lr_sweep) is refused; from a config file it is not."""
    asked_help = any(arg in ("-h", "--help") for arg in argv)
    per_run = tuple(set(PER_RUN) - {"overwrite"} - (set() if asked_help else {"out_dir"}))
    if any(arg.partition("=")[0] == "--out_dir" for arg in argv):
        raise OptionError("--out_dir is set by the study for each run (<study_dir>/<cell>/seed<N>); give --study_dir "
                          "for where the study goes")
    configs, chosen = parse_options_and_choices(argv, (AblateConfig, TrainConfig, GPTConfig), prog="ablate.py",
                                                description=__doc__, skip=per_run)
    flags = flag_names(argv)
    unused = unused_settings(configs[0], [name for name in chosen if name in flags])
    if unused:
        fixes = " and ".join(dict.fromkeys(fix for _, fix in unused))
        one = len(unused) == 1
        raise OptionError(f"{'; '.join(why for why, _ in unused)}: {'it' if one else 'they'} would do nothing; drop "
                          f"{'it' if one else 'them'}, or {fixes}")
    if "out_dir" in chosen:
        print(f"note: out_dir={chosen['out_dir']!r} is ignored: each run trains in its own folder under "
              f"study_dir={configs[0].study_dir!r}", file=sys.stderr)
    return configs


def main(argv: list[str]) -> None:
    ablate, train_config, model_config = read_options(argv)
    signal.signal(signal.SIGTERM, stop_by_exception)
    try:
        result = run_study(ablate, train_config, model_config)
    except OutOfTime as e:
        print(e)  # every finished run is recorded: not an error
        return
    except KeyboardInterrupt as stopped:
        result = {"interrupted": getattr(stopped, "signum", signal.SIGINT)}
        print("interrupted: finished runs are kept; run the same command again to continue", file=sys.stderr)
    if result["interrupted"]:
        sys.exit(128 + result["interrupted"])
    if "summary" not in result:
        return
    print(f"done in {result['report_seconds']:.0f} s: {Path(ablate.study_dir) / 'results.md'}")
    print((Path(ablate.study_dir) / "results.md").read_text())


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
