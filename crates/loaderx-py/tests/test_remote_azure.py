"""A store in Azure Blob Storage: pushed, then read back, through Azurite
(Microsoft's storage emulator, from npm) started here on loopback.

`cargo xtask test` installs Azurite under ``target/azurite``;
``LOADERX_AZURITE`` names another ``azurite-blob`` executable. Google Cloud
Storage has no emulator on the registries that object_store can talk to
(``gcp-storage-emulator`` from PyPI lacks the XML listing and the ETag
headers object_store's client needs), so GCS is covered by the shared
object_store path the S3 tests exercise."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import loaderx

blob = pytest.importorskip(
    "azure.storage.blob", reason="azure-storage-blob creates the test's container"
)

from remote_servers import free_port  # noqa: E402

# Azurite's documented development account (public, like moto's "test").
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_blob() -> Path | None:
    given = os.environ.get("LOADERX_AZURITE")
    if given:
        return Path(given)
    repo = Path(__file__).resolve().parents[3]
    found = repo / "target" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    return found if found.exists() else None


@pytest.fixture(scope="module")
def azurite() -> Iterator[str]:
    exe = azurite_blob()
    if exe is None:
        pytest.skip("Azurite is not installed (cargo xtask test installs it under target/azurite)")
    port = free_port()
    proc = subprocess.Popen(
        [str(exe), "--blobHost", "127.0.0.1", "--blobPort", str(port)]
        + ["--inMemoryPersistence", "--skipApiVersionCheck", "--silent"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Azurite did not start on port {port}") from None
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        service = blob.BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={endpoint}/{ACCOUNT};"
        )
        service.create_container("data")
        yield endpoint
    finally:
        # Azurite waits for idle keep-alive connections on SIGTERM.
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture()
def options(azurite: str, monkeypatch: Any) -> dict[str, Any]:
    # object_store's emulator mode takes Azurite's address from the environment.
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite)
    return {"azure_storage_use_emulator": True, "timeout": 10, "max_retries": 2}


def test_a_store_pushed_to_azure_reads_back(tmp_path: Path, options: dict[str, Any]) -> None:
    data = np.arange(500 * 12, dtype=np.float32).reshape(500, 12)
    with loaderx.Dense.create(tmp_path / "s", np.float32, (12,), codec="zstd") as w:
        w.append(data[:300])
        w.append(data[300:])
    loaderx.push(tmp_path / "s", "az://data/dense", storage_options=options)
    with loaderx.Dense.open("az://data/dense", storage_options=options) as d:
        assert len(d) == 500
        idx = np.array([499, 0, 250, 17, 17])
        np.testing.assert_array_equal(d[idx], data[idx])
        np.testing.assert_array_equal(d[100:180], data[100:180])
        d.verify()


def test_ragged_records_and_a_changed_blob(tmp_path: Path, options: dict[str, Any]) -> None:
    rows = [np.arange(1 + k % 7, dtype=np.int64) + k for k in range(60)]
    with loaderx.Ragged.create(tmp_path / "r", np.int64, 1, codec="raw") as w:
        w.append(rows)
    loaderx.push(tmp_path / "r", "az://data/ragged", storage_options=options)
    with loaderx.Ragged.open("az://data/ragged", storage_options=options) as r:
        for k in (0, 13, 59):
            np.testing.assert_array_equal(r[k], rows[k])
        # The blob holding the records is replaced under the reader: a read
        # is an error naming it, never other bytes.
        service = blob.BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={os.environ['AZURITE_BLOB_STORAGE_URL']}/{ACCOUNT};"
        )
        container = service.get_container_client("data")
        chunks = [
            (b.name, b.size)
            for b in container.list_blobs(name_starts_with="ragged/")
            if b.name.endswith(".zr") and not b.name.endswith("meta.zr") and b.size > 0
        ]
        assert chunks
        for name, size in chunks:
            container.upload_blob(name, b"\0" * size, overwrite=True)
        with pytest.raises(loaderx.errors.ZrecordError, match="changed since the store was opened"):
            r[[1, 2, 3]]
