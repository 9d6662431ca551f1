"""Mode `none` leadership, leader info encoding, configuration checks and the atomic file helpers."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.errors import ConfigurationError, LeadershipLost
from sparkdispatch.ha import (
    STANDALONE_SESSION_ID,
    LeaderInfo,
    create_ha_services,
    create_leader_retrieval,
)
from sparkdispatch.ha.access import cluster_dir
from sparkdispatch.ha.files import is_temp, json_bytes, link_to, write_atomic, write_temp
from sparkdispatch.ha.leader import StandaloneLeaderElection
from sparkdispatch.ha.zookeeper import ZooKeeperPaths, parse_auth


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def grant_leadership(self, session_id: str) -> None:
        self.calls.append(("grant", session_id))

    def revoke_leadership(self) -> None:
        self.calls.append(("revoke", None))


async def test_standalone_election_grants_a_random_session_on_the_loop_new_at_each_start() -> None:
    election = StandaloneLeaderElection()
    contender = Recorder()
    election.start(contender)
    assert contender.calls == []  # granted on the loop, not inside start()
    await asyncio.sleep(0)  # one turn of the loop
    [(call, session)] = contender.calls
    assert (
        call == "grant" and session is not None and session != STANDALONE_SESSION_ID and uuid.UUID(session).version == 4
    )
    assert election.has_leadership(session) and not election.has_leadership(STANDALONE_SESSION_ID)
    assert election.fence(session, "JobGraph store") == session
    assert election.confirm_leadership(session, "http://127.0.0.1:8081")
    assert not election.confirm_leadership("another", "http://x:1")
    assert election.confirmed == LeaderInfo("http://127.0.0.1:8081", session)
    election.stop()
    assert contender.calls[-1] == ("revoke", None)
    assert not election.has_leadership(session)
    with pytest.raises(LeadershipLost, match="JobGraph store"):
        election.fence(session, "JobGraph store")
    # the next master start (a new election) leads under another session: the old one fences nothing
    restarted, again = StandaloneLeaderElection(), Recorder()
    restarted.start(again)
    await asyncio.sleep(0)
    [(_, new_session)] = again.calls
    assert new_session is not None and new_session != session and not restarted.has_leadership(session)
    with pytest.raises(LeadershipLost):
        restarted.fence(session, "JobGraph store")


async def test_standalone_retrieval_answers_the_configured_address(tmp_path: Path) -> None:
    config = Configuration.from_mapping({"storage.dir": str(tmp_path), "rest.address": "10.0.0.5", "rest.port": "9091"})
    services = create_ha_services(config)
    await services.start()
    retrieval = services.create_retrieval()
    seen: list[LeaderInfo | None] = []
    retrieval.start(seen.append)
    assert seen == [LeaderInfo("http://10.0.0.5:9091", STANDALONE_SESSION_ID)]
    assert retrieval.wait_for_leader(0.1) == seen[0]
    await services.close()


def test_leader_info_round_trips_and_bad_payloads_mean_no_leader() -> None:
    info = LeaderInfo("http://h:1", "5e55")
    assert LeaderInfo.from_bytes(info.to_bytes()) == info
    for bad in (None, b"", b"{", b"[]", b'{"address": "x"}'):
        assert LeaderInfo.from_bytes(bad) is None


def test_auth_and_paths_are_checked() -> None:
    assert parse_auth("") is None
    assert parse_auth("user:pa:ss") == ("user", "pa:ss")
    for bad in ("user", ":pw", "user:"):
        with pytest.raises(ConfigurationError, match="user:password"):
            parse_auth(bad)
    paths = ZooKeeperPaths.from_config(
        Configuration.from_mapping(
            {"high-availability.zookeeper.path.root": "/a/b/", "high-availability.cluster-id": "prod"}
        )
    )
    assert paths.connection_info == "/a/b/prod/leader/connection_info"
    assert paths.jobgraphs == "/a/b/prod/jobgraphs"
    with pytest.raises(ConfigurationError):
        ZooKeeperPaths.from_config(Configuration.from_mapping({"high-availability.zookeeper.path.root": "/"}))


@pytest.mark.parametrize("cluster_id", ["..", "a/b", ".hidden", ""])
def test_cluster_id_must_be_one_safe_path_segment(tmp_path: Path, cluster_id: str) -> None:
    config = Configuration.from_mapping({"storage.dir": str(tmp_path), "high-availability.cluster-id": cluster_id})
    with pytest.raises(ConfigurationError, match="cluster-id"):
        create_ha_services(config)


def test_link_to_never_overwrites_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "entry.json"
    for data, linked in ((b"first", True), (b"second", False)):
        temp = write_temp(target, data)
        assert link_to(temp, target) is linked
        temp.unlink()
    assert target.read_bytes() == b"first"
    write_atomic(target, b"third")
    assert target.read_bytes() == b"third"
    assert [p.name for p in target.parent.iterdir()] == ["entry.json"]
    assert is_temp(tmp_path / "x.json.tmp-abc") and not is_temp(target)


def test_a_follower_in_mode_none_finds_the_configured_address() -> None:
    config = Configuration.from_mapping({"rest.address": "10.0.0.5", "rest.port": "9091"})
    retrieval = create_leader_retrieval(config)
    retrieval.start()
    assert retrieval.current() == LeaderInfo("http://10.0.0.5:9091", STANDALONE_SESSION_ID)
    retrieval.close()
    assert retrieval.current() is None


@pytest.mark.parametrize("mode", ["none", "zookeeper"])
def test_followers_check_the_cluster_id_too(tmp_path: Path, mode: str) -> None:
    config = Configuration.from_mapping(
        {"storage.dir": str(tmp_path), "high-availability.cluster-id": "a/b", "high-availability.mode": mode}
    )
    with pytest.raises(ConfigurationError, match="cluster-id"):
        cluster_dir(config, "blobs")
    if mode == "zookeeper":
        with pytest.raises(ConfigurationError, match="cluster-id"):
            create_leader_retrieval(config)


def test_json_bytes_are_json_dumps_bytes_and_let_other_threads_run_meanwhile() -> None:
    """A large job's archive entry is encoded in a thread: json.dumps's C encoder would hold the GIL
    (and so stop the master's loop) until it is done; json_bytes lets other threads run in between."""
    entry = {
        "subtasks": [
            {"state": "FINISHED", "rows": index, "path": f"/r/{index}", "ok": True} for index in range(100_000)
        ]
    }
    for sort_keys in (False, True):
        assert json_bytes({"b": [1.5, None, "\u00e9"], "a": entry["subtasks"][:3]}, sort_keys=sort_keys) == (
            json.dumps({"b": [1.5, None, "\u00e9"], "a": entry["subtasks"][:3]}, sort_keys=sort_keys).encode()
        )
    turns = 0  # how often another thread got the GIL while the entry was encoded
    encoding = threading.Event()
    encoded = threading.Event()
    out: list[bytes] = []

    def encode() -> None:
        encoding.set()
        out.append(json_bytes(entry))
        encoded.set()

    encoder = threading.Thread(target=encode)
    encoder.start()
    encoding.wait()
    while not encoded.is_set():
        turns += 1
        time.sleep(0)  # gives the GIL back at once: a turn each time the encoder lets go of it
    encoder.join()
    assert out == [json.dumps(entry).encode()]
    assert turns > 20
