"""``laminar partition recover``: operator actions on one partition."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from laminar_cli.common import EXIT_ERROR, connect, out


def register(commands: Any) -> None:
    partition = commands.add_parser(
        "partition", help="operator actions on one partition (recover from damaged replicas)"
    )
    actions = partition.add_subparsers(dest="action", metavar="ACTION", required=True)
    recover = actions.add_parser(
        "recover",
        help="let the damaged replicas of a partition that cannot elect a leader vote "
        "again with what they hold (acknowledged records they lack are lost)",
        description=(
            "A replica whose storage was found damaged heals from its peers as a "
            "non-voter. When too many replicas of a partition are damaged for it to "
            "elect a leader (all of them with replication factor 1, a majority "
            "otherwise), it stays offline, listed by `laminar cluster status`, until an "
            "operator accepts the loss with this command, like Kafka's unclean leader "
            "election: every damaged replica of the partition votes again with what it "
            "holds, and records acknowledged earlier that the new leader lacks are lost. "
            "Refused while the partition has a leader. Every node that accepted logs it."
        ),
    )
    recover.add_argument("partition", type=_topic_partition, help="TOPIC/PARTITION")
    recover.add_argument(
        "--accept-data-loss",
        action="store_true",
        required=True,
        help="required: acknowledged records may be lost",
    )
    recover.set_defaults(handler=_partition_recover)


def _topic_partition(text: str) -> tuple[str, int]:
    topic, slash, number = text.rpartition("/")
    if not slash or not topic or not number.isdigit():
        raise argparse.ArgumentTypeError(f"expected TOPIC/PARTITION, got {text!r}")
    return topic, int(number)


def _partition_recover(args: argparse.Namespace) -> int:
    topic, partition = args.partition
    with connect(args) as client:
        recovered = client.recover_partition(topic, partition)
    if not recovered:
        print(
            f"laminar: error: no replica of {topic}/{partition} on an alive node is "
            "healing from damaged storage: nothing was changed",
            file=sys.stderr,
        )
        return EXIT_ERROR
    print(
        f"{topic}/{partition}: data loss accepted on {', '.join(recovered)}; its replicas "
        "vote again",
        file=out(),
    )
    return 0
