"""A job's processes get the TaskExecutor's environment without the cluster's credentials."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sparkdispatch.config import CLUSTER_SECRET_ENV_VAR, TOKEN_ENV_VAR
from sparkdispatch.taskexecutor.job_environment import job_environment


def test_the_credentials_are_withheld_and_the_rest_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV_VAR, "users-token")
    monkeypatch.setenv(CLUSTER_SECRET_ENV_VAR, "cluster-secret")
    monkeypatch.setenv("TEAM_SETTING", "kept")
    env = job_environment({"SPARK_HOME": "/opt/spark"})
    assert TOKEN_ENV_VAR not in env and CLUSTER_SECRET_ENV_VAR not in env
    assert env["TEAM_SETTING"] == "kept" and env["SPARK_HOME"] == "/opt/spark"
    # a process started with it sees none of them
    printed = subprocess.run(
        [sys.executable, "-c", "import os; print(sorted(k for k in os.environ if k.startswith('SPARKDISPATCH_')))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "SPARKDISPATCH_AUTH_TOKEN" not in printed and "SPARKDISPATCH_CLUSTER_SECRET" not in printed
