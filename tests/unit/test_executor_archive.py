"""A job session's UDFs run the environment in place, or its archive unpacked on the executors once it was packed."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any, cast

from sparkdispatch.taskexecutor.executor_archive import ARCHIVE_NAME, UDF_PYTHON_CONF, archive_of, pack, run_udfs_in


class RecordingSession:
    """What a Connect session was told: its settings and the artifacts added."""

    def __init__(self) -> None:
        self.settings: dict[str, str] = {}
        self.artifacts: list[tuple[tuple[str, ...], dict[str, bool]]] = []
        self.conf = self

    def set(self, key: str, value: str) -> None:
        self.settings[key] = value

    def addArtifacts(self, *paths: str, **kinds: bool) -> None:
        self.artifacts.append((paths, kinds))


def environment(tmp_path: Path) -> Path:
    root = tmp_path / "env"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to("/usr/bin/python3")
    (root / "lib").mkdir()
    (root / "lib" / "probe.py").write_text("VERSION = '1'\n")
    (root / ".built").write_text("{}")
    return root


def test_without_an_archive_the_udfs_run_the_environments_interpreter_in_place(tmp_path: Path) -> None:
    root = environment(tmp_path)
    session = RecordingSession()
    run_udfs_in(cast(Any, session), str(root / "bin" / "python"))
    assert session.settings == {UDF_PYTHON_CONF: str(root / "bin" / "python")} and session.artifacts == []


def test_with_an_archive_the_session_ships_it_and_runs_the_unpacked_interpreter(tmp_path: Path) -> None:
    root = environment(tmp_path)
    archive = pack(root, left_out=frozenset({".built"}))
    assert archive == root / ARCHIVE_NAME and archive_of(str(root / "bin" / "python")) == archive
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["bin", "bin/python", "lib", "lib/probe.py"]
        assert tar.getmember("bin/python").issym()  # a link to the base interpreter, kept as one
    session = RecordingSession()
    run_udfs_in(cast(Any, session), str(root / "bin" / "python"))
    assert session.artifacts == [((f"{archive}#environment",), {"archive": True})]
    assert session.settings == {UDF_PYTHON_CONF: "environment/bin/python"}
    # packed again (another TaskExecutor of the directory): the old archive is not inside the new one
    with tarfile.open(pack(root, left_out=frozenset({".built"}))) as tar:
        assert ARCHIVE_NAME not in tar.getnames()
