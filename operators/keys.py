"""Switching a keyed operator's current key, so that one callback can apply many vehicles' results.

Flink calls a keyed function with one key current, and its state handles
read and write that key's state. The diagnosis operator applies the finished
runs of every vehicle from one timer per subtask, so it sets the keyed state
backend's current key to each vehicle in turn and back again. Both of
PyFlink's runtimes allow it (checked in PyFlink 2.3's sources and by
``tests/e2e/test_concurrency.py``):

- thread mode: the function's state handles are views on the Java keyed
  state backend (``pyflink.fn_execution.embedded.state_impl``), whose
  ``setCurrentKey`` takes the key as the operator sees it, a one-field
  ``Row``; the timer service registers and deletes timers for the backend's
  current key too. ``getKeys`` lists the keys that hold a state, which is how
  work in flight at a checkpoint is found again after a restore.
- process mode: the Python ``RemoteKeyedStateBackend`` is the one PyFlink
  itself switches between the elements of a bundle (``set_current_key`` with
  a ``pyflink.common.Row``); it cannot list keys.

Only keys this subtask owns are ever switched to (keys whose events or state
it holds), so the key-group range always matches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyflink.common import Row
from pyflink.datastream.functions import RuntimeContext


class KeySwitch:
    """The current key of a keyed operator's state backend, settable from inside any of its callbacks."""

    def __init__(self, runtime_context: RuntimeContext) -> None:
        # Thread mode's runtime context has a getter; process mode's keeps the backend in an attribute.
        getter = getattr(runtime_context, "get_keyed_state_backend", None)
        backend = getter() if getter is not None else getattr(runtime_context, "_keyed_state_backend", None)
        java = getattr(backend, "_keyed_state_backend", None)
        if java is not None and hasattr(java, "setCurrentKey"):
            from pemja import findClass  # thread mode only: pemja is the embedded interpreter's bridge

            self._java = java
            self._row_class = findClass("org.apache.flink.types.Row")
            self._void = findClass("org.apache.flink.runtime.state.VoidNamespace").INSTANCE
            self._python = None
        elif hasattr(backend, "set_current_key"):
            self._java = None
            self._python = backend
        else:
            raise TypeError(f"cannot switch keys on a {type(backend).__name__}: unknown PyFlink runtime")

    @property
    def can_list_keys(self) -> bool:
        return self._java is not None

    def current(self) -> Any:
        """A handle on the current key, to switch back to (or to keep for the vehicle)."""
        if self._java is not None:
            return self._java.getCurrentKey()
        return self._python.get_current_key()  # type: ignore[union-attr]

    def handle(self, key: str) -> Any:
        """A handle on ``key``, built from its string value."""
        if self._java is not None:
            row = self._row_class.withPositions(1)
            row.setField(0, key)
            return row
        return Row(key)

    def switch(self, handle: Any) -> None:
        if self._java is not None:
            self._java.setCurrentKey(handle)
        else:
            self._python.set_current_key(handle)  # type: ignore[union-attr]

    def keys_with(self, state_name: str) -> Iterator[tuple[str, Any]]:
        """(key, handle) of every key holding ``state_name`` (thread mode only)."""
        if self._java is None:
            raise NotImplementedError("process mode cannot list the keys of a state")
        stream = self._java.getKeys(state_name, self._void)
        try:
            it = stream.iterator()
            found = []
            while it.hasNext():
                found.append(it.next())
        finally:
            stream.close()
        for row in found:
            yield str(row.getField(0)), row
