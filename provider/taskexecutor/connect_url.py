"""The address of a TaskExecutor's Spark Connect server with its token: `sc://localhost:<port>/;token=<token>`.

The server takes only calls that carry its token (`spark.connect.authenticate.token`, a random one
per server start), as a gRPC `Authorization: Bearer` header. Its URL is how the TaskExecutor hands
both to whoever calls the server: pyspark's Connect client reads the `token` parameter, and sends it
without TLS only to the host `localhost` (over a channel gRPC checks is local), hence that host
name. Such a URL is a credential: logs get `shown(url)`, which leaves the token out.
"""

from __future__ import annotations

#: The Spark property the server reads its token from.
TOKEN_PROPERTY = "spark.connect.authenticate.token"
_TOKEN_PARAM = "token"


def server_url(port: int, token: str) -> str:
    """The URL of the server listening on loopback port `port` with `token`."""
    return f"sc://localhost:{port}/;{_TOKEN_PARAM}={token}"


def with_parameters(url: str, **parameters: str) -> str:
    """`url` with more `;key=value` parameters (a session id, a user id)."""
    extra = ";".join(f"{key}={value}" for key, value in parameters.items())
    if "/;" in url:
        return f"{url.rstrip(';')};{extra}"
    return f"{url.rstrip('/')}/;{extra}"


def grpc_target(url: str) -> str:
    """`host:port` of `url`, for a gRPC channel."""
    return url.removeprefix("sc://").split("/", 1)[0]


def token_of(url: str) -> str | None:
    """The token `url` carries, None without one."""
    _, _, parameters = url.partition("/;")
    for parameter in parameters.split(";"):
        key, _, value = parameter.partition("=")
        if key == _TOKEN_PARAM:
            return value
    return None


def call_metadata(url: str) -> tuple[tuple[str, str], ...]:
    """The gRPC metadata that authenticates a raw call to the server at `url`."""
    token = token_of(url)
    return () if token is None else (("authorization", f"Bearer {token}"),)


def shown(url: str) -> str:
    """`url` as a log line may show it: without its token."""
    return url.partition("/;")[0]
