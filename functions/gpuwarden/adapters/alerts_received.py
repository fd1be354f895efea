"""The alerts last received, by alert name, in the state table (domain/alerts_received.py): one item
per alert name (pk ``alerts#received``, sk the name), overwritten by each notification, so the
table keeps one bounded record per alert the topic ever carried. Written by the GPU function,
read by `gpuwarden doctor`. Never a correctness crutch: handling does not read it."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

from gpuwarden.adapters.errors import aws_call
from gpuwarden.adapters.ledger import LEDGER_TTL_DAYS
from gpuwarden.domain.alerts_received import ReceivedAlert

PK = "alerts#received"


@cache
def client(region: str | None) -> Any:
    from gpuwarden.adapters.sdk import client

    return client("dynamodb", region)


def remember(table: str, region: str | None, records: Sequence[ReceivedAlert]) -> None:
    for record in records:
        with aws_call(f"DynamoDB PutItem {table}"):
            client(region).put_item(
                TableName=table,
                Item={
                    "pk": {"S": PK},
                    "sk": {"S": record.name},
                    "targets": {"S": json.dumps(list(record.targets))},
                    "received_at": {"S": record.received_at},
                    "expires_at": {"N": str(int(time.time()) + LEDGER_TTL_DAYS * 86400)},
                },
            )


def recall(table: str, region: str | None) -> list[ReceivedAlert]:
    """Every alert name's last notification (a Query of one partition, paged)."""
    out: list[ReceivedAlert] = []
    with aws_call(f"DynamoDB Query {table}"):
        pages = (
            client(region)
            .get_paginator("query")
            .paginate(
                TableName=table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": PK}},
            )
        )
        for page in pages:
            for item in page.get("Items", []):
                targets = json.loads(item.get("targets", {}).get("S", "[]"))
                out.append(ReceivedAlert(item["sk"]["S"], tuple(targets), item.get("received_at", {}).get("S", "")))
    return out
