"""Helpers for tests, benchmarks and local clusters.

- `master`: `InProcessMaster`, the real master in the test process (HA mode `none`, a free
  loopback port, a temporary storage dir), with a recording TaskExecutor gateway and
  `ScriptedTaskExecutor`s that drive jobs through the master's TaskExecutor endpoints; and
  `MasterForTaskExecutors`, the TaskExecutor routes and a ResourceManager for real TaskExecutors.
- `proxy`: `RecordingProxy`, an HTTP proxy in front of a master that records calls and can
  answer some itself (a gateway's error, a load balancer's redirect).
- `http`: raw `(status, body)` JSON calls to a master on the aiohttp stack.
- `local_cluster`: masters and TaskExecutors as real local processes (`TaskExecutorProcess`: one alone).
- `services`: real ZooKeeper and Redis servers; `contender`, `clock`: HA test helpers; `passes`: vertices
  that count the passes a graph build makes over them; `wheels`: tiny wheels made on the spot, for
  jobs' Python environments with no package index; `chromium`: the browser tests' headless Chromium.
"""
