"""A throw-away local S3 server for stores on object storage (the object-storage tests and `workbench
bench store --data s3`): moto's server (`moto[server]`, the dev extra) on a free loopback port, in
this process's threads. Server mode, not moto's in-process mocks: DuckDB's own HTTP client talks to
it. Its buckets live in this process's memory, so `stop()` then `start()` on the same port (the
outage of the chaos bench) keeps what was written."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from workbench.errors import StoreError

TEST_KEY_ID = "AKIAWORKBENCHTEST"
"""The access key of the local server (moto accepts any key pair)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalS3:
    """moto's S3 server on 127.0.0.1:`port`, with `env` holding the AWS variables that reach it."""

    def __init__(self, secret: str, port: int | None = None) -> None:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:
            raise StoreError("a local S3 server needs moto's server (pip install 'moto[server]', "
                             "part of the dev extra)") from exc
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self._cls = ThreadedMotoServer
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": TEST_KEY_ID,
                    "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "us-east-1"}
        self._server: Any = None

    def start(self) -> None:
        self._server = self._cls(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=TEST_KEY_ID,
                            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")

    def make_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def objects(self, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
        """Every object under `prefix` (Key, Size), paged."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [obj for page in pages for obj in page.get("Contents", [])]


@contextmanager
def environ(values: dict[str, str], *, keep: tuple[str, ...] = ()) -> Iterator[None]:
    """`values` put in os.environ while the block runs; afterwards those variables, and the `keep` ones
    the block may set itself, are as they were (restored, or removed where they were absent)."""
    saved = {key: os.environ.get(key) for key in (*values, *keep)}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def local_s3(bucket: str = "workbench", *, secret: str | None = None,
             set_env: bool = True) -> Iterator[LocalS3]:
    """Start a local S3 server with `bucket`, put its AWS variables in os.environ while the block
    runs (when `set_env`; restored afterwards), stop it on exit."""
    import secrets as _secrets

    server = LocalS3(secret or _secrets.token_hex(16))
    server.start()
    try:
        server.make_bucket(bucket)
        with environ(server.env if set_env else {}):
            yield server
    finally:
        server.stop()
