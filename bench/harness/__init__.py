"""What the benchmarks share, one concern a module.

- `paths`: where the repository, the task code, the results and the venv are.
- `running`: a benchmark's command line (`bench_main`, run options), child environment, scratch directory.
- `reporting`: statistics, the machine and its load, printed tables, bench/results/*.json.
- `processes`: children, descendants, CPU seconds, memory and command lines from /proc; stopping processes.
- `graphs`: chain graphs and the sales pipeline of dags/pipelines.
- `rest`: blocking calls to one master's REST endpoint.
- `clusters`: masters and TaskExecutors as local processes, with ZooKeeper and Redis.
- `standalone`: `sparkdispatch standalone` as a child process.
- `ensemble`: the multi-host cluster on network namespaces, as a benchmark on its bridge sees it.
- `connect_floor`: a warm Spark Connect session doing a cluster's work without it (the floors).
- `profiling`: py-spy recordings and their summaries.
- `flight_recording`: Java Flight Recordings of a JVM, its threads' CPU by name, and their summaries.
"""
