"""Named user tokens with roles, the cluster secret, and what each route needs (rest/access.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdispatch.errors import ConfigurationError
from sparkdispatch.rest.access import (
    CLUSTER,
    LEGACY_TOKEN_NAME,
    TOKENS_FILE_CHECK_S,
    Authenticator,
    Principal,
    Role,
    TokensFile,
    cluster_may_call,
    parse_tokens,
    required_role,
)

VIEWER_TOKEN = "viewer-token-0123456789"
SUBMITTER_TOKEN = "submitter-token-0123456789"
TOKENS = f"""# name role token
grafana   viewer     {VIEWER_TOKEN}
ci        submitter  {SUBMITTER_TOKEN}   # the deploy pipeline
"""


def test_a_tokens_file_names_each_token_and_its_role() -> None:
    tokens = parse_tokens(TOKENS, "tokens")
    assert [(t.name, t.role, t.token, t.pools) for t in tokens] == [
        ("grafana", Role.VIEWER, VIEWER_TOKEN, None),
        ("ci", Role.SUBMITTER, SUBMITTER_TOKEN, None),
    ]


def test_a_token_may_be_limited_to_pools() -> None:
    (token,) = parse_tokens(f"team-a submitter {SUBMITTER_TOKEN} pools=team-a,shared.1\n", "tokens")
    assert token.pools == frozenset({"team-a", "shared.1"})
    access = token.principal.pool_access()
    assert access.may_act_in("team-a") and access.may_act_in("shared.1")
    assert not access.may_act_in("default")
    assert parse_tokens(TOKENS, "tokens")[1].principal.pool_access().may_act_in("any-pool")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("ci submitter", "write `<name> <role> <token>` or `<name> <role> <token> pools=<pool>,...` (2 words"),
        ("ops admin 0123456789abcdefgh teams=a", "the fourth word must be `pools=<pool>,...`"),
        ("ops admin 0123456789abcdefgh pools=a,,b", "the fourth word must be `pools=<pool>,...`"),
        ("ops admin 0123456789abcdefgh pools=../x", "the fourth word must be `pools=<pool>,...`"),
        ("ops owner 0123456789abcdefgh", "the role 'owner' is none of viewer, submitter, admin"),
        ("ops cluster 0123456789abcdefgh", "the role 'cluster' is none of viewer, submitter, admin"),
        ("c.i viewer 0123456789abcdefgh", "the name 'c.i' is not 1-64 letters"),
        ("cluster admin 0123456789abcdefgh", "the name 'cluster' is taken"),
        (f"grafana admin {SUBMITTER_TOKEN}x", "line 4: the name 'grafana' is taken"),
        ("ci2 viewer short", "the token of 'ci2' is shorter than 16 characters"),
    ],
)
def test_a_wrong_line_is_refused_with_its_number_and_the_problem(line: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        parse_tokens(TOKENS + line + "\n", "tokens")
    assert "tokens line 4" in str(refused.value) and problem in str(refused.value)


def test_roles_are_ordered_and_the_cluster_is_apart() -> None:
    allowed = {(have, need) for have in Role for need in Role if have.permits(need)}
    assert allowed == {
        (Role.VIEWER, Role.VIEWER),
        (Role.SUBMITTER, Role.VIEWER),
        (Role.SUBMITTER, Role.SUBMITTER),
        (Role.ADMIN, Role.VIEWER),
        (Role.ADMIN, Role.SUBMITTER),
        (Role.ADMIN, Role.ADMIN),
        (Role.CLUSTER, Role.CLUSTER),
    }


@pytest.mark.parametrize(
    ("method", "path", "role", "cluster"),
    [
        ("GET", "/jobs", Role.VIEWER, False),
        ("GET", "/v1/jobs/overview", Role.VIEWER, False),
        ("GET", "/overview", Role.VIEWER, True),
        ("POST", "/jobs", Role.SUBMITTER, False),
        ("PATCH", "/jobs/abc", Role.SUBMITTER, False),
        ("POST", "/jobs/abc/repair", Role.SUBMITTER, False),
        ("POST", "/artifacts", Role.SUBMITTER, False),
        ("GET", "/artifacts/" + "a" * 64, Role.VIEWER, True),
        ("POST", "/taskexecutors", Role.CLUSTER, True),
        ("POST", "/v1/taskexecutors/te-1/heartbeat", Role.CLUSTER, True),
        ("POST", "/jobs/abc/executions/e1/state", Role.CLUSTER, True),
        ("GET", "/jobs/abc/executions/e1/state/x", Role.VIEWER, False),
    ],
)
def test_what_a_call_needs(method: str, path: str, role: Role, cluster: bool) -> None:
    assert required_role(method, path) is role
    assert cluster_may_call(method, path) is cluster


def test_the_authenticator_knows_the_cluster_the_legacy_token_and_the_named_users(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text(TOKENS)
    users = Authenticator(
        legacy_token="legacy-token-0123456789",
        tokens_file=TokensFile(tmp_path / "tokens"),
        cluster_secret="cluster-secret-0123456789",
    )
    assert users.principal("cluster-secret-0123456789") is CLUSTER
    assert users.principal("legacy-token-0123456789") == Principal(LEGACY_TOKEN_NAME, Role.ADMIN)
    assert users.principal(VIEWER_TOKEN) == Principal("grafana", Role.VIEWER)
    assert users.principal(SUBMITTER_TOKEN) == Principal("ci", Role.SUBMITTER)
    for wrong in ("", "x", VIEWER_TOKEN + " ", VIEWER_TOKEN[:-1]):
        assert users.principal(wrong) is None
    assert not users.is_legacy_cluster_token("legacy-token-0123456789")  # a cluster secret is set
    without_secret = Authenticator(legacy_token="legacy-token-0123456789")
    assert without_secret.is_legacy_cluster_token("legacy-token-0123456789")
    with pytest.raises(ConfigurationError, match="cluster.secret must differ from rest.auth.token"):
        Authenticator(legacy_token="same-0123456789abc", cluster_secret="same-0123456789abc")


def test_a_token_removed_from_the_file_is_refused_within_a_second_and_a_broken_file_refuses_all(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    users = Authenticator(tokens_file=TokensFile(path, clock=lambda: now[0]))
    assert users.principal(VIEWER_TOKEN) is not None
    path.write_text(TOKENS.replace("grafana", "#grafana") + "\n")  # a new size: seen as changed
    assert users.principal(VIEWER_TOKEN) is not None  # not looked at again within the second
    now[0] += TOKENS_FILE_CHECK_S
    assert users.principal(VIEWER_TOKEN) is None and users.principal(SUBMITTER_TOKEN) is not None
    path.write_text("ci submitter\n")
    now[0] += TOKENS_FILE_CHECK_S
    assert users.principal(SUBMITTER_TOKEN) is None  # fails closed
    path.write_text(TOKENS)
    now[0] += TOKENS_FILE_CHECK_S
    assert users.principal(SUBMITTER_TOKEN) == Principal("ci", Role.SUBMITTER)
    path.unlink()
    now[0] += TOKENS_FILE_CHECK_S
    assert users.principal(SUBMITTER_TOKEN) is None


def test_a_tokens_file_that_cannot_be_read_at_start_stops_the_master(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="rest.auth.tokens-file .*missing: No such file"):
        TokensFile(tmp_path / "missing")
    (tmp_path / "bad").write_text("ci root 0123456789abcdefgh\n")
    with pytest.raises(ConfigurationError, match="line 1: the role 'root'"):
        TokensFile(tmp_path / "bad")
