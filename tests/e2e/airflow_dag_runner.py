"""Parse the example DAGs and run each with `dag.test()` under the Airflow of the Python running this.

    <venv>/bin/python tests/e2e/airflow_dag_runner.py DAGS_FOLDER DAG_ID... > result.json

Run by tests/e2e/test_airflow_dags.py under the oldest supported Airflow (`.venv-airflow30`), with
`AIRFLOW_HOME` and the `sparkdispatch_default` connection in its environment. Prints one JSON
object: Airflow's version, the DagBag's import errors, and per DAG run its state and its tasks'.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    folder, dag_ids = sys.argv[1], sys.argv[2:]
    import airflow

    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, capture_output=True)
    bag = dag_bag_class()(dag_folder=folder)  # no examples: the caller sets AIRFLOW__CORE__LOAD_EXAMPLES=False
    runs = {}
    for dag_id in dag_ids:
        dag = bag.dags[dag_id]
        for task in dag.tasks:
            if getattr(task, "mode", None) == "reschedule":
                # dag.test() of Airflow 3.0 reads a sensor's first reschedule date as a string and fails its
                # second poke with a TypeError (apache/airflow#58777); a scheduler does not
                task.mode = "poke"
        run = dag.test(run_conf={"rows": 3000})
        runs[dag_id] = {
            "state": str(run.state),
            "tasks": {ti.task_id: str(ti.state) for ti in run.get_task_instances()},
        }
    import_errors = {k: str(v) for k, v in bag.import_errors.items()}
    print(
        json.dumps(
            {"airflow": airflow.__version__, "import_errors": import_errors, "dags": sorted(bag.dags), "runs": runs}
        )
    )
    return 0


def dag_bag_class() -> Any:
    """Airflow's DagBag: in airflow.dag_processing from 3.1 on, in airflow.models before."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef,attr-defined,unused-ignore]
    return DagBag


if __name__ == "__main__":
    sys.exit(main())
