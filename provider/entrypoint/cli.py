"""The `sparkdispatch` command: run the processes, and talk to the current leader.

    sparkdispatch [--config FILE] [-D key=value ...] COMMAND ... [-D key=value ...]

Server commands: `standalone`, `master`, `taskexecutor`. Client commands (against the leader,
found as the Airflow hook finds it): `run GRAPH.json [--wait] [--artifact FILE]` (with `--wait`,
each vertex's progress; Ctrl-C asks whether to cancel the job), `list`, `status ID [--json]`,
`logs ID [VERTEX] [--follow]`, `cancel ID`, `repair ID VERTEX...`, `overview`. `config-docs`
prints the configuration keys' page (docs/configuration.md).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkdispatch.entrypoint.cli_render import job_table, vertex_progress
from sparkdispatch.config import Configuration, configuration_page
from sparkdispatch.config.options import LOG_FORMAT
from sparkdispatch.errors import MissingExtra, SparkDispatchError
from sparkdispatch.model.states import JobStatus
from sparkdispatch.log_context import configure_logging
from sparkdispatch.client.log_stream import JobLogs, job_parallelism

if TYPE_CHECKING:
    from sparkdispatch.client import SparkDispatchClient


def add_overrides_option(parser: argparse.ArgumentParser, *, help: str, dest: str = "overrides") -> None:
    """`-D KEY=VALUE`, repeatable: configuration keys given on the command line, collected in `dest`."""
    parser.add_argument("-D", dest=dest, action="append", default=[], metavar="KEY=VALUE", help=help)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkdispatch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", metavar="FILE", help="YAML file of flat dotted keys (or $SPARKDISPATCH_CONF)")
    add_overrides_option(parser, help="override one configuration key; repeatable")
    parser.add_argument("--log-level", default="INFO", help="logging level of server commands (default INFO)")
    # `-D` after the command too, as Flink users type it (`sparkdispatch master -D rest.port=8082`)
    late = argparse.ArgumentParser(add_help=False)
    add_overrides_option(late, help="override one configuration key; repeatable", dest="late_overrides")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_with_parents(late))

    standalone = commands.add_parser("standalone", help="master + TaskExecutors on this machine, embedded defaults")
    standalone.add_argument("--taskexecutors", type=int, default=1, metavar="N", help="TaskExecutors (default 1)")
    standalone.add_argument("--slots", type=int, default=None, metavar="N", help="slots per TaskExecutor")
    standalone.add_argument("--storage", default=None, metavar="DIR", help="stores (default ~/.sparkdispatch)")
    commands.add_parser("master", help="one master process (leader or standby, by election)")
    commands.add_parser("taskexecutor", help="one TaskExecutor (a Celery worker) with taskexecutor.slots slots")

    run = commands.add_parser("run", help="submit a JobGraph (JSON or YAML file)")
    run.add_argument("graph", metavar="GRAPH.json")
    run.add_argument("--wait", action="store_true", help="show progress and wait for the JobResult")
    run.add_argument(
        "--artifact",
        action="append",
        default=[],
        metavar="FILE",
        help="a .py or .zip with the task code, or a .whl for the job's environment; repeatable",
    )
    commands.add_parser("list", help="running and finished jobs")
    status = commands.add_parser("status", help="a job's vertices, states and results, and its failure")
    status.add_argument("job_id")
    status.add_argument("--json", action="store_true", help="the job's details and JobResult as JSON, for scripts")
    logs = commands.add_parser("logs", help="what a job's task functions printed or logged (their attempt logs)")
    logs.add_argument("job_id")
    logs.add_argument("vertex", nargs="?", help="only this vertex")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the job ends")
    cancel = commands.add_parser("cancel", help="cancel a job")
    cancel.add_argument("job_id")
    repair = commands.add_parser(
        "repair", help="run vertices of an ended job again, with their consumers, reusing the other vertices' results"
    )
    repair.add_argument("job_id")
    repair.add_argument("vertices", nargs="+", metavar="VERTEX")
    commands.add_parser("overview", help="the cluster overview")
    commands.add_parser("config-docs", help="print the page of configuration keys (docs/configuration.md)")
    return parser


def _with_parents(*parents: argparse.ArgumentParser) -> type[argparse.ArgumentParser]:
    """The subcommands' parser class: each subcommand also takes `parents`' arguments."""

    class CommandParser(argparse.ArgumentParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["parents"] = [*kwargs.get("parents", ()), *parents]
            super().__init__(*args, **kwargs)

    return CommandParser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config-docs":
        print(configuration_page(), end="")
        return 0
    try:
        config = Configuration.load(args.config, [*args.overrides, *args.late_overrides])
        if args.command in ("standalone", "master", "taskexecutor"):
            configure_logging(args.log_level, config.get(LOG_FORMAT))
            return _serve(args, config)
        return asyncio.run(_client_command(args, config))
    except SparkDispatchError as exc:
        for line in exc.messages():
            print(f"sparkdispatch: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


#: What each server command imports beyond the base install, and the extra that installs it.
_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "master": ("master", ("celery", "apispec", "prometheus_client")),
    "taskexecutor": ("taskexecutor", ("celery", "pyspark", "pandas", "pyarrow", "grpc")),
    "standalone": (
        "master,taskexecutor",
        ("celery", "apispec", "prometheus_client", "pyspark", "pandas", "pyarrow", "grpc"),
    ),
}


def require_extra(command: str) -> None:
    """Raise `MissingExtra` naming what to install when `command`'s packages are not installed.

    The base install is the client side (what Airflow needs); servers need an extra.
    """
    extra, modules = _EXTRAS[command]
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtra(
            f"`sparkdispatch {command}` needs packages this installation lacks "
            f"({', '.join(missing)}): install them with `pip install 'sparkdispatch[{extra}]'`",
            extra=extra,
        )


def _serve(args: argparse.Namespace, config: Configuration) -> int:
    require_extra(args.command)
    if args.command == "master":
        from sparkdispatch.entrypoint.master import run_master

        return asyncio.run(run_master(config))
    if args.command == "taskexecutor":
        from sparkdispatch.taskexecutor.main import run_task_executor

        return run_task_executor(config)
    from sparkdispatch.entrypoint.standalone import run_standalone

    return asyncio.run(run_standalone(config, taskexecutors=args.taskexecutors, slots=args.slots, storage=args.storage))


async def _client_command(args: argparse.Namespace, config: Configuration) -> int:
    from sparkdispatch.client import SparkDispatchClient

    async with SparkDispatchClient.from_config(config) as client:
        if args.command == "overview":
            _print_json((await client.overview()).to_dict())
        elif args.command == "list":
            jobs = await client.jobs()
            for job in jobs:
                print(f"{job.id}  {job.status.value:<11} {_ms(job.duration_ms):>9}  {job.name}")
            if not jobs:
                print("no jobs")
        elif args.command == "status":
            details = await client.job(args.job_id)
            result = await client.execution_result(args.job_id)
            if args.json:
                _print_json({**details.to_dict(), "result": result.to_dict()} if result else details.to_dict())
            else:
                print(job_table(details, result))
        elif args.command == "logs":
            await _logs(client, args.job_id, args.vertex, follow=args.follow)
        elif args.command == "cancel":
            await client.cancel(args.job_id)
            print(f"cancelling job {args.job_id}")
        elif args.command == "repair":
            answer = await client.repair(args.job_id, args.vertices)
            print(
                f"job {args.job_id}: repair {answer.repair.number} {'runs' if answer.created else 'already runs'} "
                f"{', '.join(answer.repair.vertices)} again"
            )
        else:
            return await _run(client, args)
    return 0


async def _run(client: SparkDispatchClient, args: argparse.Namespace) -> int:
    graph = _read_graph(Path(args.graph))
    for path in args.artifact:
        key = await client.upload_artifact(path)
        if str(path).endswith(".whl"):  # a package for the job's environment, not code for its sys.path
            environment = graph.setdefault("environment", {})
            entries = environment.setdefault("dependencies", []) if isinstance(environment, dict) else []
        else:
            entries = graph.setdefault("artifacts", [])
        if key not in entries:
            entries.append(key)
    submitted = await client.submit(graph)
    job_id = submitted.job_id
    print(
        f"job {job_id} {'submitted' if submitted.created else 'was submitted before'}: {client.job_url(job_id)}",
        flush=True,
    )
    if not args.wait:
        return 0
    try:
        return await _wait(client, job_id)
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels this, then raises KeyboardInterrupt
        await _offer_cancel(client, job_id)
        raise


async def _wait(client: SparkDispatchClient, job_id: str) -> int:
    """Print each vertex's progress when it changes until the job ends; then its table."""
    shown: dict[str, str] = {}
    while True:
        details = await client.job(job_id)
        for vertex in details.vertices:
            line = vertex_progress(vertex)
            if shown.get(vertex.id) != line:
                shown[vertex.id] = line
                print(f"  {time.strftime('%H:%M:%S')}  {vertex.id:<24} {line}", flush=True)
        result = await client.execution_result(job_id)
        if result is not None:
            print(job_table(await client.job(job_id), result))
            return 0 if result.status is JobStatus.FINISHED else 1
        await asyncio.sleep(0.5)


async def _offer_cancel(client: SparkDispatchClient, job_id: str) -> None:
    """After Ctrl-C: on a terminal, ask whether to cancel the job; elsewhere leave it running."""
    if not sys.stdin.isatty():
        print(f"\njob {job_id} keeps running; cancel it with: sparkdispatch cancel {job_id}", file=sys.stderr)
        return
    try:
        answer = input(f"\ncancel job {job_id}? [y/N] ").strip().lower()
    except (EOFError, KeyboardInterrupt):
        answer = ""
    if answer in ("y", "yes"):
        await client.cancel(job_id)
        print(f"cancelling job {job_id}", file=sys.stderr)
    else:
        print(f"job {job_id} keeps running: {client.job_url(job_id)}", file=sys.stderr)


async def _logs(client: SparkDispatchClient, job_id: str, vertex: str | None, *, follow: bool) -> None:
    """Print the attempt logs of the job's vertices (each line `<vertex>[<subtask>] attempt <n>: ...`);
    with `follow`, until the job ends."""
    details = await client.job(job_id)
    vertices = {
        vertex_id: parallelism
        for vertex_id, parallelism in job_parallelism(details).items()
        if vertex is None or vertex_id == vertex
    }
    if not vertices:
        raise SparkDispatchError(f"job {job_id} has no vertex {vertex!r}")
    logs = JobLogs(job_id, lambda line: print(line, flush=True), vertices)
    while True:
        ended = await client.execution_result(job_id) is not None
        await logs.apoll(client)
        if ended or not follow:
            return
        await asyncio.sleep(1.0)


def _read_graph(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SparkDispatchError(f"cannot read the JobGraph file {path}: {exc.strerror}") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SparkDispatchError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SparkDispatchError(f"{path} must hold one JobGraph object")
    return data


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value / 1000:.1f}s"


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
