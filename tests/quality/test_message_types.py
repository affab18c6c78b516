"""The typed view of the messages: kbroker/protocol/message_types.pyi is what ``python -m kbroker.protocol.typegen``
writes from the schemas (so it cannot drift from the codecs), and with it mypy refuses a handler that misreads its
request, misspells an answer key or registers for another API's request."""
from __future__ import annotations

import sys
import uuid
from pathlib import Path

from kbroker.protocol import APIS, message_types, typegen
from kbroker.protocol.typed_api import TypedApi, constant_name
from tests.quality.helpers import REPO, report, run_tool


def test_the_committed_stub_is_what_the_generator_writes() -> None:
    assert typegen.STUB.read_text() == typegen.render(), (
        "kbroker/protocol/message_types.pyi differs from the schemas: run .venv/bin/python -m kbroker.protocol.typegen")


def test_the_names_the_stub_declares_exist_at_run_time() -> None:
    for api in APIS.values():
        assert getattr(message_types, api.request.__name__) is api.request
        typed = getattr(message_types, constant_name(api))
        assert isinstance(typed, TypedApi) and (typed.key, typed.name) == (api.key, api.name)
    assert message_types.FetchRequest.FetchTopic.FetchPartition is APIS[1].request.FetchTopic.FetchPartition
    assert message_types.ProduceResponse_PartitionResponse(index=1, error_code=0) == {"index": 1, "error_code": 0}


# Handlers with five mistakes mypy must find; each line that should fail says which error code it expects.
PLANTED = '''\
from __future__ import annotations

from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import ClientConnection, handles
from kbroker.protocol import message_types as msg
from kbroker.protocol.header import RequestHeader


@handles(msg.PRODUCE)
def produce(ctx: BrokerContext, header: RequestHeader, request: msg.ProduceRequest,
            conn: ClientConnection) -> msg.ProduceResponse:
    topic = request.topic_data[0]
    count: int = topic.name  # expect: assignment
    for data in topic.partition_dataa:  # expect: attr-defined
        count += data.index
    forgot: msg.ProduceResponse_PartitionResponse = {"index": 0, "base_offset": 0}  # expect: typeddict-item
    return {"responses": [], "responsez": [forgot], "throttle_time_ms": count}  # expect: typeddict-unknown-key


@handles(msg.FETCH)  # expect: arg-type
def fetch(ctx: BrokerContext, header: RequestHeader, request: msg.ProduceRequest,
          conn: ClientConnection) -> msg.FetchResponse:
    return {"throttle_time_ms": 0, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 0}]}]}
'''


def test_mypy_refuses_a_misread_request_a_misspelt_answer_and_the_wrong_api(tmp_path: Path) -> None:
    # a module name of its own each run: mypy replays a cached module's errors (with the old path) when its text
    # is unchanged
    planted = tmp_path / f"planted_handler_{uuid.uuid4().hex}.py"
    planted.write_text(PLANTED)
    expected = {(number, line.split("# expect: ")[1])
                for number, line in enumerate(PLANTED.splitlines(), 1) if "# expect: " in line}
    proc = run_tool([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
                     str(planted)], cwd=REPO, env={"MYPYPATH": str(REPO)}, timeout=600)
    found = set()
    for line in proc.stdout.splitlines():
        if line.startswith(str(planted)) and ": error: " in line and line.endswith("]"):
            found.add((int(line.split(":")[1]), line.rsplit("[", 1)[1][:-1]))
    assert found == expected, "mypy should report exactly the planted errors, " + report(proc)
