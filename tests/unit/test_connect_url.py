"""The Connect server's URL carries its token to clients and leaves it out of logs."""

from __future__ import annotations

from sparkdispatch.taskexecutor.connect_url import (
    call_metadata,
    grpc_target,
    server_url,
    shown,
    token_of,
    with_parameters,
)


def test_the_url_names_localhost_so_that_pyspark_sends_the_token_without_tls() -> None:
    url = server_url(15002, "t0k")
    assert url == "sc://localhost:15002/;token=t0k"
    assert grpc_target(url) == "localhost:15002" and token_of(url) == "t0k"
    assert call_metadata(url) == (("authorization", "Bearer t0k"),)


def test_a_url_without_a_token_gives_no_metadata() -> None:
    assert token_of("sc://localhost:15002") is None and call_metadata("sc://localhost:15002/") == ()


def test_parameters_follow_the_token() -> None:
    assert (
        with_parameters(server_url(1, "t"), session_id="s", user_id="u")
        == "sc://localhost:1/;token=t;session_id=s;user_id=u"
    )
    assert with_parameters("sc://localhost:1/", session_id="s") == "sc://localhost:1/;session_id=s"


def test_a_shown_url_has_no_token() -> None:
    assert shown(with_parameters(server_url(1, "secret"), session_id="s")) == "sc://localhost:1"
