"""docs/connection.md's examples give what the page says they give.

Every environment variable, `--conn-json` and URI example in the page's code blocks is read the
way Airflow reads it, and `client_settings` must make of it the masters (or the ZooKeeper target)
and the token that the `# → ...` line under it names. The field table must be the connection
form's fields with their labels and defaults, and the quoted messages the code's own.
"""

from __future__ import annotations

import inspect
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from airflow.configuration import retrieve_configuration_description
from airflow.models.connection import Connection as StoredConnection
from airflow.sdk import Connection

from sparkdispatch.client.leader import DEFAULT_PORT, ZooKeeperTarget
from sparkdispatch.errors import ConfigurationError, SparkDispatchError
from sparkdispatch.hooks import SparkDispatchHook
from sparkdispatch.hooks import sparkdispatch as hook_module
from sparkdispatch.hooks.sparkdispatch import client_settings
from sparkdispatch.model.rest_shapes import Overview
from sparkdispatch.operators import (
    SparkDispatchJobSensor,
    SparkDispatchJobGroup,
    SparkDispatchVertexOperator,
    SparkDispatchSubmitJobOperator,
)
from sparkdispatch.operators.decorators import SparkDispatchFunctionOperator
from sparkdispatch.provider_info import get_provider_info
from sparkdispatch.tls import ClientTls

PAGE = Path(__file__).resolve().parents[2] / "docs" / "connection.md"
TEXT = PAGE.read_text(encoding="utf-8")

BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
ENV = re.compile(r"^export (AIRFLOW_CONN_(\w+))='([^']+)'$")
CLI = re.compile(r"^airflow connections add (\w+) --conn-json '([^']+)'$")
RESULT = re.compile(r"^# → (.+)$")
ZOOKEEPER = re.compile(r"ZooKeeper (\S+), cluster (\S+), root (\S+)")
# Keys of a connection's JSON form (`Connection.from_json`) besides the provider's extra fields.
STANDARD_FIELDS = {"conn_type", "description", "host", "login", "password", "schema", "port", "extra"}

CONNECTION_TYPE = get_provider_info()["connection-types"][0]
FORM_FIELDS: dict[str, dict[str, Any]] = CONNECTION_TYPE["conn-fields"]
BEHAVIOUR: dict[str, Any] = CONNECTION_TYPE["ui-field-behaviour"]


@dataclass(frozen=True)
class Example:
    """One connection the page defines: how (`env` or `cli`), its id, its JSON or URI, what it gives."""

    how: str
    variable: str | None
    conn_id: str
    value: str
    expected: dict[str, Any]

    @property
    def is_uri(self) -> bool:
        return not self.value.startswith("{")

    def stored(self) -> StoredConnection:
        """The connection as the CLI and the API server build it (`airflow.models`)."""
        if self.is_uri:
            return StoredConnection(conn_id=self.conn_id, uri=self.value)
        return StoredConnection.from_json(value=self.value, conn_id=self.conn_id)


def _expected(result: str) -> dict[str, Any]:
    """`# → http://a:1, http://b:2; token t; CA f; client certificate c, key k` (all but the first part
    optional) or `# → ZooKeeper q, cluster c, root r; ...` as settings."""
    where, *parts = result.split("; ")
    named = dict(part.split(" ", 1) for part in parts)
    assert set(named) <= {"token", "CA", "client"}, f"docs/connection.md: cannot read {result!r}"
    certificate, _, key = named.get("client", "").removeprefix("certificate ").partition(", key ")
    settings: dict[str, Any] = {
        "token": named.get("token"),
        "tls": ClientTls(ca_file=named.get("CA", ""), certificate=certificate, key=key),
    }
    zookeeper = ZOOKEEPER.fullmatch(where)
    if zookeeper:
        return {"zookeeper": ZooKeeperTarget(*zookeeper.groups()), **settings}
    return {"addresses": where.split(", "), **settings}


def _examples() -> list[Example]:
    examples: list[Example] = []
    for block in BLOCK.findall(TEXT):
        lines = block.splitlines()
        for number, line in enumerate(lines):
            env, cli = ENV.match(line), CLI.match(line)
            if not (env or cli):
                # A connection written in a form this test cannot read would go unchecked.
                assert not re.search(r"AIRFLOW_CONN_|--conn-|sparkdispatch://", line), (
                    f"docs/connection.md: an example this test does not read: {line!r}"
                )
                continue
            result = RESULT.match(lines[number + 1]) if number + 1 < len(lines) else None
            assert result, f"docs/connection.md: no '# → ...' line under {line!r}"
            if env:
                examples.append(
                    Example("env", env.group(1), env.group(2).lower(), env.group(3), _expected(result.group(1)))
                )
            elif cli:
                examples.append(Example("cli", None, cli.group(1), cli.group(2), _expected(result.group(1))))
    return examples


EXAMPLES = _examples()


def _name(example: Example) -> str:
    return f"{example.how}-{'uri' if example.is_uri else 'json'}-{example.conn_id}-{EXAMPLES.index(example)}"


def test_the_page_has_its_examples() -> None:
    kinds = Counter(f"{e.how}-{'uri' if e.is_uri else 'json'}" for e in EXAMPLES)
    assert kinds == {"env-json": 3, "cli-json": 1, "env-uri": 4}
    assert {"zookeeper" in e.expected for e in EXAMPLES} == {True, False}


@pytest.mark.parametrize("example", EXAMPLES, ids=_name)
def test_an_example_gives_what_the_page_says(example: Example, monkeypatch: pytest.MonkeyPatch) -> None:
    if example.variable is not None:
        # A task's way: the hook reads the variable through Airflow's secrets backends.
        monkeypatch.setenv(example.variable, example.value)
        assert client_settings(SparkDispatchHook.get_connection(example.conn_id)) == example.expected
    stored = example.stored()
    assert stored.conn_type == "sparkdispatch"
    assert client_settings(stored) == example.expected
    # The Test button's way: the API server hands the form's values to the hook as a URI.
    tested = Connection(conn_id="sparkdispatch_test", uri=stored.get_uri())  # type: ignore[call-arg]  # the Task SDK's Connection takes uri= at run time, its annotations do not
    assert client_settings(tested) == example.expected


@pytest.mark.parametrize("example", EXAMPLES, ids=_name)
def test_an_example_uses_only_fields_of_the_form(example: Example) -> None:
    if example.is_uri:
        extra_keys = {key for key, _ in parse_qsl(urlsplit(example.value).query)}
    else:
        body = json.loads(example.value)
        assert set(body) <= STANDARD_FIELDS, f"not connection fields: {set(body) - STANDARD_FIELDS}"
        extra_keys = set(body.get("extra", {}))
    assert extra_keys <= set(FORM_FIELDS), f"not extra fields of the form: {extra_keys - set(FORM_FIELDS)}"


def test_the_rejected_uri_is_rejected() -> None:
    found = re.findall(r"unencoded\s+`(sparkdispatch://[^`]+)`\s+is rejected by Airflow\s+\(`([^`]+)`\)", TEXT)
    assert len(found) == 1, "docs/connection.md lost its rejected URI"
    uri, message = found[0]
    with pytest.raises(ValueError, match=re.escape(message)):
        Connection(conn_id="sparkdispatch_default", uri=uri)  # type: ignore[call-arg]  # as above
    with pytest.raises(ValueError, match=re.escape(message)):
        StoredConnection(conn_id="sparkdispatch_default", uri=uri)


def test_the_field_table_is_the_connection_form() -> None:
    section = TEXT[TEXT.index("## Fields") : TEXT.index("## Defining it")]
    rows = {
        name: (label, default)
        for name, label, default in re.findall(
            r"^\| `(\w+)` \| ([^|]+?) \| [^|]+ \| ([^|]+?) \|$", section, re.MULTILINE
        )
    }
    hidden = set(BEHAVIOUR["hidden-fields"])
    assert set(rows) == (STANDARD_FIELDS - {"conn_type", "description", "extra"} - hidden) | set(FORM_FIELDS)
    for name, (label, default) in rows.items():
        if name in FORM_FIELDS:
            assert label == FORM_FIELDS[name]["label"], name
            if "default" in FORM_FIELDS[name]["schema"]:
                assert default == FORM_FIELDS[name]["schema"]["default"], name
        else:
            assert label == BEHAVIOUR["relabeling"].get(name, name.capitalize()), name
    assert rows["port"][1] == str(DEFAULT_PORT)
    assert all(f"{field.capitalize()} is hidden" in TEXT for field in hidden)


def test_the_connection_ids_are_the_codes() -> None:
    assert SparkDispatchHook.default_conn_name == "sparkdispatch_default"
    assert f"Its default id is `{SparkDispatchHook.default_conn_name}`" in TEXT
    for taking in (SparkDispatchSubmitJobOperator, SparkDispatchJobSensor, SparkDispatchJobGroup, SparkDispatchHook):
        parameter = inspect.signature(taking.__init__).parameters["sparkdispatch_conn_id"]
        assert parameter.default == SparkDispatchHook.default_conn_name, taking.__name__
        assert f"`{taking.__name__}`" in TEXT.split("take another one as `sparkdispatch_conn_id`")[0]
    assert "sparkdispatch_conn_id" not in inspect.signature(SparkDispatchVertexOperator.__init__).parameters
    assert "`SparkDispatchVertexOperator` takes no `sparkdispatch_conn_id`" in TEXT
    assert inspect.signature(SparkDispatchFunctionOperator.__init__).parameters["sparkdispatch_conn_id"].default is None
    assert "`@task.sparkdispatch(sparkdispatch_conn_id=...)` names the connection" in TEXT


class _UndecodableExtra(Connection):
    @property
    def extra_dejson(self) -> dict[str, Any]:
        raise ValueError("Expecting value")


@pytest.mark.parametrize(
    "connection",
    [
        Connection(conn_id="sparkdispatch_default", conn_type="sparkdispatch"),
        Connection(conn_id="sparkdispatch_default", conn_type="sparkdispatch", host="master-1:80a"),
        Connection(conn_id="sparkdispatch_default", conn_type="sparkdispatch", host="ftp://master-1"),
        _UndecodableExtra(conn_id="sparkdispatch_default", conn_type="sparkdispatch", host="master-1"),
    ],
    ids=["no-master", "bad-port", "not-an-address", "bad-extra"],
)
def test_the_troubleshooting_messages_are_the_codes(connection: Connection) -> None:
    with pytest.raises(ConfigurationError) as raised:
        client_settings(connection)
    assert f"- `{raised.value}`:" in TEXT


class _FakeClient:
    """Stands in for the hook's blocking client: a leader's `/overview`, or a failure."""

    failure: SparkDispatchError | None = None

    def __init__(self, client: object) -> None:
        self.leader_address = "http://master-2:8081"

    def overview(self) -> Overview:
        if self.failure is not None:
            raise self.failure
        return Overview(
            is_leader=True,
            leader=self.leader_address,
            taskmanagers=3,
            slots_total=12,
            slots_available=9,
            jobs_running=0,
            jobs_finished=0,
            jobs_failed=0,
            jobs_cancelled=0,
        )

    def close(self) -> None:
        pass


def test_the_test_buttons_reports_are_the_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARKDISPATCH_DEFAULT", json.dumps({"conn_type": "sparkdispatch", "host": "master-1,master-2"})
    )
    monkeypatch.setattr(hook_module, "SyncSparkDispatchClient", _FakeClient)
    ok, message = SparkDispatchHook().test_connection()
    assert ok and f"- `{message}`;" in TEXT
    monkeypatch.setattr(_FakeClient, "failure", SparkDispatchError("no sparkdispatch master answers: ..."))
    ok, message = SparkDispatchHook().test_connection()
    assert not ok
    prefix = message.removesuffix("no sparkdispatch master answers: ...")
    assert f"- `{prefix}` and the cause" in TEXT and "`no sparkdispatch master answers: ...`" in TEXT


def test_the_test_button_setting_is_airflows() -> None:
    option = retrieve_configuration_description()["core"]["options"]["test_connection"]
    assert option["default"] == "Disabled"
    assert all(f"{value} -" in option["description"] for value in ("Disabled", "Enabled", "Hidden"))
    assert "`[core] test_connection = Enabled`" in TEXT and "`AIRFLOW__CORE__TEST_CONNECTION=Enabled`" in TEXT
