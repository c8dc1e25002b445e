"""`badput bench ...`: A/B regression gate over interleaved rounds."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from badput.errors import UsageError

__all__ = ["bench_app"]

bench_app = typer.Typer(
    help="Benchmarks and the statistical regression gate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@bench_app.command()
def ab(
    base: Annotated[str, typer.Option(help="Base command (one round = one run).")],
    head: Annotated[str, typer.Option(help="Head command.")],
    name: Annotated[str, typer.Option(help="Benchmark name.")] = "command",
    rounds: Annotated[int, typer.Option(help="Rounds in the first look.")] = 10,
    max_rounds: Annotated[
        int | None, typer.Option(help="Rounds at most, when inconclusive (default 3x).")
    ] = None,
    min_effect: Annotated[
        float, typer.Option(help="Smallest effect that fails, 0.05 = 5 %.")
    ] = 0.05,
    alpha: Annotated[float, typer.Option(help="Significance level (Holm-adjusted).")] = 0.01,
    metric: Annotated[
        list[str] | None, typer.Option(help="Metrics to judge (default: wall_s and all printed).")
    ] = None,
    higher_is_better: Annotated[
        list[str] | None, typer.Option(help="Metrics where more is better.")
    ] = None,
    fail_on_inconclusive: Annotated[
        bool, typer.Option(help="Exit 4 when a metric stays inconclusive.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
    json_out: Annotated[str | None, typer.Option("--json", help="Write the JSON verdict.")] = None,
    junit: Annotated[str | None, typer.Option(help="Write JUnit XML.")] = None,
    markdown: Annotated[str | None, typer.Option(help="Write a Markdown table.")] = None,
) -> None:
    """Compare two commands in interleaved rounds; exit 1 on a regression.

    Exit codes: 0 pass, 1 regression, 2 usage error, 3 a command failed or nothing ran,
    4 inconclusive with --fail-on-inconclusive.

    Example:
        badput bench ab --base "python bench.py" --head "python bench_new.py" --json ab.json
    """
    from badput.bench.ab import BenchmarkInfraError, Policy, Side, exit_code, run_ab
    from badput.report.bench_report import render_ab, to_json, to_junit, to_markdown

    if rounds < 2:
        raise UsageError("--rounds must be at least 2")
    top = max_rounds if max_rounds is not None else 3 * rounds
    if top < rounds:
        raise UsageError("--max-rounds must be at least --rounds")
    if not 0 < alpha < 1 or not 0 <= min_effect < 1:
        raise UsageError("--alpha must be in (0, 1) and --min-effect in [0, 1)")
    policy = Policy(
        alpha=alpha,
        min_effect=min_effect,
        rounds=rounds,
        max_rounds=top,
        fail_on_inconclusive=fail_on_inconclusive,
        higher_is_better=frozenset(higher_is_better or ()),
        seed=seed,
    )
    err = Console(stderr=True)
    try:
        result = run_ab(
            [(name, Side(base), Side(head))],
            policy,
            metrics=metric or None,
            progress=lambda line: err.print(line, style="dim") if err.is_terminal else None,
        )
    except BenchmarkInfraError as e:
        sys.stderr.write(f"badput: error: {e}\n")
        raise typer.Exit(3) from None
    for path, text in (
        (json_out, to_json(result)),
        (junit, to_junit(result)),
        (markdown, to_markdown(result)),
    ):
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    render_ab(result, Console())
    code = exit_code(result)
    if code:
        raise typer.Exit(code)
