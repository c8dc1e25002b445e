"""`badput bench ...`: run benchmark files, check deterministic metrics, the A/B gate."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from badput.cli.common import new_console
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
    base: Annotated[str | None, typer.Option(help="Base command (one round = one run).")] = None,
    head: Annotated[str | None, typer.Option(help="Head command.")] = None,
    base_ref: Annotated[
        str | None,
        typer.Option(help="Git ref of the base side (instead of --base): installed on its own."),
    ] = None,
    head_ref: Annotated[
        str | None, typer.Option(help="Git ref of the head side (instead of --head).")
    ] = None,
    command: Annotated[
        str | None,
        typer.Option(help="With --base-ref/--head-ref: the command run in each checkout."),
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(help="With refs: the project directory in its git repository (default .)."),
    ] = None,
    install_args: Annotated[
        list[str] | None,
        typer.Option(
            help='With refs: extra pip install arguments, e.g. --install-args="--no-deps".'
        ),
    ] = None,
    python: Annotated[
        str | None, typer.Option(help="With refs: interpreter that creates the venvs.")
    ] = None,
    system_site_packages: Annotated[
        bool, typer.Option(help="With refs: the venvs see that interpreter's site-packages.")
    ] = False,
    merge_base: Annotated[
        bool, typer.Option(help="With refs: the base is the merge base of the two refs.")
    ] = False,
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
    markdown: Annotated[
        str | None,
        typer.Option(
            help="Write the verdict as Markdown (appended to the $GITHUB_STEP_SUMMARY file)."
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(help="Also record both sides in this results store (path or URL)."),
    ] = None,
) -> None:
    """Compare two commands, or one command at two git refs, in interleaved rounds.

    With --base-ref/--head-ref, each ref is checked out into its own temporary worktree and
    pip-installed into its own venv; --command then runs in the checkout with that venv on
    PATH. Exit codes: 0 pass, 1 regression, 2 usage error (an unknown ref, a bad store URL),
    3 a command, checkout or install failed, or nothing ran, 4 inconclusive with
    --fail-on-inconclusive.

    Examples:
        badput bench ab --base "python bench.py" --head "python bench_new.py" --json ab.json
        badput bench ab --base-ref main --head-ref HEAD --merge-base --command "python bench.py"
    """
    from badput.bench.ab import BenchmarkInfraError, Policy, Side, exit_code, run_ab
    from badput.cli.common import write_report
    from badput.cli.progress import progress
    from badput.report.bench_report import render_ab, to_json, to_junit
    from badput.report.markdown import ab_markdown

    refs_mode = _ab_mode(
        base=base,
        head=head,
        base_ref=base_ref,
        head_ref=head_ref,
        command=command,
        git_only={
            "--repo": repo is not None,
            "--install-args": bool(install_args),
            "--python": python is not None,
            "--system-site-packages": system_site_packages,
            "--merge-base": merge_base,
        },
    )
    if rounds < 2:
        raise UsageError("--rounds must be at least 2")
    top = max_rounds if max_rounds is not None else 3 * rounds
    if top < rounds:
        raise UsageError("--max-rounds must be at least --rounds")
    if not 0 < alpha < 1 or not 0 <= min_effect < 1:
        raise UsageError("--alpha must be in (0, 1) and --min-effect in [0, 1)")
    pip_args = [a for chunk in install_args or () for a in shlex.split(chunk)]
    policy = Policy(
        alpha=alpha,
        min_effect=min_effect,
        rounds=rounds,
        max_rounds=top,
        fail_on_inconclusive=fail_on_inconclusive,
        higher_is_better=frozenset(higher_is_better or ()),
        seed=seed,
    )
    if store is not None:
        _check_store(store)  # a bad URL fails now, not after the rounds
    err = new_console(stderr=True)
    commits = {"base": "", "head": ""}
    notes: list[str] = []
    try:
        with contextlib.ExitStack() as stack:
            if refs_mode:
                from badput.bench.gitrefs import checkouts

                assert base_ref is not None and head_ref is not None and command is not None
                b, h = stack.enter_context(
                    checkouts(
                        repo or ".",
                        [("base", base_ref), ("head", head_ref)],
                        install_args=pip_args,
                        python=python,
                        system_site_packages=system_site_packages,
                        use_merge_base=merge_base,
                        progress=lambda line: err.print(line, style="dim", highlight=False),
                    )
                )
                sides = (b.side(command), h.side(command))
                commits = {"base": b.commit, "head": h.commit}
                notes = [f"{c.label}: {c.ref} = {c.commit}" for c in (b, h)]
            else:
                assert base is not None and head is not None
                sides = (Side(base), Side(head))
            # Progress on stderr, only on a terminal: never in the reports or the JSON.
            rounds_note = f"{name}: rounds ({rounds} per look, {top} at most)"
            with progress(f"bench ab {rounds_note}", total=top) as advance:
                result = run_ab(
                    [(name, *sides)],
                    policy,
                    metrics=metric or None,
                    on_round=lambda _done, _total: advance(1),
                )
    except BenchmarkInfraError as e:
        sys.stderr.write(f"badput: error: {e}\n")
        raise typer.Exit(3) from None
    result.notes.extend(notes)
    for path, text in ((json_out, to_json(result)), (junit, to_junit(result))):
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if markdown:
        write_report(markdown, ab_markdown(result))
    render_ab(result, new_console())
    code = exit_code(result)
    if store is not None and result.results:
        code = _record_ab(store, result.as_dict(), commits, code)
    if code:
        raise typer.Exit(code)


def _ab_mode(
    *,
    base: str | None,
    head: str | None,
    base_ref: str | None,
    head_ref: str | None,
    command: str | None,
    git_only: dict[str, bool],
) -> bool:
    """Whether `bench ab` compares git refs (True) or two commands (False).

    Raises:
        UsageError: the options mix the two modes, or leave one half-given.
    """
    commands = base is not None or head is not None
    refs = base_ref is not None or head_ref is not None
    if commands and refs:
        raise UsageError(
            "give --base/--head (two commands) or --base-ref/--head-ref (two git refs), not both"
        )
    if refs:
        if base_ref is None or head_ref is None:
            raise UsageError("git-refs mode needs both --base-ref and --head-ref")
        if command is None:
            raise UsageError("git-refs mode needs --command, the benchmark run in each checkout")
        return True
    if base is None or head is None:
        raise UsageError(
            "give --base and --head (two commands), or --base-ref, --head-ref and --command"
        )
    extra = [opt for opt, given in {"--command": command is not None, **git_only}.items() if given]
    if extra:
        raise UsageError(f"{', '.join(extra)} only go with --base-ref/--head-ref")
    return False


def _check_store(url: str) -> None:
    """Open the store once (creating it if need be), so that a bad URL fails before the run."""
    from badput.bench.store import Store

    Store.open(url).close()


def _record_ab(url: str, doc: dict[str, object], commits: dict[str, str], code: int) -> int:
    """Record an A/B verdict in the store; the exit code, 3 if recording failed.

    The verdict's outputs are written by then, so a store that fails now (locked, gone away)
    costs the record, not the run.
    """
    from badput.bench.store import Store
    from badput.errors import BadputError

    try:
        with Store.open(url) as db:
            db.record_ab(doc, commit=commits["head"], base_commit=commits["base"])
    except BadputError as e:
        why = str(e)
    except Exception as e:  # the store says its own failures (BadputError); this is the rest
        why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
    else:
        new_console(stderr=True).print("recorded base and head runs in the store", style="dim")
        return code
    sys.stderr.write(f"badput: error: could not record the verdict in the store: {why}\n")
    return code or 3


@bench_app.command("run")
def run_cmd(
    file: Annotated[str, typer.Argument(help="A Python file of @benchmark functions.")],
    rounds: Annotated[int, typer.Option(help="Rounds per case, each in a fresh process.")] = 10,
    json_out: Annotated[str | None, typer.Option("--json", help="Write the results JSON.")] = None,
    filters: Annotated[
        list[str] | None,
        typer.Option("--filter", help="Only these benchmarks (name, case id or glob; repeatable)."),
    ] = None,
) -> None:
    """Run a file's benchmarks in rounds, each round in a fresh process.

    Prints each case's median, spread (IQR and MAD) and round values. Exit codes: 0 ran,
    2 the file cannot be loaded, 3 no benchmark ran or one failed.

    Example:
        badput bench run examples/bench_example.py --rounds 5 --json bench.json
    """
    from badput.bench.runner import run_file
    from badput.cli.progress import progress
    from badput.report.bench_report import render_run

    if rounds < 1:
        raise UsageError("--rounds must be at least 1")
    with progress(f"bench run {Path(file).name}: rounds", total=rounds) as advance:
        result = run_file(
            file, rounds=rounds, filters=filters, on_round=lambda _done, _total: advance(1)
        )
    if json_out:
        Path(json_out).write_text(json.dumps(result.as_dict(), indent=2) + "\n", encoding="utf-8")
    if not result.results:
        which = f" matching --filter {' '.join(filters)}" if filters else ""
        sys.stderr.write(f"badput: error: {file}: no benchmarks{which}\n")
        raise typer.Exit(3)
    render_run(result, new_console())
    for r in result.results:
        if r.error is not None:
            sys.stderr.write(f"badput: error: {r.error}\n")
    if result.exit_code:
        raise typer.Exit(result.exit_code)


@bench_app.command("check")
def check_cmd(
    expected: Annotated[str, typer.Argument(help="Expectations JSON kept in the repository.")],
    results: Annotated[str, typer.Argument(help="`badput bench run --json` output.")],
    update: Annotated[
        bool, typer.Option(help="Write the measured values of metrics that did not pass.")
    ] = False,
    fail_on_wins: Annotated[
        bool | None,
        typer.Option(
            "--fail-on-wins/--allow-wins",
            help="Fail on improvements beyond tolerance (default: the file's setting).",
        ),
    ] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Write the check report.")] = None,
    markdown: Annotated[
        str | None,
        typer.Option(
            help="Write the verdict as Markdown (appended to the $GITHUB_STEP_SUMMARY file)."
        ),
    ] = None,
) -> None:
    """Check deterministic metrics (memory, counts) against expected values and tolerances.

    Exit codes: 0 pass, 1 regression (or an improvement to record, with --fail-on-wins),
    2 a malformed file, 3 an expected metric was not measured or nothing was compared.
    With --update the file is rewritten and the exit code is 0. The file format is in
    `badput.bench.deterministic`.

    Example:
        badput bench check bench/expected.json bench.json --fail-on-wins
    """
    from badput.bench.deterministic import (
        Expectations,
        check,
        load_expected,
        load_measured,
        updated,
        write_expected,
    )
    from badput.report.bench_report import render_check

    measured = load_measured(results)
    # The first --update creates the file, so a project starts from its measured values.
    exp = Expectations() if update and not Path(expected).exists() else load_expected(expected)
    result = check(exp, measured, fail_on_wins=fail_on_wins)
    new = updated(exp, result)
    if json_out:
        doc = result.as_dict()
        doc["updated_expectations"] = new.to_doc()
        Path(json_out).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if markdown:
        from badput.cli.common import write_report
        from badput.report.markdown import check_markdown

        write_report(markdown, check_markdown(result))
    render_check(result, new_console())
    if update:
        if not result.checks:
            sys.stderr.write(f"badput: error: {results}: no metrics to write\n")
            raise typer.Exit(3)
        write_expected(expected, new)
        changed = sum(
            1 for c in result.checks if c.measured is not None and str(c.verdict) != "pass"
        )
        new_console().print(f"wrote {expected}: {changed} value(s) updated", style="dim")
        return
    if result.exit_code == 3 and result.compared == 0:
        sys.stderr.write(f"badput: error: no expected metric was measured in {results}\n")
    elif result.exit_code == 1:
        sys.stderr.write(
            f"badput: to accept the measured values: badput bench check {expected} {results} "
            "--update\n"
        )
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _ingest_doc(path: str) -> dict[str, object]:
    """The JSON object in `path`; for a meter JSON Lines file, its final summary."""
    from badput.trace._files import file_problem

    # Stat before opening: a FIFO or a device given as the file would block the read.
    if (problem := file_problem(path)) is not None:
        raise UsageError(f"{path}: {problem}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({e.__class__.__name__})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
        try:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            raise UsageError(f"{path}: not JSON (nor JSON Lines)") from None
        summaries = [r for r in records if isinstance(r, dict) and "goodput" in r]
        finals = [r for r in summaries if r.get("type") == "final"]
        doc = finals[-1] if finals else summaries[-1] if summaries else None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a JSON object")
    return doc


@bench_app.command("ingest")
def ingest_cmd(
    files: Annotated[
        list[str],
        typer.Argument(help="A/B verdicts, bench run results, analyze JSON, meter summaries."),
    ],
    store: Annotated[
        str | None,
        typer.Option(
            help="Store: a path, sqlite:///PATH or postgresql://... (default .badput/bench.sqlite)."
        ),
    ] = None,
    commit: Annotated[str, typer.Option(help="Commit the results belong to (A/B: head).")] = "",
    base_commit: Annotated[str, typer.Option(help="Commit of an A/B verdict's base side.")] = "",
    branch: Annotated[str | None, typer.Option(help="Branch of the results.")] = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="Benchmark name for analyze and meter documents (default: analyze/meter)."
        ),
    ] = None,
) -> None:
    """Record result documents in the results store, each file in one transaction.

    The kind of each file is told by its `schema` key (badput.bench.ab/1, badput.bench.run/1,
    badput.analysis/1) or, for a meter summary (JSON, or the JSON Lines of a meter sink), by its
    shape. Every file is checked before anything is written. Exit codes: 0 recorded, 2 a
    malformed file or a bad store URL.

    Example:
        badput bench ingest bench.json ab.json --commit "$(git rev-parse HEAD)"
    """
    from badput.bench import store as st

    rows: list[tuple[str, str, list[st.RunRow]]] = []
    for path in files:
        doc = _ingest_doc(path)
        schema = doc.get("schema")
        try:
            if schema == "badput.bench.ab/1":
                runs = st.ab_runs(doc, commit=commit, base_commit=base_commit, branch=branch)
                kind = "A/B verdict"
            elif schema == "badput.bench.run/1":
                runs = [st.bench_run(doc, commit=commit, branch=branch)]
                kind = "bench run"
            elif schema == "badput.analysis/1":
                runs = [
                    st.analysis_run(doc, benchmark=name or "analyze", commit=commit, branch=branch)
                ]
                kind = "analysis"
            elif schema is None and "goodput" in doc and "step_time_s" in doc:
                runs = [st.meter_run(doc, benchmark=name or "meter", commit=commit, branch=branch)]
                kind = "meter summary"
            else:
                what = f"schema {schema!r}" if schema is not None else "no 'schema' key"
                raise UsageError(f"{path}: not a document badput can store ({what})")
        except st.StoreInputError as e:
            raise UsageError(f"{path}: {e}") from None
        rows.append((path, kind, runs))
    with st.Store.open(store) as db:
        for path, kind, runs in rows:
            db.write_runs(runs)
            n = sum(len(r.results) for r in runs)
            sys.stdout.write(f"{path}: {kind}, {len(runs)} run(s), {n} result(s)\n")


@bench_app.command("history")
def history_cmd(
    benchmark: Annotated[str, typer.Option(help="Benchmark id, as stored.")],
    metric: Annotated[str | None, typer.Option(help="Metric (default: every stored one).")] = None,
    store: Annotated[
        str | None,
        typer.Option(
            help="Store: a path, sqlite:///PATH or postgresql://... (default .badput/bench.sqlite)."
        ),
    ] = None,
    output_format: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
) -> None:
    """A stored metric's history per hardware fingerprint, with change points.

    Each change point lists the software attributes (torch, numpy, python...) that differ
    across it. The store is only read: a read-only store is fine, a missing one is not
    created. Exit codes: 0 shown, 2 a bad option or store URL, or a store that cannot be read,
    3 nothing stored (or no store there).

    Example:
        badput bench history --benchmark train_step --metric wall_s
    """
    from badput.bench.history import history
    from badput.bench.store import Store, StoreNotFoundError

    if output_format not in ("text", "json"):
        raise UsageError("--format must be text or json")
    try:
        db = Store.open(store, read_only=True)
    except StoreNotFoundError as e:  # no store yet is nothing stored, not a bad option
        sys.stderr.write(f"badput: error: {e}\n")
        raise typer.Exit(3) from None
    with db:
        metrics = [metric] if metric else db.metrics(benchmark)
        found = {m: history(db, benchmark, m) for m in metrics}
    if not any(found.values()):
        which = f" metric {metric!r}" if metric else ""
        sys.stderr.write(f"badput: error: nothing stored for benchmark {benchmark!r}{which}\n")
        raise typer.Exit(3)
    if output_format == "json":
        doc = {
            "schema": "badput.bench.history/1",
            "benchmark": benchmark,
            "metrics": {m: [s.as_dict() for s in series] for m, series in found.items()},
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    from rich.text import Text

    console = new_console()  # lines wrap at the width, between words: no number is cut
    for m, series in found.items():
        for s in series:
            unit = f" {s.unit}" if s.unit else ""
            console.print(
                Text(
                    f"{benchmark} {m} on {s.label} ({s.environment_id[:19]}): "
                    f"{len(s.points)} point(s), last {s.points[-1].value:.6g}{unit}"
                ),
            )
            if s.note:
                console.print(f"  {s.note}", style="dim")
            elif not s.shifts:
                console.print("  no change point", style="dim")
            for sh in s.shifts:
                c = sh.change
                worse = (c.change < 0) == s.higher_is_better
                soft = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in sh.software_diff.items())
                console.print(
                    Text(
                        f"  {'regression' if worse else 'improvement'} at point {c.index} "
                        f"(commit {sh.first_bad[:12] or '?'}, after {sh.last_good[:12] or '?'}): "
                        f"{c.before:.6g} -> {c.after:.6g}{unit} ({100 * c.change:+.1f} %), "
                        f"p={c.p_value:.3g}{'' if c.confirmed else ', unconfirmed'}; "
                        f"software: {soft or 'unchanged'}",
                        style="bold red" if worse else "green",
                    )
                )
