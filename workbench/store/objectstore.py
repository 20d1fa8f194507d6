"""Stores whose Parquet files live in object storage: `s3://bucket/prefix/` on AWS S3 or an
S3-compatible server (MinIO, SeaweedFS, Cloudflare R2, ...), with the DuckLake catalog beside it in
PostgreSQL (several nodes) or a local SQLite file (one node).

    open_store("s3://bucket/runs", catalog="postgres:dbname=wb host=db")   # or $WORKBENCH_CATALOG

Where the data path is written (`--store`, $WORKBENCH_STORE, the dashboard, notebooks), an `s3://`
URL selects this; the catalog comes from `catalog=` (the CLI's `workbench --catalog ...`) or
$WORKBENCH_CATALOG: `postgres:<libpq string>`, `postgresql://...`, `sqlite:<file>` or a plain path
to a `.sqlite` file.

Endpoint, region and credentials follow the AWS convention (as boto3 and DuckDB read them):
AWS_ENDPOINT_URL (`http://host:port` for a local server; its scheme sets TLS), AWS_REGION /
AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; plus
WORKBENCH_S3_URL_STYLE (`path` or `vhost`; default `path` when an endpoint is given, as MinIO and
SeaweedFS need, else `vhost` as AWS wants) and WORKBENCH_S3_USE_SSL (`true`/`false`, overriding the
endpoint's scheme). With no key in the environment no secret is made, and a DuckDB secret the user
created (persistent, in DuckDB's secret directory) serves. The keys live only in a temporary secret of
this process's DuckDB connection: never in the catalog, a run's config, a log line, an event or an
error message (`redact` scrubs every message the store raises).

A store on object storage has no store directory, so what a local store keeps beside its data lives
in a local folder (`local_dir`): the SQLite catalog's folder, or $WORKBENCH_LOCAL_DIR (default
`./workbench-local`) with PostgreSQL: run logs, checkpoints, the organism cache, and (SQLite only)
the lock files that keep maintenance away from readers.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from workbench.errors import StoreError

CATALOG_ENV = "WORKBENCH_CATALOG"
"""The catalog of a store on object storage when none is passed."""
LOCAL_DIR_ENV = "WORKBENCH_LOCAL_DIR"
"""The local folder of a store on object storage with a PostgreSQL catalog (run logs, checkpoints)."""
DEFAULT_LOCAL_DIR = "workbench-local"
URL_STYLE_ENV = "WORKBENCH_S3_URL_STYLE"
USE_SSL_ENV = "WORKBENCH_S3_USE_SSL"
SECRET_NAME = "workbench_s3"

_OBJECT_URL = re.compile(r"^s3:/+", re.I)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def is_object_url(spec: object) -> bool:
    """Whether a store spec names object storage: `s3://...` (also as a `Path` has folded it, `s3:/...`)."""
    return isinstance(spec, (str, os.PathLike)) and bool(_OBJECT_URL.match(os.fspath(spec)))


def object_url(spec: str | os.PathLike[str]) -> str:
    """The data path `s3://bucket/prefix/` of a spec; StoreError (one line) for a bad bucket name or a
    path at the bucket's root (DuckLake writes its files under the prefix and lists it: a bucket root
    shared with anything else mixes both, ducklake #255)."""
    rest = _OBJECT_URL.sub("", os.fspath(spec), count=1)
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if not _BUCKET.match(bucket):
        raise StoreError(f"store s3://{rest}: {bucket!r} is not a bucket name (3-63 lower-case letters, digits, "
                         "dots, hyphens)")
    if not prefix:
        raise StoreError(f"store s3://{bucket}: give a prefix under the bucket (s3://{bucket}/workbench/), "
                         "not the bucket's root")
    return f"s3://{bucket}/{prefix}/"


def catalog_url(catalog: str | os.PathLike[str] | None) -> str:
    """The DuckLake catalog string for `catalog` (else $WORKBENCH_CATALOG): `postgres:<libpq>` or
    `sqlite:<absolute file>`. StoreError naming the options when none is given."""
    text = os.fspath(catalog) if catalog is not None else os.environ.get(CATALOG_ENV, "")
    text = text.strip()
    if not text:
        raise StoreError(f"a store on object storage needs a catalog: `workbench --catalog ...` or ${CATALOG_ENV} "
                         "(postgres:<libpq string> or postgresql://... for several nodes, a .sqlite file for one)")
    if text.startswith(("postgresql://", "postgres://")):
        return f"postgres:{text}"
    if text.startswith("postgres:"):
        return text
    path = text[len("sqlite:"):] if text.startswith("sqlite:") else text
    return f"sqlite:{Path(path).expanduser().absolute()}"


def local_dir(spec: str | os.PathLike[str], catalog: str | None = None) -> Path:
    """The local folder of a store spec: the directory itself for a local store; for one on object
    storage, the SQLite catalog's folder, else $WORKBENCH_LOCAL_DIR (default ./workbench-local)."""
    if not is_object_url(spec):
        return Path(spec).expanduser().absolute()
    url = catalog_url(catalog)
    if url.startswith("sqlite:"):
        return Path(url[len("sqlite:"):]).parent
    return Path(os.environ.get(LOCAL_DIR_ENV) or DEFAULT_LOCAL_DIR).expanduser().absolute()


@dataclass(frozen=True)
class S3Settings:
    """What DuckDB's S3 secret needs, read from the environment (never stored; see `redact`)."""

    endpoint: str | None
    region: str | None
    url_style: str
    use_ssl: bool
    key_id: str | None
    secret: str | None = None
    session_token: str | None = None

    def __repr__(self) -> str:  # never print the keys
        return (f"S3Settings(endpoint={self.endpoint!r}, region={self.region!r}, url_style={self.url_style!r}, "
                f"use_ssl={self.use_ssl}, key_id={'set' if self.key_id else None})")


def s3_settings(env: dict[str, str] | None = None) -> S3Settings:
    """The S3 settings in force; StoreError naming the variable when one is malformed."""
    env = dict(os.environ) if env is None else env
    raw = (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "").strip()
    endpoint, use_ssl = None, True
    if raw:
        parts = urlsplit(raw if "://" in raw else f"https://{raw}")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise StoreError(f"AWS_ENDPOINT_URL {raw!r}: expected http://host:port or https://host")
        endpoint, use_ssl = parts.netloc + parts.path.rstrip("/"), parts.scheme == "https"
    style = (env.get(URL_STYLE_ENV) or ("path" if endpoint else "vhost")).strip().lower()
    if style not in ("path", "vhost"):
        raise StoreError(f"{URL_STYLE_ENV} {style!r}: must be 'path' or 'vhost'")
    ssl = env.get(USE_SSL_ENV)
    if ssl is not None and ssl.strip():
        if ssl.strip().lower() not in ("true", "false", "1", "0"):
            raise StoreError(f"{USE_SSL_ENV} {ssl!r}: must be true or false")
        use_ssl = ssl.strip().lower() in ("true", "1")
    region = (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "").strip() or None
    key, secret = env.get("AWS_ACCESS_KEY_ID") or None, env.get("AWS_SECRET_ACCESS_KEY") or None
    if bool(key) != bool(secret):
        raise StoreError("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both or neither")
    return S3Settings(endpoint, region, style, use_ssl, key, secret, env.get("AWS_SESSION_TOKEN") or None)


THREADS_ENV = "WORKBENCH_S3_THREADS"
"""DuckDB threads of a store handle on object storage whose caller gave none (the dashboard, notebooks,
the CLI; the engine's writer keeps its one). DuckDB 1.5 fetches each part of a Parquet file with a
blocking request on the thread that scans it, so a query waiting on a distant server has as many
requests in flight as threads; unset, DuckDB's default (one per core). Against a local S3 server on
2 cores, 8 threads made first reads no faster and cold pages slower (docs/object-storage.md,
"Threads"): raise it for a server far away, measured."""


def s3_threads(env: dict[str, str] | None = None) -> int | None:
    """The DuckDB threads of a store handle on object storage: $WORKBENCH_S3_THREADS (1-64), else None
    (DuckDB's default); StoreError naming the variable when it is malformed."""
    raw = (os.environ if env is None else env).get(THREADS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 64:
        raise StoreError(f"{THREADS_ENV} {raw!r}: must be an integer from 1 to 64")
    return int(raw)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def configure_s3(con: object, data_path: str, settings: S3Settings | None = None, *,
                 name: str = SECRET_NAME) -> None:
    """Load httpfs into `con` and make a temporary S3 secret (this connection only, in memory)
    scoped to the store's bucket, from `settings` (default: the environment). Without keys in the
    environment no secret is made: a DuckDB secret the user created serves (persistent secrets load
    from DuckDB's secret directory) with its own endpoint and style, and the environment's endpoint,
    region, style and TLS go into DuckDB's `s3_*` settings, used where no secret matches."""
    from workbench.store.extensions import load_extension

    settings = settings or s3_settings()
    load_extension(con, "httpfs")  # type: ignore[arg-type]
    bucket = data_path.split("/")[2]
    if settings.key_id is None:
        for setting, value in (("s3_endpoint", settings.endpoint), ("s3_region", settings.region),
                            ("s3_url_style", settings.url_style), ("s3_use_ssl", settings.use_ssl)):
            if value is not None:
                con.execute(f"SET {setting} = ?", [value])  # type: ignore[attr-defined]
        return
    options = ["TYPE s3", f"SCOPE {_literal(f's3://{bucket}')}", f"URL_STYLE {_literal(settings.url_style)}",
               f"USE_SSL {'true' if settings.use_ssl else 'false'}",
               f"KEY_ID {_literal(settings.key_id)}", f"SECRET {_literal(settings.secret or '')}"]
    if settings.endpoint:
        options.append(f"ENDPOINT {_literal(settings.endpoint)}")
    if settings.region:
        options.append(f"REGION {_literal(settings.region)}")
    if settings.session_token:
        options.append(f"SESSION_TOKEN {_literal(settings.session_token)}")
    con.execute(f"CREATE OR REPLACE TEMPORARY SECRET {name} ({', '.join(options)})")  # type: ignore[attr-defined]


def redact(text: str, env: dict[str, str] | None = None) -> str:
    """`text` with the secret key and session token of the environment (and any
    `SECRET '...'`/`SESSION_TOKEN '...'` clause) replaced by `***`."""
    env = dict(os.environ) if env is None else env
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        value = env.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return re.sub(r"((?:SECRET|SESSION_TOKEN)\s+)'(?:[^']|'')*'", r"\1'***'", text, flags=re.I)
