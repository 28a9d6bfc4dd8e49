"""Controlled studies (ablate.py runs them): the study's config, its plan of runs, the runs and their records on
disk, evaluation, cost, statistics, report and plots."""
