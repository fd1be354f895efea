"""The three patch types: JSON merge (RFC 7386), JSON patch (RFC 6902), strategic merge.

Strategic merge follows the Kubernetes patch strategies for the list fields this simulator
cares about (``MERGE_KEYS``); any other list is replaced, as for lists without a patch
strategy (``spec.taints`` and ``spec.tolerations`` are atomic in the real schema too).
Directives supported: ``$patch: delete|replace|merge`` inside maps and list items,
``$deleteFromPrimitiveList/<field>``, ``$setElementOrder/<field>`` (ignored), ``$retainKeys``.
"""

from __future__ import annotations

from typing import Any

from sim.apiserver.jsondoc import clone


class PatchError(Exception):
    """The patch cannot be applied (answered as 422 or 400 by the server)."""


# Path (list fields' names joined by ".", list indices dropped) -> merge key. A value of ""
# means a list of primitives merged as a set.
MERGE_KEYS: dict[str, str] = {
    "metadata.finalizers": "",
    "metadata.ownerReferences": "uid",
    "spec.containers": "name",
    "spec.initContainers": "name",
    "spec.ephemeralContainers": "name",
    "spec.containers.env": "name",
    "spec.initContainers.env": "name",
    "spec.containers.ports": "containerPort",
    "spec.containers.volumeMounts": "mountPath",
    "spec.volumes": "name",
    "spec.imagePullSecrets": "name",
    "status.conditions": "type",
    "status.addresses": "type",
    "spec.template.spec.containers": "name",
    "spec.template.spec.initContainers": "name",
    "spec.template.spec.volumes": "name",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------- RFC 6902


def _decode_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"invalid JSON pointer {pointer!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def _index(container: list[Any], token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:  # noqa: S105 - a JSON pointer token, not a secret
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    idx = int(token)
    if idx > len(container) or (idx == len(container) and not allow_end):
        raise PatchError(f"array index {idx} out of bounds")
    return idx


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict):
            if token not in cur:
                raise PatchError(f"doc is missing path: /{'/'.join(tokens)}")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, False)]
        else:
            raise PatchError(f"doc is missing path: /{'/'.join(tokens)}")
    return cur


def _get(doc: Any, pointer: str) -> Any:
    tokens = _decode_pointer(pointer)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"doc is missing path: {pointer}")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, False)]
    raise PatchError(f"doc is missing path: {pointer}")


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _decode_pointer(pointer)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], True), value)
    else:
        raise PatchError(f"doc is missing path: {pointer}")
    return doc


def _remove(doc: Any, pointer: str) -> Any:
    tokens = _decode_pointer(pointer)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise PatchError(f"unable to remove nonexistent key: {tokens[-1]}: missing value")
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], False)]
    else:
        raise PatchError(f"doc is missing path: {pointer}")
    return doc


def _one_op(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    path = op.get("path")
    if not isinstance(path, str):
        raise PatchError("missing path")
    if kind == "add":
        return _add(doc, path, clone(op["value"]))
    if kind == "remove":
        return _remove(doc, path)
    if kind == "replace":
        _get(doc, path)
        doc = _remove(doc, path) if _decode_pointer(path) else doc
        return _add(doc, path, clone(op["value"]))
    if kind in ("move", "copy"):
        value = clone(_get(doc, str(op.get("from"))))
        if kind == "move":
            doc = _remove(doc, str(op.get("from")))
        return _add(doc, path, value)
    if kind == "test":
        if _get(doc, path) != op.get("value"):
            raise PatchError(f"testing value {path} failed: test failed")
        return doc
    raise PatchError(f"Unexpected kind: {kind}")


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("json patch must be a list of operations")
    result = clone(doc)
    for op in ops:
        if not isinstance(op, dict):
            raise PatchError("json patch operation must be an object")
        try:
            result = _one_op(result, op)
        except KeyError as exc:
            raise PatchError(f"missing {exc.args[0]} in operation") from exc
    return result


# ---------------------------------------------------------------- strategic merge


def strategic_merge_patch(target: Any, patch: Any, path: str = "") -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    if patch.get("$patch") == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$"):
            _directive(result, key, value)
            continue
        sub = f"{path}.{key}" if path else key
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and sub in MERGE_KEYS:
            result[key] = _merge_list(result.get(key) or [], value, MERGE_KEYS[sub], sub)
        else:
            merged = strategic_merge_patch(result.get(key), value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _directive(result: dict[str, Any], key: str, value: Any) -> None:
    """``$deleteFromPrimitiveList/<field>``; ``$setElementOrder``, ``$patch``, ``$retainKeys``
    need nothing here."""
    if key.startswith("$deleteFromPrimitiveList/"):
        name = key.split("/", 1)[1]
        result[name] = [v for v in result.get(name) or [] if v not in value]


def _merge_list(current: list[Any], patch: list[Any], key: str, path: str) -> list[Any]:
    if not key:  # set of primitives
        merged = list(current)
        merged += [v for v in patch if v not in merged]
        return merged
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [clone(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    result = [clone(i) for i in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}")
        idx = next((i for i, cur in enumerate(result) if isinstance(cur, dict) and cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del result[idx]
        elif idx is None:
            result.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            result[idx] = strategic_merge_patch(result[idx], item, path)
    return result
