"""`python -m sparkdispatch.taskexecutor [--config FILE] [--id ID] [-D key=value ...]`: one TaskExecutor."""

from __future__ import annotations

import argparse
import sys

from sparkdispatch.config import Configuration, parse_overrides
from sparkdispatch.config.options import LOG_FORMAT
from sparkdispatch.errors import ConfigurationError
from sparkdispatch.log_context import configure_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkdispatch.taskexecutor", description=__doc__)
    parser.add_argument("--config", help="YAML file of flat dotted keys (default: $SPARKDISPATCH_CONF)")
    parser.add_argument(
        "--id", dest="task_executor_id", help="TaskExecutor id (default: taskexecutor.id, else <hostname>-<random>)"
    )
    parser.add_argument(
        "-D", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override one configuration key"
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    try:
        config = Configuration.load(args.config, parse_overrides(args.overrides))
    except ConfigurationError as exc:
        print(f"error: {'; '.join(exc.messages())}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, config.get(LOG_FORMAT))
    from sparkdispatch.taskexecutor.main import run_task_executor

    return run_task_executor(config, task_executor_id=args.task_executor_id, loglevel=args.log_level.upper())


if __name__ == "__main__":
    sys.exit(main())
