"""`fastppo report RUN_DIR... [--out DIR]`: statistics over seeds, as tables and figures."""

from __future__ import annotations

import argparse

from fastppo.experiments.plot import RETURN


def register(subparsers: argparse._SubParsersAction) -> None:
    report = subparsers.add_parser(
        "report",
        help="final returns over seeds as IQM, mean and median with 95%% bootstrap CIs; tables, curves, "
        "performance profile",
        description="Group runs by env and config, score each run by its final METRIC, and write report.md, "
        "report.csv, curves.png and profile.png to --out (needs the 'stats' extra).",
        allow_abbrev=False,
    )
    report.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help="run directories, or folders holding runs")
    report.add_argument("--out", default="report", metavar="DIR", help="output folder, not a run's (default: report)")
    report.add_argument("--metric", default=RETURN, help=f"metric of metrics.jsonl to score (default: {RETURN})")
    report.add_argument(
        "--final-window",
        type=float,
        default=0.1,
        metavar="FRACTION",
        help="a run's final score is the metric's mean over this last fraction of its steps (default: 0.1)",
    )
    report.add_argument(
        "--normalize",
        default=None,
        metavar="FILE",
        help="YAML of reference scores 'ENV: [low, high]' for the performance profile (default: min-max per env "
        "over the runs)",
    )
    report.add_argument("--reps", type=int, default=2000, metavar="N", help="bootstrap resamples (default: 2000)")
    report.add_argument(
        "--bootstrap-seed",
        type=int,
        default=0,
        metavar="SEED",
        help="seed of the bootstrap, for reproducible CIs (default: 0)",
    )
    report.add_argument(
        "--smooth",
        type=int,
        default=10,
        metavar="N",
        help="moving-average window of the curves, in iterations (default: 10; 1 = raw)",
    )
    report.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fastppo.experiments.plot import check_smooth
    from fastppo.experiments.report import (
        collect,
        csv_table,
        markdown_table,
        normalized_profiles,
        read_references,
        require_stats,
    )
    from fastppo.experiments.report_figures import plot_curves, plot_profile
    from fastppo.files.outputs import output_dir, writing
    from fastppo.files.run_folder import check_not_a_run

    require_stats()
    check_smooth(args.smooth)
    stats = collect(args.run_dirs, args.metric, args.final_window, args.reps, args.bootstrap_seed)
    references = read_references(args.normalize, sorted({s.env_id for s in stats})) if args.normalize else None
    check_not_a_run(args.out, "--out")
    out = output_dir(args.out, "--out")
    caption = (
        f"Final {args.metric}: its mean over the last {args.final_window:.0%} of each run's steps. IQM, mean and "
        f"median over seeds with 95% stratified-bootstrap confidence intervals (rliable, {args.reps} resamples)."
    )
    table = markdown_table(stats, caption)
    for name, text in (("report.md", table), ("report.csv", csv_table(stats))):
        with writing(out / name, "the report"):
            (out / name).write_text(text, encoding="utf-8")
    normalization = (
        f"(score - low) / (high - low), references from {args.normalize}"
        if args.normalize
        else "min-max per env over these runs"
    )
    figures = [
        plot_curves(stats, args.metric, out / "curves.png", args.smooth, args.reps, args.bootstrap_seed),
        plot_profile(
            normalized_profiles(stats, references), normalization, out / "profile.png", args.reps, args.bootstrap_seed
        ),
    ]
    print(table)
    print(f"fastppo: wrote {', '.join(str(p) for p in [out / 'report.md', out / 'report.csv', *figures])}")
    return 0
