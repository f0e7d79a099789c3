"""Suites: TOML files that become a `Sweep` (loader; its docstring shows the format), and the
command line's flags applied on top (overrides). Every mistake is a `SuiteError` naming the file or
the flag, the entry and the bad value.

Modules, each importing only those listed before it:
    checks     the value checkers, parse_size, SuiteError
    axes       the sweep axes a suite file and a flag both set (choices, workspace limits, threads)
    rnn_layers recurrent layers in a suite's `layers` list (issue 40)
    loader     finding suite files by name and reading them into a Sweep
    overrides  sweep_with_overrides: the command line's choices (Overrides) applied to a Sweep
"""
from harness.suite.axes import checked_choices, checked_threads, checked_workspace_limits
from harness.suite.checks import SuiteError, parse_size
from harness.suite.loader import (REPO_SUITES, SUITE_SUFFIX, available_suites, load_suite,
                                  parse_suite, resolve_suite, suite_dirs)
from harness.suite.overrides import OVERRIDE_FLAGS, Overrides, sweep_with_overrides

__all__ = ["OVERRIDE_FLAGS", "REPO_SUITES", "SUITE_SUFFIX", "Overrides", "SuiteError",
           "available_suites", "checked_choices", "checked_threads", "checked_workspace_limits",
           "load_suite", "parse_size", "parse_suite", "resolve_suite", "suite_dirs",
           "sweep_with_overrides"]
