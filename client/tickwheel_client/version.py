"""The client's version: the API document's major.minor (schemas/openapi.yaml info.version), then its own patch."""

VERSION = "1.0.0"
