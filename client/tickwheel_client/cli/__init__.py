"""The `tickwheel jobs|runs|dlq` commands, on top of `tickwheel_client.Client`."""
