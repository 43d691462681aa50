"""`tether report DIR`: (re)build DIR/report.html from a run's files, no models loaded."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="Write DIR/report.html: curves, alarms, evaluation and samples of a finished run.",
        description="Build a self-contained HTML report (plots embedded) from the files a run left in DIR: "
        "metrics.jsonl, alarms.jsonl, samples.jsonl, summary.json, eval.json, frontier.json, best_of_n.json. "
        "DIR is a `tether ppo` run directory or a `tether demo` directory (with sft/ rm/ ppo/). "
        "Nothing is trained and no model is loaded.",
    )
    p.add_argument("dir", metavar="DIR", help="Run directory (with metrics.jsonl) or demo directory (with ppo/).")
    p.add_argument("--out", default=None, help="Where to write the HTML (default: DIR/report.html).")


def run(args) -> int:
    from tether.plots.report import build_report

    check_out(args)
    path = build_report(args.dir, out=args.out)  # a TetherError (no metrics) exits with code 2
    print(f"report: {path}")
    return 0


def check_out(args) -> None:
    """--out (default DIR/report.html) can be written, before the report is built."""
    from pathlib import Path

    from tether.common.outputs import check_output_file
    from tether.plots.report import REPORT_NAME

    if args.out is not None:
        check_output_file(args.out, "--out", example=REPORT_NAME)
    elif Path(args.dir).is_dir():  # a missing DIR is build_report's error ("not a directory")
        default = Path(args.dir) / REPORT_NAME
        check_output_file(default, "--out", what=f"--out is not given and the default '{default}'",
                          hint="give --out FILE")
