"""A Kubernetes LIST one page at a time: no notice path reads a whole cluster in one answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gpuwarden.domain.errors import KubeError

#: Objects per page: client-go's pager's own default (k8s.io/client-go/tools/pager,
#: ``defaultPageSize = 500``); a 1,000-node cluster's nodes come in 2 answers.
LIST_PAGE = 500
#: A continue token that expired (410 Gone: the list outlived etcd's compaction, 5 min by
#: default) starts the list again, at most this many times.
RESTARTS = 2

Query = Sequence[tuple[str, str]]
T = TypeVar("T")


def list_all(
    get: Callable[[Query], dict[str, Any]],
    convert: Callable[[dict[str, Any]], T],
    query: Query = (),
    keep: Callable[[T], bool] | None = None,
) -> list[T]:
    """Every item of a LIST, each through ``convert``, read page by page: ``get`` answers one GET
    of the collection with the query it is given; ``limit`` = `LIST_PAGE` and the previous
    answer's ``metadata.continue`` are added until an answer has none (docs/architecture.md,
    "Lists"). A page's JSON is dropped once converted. A server that ignores ``limit`` answers
    everything at once, with no continue: one page. An expired token starts the list again
    (what was read is dropped: one list, never one with duplicates). With ``keep``, only the items
    it answers True for are kept: the others are dropped with their page (a cluster's pods read
    for the few that carry something, in the memory of one page)."""
    items: list[T] = []
    token, restarts = "", 0
    while True:
        paging = [("limit", str(LIST_PAGE))] + ([("continue", token)] if token else [])
        try:
            answer = get([*query, *paging])
        except KubeError as err:
            if err.status != 410 or not token or restarts >= RESTARTS:
                raise
            items, token, restarts = [], "", restarts + 1
            continue
        converted = (convert(item) for item in answer.get("items") or [])
        items.extend(converted if keep is None else (item for item in converted if keep(item)))
        token = str((answer.get("metadata") or {}).get("continue") or "")
        if not token:
            return items
