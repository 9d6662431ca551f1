"""Errors of the HA stores and the blob store."""

from __future__ import annotations

from sparkdispatch.errors.base import SparkDispatchError


class StoreError(SparkDispatchError):
    http_status = 500


class StoreUnavailable(StoreError):
    """A store could not be read or written for now (ZooKeeper connection loss or timeout); a retry may succeed."""

    http_status = 503


class JobResultEntryExists(StoreError):
    http_status = 409


class NoSuchJobResult(StoreError):
    http_status = 404


class BlobError(StoreError):
    http_status = 400


class BlobNotFound(BlobError):
    http_status = 404


class BlobTooLarge(BlobError):
    http_status = 413


class CorruptedBlob(BlobError):
    http_status = 500
