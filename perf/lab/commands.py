"""The lab's commands, run from a hotpath checkout's root as `python -m perf` (perf/__main__.py).

    python -m perf study [NAME [ARGS]]   a study (without NAME: the list); its report goes to perf/reports/
    python -m perf compare [OPTIONS]     `hotpath perf` with each endpoint's alternatives beside it -> compare.md
    python -m perf tune ENDPOINT [...]   `hotpath tune`, then Triton Model Analyzer's search beside it
"""

from __future__ import annotations

import argparse
import sys

USAGE = __doc__.split("\n\n", 1)[1]


def study(argv: list[str]) -> int:
    from hotpath import logs
    from hotpath.errors import HotpathError
    from perf.lab.studies import runner

    if not argv or argv[0] in ("-h", "--help"):
        print("python -m perf study NAME [ARGS]   (python -m perf study NAME --help: the study's own)\n")
        print(runner.listing())
        return 0
    logs.configure()
    try:
        return runner.run(argv[0], argv[1:])
    except HotpathError as exc:
        print(f"python -m perf study: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)


def compare(argv: list[str]) -> int:
    from hotpath import cli
    from perf.lab.compare.side_by_side import SideBySide

    p = cli.subcommand("perf")
    p.prog, p.description = "python -m perf compare", ("`hotpath perf`'s sweeps with each endpoint's alternatives "
                                                       "measured beside them, one run -> perf/reports/compare.md")
    options = {a.dest: a for a in p._actions}
    options["alternative"].help = "only this alternative (repeatable; labels in perf/lab/compare/rivals.py)"
    options["alternative"].metavar = "LABEL"    # hidden in `hotpath perf`: the lab's option
    options["name"].help = "report name (default: compare)"
    options["explain"].help = argparse.SUPPRESS  # hotpath perf --explain's, not a comparison
    args = p.parse_args(argv)
    if args.explain:
        p.error("--explain is hotpath perf's (hotpath perf --explain ENDPOINT)")
    args.command = "compare"
    return cli.run(args, "python -m perf", beside=SideBySide(args.alternative))


def tune(argv: list[str]) -> int:
    from hotpath import cli
    from perf.lab.compare.tune_rival import ModelAnalyzerRival

    p = cli.subcommand("tune")
    p.prog, p.description = "python -m perf tune", ("`hotpath tune ENDPOINT`, then Triton Model Analyzer searches "
                                                    "the endpoint's heaviest step; both in perf/reports/tune-ENDPOINT.md")
    args = p.parse_args(argv)
    if args.quick or not args.endpoint:
        p.error("name the endpoint (the rival searches one endpoint; --quick is hotpath tune's alone)")
    args.command = "tune"
    return cli.run(args, "python -m perf", rival=ModelAnalyzerRival())


COMMANDS = {"study": study, "compare": compare, "tune": tune}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m perf {{{','.join(COMMANDS)}}} ...\n\n{USAGE}", file=sys.stderr if argv else sys.stdout)
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])

