"""The action ledger: what was done, when and why. Never a correctness crutch (docs/policy.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from gpuwarden.adapters.errors import aws_call

LEDGER_TTL_DAYS = 90


class MemoryLedger:
    """Local runs without GPUWARDEN_STATE_TABLE: the same interface, kept in the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.entries: dict[str, dict[str, Any]] = {}

    def record(self, event_id: str, entry: Mapping[str, Any]) -> None:
        with self._lock:
            current = self.entries.setdefault(event_id, {"duplicates": 0})
            current.update(entry)

    def count_duplicate(self, event_id: str) -> None:
        with self._lock:
            current = self.entries.setdefault(event_id, {"duplicates": 0})
            current["duplicates"] = int(current.get("duplicates", 0)) + 1
            current.setdefault("outcome", "duplicate")  # the first delivery died before recording

    def get(self, event_id: str) -> dict[str, Any] | None:
        with self._lock:
            found = self.entries.get(event_id)
            return dict(found) if found else None


class DynamoLedger:
    """One item per event: pk `event#<id>`, sk `ledger`; duplicates counted with ADD."""

    def __init__(self, table: str, region: str | None = None) -> None:
        self._table_name = table
        self._region = region

    @cached_property
    def _client(self) -> Any:
        from gpuwarden.adapters.sdk import client

        return client("dynamodb", self._region)

    @staticmethod
    def _key(event_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"event#{event_id}"}, "sk": {"S": "ledger"}}

    def record(self, event_id: str, entry: Mapping[str, Any]) -> None:
        names = {f"#f{i}": k for i, k in enumerate(entry)}
        values: dict[str, Any] = {f":v{i}": {"S": str(v)} for i, v in enumerate(entry.values())}
        sets = [f"#f{i} = :v{i}" for i in range(len(entry))]
        names["#u"], names["#x"] = "updated_at", "expires_at"
        values[":u"] = {"S": datetime.now(UTC).isoformat()}
        values[":x"] = {"N": str(int(time.time()) + LEDGER_TTL_DAYS * 86400)}
        sets += ["#u = :u", "#x = :x"]
        with aws_call(f"DynamoDB UpdateItem {self._table_name}"):
            self._client.update_item(
                TableName=self._table_name,
                Key=self._key(event_id),
                UpdateExpression="SET " + ", ".join(sets),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )

    def count_duplicate(self, event_id: str) -> None:
        with aws_call(f"DynamoDB UpdateItem {self._table_name}"):
            self._client.update_item(
                TableName=self._table_name,
                Key=self._key(event_id),
                # the first delivery may have died before recording: the event still ends with an outcome
                UpdateExpression="ADD duplicates :one SET #o = if_not_exists(#o, :dup)",
                ExpressionAttributeNames={"#o": "outcome"},
                ExpressionAttributeValues={":one": {"N": "1"}, ":dup": {"S": "duplicate"}},
            )

    def get(self, event_id: str) -> dict[str, Any] | None:
        with aws_call(f"DynamoDB GetItem {self._table_name}"):
            item = self._client.get_item(TableName=self._table_name, Key=self._key(event_id)).get("Item")
        if not item:
            return None
        return {k: next(iter(v.values())) for k, v in item.items()}
