"""Run files that outlive the machine: a mirror of the run directory under a storage URI.

The run is written to its local directory as always; with ``storage.uri`` (``--storage``) the
files that matter are copied under the URI (a local path, ``s3://``, ``gs://``: anything
``pyarrow.fs`` opens, as Ray Train's ``storage_path``): config and placement at the start,
each checkpoint as it is written (old ones removed as locally), metrics and TensorBoard
events with every checkpoint, and ``summary.json`` last. Every upload is atomic: an object
store publishes a whole object or none, and on a filesystem a temporary file is renamed into
place. ``distrl train --resume URI`` fetches the run from there, on any machine, and goes on
mirroring to the same URI.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from distrl.common.checkpoint import CheckpointError, checkpoint_dir, list_checkpoints

RUN_FILES = ("config.yaml", "placement.json", "metrics.jsonl", "setup.txt")
TENSORBOARD_GLOB = "events.out.tfevents.*"


class StorageError(Exception):
    """A storage URI that cannot be opened or written."""


def is_uri(text: str) -> bool:
    return "://" in str(text)


class RunStorage:
    def __init__(self, uri: str):
        import pyarrow.fs as pafs

        self.uri = str(uri).rstrip("/")
        try:
            self.fs, self.root = pafs.FileSystem.from_uri(self.uri)
        except Exception as exc:  # unknown scheme, unreachable bucket, no credentials...
            raise StorageError(f"storage.uri={self.uri!r}: cannot open it: {_first_line(exc)}") from None
        self.local = self.fs.type_name == "local"

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}" if relative else self.root

    def check_writable(self) -> None:
        """Write and remove a probe object now, so a bad URI or missing permission is found before Ray starts."""
        probe = f".distrl-probe-{uuid.uuid4().hex[:8]}"
        try:
            self.put_bytes(b"", probe)
            self.fs.delete_file(self._path(probe))
        except Exception as exc:
            raise StorageError(f"storage.uri={self.uri!r}: cannot write there: {_first_line(exc)}") from None

    # --- writing -------------------------------------------------------------------------
    def put_bytes(self, data: bytes, relative: str) -> None:
        """Publish ``data`` at ``relative`` whole or not at all."""
        final = self._path(relative)
        parent = final.rsplit("/", 1)[0]
        if self.local:
            self.fs.create_dir(parent, recursive=True)
            tmp = f"{parent}/.tmp-{uuid.uuid4().hex[:8]}"
            stream = self.fs.open_output_stream(tmp)
            stream.write(data)
            stream.close()
            self.fs.move(tmp, final)
        else:  # one PUT of the whole object: readers see the old object or the new one
            stream = self.fs.open_output_stream(final)
            stream.write(data)
            stream.close()

    def put(self, local_file: Path, relative: str) -> None:
        self.put_bytes(Path(local_file).read_bytes(), relative)

    def mirror(self, run_dir: Path, names: tuple[str, ...] = RUN_FILES) -> None:
        """Upload these run files, TensorBoard's event files and the checkpoints; drop checkpoints gone locally."""
        run_dir = Path(run_dir)
        for name in names:
            if (run_dir / name).exists():
                self.put(run_dir / name, name)
        for events in sorted(run_dir.glob(TENSORBOARD_GLOB)):
            self.put(events, events.name)
        local = {p.name for p in list_checkpoints(run_dir)}
        remote = set(self.checkpoint_names())
        for name in sorted(local - remote):
            self.put(checkpoint_dir(run_dir) / name, f"checkpoints/{name}")
        for name in sorted(remote - local):
            self.fs.delete_file(self._path(f"checkpoints/{name}"))

    # --- reading -------------------------------------------------------------------------
    def checkpoint_names(self) -> list[str]:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self._path("checkpoints"), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.base_name.startswith("ckpt_") and i.base_name.endswith(".pt"))

    def fetch_run(self, run_dir: Path) -> None:
        """Download config, metrics, TensorBoard events and every checkpoint into ``run_dir`` (to resume here)."""
        import pyarrow.fs as pafs

        names = self.checkpoint_names()
        if not names:
            raise CheckpointError(f"--resume={self.uri!r}: no checkpoints/ckpt_*.pt under this storage URI")
        run_dir = Path(run_dir)
        checkpoint_dir(run_dir).mkdir(parents=True, exist_ok=True)
        top = self.fs.get_file_info(pafs.FileSelector(self.root))
        wanted = [i.base_name for i in top if i.base_name in RUN_FILES or Path(i.base_name).match(TENSORBOARD_GLOB)]
        for name in wanted + [f"checkpoints/{n}" for n in names]:
            with self.fs.open_input_stream(self._path(name)) as stream:
                data = stream.read()
            tmp = run_dir / f".{Path(name).name}.tmp"
            tmp.write_bytes(data)
            tmp.replace(run_dir / name)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
