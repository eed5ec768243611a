"""A notebook's order in one fresh interpreter, run by ``test_spark_after_client.py``:
Laminar clients first, Spark second, then clients again while Spark runs.

``python -m tests.spark.spark_after_client SERVERS`` (a live cluster's gRPC
addresses) prints one JSON object: how many of ``FORKS`` launches in PySpark's way
died before exec, and for each case the rows produced and the rows Spark read.

1. A ``Client`` (left open), a ``Producer`` used and closed, another ``Producer``
   and a ``Consumer`` used and left open.
2. ``FORKS`` times what PySpark does to start its JVM: ``subprocess.Popen`` with a
   ``preexec_fn`` (a real fork, so ``pthread_atfork`` handlers run) that then
   execs; with gRPC's fork handlers on, a few percent of these children die of
   SIGABRT before exec (see ``laminar.grpc_fork``), and the first SparkSession
   with them (``JAVA_GATEWAY_EXITED``).
3. A ``local[1]`` SparkSession, which reads the topic written in 1.
4. Spark, then a client: a new topic written by a new ``Producer`` and more records
   by the open one, read through Spark again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

FORKS = 300
"""With gRPC's fork handlers on, 3-5 % of launches died on the project's machine, so
the chance that 300 launches all live is below 1 in 10,000."""


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what PySpark's preexec_fn does


def launches_that_died(count: int) -> int:
    died = 0
    for _ in range(count):
        child = subprocess.Popen(["true"], preexec_fn=ignore_sigint)  # noqa: PLW1509 - the point
        died += child.wait(30) != 0
    return died


def main() -> None:
    servers = sys.argv[1]
    from laminar_client import Client, Consumer, Producer

    from tests.spark.conftest import create_topic, jsonable, make_session, produce, wait_replicated
    from tests.spark.test_reader import read, without_headers

    result: dict[str, Any] = {"forks": FORKS}
    client = Client(servers)
    create_topic(client, "fork-before", 2)
    with Producer(servers, linger_s=0.02) as closed:
        before = produce(closed, "fork-before", 2, 60)
    producer = Producer(servers, linger_s=0.02)
    before += produce(producer, "fork-before", 2, 60)
    consumer: Consumer[bytes, bytes] = Consumer(servers)
    consumer.assign([("fork-before", 0), ("fork-before", 1)])
    consumer.seek_to_beginning()
    consumed = 0
    for _ in consumer.records(timeout_s=10):
        consumed += 1
        if consumed == len(before):
            break
    result["consumed"] = consumed
    wait_replicated(servers, "fork-before", 2, before)
    result["forks_died"] = launches_that_died(FORKS)

    spark = make_session("local[1]", "laminar-spark-after-client", register=True)
    read_rows = {"before": read(spark, servers, subscribe="fork-before")}
    create_topic(client, "fork-after", 1)
    with Producer(servers, linger_s=0.02) as after:
        after_rows = produce(after, "fork-after", 1, 30)
    more = produce(producer, "fork-before", 2, 20)
    wait_replicated(servers, "fork-after", 1, after_rows)
    wait_replicated(servers, "fork-before", 2, before + more)
    read_rows["after"] = read(spark, servers, subscribe="fork-after")
    read_rows["before and more"] = read(spark, servers, subscribe="fork-before")
    spark.stop()
    consumer.close()
    producer.close()
    client.close()

    produced = {"before": before, "after": after_rows, "before and more": before + more}
    result["produced"] = {
        case: jsonable(sorted(without_headers(rows), key=lambda r: (r[3], r[4])))
        for case, rows in produced.items()
    }
    result["read"] = {case: jsonable(rows) for case, rows in read_rows.items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
