"""A job's `config` may hold only what Spark changes per session: the rule, its list, its 400."""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import aiohttp
import pytest

import pyspark
from sparkdispatch.model.spark_conf import STATIC_SQL_CONFS, refusal
from sparkdispatch.testing.master import InProcessMaster

JARS = Path(pyspark.__file__).parent / "jars"
# (jar, class, the SQLConf builders of its static settings): every setting StaticSQLConf builds
# is static; HiveUtils builds runtime ones too
STATIC_CONF_CLASSES = [
    (
        "spark-catalyst_2.13-*.jar",
        "org/apache/spark/sql/internal/StaticSQLConf$.class",
        ("buildStaticConf", "buildConfFromConfigFile"),
    ),
    ("spark-hive_2.13-*.jar", "org/apache/spark/sql/hive/HiveUtils$.class", ("buildStaticConf",)),
]


@pytest.mark.parametrize(
    "key",
    [
        "spark.executor.memory",
        "spark.master",
        "spark.app.name",
        "spark.default.parallelism",
        "spark.connect.grpc.binding.port",
        "spark.sql.warehouse.dir",
        "spark.sql.extensions",
        "spark.sql.hive.metastore.jars",
    ],
)
def test_settings_fixed_at_driver_start_are_refused_by_name(key: str) -> None:
    reason = refusal(key)
    assert reason is not None and reason.startswith(f"{key} is a static Spark setting")
    assert "TaskExecutor's Spark" in reason


@pytest.mark.parametrize(
    "key",
    [
        "spark.sql.shuffle.partitions",
        "spark.sql.adaptive.enabled",
        "spark.sql.hive.convertMetastoreParquet",
        "spark.hadoop.fs.s3a.endpoint",
        "my.custom.key",
        "sparkling",
    ],
)
def test_session_settings_pass(key: str) -> None:
    assert refusal(key) is None


def static_confs_in(jar: Path, class_name: str, builders: tuple[str, ...], tmp_path: Path) -> set[str]:
    """The keys the class passes to one of `builders`, from its bytecode."""
    with zipfile.ZipFile(jar) as archive:
        target = tmp_path / class_name.rsplit("/", 1)[-1]
        target.write_bytes(archive.read(class_name))
    code = subprocess.run(["javap", "-c", "-p", str(target)], check=True, capture_output=True, text=True).stdout
    keys: set[str] = set()
    last_key: str | None = None
    for line in code.splitlines():
        if (constant := re.search(r"// String (spark\.[A-Za-z0-9._]+)$", line)) is not None:
            last_key = constant.group(1)
        elif (call := re.search(r"Method org/apache/spark/sql/internal/SQLConf\$\.(\w+):", line)) is not None:
            if call.group(1) in builders and last_key is not None:
                keys.add(last_key)
            last_key = None
    return keys


def test_the_static_list_matches_the_installed_spark(
    tmp_path: Path, service_missing: Callable[[str], NoReturn]
) -> None:
    if shutil.which("javap") is None:
        service_missing("javap is not installed (apt-get install default-jdk-headless)")
    found: set[str] = set()
    for pattern, class_name, builders in STATIC_CONF_CLASSES:
        jars = sorted(JARS.glob(pattern))
        if not jars:
            service_missing(f"no {pattern} in {JARS}")
        found |= static_confs_in(jars[0], class_name, builders, tmp_path)
    assert found == STATIC_SQL_CONFS


async def test_a_submission_with_a_static_setting_is_a_400_naming_it() -> None:
    graph = {
        "name": "g",
        "vertices": [{"id": "a", "entrypoint": "m:f"}],
        "config": {"spark.sql.shuffle.partitions": "4", "spark.executor.memory": "2g"},
    }
    async with InProcessMaster() as master, aiohttp.ClientSession() as http:
        async with http.post(f"{master.url}/jobs", json=graph) as response:
            body = await response.json()
            assert response.status == 400, body
        assert body["type"] == "InvalidJobGraph"
        assert list(body["field_errors"]) == ["config.spark.executor.memory"]
        assert "spark.executor.memory is a static Spark setting" in body["errors"][0]
        async with http.get(f"{master.url}/jobs") as response:
            assert (await response.json())["jobs"] == []  # nothing was stored
