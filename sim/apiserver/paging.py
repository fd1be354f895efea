"""A LIST's `limit` and `continue`, as kube-apiserver answers them.

The real server (k8s.io/apiserver, storage/etcd3 `store.GetList`) reads at most ``limit`` objects
in key order from the key after the last one returned, and when more remain answers
``metadata.continue`` — an opaque token, base64 of ``{"v":"meta.k8s.io/v1","rv":…,"start":"<key>\\x00"}``
(`storage.EncodeContinue`) — and, for an unfiltered list, ``metadata.remainingItemCount``. A
token it cannot decode is a 400 ("continue key is not valid"). ``limit`` absent or 0: the whole
list. The one difference: the real server reads every page at the first page's resourceVersion
(a snapshot, 410 Gone once compacted); this store has no history, so a later page reads the
objects as they are then (an object created behind the cursor is missed, as it would be by a
list taken a moment earlier).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from sim.apiserver import errors

BucketKey = tuple[str, str]  # (namespace, name): the store's key order
_VERSION = "meta.k8s.io/v1"


@dataclass
class Page:
    """One page of a list: call it on the selected keys (in order) to cut them."""

    limit: int
    after: BucketKey | None = None
    #: after the cut: the last key returned when more remain (None: the list is complete)
    last: BucketKey | None = None
    remaining: int = 0

    def __call__(self, keys: list[BucketKey]) -> list[BucketKey]:
        start = 0 if self.after is None else next((i for i, k in enumerate(keys) if k > self.after), len(keys))
        cut = keys[start : start + self.limit]
        self.remaining = len(keys) - start - len(cut)
        self.last = cut[-1] if cut and self.remaining > 0 else None
        return cut


def page_of(limit: str | None, token: str | None) -> Page | None:
    """The page a request asks for; None for the whole list."""
    try:
        size = int(limit) if limit else 0
    except ValueError:
        raise errors.bad_request(f"invalid limit {limit!r}") from None
    after = _decode(token) if token else None
    if size <= 0:
        if after is not None:  # a continue without a limit reads the rest
            return Page(limit=1 << 62, after=after)
        return None
    return Page(limit=size, after=after)


def continue_metadata(page: Page | None, rv: str, filtered: bool) -> dict[str, object]:
    """The list's metadata beside its resourceVersion: ``continue`` (+ ``remainingItemCount``)."""
    if page is None or page.last is None:
        return {}
    start = f"{page.last[0]}/{page.last[1]}" if page.last[0] else page.last[1]
    raw = json.dumps({"v": _VERSION, "rv": int(rv), "start": start + "\x00"}, separators=(",", ":"))
    meta: dict[str, object] = {"continue": base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")}
    if not filtered:
        meta["remainingItemCount"] = page.remaining
    return meta


def _decode(token: str) -> BucketKey:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        start = str(raw["start"]).rstrip("\x00")
        if raw.get("v") != _VERSION or not start:
            raise ValueError(start)
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise errors.bad_request("continue key is not valid") from None
    namespace, _, name = start.rpartition("/")
    return (namespace, name)
