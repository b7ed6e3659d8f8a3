"""Opt-in payload templates (`payloadTemplate: true`): checked at create time, rendered by the worker."""

from __future__ import annotations

import msgspec

from schemas.messages import JobDefinition
from tickwheel.core.templating import TemplateError, check_template
from tickwheel.errors import InvalidInput


def check_payload_template(definition: JobDefinition) -> None:
    """422 naming the string at fault unless a templated payload is JSON whose placeholders all parse."""
    if not definition.payload_template:
        return
    if definition.payload_encoding != "json":
        raise InvalidInput("payloadTemplate needs a JSON payload (not payloadBase64)", field="payloadTemplate")
    if not definition.payload:
        return
    try:
        check_template(msgspec.json.decode(definition.payload))
    except TemplateError as exc:
        raise InvalidInput(exc.message, field=exc.path) from None
