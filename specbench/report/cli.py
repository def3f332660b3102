"""`specbench-report`: leaderboards, Pareto plots and every experiments/ figure, from results.

specbench-report --results results --out results/tables leaderboard   # also printed
specbench-report pareto --task tiny_code --quality nll
specbench-report acceptance             # histograms and per-position acceptance per cell
specbench-report agreement              # cells run on two backends (specbench's, vLLM), compared
specbench-report figures                # every spec in experiments/ (also `make figures`);
                                        # --readme: the README's headline table too
specbench-report compare RUN_A RUN_B    # two cells on the same samples: paired differences
specbench-report power --delta 0.05     # samples each cell needs to resolve a speedup difference
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from specbench import paths
from specbench.errors import ConfigError, OneLineParser
from specbench.report import ReportError


def check_wandb(mode: str) -> None:
    """`--wandb online` needs a login; refused before anything is drawn (no prompt)."""
    if mode != "online":
        return
    import wandb

    if not wandb.login(prompt=False):
        raise ReportError(
            "--wandb online: no W&B login (run `wandb login` or set WANDB_API_KEY); "
            "or pass --wandb offline"
        )


def _log_to_wandb(paths: list[Path], mode: str) -> None:
    if mode == "disabled":
        return
    import wandb

    run = wandb.init(project="specbench", job_type="report", mode=mode, dir=str(paths[0].parent))
    run.log({p.stem: wandb.Image(str(p)) for p in paths if p.suffix == ".png"})
    run.finish()


def writable(out: Path) -> None:
    """`out`, or the nearest directory above it that exists (the writers create the rest), takes
    a file; nothing is created here, so a refused command leaves nothing behind."""
    there = out
    while not there.exists() and there != there.parent:
        there = there.parent
    try:
        with tempfile.TemporaryFile(dir=there):
            pass
    except OSError as err:
        why = err.strerror if there.is_dir() else "Not a directory"
        raise ReportError(f"--out {out}: must be a writable directory ({why})") from None


def pareto_cells(runs, task: str, quality: str):
    """The task's cells, refusing a task without runs and a metric the task's runs lack."""
    cells = runs[runs["task"] == task]
    if cells.empty:
        tasks = ", ".join(sorted(runs["task"].dropna().unique()))
        raise ReportError(f"--task {task}: no runs of that task; tasks with runs: {tasks}")
    column = f"quality.{quality}"
    if column not in cells or cells[column].isna().all():
        metrics = sorted(c.removeprefix("quality.") for c in cells if c.startswith("quality."))
        raise ReportError(
            f"--quality {quality}: task {task} has no such metric; allowed: {', '.join(metrics)}"
        )
    return cells


def selected(runs, column: str, wanted: str | None, option: str):
    """The runs whose `column` is `wanted` (all without it); none is one line listing the
    values there are."""
    if wanted is None:
        return runs
    kept = runs[runs[column] == wanted]
    if kept.empty:
        there = "; ".join(sorted(runs[column].dropna().astype(str).unique()))
        raise ReportError(f"{option} {wanted}: no runs of it; there are: {there}")
    return kept


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except (ReportError, ConfigError) as err:  # a run's records refused by the run store
        print(f"specbench-report: error: {err}", file=sys.stderr)
        return 2


def run(argv: list[str] | None) -> int:
    parser = OneLineParser(prog="specbench-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results", help="searched recursively for runs")
    parser.add_argument("--out", default="results/figures")
    parser.add_argument("--experiment", help="only runs of this experiment")
    parser.add_argument(
        "--machine", help='only runs of this machine class, e.g. "cpu AMD EPYC avx2 2c"'
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("leaderboard", help="Markdown, CSV and LaTeX tables per task and overall")
    p = sub.add_parser("pareto", help="speed against quality for one task")
    p.add_argument("--task", required=True)
    p.add_argument("--quality", required=True, help="a quality metric of the task, e.g. nll")
    p.add_argument("--speed", default="speedup", choices=["speedup", "tpf", "tau"])
    p.add_argument("--wandb", default="disabled", choices=["disabled", "offline", "online"])
    sub.add_parser(
        "acceptance", help="per cell and category: tau, rate, histogram, per-position rates"
    )
    sub.add_parser(
        "agreement", help="cells run on two backends: same tokens, acceptance and speedup"
    )
    f = sub.add_parser("figures", help="every spec in experiments/, from stored results only")
    f.add_argument("--specs", default=str(paths.EXPERIMENTS_DIR))
    f.add_argument(
        "--readme",
        action="store_true",
        help="also write the headline table into the repository's README.md (make headline)",
    )
    c = sub.add_parser("compare", help="two cells on the same samples: paired differences")
    c.add_argument("a", help="a run directory, or a run id under --results")
    c.add_argument("b", help="a run directory, or a run id under --results")
    w = sub.add_parser("power", help="samples each cell needs to resolve a speedup difference")
    w.add_argument("--delta", type=float, help="the speedup difference (default 0.05x)")
    args = parser.parse_args(argv)
    if args.command == "power" and args.delta is not None and args.delta <= 0:
        raise ReportError(f"--delta {args.delta:g}: must be a speedup difference above 0")
    if args.command == "compare":  # prints only: nothing written under --out
        from specbench.report import compare

        a, b = (compare.Cell.read(compare.locate(x, Path(args.results))) for x in (args.a, args.b))
        print(compare.report(a, b))
        return 0
    out = Path(args.out)
    writable(out)
    check_wandb(getattr(args, "wandb", "disabled"))
    # pandas and matplotlib are imported once the arguments hold, so a refusal is fast
    if args.command == "figures":
        if not list(Path(args.specs).glob("*.yaml")):
            raise ReportError(f"--specs {args.specs}: no experiment specs (*.yaml) there")
        from specbench.report import figures

        try:
            readme = paths.REPO_ROOT / "README.md" if args.readme else None
            written = figures.build_all(Path(args.results), out, Path(args.specs), readme)
        except figures.MissingCells as err:
            print(f"specbench-report: {err}", file=sys.stderr)
            return 2
        from specbench.report.load import dirty_runs

        for run_dir, commit in dirty_runs(args.results):
            print(
                f"specbench-report: warning: {run_dir} ran code that differed from commit "
                f"{commit} (its env.json's git_dirty); rerun it from a clean tree",
                file=sys.stderr,
            )
    else:
        from specbench.report.load import by_machine, higher_is_better, load_runs

        runs = load_runs(args.results)
        if runs.empty:
            print(f"specbench-report: no runs under {args.results}", file=sys.stderr)
            return 2
        runs = selected(runs, "experiment", args.experiment, "--experiment")
        runs = selected(runs, "machine", args.machine, "--machine")
        runs = by_machine(runs)
        if args.command == "leaderboard":
            from specbench.report import leaderboard

            written = leaderboard.write(runs, out)
            print(written[0].read_text())  # the Markdown tables, on the terminal too
        elif args.command == "power":
            from specbench.report import power

            written = [out / "power.md"]
            written[0].parent.mkdir(parents=True, exist_ok=True)
            written[0].write_text(power.table(runs, args.delta or power.DELTA))
            print(written[0].read_text())
        elif args.command == "agreement":
            from specbench.report import agreement

            written = agreement.write(runs, out)
            print(written[0].read_text())
        elif args.command == "acceptance":
            from specbench.report import acceptance

            written = acceptance.write(runs, out)
            for path in written:
                if path.suffix == ".md":
                    print(path.read_text())
        else:
            cells = pareto_cells(runs, args.task, args.quality)
            from specbench.report import pareto

            higher = higher_is_better(args.task).get(args.quality, True)
            name = f"pareto-{args.task}-{args.quality}"
            written = pareto.plot(
                {"cells": cells}, args.speed, f"quality.{args.quality}", higher, name, out / name
            )
            _log_to_wandb(written, args.wandb)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
