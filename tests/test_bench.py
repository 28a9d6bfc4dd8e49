"""bench.py's report: each figure as the median (min-max) over separate processes, a single one marked as such."""

import bench


def test_spread_over_processes_is_median_min_max():
    processes = [[bench.figure("t", "plain", "tokens/s", rate, "tokens/s"),
                  bench.figure("t", "plain", "vs plain", 1.0, "x")] for rate in (1200.0, 1000.0, 1500.0)]
    processes[1].append(bench.figure("t", "compiled", "tokens/s", 2000.0, "tokens/s"))  # one process only
    table = bench.spread_tables(processes).splitlines()
    assert table[0] == "| t | tokens/s | vs plain |"
    assert table[2] == "| plain | 1,200 (1,000–1,500) | 1.00x (1.00x–1.00x) |"
    assert table[3] == "| compiled | 2,000 (once) |  |"


def test_units_format_as_the_readme_writes_them():
    assert bench.spread_cell([0.0312], "%") == "3.1% (once)"
    assert bench.spread_cell([2.5, 3.5], "ms") == "3.00 ms (2.50 ms–3.50 ms)"
