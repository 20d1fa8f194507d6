"""`StoreHandle`: where a store is, resolved once (at the command line, or from an open `Store`), so that
nothing downstream passes a store beside its folder or guesses one from the other.

    handle = StoreHandle.at("store")                          # a store directory
    handle = StoreHandle.at("s3://bucket/runs", catalog="postgres:dbname=wb")   # object storage
    with handle.open(threads=1) as st: ...                    # st.handle is this handle
    checkpoints = handle.folder() / "runs" / run_id          # this machine's folder for the store

- `spec`: what another process is given for `--store` (the absolute directory, or the `s3://` URL);
- `catalog`: the DuckLake catalog of a store on object storage (None: the directory's own), which a
  child process gets in `$WORKBENCH_CATALOG` (`child_env`);
- `home`: the local folder where runs keep their logs and checkpoints and models are built (the
  directory itself; for object storage, `objectstore.local_dir`); None for a shared catalog opened
  over a data path, which has no folder on this machine (`folder()` then says so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from workbench.errors import StoreError
from workbench.store.objectstore import CATALOG_ENV, catalog_url, is_object_url, local_dir, object_url

if TYPE_CHECKING:
    from workbench.store.store import Store


StoreLike = Union[str, "os.PathLike[str]", "StoreHandle", "Store"]
"""What a function that may open a store accepts: a directory or `s3://` URL, a handle, or an open Store."""


@dataclass(frozen=True)
class StoreHandle:
    """A store's location, its catalog (object storage) and its local folder (see the module docstring)."""

    spec: str
    catalog: str | None = None
    home: Path | None = None

    @classmethod
    def at(cls, where: StoreLike, *, catalog: str | None = None) -> StoreHandle:
        """The handle of a store directory, an `s3://` URL (its catalog from `catalog` or
        $WORKBENCH_CATALOG), an open Store, or a handle (itself)."""
        if isinstance(where, StoreHandle):
            return where
        if not isinstance(where, (str, os.PathLike)):
            return where.handle
        if is_object_url(where):
            cat = catalog_url(catalog)
            return cls(object_url(where), cat, local_dir(where, cat))
        path = Path(where).expanduser().absolute()
        return cls(str(path), None, path)

    @classmethod
    def of_location(cls, location: Any) -> StoreHandle:
        """The handle of an opened store's `Location` (`workbench.store.connection`)."""
        if location.root is not None:
            return cls(str(location.root), None, Path(location.root))
        if location.on_object_storage:
            return cls(location.data_path, location.catalog, local_dir(location.data_path, location.catalog))
        return cls(location.data_path, location.catalog, None)

    @property
    def on_object_storage(self) -> bool:
        return is_object_url(self.spec)

    def folder(self) -> Path:
        """The store's local folder; StoreError when it has none (a shared catalog over a data path)."""
        if self.home is None:
            raise StoreError(f"store {self.spec!r} (catalog {self.catalog!r}) has no local folder for run logs, "
                             "checkpoints and models: open it as a store directory or an s3:// store")
        return self.home

    def child_env(self) -> dict[str, str]:
        """What a child process given `--store spec` needs in its environment on top of this one's."""
        return {CATALOG_ENV: self.catalog} if self.on_object_storage and self.catalog else {}

    def at_home(self, home: str | os.PathLike[str]) -> StoreHandle:
        """This store with `home` as its local folder (a shared catalog over a data path has none)."""
        return replace(self, home=Path(home).expanduser().absolute())

    def open(self, **options: Any) -> Store:
        """Open the store (`open_store`'s options: `read_only`, `threads`, ...); its `handle` is this one."""
        from workbench.store.store import open_store

        if self.catalog is not None and not self.on_object_storage:  # a shared catalog over a data path
            store = open_store(catalog=self.catalog, data_path=self.spec, **options)
        else:
            store = open_store(self.spec, catalog=self.catalog, **options)
        store.handle = self
        return store
