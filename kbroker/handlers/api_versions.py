"""ApiVersions (18): what this broker serves, answered before anything else."""
from __future__ import annotations

import re

from kbroker import errors
from kbroker.handlers.context import BrokerContext
from kbroker.handlers.registry import HANDLERS, Answer, ClientConnection, handles
from kbroker.protocol import SUPPORTED_VERSIONS, message_types as msg
from kbroker.protocol.header import RequestHeader

# KIP-511: client software name and version must look like this, else INVALID_REQUEST.
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def advertised() -> list[msg.ApiVersionsResponse_ApiVersion]:
    return [{"api_key": key, "min_version": SUPPORTED_VERSIONS[key][0], "max_version": SUPPORTED_VERSIONS[key][1]}
            for key in sorted(HANDLERS) if key in SUPPORTED_VERSIONS]


@handles(msg.API_VERSIONS)
def api_versions(ctx: BrokerContext, header: RequestHeader, request: msg.ApiVersionsRequest,
                 conn: ClientConnection) -> Answer[msg.ApiVersionsResponse]:
    if header.api_version >= 3 and not (_SOFTWARE.match(request.client_software_name or "")
                                        and _SOFTWARE.match(request.client_software_version or "")):
        return {"error_code": errors.InvalidRequestError.code, "api_keys": advertised()}
    return {"error_code": 0, "api_keys": advertised()}
