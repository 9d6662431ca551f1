"""Jobs' Python environments built with the real `uv` from wheels made here (`python.find-links`,
`python.no-index`: no package index): built once, reused, layered over the TaskExecutor's
packages with the job's winning, refused with the resolver's words, evicted least recently used."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from sparkdispatch.errors import EnvironmentBuildFailed
from sparkdispatch.model.environment import Environment
from sparkdispatch.taskexecutor.executor_archive import archive_of
from sparkdispatch.taskexecutor.python_environments import BUILT_MARKER, PythonEnvironments, ReadyEnvironment, find_uv
from sparkdispatch.taskexecutor.settings import PythonEnvironmentSettings
from sparkdispatch.testing.wheels import make_wheel

PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("wheelhouse")
    for version in ("1.0", "2.0"):
        make_wheel(directory, "sd_probe", version)
    make_wheel(directory, "tabulate", "99.0")  # a package the TaskExecutor has (0.x) in another version
    return directory


def settings(tmp_path: Path, wheelhouse: Path, **overrides: object) -> PythonEnvironmentSettings:
    values: dict[str, object] = {
        "directory": tmp_path / "envs",
        "find_links": (str(wheelhouse),),
        "no_index": True,
        **overrides,
    }
    return PythonEnvironmentSettings(**values)  # type: ignore[arg-type]


def run_in(ready: ReadyEnvironment, code: str) -> str:
    return subprocess.run([ready.python, "-P", "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_uv_is_installed_with_the_taskexecutor() -> None:
    assert find_uv() is not None


def test_an_environment_is_built_once_and_reused(tmp_path: Path, wheelhouse: Path) -> None:
    environments = PythonEnvironments(settings(tmp_path, wheelhouse))
    announced: list[str] = []
    with environments.use(Environment(("sd_probe==1.0",)), {}, on_build=announced.append) as first:
        assert first.built_now and first.build_seconds > 0 and "sd-probe==1.0" in first.build_output
        assert run_in(first, "import sd_probe; print(sd_probe.VERSION)") == "1.0"
    with environments.use(Environment(("SD-Probe == 1.0",)), {}, on_build=announced.append) as again:
        assert not again.built_now and again.python == first.python
    assert environments.builds == 1 and announced == [first.key]
    # a TaskExecutor started later over the same directory finds it built
    assert PythonEnvironments(settings(tmp_path, wheelhouse)).keys() == [first.key]


def test_the_jobs_packages_win_over_the_taskexecutors_and_the_base_stays_importable(
    tmp_path: Path, wheelhouse: Path
) -> None:
    environments = PythonEnvironments(settings(tmp_path, wheelhouse))
    with environments.use(Environment(("tabulate==99.0",)), {}) as ready:
        said = run_in(
            ready,
            "import tabulate, pyspark, sparkdispatch.taskexecutor.slot_process as sp, sys;"
            "print(tabulate.VERSION, pyspark.__version__[:2], sys.prefix != sys.base_prefix)",
        )
    assert said == "99.0 4. True"
    assert importlib.metadata.version("tabulate") != "99.0"  # the TaskExecutor's own is untouched


def test_an_uploaded_wheel_is_installed_from_its_file(tmp_path: Path, wheelhouse: Path) -> None:
    own = make_wheel(tmp_path / "upload", "team_lib", "0.3")
    key = "c" * 64
    environments = PythonEnvironments(settings(tmp_path, wheelhouse))
    with environments.use(Environment(("sd_probe==2.0", key)), {key: str(own)}) as ready:
        assert run_in(ready, "import team_lib, sd_probe; print(team_lib.VERSION, sd_probe.VERSION)") == "0.3 2.0"


def test_two_slots_and_two_taskexecutors_asking_at_once_build_once(tmp_path: Path, wheelhouse: Path) -> None:
    one = PythonEnvironments(settings(tmp_path, wheelhouse))
    other = PythonEnvironments(settings(tmp_path, wheelhouse))  # a second TaskExecutor sharing the directory
    pythons: list[str] = []
    start = threading.Barrier(4)

    def ask(environments: PythonEnvironments) -> None:
        start.wait()
        with environments.use(Environment(("sd_probe==2.0",)), {}) as ready:
            pythons.append(ready.python)

    threads = [threading.Thread(target=ask, args=(e,)) for e in (one, one, other, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(pythons) == 4 and len(set(pythons)) == 1
    assert one.builds + other.builds == 1


def test_an_unresolvable_requirement_fails_once_naming_it_and_the_resolvers_words(
    tmp_path: Path, wheelhouse: Path
) -> None:
    environments = PythonEnvironments(settings(tmp_path, wheelhouse))
    failures: list[EnvironmentBuildFailed] = []
    start = threading.Barrier(3)

    def ask() -> None:
        start.wait()
        try:
            with environments.use(Environment(("sd_probe==1.0", "no-such-lib==9.9")), {}):
                pass
        except EnvironmentBuildFailed as exc:
            failures.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(failures) == 3 and environments.builds == 1  # the two that waited got the first one's failure
    failure = failures[0]
    assert failure.requirement == "no-such-lib==9.9"
    assert "no-such-lib" in failure.message and "uv said" in failure.message
    assert not list((tmp_path / "envs").glob("*/bin"))  # nothing half-built is kept


def test_the_size_bound_evicts_the_least_recently_used_environment_no_task_uses(
    tmp_path: Path, wheelhouse: Path
) -> None:
    environments = PythonEnvironments(settings(tmp_path, wheelhouse, max_size=1))  # each one is over it
    with environments.use(Environment(("sd_probe==1.0",)), {}) as first:
        with environments.use(Environment(("sd_probe==2.0",)), {}) as second:
            assert set(environments.keys()) == {first.key, second.key}  # both in use: both kept
        assert environments.keys() == [first.key]  # the second, unused now, is removed
        assert not Path(second.python).exists() and Path(first.python).exists()
    assert environments.keys() == []
    with environments.use(Environment(("sd_probe==2.0",)), {}) as rebuilt:
        assert rebuilt.built_now and run_in(rebuilt, "import sd_probe; print(sd_probe.VERSION)") == "2.0"
    assert environments.builds == 3


def test_an_environment_another_taskexecutors_task_uses_is_not_evicted(tmp_path: Path, wheelhouse: Path) -> None:
    user = PythonEnvironments(settings(tmp_path, wheelhouse))
    bounded = PythonEnvironments(settings(tmp_path, wheelhouse, max_size=1))
    with user.use(Environment(("sd_probe==1.0",)), {}) as used:
        with bounded.use(Environment(("sd_probe==1.0",)), {}):
            pass
        assert Path(used.python).exists() and bounded.keys() == [used.key]  # held by the other's task


def test_no_uv_fails_the_build_saying_so(tmp_path: Path, wheelhouse: Path) -> None:
    environments = PythonEnvironments(settings(tmp_path, wheelhouse), uv=str(tmp_path / "no-uv-here"))
    with pytest.raises(EnvironmentBuildFailed, match="could not run"):
        with environments.use(Environment(("sd_probe==1.0",)), {}):
            pass


def test_for_a_cluster_master_an_environment_is_packed_once_for_the_executors_and_evicted_with_it(
    tmp_path: Path, wheelhouse: Path
) -> None:
    with PythonEnvironments(settings(tmp_path, wheelhouse)).use(Environment(("sd_probe==1.0",)), {}) as local:
        assert archive_of(local.python) is None  # a local master's TaskExecutor packs nothing
    cluster = PythonEnvironments(settings(tmp_path, wheelhouse, for_executors=True))
    with cluster.use(Environment(("sd_probe==1.0",)), {}) as used:
        archive = archive_of(used.python)
        assert archive is not None and not used.built_now and cluster.builds == 0  # packed, not built again
        packed = archive.stat().st_mtime_ns
        unpacked = tmp_path / "executor" / "environment"
        with tarfile.open(archive) as tar:
            names = tar.getnames()
            assert tar.getmember("bin/python").issym()
            tar.extractall(unpacked, filter="tar")
    assert f"lib/{PYTHON}/site-packages/sd_probe.py" in names and BUILT_MARKER not in names
    assert not any(name.endswith(".tar.gz") or name.endswith(".partial") for name in names)
    # unpacked anywhere (as Spark does on an executor), its interpreter imports the job's package from the copy
    found = subprocess.run(
        [str(unpacked / "bin" / "python"), "-P", "-c", "import sd_probe; print(sd_probe.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found).is_relative_to(unpacked)
    with cluster.use(Environment(("sd_probe==1.0",)), {}) as again:
        assert archive.stat().st_mtime_ns == packed and again.python == used.python  # not packed again
    with cluster.use(Environment(("sd_probe==2.0",)), {}) as second:
        assert second.built_now and archive_of(second.python) is not None  # packed as it is built
    # beyond the size bound, each environment goes with its archive
    assert PythonEnvironments(settings(tmp_path, wheelhouse, for_executors=True, max_size=1)).keys() == []
    assert not archive.exists() and not Path(used.python).exists()
