"""Every message's request class, response shape and typed API name, for the handlers.

What mypy reads is ``message_types.pyi``, which ``python -m kbroker.protocol.typegen`` writes from the same
schemas (tests/quality/test_message_types.py fails when the committed stub differs). This module gives the
same names at run time, at the cost of a dict update:

* ``ProduceRequest`` is the generated request class itself (``kbroker.protocol.ProduceRequest``); its nested
  structs are its attributes (``ProduceRequest.TopicData``), as declared;
* ``ProduceResponse`` and its nested ``ProduceResponse_TopicResponse``, ... are TypedDicts in the stub, and a
  TypedDict is a plain dict at run time;
* ``PRODUCE`` is ``TypedApi(0, "Produce")``, what ``@handles`` takes.
"""
from __future__ import annotations

from typing import Any

from kbroker.protocol.messages import APIS
from kbroker.protocol.typed_api import TypedApi, constant_name


def _names() -> dict[str, Any]:
    names: dict[str, Any] = {}
    for api in APIS.values():
        names[api.request.__name__] = api.request
        top = api.response.__name__
        names[top] = dict
        spec = api.response._spec
        assert spec is not None, "generated classes carry their spec"
        for nested in spec.structs():
            if nested is not spec:
                names[f"{top}_{nested.name}"] = dict
        names[constant_name(api)] = TypedApi(api.key, api.name)
    return names


globals().update(_names())
